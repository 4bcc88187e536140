"""Greedy and beam search over any step function, as `tf.while_loop`s with static shapes.

The searches know nothing of Transformers: a step function maps the latest tokens (and a state
such as key/value caches) to next-token log-probabilities. Buffers have a fixed size
(`max_length`), finished sequences are tracked with flags, and every loop variable keeps its shape,
so the loops run inside `tf.function` and under XLA (`jit_compile=True`).

Step function contract:
    `step_fn(tokens, step, state) -> (log_probs, state)` with `tokens` int32 `(rows,)` (the token
    chosen at the previous step, START at step 0), `step` an int32 scalar (the position being
    predicted), `state` a nest of tensors whose first axis is `rows`, and `log_probs` float32
    `(rows, vocab_size)`. Beam search reorders the state by gathering rows.

Scores are `log P(Y | X) / lp(|Y|)` with the GNMT length penalty
`lp(|Y|) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016, eq. 14); `|Y|` counts END.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

StepFn = Callable[[tf.Tensor, tf.Tensor, object], tuple[tf.Tensor, object]]

NEG_INF = float("-inf")


def length_penalty(length, alpha: float) -> tf.Tensor:
    """GNMT length penalty `((5 + length) / 6) ** alpha`.

    Args:
        length: number of tokens, int or float tensor of any shape.
        alpha: 0 disables the penalty (lp = 1); larger values favour longer outputs.

    Returns:
        float32 tensor shaped like `length`.
    """
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def write_column(buffer, step, tokens):
    """`buffer[..., step] = tokens` for a fixed-size buffer `(..., max_length)`."""
    at_step = tf.equal(tf.range(tf.shape(buffer)[-1]), step)
    return tf.where(at_step, tokens[..., None], buffer)


def _with_shapes_of(new_values, old_values):
    """Gives each new loop value its old static shape, which `tf.while_loop` requires to hold
    (gathers and reshapes with dynamic sizes lose known dimensions such as a batch of 1)."""

    def restore(new, old):
        new.set_shape(old.shape)
        return new

    return tf.nest.map_structure(restore, new_values, old_values)


def _smaller(a, b):
    """min(a, b), as a Python int when both are (XLA needs static top-k sizes)."""
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else tf.minimum(a, b)


def greedy_search(
    step_fn: StepFn,
    state,
    start_id: int,
    end_id: int,
    limits,
    max_length,
    alpha: float = 0.0,
    stop_at_end: bool = True,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Takes the most probable token at every step until END or the row's length limit.

    Args:
        step_fn: see the module docstring; `rows` is the batch size.
        state: initial state of `step_fn`.
        start_id: first decoder input.
        end_id: token that ends a sequence.
        limits: int32 `(batch,)`, most tokens row `i` may generate (each `<= max_length`).
        max_length: size of the token buffer (Python int, or a scalar known at compile time
            under XLA).
        alpha: length-penalty exponent for the returned scores.
        stop_at_end: False decodes `limits` tokens whatever is generated (benchmarks).

    Returns:
        `(tokens, scores)`: int32 `(batch, max_length)`, the generated tokens with END and
        everything after it set to 0 (padding); float32 `(batch,)`, length-normalised
        log-probabilities.
    """
    limits = tf.cast(limits, tf.int32)
    batch = tf.shape(limits)[0]
    tokens = tf.zeros((batch, max_length), tf.int32)
    last = tf.fill((batch,), tf.constant(start_id, tf.int32))
    log_prob = tf.zeros((batch,), tf.float32)
    lengths = tf.zeros((batch,), tf.int32)
    done = tf.zeros((batch,), tf.bool)

    def cond(step, tokens, last, log_prob, lengths, done, state):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(done)))

    def body(step, tokens, last, log_prob, lengths, done, state):
        log_probs, new_state = step_fn(last, step, state)
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.where(done, 0, chosen)
        chosen_log_prob = tf.gather(log_probs, chosen, axis=1, batch_dims=1)
        ended = tf.logical_and(tf.equal(chosen, end_id), stop_at_end)
        return _with_shapes_of(
            (
                step + 1,
                write_column(tokens, step, chosen),
                chosen,
                log_prob + tf.where(done, 0.0, chosen_log_prob),
                lengths + tf.cast(tf.logical_not(done), tf.int32),
                tf.logical_or(done, tf.logical_or(ended, step + 1 >= limits)),
                new_state,
            ),
            (step, tokens, last, log_prob, lengths, done, state),
        )

    _, tokens, _, log_prob, lengths, _, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, last, log_prob, lengths, done, state)
    )
    tokens = tf.where(tf.equal(tokens, end_id), 0, tokens) if stop_at_end else tokens
    return tokens, log_prob / length_penalty(lengths, alpha)


