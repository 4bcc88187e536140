"""Open a translator from disk in one call: `load_translator(path)` takes a training run
directory, a SavedModel version directory, or an export base directory (its highest version),
and returns an object with `translate(sentences)` and `attention(sentence)`.

The command line (`translate`, `evaluate`, `plot-attention`) goes through the same function, so a
script gets exactly the translations the command prints for the same path and options.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.inference.compute_dtype import compute_dtype_copy
from keras_transformer.inference.defaults import decoding_options
from keras_transformer.inference.translator import (
    ATTENTION_SIGNATURE,
    OPTIONS_SIGNATURE,
    SERVING_SIGNATURE,
    Translator,
)
from keras_transformer.run_dir import Run, RunPaths, load_run


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


# A batch of sentences, `tf.string (batch,)`, -> the outputs of a translation signature.
TranslateFunction = Callable[[tf.Tensor], dict]


def _check_positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")


class LoadedTranslator(abc.ABC):
    """What `load_translator` returns: a model on this machine that translates lists of strings.

    Subclasses say how to get a batch translation function for a beam width and alpha
    (`_translate_function`) and the cross-attention function (`_attention_function`); this class
    batches sentences of similar lengths together and unpacks the outputs.

    Args:
        description: what was loaded, for messages ("run directory runs/x").
        beam_width: default beam width of `translate`, or None (see `load_translator`).
        alpha: default length-penalty exponent of `translate`, or None.
        batch_size: sentences per call to the model.
    """

    def __init__(
        self, description: str, *, beam_width: int | None, alpha: float | None, batch_size: int
    ):
        _check_positive("beam_width", beam_width)
        _check_positive("batch_size", batch_size)
        self.description = description
        self.beam_width = beam_width
        self.alpha = alpha
        self.batch_size = batch_size

    @abc.abstractmethod
    def _translate_function(
        self, beam_width: int | None, alpha: float | None
    ) -> TranslateFunction:
        """The batch translation function for these options (None: the model's default)."""

    @abc.abstractmethod
    def _attention_function(self) -> Callable[..., dict]:
        """The cross-attention function (`Translator.attention`'s outputs for `text=`)."""

    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam_width: int | None = None,
        alpha: float | None = None,
    ) -> list[str]:
        """Translates sentences, `batch_size` at a time, similar lengths batched together.

        Args:
            sentences: source sentences.
            beam_width: beam width for this call (1 = greedy); default: the translator's.
            alpha: length-penalty exponent for this call; default: the translator's.

        Returns:
            one translation per sentence, in their order.
        """
        _check_positive("beam_width", beam_width)
        call = self._translate_function(
            self.beam_width if beam_width is None else beam_width,
            self.alpha if alpha is None else alpha,
        )
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        translations: list[str] = [""] * len(sentences)
        for start in range(0, len(order), self.batch_size):
            indices = order[start : start + self.batch_size]
            outputs = call(tf.constant([sentences[index] for index in indices]))
            for index, text in zip(indices, outputs["translation"].numpy(), strict=True):
                translations[index] = text.decode("utf-8")
        return translations

    def attention(self, sentence: str) -> CrossAttention:
        """Translates one sentence (with the translator's own options) and returns the
        cross-attention behind the translation."""
        outputs = self._attention_function()(text=tf.constant([sentence]))

        def pieces(row) -> list[str]:
            return [piece.decode("utf-8") for piece in row.numpy() if piece != b"[PAD]"]

        source, target = pieces(outputs["source_pieces"][0]), pieces(outputs["target_pieces"][0])
        return CrossAttention(
            translation=outputs["translation"][0].numpy().decode("utf-8"),
            weights=outputs["attention"][0, :, :, : len(target), : len(source)].numpy(),
            source_pieces=source,
            target_pieces=target,
        )


