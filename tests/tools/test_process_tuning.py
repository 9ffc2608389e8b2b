"""The allocator's arena cap, seen in glibc's own account of its heaps (malloc_info).

Each case runs in a fresh interpreter: the cap only holds for threads that first allocate
after it is set, and pytest's own threads may have allocated already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

THREADS = 8
HEAPS_SEEN_BY_GLIBC = textwrap.dedent(
    f"""
    import ctypes, sys, tempfile, threading
    from aisched.controller.process_tuning import cap_malloc_arenas
    if sys.argv[1] == "capped":
        assert cap_malloc_arenas(2)
    start = threading.Barrier({THREADS})
    def allocate():
        start.wait()  # all at once: glibc hands each new allocating thread an arena while it may
        kept = [bytearray(4096) for _ in range(2000)]
        del kept
    threads = [threading.Thread(target=allocate) for _ in range({THREADS})]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.fclose.argtypes = (ctypes.c_void_p,)
    with tempfile.NamedTemporaryFile(suffix=".xml") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(open(report.name).read().count("<heap nr="))
    """
)


def heaps(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", HEAPS_SEEN_BY_GLIBC, mode], capture_output=True, text=True, check=True)
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_info")
def test_threads_share_at_most_two_malloc_arenas_once_capped() -> None:
    assert heaps("uncapped") > 2  # what the cap is for: by default, new threads get arenas of their own
    assert heaps("capped") <= 2
