"""`run_info.json`: the pair counts (demo data, files, held-out split, skipped pairs), the training
time across resumed sessions, the code's commit, and the kept model's validation loss and BLEU
with sacreBLEU's signature, checked against numbers recomputed independently."""

from __future__ import annotations

import subprocess
import time

import pytest
import sacrebleu

from keras_transformer.inference.loading import load_translator
from keras_transformer.model_card import SOURCE_ROOT
from keras_transformer.run_dir import RunPaths, load_run, read_run_info, write_run_info
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.data import read_parallel_files
from keras_transformer.training.inputs import load_corpora
from keras_transformer.training.run_info import RunInfo, data_counts
from keras_transformer.training.trainer import train


def line_count(path) -> int:
    with open(path, encoding="utf-8") as lines:
        return sum(1 for _ in lines)


def is_commit_of_this_repository(commit: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(SOURCE_ROOT), "cat-file", "-t", commit], capture_output=True, text=True
    )
    return result.stdout.strip() == "commit"


def test_a_trained_run_records_its_pairs_time_code_and_kept_model(trained_run_dir):
    run = load_run(trained_run_dir, compile=False)
    info = read_run_info(trained_run_dir)
    assert info["data"] == {
        "train": {"pairs": line_count(run.settings.source_file), "skipped_empty": 0,
                  "skipped_too_long": 0},
        "validation": {"pairs": line_count(run.settings.val_source_file),
                       "held_out_fraction": None},
    }
    assert info["training_seconds"] > 0
    assert len(info["software"]["git_commit"]) == 40
    assert is_commit_of_this_repository(info["software"]["git_commit"])
    # Without BLEU the kept model is the one of the best validation loss, measured again.
    assert set(info["validation"]) == {"val_loss"}
    assert info["validation"]["val_loss"] == pytest.approx(min(run.history["val_loss"]),
                                                           rel=1e-5)


def test_pair_counts_of_a_held_out_split_with_skipped_pairs(tmp_path):
    lines = [f"Satz {i} .\tSentence {i} ." for i in range(400)]
    lines += ["\tno source", "word " * 201 + "\ttoo long"]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    data = load_corpora(TrainingSettings(tsv_file=str(path), validation_fraction=0.1, seed=3))
    counts = data_counts(data)
    assert counts["train"]["pairs"] + counts["validation"]["pairs"] == 400
    assert counts["validation"] == {"pairs": len(data.validation), "held_out_fraction": 0.1}
    assert counts["train"]["skipped_empty"] == 1 and counts["train"]["skipped_too_long"] == 1


def test_demo_data_counts():
    data = load_corpora(TrainingSettings())
    assert data_counts(data) == {
        "train": {"pairs": len(data.train)},
        "validation": {"pairs": len(data.validation), "held_out_fraction": None},
    }


def test_a_resumed_session_adds_its_time_to_the_interrupted_ones(tmp_path):
    paths = RunPaths(tmp_path)
    write_run_info(tmp_path, {"training_seconds": 100.0})
    data = load_corpora(TrainingSettings())
    resumed = RunInfo(paths, data, start=time.monotonic() - 10, resuming=True)
    resumed.save()
    assert 110 <= read_run_info(tmp_path)["training_seconds"] < 170
    RunInfo(paths, data, start=time.monotonic() - 10, resuming=False).save()
    assert 10 <= read_run_info(tmp_path)["training_seconds"] < 70


def test_bleu_of_the_kept_model_with_sacrebleus_signature(trained_run_dir, tiny_config, tmp_path):
    files = load_run(trained_run_dir, compile=False).settings
    settings = TrainingSettings(
        source_file=files.source_file, target_file=files.target_file,
        val_source_file=files.val_source_file, val_target_file=files.val_target_file,
        steps=6, save_every=2, eval_every=2, eval_sentences=8, learning_rate_scale=2.0,
    )
    run = train(tiny_config, settings, tmp_path / "run", verbose=0)
    validation = read_run_info(tmp_path / "run")["validation"]
    # The kept model is the best-BLEU one of the history (no averaging here).
    assert validation["val_bleu"] == pytest.approx(max(run.history["val_bleu"]), abs=1e-6)
    assert validation["bleu_sentences"] == 8
    # Recomputed: greedy translations through load_translator, scored by sacreBLEU.
    val = read_parallel_files(settings.val_source_file, settings.val_target_file)
    hypotheses = load_translator(tmp_path / "run", beam_width=1).translate(val.sources[:8])
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hypotheses, [val.targets[:8]])
    assert validation["val_bleu"] == pytest.approx(score.score, abs=1e-6)
    assert validation["bleu_signature"] == str(bleu.get_signature())
    assert validation["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
