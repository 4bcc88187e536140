"""Serving benchmark: throughput and latency of the local server, batching on vs off, and the
server's overhead over calling the SavedModel in-process, for one or more exports in one run.

    python bench/serve.py --model_base_path /tmp/m30k --sentences val.de \\
        --model_base_path /tmp/demo_translator --sentences demo.txt

For each export (`--model_base_path`, repeatable; `--sentences` once for all of them or once per
export, in the same order) starts two `python -m serving` on free loopback ports, one with
batching off (the server's default: `--rest_api_num_threads` worker threads) and one with the
`--max_batch_size` / `--batch_timeout_micros` / `--num_batch_threads` given here (both with
`--tensorflow_intra_op_parallelism`, 1 by default), and:

- throughput: at each concurrency (1, 8, 32) sends single-sentence REST requests from that many
  closed-loop clients (`bench/loadgen.py`: asyncio, one thread), `--rounds` times alternating
  between the two servers so that both see the same background load; prints sentences/s, p50 /
  p99 latency, the server's CPU time per sentence (psutil: model, request path and batching
  together) and the mean batch the batching server ran (from its Prometheus page). With both
  servers keeping the cores busy, the batching gain is about the ratio of their CPU times per
  sentence: what batching saves in the model, not what the request path costs. So it depends on
  the export's search (named in each header, from the model card): beam search already runs
  `beam_width` rows per sentence at batch 1, which leaves batching less per-step work to share;
- overhead: times one batch of `--batch` sentences in-process (the SavedModel loaded in this
  process) and through REST and gRPC (`serving.client`, the batching-off server), `--repeats`
  rounds with the order rotated, and takes the median of each round's ratio to in-process;
- in-process batches: `--num_batch_threads` threads calling the SavedModel on batches of
  `--max_batch_size`, the ceiling of the batching server's throughput (no requests to read, no
  client on the cores, no wait for a batch to fill).

Ends with one row per export: overhead at batch 32, the batching gain (sentences/s on / off)
at the highest concurrency, the servers' CPU time per sentence off / on, and the batching
server's sentences/s there as a share of the in-process batches'. Client, servers and model
share the machine. Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from loadgen import AsyncClients, closed_loop  # noqa: E402  (bench/ is the script's folder)

from keras_transformer.model_card import read_model_card  # noqa: E402
from serving.client import GrpcClient, RestClient  # noqa: E402
from serving.process import LocalServer  # noqa: E402

METRICS_PATH = "/monitoring/prometheus/metrics"
PROCESSED_BATCH_SIZE = re.compile(
    r"^:tensorflow:serving:batching_session:processed_batch_size_(sum|count)\{\} (\S+)$", re.M
)

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


@dataclasses.dataclass(frozen=True)
class Export:
    """One model base path to measure and the sentences to send it."""

    base_path: Path
    sentences: list[str]

    @property
    def version(self) -> Path:
        return latest_version(self.base_path)

    @property
    def search(self) -> str:
        """The search the export runs, from its model card: "beam 4", "greedy" or "?"."""
        beam = read_model_card(self.version).get("decoding", {}).get("beam_width")
        return "?" if beam is None else "greedy" if beam == 1 else f"beam {beam}"

    def batch(self, start: int, size: int) -> list[str]:
        """`size` sentences from the `start`-th on, cycling through the file."""
        return [self.sentences[i % len(self.sentences)] for i in range(start, start + size)]


def load_sentences(path: str | None) -> list[str]:
    if path is None:
        return SENTENCES
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line]


def latest_version(base_path: Path) -> Path:
    versions = [p for p in base_path.iterdir() if p.name.isdigit() and p.is_dir()]
    if not versions:
        raise SystemExit(f"error: no version directory under --model_base_path {base_path}")
    return max(versions, key=lambda p: int(p.name))


@dataclasses.dataclass
class Server:
    """A running local server and the project's clients for it."""

    local: LocalServer
    rest: RestClient
    grpc: GrpcClient


