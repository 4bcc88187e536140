"""`keras-transformer translate`: from an export (base or version directory), a run directory,
stdin, and a model server over REST and gRPC."""

import io
import sys

import pytest

from keras_transformer.cli import main
from keras_transformer.export import export_run
from keras_transformer.inference.loading import find_saved_model
from keras_transformer.run_dir import load_run


@pytest.fixture(scope="module")
def pairs(trained_run_dir):
    """Training sentences and their references: the demo model has learned them."""
    settings = load_run(trained_run_dir, compile=False).settings
    with open(settings.source_file) as sources, open(settings.target_file) as targets:
        return [(next(sources).strip(), next(targets).strip()) for _ in range(3)]


@pytest.fixture(scope="module")
def base(trained_run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "translator"
    export_run(trained_run_dir, base, beam_width=1)
    return base


def translate(capsys, *args):
    capsys.readouterr()
    status = main(["translate", *map(str, args)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out.splitlines()


def test_export_base_version_and_run_directories_agree(base, trained_run_dir, pairs, capsys):
    sources, references = zip(*pairs, strict=True)
    assert translate(capsys, "--model", base, *sources) == list(references)
    assert translate(capsys, "--model", base / "1", *sources) == list(references)
    assert translate(capsys, "--model", trained_run_dir, "--beam", "1", *sources) == list(
        references
    )


def test_stdin_lines_and_the_beam_option_on_an_export(base, pairs, capsys, monkeypatch):
    sources, references = zip(*pairs, strict=True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{s}\n" for s in sources)))
    # --beam goes through the export's translate_with_options signature; beam 1 is the greedy
    # decoding the export was made with.
    assert translate(capsys, "--model", base, "--beam", "1") == list(references)


def test_highest_version_is_found(tmp_path):
    for version in ("1", "3", "10"):
        (tmp_path / version).mkdir()
    for version in ("1", "3"):
        (tmp_path / version / "saved_model.pb").write_bytes(b"")
    (tmp_path / "tmp-export").mkdir()
    assert find_saved_model(tmp_path) == tmp_path / "3"  # 10 has no saved_model.pb yet
    assert find_saved_model(tmp_path / "1") == tmp_path / "1"
    assert find_saved_model(tmp_path / "missing") is None


def test_not_a_model_is_an_error(tmp_path, capsys):
    assert main(["translate", "--model", str(tmp_path), "hello"]) == 2
    assert "not a run directory" in capsys.readouterr().err


@pytest.mark.slow
def test_server_over_rest_and_grpc(base, pairs, capsys):
    from serving.process import LocalServer

    sources, references = zip(*pairs, strict=True)
    with LocalServer(["--model_name=translator", f"--model_base_path={base}"]) as server:
        server.wait_ready("translator")
        for url in (server.rest_url, f"grpc://{server.grpc_target}"):
            assert translate(capsys, "--server", url, *sources) == list(references)
            assert translate(capsys, "--server", url, "--beam", "1", *sources) == list(
                references
            )


@pytest.mark.parametrize("command", [
    ["translate", "--model", "models/translator", "Ein Satz."],
    ["evaluate", "models/translator", "--source-file", "s", "--target-file", "t"],
])
@pytest.mark.parametrize("option, value, message", [
    ("--beam", "0", "must be at least 1, got 0"),
    ("--batch-size", "-3", "must be at least 1, got -3"),
    ("--beam", "two", "expected an integer, got 'two'"),
])
def test_decoding_options_are_checked_before_any_work(capsys, command, option, value, message):
    with pytest.raises(SystemExit) as exit_:
        main([*command, option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err
