"""`keras-transformer demo`: the whole product in one command, on the built-in data.

Trains a small model on the English -> German number task (no download), exports it in
TensorFlow Serving's layout, starts the local TF-Serving-compatible server, sends one REST
`:predict` request, prints the request and the translations, and stops the server. Any failed
step makes the command exit non-zero.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MODEL_NAME = "translator"
DEMO_SENTENCES = (
    "I have three hundred forty-two apples.",
    "The number is twelve.",
    "She sees seven thousand six hundred cats.",
)
# Small enough to learn the number task in a few minutes on 2 CPU cores.
DEMO_MODEL = {
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "d_model": 128,
    "num_heads": 4,
    "d_ff": 512,
    "dropout": 0.1,
    "max_length": 64,
    "label_smoothing": 0.1,
}
DEMO_TRAINING = {
    "epochs": 8,
    "batch_size": 64,
    "warmup_steps": 400,
    "learning_rate_scale": 1.0,
    "vocab_size": 1000,
}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="train on the built-in data, export, serve, answer a REST request",
        description="Train a small model on the built-in English -> German number data, export "
        "it, serve it with the local TF-Serving-compatible server, send a REST request and print "
        "the answer.",
    )
    parser.add_argument(
        "--workdir", default=".", help="where runs/demo and models/demo_translator go"
    )
    parser.add_argument(
        "--time-budget", type=float, default=4.0, metavar="MINUTES",
        help="training time (default 4 minutes)",
    )
    parser.add_argument("--epochs", type=int, default=DEMO_TRAINING["epochs"])
    parser.add_argument(
        "--steps-per-epoch", type=int, default=None, help="fixed steps per epoch (tests)"
    )
    parser.set_defaults(run=run)


def step(number: int, text: str) -> None:
    print(f"\n== [{number}/4] {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    import requests

    from keras_transformer.config import TransformerConfig
    from keras_transformer.export import export_run
    from keras_transformer.settings import TrainingSettings
    from keras_transformer.training.trainer import train
    from serving.process import LocalServer

    workdir = Path(args.workdir)
    run_dir = workdir / "runs" / "demo"
    base_path = (workdir / "models" / "demo_translator").resolve()

    step(1, f"training on the built-in English -> German number data into {run_dir}")
    settings = TrainingSettings(
        **{**DEMO_TRAINING, "epochs": args.epochs},
        steps_per_epoch=args.steps_per_epoch,
        time_budget_minutes=args.time_budget,
    )
    trained = train(TransformerConfig(**DEMO_MODEL), settings, run_dir, verbose=1)
    print(f"validation loss {min(trained.history['val_loss']):.3f}")

    step(2, f"exporting a SavedModel (tokenizers and beam search inside) under {base_path}")
    version_dir = export_run(run_dir, base_path)
    print(f"wrote {version_dir}")

    step(3, "starting the local TF-Serving-compatible server")
    with LocalServer(
        [f"--model_name={MODEL_NAME}", f"--model_base_path={base_path}"]
    ) as server:
        server.wait_ready(MODEL_NAME)
        print(f"REST on {server.rest_url}, gRPC on {server.grpc_target}")

        step(4, "asking it over REST")
        url = f"{server.rest_url}/v1/models/{MODEL_NAME}:predict"
        body = {"instances": list(DEMO_SENTENCES)}
        print(f"POST {url}\n{json.dumps(body, indent=2)}")
        response = requests.post(url, json=body, timeout=120)
        answer = json.dumps(response.json(), indent=2, ensure_ascii=False)
        print(f"HTTP {response.status_code}\n{answer}")
        response.raise_for_status()
        predictions = response.json()["predictions"]
    print("\nTranslations:")
    for source, prediction in zip(DEMO_SENTENCES, predictions, strict=True):
        print(f"  {source}  ->  {prediction['translation']}")
    if not all(prediction["translation"] for prediction in predictions):
        print("error: the server returned an empty translation")
        return 1
    return 0
