"""How the operator's process collects garbage and allocates memory: set once, before it starts.

Both defaults suit short scripts, not a long-lived process that holds tens of thousands of
objects and talks to the API server from a pool of threads.
"""

from __future__ import annotations

import ctypes
import gc
import logging

log = logging.getLogger(__name__)

# The collector's youngest generation is collected after this many new container objects (Python's
# default: 700). A scheduling cycle over thousands of jobs makes millions: at 700, it ran hundreds
# of young collections a cycle, whose survivors soon set off full collections over the whole heap
# (0.3 s each with 10,000 jobs). Objects freed by reference counting, nearly all, are unaffected;
# only garbage in reference cycles waits a little longer.
GC_YOUNG_THRESHOLD = 10_000
# glibc gives a thread that allocates while the others' arenas are busy an arena of its own, up
# to eight per core, and an arena's free memory serves only its own threads. The API client's
# threads decode every response, so a burst of writes left free memory stranded in a dozen
# arenas. Two: the event loop's and one shared by the API threads, who mostly wait on sockets.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number for the arena cap (glibc's malloc.h)
# Blocks from this size up are mapped for themselves and unmapped when freed. glibc's own
# threshold starts at 128 KiB but rises to the largest block freed (up to 32 MiB): after the
# first list page (MiBs of JSON, item arrays of 100,000s) every later one came from the heap,
# whose free memory stays the process's. Fixed, the pages of a restart's first list of the
# largest TrainingJobs left 26 MiB fewer behind per 16 (benchmarks/tenant_objects.py).
MMAP_THRESHOLD_BYTES = 128 * 1024
_M_MMAP_THRESHOLD = -3


def tune_process() -> None:
    """The collector's threshold and the allocator's arena cap; call before any thread starts."""
    _, *older = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
    if not cap_malloc_arenas(MALLOC_ARENAS) or not fix_mmap_threshold(MMAP_THRESHOLD_BYTES):
        log.debug("the C library has no mallopt; memory is allocated as it allocates")


def fix_mmap_threshold(size: int) -> bool:
    """Blocks of SIZE bytes and more mapped apart and given back when freed (glibc); False elsewhere."""
    return _mallopt(_M_MMAP_THRESHOLD, size)


def cap_malloc_arenas(arenas: int) -> bool:
    """At most ARENAS malloc arenas from now on (glibc); False where the C library has no such cap."""
    return _mallopt(_M_ARENA_MAX, arenas)


def _mallopt(parameter: int, value: int) -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter is linked with
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(parameter, value))
