"""`Translator`: strings in, translations out, as a `tf.Module` ready for `tf.saved_model.save`.

Tokenizers, the model's weights and the decoding loop all live in the graph, so a SavedModel of a
`Translator` runs in stock TensorFlow (plus the tensorflow-text ops) with no project code:

    import tensorflow_text  # registers the tokenizer ops
    translator = tf.saved_model.load("models/translator/1")
    translator.signatures["serving_default"](text=tf.constant(["Ein Mann fährt Fahrrad."]))
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.inference.decoding import SequenceDecoder
from keras_transformer.inference.defaults import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH, MAX_BEAM_WIDTH

# The export's signatures, what servers and clients call by name.
SERVING_SIGNATURE = "serving_default"
TOKENS_SIGNATURE = "translate_tokens"
OPTIONS_SIGNATURE = "translate_with_options"
ATTENTION_SIGNATURE = "attention"


# Under XLA, source lengths are padded to a multiple of this: one compilation per multiple.
XLA_SOURCE_LENGTH_MULTIPLE = 16


def _trim_padding(tokens):
    """Drops the columns that are padding in every row: `(batch, length)` -> `(batch, longest)`."""
    lengths = tf.reduce_sum(tf.cast(tokens != 0, tf.int32), axis=1)
    return tokens[:, : tf.reduce_max(tf.concat([lengths, [0]], axis=0))]


class Translator(tf.Module):
    """Tokenize, decode (greedy or beam search) and detokenize in one TensorFlow graph.

    Decoding options are fixed when the translator is built (and hence at export time);
    `translate_with_options` lets a request choose the beam width and alpha.
    Outputs are float32/int64/string only, which TF Serving can write as JSON, whatever the
    model's dtype policy.

    Args:
        model: a model from `build_transformer`.
        source_tokenizer: tokenizer `tf.Module` of the source language (`tokenize`).
        target_tokenizer: tokenizer `tf.Module` of the target language (`detokenize`, `lookup`,
            `start_id`, `end_id`).
        beam_width: 1 for greedy decoding, more for beam search (keyword-only, as the options
            below).
        alpha: GNMT length-penalty exponent (scores, and beam rankings).
        max_length: most target tokens per sentence; default source length +
            `DEFAULT_EXTRA_LENGTH`, capped at the model's `max_length`.
        xla_max_batch: calls of at most this many sentences decode under XLA
            (`jit_compile=True`), the others as usual (0: none). At batch 1 XLA decodes ~2x
            faster on CPU, where a step's cost is mostly dispatching its ~300 ops; at batch 32 it
            is slower (no finished rows leave its loop, caches are full-length). XLA compiles
            once per batch size and source length, so source lengths are padded to a multiple
            of `XLA_SOURCE_LENGTH_MULTIPLE` (the translations do not change); TensorFlow Serving
            runs such an export only with `--xla_cpu_compilation_enabled=true`.

    Example:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.text.tokenizer import RESERVED_TOKENS, SubwordTokenizer
        >>> import tempfile
        >>> words = SubwordTokenizer.from_tokens(
        ...     [*RESERVED_TOKENS, "one", "two", "three"], tempfile.mkdtemp())
        >>> model = build_transformer(TransformerConfig(source_vocab_size=words.vocab_size,
        ...     target_vocab_size=words.vocab_size, num_encoder_layers=1, num_decoder_layers=1,
        ...     d_model=8, num_heads=2, d_ff=16, max_length=16))
        >>> translator = Translator(model, words, words, beam_width=2)
        >>> translator.translate(tf.constant(["one two", "three"]))["translation"].shape
        TensorShape([2])
    """

    def __init__(
        self,
        model: keras.Model,
        source_tokenizer: tf.Module,
        target_tokenizer: tf.Module,
        *,
        beam_width: int = DEFAULT_BEAM_WIDTH,
        alpha: float = DEFAULT_ALPHA,
        max_length: int | None = None,
        xla_max_batch: int = 0,
    ):
        super().__init__(name="translator")
        if beam_width < 1:
            raise ValueError(f"beam_width must be a positive integer, got {beam_width}")
        if xla_max_batch < 0:
            raise ValueError(f"xla_max_batch must be >= 0, got {xla_max_batch}")
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.beam_width = beam_width
        self.alpha = alpha
        self.max_length = max_length
        self.xla_max_batch = xla_max_batch
        self._decoder = SequenceDecoder(model, target_tokenizer.start_id, target_tokenizer.end_id)
        self._decode_under_xla = tf.function(self._decode, jit_compile=True)

    def _source_tokens(self, text):
        """Strings `(batch,)` -> int64 `(batch, source_length)`, 0-padded, trimmed to fit the
        model's positional encoding."""
        ids = self.source_tokenizer.tokenize(text)
        return ids[:, : self._decoder.max_length].to_tensor(default_value=0)

    def _decode(self, source_tokens):
        return self._decoder.decode(
            source_tokens, beam_width=self.beam_width, alpha=self.alpha, max_length=self.max_length
        )

    def _translate_ids(self, source_tokens):
        if not self.xla_max_batch:
            return self._outputs(*self._decode(source_tokens))
        tokens, scores = tf.cond(
            tf.shape(source_tokens)[0] <= self.xla_max_batch,
            lambda: self._decode_under_xla(self._padded_for_xla(source_tokens)),
            lambda: self._decode(source_tokens),
        )
        return self._outputs(tokens, scores)

    def xla_shapes(self) -> list[tuple[int, int]]:
        """The source shapes `(batch, length)` decoded under XLA, one compilation each: every
        batch size up to `xla_max_batch`, every length multiple of `XLA_SOURCE_LENGTH_MULTIPLE`
        up to the model's `max_length` (and it)."""
        longest = self._decoder.max_length
        lengths = sorted({min(length, longest) for length in range(
            XLA_SOURCE_LENGTH_MULTIPLE, longest + XLA_SOURCE_LENGTH_MULTIPLE,
            XLA_SOURCE_LENGTH_MULTIPLE)})
        return [(batch, length) for batch in range(1, self.xla_max_batch + 1)
                for length in lengths]

    def _padded_for_xla(self, source_tokens):
        """Source ids with their length padded up to a multiple of
        `XLA_SOURCE_LENGTH_MULTIPLE`, at most the model's `max_length`."""
        length = tf.shape(source_tokens)[1]
        padded = -(-length // XLA_SOURCE_LENGTH_MULTIPLE) * XLA_SOURCE_LENGTH_MULTIPLE
        extra = tf.maximum(tf.minimum(padded, self._decoder.max_length) - length, 0)
        return tf.pad(source_tokens, [[0, 0], [0, extra]])

    def _outputs(self, tokens, scores):
        tokens = tf.cast(_trim_padding(tokens), tf.int64)
        return {
            "translation": self.target_tokenizer.detokenize(tokens),
            "score": scores,
            "tokens": tokens,
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def translate(self, text):
        """Translates sentences.

        Args:
            text: `tf.string` `(batch,)`.

        Returns:
            dict: `translation` string `(batch,)`; `score` float32 `(batch,)`, log-probability
            over the length penalty; `tokens` int64 `(batch, length)`, target ids without
            START/END, 0-padded.
        """
        return self._translate_ids(self._source_tokens(text))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="source_tokens")])
    def translate_tokens(self, source_tokens):
        """Translates pre-tokenized sentences: source ids `(batch, source_length)` as the source
        tokenizer writes them (no START/END), 0-padded; outputs as for `translate`."""
        return self._translate_ids(source_tokens[:, : self._decoder.max_length])

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="text"),
            tf.TensorSpec([], tf.int32, name="beam_width"),
            tf.TensorSpec([], tf.float32, name="alpha"),
        ]
    )
    def translate_with_options(self, text, beam_width, alpha):
        """`translate` with the beam width (1 = greedy, up to `MAX_BEAM_WIDTH`) and the
        length-penalty exponent chosen per request; outputs as for `translate`."""
        checks = [
            tf.debugging.assert_greater_equal(beam_width, 1, message="beam_width must be >= 1"),
            tf.debugging.assert_less_equal(
                beam_width, MAX_BEAM_WIDTH, message=f"beam_width must be <= {MAX_BEAM_WIDTH}"
            ),
        ]
        with tf.control_dependencies(checks):  # check before any op sized by the beam runs
            beam_width = tf.identity(beam_width)
        # Beam search with a width of 1 is greedy search (tested), so one graph serves both.
        return self._outputs(
            *self._decoder.beam_search(
                self._source_tokens(text),
                beam_width=beam_width,
                alpha=alpha,
                max_length=self.max_length,
            )
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def attention(self, text):
        """Translates sentences and returns the cross-attention weights behind each translation.

        Args:
            text: `tf.string` `(batch,)`.

        Returns:
            dict: `translation` string `(batch,)`; `attention` float32
            `(batch, num_layers, num_heads, target_length, source_length)`, where row `i`
            is the attention while producing `target_pieces[:, i]`; `source_pieces` string
            `(batch, source_length)`; `target_pieces` string `(batch, target_length)`: the
            generated word pieces then `[END]` (`[PAD]` pads both).
        """
        source_tokens = self._source_tokens(text)
        outputs = self._translate_ids(source_tokens)
        tokens = outputs["tokens"]
        batch = tf.shape(tokens)[0]
        start = tf.fill((batch, 1), tf.constant(self.target_tokenizer.start_id, tf.int64))
        padded = tf.concat([tokens, tf.zeros((batch, 1), tf.int64)], axis=1)
        lengths = tf.reduce_sum(tf.cast(tokens != 0, tf.int32), axis=1)
        at_end = tf.range(tf.shape(padded)[1])[None] == lengths[:, None]
        produced = tf.where(at_end, tf.constant(self.target_tokenizer.end_id, tf.int64), padded)
        # A translation cut at the model's max_length has no END, and one position fewer.
        rows = tf.minimum(tf.shape(padded)[1], self._decoder.max_length)
        return {
            "translation": outputs["translation"],
            "attention": self._decoder.cross_attention(
                source_tokens, tf.concat([start, tokens], axis=1)[:, :rows]
            ),
            "source_pieces": self.source_tokenizer.lookup(source_tokens),
            "target_pieces": self.target_tokenizer.lookup(produced[:, :rows]),
        }

    def signatures(self) -> dict:
        """The concrete functions to pass to `tf.saved_model.save(..., signatures=...)`."""
        return {
            SERVING_SIGNATURE: self.translate.get_concrete_function(),
            TOKENS_SIGNATURE: self.translate_tokens.get_concrete_function(),
            OPTIONS_SIGNATURE: self.translate_with_options.get_concrete_function(),
            ATTENTION_SIGNATURE: self.attention.get_concrete_function(),
        }
