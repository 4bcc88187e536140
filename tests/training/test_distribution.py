"""Data parallelism reaches the same losses as one device: MirroredStrategy over two logical CPUs
and MultiWorkerMirroredStrategy over two local worker processes, each reading its own pairs.

Why the results can be compared tightly: the training set is exactly one batch (7 pairs), so every
step sees the same pairs whatever order the shuffle (whose state depends on how often the data set
was iterated) puts them in; dropout is off and the seed fixes the initial weights. The two replicas
(or workers) get 4 and 3 of the pairs, unequal numbers of target tokens: only because every real
token weighs the same whatever replica it is on (`TokenWeightedSteps`) do their updates and logged
losses equal the one-device batch's (a mean of the replicas' means would not). What is left is
float32 summation order (gradients summed across replicas instead of within one batch): about
1e-7 relative per step; over 8 steps we allow 1e-5.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.run_dir import load_run, load_run_config, save_run_config
from keras_transformer.settings import TrainingSettings
from keras_transformer.training.distribution import is_chief, make_strategy, worker_name
from keras_transformer.training.inputs import load_corpora, worker_training_dataset
from keras_transformer.training.trainer import train

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGLISH = ("one", "two", "three", "four", "five", "six", "seven", "eight")
GERMAN = ("eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht")
CONFIG = TransformerConfig(
    num_encoder_layers=1, num_decoder_layers=1, d_model=16, num_heads=2, d_ff=32, dropout=0.0,
    max_length=8, label_smoothing=0.1,
)
RELATIVE_TOLERANCE = 1e-5


def write_pairs(path_prefix: Path, count: int, seed: int | None) -> tuple[str, str]:
    """`count` pairs "w1 w2 w3 w4" -> the German words in reverse order, 4 tokens each side.

    Without a seed, pair i holds words i..i+3 (mod 8), so each word occurs three or four times
    in 7 pairs and becomes one vocabulary token.
    """
    rng = random.Random(seed)
    sources, targets = [], []
    for index in range(count):
        if seed is None:
            words = [(index + k) % len(ENGLISH) for k in range(4)]
        else:
            words = [rng.randrange(len(ENGLISH)) for _ in range(4)]
        sources.append(" ".join(ENGLISH[w] for w in words))
        targets.append(" ".join(GERMAN[w] for w in reversed(words)))
    source, target = Path(f"{path_prefix}.en"), Path(f"{path_prefix}.de")
    source.write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")
    target.write_text("".join(f"{t}\n" for t in targets), encoding="utf-8")
    return str(source), str(target)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Config file, and the losses of the same training on one device (run in this process)."""
    root = tmp_path_factory.mktemp("distribution")
    train_source, train_target = write_pairs(root / "train", 7, seed=None)
    val_source, val_target = write_pairs(root / "val", 16, seed=1)
    settings = TrainingSettings(
        source_file=train_source, target_file=train_target, val_source_file=val_source,
        val_target_file=val_target, epochs=2, steps_per_epoch=4, batch_size=8, warmup_steps=4,
        learning_rate_scale=0.1, vocab_size=100, seed=3,
    )
    config_path = root / "config.json"
    save_run_config(config_path, CONFIG, settings)
    one_device = train(CONFIG, settings, root / "one_device", verbose=0)
    vocab = one_device.target_tokenizer.vocabulary
    assert all(word in vocab for word in GERMAN)  # whole words: 4 tokens per sentence
    return root, config_path, one_device.history


def assert_same_losses(history: dict, reference: dict) -> None:
    for key in ("loss", "val_loss", "val_masked_accuracy"):
        np.testing.assert_allclose(history[key], reference[key], rtol=RELATIVE_TOLERANCE,
                                   err_msg=key)


def subprocess_env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def test_default_strategy_is_the_chief_and_owns_the_run_directory(monkeypatch):
    strategy = make_strategy("default")
    assert is_chief(strategy) and worker_name(strategy) is None
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        make_strategy("multi_worker")
    with pytest.raises(ValueError, match="unknown strategy 'tpu'"):
        make_strategy("tpu")


