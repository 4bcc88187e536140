"""Serving benchmark: throughput and latency of the local server, batching on vs off, and the
server's overhead over calling the SavedModel in-process.

    python bench/serve.py --model_base_path models/translator [--sentences val.de]

Starts `python -m serving` itself (batching off, then on) on free ports, sends single-sentence
requests from 1, 8 and 32 concurrent clients, and prints sentences/s with p50/p99 latency. With
batching off it also times batches of 32 sentences in-process and through REST and gRPC.
Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from serving.client import GrpcClient, RestClient  # noqa: E402
from serving.process import LocalServer  # noqa: E402

SENTENCES = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Zwei Kinder spielen im Sand am Strand.",
    "Eine Frau liest ein Buch im Park.",
    "Ein Hund rennt über eine grüne Wiese.",
    "Mehrere Menschen warten an einer Bushaltestelle.",
    "Ein kleines Mädchen isst ein Eis.",
    "Ein Mann in einem roten Hemd spielt Gitarre.",
    "Eine Gruppe von Freunden sitzt an einem Tisch und lacht.",
    "Ein Junge springt in einen Swimmingpool.",
    "Zwei Männer arbeiten auf einer Baustelle.",
    "Eine ältere Frau geht mit ihrem Hund spazieren.",
    "Ein Koch bereitet in einer Küche Essen zu.",
    "Ein Fußballspieler schießt den Ball ins Tor.",
    "Eine Katze schläft auf einem Sofa.",
    "Ein Mann fotografiert die Berge.",
    "Kinder laufen durch einen Wasserstrahl.",
]


def load_sentences(path: str | None) -> list[str]:
    if path is None:
        return SENTENCES
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line]


def latest_version(base_path: str) -> Path:
    versions = [p for p in Path(base_path).iterdir() if p.name.isdigit() and p.is_dir()]
    if not versions:
        raise SystemExit(f"No version directory under {base_path}")
    return max(versions, key=lambda p: int(p.name))


@contextlib.contextmanager
def server(args: argparse.Namespace, batching: bool):
    """The local server (`python -m serving`); yields (REST client, gRPC client)."""
    with tempfile.TemporaryDirectory() as scratch:
        flags = [
            f"--model_name={args.model_name}",
            f"--model_base_path={os.path.abspath(args.model_base_path)}",
            f"--max_instances_per_request={max(args.batch, 1024)}",
        ]
        if batching:
            params = Path(scratch) / "batching.txt"
            params.write_text(
                f"max_batch_size {{ value: {args.max_batch_size} }}\n"
                f"batch_timeout_micros {{ value: {args.batch_timeout_micros} }}\n"
                f"num_batch_threads {{ value: {args.num_batch_threads} }}\n"
                "max_enqueued_batches { value: 1000 }\n"
            )
            flags += ["--enable_batching", f"--batching_parameters_file={params}"]
        options = {"signature_name": args.signature_name, "input_name": args.input_name,
                   "output_name": args.output_name, "timeout": 600}
        with LocalServer(flags, Path(scratch) / "server.log") as local:
            local.wait_ready(args.model_name, timeout=600)
            grpc_client = GrpcClient(local.grpc_target, args.model_name, **options)
            try:
                yield RestClient(local.rest_url, args.model_name, **options), grpc_client
            finally:
                grpc_client.close()


def run_load(client, sentences: list[str], concurrency: int, requests: int) -> dict:
    """`requests` single-sentence requests from `concurrency` threads."""
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker():
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            start = time.perf_counter()
            client.translate([sentences[index % len(sentences)]])
            with lock:
                latencies.append(time.perf_counter() - start)

    for sentence in sentences[:concurrency]:  # warm up connections and the model
        client.translate([sentence])
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    wall = time.perf_counter() - start
    return {
        "throughput": requests / wall,
        "p50": float(np.percentile(latencies, 50)) * 1e3,
        "p99": float(np.percentile(latencies, 99)) * 1e3,
    }


def overhead_seconds(args: argparse.Namespace, batch: list[str], clients: dict) -> dict:
    """Median time of one batch in-process and through each client, measured interleaved so
    that background load affects all of them alike."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    model = tf.saved_model.load(str(latest_version(args.model_base_path)))
    function = model.signatures[args.signature_name]
    calls = {"in-process": lambda: function(**{args.input_name: tf.constant(batch)})}
    calls.update({name: (lambda c=client: c.translate(batch)) for name, client in clients.items()})
    times: dict[str, list[float]] = {name: [] for name in calls}
    for repeat in range(args.repeats + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if repeat:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_base_path", required=True)
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--signature_name", default="serving_default")
    parser.add_argument("--input_name", default="text")
    parser.add_argument("--output_name", default="translation")
    parser.add_argument("--sentences", help="a text file, one sentence per line")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests", type=int, default=128, help="requests per level")
    parser.add_argument("--batch", type=int, default=32, help="batch for the overhead figure")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_timeout_micros", type=int, default=0)
    parser.add_argument("--num_batch_threads", type=int, default=1)
    args = parser.parse_args(argv)

    sentences = load_sentences(args.sentences)
    levels = [int(c) for c in args.concurrency.split(",")]
    batch = [sentences[i % len(sentences)] for i in range(args.batch)]
    print(f"model {args.model_name} version {latest_version(args.model_base_path).name}, "
          f"{len(sentences)} sentences, {os.cpu_count()} CPUs, {args.requests} requests per row")

    results = {}
    for batching in (False, True):
        with server(args, batching) as (rest, grpc_client):
            for concurrency in levels:
                results[batching, concurrency] = run_load(rest, sentences, concurrency,
                                                          args.requests)
            if not batching:
                seconds = overhead_seconds(args, batch, {"REST": rest, "gRPC": grpc_client})

    print(f"\n{'batching':<9}{'clients':>8}{'sentences/s':>13}{'p50 ms':>9}{'p99 ms':>9}")
    for (batching, concurrency), row in results.items():
        print(f"{'on' if batching else 'off':<9}{concurrency:>8}{row['throughput']:>13.1f}"
              f"{row['p50']:>9.1f}{row['p99']:>9.1f}")
    top = max(levels)
    speedup = results[True, top]["throughput"] / results[False, top]["throughput"]
    print(f"\nbatching speed-up at {top} clients: {speedup:.2f}x (target >= 4x)")

    local = seconds.pop("in-process")
    figures = ", ".join(
        f"{name} {value * 1e3:.1f} ms ({value / local - 1:+.1%})" for name, value in seconds.items()
    )
    print(f"batch of {args.batch}: in-process {local * 1e3:.1f} ms, {figures} "
          "(target overhead <= 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
