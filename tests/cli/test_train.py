"""`keras-transformer train`: the run directory it writes, flag precedence, errors, and resuming
a run killed with SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keras_transformer.cli import main
from keras_transformer.text.demo_data import make_demo_corpus

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": 32, "num_heads": 2,
    "d_ff": 64, "dropout": 0.0, "max_length": 24, "batch_size": 32, "warmup_steps": 50,
    "vocab_size": 120, "epochs": 5,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    """Demo pairs for numbers 0-59 as a TSV file and as line-aligned files."""
    root = tmp_path_factory.mktemp("data")
    train, val = make_demo_corpus(
        max_number=59, sentences_per_number=2, sentences_per_basic_number=2, seed=1
    )
    paths = {"tsv": root / "train.tsv"}
    paths["tsv"].write_text(
        "".join(f"{s}\t{t}\n" for s, t in zip(train.sources, train.targets, strict=True)),
        encoding="utf-8",
    )
    for split, corpus in (("train", train), ("val", val)):
        for side, lines in (("en", corpus.sources), ("de", corpus.targets)):
            paths[f"{split}.{side}"] = root / f"{split}.{side}"
            paths[f"{split}.{side}"].write_text("".join(f"{x}\n" for x in lines), "utf-8")
    return paths


def write_config(path: Path, **values) -> Path:
    path.write_text(json.dumps({**TINY, **values}), encoding="utf-8")
    return path


def test_writes_the_run_directory_and_flags_override_the_config(data, tmp_path, capsys):
    config = write_config(tmp_path / "tiny.json", steps_per_epoch=8)
    run_dir = tmp_path / "run"
    status = main(["train", "--tsv", str(data["tsv"]), "--config", str(config),
                   "--run-dir", str(run_dir), "--epochs", "2"])
    assert status == 0
    assert f"run directory: {run_dir}" in capsys.readouterr().out

    written = json.loads((run_dir / "config.json").read_text())
    assert written["epochs"] == 2  # the flag beat the JSON's 5
    assert written["d_model"] == 32 and written["tsv_file"] == str(data["tsv"])
    source_vocab = (run_dir / "vocab/source/vocab.txt").read_text().splitlines()
    assert written["source_vocab_size"] == len(source_vocab)  # sizes are the built ones
    assert (run_dir / "vocab/target/tokenizer.json").is_file()
    assert (run_dir / "model.keras").stat().st_size > 0
    history = json.loads((run_dir / "history.json").read_text())
    assert history["epoch"] == [1, 2]
    assert {"loss", "val_loss", "masked_accuracy", "val_masked_accuracy"} <= set(history)
    assert (run_dir / "learning_curve.png").read_bytes().startswith(b"\x89PNG")
    for split in ("train", "validation"):
        assert list((run_dir / "logs" / split).glob("events.out.tfevents.*"))
    assert not (run_dir / "backup").exists()  # removed once the run finished


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--epochs", "0"], "command line: training setting epochs must be a positive integer"),
        (["--source-file", "x.en"], "source_file and target_file must be given together"),
        (["--config", "{config_dir}/bad.json"], "bad.json: unknown key 'd_modle'"),
        (["--source-file", "{config_dir}/missing.en", "--target-file", "{config_dir}/x.de"],
         "missing.en"),
        (["--source-file", "{config_dir}/short.en", "--target-file", "{config_dir}/long.de"],
         "short.en has 1 lines but .*long.de has 2 lines"),
    ],
)
def test_errors_are_reported_in_one_line(tmp_path, capsys, arguments, message):
    (tmp_path / "bad.json").write_text('{"d_modle": 3}')
    (tmp_path / "short.en").write_text("one\n")
    (tmp_path / "long.de").write_text("eins\nzwei\n")
    arguments = [a.format(config_dir=tmp_path) for a in arguments]
    status = main(["train", "--run-dir", str(tmp_path / "run"), *arguments])
    assert status == 1
    error = capsys.readouterr().err
    assert error.startswith("keras-transformer train: error: ")
    assert len(error.strip().splitlines()) == 1
    assert re.search(message, error), error


def cli(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "keras_transformer", "train", *arguments]


def backed_up_epoch(metadata: Path) -> int | None:
    """The epoch in BackupAndRestore's metadata file, or None while there is none (yet)."""
    try:
        return json.loads(metadata.read_text())["epoch"]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@pytest.mark.slow
def test_resumes_after_kill_9(data, tmp_path):
    config = write_config(tmp_path / "tiny.json", steps_per_epoch=15, epochs=3)
    run_dir = tmp_path / "run"
    command = cli("--source-file", str(data["train.en"]), "--target-file", str(data["train.de"]),
                  "--val-source-file", str(data["val.en"]), "--val-target-file",
                  str(data["val.de"]), "--config", str(config), "--run-dir", str(run_dir))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    metadata = run_dir / "backup" / "training_metadata.json"

    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while backed_up_epoch(metadata) is None and first.poll() is None:
            assert time.monotonic() < deadline, "no backup was written"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    saved_epoch = json.loads(metadata.read_text())["epoch"]
    assert 1 <= saved_epoch < 3, "killed too late to test resuming"
    killed_history = json.loads((run_dir / "history.json").read_text())
    assert killed_history["epoch"] == list(range(1, saved_epoch + 1))

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    epochs_run = [line.split()[1] for line in second.stdout.splitlines()
                  if line.startswith("Epoch ")]
    assert epochs_run == [f"{epoch}/3" for epoch in range(saved_epoch + 1, 4)]
    history = json.loads((run_dir / "history.json").read_text())
    assert history["epoch"] == [1, 2, 3]
    assert history["loss"][:saved_epoch] == killed_history["loss"]
    # Restored weights: the first resumed epoch continues the descent instead of starting over.
    assert history["loss"][saved_epoch] < 0.9 * history["loss"][0]
    assert not (run_dir / "backup").exists()


def test_console_script_is_installed_next_to_python():
    # `pip install` puts the `keras-transformer` entry point beside the interpreter.
    script = Path(sys.executable).parent / "keras-transformer"
    result = subprocess.run([str(script), "train", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in ("--source-file", "--tsv", "--config", "--run-dir", "--time-budget",
                 "--mixed-precision", "--jit-compile", "--strategy"):
        assert flag in result.stdout
