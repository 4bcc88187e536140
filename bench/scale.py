"""Training on corpora of WMT14's size: start-up, memory and throughput against corpus size.

Prints one table, asserts nothing. For each size (default 0.5M and 4.5M pairs, WMT14 English-German
has 4.5M), a synthetic German -> English corpus shaped like news text is written once
(`bench/synthetic_corpus.py`: Multi30k sentences whose word types are renamed in every
repetition, so that unique words keep growing with size), then:

1. the real command runs, as a user would start it:
   `keras-transformer train --source-file … --target-file … --val-source-file <Multi30k val>
   --preset multi30k_small --steps 2K --save-every K` (the preset's model, vocabulary size and
   bfloat16 mixed precision). From its output the bench reads
   - vocabulary learning time: the vocabulary learner's progress line ("done in X s");
   - time to the first optimizer step: from starting the command to the trainer's line
     "first optimizer step", which it prints when that step has finished;
   - peak RSS up to the first step: the process's VmHWM (peak resident set) read from
     /proc/<pid>/status at that moment;
   - training throughput: real (non-padding) target tokens per second of the second save
     interval (the first includes tracing), from the run's history.json.
2. the input pipeline alone, in this process: the streamed corpus (`pair_dataset`, a 100,000-pair
   shuffle buffer) through `make_dataset` with the run's vocabulary and the preset's batching,
   no model: real target tokens per second over `--pipeline-seconds` after a warm-up.

    python bench/scale.py                       # 0.5M and 4.5M pairs, ~30 minutes on 2 cores
    python bench/scale.py --sizes 100000        # a quick look
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
MULTI30K = REPO_ROOT.parent / "shared" / "data" / "multi30k"
sys.path.insert(0, str(REPO_ROOT / "bench"))

from synthetic_corpus import write_corpus  # noqa: E402

VOCABULARY_LINE = re.compile(r"building vocabulary \(([^)]*)\).*done in ([\d.]+) s")
FIRST_STEP_LINE = "first optimizer step"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500_000, 4_500_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/keras_transformer_scale"),
                        help="where corpora and runs are written (GBs for 4.5M pairs)")
    parser.add_argument("--interval", type=int, default=20,
                        help="optimizer steps per save interval (two are run)")
    parser.add_argument("--preset", default="multi30k_small")
    parser.add_argument("--pipeline-seconds", type=float, default=30.0)
    return parser.parse_args()


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size so far (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def run_training(source: Path, target: Path, run_dir: Path, args) -> dict:
    """Runs `keras-transformer train` and reads the start-up figures off its output."""
    command = [
        sys.executable, "-m", "keras_transformer", "train",
        "--source-file", str(source), "--target-file", str(target),
        "--val-source-file", str(MULTI30K / "val.de"),
        "--val-target-file", str(MULTI30K / "val.en"),
        "--preset", args.preset, "--steps", str(2 * args.interval),
        "--save-every", str(args.interval), "--run-dir", str(run_dir),
    ]
    figures: dict = {"vocabulary_seconds": 0.0}
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1, cwd=REPO_ROOT)
    log = []

    def read_output():
        for line in process.stdout:
            log.append(line)
            # Progress bars rewrite their line with carriage returns.
            for part in line.split("\r"):
                match = VOCABULARY_LINE.search(part)
                if match:
                    figures["vocabulary_seconds"] += float(match.group(2))
                if FIRST_STEP_LINE in part and "first_step_seconds" not in figures:
                    figures["first_step_seconds"] = time.monotonic() - start
                    figures["peak_rss_mb"] = peak_rss_mb(process.pid)

    reader = threading.Thread(target=read_output)
    reader.start()
    process.wait()
    reader.join()
    if process.returncode:
        sys.stderr.write("".join(log[-30:]))
        raise RuntimeError(f"{' '.join(command)} failed with status {process.returncode}")
    history = json.loads((run_dir / "history.json").read_text())
    figures["train_target_tokens_per_second"] = history["target_tokens_per_second"][-1]
    figures["total_seconds"] = time.monotonic() - start
    return figures


def pipeline_tokens_per_second(source: Path, target: Path, run_dir: Path, args) -> float:
    """Real target tokens/s of the streamed input pipeline alone (no model), with the run's
    vocabulary and batching."""
    import tensorflow as tf

    from keras_transformer.run_dir import RunPaths, load_run_config
    from keras_transformer.text.corpus import CorpusFiles, pair_dataset
    from keras_transformer.text.data import make_dataset
    from keras_transformer.text.tokenizer_pair import load_tokenizers

    config, settings = load_run_config(RunPaths(run_dir).config)
    source_tokenizer, target_tokenizer = load_tokenizers(RunPaths(run_dir).vocab)
    pairs = pair_dataset(CorpusFiles(source=str(source), target=str(target)),
                         shuffle_buffer=settings.shuffle_buffer, seed=0)
    batching = {"batch_size": settings.batch_size, "batch_tokens": settings.batch_tokens}
    batches = iter(make_dataset(pairs, source_tokenizer, target_tokenizer,
                                max_length=config.max_length, **batching).repeat())
    for _ in range(20):  # warm-up: tracing, buffers filling
        next(batches)
    tokens, start = 0, time.monotonic()
    while time.monotonic() - start < args.pipeline_seconds:
        _, labels = next(batches)
        tokens += int(tf.math.count_nonzero(labels))
    return tokens / (time.monotonic() - start)


def main() -> None:
    args = parse_args()
    rows = []
    for size in args.sizes:
        corpus_dir = args.workdir / f"corpus_{size}"
        source, target = corpus_dir / "train.de", corpus_dir / "train.en"
        if not (source.is_file() and target.is_file()):
            write_corpus(size, corpus_dir)
        run_dir = args.workdir / f"run_{size}"
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        figures = run_training(source, target, run_dir, args)
        figures["pipeline_target_tokens_per_second"] = pipeline_tokens_per_second(
            source, target, run_dir, args
        )
        rows.append((size, figures))
        print(f"{size:,} pairs: {json.dumps(figures)}", flush=True)

    print("\n| pairs | vocabulary (s) | first step (s) | peak RSS to first step (MB) | "
          "input pipeline (target tok/s) | training, " + args.preset + " (target tok/s) |")
    print("|---|---|---|---|---|---|")
    for size, figures in rows:
        print(f"| {size:,} | {figures['vocabulary_seconds']:.1f} | "
              f"{figures['first_step_seconds']:.1f} | {figures['peak_rss_mb']:,.0f} | "
              f"{figures['pipeline_target_tokens_per_second']:,.0f} | "
              f"{figures['train_target_tokens_per_second']:,.0f} |")
    if len(rows) > 1:
        first, last = rows[0][1]["peak_rss_mb"], rows[-1][1]["peak_rss_mb"]
        print(f"\npeak RSS, {rows[-1][0]:,} vs {rows[0][0]:,} pairs: {last / first:.2f}x")


if __name__ == "__main__":
    main()
