"""`keras-transformer train`: the run directory it writes, flag / config / preset precedence,
errors, reusing a vocabulary, and resuming epoch- and step-based runs killed with SIGKILL."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest

from keras_transformer.cli import build_parser, main
from keras_transformer.cli.train import FLAGS, base_values, overrides
from keras_transformer.config import TransformerConfig
from keras_transformer.presets import preset_values
from keras_transformer.run_dir import load_run, split_values
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.demo_data import demo_vocabularies, make_demo_corpus
from keras_transformer.text.tokenizer_pair import tokenizers_from_vocabularies

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
        (["--epochs", "0"], "--epochs: training setting epochs must be a positive integer"),
        (["--d-model", "100", "--num-heads", "3"],
         r"--d-model, --num-heads: TransformerConfig.num_heads \(3\) must divide d_model"),
        (["--tsv", "x.tsv", "--source-file", "x.en", "--target-file", "x.de"],
         "--source-file, --target-file, --tsv: .*give either tsv_file or source_file"),
        (["--eval-every", "10"], "--eval-every: training setting eval_every needs steps"),
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


def settings_from(*arguments: str):
    """`(config, settings)` as `keras-transformer train` would build them (nothing trained)."""
    args = build_parser().parse_args(["train", *arguments])
    config, settings = base_values(args)
    return split_values(overrides(args), config, settings)


def test_flags_beat_config_which_beats_preset_which_beats_defaults(tmp_path):
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"d_model": 256, "d_ff": 1024, "eval_every": 2000}))
    config, settings = settings_from("--preset", "transformer_base", "--config",
                                     str(config_path), "--steps", "7", "--eval-every", "3000")
    preset = preset_values("transformer_base")
    assert settings.steps == 7 and settings.eval_every == 3000  # flags
    assert config.d_model == 256 and config.d_ff == 1024  # --config
    assert config.num_heads == preset["num_heads"] == 8  # --preset
    assert settings.batch_tokens == preset["batch_tokens"] and settings.save_every == 1000
    assert settings.seed == 0 and settings.accumulate_steps == 1  # defaults
    only_preset, _ = settings_from("--preset", "transformer_big")
    assert only_preset.d_model == 1024
    defaults, _ = settings_from()
    assert defaults.d_model == 128  # the CPU defaults


def all_fields() -> list[dataclasses.Field]:
    return [*dataclasses.fields(TransformerConfig), *dataclasses.fields(TrainingSettings)]


def test_every_field_of_the_config_and_settings_is_a_flag():
    hints = {**typing.get_type_hints(TransformerConfig), **typing.get_type_hints(TrainingSettings)}
    for field in all_fields():
        flag = FLAGS.flags[field.name]
        choices = typing.get_args(hints[field.name])
        if hints[field.name] is bool:
            cases = [([flag], True), ([f"--no-{flag[2:]}"], False)]
        elif typing.get_origin(hints[field.name]) is typing.Literal:
            cases = [([flag, choices[-1]], choices[-1])]
        elif float in (hints[field.name], *choices):
            cases = [([flag, "0.25"], 0.25)]
        elif int in (hints[field.name], *choices):
            cases = [([flag, "7"], 7)]
        else:
            cases = [([flag, "some/path"], "some/path")]
        for arguments, value in cases:
            args = build_parser().parse_args(["train", *arguments])
            given = overrides(args)
            assert given == {field.name: value}, arguments
            assert type(given[field.name]) is type(value), arguments


def test_no_flags_override_a_config_file_and_absent_flags_do_not(tmp_path):
    booleans = [field.name for field in all_fields() if field.type == "bool"]
    assert {"mixed_precision", "jit_compile", "shared_vocab", "norm_first"} <= set(booleans)
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({name: True for name in booleans} | {"epochs": 3}))

    config, settings = settings_from("--config", str(config_path))
    values = config.to_dict() | settings.to_dict()
    assert all(values[name] is True for name in booleans) and settings.epochs == 3

    negated = [f"--no-{FLAGS.flags[name][2:]}" for name in booleans]
    config, settings = settings_from("--config", str(config_path), *negated)
    values = config.to_dict() | settings.to_dict()
    assert all(values[name] is False for name in booleans) and settings.epochs == 3


def test_help_lists_every_flag_in_a_named_group(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    headings = re.findall(r"^(\S[^\n]*):$", text, flags=re.MULTILINE)
    assert headings == ["options", "model", "data", "vocabulary", "run length and evaluation",
                        "batching", "optimization", "hardware"]
    for field in all_fields():
        assert f"\n  {FLAGS.flags[field.name]}" in text, field.name
    assert "--mixed-precision, --no-mixed-precision" in text
    assert "--d-model N           width of every sub-layer output" in text


def test_new_flags_reach_the_settings(tmp_path):
    _, settings = settings_from(
        "--steps", "100", "--save-every", "10", "--eval-every", "20", "--eval-sentences", "30",
        "--patience", "4", "--batch-tokens", "4096", "--accumulate-steps", "2",
        "--shuffle-buffer", "1000", "--vocab-sample-size", "500", "--vocab", str(tmp_path),
    )
    assert (settings.steps, settings.save_every, settings.eval_every) == (100, 10, 20)
    assert (settings.eval_sentences, settings.patience) == (30, 4)
    assert (settings.batch_tokens, settings.accumulate_steps) == (4096, 2)
    assert (settings.shuffle_buffer, settings.vocab_sample_size) == (1000, 500)
    assert settings.vocab_dir == str(tmp_path)


def test_a_preset_that_the_config_breaks_names_both(tmp_path, capsys):
    config_path = tmp_path / "heads.json"
    config_path.write_text(json.dumps({"num_heads": 3}))  # d_model 512 is not a multiple of 3
    status = main(["train", "--preset", "transformer_base", "--config", str(config_path),
                   "--run-dir", str(tmp_path / "run")])
    assert status == 1
    error = capsys.readouterr().err
    assert f"{config_path} over preset transformer_base:" in error and "num_heads" in error


@pytest.fixture
def marked_vocabulary(tmp_path) -> Path:
    """The demo task's vocabularies plus a token no learner would pick from the data."""
    english, german = demo_vocabularies()
    directory = tmp_path / "other_run" / "vocab"
    tokenizers_from_vocabularies(directory, [*english, "zzmarker"], german)
    return directory


