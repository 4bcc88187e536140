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
