"""The allocator's arena cap, seen in glibc's own account of its heaps (malloc_info).

Each case runs in a fresh interpreter: the cap only holds for threads that first allocate
after it is set, and pytest's own threads may have allocated already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from aisched.controller.process_tuning import restart_argv

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


LARGE_BLOCKS_KEPT_MIB = textwrap.dedent(
    """
    import sys
    from aisched.controller.process_tuning import fix_mmap_threshold
    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
    if sys.argv[1] == "fixed":
        assert fix_mmap_threshold(128 * 1024)
    first = bytearray(8 << 20)  # a list's first page: glibc's own threshold rises past it once freed
    del first
    before = rss_mib()
    pages, kept = [], []
    for _ in range(64):
        pages.append(bytearray(1 << 20))
        kept.append(bytearray(1024))  # what a page leaves behind, above it in the heap
    del pages
    print(rss_mib() - before)
    """
)


def large_blocks_kept_mib(mode: str) -> float:
    run = subprocess.run(
        [sys.executable, "-c", LARGE_BLOCKS_KEPT_MIB, mode], capture_output=True, text=True, check=True
    )
    return float(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_given_back_once_freed_with_the_threshold_fixed() -> None:
    assert large_blocks_kept_mib("default") > 32  # what it is for: freed pages stayed in the heap
    assert large_blocks_kept_mib("fixed") < 8


def test_a_process_starts_itself_again_on_the_system_allocator_unless_one_was_chosen() -> None:
    assert restart_argv({}, ["python", "-m", "aisched.cli", "run"]) == ["python", "-m", "aisched.cli", "run"]
    assert restart_argv({"PYTHONMALLOC": "pymalloc"}, ["python", "-m", "aisched.cli", "run"]) is None
    assert restart_argv({}, []) is None


STARTED_AGAIN = textwrap.dedent(
    """
    import os
    from aisched.controller.process_tuning import use_system_allocator
    print(os.getpid(), os.environ.get("PYTHONMALLOC"), flush=True)
    use_system_allocator()
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="exec on the same process id")
def test_the_process_started_again_is_the_same_process_on_malloc() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONMALLOC"}
    run = subprocess.run(
        [sys.executable, "-c", STARTED_AGAIN], capture_output=True, text=True, check=True, env=environment
    )
    first, second = (line.split() for line in run.stdout.splitlines())
    assert first[1] == "None"
    assert second == [first[0], "malloc"]  # the same pid, once: the second start keeps what the first chose


# A large object's parse (the largest TrainingJob: 460,000 small dicts) with what a handler keeps
# made while it is alive, as the watch handlers do; then the parse freed and the heap trimmed.
PARSE_LEFT_BEHIND_MIB = textwrap.dedent(
    """
    import json
    from aisched.controller.process_tuning import trim_heap
    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
    text = json.dumps({"template": [{} for _ in range(460_000)]})
    trim_heap()
    before = rss_mib()
    kept = []
    for job in range(16):
        parsed = json.loads(text)
        kept.append({"name": f"job-{job}", "replicas": [str(job)] * 8})  # the record, made meanwhile
        del parsed["template"][::2]  # a copy made and dropped, as validation makes one
        kept.append({"queue": f"queue-{job}"})
        del parsed
    assert trim_heap()
    print(rss_mib() - before)
    """
)


def parse_left_behind_mib(allocator: str) -> float:
    environment = {**os.environ, "PYTHONMALLOC": allocator}
    run = subprocess.run(
        [sys.executable, "-c", PARSE_LEFT_BEHIND_MIB], capture_output=True, text=True, check=True, env=environment
    )
    return float(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_parse_of_a_large_object_is_given_back_on_the_system_allocator() -> None:
    assert parse_left_behind_mib("pymalloc") > 8  # what it is for: what was kept pinned the parse's arenas
    assert parse_left_behind_mib("malloc") < 2