def test_reuses_a_vocabulary_directory_without_learning(
    data, tmp_path, marked_vocabulary, monkeypatch, capsys
):
    def no_learning(*args, **kwargs):
        raise AssertionError("a vocabulary was learned")

    monkeypatch.setattr("keras_transformer.text.vocabulary.build_tokenizers", no_learning)
    config = write_config(tmp_path / "tiny.json", steps=2, save_every=2)
    run_dir = tmp_path / "run"
    status = main(["train", "--tsv", str(data["tsv"]), "--config", str(config),
                   "--vocab", str(marked_vocabulary), "--run-dir", str(run_dir)])
    assert status == 0
    for side in ("source", "target"):
        copied = (run_dir / "vocab" / side / "vocab.txt").read_text()
        assert copied == (marked_vocabulary / side / "vocab.txt").read_text()
    run = load_run(run_dir, compile=False)
    assert "zzmarker" in run.source_tokenizer.vocabulary
    assert run.config.source_vocab_size == len(demo_vocabularies()[0]) + 1
    assert f"Model: {run.model.count_params():,} parameters." in capsys.readouterr().out


@pytest.mark.parametrize("shared, message", [
    (None, "no such vocabulary directory"),
    (True, "holds separate source and target vocabularies, but shared_vocab is true"),
])
def test_a_vocabulary_that_does_not_fit_is_refused(
    data, tmp_path, marked_vocabulary, capsys, shared, message
):
    vocab = marked_vocabulary if shared else tmp_path / "missing"
    config = write_config(tmp_path / "tiny.json", steps=2, shared_vocab=bool(shared))
    status = main(["train", "--tsv", str(data["tsv"]), "--config", str(config),
                   "--vocab", str(vocab), "--run-dir", str(tmp_path / "run")])
    assert status == 1
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_step_run_resumes_after_kill_9_and_ends_at_exactly_steps(data, tmp_path):
    # 11 optimizer steps of 2 accumulated token batches each, saved every 3: intervals end at
    # steps 3, 6, 9 and 11. A pass over the data is ~4 batches, so every interval ends in the
    # middle of one.
    config = write_config(tmp_path / "tiny.json", steps=11, save_every=3, accumulate_steps=2,
                          batch_tokens=512, average_checkpoints=3)
    run_dir = tmp_path / "run"
    command = cli("--tsv", str(data["tsv"]), "--config", str(config), "--run-dir", str(run_dir))
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
    assert 1 <= saved_epoch < 4, "killed too late to test resuming"
    killed_history = json.loads((run_dir / "history.json").read_text())
    assert killed_history["step"][:saved_epoch] == [3, 6, 9][:saved_epoch]

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    epochs_run = [line.split()[1] for line in second.stdout.splitlines()
                  if line.startswith("Epoch ")]
    assert epochs_run == [f"{epoch}/4" for epoch in range(saved_epoch + 1, 5)]
    history = json.loads((run_dir / "history.json").read_text())
    assert history["epoch"] == [1, 2, 3, 4]
    assert history["step"] == [3, 6, 9, 11]  # optimizer updates: exactly `steps`
    assert history["loss"][:saved_epoch] == killed_history["loss"][:saved_epoch]
    assert history["loss"][-1] < 0.9 * history["loss"][0]
    # The checkpoints to average survived the kill: the last 3, across the resume.
    checkpoints = sorted(path.name for path in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["step-0000000006.npz", "step-0000000009.npz", "step-0000000011.npz"]
    assert "Average of the last 3 checkpoints" in second.stdout
    assert not (run_dir / "backup").exists()


def test_train_help_lists_the_step_and_batching_flags(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    for flag in ("--steps", "--save-every", "--eval-every", "--eval-sentences", "--patience",
                 "--batch-tokens", "--accumulate-steps", "--shuffle-buffer",
                 "--vocab-sample-size", "--vocab", "--preset"):
        assert flag in text
