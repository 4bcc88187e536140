"""Validation by BLEU during training: greedy translations of validation sentences, scored with
sacreBLEU, logged as `val_bleu` every few save intervals; at the end, beam-search BLEU over a grid
of length penalties to choose the kept model and its decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras
import sacrebleu
import tensorflow as tf

from keras_transformer.inference.defaults import DEFAULT_ALPHA
from keras_transformer.inference.translator import Translator


class BleuScorer:
    """sacreBLEU of a model's translations of fixed validation sentences.

    Translation uses the project's cached decoding (`Translator`), greedy by default, traced
    once and run on the model's current weights at every call, so one scorer serves the whole
    run (also a checkpoint average set into the same model). With a beam, the length penalty is
    an argument of each call, so one traced search scores every alpha.

    Args:
        model: a model from `build_transformer`.
        source_tokenizer: tokenizer of the source language.
        target_tokenizer: tokenizer of the target language.
        sources: validation source sentences.
        references: their reference translations.
        lowercase: score case-insensitively (for vocabularies built from lower-cased text,
            whose translations come out lower-cased).
        batch_size: sentences translated per call; sentences are sorted by length first, so
            that a batch does not wait for one long sentence.
        beam_width: 1 for greedy decoding, more for beam search.

    Example:
        >>> scorer = BleuScorer(model, source, target, sources, references)  # doctest: +SKIP
        >>> scorer()  # e.g. 27.3  # doctest: +SKIP
    """

    def __init__(
        self,
        model: keras.Model,
        source_tokenizer: tf.Module,
        target_tokenizer: tf.Module,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        lowercase: bool = False,
        batch_size: int = 64,
        beam_width: int = 1,
    ):
        if len(sources) != len(references) or not sources:
            raise ValueError(
                f"need as many references as sources (at least one), got {len(sources)} "
                f"sources and {len(references)} references"
            )
        self.translator = Translator(
            model, source_tokenizer=source_tokenizer, target_tokenizer=target_tokenizer,
            beam_width=beam_width,
        )
        self.sources = list(sources)
        self.references = list(references)
        self.lowercase = lowercase
        self.batch_size = batch_size

    def translate(self, sentences: Sequence[str], alpha: float = DEFAULT_ALPHA) -> list[str]:
        """Translations of `sentences`, in their order (`alpha`: the length-penalty exponent of
        a beam search; greedy choices do not depend on it)."""
        order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
        translations = [""] * len(sentences)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            text = tf.constant([sentences[i] for i in chunk])
            if self.translator.beam_width == 1:
                outputs = self.translator.translate(text)
            else:
                outputs = self.translator.translate_with_options(
                    text, tf.constant(self.translator.beam_width), tf.constant(alpha, tf.float32)
                )
            for index, text in zip(chunk, outputs["translation"].numpy(), strict=True):
                translations[index] = text.decode("utf-8")
        return translations

    def __call__(self, alpha: float = DEFAULT_ALPHA) -> float:
        """Corpus BLEU (0-100) of the model's current translations of the sources."""
        hypotheses = self.translate(self.sources, alpha)
        return sacrebleu.corpus_bleu(
            hypotheses, [self.references], lowercase=self.lowercase
        ).score


class LengthPenaltySearch:
    """The best beam-search BLEU of a model's current weights over a grid of length penalties.

    Each call scores every alpha of the grid with `scorer` (a `BleuScorer` with a beam) and
    remembers the scores, so that the caller can read which alpha won.

    Args:
        scorer: a `BleuScorer` with `beam_width` > 1.
        alphas: the GNMT length-penalty exponents to try.

    Example:
        >>> search = LengthPenaltySearch(beam_scorer, (0.6, 1.0, 1.4))  # doctest: +SKIP
        >>> search(), search.best_alpha  # e.g. (43.6, 1.4)  # doctest: +SKIP
    """

    def __init__(self, scorer: BleuScorer, alphas: Sequence[float]):
        if scorer.translator.beam_width < 2 or not alphas:
            raise ValueError(
                "a length-penalty search needs a beam search (beam_width >= 2) and at least "
                f"one alpha, got beam_width {scorer.translator.beam_width} and alphas "
                f"{list(alphas)}"
            )
        self.scorer = scorer
        self.alphas = tuple(float(alpha) for alpha in alphas)
        self.scores: dict[float, float] = {}

    def __call__(self) -> float:
        """The best BLEU (0-100) over the grid; `scores` holds each alpha's."""
        self.scores = {alpha: self.scorer(alpha) for alpha in self.alphas}
        return self.scores[self.best_alpha]

    @property
    def best_alpha(self) -> float:
        """The alpha with the highest BLEU of the last call (the smallest of any tie)."""
        if not self.scores:
            raise RuntimeError("call the search before asking for its best alpha")
        return max(self.scores, key=lambda alpha: (self.scores[alpha], -alpha))


class BleuEvaluation(keras.callbacks.Callback):
    """Adds `val_bleu` to the logs every `every` epochs and after the last one.

    Put it before the callbacks that read `val_bleu` (checkpoint, history, TensorBoard, early
    stopping). In a step-based run an epoch is one save interval, so `every` is
    `eval_every / save_every`. The last epoch (the end of the run, of the time budget or of the
    step limit) is always scored, so that the final weights get their chance to be the best.

    Args:
        score: returns the validation BLEU of the model's current weights (a `BleuScorer`).
        every: score every this many epochs.
    """

    def __init__(self, score: Callable[[], float], every: int = 1):
        super().__init__()
        self.score = score
        self.every = every

    def on_epoch_end(self, epoch, logs=None):
        last = self.model.stop_training or epoch + 1 >= self.params.get("epochs", epoch + 1)
        if logs is not None and ((epoch + 1) % self.every == 0 or last):
            logs["val_bleu"] = self.score()
