"""The model card: what a trained model is, what it learned from, how well it validated, which
code made it and how to call it, as JSON (for programs) and Markdown (for people).

An export carries its card in `<version>/assets.extra/` (`model_card.json`, `model_card.md`):
TensorFlow Serving ignores that folder, so the card travels with the model and changes nothing
about serving it. A run directory's card is built from its files when asked (`read_model_card`).

Card fields (JSON; absent where unknown):

    name           the run directory's name
    model          TransformerConfig fields
    vocabulary     {"source_size", "target_size", "shared"}
    data           {"train": {"files", "pairs", "skipped_empty", "skipped_too_long"},
                    "validation": {"files", "pairs", "held_out_fraction"}}
    training       {"epochs", "steps", "seconds", "settings": TrainingSettings fields}
    validation     the kept model's {"val_loss", "val_bleu", "bleu_signature", "bleu_sentences"}
    decoding       export only: {"beam_width", "alpha", "max_length", "xla_max_batch"}
    signatures     export only: {name: {"inputs": {name: {"dtype", "shape"}}, "outputs": ...}}
    trained_with   {"keras_transformer", "git_commit", "git_dirty", "tensorflow", "keras"}
    exported_with  export only, as trained_with
    exported_at    export only, UTC ISO 8601
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import subprocess
from pathlib import Path

from keras_transformer.inference.defaults import DEFAULT_EXTRA_LENGTH

CARD_JSON = Path("assets.extra") / "model_card.json"
CARD_MARKDOWN = Path("assets.extra") / "model_card.md"
# The directory holding the `keras_transformer` package: a git work tree's root when the project
# runs from its source tree (an editable install), else e.g. site-packages.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"


def _git(*args: str) -> str | None:
    """`git <args>` run in `SOURCE_ROOT`: its output, or None when git or the tree is missing."""
    try:
        result = subprocess.run(
            ["git", "-C", os.fspath(SOURCE_ROOT), *args],
            capture_output=True, text=True, timeout=30, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip()


def git_commit() -> tuple[str, bool | None]:
    """`(commit, dirty)` of the source tree the package runs from.

    Returns:
        `git rev-parse HEAD` and whether tracked files differ from it, when the package's
        directory is the top of a git work tree; else `("unknown", None)`: an installed copy
        (which may sit inside some other repository, e.g. a virtual environment in a checkout)
        has no commit of its own.
    """
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != SOURCE_ROOT:
        return UNKNOWN, None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return commit or UNKNOWN, None if changes is None else bool(changes)


def _distribution_version(package: str) -> str:
    """The installed version of the distribution providing the import name `package`."""
    names = importlib.metadata.packages_distributions().get(package, [])
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return UNKNOWN


def software() -> dict:
    """The code making a model: the project's version and git commit (see `git_commit`), and
    the TensorFlow and Keras versions."""
    import keras_transformer

    version = _distribution_version("keras_transformer")
    commit, dirty = git_commit()
    return {
        "keras_transformer": keras_transformer.__version__ if version == UNKNOWN else version,
        "git_commit": commit,
        "git_dirty": dirty,
        "tensorflow": _distribution_version("tensorflow"),
        "keras": _distribution_version("keras"),
    }


def _files(*names: str | None) -> list[str] | None:
    kept = [name for name in names if name is not None]
    return kept or None


def run_card(run_dir: str | os.PathLike) -> dict:
    """The card of a run directory, from its `config.json`, `history.json` and `run_info.json`
    (no model is loaded).

    Raises:
        FileNotFoundError, ValueError: naming the run's file that is missing or unreadable.
    """
    from keras_transformer.run_dir import RunPaths, load_run_config, read_history, read_run_info

    paths = RunPaths(Path(run_dir))
    config, settings = load_run_config(paths.config)
    history, info = read_history(paths.root), read_run_info(paths.root)
    counts = info.get("data", {})
    train_files = _files(settings.tsv_file) or _files(settings.source_file, settings.target_file)
    card = {
        "name": paths.root.resolve().name,
        "model": config.to_dict(),
        "vocabulary": {
            "source_size": config.source_vocab_size,
            "target_size": config.target_vocab_size,
            "shared": settings.shared_vocab,
        },
        "data": {
            "train": {"files": train_files or "built-in demo data", **counts.get("train", {})},
            "validation": {
                "files": _files(settings.val_source_file, settings.val_target_file),
                **counts.get("validation", {}),
            },
        },
        "training": {
            "epochs": (history.get("epoch") or [None])[-1],
            "steps": (history.get("step") or [None])[-1],
            "seconds": info.get("training_seconds"),
            "settings": settings.to_dict(),
        },
        "validation": info.get("validation"),
        "trained_with": info.get("software"),
    }
    return _without_unknowns(card)


def _without_unknowns(card: dict) -> dict:
    return {key: value for key, value in card.items() if value is not None}


def saved_model_signatures(saved_model_dir: str | os.PathLike) -> dict:
    """The serving signatures of a SavedModel, read from its `saved_model.pb` (the SignatureDefs
    a server sees, as `saved_model_cli show` lists them).

    Returns:
        `{name: {"method": ..., "inputs": {name: {"dtype": "string", "shape": [None]}},
        "outputs": {...}}}`, sorted by name; a shape is None when its rank is unknown, and
        None stands for a dimension of any size.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString((Path(saved_model_dir) / "saved_model.pb").read_bytes())
    (graph,) = [
        graph for graph in saved_model.meta_graphs if "serve" in graph.meta_info_def.tags
    ]

    def tensors(infos) -> dict:
        return {
            name: {
                "dtype": tf.dtypes.as_dtype(info.dtype).name,
                "shape": None if info.tensor_shape.unknown_rank else [
                    None if dim.size < 0 else dim.size for dim in info.tensor_shape.dim
                ],
            }
            for name, info in sorted(infos.items())
        }

    return {
        name: {
            "method": signature.method_name,
            "inputs": tensors(signature.inputs),
            "outputs": tensors(signature.outputs),
        }
        for name, signature in sorted(graph.signature_def.items())
        if not name.startswith("__")  # TensorFlow's own (__saved_model_init_op)
    }


