"""`keras-transformer info PATH`: the model card of a run directory (built from its files) or of
an export (base or version directory), as Markdown or `--json`."""

import json

import pytest

from keras_transformer.cli import main
from keras_transformer.export import export_run
from keras_transformer.model_card import render_markdown, run_card


@pytest.fixture(scope="module")
def base(trained_run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "translator"
    export_run(trained_run_dir, base, beam_width=1)
    return base


def info(capsys, *args) -> str:
    capsys.readouterr()
    status = main(["info", *map(str, args)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out


def test_info_of_a_run_directory(trained_run_dir, capsys):
    card = run_card(trained_run_dir)
    assert json.loads(info(capsys, trained_run_dir, "--json")) == card
    markdown = info(capsys, trained_run_dir)
    assert markdown == render_markdown(card) + "\n"
    assert markdown.startswith(f"# Model card: {trained_run_dir.name}\n")
    assert card["trained_with"]["git_commit"] in markdown
    assert "## Serving signatures" not in markdown  # a run has not been exported


def test_info_of_an_export(base, capsys):
    carried = json.loads((base / "1" / "assets.extra" / "model_card.json").read_text())
    for path in (base, base / "1"):
        assert json.loads(info(capsys, path, "--json")) == carried
    markdown = info(capsys, base)
    assert "### `translate_with_options`" in markdown
    assert "| input | `text` | string | (None) |" in markdown
    assert carried["exported_with"]["git_commit"] in markdown


def test_not_a_model_is_an_error(tmp_path, capsys):
    assert main(["info", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
