"""Autoregressive decoding with a trained Transformer: cached greedy and beam search.

The encoder runs once per source; the cross-attention keys/values of every decoder layer are
computed once from its output (`Decoder.cross_attention_caches`); the self-attention keys/values
grow by one position per generated token (`Decoder.initial_self_attention_caches` +
`cache_index`), so each step costs one token's worth of decoder work. Outside XLA a sentence
leaves the loop the step it is finished (`drop_finished`), so the remaining steps of a batch cost
only its unfinished sentences. An uncached decoder, re-running the whole decoder on the prefix
every step, is kept as the reference for tests and benchmarks.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.inference.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BEAM_WIDTH,
    DEFAULT_EXTRA_LENGTH,
)
from keras_transformer.inference.search import (
    TOP_K_BLOCK,
    beam_search,
    greedy_search,
    write_column,
)
from keras_transformer.layers import padding_mask
from keras_transformer.layers.xla import under_xla
from keras_transformer.model import (
    DECODER,
    ENCODER,
    LOGITS,
    SHARED_EMBEDDING,
    SOURCE_EMBEDDING,
    TARGET_EMBEDDING,
)


def _static_or_dynamic(tensor, axis: int):
    """A dimension as a Python int when known at trace time (XLA needs static buffer sizes)."""
    static = tensor.shape[axis]
    return static if static is not None else tf.shape(tensor)[axis]


def read_once(variables):
    """`(variable, value)` pairs for `keras.StatelessScope`: each variable read once, here.

    A decoding loop's step run in that scope uses these values instead of reading its
    variables again at every step: one ReadVariableOp per kernel, bias and norm parameter per
    step otherwise, 67 of a 3+3-layer model's ~370 ops per greedy step, where at batch 1 a
    step's cost is mostly the dispatch of its ops.
    """
    return [(variable, tf.convert_to_tensor(variable.value)) for variable in variables]


class SequenceDecoder:
    """Generates target token ids from source token ids with the layers of a built Transformer.

    Methods run eagerly or inside `tf.function` (also with `jit_compile=True`); wrap them there
    for speed. Padding (id 0) and START are never generated.

    Args:
        model: a model from `build_transformer`; its layers are found by the names that
            `keras_transformer.model` defines (`SOURCE_EMBEDDING`/`TARGET_EMBEDDING` or
            `SHARED_EMBEDDING`, `ENCODER`, `DECODER` and `LOGITS`; without a `LOGITS` layer, the
            target embedding projects).
        start_id: the decoder's first input.
        end_id: the token that ends a translation.

    Example:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> model = build_transformer(TransformerConfig(source_vocab_size=20,
        ...     target_vocab_size=20, num_encoder_layers=1, num_decoder_layers=1, d_model=8,
        ...     num_heads=2, d_ff=16, max_length=16))
        >>> decoder = SequenceDecoder(model, start_id=2, end_id=3)
        >>> source_tokens = tf.constant([[5, 6, 7], [8, 9, 0]])
        >>> tokens, scores = tf.function(decoder.beam_search)(source_tokens, beam_width=4)
        >>> tuple(scores.shape)
        (2,)
    """

    def __init__(self, model: keras.Model, start_id: int, end_id: int):
        layer_names = {layer.name for layer in model.layers}
        if SHARED_EMBEDDING in layer_names:
            self.source_embedding = self.target_embedding = model.get_layer(SHARED_EMBEDDING)
        else:
            self.source_embedding = model.get_layer(SOURCE_EMBEDDING)
            self.target_embedding = model.get_layer(TARGET_EMBEDDING)
        self.encoder = model.get_layer(ENCODER)
        self.decoder = model.get_layer(DECODER)
        # The output projection; None when the target embedding projects (tied weights).
        self.to_logits = model.get_layer(LOGITS) if LOGITS in layer_names else None
        self.max_length = self.target_embedding.max_length
        self.start_id = start_id
        self.end_id = end_id
        # Never generated: padding (id 0) and START.
        self.banned_tokens = np.isin(np.arange(self.target_embedding.vocab_size), [0, start_id])

    def encode(self, source_tokens):
        """Runs the encoder once.

        Args:
            source_tokens: int `(batch, source_length)`, 0 = padding.

        Returns:
            `(encoder_output, source_padding_mask)`: `(batch, source_length, d_model)` and bool
            `(batch, source_length)`.
        """
        source_padding_mask = padding_mask(source_tokens)
        embedded = self.source_embedding(source_tokens)
        encoder_output = self.encoder(embedded, padding_mask=source_padding_mask, training=False)
        return encoder_output, source_padding_mask

    def length_limits(self, source_tokens, max_length: int | None = None):
        """How many tokens each row may generate, and the size of the decoding buffers.

        Args:
            source_tokens: int `(batch, source_length)`.
            max_length: a fixed limit for every row; default: the row's source length +
                `DEFAULT_EXTRA_LENGTH`, capped at the model's `max_length`, so that a sentence
                gets the same limit alone or batched with longer ones.

        Returns:
            `(limits, buffer_length)`: int32 `(batch,)` and a scalar `>= max(limits)` (a Python
            int when the source shape is static or `max_length` is given).
        """
        if max_length is not None:
            if not 1 <= max_length <= self.max_length:
                raise ValueError(
                    f"max_length must be in [1, {self.max_length}] (the model's max_length), "
                    f"got {max_length}"
                )
            return tf.fill((tf.shape(source_tokens)[0],), max_length), max_length
        real_lengths = tf.reduce_sum(tf.cast(padding_mask(source_tokens), tf.int32), axis=1)
        limits = tf.minimum(real_lengths + DEFAULT_EXTRA_LENGTH, self.max_length)
        source_length = _static_or_dynamic(source_tokens, 1)
        if isinstance(source_length, int):
            return limits, min(source_length + DEFAULT_EXTRA_LENGTH, self.max_length)
        return limits, tf.minimum(source_length + DEFAULT_EXTRA_LENGTH, self.max_length)

    def _next_token_logits(self):
        """The output projection, prepared once per decoding call for its loop: a function from
        decoder outputs `(rows, d_model)` to next-token logits float32 `(rows, columns)`, with
        padding and START ruled out (-inf: never generated). The searches normalise the tokens
        they keep (`search.log_softmax_at`).

        The weights are cast to the compute dtype once, not at every step. `columns` is the
        vocabulary rounded up to a multiple of `TOP_K_BLOCK`, the added columns -inf, so that
        beam search finds its top k in blocks (`search.top_k`). The -inf are selected after the
        product: oneDNN's product with a fused bias ran three times slower in bfloat16, and so
        did a tied embedding transposed beforehand. In float32 outside XLA a tied embedding is
        transposed once per call: oneDNN multiplies 16-32 rows by `(d_model, columns)` 1.6-2.3x
        faster than by the embedding transposed in the product (Multi30k's 8,000 pieces, AMD
        CPU), and greedy decoding at batch 32 ran 1.08-1.14x faster in three in-process A/Bs
        (beam 4 at batch 32 0.99-1.12x; batch 1 0.92-1.15x: the ~0.2 ms transpose against the
        steps' savings), with the same tokens. Under XLA the product as written was faster.
        """
        vocab_size = self.target_embedding.vocab_size
        extra = -vocab_size % TOP_K_BLOCK
        bias, transpose = None, False
        if self.to_logits is not None:
            dtype = self.to_logits.compute_dtype
            kernel = tf.pad(tf.cast(self.to_logits.kernel, dtype), ((0, 0), (0, extra)))
            if self.to_logits.use_bias:
                bias = tf.pad(tf.cast(self.to_logits.bias, dtype), ((0, extra),))
        else:  # tied: logits = hidden @ embedding^T
            embedding = self.target_embedding.token_embedding
            dtype = embedding.reverse_dtype or embedding.compute_dtype
            kernel = tf.pad(tf.cast(embedding.embeddings, dtype), ((0, extra), (0, 0)))
            transpose = True
            if dtype == "float32" and not under_xla():  # see the docstring
                kernel, transpose = tf.transpose(kernel), False
        never = np.concatenate([self.banned_tokens, np.ones(extra, bool)])

        def logits(decoded):
            products = tf.matmul(tf.cast(decoded, dtype), kernel, transpose_b=transpose)
            if bias is not None:
                products = products + bias
            return tf.where(never, float("-inf"), tf.cast(products, tf.float32))

        return logits

    def _cached_step(self, encoder_output, source_padding_mask, rows, buffer_length):
        """Step function, initial state (self-attention caches), state shapes and context
        (cross-attention keys/values, source padding mask) for `search`.

        Outside XLA the caches hold exactly the positions decoded so far: each step appends the
        new token's keys and values (`append_to_cache`), so attention, cache writes and beam
        reordering cost the current length, not `buffer_length` (with a 50-token margin, several
        times more on most sentences). XLA needs static shapes: there the caches are
        `buffer_length` long from the start, and the causal mask hides the slots not yet
        written.

        The step reads the target embedding's and the decoder's variables from values read once
        per call (`read_once`), not at every step.
        """
        grow = not under_xla()
        logits = self._next_token_logits()
        weights = read_once(self.target_embedding.weights + self.decoder.weights)

        def step_fn(tokens, step, caches, context):
            cross_caches, source_padding_mask = context
            with keras.StatelessScope(weights):
                embedded = self.target_embedding(tokens[:, None], start_position=step)
                decoded, caches = self.decoder(
                    embedded,
                    encoder_padding_mask=source_padding_mask,
                    self_attention_caches=caches,
                    cross_attention_caches=cross_caches,
                    cache_index=step,
                    append_to_cache=grow,
                    training=False,
                )
            return logits(decoded[:, 0]), caches

        caches = self.decoder.initial_self_attention_caches(rows, 0 if grow else buffer_length)
        shapes = None
        if grow:  # (rows, heads, None, d_k): the length changes from step to step
            shapes = tf.nest.map_structure(
                lambda cache: tf.TensorShape([*cache.shape[:2], None, cache.shape[3]]), caches
            )
        context = (self.decoder.cross_attention_caches(encoder_output), source_padding_mask)
        return step_fn, caches, shapes, context

    def _uncached_step(self, encoder_output, source_padding_mask, rows, buffer_length):
        """Step function re-running the decoder on the whole prefix; the state is the prefix
        (its shape is fixed), the context the encoder output and source padding mask."""
        logits = self._next_token_logits()

        def step_fn(tokens, step, prefix, context):
            encoder_output, source_padding_mask = context
            prefix = write_column(prefix, step, tokens)
            decoded = self.decoder(
                self.target_embedding(prefix[:, : step + 1]),
                encoder_output,
                encoder_padding_mask=source_padding_mask,
                training=False,
            )
            return logits(decoded[:, -1]), prefix

        prefix = tf.zeros((rows, buffer_length), tf.int32)
        return step_fn, prefix, None, (encoder_output, source_padding_mask)

    def greedy(
        self,
        source_tokens,
        *,
        max_length: int | None = None,
        alpha: float = 0.0,
        stop_at_end: bool = True,
        use_cache: bool = True,
    ):
        """Greedy decoding.

        Args:
            source_tokens: int `(batch, source_length)`, 0 = padding.
            max_length: see `length_limits`.
            alpha: length-penalty exponent for the scores (does not change greedy choices).
            stop_at_end: False decodes exactly the length limit (benchmarks).
            use_cache: False re-runs the decoder on the whole prefix every step (reference).

        Returns:
            `(tokens, scores)`: int32 `(batch, buffer_length)` without START and END, 0-padded;
            float32 `(batch,)` log-probabilities divided by the length penalty.
        """
        source_tokens = tf.cast(source_tokens, tf.int32)
        limits, buffer_length = self.length_limits(source_tokens, max_length)
        encoder_output, source_padding_mask = self.encode(source_tokens)
        make_step = self._cached_step if use_cache else self._uncached_step
        step_fn, state, state_shapes, context = make_step(
            encoder_output, source_padding_mask, tf.shape(source_tokens)[0], buffer_length
        )
        return greedy_search(
            step_fn,
            initial_state=state,
            start_id=self.start_id,
            end_id=self.end_id,
            limits=limits,
            max_length=buffer_length,
            alpha=alpha,
            stop_at_end=stop_at_end,
            state_shapes=state_shapes,
            context=context,
            drop_finished=not under_xla(),
        )

    def beam_search(
        self,
        source_tokens,
        *,
        beam_width: int = DEFAULT_BEAM_WIDTH,
        alpha: float = DEFAULT_ALPHA,
        max_length: int | None = None,
        stop_at_end: bool = True,
        use_cache: bool = True,
    ):
        """Beam search with the GNMT length penalty (see `search.beam_search`).

        Args:
            source_tokens: int `(batch, source_length)`, 0 = padding.
            beam_width: prefixes kept per source; an int, or an int32 scalar tensor (not under
                XLA, which needs static shapes).
            alpha: length-penalty exponent (float or float32 scalar tensor).
            max_length: see `length_limits`.
            stop_at_end: False searches up to the length limit (benchmarks).
            use_cache: False re-runs the decoder on the whole prefix every step (reference).

        Returns:
            `(tokens, scores)` of the best hypothesis, as for `greedy`.
        """
        source_tokens = tf.cast(source_tokens, tf.int32)
        limits, buffer_length = self.length_limits(source_tokens, max_length)
        encoder_output, source_padding_mask = self.encode(source_tokens)
        # Row b * beam + k is beam k of source b.
        encoder_output = tf.repeat(encoder_output, beam_width, axis=0)
        source_padding_mask = tf.repeat(source_padding_mask, beam_width, axis=0)
        make_step = self._cached_step if use_cache else self._uncached_step
        step_fn, state, state_shapes, context = make_step(
            encoder_output, source_padding_mask, tf.shape(encoder_output)[0], buffer_length
        )
        return beam_search(
            step_fn,
            initial_state=state,
            start_id=self.start_id,
            end_id=self.end_id,
            limits=limits,
            max_length=buffer_length,
            beam_width=beam_width,
            alpha=alpha,
            stop_at_end=stop_at_end,
            state_shapes=state_shapes,
            context=context,
            drop_finished=not under_xla(),
        )

    def decode(
        self,
        source_tokens,
        *,
        beam_width: int = 1,
        alpha: float = DEFAULT_ALPHA,
        max_length: int | None = None,
    ):
        """Greedy decoding for `beam_width=1` (the same result, cheaper), else beam search."""
        if beam_width < 1:
            raise ValueError(f"beam_width must be a positive integer, got {beam_width}")
        if beam_width == 1:
            return self.greedy(source_tokens, max_length=max_length, alpha=alpha)
        return self.beam_search(
            source_tokens, beam_width=beam_width, alpha=alpha, max_length=max_length
        )

    def cross_attention(self, source_tokens, target_tokens):
        """Cross-attention weights of every decoder layer for a given translation.

        Args:
            source_tokens: int `(batch, source_length)`, 0 = padding.
            target_tokens: int `(batch, target_length)`: START then the translation, 0-padded.

        Returns:
            float32 `(batch, num_layers, num_heads, target_length, source_length)`.
        """
        source_tokens = tf.cast(source_tokens, tf.int32)
        target_tokens = tf.cast(target_tokens, tf.int32)
        encoder_output, source_padding_mask = self.encode(source_tokens)
        _, weights = self.decoder(
            self.target_embedding(target_tokens),
            encoder_output,
            padding_mask=padding_mask(target_tokens),
            encoder_padding_mask=source_padding_mask,
            return_attention_scores=True,
            training=False,
        )
        return tf.cast(tf.stack(weights, axis=1), tf.float32)
