"""WordPiece tokenizer as a `tf.Module`, so an exported translator carries it in its graph.

Everything that runs on tensors here is a TensorFlow or tensorflow-text op (no Python in the
graph), which is what lets a stock TensorFlow Serving binary run the tokenizer inside a SavedModel.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
VOCAB_FILENAME = "vocab.txt"
CONFIG_FILENAME = "tokenizer.json"

# Detokenization joins words with spaces; these rewrites (RE2 syntax, applied in order) put the
# spacing back the way English and German write it. Measured on Multi30k train, 99.8 % of English
# and German sentences come back character for character; most of the rest had stray spaces in the
# original (e.g. "Ein Mann , der").
_SPACING_RULES = (
    # Decimal and thousands separators, times: "3 . 5" -> "3.5", "10 , 000" -> "10,000".
    (r"(\pN) ([.,:]) (\pN)", r"\1\2\3"),
    # Clitics and possessives: "don ' t" -> "don't", "McDonald ' s" -> "McDonald's".
    (r"([\pL\pN]) (['’]) (s|t|d|m|re|ve|ll)\b", r"\1\2\3"),
    # Single-quoted phrases: "a ' Grand Opening ' sign" -> "a 'Grand Opening' sign".
    (r" ' ([^']*?) ' ", r" '\1' "),
    # Plural possessive: "ladies ' room" -> "ladies' room".
    (r"([sS]) ' ", r"\1' "),
    # German suspended compounds keep the space after the hyphen: "Ess- und Wohnzimmer".
    (r" - (und|oder|and|or) ", r"- \1 "),
    (r" (und|oder|and|or) - ", r" \1 -"),
    # Hyphenated words and slashes: "T - Shirt" -> "T-Shirt", "der / die" -> "der/die".
    (r" ([-/]) ", r"\1"),
    # Paired quotes: straight, German „…“ and English “…”.
    (r'" ([^"]*?) "', r'"\1"'),
    (r"„ ([^“]*?) “", r"„\1“"),
    (r"“ ([^”]*?) ”", r"“\1”"),
    # No space after an opening bracket or sign, none before closing punctuation.
    (r"([#$(\[{]) ", r"\1"),
    (r" ([.,!?;:%)\]}])", r"\1"),
)


def normalize_text(strings: tf.Tensor, lower_case: bool) -> tf.Tensor:
    """Normalizes text the same way for vocabulary building and tokenization.

    Unicode NFC composition makes "ä" one code point whatever the input used; lower-casing (when
    asked) keeps accents and umlauts, unlike `BertTokenizer(lower_case=True)` which strips them.

    Args:
        strings: `tf.string` tensor of any shape.
        lower_case: Whether to lower-case the text.

    Returns:
        `tf.string` tensor of the same shape.
    """
    strings = tf_text.normalize_utf8(strings, "NFC")
    if lower_case:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return strings


def read_vocabulary(path: str | os.PathLike) -> list[str]:
    """Reads a vocabulary file (one token per line) and checks its reserved tokens.

    Args:
        path: The vocabulary `.txt` file.

    Returns:
        The tokens; a token's id is its index.

    Raises:
        ValueError: If the file does not start with `RESERVED_TOKENS` in order.
    """
    tokens = Path(path).read_text(encoding="utf-8").splitlines()
    if tuple(tokens[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
        raise ValueError(
            f"{path}: a vocabulary must start with {', '.join(RESERVED_TOKENS)} (ids 0-3), "
            f"found {tokens[: len(RESERVED_TOKENS)]}"
        )
    return tokens


def write_vocabulary(tokens: list[str], path: str | os.PathLike) -> None:
    """Writes tokens one per line, the format `read_vocabulary` and `BertTokenizer` read."""
    Path(path).write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")


class SubwordTokenizer(tf.Module):
    """WordPiece tokenizer over a vocabulary file, wrapping `tensorflow_text.BertTokenizer`.

    Ids 0-3 are `[PAD]`, `[UNK]`, `[START]` and `[END]`. `tokenize` adds no `[START]`/`[END]`;
    the data pipeline and the decoder add them where they belong. The vocabulary file is a
    tracked asset: `tf.saved_model.save` copies it into the SavedModel's `assets/`.

    Args:
        vocab_path: Vocabulary `.txt` file, one token per line, reserved tokens first.
        lower_case: Lower-case text before tokenizing (accents are kept). Must match how the
            vocabulary was built.
        name: Module name.

    Example:
        >>> tokenizer = SubwordTokenizer.load("runs/tokenizers/source")  # doctest: +SKIP
        >>> ids = tokenizer.tokenize(tf.constant(["Ein Mann fährt Fahrrad."]))  # doctest: +SKIP
        >>> tokenizer.detokenize(ids.to_tensor())  # doctest: +SKIP
        <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'Ein Mann f\xc3\xa4hrt Fahrrad.'])>
    """

    def __init__(
        self, vocab_path: str | os.PathLike, *, lower_case: bool = False, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        tokens = read_vocabulary(vocab_path)
        self.lower_case = lower_case
        self._vocab_file = tf.saved_model.Asset(os.fspath(vocab_path))
        self._bert = tf_text.BertTokenizer(self._vocab_file.asset_path, lower_case=False)
        self._tokens = tf.Variable(tokens, trainable=False, name="tokens")

    @property
    def vocab_size(self) -> int:
        return int(self._tokens.shape[0])

    @property
    def pad_id(self) -> int:
        return RESERVED_TOKENS.index("[PAD]")

    @property
    def unk_id(self) -> int:
        return RESERVED_TOKENS.index("[UNK]")

    @property
    def start_id(self) -> int:
        return RESERVED_TOKENS.index("[START]")

    @property
    def end_id(self) -> int:
        return RESERVED_TOKENS.index("[END]")

    @property
    def vocabulary(self) -> list[str]:
        """The tokens, indexed by id."""
        return [token.decode("utf-8") for token in self._tokens.numpy()]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Splits sentences into WordPiece ids.

        Args:
            strings: `tf.string` of shape `(batch,)`.

        Returns:
            `tf.RaggedTensor` of `int64` ids, shape `(batch, (num_tokens))`, no `[START]`/`[END]`.
        """
        pieces = self._bert.tokenize(normalize_text(strings, self.lower_case))
        return pieces.merge_dims(-2, -1)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def detokenize(self, ids: tf.Tensor) -> tf.Tensor:
        """Turns ids back into sentences, dropping the reserved tokens wherever they are.

        Word pieces are joined into words and the spacing around punctuation is restored
        ("Ein Mann fährt Fahrrad." rather than "Ein Mann fährt Fahrrad ."). Nothing is cut at
        `[END]`: use `cut_at_end` first when tokens after it are not padding. A
        `tf.RaggedTensor` of ids can be passed as `ids.to_tensor()` (padding is dropped).

        Args:
            ids: `int64` of shape `(batch, length)`.

        Returns:
            `tf.string` of shape `(batch,)`.
        """
        real = tf.ragged.boolean_mask(ids, ids >= len(RESERVED_TOKENS))
        # What `BertTokenizer.detokenize` does, reading the pieces from the id-ordered `_tokens`:
        # it exports its lookup table and sorts all of it by id on every call (~1 ms a call with
        # 8,000 pieces, more than the rest of detokenizing a sentence). Ids past the vocabulary
        # read as `[UNK]`, as there.
        known = real.with_flat_values(
            tf.where(real.flat_values < self.vocab_size, real.flat_values, self.unk_id)
        )
        pieces = tf.strings.reduce_join(tf.gather(self._tokens, known), axis=-1, separator=" ")
        text = tf.strings.regex_replace(pieces, r" ##", "")  # word pieces join their word
        text = tf.strings.regex_replace(text, r"^ +| +$", "")
        for pattern, rewrite in _SPACING_RULES:
            text = tf.strings.regex_replace(text, pattern, rewrite)
        return text

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def cut_at_end(self, ids: tf.Tensor) -> tf.Tensor:
        """Replaces the first `[END]` of each row and everything after it with `[PAD]`.

        Args:
            ids: `int64` of shape `(batch, length)`, e.g. a decoder's output.

        Returns:
            `int64` of shape `(batch, length)`.
        """
        after_end = tf.cumsum(tf.cast(ids == self.end_id, tf.int32), axis=-1) > 0
        return tf.where(after_end, tf.constant(self.pad_id, tf.int64), ids)

    @tf.function(input_signature=[tf.TensorSpec(None, tf.int64)])
    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """Maps ids to their token strings (e.g. for attention plots).

        Args:
            ids: `int64` of any shape.

        Returns:
            `tf.string` of the same shape; word pieces keep their `##` prefix.
        """
        return tf.gather(self._tokens, ids)

    def save(self, directory: str | os.PathLike) -> None:
        """Writes `vocab.txt` and `tokenizer.json` to `directory` (created if missing)."""
        _write_files(directory, self.vocabulary, self.lower_case)

    @classmethod
    def load(cls, directory: str | os.PathLike, *, name: str | None = None) -> SubwordTokenizer:
        """Loads a tokenizer written by `save` or `from_tokens`."""
        directory = Path(directory)
        config = json.loads((directory / CONFIG_FILENAME).read_text())
        return cls(directory / VOCAB_FILENAME, lower_case=config["lower_case"], name=name)

    @classmethod
    def from_tokens(
        cls,
        tokens: list[str],
        directory: str | os.PathLike,
        *,
        lower_case: bool = False,
        name: str | None = None,
    ) -> SubwordTokenizer:
        """Saves a vocabulary (e.g. from `build_vocabulary`) to `directory` and loads it."""
        _write_files(directory, tokens, lower_case)
        return cls.load(directory, name=name)


def _write_files(directory: str | os.PathLike, tokens: list[str], lower_case: bool) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_vocabulary(tokens, directory / VOCAB_FILENAME)
    config = {"lower_case": lower_case}
    (directory / CONFIG_FILENAME).write_text(json.dumps(config, indent=2) + "\n")
