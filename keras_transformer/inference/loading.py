"""Open a translator from disk: a training run directory, a SavedModel version directory, or an
export base directory (its highest version), behind one `translate(sentences)` call."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.inference.defaults import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH
from keras_transformer.inference.translator import (
    ATTENTION_SIGNATURE,
    OPTIONS_SIGNATURE,
    SERVING_SIGNATURE,
    Translator,
)
from keras_transformer.run_dir import RunPaths, load_run


def find_saved_model(path: str | os.PathLike) -> Path | None:
    """The SavedModel at `path`: `path` itself if it holds `saved_model.pb`, else its
    highest-numbered version subdirectory that does; None if there is none."""
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    if not path.is_dir():
        return None
    versions = [
        int(child.name)
        for child in path.iterdir()
        if child.name.isdigit() and (child / "saved_model.pb").is_file()
    ]
    return path / str(max(versions)) if versions else None


@dataclasses.dataclass(frozen=True)
class CrossAttention:
    """Where each generated target piece looked in the source.

    Attributes:
        translation: the translated sentence.
        weights: float32 `(num_layers, num_heads, target_length, source_length)`; row `i` is the
            attention while producing `target_pieces[i]`.
        source_pieces: the source word pieces.
        target_pieces: the generated word pieces, then `[END]`.
    """

    translation: str
    weights: np.ndarray
    source_pieces: list[str]
    target_pieces: list[str]


class LocalTranslator:
    """Translates with a model on this machine.

    Args:
        path: a run directory (`config.json` + `model.keras`), a SavedModel version directory,
            or an export base directory (the highest version is used).
        beam_width: beam width (1 = greedy). For a run directory, default `DEFAULT_BEAM_WIDTH`;
            for an export, default: what it was exported with.
        alpha: length-penalty exponent; default `DEFAULT_ALPHA` for a run directory, or for an
            export when `beam_width` is given, else what the export was made with.
        batch_size: sentences per call to the model.

    Raises:
        FileNotFoundError: if `path` is none of these.

    Example (needs an export on disk, so the doctest run skips it):
        >>> translator = LocalTranslator("models/translator")  # doctest: +SKIP
        >>> translator.translate(["Ein Mann fährt Fahrrad."])  # doctest: +SKIP
        ['A man rides a bicycle.']
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        beam_width: int | None = None,
        alpha: float | None = None,
        batch_size: int = 32,
    ):
        path = Path(path)
        self.batch_size = batch_size
        if RunPaths(path).has_model():
            run = load_run(path, compile=False)
            # Kept on self: a tf.function method holds only a weak reference to its instance.
            self._translator = translator = Translator(
                run.model,
                run.source_tokenizer,
                run.target_tokenizer,
                beam_width=DEFAULT_BEAM_WIDTH if beam_width is None else beam_width,
                alpha=DEFAULT_ALPHA if alpha is None else alpha,
            )
            self.description = f"run directory {path}"
            self._call = translator.translate
            self._attention = translator.attention
            return
        saved_model = find_saved_model(path)
        if saved_model is None:
            raise FileNotFoundError(
                f"{path}: not a run directory (config.json + model.keras), a SavedModel "
                "directory (saved_model.pb) or an export base directory (<base>/<version>/)"
            )
        self._loaded = tf.saved_model.load(os.fspath(saved_model))
        self.description = f"SavedModel {saved_model}"
        self._attention = self._loaded.signatures.get(ATTENTION_SIGNATURE)
        if beam_width is None and alpha is None:
            signature = self._loaded.signatures[SERVING_SIGNATURE]
            self._call = lambda text: signature(text=text)
        else:
            signature = self._loaded.signatures[OPTIONS_SIGNATURE]
            options = dict(
                beam_width=tf.constant(DEFAULT_BEAM_WIDTH if beam_width is None else beam_width),
                alpha=tf.constant(DEFAULT_ALPHA if alpha is None else alpha, tf.float32),
            )
            self._call = lambda text: signature(text=text, **options)

    def attention(self, sentence: str) -> CrossAttention:
        """Translates one sentence and returns the cross-attention behind the translation."""
        if self._attention is None:
            raise ValueError(f"{self.description} has no '{ATTENTION_SIGNATURE}' signature")
        outputs = self._attention(text=tf.constant([sentence]))

        def pieces(row) -> list[str]:
            return [piece.decode("utf-8") for piece in row.numpy() if piece != b"[PAD]"]

        source, target = pieces(outputs["source_pieces"][0]), pieces(outputs["target_pieces"][0])
        return CrossAttention(
            translation=outputs["translation"][0].numpy().decode("utf-8"),
            weights=outputs["attention"][0, :, :, : len(target), : len(source)].numpy(),
            source_pieces=source,
            target_pieces=target,
        )

    def translate(self, sentences: Sequence[str]) -> list[str]:
        """Translates sentences, `batch_size` at a time, similar lengths batched together."""
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        translations: list[str] = [""] * len(sentences)
        for start in range(0, len(order), self.batch_size):
            indices = order[start : start + self.batch_size]
            outputs = self._call(tf.constant([sentences[index] for index in indices]))
            for index, text in zip(indices, outputs["translation"].numpy(), strict=True):
                translations[index] = text.decode("utf-8")
        return translations
