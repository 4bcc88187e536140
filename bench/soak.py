"""Soak and bad-input benchmark: the local server under mixed REST + gRPC load, malformed requests
interleaved with good ones, and a version swap in the middle.

    python bench/soak.py --model_base_path /tmp/m30k --sentences val.de

Copies the newest version of the export into a scratch base path, starts `python -m serving` on
127.0.0.1 with batching on (`serving/deploy/batching_parameters.txt`) and a 1 MiB body limit,
asks every sentence once over REST and gRPC for a reference answer (both must agree), warms the
server up with `--warmup` requests at full concurrency, then runs one schedule, bounded in count
and time, from `--concurrency` client coroutines (`bench/loadgen.py`):

- `--requests` good single-sentence requests, alternating REST row, gRPC, REST columnar and gRPC;
  a good request fails unless it answers 200 / OK with a non-empty translation (answers that
  differ from the reference are counted apart: batching may legitimately change a near tie);
- `--bad` malformed requests spread evenly among them, cycling through `bad_requests()`:
  broken JSON, wrong types, huge bodies, deep nesting, invalid UTF-8, wrong shapes, unknown
  models / versions / labels / signatures, undecodable protobuf; each must be refused with a
  4xx status (gRPC: a code that maps to one), never a 5xx, never a crash;
- halfway through the schedule a copy of the version is renamed into the base path as the next
  version: the server loads it and unloads the old one while the load goes on.

Prints one table (with every 5xx and every failed good request listed below it) and returns 1
if a target is missed. The server's RSS is read with psutil once the model answers, after the
warm-up (the start of the run), every 10% of the schedule, every 0.5 s for the peak, and at the
end; the growth target compares the end with the start.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import numpy as np
import psutil
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from loadgen import GRPC, REST_COLUMNAR, REST_ROW, AsyncClients, closed_loop  # noqa: E402

from serving.errors import http_status  # noqa: E402
from serving.process import LocalServer  # noqa: E402

BATCHING_FILE = REPO_ROOT / "serving" / "deploy" / "batching_parameters.txt"
MAX_REQUEST_BYTES = 1 << 20
MAX_INSTANCES = 64
# Server log lines that show a version swap, and the resident memory once the old one is freed.
SWAP_EVENTS = ("Successfully loaded servable", "Unloaded servable", "Freed an unloaded servable")
SENTENCES = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Zwei Kinder spielen im Sand am Strand.",
    "Eine Frau liest ein Buch im Park.",
    "Ein Hund rennt über eine grüne Wiese.",
]


@dataclasses.dataclass(frozen=True)
class BadRequest:
    """One malformed request: REST (`method`, `path` under /v1/models/, raw `body`) or gRPC
    (`grpc_body`: the raw bytes of a PredictRequest, valid or not)."""

    kind: str
    method: str = "POST"
    path: str = ""
    body: bytes = b""
    grpc_body: bytes | None = None


def _tensor(dtype: int, dims: list[int], **values) -> tensor_pb2.TensorProto:
    shape = tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims]
    )
    return tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, **values)


def _grpc(model: str, inputs: dict[str, tensor_pb2.TensorProto], **spec) -> bytes:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, key, value)
    for name, proto in inputs.items():
        request.inputs[name].CopyFrom(proto)
    return request.SerializeToString()


def bad_requests(model: str, input_name: str, sentence: str) -> list[BadRequest]:
    """The malformed requests, one per kind (the translator's one string input `input_name`)."""
    predict = f"{model}:predict"
    text = sentence.encode()
    string = types_pb2.DT_STRING

    def rest(kind: str, body: bytes | str | dict, path: str = predict, method: str = "POST"):
        if isinstance(body, dict):
            body = json.dumps(body)
        return BadRequest(kind, method, path, body.encode() if isinstance(body, str) else body)

    def rpc(kind: str, *args, **spec) -> BadRequest:
        return BadRequest(kind, grpc_body=_grpc(*args, **spec))

    one = {input_name: _tensor(string, [1], string_val=[text])}
    deep = 100_000
    # Parses (below the recursion limit) but is far deeper than any tensor.
    nested = "[" * 900 + json.dumps(sentence) + "]" * 900
    # A PredictRequest whose model_spec.name is not UTF-8 (proto3 refuses to parse it).
    name = model.encode() + b"\xff\xfe"
    spec = b"\n" + bytes([len(name)]) + name
    return [
        rest("broken JSON", b'{"instances": ["' + text + b'", '),
        rest("empty body", b""),
        rest("JSON not an object", json.dumps([sentence])),
        rest("number for a string input", {"instances": [1, 2]}),
        rest("bool for a string input", {"inputs": {input_name: True}}),
        rest("null for a string input", {"instances": [None]}),
        rest("signature_name not a string", {"signature_name": 7, "instances": [sentence]}),
        rest("NaN for a string input", b'{"instances": [NaN]}'),
        rest("bad base64", {"instances": [{"b64": "!!not base64"}]}),
        rest("huge body (2 MiB > 1 MiB limit)", {"instances": ["x" * (2 << 20)]}),
        rest("too many instances", {"instances": [sentence] * (MAX_INSTANCES + 1)}),
        rest(f"deep nesting ({deep:,} levels)", "{\"instances\": " + "[" * deep + "]" * deep + "}"),
        rest("deep nesting (900 levels)", '{"instances": ' + nested + "}"),
        rest("deep nesting beside instances", '{"instances": 5, "x": ' + nested + "}"),
        rest("invalid UTF-8 in JSON syntax", b'{"instances"\xff: ["' + text + b'"]}'),
        rest("wrong shape (rank 2)", {"instances": [[sentence, sentence]]}),
        rest("ragged instances", {"instances": [[sentence], [sentence, sentence]]}),
        rest("scalar input", {"inputs": sentence}),
        rest("empty instances", {"instances": []}),
        rest("unknown model", {"instances": [sentence]}, "nope:predict"),
        rest("unknown version", {"instances": [sentence]}, f"{model}/versions/999:predict"),
        rest("version beyond int64", {"instances": [sentence]},
             f"{model}/versions/99999999999999999999:predict"),
        rest("unknown label", {"instances": [sentence]}, f"{model}/labels/nope:predict"),
        rest("unknown signature", {"signature_name": "nope", "instances": [sentence]}),
        rest("unknown input name", {"instances": [{"nope": sentence}]}),
        rest("unknown verb", {"instances": [sentence]}, f"{model}:explain"),
        rest("wrong method", b"", f"{model}:predict", "PUT"),
        rest("classify on a translator", {"examples": [{"x": 1.0}]}, f"{model}:classify"),
        rpc("gRPC: unknown model", "nope", one),
        rpc("gRPC: unknown version", model, one, version=999),
        rpc("gRPC: unknown signature", model, one, signature_name="nope"),
        rpc("gRPC: int32 for a string input", model,
            {input_name: _tensor(types_pb2.DT_INT32, [1], int_val=[1])}),
        rpc("gRPC: wrong shape (rank 2)", model,
            {input_name: _tensor(string, [1, 2], string_val=[text, text])}),
        rpc("gRPC: no inputs", model, {}),
        rpc("gRPC: unknown input name", model, {"nope": one[input_name]}),
        rpc("gRPC: 2^40 elements from one value", model,
            {input_name: _tensor(string, [1 << 40], string_val=[text])}),
        rpc("gRPC: negative dimension", model,
            {input_name: _tensor(string, [-7], string_val=[text])}),
        rpc("gRPC: too many instances", model,
            {input_name: _tensor(string, [MAX_INSTANCES + 1], string_val=[text])}),
        rpc("gRPC: tensor_content for strings", model,
            {input_name: _tensor(string, [1], tensor_content=b"\x00" * 8)}),
        BadRequest("gRPC: message over the size limit",
                   grpc_body=_grpc(model, {input_name: _tensor(
                       string, [1], string_val=[b"x" * (2 << 20)])})),
        BadRequest("gRPC: not a protobuf message", grpc_body=b"\xff\xff\xff\xff"),
        BadRequest("gRPC: invalid UTF-8 in the model name",
                   grpc_body=b"\n" + bytes([len(spec)]) + spec),
    ]


PROTOCOLS = (REST_ROW, GRPC, REST_COLUMNAR, GRPC)  # good request i uses PROTOCOLS[i % 4]


async def send_bad(clients: AsyncClients, request: BadRequest) -> tuple[int, str]:
    """Sends one malformed request; returns (HTTP status or its gRPC equivalent, message)."""
    if request.grpc_body is None:
        status, answer = await clients.rest(request.method, request.path, request.body)
        return status, str(answer.get("error", answer))[:160]
    try:
        await clients.predict_bytes(request.grpc_body)
    except grpc.aio.AioRpcError as error:
        return http_status(error.code().name), f"{error.code().name}: {error.details()[:140]}"
    return 200, "OK"


@dataclasses.dataclass
class Tally:
    """What the load saw."""

    latencies: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"REST": [], "gRPC": []}
    )  # by API: REST row and columnar together
    good_failures: list[str] = dataclasses.field(default_factory=list)
    changed_answers: int = 0
    bad_statuses: Counter = dataclasses.field(default_factory=Counter)
    bad_5xx: list[str] = dataclasses.field(default_factory=list)
    bad_accepted: list[str] = dataclasses.field(default_factory=list)
    bad_by_kind: Counter = dataclasses.field(default_factory=Counter)  # (kind, status) -> count
    versions: Counter = dataclasses.field(default_factory=Counter)
    done: int = 0
    rss_trace: list[tuple[int, int]] = dataclasses.field(default_factory=list)


