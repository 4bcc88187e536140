"""`serving.allocator`: when the server starts again with jemalloc preloaded, and that a served
process really allocates with it where the system has it (and with the C library's malloc when
told to)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from serving_fixtures import SERVE_COMMAND

from serving.allocator import DEFAULT_MALLOC_CONF, installed_jemalloc, preload_environment
from serving.process import LocalServer

JEMALLOC = "libjemalloc.so.2"


def test_jemalloc_is_preloaded_with_a_default_configuration():
    environment = preload_environment({"PATH": "/bin"}, JEMALLOC)
    assert environment == {"PATH": "/bin", "LD_PRELOAD": JEMALLOC,
                           "MALLOC_CONF": DEFAULT_MALLOC_CONF}


def test_a_users_jemalloc_configuration_is_kept():
    environment = preload_environment({"MALLOC_CONF": "narenas:2"}, JEMALLOC)
    assert environment["MALLOC_CONF"] == "narenas:2"


@pytest.mark.parametrize("environ", [
    {"SERVING_ALLOCATOR": "system"},
    {"SERVING_ALLOCATOR": " System "},
    {"LD_PRELOAD": "libtcmalloc_minimal.so.4"},  # the user chose
    {"LD_PRELOAD": JEMALLOC},  # the restarted server
])
def test_no_restart_when_the_allocator_is_chosen_already(environ):
    assert preload_environment(environ, JEMALLOC) is None


def test_without_jemalloc_the_server_goes_on_with_malloc():
    assert preload_environment({}, None) is None
    assert preload_environment({"SERVING_ALLOCATOR": "system"}, None) is None


def test_asking_for_a_missing_jemalloc_or_an_unknown_allocator_is_an_error():
    with pytest.raises(ValueError, match="apt-get install libjemalloc2"):
        preload_environment({"SERVING_ALLOCATOR": "jemalloc"}, None)
    with pytest.raises(ValueError, match="SERVING_ALLOCATOR='tcmalloc'.*jemalloc, system"):
        preload_environment({"SERVING_ALLOCATOR": "tcmalloc"}, JEMALLOC)


def mapped_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()



@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and LD_PRELOAD")
@pytest.mark.parametrize(("command", "choice"), [
    ("python -m serving", "default"),
    ("python -m serving", "system"),
    ("keras-transformer serve", "default"),
])
def test_a_served_process_allocates_with_jemalloc_exactly_where_installed(
    command, choice, fixture_models, monkeypatch, tmp_path
):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("SERVING_ALLOCATOR", raising=False)
    if choice == "system":
        monkeypatch.setenv("SERVING_ALLOCATOR", "system")
    flags = ["--model_name=translator",
             f"--model_base_path={fixture_models / 'translator'}"]
    program = SERVE_COMMAND if command == "keras-transformer serve" else None
    with LocalServer(flags, tmp_path / "server.log", command=program) as server:
        server.wait_ready("translator")
        maps = mapped_libraries(server.process.pid)  # the same process after its restart
    expect_jemalloc = choice == "default" and installed_jemalloc() is not None
    assert ("libjemalloc" in maps) == expect_jemalloc, server.log()
