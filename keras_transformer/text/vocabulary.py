"""WordPiece vocabularies learned from a corpus, and the source/target tokenizer pair on disk."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as vocab_builder

from keras_transformer.text.data import ParallelCorpus
from keras_transformer.text.tokenizer import (
    RESERVED_TOKENS,
    SubwordTokenizer,
    normalize_text,
)
from keras_transformer.text.tokenizer_pair import tokenizers_from_vocabularies

# The builder counts words in a Python loop over the data set's elements; feeding it batches of
# sentences instead of single ones makes that loop far shorter.
_COUNT_BATCH = 1024


def build_vocabulary(
    sentences: Sequence[str],
    *,
    vocab_size: int = 8000,
    lower_case: bool = False,
    min_count: int = 2,
    name: str = "text",
) -> list[str]:
    """Learns a WordPiece vocabulary with tensorflow-text's BERT vocabulary builder.

    The builder binary-searches a count threshold for sub-words between `min_count` (its
    `lower_thresh`) and the largest word count, aiming at `vocab_size`. A high `min_count` caps
    the vocabulary below `vocab_size` whatever that asks; a low one can make the search stop
    above `vocab_size`. Then the rarest multi-character pieces are dropped, never single
    characters, so every word seen stays spellable. Prints a progress line to stderr.

    Args:
        sentences: Training sentences of one language (or both, for a shared vocabulary).
        vocab_size: Maximum number of tokens, reserved tokens included.
        lower_case: Lower-case the text first (must match the tokenizer's setting).
        min_count: Sub-words seen fewer times are never added.
        name: Label for the progress line, e.g. the language code.

    Returns:
        The tokens: `RESERVED_TOKENS` first, then characters, then sub-words by frequency.

    Raises:
        ValueError: If `sentences` is empty or `vocab_size` cannot hold the characters.
    """
    if not sentences:
        raise ValueError(f"cannot build a vocabulary ({name}) from no sentences")
    print(f"building vocabulary ({name}): {len(sentences):,} sentences ... ", end="",
          file=sys.stderr, flush=True)
    start = time.perf_counter()
    dataset = (
        tf.data.Dataset.from_tensor_slices(list(sentences))
        .batch(_COUNT_BATCH)
        .map(lambda batch: normalize_text(batch, lower_case))
    )
    tokens = vocab_builder.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=list(RESERVED_TOKENS),
        bert_tokenizer_params={"lower_case": False},
        learn_params={"lower_thresh": min_count},
    )
    tokens = _fit_to_size(tokens, vocab_size)
    elapsed = time.perf_counter() - start
    print(f"done in {elapsed:.1f} s, {len(tokens):,} tokens", file=sys.stderr, flush=True)
    return tokens


def _fit_to_size(tokens: list[str], vocab_size: int) -> list[str]:
    """Drops the rarest multi-character pieces until `tokens` has at most `vocab_size` entries."""
    if len(tokens) <= vocab_size:
        return tokens
    required = {t for t in tokens if t in RESERVED_TOKENS or len(t.removeprefix("##")) == 1}
    if len(required) > vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the {len(required)} reserved and "
            "single-character tokens this corpus needs"
        )
    # The builder lists sub-words by decreasing count, so the first ones are the ones to keep.
    optional = [t for t in tokens if t not in required][: vocab_size - len(required)]
    keep = required.union(optional)
    return [t for t in tokens if t in keep]


def build_tokenizers(
    corpus: ParallelCorpus,
    directory: str | os.PathLike,
    *,
    vocab_size: int = 8000,
    lower_case: bool = False,
    shared: bool = False,
    min_count: int = 2,
    source_name: str = "source",
    target_name: str = "target",
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Learns vocabularies from a training corpus, saves them and returns the tokenizers.

    Writes `directory/source/` and `directory/target/`, or only `directory/shared/` when one
    vocabulary covers both languages (for shared embeddings); `load_tokenizers` reads either.

    Args:
        corpus: Training pairs.
        directory: Where to save the tokenizers (created if missing).
        vocab_size: Maximum tokens per vocabulary.
        lower_case: Lower-case all text.
        shared: Learn one vocabulary over both languages; the same tokenizer is returned twice.
        min_count: See `build_vocabulary`.
        source_name: Progress-line label of the source language, e.g. "en".
        target_name: Progress-line label of the target language, e.g. "de".

    Returns:
        `(source_tokenizer, target_tokenizer)`.
    """
    options = {"vocab_size": vocab_size, "lower_case": lower_case, "min_count": min_count}
    if shared:
        both = [*corpus.sources, *corpus.targets]
        tokens = build_vocabulary(both, name=f"{source_name}+{target_name}", **options)
        return tokenizers_from_vocabularies(directory, tokens, None, lower_case=lower_case)
    return tokenizers_from_vocabularies(
        directory,
        build_vocabulary(corpus.sources, name=source_name, **options),
        build_vocabulary(corpus.targets, name=target_name, **options),
        lower_case=lower_case,
    )