def beam_search(
    step_fn: StepFn,
    state,
    start_id: int,
    end_id: int,
    limits,
    max_length,
    beam_width: int,
    alpha: float = 0.6,
    stop_at_end: bool = True,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Keeps the `beam_width` most probable prefixes per source; returns the best by lp score.

    Every step expands each live prefix ("alive") by every token and keeps the top `2 * beam`
    candidates, so that `beam` of them continue even when some end. A candidate ending with END
    joins the finished pool (scored `log P / lp(|Y|)`) only if it ranks within the top `beam`,
    which makes `beam_width=1` exactly greedy search. At a row's length limit the live prefixes
    join the pool too. A row stops (and is frozen, so batching never changes its result) when its
    pool is full and its worst finished score beats the best live prefix normalised at the
    current length, or at its limit.

    Args:
        step_fn: see the module docstring; `rows` is `batch * beam_width`, row `b * beam + k`
            being beam `k` of source `b`.
        state: initial state of `step_fn` for `batch * beam_width` rows.
        start_id: first decoder input.
        end_id: token that ends a sequence.
        limits: int32 `(batch,)`, most tokens source `b` may generate (each `<= max_length`).
        max_length: size of the token buffers.
        beam_width: number of prefixes kept per source (int, or int32 scalar tensor).
        alpha: length-penalty exponent.
        stop_at_end: False keeps searching until every limit (benchmarks).

    Returns:
        `(tokens, scores)` of the best hypothesis per source: int32 `(batch, max_length)` with
        END and what follows set to 0; float32 `(batch,)`.
    """
    limits = tf.cast(limits, tf.int32)
    batch = tf.shape(limits)[0]
    beam = beam_width
    alive_tokens = tf.zeros((batch, beam, max_length), tf.int32)
    # Only beam 0 is live at first, so the first expansion does not pick the same token K times.
    first_beam = tf.concat([[0.0], tf.fill((beam - 1,), NEG_INF)], axis=0)
    alive_log_prob = tf.tile(first_beam[None], (batch, 1))
    finished_tokens = tf.zeros((batch, beam, max_length), tf.int32)
    finished_scores = tf.fill((batch, beam), NEG_INF)
    done = tf.zeros((batch,), tf.bool)

    def cond(step, alive_tokens, alive_log_prob, finished_tokens, finished_scores, done, state):
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(done)))

    def body(step, alive_tokens, alive_log_prob, finished_tokens, finished_scores, done, state):
        previous = tf.where(
            step > 0, tf.gather(alive_tokens, tf.maximum(step - 1, 0), axis=2), start_id
        )
        log_probs, new_state = step_fn(tf.reshape(previous, (-1,)), step, state)
        # Two stages: only a prefix's own 2K best tokens can be among its source's 2K best
        # candidates, so the search over `beam * vocab` candidates shrinks to `beam * 2K`.
        per_prefix = _smaller(2 * beam, log_probs.shape[-1] or tf.shape(log_probs)[-1])
        prefix_log_prob, prefix_token = tf.math.top_k(log_probs, k=per_prefix)
        candidates = alive_log_prob[:, :, None] + tf.reshape(prefix_log_prob, (batch, beam, -1))
        top_log_prob, top_index = tf.math.top_k(tf.reshape(candidates, (batch, -1)), k=2 * beam)
        origin = top_index // per_prefix
        token = tf.gather(tf.reshape(prefix_token, (batch, -1)), top_index, batch_dims=1)
        sequences = write_column(tf.gather(alive_tokens, origin, batch_dims=1), step, token)
        length_norm = length_penalty(step + 1, alpha)

        is_end = tf.logical_and(tf.equal(token, end_id), stop_at_end)
        new_alive_log_prob, pick = tf.math.top_k(
            tf.where(is_end, NEG_INF, top_log_prob), k=beam
        )
        new_alive_tokens = tf.gather(sequences, pick, batch_dims=1)
        new_origin = tf.gather(origin, pick, batch_dims=1)

        within_beam = tf.range(2 * beam)[None] < beam
        end_scores = tf.where(
            tf.logical_and(is_end, within_beam), top_log_prob / length_norm, NEG_INF
        )
        at_limit = step + 1 >= limits
        limit_scores = tf.where(at_limit[:, None], new_alive_log_prob / length_norm, NEG_INF)
        pool_scores, pool_pick = tf.math.top_k(
            tf.concat([finished_scores, end_scores, limit_scores], axis=1), k=beam
        )
        pool_tokens = tf.gather(
            tf.concat([finished_tokens, sequences, new_alive_tokens], axis=1),
            pool_pick,
            batch_dims=1,
        )

        best_alive = new_alive_log_prob[:, 0] / length_norm
        settled = tf.logical_and(stop_at_end, pool_scores[:, -1] >= best_alive)
        rows = tf.reshape(tf.range(batch)[:, None] * beam + new_origin, (-1,))
        # Rows already done keep their results, so batching never changes a row's answer.
        keep = done[:, None]
        return _with_shapes_of(
            (
                step + 1,
                tf.where(keep[..., None], alive_tokens, new_alive_tokens),
                tf.where(keep, alive_log_prob, new_alive_log_prob),
                tf.where(keep[..., None], finished_tokens, pool_tokens),
                tf.where(keep, finished_scores, pool_scores),
                tf.logical_or(done, tf.logical_or(settled, at_limit)),
                tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), new_state),
            ),
            (step, alive_tokens, alive_log_prob, finished_tokens, finished_scores, done, state),
        )

    _, _, _, finished_tokens, finished_scores, _, _ = tf.while_loop(
        cond,
        body,
        (tf.constant(0), alive_tokens, alive_log_prob, finished_tokens, finished_scores, done,
         state),
    )
    tokens = finished_tokens[:, 0]
    tokens = tf.where(tf.equal(tokens, end_id), 0, tokens) if stop_at_end else tokens
    return tokens, finished_scores[:, 0]