class RssSampler:
    """Samples a process's resident set every 0.5 s."""

    def __init__(self, pid: int):
        self._process = psutil.Process(pid)
        self.peak = 0
        self._task: asyncio.Task | None = None

    def now(self) -> int:
        rss = self._process.memory_info().rss
        self.peak = max(self.peak, rss)
        return rss

    async def _sample(self) -> None:
        while True:
            self.now()
            await asyncio.sleep(0.5)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def run_schedule(clients: AsyncClients, args, sentences: list[str],
                       references: dict[str, str], bads: list[BadRequest],
                       swap: Callable[[], Awaitable[None]] | None, rss: RssSampler) -> Tally:
    """Sends the good and bad requests in one interleaved schedule from `concurrency` workers;
    calls `swap` when half the schedule is handed out and reads the RSS every 10%."""
    total = args.requests + args.bad
    every = total / max(args.bad, 1)
    bad_slots = {int(i * every + every / 2) for i in range(args.bad)}
    schedule = iter(range(total))
    tally = Tally()
    deadline = time.monotonic() + args.time_limit
    good_index, bad_index, swapped = 0, 0, None

    async def worker() -> None:
        nonlocal good_index, bad_index, swapped
        for slot in schedule:
            if time.monotonic() > deadline:
                return
            if swap is not None and swapped is None and slot >= total // 2:
                swapped = asyncio.ensure_future(swap())
            if slot in bad_slots:
                request = bads[bad_index % len(bads)]
                bad_index += 1
                try:
                    status, message = await send_bad(clients, request)
                except Exception as error:  # a dropped connection is a server failure too
                    status, message = 599, f"{type(error).__name__}: {error}"
                tally.bad_statuses[status // 100] += 1
                tally.bad_by_kind[request.kind, status] += 1
                if status >= 500:
                    tally.bad_5xx.append(f"{request.kind}: {status} {message}")
                elif status < 400:
                    tally.bad_accepted.append(f"{request.kind}: {status}")
            else:
                index = good_index
                good_index += 1
                sentence = sentences[index % len(sentences)]
                start = time.perf_counter()
                protocol = PROTOCOLS[index % len(PROTOCOLS)]
                try:
                    translation, version = await clients.translate(sentence, protocol)
                except Exception as error:
                    tally.good_failures.append(f"request {index}: {type(error).__name__}: "
                                               f"{str(error)[:160]}")
                else:
                    tally.latencies["gRPC" if protocol == GRPC else "REST"].append(
                        time.perf_counter() - start
                    )
                    if version is not None:
                        tally.versions[version] += 1
                    if not translation:
                        tally.good_failures.append(f"request {index}: empty translation")
                    elif translation != references[sentence]:
                        tally.changed_answers += 1
            tally.done += 1
            if tally.done % max(total // 10, 1) == 0:
                tally.rss_trace.append((tally.done, rss.now()))

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    if swapped is not None:
        await swapped
    return tally


def latest_version(base_path: Path) -> Path:
    versions = [p for p in base_path.iterdir() if p.name.isdigit() and p.is_dir()]
    if not versions:
        raise SystemExit(f"error: no version directory under --model_base_path {base_path}")
    return max(versions, key=lambda p: int(p.name))


def copy_in_as_next_version(base: Path) -> int:
    """Copies the newest version aside, then renames it into place as the next number."""
    newest = latest_version(base)
    number = int(newest.name) + 1
    staging = base / f".{number}.incomplete"
    shutil.copytree(newest, staging)
    os.rename(staging, base / str(number))
    return number


async def soak(args: argparse.Namespace, base: Path, server: LocalServer,
               sentences: list[str]) -> dict:
    async with AsyncClients(server.rest_url, server.grpc_target, args.model_name,
                            args.input_name, args.output_name, timeout=120) as clients:
        references = {}
        for index, sentence in enumerate(sentences):  # the reference: REST and gRPC agree
            rest_answer, _ = await clients.translate(sentence, REST_ROW)
            grpc_answer, first_version = await clients.translate(sentence, GRPC)
            if rest_answer != grpc_answer:
                raise SystemExit(f"REST and gRPC disagree on sentence {index}: {sentence}")
            references[sentence] = rest_answer
        rss = RssSampler(server.process.pid)
        rss_loaded = rss.now()
        half = args.concurrency // 2
        await asyncio.gather(  # buffers for full batches are allocated here, not in the run
            closed_loop(clients, sentences, half, args.warmup // 2, REST_COLUMNAR),
            closed_loop(clients, sentences, args.concurrency - half, args.warmup // 2, GRPC),
        )
        rss_start = rss.now()
        rss.start()
        bads = bad_requests(args.model_name, args.input_name, sentences[0])
        swapped: list[int] = []

        async def swap() -> None:
            swapped.append(await asyncio.to_thread(copy_in_as_next_version, base))

        start = time.perf_counter()
        tally = await run_schedule(clients, args, sentences, references, bads,
                                   swap if args.swap else None, rss)
        wall = time.perf_counter() - start
        rss.stop()
        rss_end = rss.now()
        status_code, status = await clients.rest("GET", args.model_name)
    return {
        "tally": tally, "wall": wall, "rss": (rss_loaded, rss_start, rss_end, rss.peak),
        "first_version": first_version, "swapped": swapped[0] if swapped else None,
        "status": (status_code, status), "kinds": len(bads),
        "alive": server.process.poll() is None,
        "allocator": allocator(server.process.pid),
    }


def allocator(pid: int) -> str:
    """The server's malloc: jemalloc where `serving.allocator` preloaded it, else libc's."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    return "jemalloc (preloaded)" if "libjemalloc" in maps else "C library malloc"


def percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p99 = np.percentile(values, [50, 99]) * 1e3
    return f"{p50:.0f} / {p99:.0f} ms"


def report(args: argparse.Namespace, result: dict) -> int:
    tally: Tally = result["tally"]
    rss_loaded, rss_start, rss_end, rss_peak = result["rss"]
    growth = rss_end / rss_start - 1
    good = sum(len(v) for v in tally.latencies.values()) + len(tally.good_failures)
    bad = sum(tally.bad_statuses.values())
    states = {v["version"]: v["state"] for v in result["status"][1].get("model_version_status", [])}
    swapped = result["swapped"]
    new_answers = tally.versions.get(swapped, 0) if swapped else 0
    rows = [
        ("requests done", f"{tally.done:,} of {args.requests + args.bad:,} in "
                          f"{result['wall']:.0f} s (limit {args.time_limit:.0f} s)", "all"),
        ("good requests (REST / gRPC)",
         f"{len(tally.latencies['REST']):,} / {len(tally.latencies['gRPC']):,}", ""),
        ("good requests failed", f"{len(tally.good_failures)} of {good:,}", "0"),
        ("good answers differing from the reference", f"{tally.changed_answers}", ""),
        ("good latency p50 / p99, REST", percentiles(tally.latencies["REST"]), ""),
        ("good latency p50 / p99, gRPC", percentiles(tally.latencies["gRPC"]), ""),
        ("malformed requests (kinds)", f"{bad:,} ({result['kinds']})", ""),
        ("malformed answered 4xx / 5xx / 2xx", f"{tally.bad_statuses[4]} / "
         f"{len(tally.bad_5xx)} / {len(tally.bad_accepted)}", "- / 0 / -"),
        ("server allocator", result["allocator"], ""),
        ("server RSS loaded / after warm-up", f"{rss_loaded / 2**20:.0f} / "
         f"{rss_start / 2**20:.0f} MiB ({args.warmup:,} requests at concurrency "
         f"{args.concurrency})", ""),
        ("server RSS start -> end (peak)",
         f"{rss_start / 2**20:.0f} -> {rss_end / 2**20:.0f} MiB ({growth:+.1%}), "
         f"peak {rss_peak / 2**20:.0f} MiB", "< +10%"),
        ("server RSS every 10% of the requests",
         " ".join(f"{rss / 2**20:.0f}" for _, rss in tally.rss_trace) + " MiB", ""),
        ("version swap", f"v{result['first_version']} -> v{swapped}: gRPC answers from "
                         f"v{swapped}: {new_answers:,}; final states "
                         + ", ".join(f"v{v} {s}" for v, s in sorted(states.items())), ""),
        ("server alive at the end", "yes" if result["alive"] else "NO", "yes"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"\n{'figure':<{width}}  {'value':<60}  target")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<60}  {target}")
    if args.by_kind:
        print("\nmalformed requests by kind: status x count")
        for (kind, status), count in sorted(tally.bad_by_kind.items()):
            print(f"  {kind:<45} {status} x {count}")
    for title, lines in (("failed good requests", tally.good_failures),
                         ("malformed requests answered 5xx", tally.bad_5xx),
                         ("malformed requests answered 2xx", tally.bad_accepted)):
        if lines:
            print(f"\n{title}:")
            for line, count in Counter(lines).most_common():
                print(f"  {count} x {line}")
    missed = (tally.good_failures or tally.bad_5xx or growth >= 0.10 or not result["alive"]
              or tally.done < args.requests + args.bad or (args.swap and not new_answers))
    return 1 if missed else 0


def load_sentences(path: str | None, count: int) -> list[str]:
    if path is None:
        return SENTENCES
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line][:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_base_path", required=True, type=Path)
    parser.add_argument("--model_name", default="translator")
    parser.add_argument("--input_name", default="text")
    parser.add_argument("--output_name", default="translation")
    parser.add_argument("--sentences", help="a text file, one sentence per line")
    parser.add_argument("--distinct", type=int, default=32,
                        help="how many sentences of --sentences to cycle through")
    parser.add_argument("--requests", type=int, default=10_000, help="good requests")
    parser.add_argument("--bad", type=int, default=1_000, help="malformed requests")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=1_000,
                        help="good requests before the start RSS is read (not counted)")
    parser.add_argument("--by_kind", action="store_true",
                        help="also list each kind of malformed request with its answers")
    parser.add_argument("--swap", action=argparse.BooleanOptionalAction, default=True,
                        help="copy in a new version halfway through")
    parser.add_argument("--time_limit", type=float, default=900,
                        help="seconds after which no new request is sent")
    args = parser.parse_args(argv)
    if not args.model_base_path.is_dir():
        parser.error(f"--model_base_path {args.model_base_path} is not a directory")

    sentences = load_sentences(args.sentences, args.distinct)
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        base = Path(scratch) / args.model_name
        version = latest_version(args.model_base_path)
        shutil.copytree(version, base / version.name)
        flags = [
            f"--model_name={args.model_name}", f"--model_base_path={base}",
            "--enable_batching", f"--batching_parameters_file={BATCHING_FILE}",
            f"--max_request_bytes={MAX_REQUEST_BYTES}",
            f"--max_instances_per_request={MAX_INSTANCES}", "--file_system_poll_wait_seconds=1",
        ]
        print(f"model {args.model_name} version {version.name} from {args.model_base_path}: "
              f"{args.requests:,} good + {args.bad:,} malformed requests, concurrency "
              f"{args.concurrency}, {len(sentences)} sentences, {os.cpu_count()} CPUs", flush=True)
        with LocalServer(flags, Path(scratch) / "server.log") as server:
            server.wait_ready(args.model_name, timeout=600)
            result = asyncio.run(soak(args, base, server, sentences))
            log = server.log()
        status = report(args, result)
    print(f"\nserver log: {log.count('Traceback')} tracebacks")
    for line in log.splitlines():  # the swap's steps, with the memory once v1 is freed
        if any(event in line for event in SWAP_EVENTS):
            print(f"  {line.strip()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
