"""The source/target tokenizer pair on disk: `shared/` (one vocabulary for both languages) or
`source/` and `target/`, each a `SubwordTokenizer` directory (`vocab.txt`, `tokenizer.json`)."""

from __future__ import annotations

import os
from pathlib import Path

from keras_transformer.text.tokenizer import SubwordTokenizer

SHARED, SOURCE, TARGET = "shared", "source", "target"


def tokenizers_from_vocabularies(
    directory: str | os.PathLike,
    source_tokens: list[str],
    target_tokens: list[str] | None,
    *,
    lower_case: bool = False,
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Saves vocabularies in the layout `load_tokenizers` reads and returns the tokenizers.

    Args:
        directory: Where to save (created if missing).
        source_tokens: Source vocabulary, or the shared one.
        target_tokens: Target vocabulary; `None` shares `source_tokens` between both sides.
        lower_case: Whether the vocabularies were built from lower-cased text.

    Returns:
        `(source_tokenizer, target_tokenizer)`; the same object twice when shared.
    """
    directory = Path(directory)
    if target_tokens is None:
        tokenizer = SubwordTokenizer.from_tokens(
            source_tokens, directory / SHARED, lower_case=lower_case, name=SHARED
        )
        return tokenizer, tokenizer
    return (
        SubwordTokenizer.from_tokens(
            source_tokens, directory / SOURCE, lower_case=lower_case, name=SOURCE
        ),
        SubwordTokenizer.from_tokens(
            target_tokens, directory / TARGET, lower_case=lower_case, name=TARGET
        ),
    )


def load_tokenizers(directory: str | os.PathLike) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Loads the pair written by `build_tokenizers`.

    Returns:
        `(source_tokenizer, target_tokenizer)`; the same object twice for a shared vocabulary.

    Raises:
        ValueError: If `directory` holds both a shared and a per-language vocabulary.
    """
    directory = Path(directory)
    if (directory / SHARED).is_dir() and (directory / SOURCE).is_dir():
        raise ValueError(
            f"{directory} holds both '{SHARED}/' and '{SOURCE}/' tokenizers; remove one"
        )
    if (directory / SHARED).is_dir():
        tokenizer = SubwordTokenizer.load(directory / SHARED, name=SHARED)
        return tokenizer, tokenizer
    return (
        SubwordTokenizer.load(directory / SOURCE, name=SOURCE),
        SubwordTokenizer.load(directory / TARGET, name=TARGET),
    )
