"""`keras-transformer evaluate`: translations written to a file, scored by sacreBLEU."""

import sacrebleu

from keras_transformer.cli import main
from keras_transformer.run_dir import load_run


def score_lines(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name))


def test_printed_scores_are_sacrebleu_on_the_written_hypotheses(trained_run_dir, tmp_path, capsys):
    settings = load_run(trained_run_dir, compile=False).settings
    # Validation numbers were never seen in training, so the translations are imperfect.
    with open(settings.val_source_file) as sources, open(settings.val_target_file) as targets:
        pairs = [(next(sources), next(targets)) for _ in range(12)]
    (tmp_path / "test.en").write_text("".join(source for source, _ in pairs))
    (tmp_path / "test.de").write_text("".join(target for _, target in pairs))
    output = tmp_path / "out" / "hyp.txt"
    status = main([
        "evaluate", str(trained_run_dir), "--source-file", str(tmp_path / "test.en"),
        "--target-file", str(tmp_path / "test.de"), "--output", str(output), "--beam", "2",
    ])
    printed = capsys.readouterr().out
    assert status == 0
    hypotheses = output.read_text().splitlines()
    references = [target.strip() for _, target in pairs]
    assert len(hypotheses) == 12 and all(hypotheses)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    assert score_lines(printed, "BLEU = ") == str(bleu)
    assert score_lines(printed, "chrF2 = ") == str(sacrebleu.corpus_chrf(hypotheses, [references]))
    assert 10 < bleu.score < 100


def test_misaligned_files_are_an_error(trained_run_dir, tmp_path, capsys):
    (tmp_path / "a").write_text("one\ntwo\n")
    (tmp_path / "b").write_text("eins\n")
    status = main([
        "evaluate", str(trained_run_dir), "--source-file", str(tmp_path / "a"),
        "--target-file", str(tmp_path / "b"),
    ])
    assert status == 2
    error = capsys.readouterr().err
    assert "2 lines" in error and "has 1" in error