@pytest.mark.slow
def test_mirrored_over_two_cpus_matches_one_device(setup):
    root, config_path, reference = setup
    script = textwrap.dedent(f"""
        import json, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from keras_transformer.run_dir import load_run_config
        from keras_transformer.training import train
        from keras_transformer.training.distribution import make_strategy
        print("DEVICES", json.dumps(make_strategy("mirrored").extended.worker_devices))
        config, settings = load_run_config({str(config_path)!r})
        run = train(config, settings.replace(strategy="mirrored"), {str(root / "mirrored")!r},
                    verbose=0)
        print("HISTORY", json.dumps(run.history))
    """)
    result = subprocess.run([sys.executable, "-c", script], env=subprocess_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert [device[-5:] for device in json.loads(lines["DEVICES"])] == ["CPU:0", "CPU:1"]
    assert_same_losses(json.loads(lines["HISTORY"]), reference)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_two_workers(config_path: Path, run_dir: Path) -> list[str]:
    """Trains with `keras-transformer train --strategy multi_worker` in two local worker
    processes (a cluster over 127.0.0.1, from `TF_CONFIG`); returns their standard outputs."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        command = [sys.executable, "-m", "keras_transformer", "train", "--config",
                   str(config_path), "--run-dir", str(run_dir), "--strategy", "multi_worker"]
        processes.append(subprocess.Popen(
            command, env=subprocess_env(TF_CONFIG=json.dumps(tf_config)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=300))
    finally:
        for process in processes:
            process.kill()
    failed = [f"worker {index}: {stderr[-3000:]}" for index, (process, (_, stderr))
              in enumerate(zip(processes, outputs, strict=True)) if process.returncode != 0]
    assert not failed, "\n".join(failed)
    return [stdout for stdout, _ in outputs]


@pytest.mark.slow
def test_multi_worker_over_two_processes_matches_one_device(setup):
    """Each worker reads every other pair (one file per side, two workers: 4 and 3 pairs) and
    batches them (at most batch_size 8 / 2 workers): one step over the two workers' batches is
    one update on their union, the one-device batch."""
    root, config_path, reference = setup
    run_dir = root / "multi_worker"
    outputs = run_two_workers(config_path, run_dir)
    assert "best val_loss" in outputs[0]  # the chief reports the run
    assert_same_losses(json.loads((run_dir / "history.json").read_text()), reference)
    # Only the chief writes the run directory; the other worker keeps its backup to itself.
    assert (run_dir / "model.keras").is_file()
    assert (run_dir / "workers" / "worker_1" / "config.json").is_file()
    assert not (run_dir / "workers" / "worker_1" / "model.keras").exists()


@pytest.mark.slow
def test_multi_worker_epochs_end_when_the_longest_stream_ends(setup):
    """Two shards of 24 and 8 pairs, batches of 4 per worker, 2 batches accumulated per step:
    worker 0 has about 3 steps of data per epoch, worker 1 about 1. Collective ops would
    deadlock if one worker stopped first; instead each epoch lasts until the last worker's stream
    ends, the worker that has run out adding empty batches, which weigh nothing in the
    token-weighted update, and the step that finds the end counts no update."""
    root, _, _ = setup
    directory = root / "uneven"
    directory.mkdir()
    write_pairs(directory / "train-0", 24, seed=4)
    write_pairs(directory / "train-1", 8, seed=5)
    config, settings = load_run_config(root / "config.json")
    settings = settings.replace(
        source_file=str(directory / "train-*.en"), target_file=str(directory / "train-*.de"),
        steps_per_epoch=None, epochs=2, accumulate_steps=2,
    )
    config_path = directory / "config.json"
    save_run_config(config_path, config, settings)
    run_dir = directory / "run"
    run_two_workers(config_path, run_dir)
    run = load_run(run_dir, compile=False)
    data = load_corpora(settings)
    steps = [
        sum(1 for _ in worker_training_dataset(
            data, run.source_tokenizer, run.target_tokenizer, run.config, settings,
            tf.distribute.InputContext(2, index, 2),
        ))
        for index in range(2)
    ]
    assert steps[0] >= 3 and steps[1] <= 1  # (pieces of split words may add a batch)
    history = json.loads((run_dir / "history.json").read_text())
    assert history["step"] == [steps[0], 2 * steps[0]]
    assert np.isfinite(history["loss"]).all() and np.isfinite(history["val_loss"]).all()
    assert {"model.keras", "config.json", "history.json", "run_info.json", "vocab"} <= {
        path.name for path in run_dir.iterdir()
    }
