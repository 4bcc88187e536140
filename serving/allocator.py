"""The server's memory allocator: jemalloc where the system has it, else glibc's malloc.

A version swap under load leaves glibc's heap fragmented: the new version's load interleaves its
blocks with the requests' tensors, and glibc cannot hand the old version's pages back (measured,
`bench/soak.py` on the Multi30k export, 10,000 requests at concurrency 64 with a swap midway:
RSS +300 MiB across the swap with glibc's malloc, -26 to +58 MiB with jemalloc, which returns
free pages by itself; tcmalloc kept them all). So `python -m serving` and `keras-transformer
serve` start once more, at once, with jemalloc preloaded (`LD_PRELOAD`) when `libjemalloc.so.2`
is installed (Debian and Ubuntu: `apt-get install libjemalloc2`) and no library is preloaded
already.

`SERVING_ALLOCATOR=system` keeps the C library's malloc; `SERVING_ALLOCATOR=jemalloc` makes a
missing jemalloc an error instead of a fallback. `MALLOC_CONF`, when set, is jemalloc's own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Mapping

CHOICE_VARIABLE = "SERVING_ALLOCATOR"
CHOICES = ("jemalloc", "system")
# A background thread returns pages unused for a second to the OS (jemalloc's default keeps
# them ten seconds, then keeps them mapped but "muzzy" ten more).
DEFAULT_MALLOC_CONF = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0"


def installed_jemalloc() -> str | None:
    """The name of the system's jemalloc library (e.g. `libjemalloc.so.2`), or None."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.util.find_library("jemalloc")


def preload_environment(environ: Mapping[str, str], jemalloc: str | None) -> dict | None:
    """The environment to start the server again with, jemalloc preloaded; None to go on as is.

    Args:
        environ: the current environment.
        jemalloc: the installed library's name, or None.

    Raises:
        ValueError: `SERVING_ALLOCATOR` is neither `jemalloc` nor `system`, or asks for jemalloc
            where it is not installed.
    """
    choice = environ.get(CHOICE_VARIABLE, "").strip().lower()
    if choice and choice not in CHOICES:
        raise ValueError(
            f"{CHOICE_VARIABLE}={environ[CHOICE_VARIABLE]!r}: expected one of {', '.join(CHOICES)}"
        )
    if choice == "system" or environ.get("LD_PRELOAD", "").strip():
        return None  # chosen already: by the user, or by the start that preloaded jemalloc
    if jemalloc is None:
        if choice == "jemalloc":
            raise ValueError(
                f"{CHOICE_VARIABLE}=jemalloc, but no jemalloc library is installed "
                "(Debian/Ubuntu: apt-get install libjemalloc2)"
            )
        return None
    return {**environ, "LD_PRELOAD": jemalloc,
            "MALLOC_CONF": environ.get("MALLOC_CONF", DEFAULT_MALLOC_CONF)}


def restart_with_jemalloc() -> None:
    """Replaces this process by the same command with jemalloc preloaded, where
    `preload_environment` says so; returns otherwise. Call first thing in a server's entry point
    (the program starts over: nothing done before survives)."""
    try:
        environment = preload_environment(os.environ, installed_jemalloc())
    except ValueError as error:
        sys.exit(f"error: {error}")
    if environment is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)


def jemalloc_active() -> bool:
    """Whether this process allocates with jemalloc (it exports `mallctl`; glibc does not)."""
    try:
        return hasattr(ctypes.CDLL(None), "mallctl")
    except OSError:  # no dynamic loader symbols to look in
        return False
