"""The server process's heap: what a model swap leaves behind, and giving it back.

Under jemalloc (`serving.allocator`, preloaded where installed) freed pages go back to the OS by
themselves; `return_freed_memory` only hastens it. The rest of this module is for glibc's malloc.

Loading a SavedModel while requests are being served interleaves the load's temporary blocks
with the requests' tensors in malloc's heap, and glibc cannot give the pages back once the load
is done or the old version is unloaded (measured: +400 MiB per swap under load on the Multi30k
export, of which `malloc_trim` returned under 100). During a load, blocks of 64 KiB and more
are therefore mapped on their own (`mallopt(M_MMAP_THRESHOLD)`), so that freeing them unmaps
them; afterwards the threshold is 32 MiB, the ceiling glibc's own adaptive threshold reaches,
so serving keeps its large tensors on the heap (mapping every large block while serving cost
10-60% of the translator's throughput). Threads share one malloc arena per CPU core
(`limit_arenas`). Other C libraries: nothing is changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator

from serving.allocator import jemalloc_active

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers
_M_ARENA_MAX = -8
_LOAD_MMAP_THRESHOLD = 64 * 1024
_SERVING_MMAP_THRESHOLD = 32 * 1024 * 1024


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.malloc_trim, libc.mallopt  # noqa: B018  (both are glibc-only)
    except (AttributeError, OSError, TypeError):
        return None
    return libc


_JEMALLOC = ctypes.CDLL(None) if jemalloc_active() else None
_GLIBC = None if _JEMALLOC is not None else _glibc()
_ALL_ARENAS = 4096  # jemalloc's MALLCTL_ARENAS_ALL


@contextlib.contextmanager
def large_blocks_mapped() -> Iterator[None]:
    """While inside, malloc maps blocks of 64 KiB or more on their own (returned on free)."""
    if _GLIBC is None:
        yield
        return
    _GLIBC.mallopt(_M_MMAP_THRESHOLD, _LOAD_MMAP_THRESHOLD)
    try:
        yield
    finally:
        _GLIBC.mallopt(_M_MMAP_THRESHOLD, _SERVING_MMAP_THRESHOLD)


def limit_arenas() -> None:
    """Lets malloc keep one arena per CPU core (glibc's default: 8 per core), unless the
    `MALLOC_ARENA_MAX` environment variable already says how many; call before threads start.

    Each arena keeps its own free pages, so with one per request thread a version swap under
    load leaves its memory spread over dozens of heaps that cannot shrink (measured: a soak of
    10,000 requests at concurrency 64 with a swap, on 2 cores, end RSS +28% with glibc's
    default, +9% with 2 arenas, at the same latency).
    """
    if _GLIBC is not None and "MALLOC_ARENA_MAX" not in os.environ:
        _GLIBC.mallopt(_M_ARENA_MAX, _usable_cpus())


def _usable_cpus() -> int:
    """The CPU cores this process may run on (its affinity mask: a container's CPU set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks on this OS
        return os.cpu_count() or 1


def return_freed_memory() -> None:
    """Hands the heap's free pages back to the OS now: glibc's `malloc_trim` (glibc keeps them
    otherwise, a few hundred MB per version swap of a translator), or a purge of every jemalloc
    arena (which would return them within a second anyway)."""
    if _JEMALLOC is not None:
        _JEMALLOC.mallctl(f"arena.{_ALL_ARENAS}.purge".encode(), None, None, None, 0)
    elif _GLIBC is not None:
        _GLIBC.malloc_trim(0)


def resident_mib() -> int:
    """This process's resident set size in MiB (Linux `/proc`; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE") // 2**20
