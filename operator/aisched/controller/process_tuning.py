"""How the operator's process collects garbage and allocates memory: set once, before it starts.

Both defaults suit short scripts, not a long-lived process that holds tens of thousands of
objects and talks to the API server from a pool of threads.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import sys
from collections.abc import Mapping, Sequence

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
# Python's own allocator (pymalloc) carves small objects out of 1 MiB arenas and gives one back only
# when nothing in it is alive. A TrainingJob of 1.4 MB of JSON (the largest the API server stores)
# is 20-30 MiB of small objects once parsed; the few objects a handler keeps, made while a parse
# was alive, land in its arenas and pin them: 3 arenas a job stayed mapped once the parse was
# freed (48 MiB for 16 jobs, 28 KiB of them alive; after a restart, 2.6 MiB a job measured).
# glibc's malloc gives back every whole free page (4 KiB) of its heap when trimmed: the same 16
# jobs then left nothing behind, 48 left 10 KiB each (benchmarks/tenant_objects.py). The
# interpreter reads this at start-up, so `aisched run` starts itself again with it (below); a value
# the user set is theirs and is kept.
ALLOCATOR_VARIABLE = "PYTHONMALLOC"
SYSTEM_ALLOCATOR = "malloc"
# How often freed heap pages are given back: a trim with little to give takes 0.04 ms, one after a
# page of the largest TrainingJobs was freed 4 ms (35 MiB given back).
TRIM_PERIOD_SECONDS = 1.0


def tune_process() -> None:
    """The collector's threshold and the allocator's arena cap; call before any thread starts."""
    _, *older = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
    if not cap_malloc_arenas(MALLOC_ARENAS) or not fix_mmap_threshold(MMAP_THRESHOLD_BYTES):
        log.debug("the C library has no mallopt; memory is allocated as it allocates")


def restart_argv(environ: Mapping[str, str], argv: Sequence[str]) -> list[str] | None:
    """The command line to start this process again on the system allocator (ARGV as it was
    started, `sys.orig_argv`); None when it runs on the allocator its environment chose."""
    if ALLOCATOR_VARIABLE in environ or not argv:
        return None
    return list(argv)


def use_system_allocator() -> None:
    """Start this process again, the same process id and command line, with PYTHONMALLOC=malloc,
    unless PYTHONMALLOC is set; call first thing, before any thread starts or file is opened."""
    argv = restart_argv(os.environ, sys.orig_argv)
    if argv is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, ALLOCATOR_VARIABLE: SYSTEM_ALLOCATOR})


def trim_heap() -> bool:
    """Give the heap's free pages back to the kernel (glibc's malloc_trim); False where there is none."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    malloc_trim(0)
    return True


async def trim_heap_forever(period_seconds: float = TRIM_PERIOD_SECONDS) -> None:
    """Trim the heap every PERIOD_SECONDS: what a large object's parse left free is given back soon
    after it is freed, whichever handler or list freed it. Ends where the C library cannot trim."""
    if not trim_heap():
        return
    while True:
        await asyncio.sleep(period_seconds)
        trim_heap()


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
