"""Greedy and beam search over any step function, as `tf.while_loop`s.

The searches know nothing of Transformers: a step function maps the latest tokens (and a state
such as key/value caches) to next-token logits. Buffers have a fixed size
(`max_length`) and finished sequences are tracked with flags, so with every loop variable keeping
its shape the loops run inside `tf.function` and under XLA (`jit_compile=True`).

Outside XLA a search can drop its finished rows (`drop_finished=True`): once a row (greedy) or a
source with all its beams (beam search) is done, its result is written to full-size buffers and
it leaves the loop, so the later steps of a batch cost only the rows still being decoded, as in
CTranslate2. Rows leave when the ones not done fit in a power of two below the current count (the
rest of it made up with done rows, frozen), which keeps the shapes a loop sees to a few. Results
are the same either way.

Step function contract:
    `step_fn(tokens, step, state, context) -> (logits, state)` with `tokens` int32 `(rows,)`
    (the token chosen at the previous step, START at step 0), `step` an int32 scalar (the position
    being predicted), `state` a nest of tensors whose first axis is `rows` that the step changes
    (e.g. self-attention key/value caches), `context` a nest of tensors whose first axis is `rows`
    that it only reads (e.g. cross-attention keys/values and the source padding mask), and
    `logits` float32 `(rows, vocab_size)`, next-token log-probabilities up to a constant per row
    (-inf for tokens never to be chosen; the searches normalise the few tokens they keep, see
    `log_softmax_at`). Beam search reorders the state by gathering rows;
    rows are dropped from both. The state keeps its static shapes from step to step unless the
    search is given `state_shapes` with None where a size changes (caches that grow by one
    position per step; not under XLA, which needs static shapes).

Each loop carries one named state (`GreedyState`, `BeamState`); a beam step is split into named
stages (expand, choose the live prefixes, update the finished pool, freeze or drop finished rows).

Scores are `log P(Y | X) / lp(|Y|)` with the GNMT length penalty
`lp(|Y|) = ((5 + |Y|) / 6) ** alpha` (Wu et al., 2016, eq. 14); `|Y|` counts END.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.inference.defaults import DEFAULT_ALPHA
from keras_transformer.layers.real_positions import power_of_two_at_least

StepFn = Callable[[tf.Tensor, tf.Tensor, object, object], tuple[tf.Tensor, object]]

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


def _with_shapes(values, shapes):
    """Gives each new loop value the static shape the loop keeps, which `tf.while_loop` requires
    to hold (gathers and reshapes with dynamic sizes lose known dimensions such as a batch of
    1)."""

    def restore(value, shape):
        value.set_shape(shape)
        return value

    return tf.nest.map_structure(restore, values, shapes)


def _smaller(a, b):
    """min(a, b), as a Python int when both are (XLA needs static top-k sizes)."""
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else tf.minimum(a, b)


# Vocabularies that are a multiple of this many tokens are searched for their top k in blocks
# (`top_k`); decoding pads its output projection to one (`inference.decoding`).
TOP_K_BLOCK = 64


def top_k(values, k):
    """`tf.math.top_k(values, k)` over the last axis, the same values and indices (ties to the
    lower index), found in blocks of `TOP_K_BLOCK` when the last axis is a multiple of it.

    TensorFlow's CPU top-k scans a vocabulary-wide row element by element (2.6 ms a beam step for
    128 rows of 8,000 on two cores, a quarter of the step). In blocks: each block's maximum (one
    vectorised reduction), the k best blocks, and the top k of their elements. That is exact: a
    block holding one of the k best elements has fewer than k blocks ranked above it, as each
    of those holds a better element.

    Args:
        values: float `(rows, n)`.
        k: int or int32 scalar, at most `n`.

    Returns:
        `(values, indices)`: `(rows, k)` best first, int32 `(rows, k)`.
    """
    n = values.shape[-1]
    if n is None or n % TOP_K_BLOCK or (isinstance(k, int) and n < 4 * k * TOP_K_BLOCK):
        return tf.math.top_k(values, k=k)
    blocks = tf.reshape(values, (tf.shape(values)[0], n // TOP_K_BLOCK, TOP_K_BLOCK))
    _, best_blocks = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k=_smaller(k, n // TOP_K_BLOCK))
    best_blocks = tf.sort(best_blocks, axis=-1)  # candidates in vocabulary order: ties as top_k
    candidates = tf.gather(blocks, best_blocks, batch_dims=1)
    top_values, position = tf.math.top_k(
        tf.reshape(candidates, (tf.shape(values)[0], -1)), k=k
    )
    block = tf.gather(best_blocks, position // TOP_K_BLOCK, batch_dims=1)
    return top_values, block * TOP_K_BLOCK + position % TOP_K_BLOCK


def log_softmax_at(logits, best):
    """`tf.nn.log_softmax(logits)` at the entries `best` of each row, the row's maximum among them.

    A search keeps a few tokens per row, so only they are normalised: the row's log-sum-exp is
    reduced from `logits` without writing a vocabulary-wide table of log-probabilities (which
    is what TensorFlow's log-softmax kernel does, the slowest vocabulary-wide op of a beam step).
    The same formula as that kernel's: `(x - max) - log(sum(exp(logits - max)))`.

    Args:
        logits: float32 `(rows, n)`.
        best: float32 `(rows, k)`, entries of `logits`, each row's maximum among them.

    Returns:
        float32 `(rows, k)`.

    Example:
        >>> logits = tf.constant([[1.0, 2.0, 3.0]])
        >>> expected = tf.nn.log_softmax(logits)[:, ::-1]
        >>> bool(tf.reduce_all(log_softmax_at(logits, logits[:, ::-1]) == expected))
        True
    """
    # The row's maximum is reduced from `best`, not read from its first column: under XLA, a
    # slice of `tf.math.top_k`'s values narrower than k keeps the compiler from turning the
    # top-k's sort into its TopK kernel, and a full sort of a beam step's 4 x 512 candidates
    # cost 0.2 ms a step, more than the rest of the search.
    top = tf.reduce_max(best, axis=-1, keepdims=True)
    total = tf.reduce_sum(tf.exp(logits - top), axis=-1, keepdims=True)
    return (best - top) - tf.math.log(total)


def _gather_rows(nest, rows):
    """Rows `rows` (int `(kept,)`) of every tensor in `nest`, along the first axis."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, rows), nest)


def _gather_rows_if(condition, nest, rows):
    """`_gather_rows(nest, rows)` when the scalar `condition` holds, else `nest` uncopied."""
    if not tf.nest.flatten(nest):
        return nest
    return tf.cond(condition, lambda: _gather_rows(nest, rows), lambda: nest)


def _keep_and_drop(done):
    """Which rows stay in the loop and which leave it, given bool `done` `(rows,)`.

    The rows not done stay, topped up with done ones (frozen passengers) to a power of two, and
    only when that is fewer rows than now: so a loop sees a few row counts, not every one from
    the batch size down, and oneDNN builds (and keeps) kernels for a few shapes only.

    Returns:
        `(keep, drop, fewer)`: int32 `(kept,)` and `(dropped,)` row indices (the rows not done
        first when some leave, else every row in order); bool scalar, whether any row leaves.
    """
    rows = tf.size(done)
    kept = tf.minimum(rows, power_of_two_at_least(rows - tf.reduce_sum(tf.cast(done, tf.int32))))
    fewer = kept < rows
    order = tf.argsort(tf.cast(done, tf.int32), stable=True)  # the rows not done first
    keep = tf.cond(fewer, lambda: order[:kept], lambda: tf.range(rows))  # else, in order
    return keep, order[kept:], fewer


class Results(NamedTuple):
    """The search's answer for every row of the batch, written as rows finish.

    Attributes:
        tokens: int32 `(batch, max_length)`.
        scores: float32 `(batch,)`.
    """

    tokens: tf.Tensor
    scores: tf.Tensor

    @classmethod
    def empty(cls, batch, max_length):
        return cls(tf.zeros((batch, max_length), tf.int32), tf.zeros((batch,), tf.float32))

    def write(self, rows, tokens, scores) -> Results:
        """Sets rows `rows` (int `(n,)`) to `tokens` `(n, max_length)` and `scores` `(n,)`."""
        rows = tf.cast(rows, tf.int32)[:, None]
        return Results(
            tf.tensor_scatter_nd_update(self.tokens, rows, tokens),
            tf.tensor_scatter_nd_update(self.scores, rows, scores),
        )


class GreedyState(NamedTuple):
    """What `greedy_search`'s loop carries from one step to the next. Every field but `step` and
    `results` has one entry per row still decoded (all rows unless finished ones are dropped).

    Attributes:
        step: int32 scalar, the position being predicted.
        rows: int32 `(rows,)`, each row's index in the batch.
        tokens: int32 `(rows, max_length)`, the tokens chosen so far.
        last: int32 `(rows,)`, the token chosen at the previous step (START at first).
        log_prob: float32 `(rows,)`, log-probability of each row's tokens.
        lengths: int32 `(rows,)`, tokens generated per row (END included).
        limits: int32 `(rows,)`, most tokens each row may generate.
        done: bool `(rows,)`, rows that ended or reached their limit.
        model_state: the step function's state.
        context: the step function's context.
        results: `Results` of the batch's finished rows (dropped ones only; the rest are
            written when the loop ends).
    """

    step: tf.Tensor
    rows: tf.Tensor
    tokens: tf.Tensor
    last: tf.Tensor
    log_prob: tf.Tensor
    lengths: tf.Tensor
    limits: tf.Tensor
    done: tf.Tensor
    model_state: object
    context: object
    results: Results


class BeamState(NamedTuple):
    """What `beam_search`'s loop carries from one step to the next. Every field but `step` and
    `results` has one entry per source still searched (per beam row for the step function's
    state and context).

    Attributes:
        step: int32 scalar, the position being predicted.
        sources: int32 `(sources,)`, each source's index in the batch.
        limits: int32 `(sources,)`, most tokens each source may generate.
        alive_tokens: int32 `(sources, beam, max_length)`, the live prefixes.
        alive_log_prob: float32 `(sources, beam)`, their log-probabilities, best first.
        finished_tokens: int32 `(sources, beam, max_length)`, the finished pool.
        finished_scores: float32 `(sources, beam)`, its scores `log P / lp(|Y|)`, best first.
        done: bool `(sources,)`, sources whose search is over (frozen from then on).
        model_state: the step function's state, row `s * beam + k` for beam `k` of source `s`.
        context: the step function's context, rows as for `model_state`.
        results: `Results` of the batch's finished sources (dropped ones only; the rest are
            written when the loop ends).
    """

    step: tf.Tensor
    sources: tf.Tensor
    limits: tf.Tensor
    alive_tokens: tf.Tensor
    alive_log_prob: tf.Tensor
    finished_tokens: tf.Tensor
    finished_scores: tf.Tensor
    done: tf.Tensor
    model_state: object
    context: object
    results: Results


class Candidates(NamedTuple):
    """The `2 * beam` best one-token extensions of a source's live prefixes, best first.

    Attributes:
        log_prob: float32 `(sources, 2 * beam)`.
        token: int32 `(sources, 2 * beam)`, the new token.
        origin: int32 `(sources, 2 * beam)`, the live prefix (beam index) it extends.
        sequences: int32 `(sources, 2 * beam, max_length)`, prefix and new token.
    """

    log_prob: tf.Tensor
    token: tf.Tensor
    origin: tf.Tensor
    sequences: tf.Tensor


def _run_loop(cond, body, initial, state_shapes, drop_finished: bool):
    """`tf.while_loop` over one named state; returns the final state.

    Args:
        state_shapes: static shapes of the model state across steps, or None to keep the
            initial state's.
        drop_finished: whether the number of rows may change from step to step.
    """
    shapes = tf.nest.map_structure(lambda tensor: tensor.shape, initial)
    if state_shapes is not None:
        shapes = shapes._replace(model_state=state_shapes)
    if drop_finished:
        any_rows = lambda shape: tf.TensorShape([None]).concatenate(shape[1:])  # noqa: E731
        shapes = shapes._replace(**{
            field: tf.nest.map_structure(any_rows, getattr(shapes, field))
            for field in shapes._fields if field not in ("step", "results")
        })
    (final,) = tf.while_loop(
        cond,
        lambda state: (_with_shapes(body(state), shapes),),
        (initial,),
        shape_invariants=(shapes,),
    )
    return final


def _searching(max_length):
    """The loop condition of both searches: steps left and rows not done."""

    def cond(state):
        return tf.logical_and(state.step < max_length, tf.logical_not(tf.reduce_all(state.done)))

    return cond


def greedy_search(
    step_fn: StepFn,
    *,
    initial_state,
    start_id: int,
    end_id: int,
    limits,
    max_length,
    alpha: float = 0.0,
    stop_at_end: bool = True,
    state_shapes=None,
    context=(),
    drop_finished: bool = False,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Takes the most probable token at every step until END or the row's length limit.

    Args:
        step_fn: see the module docstring; `rows` is the batch size.
        initial_state: initial state of `step_fn`.
        start_id: first decoder input.
        end_id: token that ends a sequence.
        limits: int32 `(batch,)`, most tokens row `i` may generate (each `<= max_length`).
        max_length: size of the token buffer (Python int, or a scalar known at compile time
            under XLA).
        alpha: length-penalty exponent for the returned scores.
        stop_at_end: False decodes `limits` tokens whatever is generated (benchmarks).
        state_shapes: `tf.TensorShape`s (nested like `initial_state`) the state keeps across
            steps, None where a size changes; default: the initial state's shapes.
        context: what `step_fn` reads besides its state (a nest of `(batch, ...)` tensors).
        drop_finished: drop each row from the loop once it is done (not under XLA).

    Returns:
        `(tokens, scores)`: int32 `(batch, max_length)`, the generated tokens with END and
        everything after it set to 0 (padding); float32 `(batch,)`, length-normalised
        log-probabilities.
    """
    limits = tf.cast(limits, tf.int32)
    batch = tf.shape(limits)[0]
    initial = GreedyState(
        step=tf.constant(0),
        rows=tf.range(batch),
        tokens=tf.zeros((batch, max_length), tf.int32),
        last=tf.fill((batch,), tf.constant(start_id, tf.int32)),
        log_prob=tf.zeros((batch,), tf.float32),
        lengths=tf.zeros((batch,), tf.int32),
        limits=limits,
        done=tf.zeros((batch,), tf.bool),
        model_state=initial_state,
        context=context,
        results=Results.empty(batch, max_length),
    )

    def scores(state: GreedyState):
        return state.log_prob / length_penalty(state.lengths, alpha)

    def drop_done_rows(state: GreedyState) -> GreedyState:
        keep, drop, fewer = _keep_and_drop(state.done)
        per_row = ("rows", "tokens", "last", "log_prob", "lengths", "limits", "done")
        model_state, context = _gather_rows_if(fewer, (state.model_state, state.context), keep)
        return state._replace(
            **{field: tf.gather(getattr(state, field), keep) for field in per_row},
            model_state=model_state,
            context=context,
            results=state.results.write(
                tf.gather(state.rows, drop), tf.gather(state.tokens, drop),
                tf.gather(scores(state), drop),
            ),
        )

    def body(state: GreedyState) -> GreedyState:
        logits, model_state = step_fn(state.last, state.step, state.model_state, state.context)
        best = tf.argmax(logits, axis=-1, output_type=tf.int32)
        best_logit = tf.gather(logits, best, axis=1, batch_dims=1)[:, None]
        chosen_log_prob = log_softmax_at(logits, best_logit)[:, 0]
        chosen = tf.where(state.done, 0, best)
        ended = tf.logical_and(tf.equal(chosen, end_id), stop_at_end)
        at_limit = state.step + 1 >= state.limits
        new = state._replace(
            step=state.step + 1,
            tokens=write_column(state.tokens, state.step, chosen),
            last=chosen,
            log_prob=state.log_prob + tf.where(state.done, 0.0, chosen_log_prob),
            lengths=state.lengths + tf.cast(tf.logical_not(state.done), tf.int32),
            done=tf.logical_or(state.done, tf.logical_or(ended, at_limit)),
            model_state=model_state,
        )
        return drop_done_rows(new) if drop_finished else new

    final = _run_loop(_searching(max_length), body, initial, state_shapes, drop_finished)
    tokens, scores = final.results.write(final.rows, final.tokens, scores(final))
    tokens = tf.where(tf.equal(tokens, end_id), 0, tokens) if stop_at_end else tokens
    return tokens, scores


def _previous_tokens(state: BeamState, start_id: int):
    """Each live prefix's last token, START at the first step: int32 `(sources * beam,)`."""
    last = tf.gather(state.alive_tokens, tf.maximum(state.step - 1, 0), axis=2)
    return tf.reshape(tf.where(state.step > 0, last, start_id), (-1,))


def _expand(state: BeamState, logits, beam) -> Candidates:
    """The `2 * beam` best extensions of each source's live prefixes by one token.

    Two stages: only a prefix's own `2 * beam` best tokens can be among its source's `2 * beam`
    best candidates, so the search over `beam * vocab` candidates shrinks to `beam * 2 * beam`.

    Args:
        logits: float32 `(sources * beam, vocab)`, next-token logits (see the step contract).
    """
    sources = tf.shape(state.alive_log_prob)[0]
    per_prefix = _smaller(2 * beam, logits.shape[-1] or tf.shape(logits)[-1])
    prefix_logit, prefix_token = top_k(logits, per_prefix)
    prefix_log_prob = log_softmax_at(logits, prefix_logit)
    totals = state.alive_log_prob[:, :, None] + tf.reshape(prefix_log_prob, (sources, beam, -1))
    log_prob, index = tf.math.top_k(tf.reshape(totals, (sources, -1)), k=2 * beam)
    origin = index // per_prefix
    token = tf.gather(tf.reshape(prefix_token, (sources, -1)), index, batch_dims=1)
    prefixes = tf.gather(state.alive_tokens, origin, batch_dims=1)
    return Candidates(log_prob, token, origin, write_column(prefixes, state.step, token))


def _surviving_prefixes(candidates: Candidates, is_end, beam):
    """The `beam` best candidates that did not end: they stay alive.

    Returns:
        `(log_prob, tokens, origin)`: `(sources, beam)`, `(sources, beam, max_length)` and the beam
        index each extends, `(sources, beam)`.
    """
    log_prob, pick = tf.math.top_k(tf.where(is_end, NEG_INF, candidates.log_prob), k=beam)
    tokens = tf.gather(candidates.sequences, pick, batch_dims=1)
    return log_prob, tokens, tf.gather(candidates.origin, pick, batch_dims=1)


def _finished_pool(
    state: BeamState, candidates: Candidates, is_end, alive_log_prob, alive_tokens, at_limit,
    length_norm, beam,
):
    """The `beam` best of the pool so far, the candidates that ended within the top `beam`,
    and, for rows at their length limit, the live prefixes.

    Returns:
        `(scores, tokens)`: float32 `(sources, beam)` best first, int32
        `(sources, beam, max_length)`.
    """
    # Only an END within the top `beam` candidates counts, which makes beam 1 exactly greedy.
    within_beam = tf.range(2 * beam)[None] < beam
    end_scores = tf.where(
        tf.logical_and(is_end, within_beam), candidates.log_prob / length_norm, NEG_INF
    )
    limit_scores = tf.where(at_limit[:, None], alive_log_prob / length_norm, NEG_INF)
    scores, pick = tf.math.top_k(
        tf.concat([state.finished_scores, end_scores, limit_scores], axis=1), k=beam
    )
    tokens = tf.gather(
        tf.concat([state.finished_tokens, candidates.sequences, alive_tokens], axis=1),
        pick,
        batch_dims=1,
    )
    return scores, tokens


def _freeze_done_rows(old: BeamState, new: BeamState) -> BeamState:
    """Sources already done keep their prefixes and pool, so batching never changes a source's
    answer. (Their model state rows are still gathered; nothing reads them again.)"""
    keep = old.done[:, None]
    return new._replace(
        alive_tokens=tf.where(keep[..., None], old.alive_tokens, new.alive_tokens),
        alive_log_prob=tf.where(keep, old.alive_log_prob, new.alive_log_prob),
        finished_tokens=tf.where(keep[..., None], old.finished_tokens, new.finished_tokens),
        finished_scores=tf.where(keep, old.finished_scores, new.finished_scores),
    )


def _beam_rows(sources, beams):
    """Row `s * beam + k` of the step function for each source `s` and beam index `k`.

    Args:
        sources: int `(kept,)`.
        beams: int32 `(kept, beam)`.

    Returns:
        int32 `(kept * beam,)`.
    """
    beam = tf.shape(beams)[1]
    return tf.reshape(tf.cast(sources, tf.int32)[:, None] * beam + beams, (-1,))


def _reorder(new: BeamState, origin) -> BeamState:
    """Each live prefix takes the model state of the prefix it extends (`origin`)."""
    sources = tf.range(tf.shape(origin)[0])
    return new._replace(model_state=_gather_rows(new.model_state, _beam_rows(sources, origin)))


def _drop_done_sources(new: BeamState, origin) -> BeamState:
    """Writes the results of the sources that leave the loop (`_keep_and_drop`) and drops them;
    the others' prefixes take the model state of the prefix they extend (`origin`, int32
    `(sources, beam)`), in one gather."""
    keep, drop, fewer = _keep_and_drop(new.done)
    per_source = ("sources", "limits", "alive_tokens", "alive_log_prob", "finished_tokens",
                  "finished_scores", "done")
    kept_origin = tf.gather(origin, keep)
    every_beam = tf.zeros_like(kept_origin) + tf.range(tf.shape(origin)[1])
    return new._replace(
        **{field: tf.gather(getattr(new, field), keep) for field in per_source},
        model_state=_gather_rows(new.model_state, _beam_rows(keep, kept_origin)),
        context=_gather_rows_if(fewer, new.context, _beam_rows(keep, every_beam)),
        results=new.results.write(
            tf.gather(new.sources, drop),
            tf.gather(new.finished_tokens, drop)[:, 0],
            tf.gather(new.finished_scores, drop)[:, 0],
        ),
    )


def beam_search(
    step_fn: StepFn,
    *,
    initial_state,
    start_id: int,
    end_id: int,
    limits,
    max_length,
    beam_width,
    alpha: float = DEFAULT_ALPHA,
    stop_at_end: bool = True,
    state_shapes=None,
    context=(),
    drop_finished: bool = False,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Keeps the `beam_width` most probable prefixes per source; returns the best by lp score.

    Every step expands each live prefix ("alive") by every token and keeps the top `2 * beam`
    candidates, so that `beam` of them continue even when some end. A candidate ending with END
    joins the finished pool (scored `log P / lp(|Y|)`) only if it ranks within the top `beam`,
    which makes `beam_width=1` exactly greedy search. At a source's length limit the live
    prefixes join the pool too. A source stops when its pool is full and its worst finished score
    beats the best live prefix normalised at the current length, or at its limit; from then on it
    is frozen (or dropped, with `drop_finished`), so batching never changes its result.

    Args:
        step_fn: see the module docstring; `rows` is `batch * beam_width`, row `b * beam + k`
            being beam `k` of source `b`.
        initial_state: initial state of `step_fn` for `batch * beam_width` rows.
        start_id: first decoder input.
        end_id: token that ends a sequence.
        limits: int32 `(batch,)`, most tokens source `b` may generate (each `<= max_length`).
        max_length: size of the token buffers.
        beam_width: number of prefixes kept per source (int, or int32 scalar tensor).
        alpha: length-penalty exponent.
        stop_at_end: False keeps searching until every limit (benchmarks).
        state_shapes: as for `greedy_search`.
        context: what `step_fn` reads besides its state (a nest of `(batch * beam, ...)`
            tensors).
        drop_finished: drop each source's rows from the loop once it is done (not under XLA).

    Returns:
        `(tokens, scores)` of the best hypothesis per source: int32 `(batch, max_length)` with
        END and what follows set to 0; float32 `(batch,)`.
    """
    limits = tf.cast(limits, tf.int32)
    batch = tf.shape(limits)[0]
    beam = beam_width
    # Only beam 0 is live at first, so the first expansion does not pick the same token K times.
    first_beam = tf.concat([[0.0], tf.fill((beam - 1,), NEG_INF)], axis=0)
    initial = BeamState(
        step=tf.constant(0),
        sources=tf.range(batch),
        limits=limits,
        alive_tokens=tf.zeros((batch, beam, max_length), tf.int32),
        alive_log_prob=tf.tile(first_beam[None], (batch, 1)),
        finished_tokens=tf.zeros((batch, beam, max_length), tf.int32),
        finished_scores=tf.fill((batch, beam), NEG_INF),
        done=tf.zeros((batch,), tf.bool),
        model_state=initial_state,
        context=context,
        results=Results.empty(batch, max_length),
    )

    def body(state: BeamState) -> BeamState:
        logits, model_state = step_fn(
            _previous_tokens(state, start_id), state.step, state.model_state, state.context
        )
        candidates = _expand(state, logits, beam)
        is_end = tf.logical_and(tf.equal(candidates.token, end_id), stop_at_end)
        alive_log_prob, alive_tokens, origin = _surviving_prefixes(candidates, is_end, beam)
        length_norm = length_penalty(state.step + 1, alpha)
        at_limit = state.step + 1 >= state.limits
        finished_scores, finished_tokens = _finished_pool(
            state, candidates, is_end, alive_log_prob, alive_tokens, at_limit, length_norm, beam
        )
        # The pool's worst against the best live prefix, both sorted; reduced rather than sliced,
        # which would keep XLA from running their top-ks as its TopK kernel (see log_softmax_at).
        worst_finished = tf.reduce_min(finished_scores, axis=1)
        best_alive = tf.reduce_max(alive_log_prob, axis=1)
        settled = tf.logical_and(stop_at_end, worst_finished >= best_alive / length_norm)
        new = state._replace(
            step=state.step + 1,
            alive_tokens=alive_tokens,
            alive_log_prob=alive_log_prob,
            finished_tokens=finished_tokens,
            finished_scores=finished_scores,
            done=tf.logical_or(state.done, tf.logical_or(settled, at_limit)),
            model_state=model_state,
        )
        new = _freeze_done_rows(state, new)
        return _drop_done_sources(new, origin) if drop_finished else _reorder(new, origin)

    final = _run_loop(_searching(max_length), body, initial, state_shapes, drop_finished)
    tokens, scores = final.results.write(
        final.sources, final.finished_tokens[:, 0], final.finished_scores[:, 0]
    )
    tokens = tf.where(tf.equal(tokens, end_id), 0, tokens) if stop_at_end else tokens
    return tokens, scores
