import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
sys.path.insert(0, str(NOTEBOOKS))
import build_notebooks  # noqa: E402


def sources(notebook):
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


@pytest.mark.parametrize("name", sorted(build_notebooks.NOTEBOOKS))
def test_committed_notebook_is_what_the_builder_writes(name):
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert sources(committed) == sources(build_notebooks.notebook(build_notebooks.NOTEBOOKS[name]))
    assert all(not cell.get("outputs") for cell in committed.cells)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(build_notebooks.NOTEBOOKS))
def test_notebook_runs_top_to_bottom(name, monkeypatch):
    monkeypatch.setenv("NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("PYTHONPATH", str(NOTEBOOKS.parent))
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(NOTEBOOKS)}
    }).execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.output_type == "error"]
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    assert images, "the notebook should draw its plots"