@contextlib.contextmanager
def server(args: argparse.Namespace, export: Export, batching: bool):
    """The local server (`python -m serving`) with its Prometheus page on; yields a `Server`."""
    with tempfile.TemporaryDirectory() as scratch:
        monitoring = Path(scratch) / "monitoring.config"
        monitoring.write_text(f'prometheus_config {{ enable: true, path: "{METRICS_PATH}" }}\n')
        flags = [
            f"--model_name={args.model_name}",
            f"--model_base_path={export.base_path.resolve()}",
            f"--max_instances_per_request={max(args.batch, 1024)}",
            f"--monitoring_config_file={monitoring}",
            f"--tensorflow_intra_op_parallelism={args.tensorflow_intra_op_parallelism}",
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
                yield Server(local, RestClient(local.rest_url, args.model_name, **options),
                             grpc_client)
            finally:
                grpc_client.close()


def batches_so_far(url: str) -> tuple[float, float]:
    """(rows, batches) the server's batcher has run, from its Prometheus page."""
    page = requests.get(url + METRICS_PATH, timeout=30).text
    values = dict(PROCESSED_BATCH_SIZE.findall(page))
    return float(values.get("sum", 0)), float(values.get("count", 0))


def cpu_time(process: psutil.Process) -> float:
    """Seconds of CPU the process has used so far, its threads' user and system time."""
    times = process.cpu_times()
    return times.user + times.system


def load_signature(args: argparse.Namespace, export: Export):
    """The export's signature function, loaded in this process."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizers' ops)

    return tf.saved_model.load(str(export.version)).signatures[args.signature_name]


def in_process_batches(args: argparse.Namespace, export: Export, function, sentences: int) -> dict:
    """What the batching server's threads would do without a server: `num_batch_threads`
    threads calling the signature in-process on batches of `max_batch_size` sentences, about
    `sentences` in all, after one pass to warm up. Returns {"throughput" (sentences/s), "cpu ms"
    (this process's CPU time per sentence)}: the most the batching server could answer at full
    load, with no requests to read, no client sharing the cores and no wait for a batch to
    fill."""
    import tensorflow as tf

    size = args.max_batch_size
    batches = [tf.constant(export.batch(start, size))
               for start in range(0, max(sentences, size * args.num_batch_threads), size)]

    def call(batch):
        return function(**{args.input_name: batch})

    process = psutil.Process()
    with ThreadPoolExecutor(args.num_batch_threads) as threads:
        list(threads.map(call, batches))  # warm-up, as the servers had theirs
        start, start_cpu = time.perf_counter(), cpu_time(process)
        list(threads.map(call, batches))
        wall, cpu = time.perf_counter() - start, cpu_time(process) - start_cpu
    done = len(batches) * size
    return {"throughput": done / wall, "cpu ms": cpu / done * 1e3}


def overhead(args: argparse.Namespace, export: Export, function, clients: Server) -> dict:
    """One batch in-process, through REST and through gRPC, `repeats` rounds (order rotated each
    round). Returns each path's median seconds and the median of each round's ratio to the
    in-process time: rounds are seconds apart, so the ratio cancels slow changes in load."""
    import tensorflow as tf

    batch = export.batch(0, args.batch)
    calls = {
        "in-process": lambda: function(**{args.input_name: tf.constant(batch)}),
        "REST": lambda: clients.rest.translate(batch),
        "gRPC": lambda: clients.grpc.translate(batch),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for repeat in range(args.repeats + 1):
        order = order[1:] + order[:1]
        for name in order:
            start = time.perf_counter()
            calls[name]()
            if repeat:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    local = times.pop("in-process")
    return {
        "in-process": statistics.median(local),
        **{name: (statistics.median(values),
                  statistics.median(v / base for v, base in zip(values, local, strict=True)) - 1)
           for name, values in times.items()},
    }


async def throughput(args: argparse.Namespace, export: Export, off: Server, on: Server,
                     levels: list[int]) -> dict:
    """At each level, rounds alternate between the batching-off and -on servers, so that both see
    the same background load; returns a row per (batching, level)."""
    rows = {}
    processes = {False: psutil.Process(off.local.process.pid),
                 True: psutil.Process(on.local.process.pid)}
    options = {"input_name": args.input_name, "output_name": args.output_name}
    async with AsyncClients(off.local.rest_url, off.local.grpc_target, args.model_name,
                            **options) as off_clients, \
            AsyncClients(on.local.rest_url, on.local.grpc_target, args.model_name,
                         **options) as on_clients:
        servers = {False: off_clients, True: on_clients}
        for concurrency in levels:
            for clients in servers.values():  # opens the connections, warms the model up
                await closed_loop(clients, export.sentences, concurrency, concurrency)
            runs: dict[bool, list[dict]] = {False: [], True: []}
            cpu_seconds = dict.fromkeys(servers, 0.0)
            per_round = max(args.requests, args.requests_per_client * concurrency) // args.rounds
            before = await asyncio.to_thread(batches_so_far, on.local.rest_url)
            for _ in range(args.rounds):
                for batching, clients in servers.items():
                    start_cpu = cpu_time(processes[batching])
                    runs[batching].append(await closed_loop(
                        clients, export.sentences, concurrency, per_round))
                    cpu_seconds[batching] += cpu_time(processes[batching]) - start_cpu
            after = await asyncio.to_thread(batches_so_far, on.local.rest_url)
            rows_run, batches = np.subtract(after, before)
            for batching, parts in runs.items():
                latencies = np.concatenate([p["latencies"] for p in parts]) * 1e3
                sentences = sum(p["requests"] for p in parts)
                rows[batching, concurrency] = {
                    "throughput": sentences / sum(p["wall"] for p in parts),
                    "p50": np.percentile(latencies, 50),
                    "p99": np.percentile(latencies, 99),
                    "cpu ms": cpu_seconds[batching] / sentences * 1e3,
                    "mean batch": rows_run / batches if batching and batches else None,
                }
    return rows


def measure(args: argparse.Namespace, export: Export, levels: list[int]) -> dict:
    """Both servers run side by side: the throughput rows, then the overhead figures on the
    batching-off one and the in-process reference for the batching one (servers idle)."""
    with server(args, export, False) as off, server(args, export, True) as on:
        rows = asyncio.run(throughput(args, export, off, on, levels))
        function = load_signature(args, export)
        seconds = overhead(args, export, function, off)
        local = in_process_batches(args, export, function,
                                   args.requests_per_client * max(levels))
    return {"rows": rows, "overhead": seconds, "in-process batches": local}


def print_export(export: Export, result: dict) -> None:
    print(f"\n{export.base_path} (version {export.version.name}, {export.search}, "
          f"{len(export.sentences)} sentences)")
    print(f"{'batching':<9}{'clients':>8}{'sentences/s':>13}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'CPU ms/sentence':>17}{'mean batch':>12}")
    for (batching, concurrency), row in sorted(result["rows"].items()):
        mean = f"{row['mean batch']:.1f}" if row["mean batch"] else "-"
        print(f"{'on' if batching else 'off':<9}{concurrency:>8}{row['throughput']:>13.1f}"
              f"{row['p50']:>9.1f}{row['p99']:>9.1f}{row['cpu ms']:>17.2f}{mean:>12}")
    local = result["in-process batches"]
    print(f"{'in-process':<17}{local['throughput']:>13.1f}{'-':>9}{'-':>9}"
          f"{local['cpu ms']:>17.2f}  (no server: batch threads x max batch as batching on)")


def print_summary(args: argparse.Namespace, exports: list[Export], results: list[dict],
                  top: int) -> None:
    print(f"\n{'export':<24}{'search':>8}{'in-process':>12}{'REST':>20}{'gRPC':>20}"
          f"{f'gain at {top}':>12}{'CPU ratio':>11}{'of batches':>12}")
    for export, result in zip(exports, results, strict=True):
        figures = result["overhead"]
        paths = "".join(f"{f'{seconds * 1e3:.1f} ms ({ratio:+.1%})':>20}"
                        for seconds, ratio in (figures["REST"], figures["gRPC"]))
        off, on = result["rows"][False, top], result["rows"][True, top]
        print(f"{export.base_path.name:<24}{export.search:>8}"
              f"{figures['in-process'] * 1e3:>9.1f} ms{paths}"
              f"{on['throughput'] / off['throughput']:>11.2f}x"
              f"{off['cpu ms'] / on['cpu ms']:>10.2f}x"
              f"{on['throughput'] / result['in-process batches']['throughput']:>11.0%}")
    print(f"(overhead: batch of {args.batch}, median of {args.repeats} interleaved rounds' ratios "
          f"to in-process, target <= 10%; gain: sentences/s with batching on / off at {top} "
          "clients, target >= 3x; CPU ratio: the servers' CPU time per sentence, off / on; of "
          "batches: the batching server's sentences/s at that load over the in-process batches)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_base_path", action="append", required=True, type=Path,
                        help="an export's base path; repeat to measure several in one run")
    parser.add_argument("--sentences", action="append", default=[],
                        help="a text file, one sentence per line: once for every export or once "
                        "per --model_base_path, in the same order (default: built-in German)")
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--signature_name", default="serving_default")
    parser.add_argument("--input_name", default="text")
    parser.add_argument("--output_name", default="translation")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests", type=int, default=128,
                        help="least requests per level and server, split over --rounds")
    parser.add_argument("--requests_per_client", type=int, default=16,
                        help="requests per client and server at each level, if more than "
                        "--requests: a round of a few batches per batch thread is mostly its "
                        "ramp-up and tail")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternations between the batching-off and -on servers per level")
    parser.add_argument("--batch", type=int, default=32, help="batch for the overhead figure")
    parser.add_argument("--repeats", type=int, default=20)
    # Two batches of 16 in flight use both cores of a 2-core machine better than one of 32, and
    # 20 ms lets a batch fill while its clients send their next requests.
    parser.add_argument("--max_batch_size", type=int, default=16)
    parser.add_argument("--batch_timeout_micros", type=int, default=20_000)
    parser.add_argument("--num_batch_threads", type=int, default=2)
    # One thread per op: ops on a few rows of a small model cost more to split than to run, so
    # on 2 cores this served 1.3-1.7x more sentences with batching on (1.2-1.6x off) than
    # TensorFlow's default of every core. The in-process reference runs with the same setting.
    parser.add_argument("--tensorflow_intra_op_parallelism", type=int, default=1,
                        help="threads per TensorFlow op in the servers and for the in-process "
                        "reference (0: TensorFlow's choice)")
    args = parser.parse_args(argv)
    if args.tensorflow_intra_op_parallelism:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)

    bases = args.model_base_path
    if len(args.sentences) not in (0, 1, len(bases)):
        parser.error(f"--sentences given {len(args.sentences)} times for {len(bases)} "
                     "--model_base_path: give it once, or once per --model_base_path")
    for base in bases:
        if not base.is_dir():
            parser.error(f"--model_base_path {base} is not a directory")
    files = args.sentences if len(args.sentences) > 1 else args.sentences * len(bases)
    exports = [Export(base, load_sentences(files[i] if files else None))
               for i, base in enumerate(bases)]
    levels = [int(c) for c in args.concurrency.split(",")]
    print(f"{len(exports)} export(s), {os.cpu_count()} CPUs, at least {args.requests} requests "
          f"({args.requests_per_client} per client) per row; "
          f"batching on: max_batch_size {args.max_batch_size}, batch_timeout_micros "
          f"{args.batch_timeout_micros}, num_batch_threads {args.num_batch_threads}; "
          f"tensorflow_intra_op_parallelism {args.tensorflow_intra_op_parallelism}", flush=True)

    results = []
    for export in exports:
        results.append(measure(args, export, levels))
        print_export(export, results[-1])
    print_summary(args, exports, results, max(levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
