"""The Makefile picks a Python within pyproject.toml's `requires-python`, and says so clearly when
there is none. Fake interpreters on an otherwise empty PATH stand in for installed Pythons;
`make -n` shows the commands it would run without running them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
# Answers the Makefile's two questions: in range? (exit status) and which version? (printed).
FAKE_PYTHON = """#!/bin/sh
case "$2" in
  *platform*) echo "{version}" ;;
  *) exit {status} ;;
esac
"""


def fake_pythons(directory: Path, **versions: str) -> Path:
    """Writes `name -> version` fake interpreters into `directory`; 3.11 and 3.12 are in range."""
    directory.mkdir()
    for name, version in versions.items():
        path = directory / name.replace("_", ".")
        in_range = version.startswith(("3.11.", "3.12."))
        path.write_text(FAKE_PYTHON.format(version=version, status=0 if in_range else 1))
        path.chmod(0o755)
    return directory


def make(tmp_path: Path, path: Path, *arguments: str) -> subprocess.CompletedProcess:
    """`make ARGUMENTS VENV=<tmp>` in the repository with only `path` on PATH."""
    env = {key: value for key, value in os.environ.items()
           if key not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHON", "VENV"}}
    env["PATH"] = str(path)
    return subprocess.run(
        [MAKE, "-C", str(REPO_ROOT), *arguments, f"VENV={tmp_path / 'venv'}"],
        env=env, capture_output=True, text=True, timeout=60,
    )


def test_the_makefile_range_is_pyprojects_requires_python():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    makefile = (REPO_ROOT / "Makefile").read_text()
    low = re.search(r"^PYTHON_MIN := (\S+)$", makefile, re.MULTILINE)[1]
    below = re.search(r"^PYTHON_BELOW := (\S+)$", makefile, re.MULTILINE)[1]
    assert pyproject["project"]["requires-python"] == f">={low},<{below}"


def test_the_first_python_in_range_makes_the_venv(tmp_path):
    path = fake_pythons(tmp_path / "bin", python3="3.10.14", python3_11="3.11.9")
    result = make(tmp_path, path, "-n", "venv")
    assert result.returncode == 0, result.stderr
    assert "python3.11 -m venv " in result.stdout


def test_no_python_in_range_stops_with_the_range(tmp_path):
    path = fake_pythons(tmp_path / "bin", python3="3.10.14", python3_13="3.13.1")
    result = make(tmp_path, path, "venv")
    assert result.returncode != 0
    assert "make: no Python >=3.11,<3.13 found (tried: python3.12 python3.11 python3)" in (
        result.stderr
    )
    assert not (tmp_path / "venv").exists()


def test_a_named_python_out_of_range_is_refused(tmp_path):
    path = fake_pythons(tmp_path / "bin", python3_11="3.11.9", old="3.9.18")
    result = make(tmp_path, path, "venv", f"PYTHON={path / 'old'}")
    assert result.returncode != 0
    assert f"make: {path / 'old'} is Python 3.9.18, not >=3.11,<3.13" in result.stderr
    assert not (tmp_path / "venv").exists()