def export_card(saved_model_dir: str | os.PathLike, decoding: dict, card: dict | None) -> dict:
    """The card of an export: the run's card (`run_card`, or None for a translator made
    elsewhere), the decoding options it was exported with, the signatures of the SavedModel
    written in `saved_model_dir`, and the code exporting it."""
    return {
        **(card or {}),
        "decoding": decoding,
        "signatures": saved_model_signatures(saved_model_dir),
        "exported_with": software(),
        "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_model_card(saved_model_dir: str | os.PathLike, card: dict) -> None:
    """Writes `card` as `assets.extra/model_card.json` and `model_card.md` in a SavedModel
    directory."""
    directory = Path(saved_model_dir)
    (directory / CARD_JSON).parent.mkdir(parents=True, exist_ok=True)
    (directory / CARD_JSON).write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    (directory / CARD_MARKDOWN).write_text(render_markdown(card), encoding="utf-8")


def read_model_card(path: str | os.PathLike) -> dict:
    """The card of a run directory (built from its files), or of an export (base or version
    directory: the card it carries; for an export made before cards existed, its signatures).

    Raises:
        FileNotFoundError: `path` is neither, or a file of the run is missing.
        ValueError: a file cannot be read (naming it).
    """
    from keras_transformer.inference.loading import find_saved_model
    from keras_transformer.run_dir import RunPaths

    path = Path(path)
    if RunPaths(path).config.is_file():
        return run_card(path)
    saved_model = find_saved_model(path)
    if saved_model is None:
        raise FileNotFoundError(
            f"{path}: not a run directory (config.json), a SavedModel directory "
            "(saved_model.pb) or an export base directory (<base>/<version>/)"
        )
    card_path = saved_model / CARD_JSON
    if not card_path.is_file():
        return {
            "name": saved_model.resolve().parent.name,
            "note": f"exported without a model card ({card_path} is missing)",
            "signatures": saved_model_signatures(saved_model),
        }
    try:
        return json.loads(card_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{card_path}:{error.lineno}: invalid JSON: {error.msg}") from error


def _value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_value(item) for item in value)
    return str(value)


def _table(rows: dict) -> list[str]:
    return ["| field | value |", "|---|---|",
            *(f"| {key} | {_value(value)} |" for key, value in rows.items())]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return str(datetime.timedelta(seconds=round(seconds)))


def _shape(shape: list | None) -> str:
    """`(None, 8)` style; None is a dimension of any size."""
    return "unknown rank" if shape is None else f"({', '.join(str(d) for d in shape)})"


def render_markdown(card: dict) -> str:
    """The card as Markdown: a section per field the card has."""
    lines = [f"# Model card: {card.get('name', 'translator')}", ""]
    if "note" in card:
        lines += [card["note"], ""]
    if "model" in card:
        lines += ["## Model", "", *_table(card["model"]), ""]
    if "vocabulary" in card:
        lines += ["## Vocabulary", "", *_table(card["vocabulary"]), ""]
    if "data" in card:
        lines += ["## Data", ""]
        for part in ("train", "validation"):
            facts = card["data"].get(part, {})
            lines += [f"- {part}: " + "; ".join(
                f"{key.replace('_', ' ')}: {_value(value)}"
                for key, value in facts.items() if value is not None
            )]
        lines += [""]
    if "training" in card:
        training = card["training"]
        # A step-based run's Keras epochs are its save intervals.
        unit = "epochs" if training.get("settings", {}).get("steps") is None else "save intervals"
        lines += [
            "## Training", "",
            f"{_value(training.get('epochs'))} {unit}, "
            f"{_value(training.get('steps'))} optimizer steps, "
            f"{_duration(training.get('seconds'))} (h:mm:ss).", "",
            "Settings:", "", *_table(training.get("settings", {})), "",
        ]
    if card.get("validation"):
        validation = card["validation"]
        lines += ["## Validation (the kept model)", "",
                  f"- loss: {_value(validation.get('val_loss'))}"]
        if "val_bleu" in validation:
            lines += [
                f"- BLEU: {validation['val_bleu']:.2f} on the first "
                f"{validation.get('bleu_sentences')} validation sentences, greedy decoding",
                f"- sacreBLEU signature: `{validation.get('bleu_signature')}`",
            ]
        lines += [""]
    if "decoding" in card:
        decoding = dict(card["decoding"])
        if decoding.get("max_length") is None:
            decoding["max_length"] = (f"source length + {DEFAULT_EXTRA_LENGTH}, at most the "
                                      "model's max_length")
        lines += ["## Decoding (exported with)", "", *_table(decoding), ""]
    for key, title in (("trained_with", "Trained with"), ("exported_with", "Exported with")):
        if key in card:
            lines += [f"## {title}", "", *_table(card[key]), ""]
    if "exported_at" in card:
        lines += [f"Exported at {card['exported_at']}.", ""]
    if "signatures" in card:
        lines += ["## Serving signatures", ""]
        for name, signature in card["signatures"].items():
            lines += [f"### `{name}`", "", "| | name | dtype | shape |", "|---|---|---|---|"]
            for side in ("inputs", "outputs"):
                lines += [
                    f"| {side[:-1]} | `{tensor}` | {spec['dtype']} | {_shape(spec['shape'])} |"
                    for tensor, spec in signature[side].items()
                ]
            lines += [""]
    return "\n".join(lines)
