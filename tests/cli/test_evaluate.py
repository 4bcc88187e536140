"""`keras-transformer evaluate`: translations written to a file, scored by sacreBLEU exactly as
sacreBLEU's own command line scores that file."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from keras_transformer.cli import main
from keras_transformer.run_dir import load_run

SACREBLEU = Path(sys.executable).parent / "sacrebleu"


def score_lines(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def test_set(trained_run_dir, tmp_path_factory) -> dict:
    """12 validation pairs of the trained run (numbers never seen in training, so the
    translations are imperfect), with references in Title Case, so that cased and lowercased
    BLEU differ."""
    settings = load_run(trained_run_dir, compile=False).settings
    with open(settings.val_source_file) as sources, open(settings.val_target_file) as targets:
        pairs = [(next(sources), next(targets)) for _ in range(12)]
    root = tmp_path_factory.mktemp("test_set")
    paths = {"source": root / "test.en", "target": root / "test.de", "title": root / "title.de"}
    paths["source"].write_text("".join(source for source, _ in pairs))
    paths["target"].write_text("".join(target for _, target in pairs))
    paths["title"].write_text("".join(target.title() for _, target in pairs))
    return paths


def test_printed_scores_are_sacrebleu_on_the_written_hypotheses(
    trained_run_dir, test_set, tmp_path, capsys
):
    output = tmp_path / "out" / "hyp.txt"
    status = main([
        "evaluate", str(trained_run_dir), "--source-file", str(test_set["source"]),
        "--target-file", str(test_set["target"]), "--output", str(output), "--beam", "2",
    ])
    captured = capsys.readouterr()
    assert status == 0
    hypotheses = output.read_text().splitlines()
    references = test_set["target"].read_text().splitlines()
    assert len(hypotheses) == 12 and all(hypotheses)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    assert score_lines(captured.out, "BLEU = ") == str(bleu)
    assert score_lines(captured.out, "chrF2 = ") == str(
        sacrebleu.corpus_chrf(hypotheses, [references])
    )
    assert 10 < bleu.score < 100
    assert "12/12" in captured.err  # the progress bar, on stderr
    assert "12/12" not in captured.out


def sacrebleu_cli(reference: Path, hypotheses: Path, *options: str) -> dict:
    """sacreBLEU's command line on the files: `{metric name: its JSON result}`."""
    result = subprocess.run(
        [str(SACREBLEU), str(reference), "-i", str(hypotheses), "-m", "bleu", "chrf",
         "-w", "6", *options],
        capture_output=True, text=True, check=True, timeout=120,
    )
    return {metric["name"]: metric for metric in json.loads(result.stdout)}


@pytest.mark.parametrize("options, cli_options", [
    (["--lowercase"], ["-lc", "--chrf-lowercase"]),
    (["--lowercase", "--tokenize", "char", "--overwrite"],
     ["-lc", "--chrf-lowercase", "-tok", "char"]),
])
def test_json_equals_sacrebleu_run_on_the_written_file(
    trained_run_dir, test_set, tmp_path, capsys, options, cli_options
):
    output = tmp_path / "hyp.txt"
    output.write_text("left from an earlier run\n")
    status = main([
        "evaluate", str(trained_run_dir), "--source-file", str(test_set["source"]),
        "--target-file", str(test_set["title"]), "--output", str(output), "--beam", "1",
        "--json", *options,
    ])
    if "--overwrite" not in options:
        assert status == 2
        assert output.read_text() == "left from an earlier run\n"
        assert "--overwrite" in capsys.readouterr().err
        output.unlink()
        status = main([
            "evaluate", str(trained_run_dir), "--source-file", str(test_set["source"]),
            "--target-file", str(test_set["title"]), "--output", str(output), "--beam", "1",
            "--json", *options,
        ])
    assert status == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert len(output.read_text().splitlines()) == result["sentences"] == 12

    reference = sacrebleu_cli(test_set["title"], output, *cli_options)
    assert result["bleu"] == pytest.approx(reference["BLEU"]["score"], abs=1e-6)
    assert result["signature"] == reference["BLEU"]["signature"]
    assert result["chrf"] == pytest.approx(reference["chrF2"]["score"], abs=1e-6)
    assert result["chrf_signature"] == reference["chrF2"]["signature"]
    assert "case:lc" in result["signature"] and "case:lc" in result["chrf_signature"]
    assert result["tokenize"] == reference["BLEU"]["tok"]
    assert (result["lowercase"], result["beam"], result["alpha"]) == (True, 1, None)
    # Title Case references: only the lowercased score sees the matching words.
    cased = sacrebleu_cli(test_set["title"], output, *cli_options[2:])
    assert result["bleu"] > cased["BLEU"]["score"] + 10


def test_the_default_output_is_never_silently_replaced(trained_run_dir, test_set, tmp_path,
                                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("hypotheses.txt").write_text("mine\n")
    status = main(["evaluate", str(trained_run_dir), "--source-file", str(test_set["source"]),
                   "--target-file", str(test_set["target"])])
    assert status == 2
    assert Path("hypotheses.txt").read_text() == "mine\n"
    assert capsys.readouterr().err == (
        "error: hypotheses.txt exists; pass --overwrite to replace it, or --output to write "
        "elsewhere\n"
    )


def test_tokenizers_are_sacrebleus(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["evaluate", "run", "--source-file", "a", "--target-file", "b",
              "--tokenize", "moses"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert "argument --tokenize: invalid choice: 'moses'" in error
    for name in sacrebleu.metrics.BLEU.TOKENIZERS:
        assert repr(name) in error


def test_misaligned_files_are_an_error(trained_run_dir, tmp_path, capsys):
    (tmp_path / "a").write_text("one\ntwo\n")
    (tmp_path / "b").write_text("eins\n")
    status = main([
        "evaluate", str(trained_run_dir), "--source-file", str(tmp_path / "a"),
        "--target-file", str(tmp_path / "b"), "--output", str(tmp_path / "hyp.txt"),
    ])
    assert status == 2
    error = capsys.readouterr().err
    assert "2 lines" in error and "has 1" in error