class RunTranslator(LoadedTranslator):
    """Translates with the best model of a training run (`model.keras` and its tokenizers).

    With neither option set, the decoding the run chose on validation (`tune_decoding`), if it
    chose one; other unset options are the library's defaults (`DEFAULT_BEAM_WIDTH`,
    `DEFAULT_ALPHA`). One `Translator` is built, and traced, per beam width and alpha asked
    for, and kept.
    """

    def __init__(self, run: Run, **options):
        super().__init__(f"run directory {run.directory}", **options)
        self.run = run
        self.model = compute_dtype_copy(run.model)  # same outputs, no per-step weight casts
        # Kept here: a tf.function method holds only a weak reference to its instance.
        self._translators: dict[tuple[int, float], Translator] = {}

    def _translator(self, beam_width: int | None, alpha: float | None) -> Translator:
        key = decoding_options(beam_width, alpha, self.run.decoding)
        if key not in self._translators:
            self._translators[key] = Translator(
                self.model,
                self.run.source_tokenizer,
                self.run.target_tokenizer,
                beam_width=key[0],
                alpha=key[1],
            )
        return self._translators[key]

    def _translate_function(self, beam_width, alpha) -> TranslateFunction:
        return self._translator(beam_width, alpha).translate

    def _attention_function(self):
        return self._translator(self.beam_width, self.alpha).attention


class ExportTranslator(LoadedTranslator):
    """Translates with an exported SavedModel through its signatures, as a server would.

    With neither a beam width nor an alpha set, translations come from `serving_default` (the
    options the model was exported with); otherwise from `translate_with_options`, an unset
    option taking the library's default. `attention` always uses the exported options.
    """

    def __init__(self, saved_model: str | os.PathLike, **options):
        super().__init__(f"SavedModel {saved_model}", **options)
        self.loaded = tf.saved_model.load(os.fspath(saved_model))

    def _translate_function(self, beam_width, alpha) -> TranslateFunction:
        if beam_width is None and alpha is None:
            signature = self.loaded.signatures[SERVING_SIGNATURE]
            return lambda text: signature(text=text)
        signature = self.loaded.signatures[OPTIONS_SIGNATURE]
        beam_width, alpha = decoding_options(beam_width, alpha)
        options = dict(beam_width=tf.constant(beam_width), alpha=tf.constant(alpha, tf.float32))
        return lambda text: signature(text=text, **options)

    def _attention_function(self):
        if ATTENTION_SIGNATURE not in self.loaded.signatures:
            raise ValueError(f"{self.description} has no '{ATTENTION_SIGNATURE}' signature")
        return self.loaded.signatures[ATTENTION_SIGNATURE]


def load_translator(
    path: str | os.PathLike,
    *,
    beam_width: int | None = None,
    alpha: float | None = None,
    batch_size: int = 32,
) -> LoadedTranslator:
    """Opens a trained model for translation, from a run directory or an export.

    Args:
        path: a run directory (`config.json` + `model.keras`, as `train` writes it), a SavedModel
            version directory (`saved_model.pb`), or an export base directory (its highest
            version is used).
        beam_width: beam width of `translate` (1 = greedy; each call may choose its own).
            None: `DEFAULT_BEAM_WIDTH` (4), or without an `alpha` either, what the export
            was exported with or the run chose on validation (`tune_decoding`).
        alpha: length-penalty exponent; None: `DEFAULT_ALPHA` (0.6), or without a
            `beam_width` either, what the export was exported with or the run chose.
        batch_size: sentences per call to the model.

    Returns:
        a `RunTranslator` or an `ExportTranslator`: `translate(sentences, beam_width=...,
        alpha=...) -> list[str]`, `attention(sentence) -> CrossAttention`, `description`.

    Raises:
        FileNotFoundError: if `path` is none of these (or a file of the run is missing).
        ValueError: a file of the run cannot be read, or an option is out of range.

    Example (needs a trained model on disk, so the doctest run skips it):
        >>> translator = load_translator("models/translator")  # doctest: +SKIP
        >>> translator.translate(["Ein Mann fährt Fahrrad."], beam_width=1)  # doctest: +SKIP
        ['A man rides a bicycle.']
    """
    path = Path(path)
    options = dict(beam_width=beam_width, alpha=alpha, batch_size=batch_size)
    if RunPaths(path).has_model():
        return RunTranslator(load_run(path, compile=False), **options)
    saved_model = find_saved_model(path)
    if saved_model is None:
        raise FileNotFoundError(
            f"{path}: not a run directory (config.json + model.keras), a SavedModel "
            "directory (saved_model.pb) or an export base directory (<base>/<version>/)"
        )
    return ExportTranslator(saved_model, **options)

