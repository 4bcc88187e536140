import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")

# Allocates 200 blocks of 1 MiB with a small block kept after each (as a model load leaves
# its objects between its temporary buffers), frees the large blocks, and prints how much of
# them is still resident, in MiB.
PROGRAM = textwrap.dedent("""
    import sys
    from serving.heap import large_blocks_mapped, resident_mib

    def held_after_free(mapped):
        kept, large = [], []
        before = resident_mib()
        with large_blocks_mapped() if mapped else open("/dev/null"):
            for _ in range(200):
                block = bytearray(1 << 20)
                block[::4096] = bytes(256)  # touch every page: resident
                large.append(block)
                kept.append(bytearray(256))
            del large
        return resident_mib() - before

    print(held_after_free(sys.argv[1] == "mapped"))
""")


def held_mib(mode):
    # The threshold glibc's adaptive one reaches while serving, as after a load.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(32 << 20))
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(result.stdout)


def test_large_blocks_allocated_during_a_load_are_returned_when_freed():
    assert held_mib("heap") >= 150  # on the heap, pinned by the small blocks
    assert held_mib("mapped") <= 20


# Eight threads allocate at once (each waits for all, so none can reuse another's arena), then
# glibc's malloc_stats prints one "Arena N:" block per arena to stderr.
ARENAS_PROGRAM = textwrap.dedent("""
    import ctypes, os, sys, threading
    from serving.heap import limit_arenas
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one usable core
    if sys.argv[1] == "limited":
        limit_arenas()
    barrier = threading.Barrier(8)
    def allocate():
        barrier.wait()
        held = [bytearray(64 << 10) for _ in range(4)]
        barrier.wait()
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads: thread.start()
    for thread in threads: thread.join()
    ctypes.CDLL(None).malloc_stats()
""")


def arenas(mode):
    env = {key: value for key, value in os.environ.items() if key != "MALLOC_ARENA_MAX"}
    result = subprocess.run(
        [sys.executable, "-c", ARENAS_PROGRAM, mode], capture_output=True, text=True, check=True,
        env=env,
    )
    return result.stderr.count("Arena ")


def test_threads_share_one_arena_per_core():
    assert arenas("default") > 2  # glibc: up to 8 per core
    assert arenas("limited") == 1
