"""Greedy and beam search on hand-made Markov chains, where the right answer can be worked out."""

import itertools
import math
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.inference.search import (
    TOP_K_BLOCK,
    beam_search,
    greedy_search,
    length_penalty,
    log_softmax_at,
    top_k,
    write_column,
)

START, END = 2, 3


def markov_step(tables):
    """Step function whose next-token log-probs depend only on the previous token.

    `tables` is `(batch, vocab, vocab)` log-probabilities, one chain per source; the state is each
    row's source index (beam search repeats it per beam and gathers it like a cache).
    """
    tables = tf.constant(tables, tf.float32)

    def step_fn(tokens, step, rows, _context):
        return tf.gather_nd(tables, tf.stack([rows, tokens], axis=1)), rows

    return step_fn


def random_tables(batch, vocab, seed):
    """Random chains that never emit padding (0) or START, like the real decoder."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(batch, vocab, vocab))
    logits[:, :, [0, START]] = -np.inf
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def exhaustive_best(table, limit, alpha):
    """Best hypothesis by log P / lp(|Y|): sequences ending in END, or reaching the limit."""
    best = (-math.inf, None)
    tokens = [t for t in range(table.shape[0]) if np.isfinite(table[START, t])]
    for length in range(1, limit + 1):
        for sequence in itertools.product(tokens, repeat=length):
            if END in sequence[:-1] or (length < limit and sequence[-1] != END):
                continue
            previous, log_prob = START, 0.0
            for token in sequence:
                log_prob += table[previous, token]
                previous = token
            score = log_prob / ((5 + length) / 6) ** alpha
            if score > best[0]:
                best = (score, [t for t in sequence if t != END])
    return best


def run_beam(tables, limits, beam_width, alpha, max_length):
    batch = len(tables)
    rows = tf.repeat(tf.range(batch), beam_width)
    tokens, scores = beam_search(
        markov_step(tables), initial_state=rows, start_id=START, end_id=END, limits=limits,
        max_length=max_length, beam_width=beam_width, alpha=alpha,
    )
    return tokens.numpy(), scores.numpy()


def run_greedy(tables, limits, alpha, max_length, stop_at_end=True):
    tokens, scores = greedy_search(
        markov_step(tables), initial_state=tf.range(len(tables)), start_id=START, end_id=END,
        limits=limits, max_length=max_length, alpha=alpha, stop_at_end=stop_at_end,
    )
    return tokens.numpy(), scores.numpy()


def test_length_penalty_is_the_gnmt_formula():
    lengths = np.array([1, 3, 10])
    for alpha in (0.0, 0.6, 1.0):
        np.testing.assert_allclose(
            length_penalty(lengths, alpha).numpy(), ((5 + lengths) / 6) ** alpha, rtol=1e-6
        )


def test_length_penalty_flips_the_ranking_where_the_formula_says():
    # Two complete hypotheses: "4 END" (short, likelier) and "5 6 END" (long).
    probabilities = np.zeros((7, 7))
    probabilities[START, [4, 5]] = [0.55, 0.45]
    probabilities[4, [END, 5, 6]] = [0.9, 0.05, 0.05]
    probabilities[5, [6, END, 5]] = [0.95, 0.025, 0.025]
    probabilities[6, [END, 5, 6]] = [0.95, 0.025, 0.025]
    with np.errstate(divide="ignore"):
        table = np.log(probabilities)
    short = table[START, 4] + table[4, END]
    long = table[START, 5] + table[5, 6] + table[6, END]
    # short / lp(2) = long / lp(3)  <=>  (8 / 7) ** alpha = long / short
    threshold = math.log(long / short) / math.log(8 / 7)
    assert 1.0 < threshold < 3.0
    for alpha, expected, log_prob, length in (
        (threshold - 0.2, [4], short, 2),
        (threshold + 0.2, [5, 6], long, 3),
    ):
        tokens, scores = run_beam(table[None], [3], beam_width=2, alpha=alpha, max_length=3)
        assert tokens[0].tolist() == expected + [0] * (3 - len(expected))
        assert scores[0] == pytest.approx(log_prob / ((5 + length) / 6) ** alpha, rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_wide_beam_without_length_penalty_finds_the_exact_best(seed):
    tables = random_tables(batch=4, vocab=6, seed=seed)
    tokens, scores = run_beam(tables, [3, 3, 3, 3], beam_width=12, alpha=0.0, max_length=3)
    for row, table in enumerate(tables):
        best_score, best_tokens = exhaustive_best(table, limit=3, alpha=0.0)
        assert scores[row] == pytest.approx(best_score, rel=1e-5)
        assert tokens[row].tolist() == best_tokens + [0] * (3 - len(best_tokens))


def test_greedy_follows_the_most_likely_token_and_scores_it():
    tables = random_tables(batch=3, vocab=6, seed=7)
    limits = [5, 2, 4]
    tokens, scores = run_greedy(tables, limits, alpha=0.6, max_length=5)
    for row, table in enumerate(tables):
        previous, log_prob, expected = START, 0.0, []
        while len(expected) < limits[row]:
            token = int(np.argmax(table[previous]))
            log_prob += table[previous, token]
            expected.append(token)
            if token == END:
                break
            previous = token
        lp = ((5 + len(expected)) / 6) ** 0.6
        assert scores[row] == pytest.approx(log_prob / lp, rel=1e-5)
        written = [t for t in expected if t != END]
        assert tokens[row].tolist() == written + [0] * (5 - len(written))


def test_greedy_without_stopping_decodes_up_to_each_limit():
    table = np.full((6, 6), -np.inf)
    table[:, END] = 0.0  # END is certain at every step
    tokens, _ = run_greedy(np.stack([table, table]), [4, 2], 0.0, 4, stop_at_end=False)
    assert tokens.tolist() == [[END] * 4, [END] * 2 + [0] * 2]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_of_one_is_greedy(alpha):
    tables = random_tables(batch=16, vocab=6, seed=3)
    limits = np.arange(16) % 6 + 1
    greedy_tokens, greedy_scores = run_greedy(tables, limits, alpha, max_length=6)
    beam_tokens, beam_scores = run_beam(tables, limits, 1, alpha, max_length=6)
    np.testing.assert_array_equal(beam_tokens, greedy_tokens)
    np.testing.assert_allclose(beam_scores, greedy_scores, rtol=1e-6)


@pytest.mark.parametrize("alpha", [0.6, 3.0])
def test_a_row_gets_the_same_result_alone_or_batched(alpha):
    # A strong length penalty rewards going on, so a row that kept searching after it was done
    # (because a longer row in its batch was not) would find a different answer.
    tables = random_tables(batch=6, vocab=6, seed=11)
    with np.errstate(divide="ignore"):
        tables[1] = np.log([[0, 0.01, 0, 0.01, 0.97, 0.01]] * 6)  # "4 4 4 ..." nearly surely
    limits = np.array([6, 2, 5, 3, 6, 1])
    batched = run_beam(tables, limits, beam_width=3, alpha=alpha, max_length=6)
    for row in range(6):
        alone = run_beam(tables[row : row + 1], limits[row : row + 1], 3, alpha, max_length=6)
        np.testing.assert_array_equal(alone[0][0], batched[0][row])
        assert alone[1][0] == pytest.approx(batched[1][row], rel=1e-6)


def second_order_step(tables, growing: bool):
    """Step function whose next-token log-probs depend on the previous two tokens
    (`tables[before, last]`, one `(vocab, vocab, vocab)` chain); the state is the tokens fed so
    far, START first, either growing by one column per step or written into a fixed buffer."""
    tables = tf.constant(tables, tf.float32)

    def step_fn(tokens, step, history, _context):
        if growing:
            history = tf.concat([history, tokens[:, None]], axis=1)
            before = history[:, -2]
        else:
            before = tf.gather(history, step, axis=1)
            history = write_column(history, step + 1, tokens)
        return tf.gather_nd(tables, tf.stack([before, tokens], axis=1)), history

    return step_fn


@pytest.mark.parametrize("beam_width", [1, 3])
def test_a_state_that_grows_every_step_decodes_like_a_fixed_buffer(beam_width):
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=2.0, size=(6, 6, 6))
    logits[..., [0, START]] = -np.inf
    tables = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    limits, max_length, rows = [5, 3], 5, 2 * beam_width

    def search(growing, state_shapes=None):
        columns = 1 if growing else max_length + 1
        return tf.function(beam_search)(
            second_order_step(tables, growing),
            initial_state=tf.fill((rows, columns), START), start_id=START, end_id=END,
            limits=limits, max_length=max_length, beam_width=beam_width, alpha=0.6,
            state_shapes=state_shapes,
        )

    fixed_tokens, fixed_scores = search(growing=False)
    tokens, scores = search(growing=True, state_shapes=tf.TensorShape([rows, None]))
    np.testing.assert_array_equal(tokens.numpy(), fixed_tokens.numpy())
    np.testing.assert_allclose(scores.numpy(), fixed_scores.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):  # without state_shapes, shapes must hold
        search(growing=True)


def context_markov_step(tables, rows_seen):
    """Like `markov_step`, but each row's source index is the context and the state counts the
    steps each row took; `rows_seen` gets the number of rows of every step (when run eagerly)."""
    tables = tf.constant(tables, tf.float32)

    def step_fn(tokens, step, steps_taken, sources):
        rows_seen.append(int(tokens.shape[0]))
        return tf.gather_nd(tables, tf.stack([sources, tokens], axis=1)), steps_taken + 1

    return step_fn


def search_dropping(search, tables, limits, max_length, drop_finished, beam_width=1, **options):
    """Runs `search` eagerly with the source indices as context; returns tokens, scores and the
    rows each step decoded."""
    rows_seen = []
    rows = tf.repeat(tf.range(len(tables)), beam_width)
    if search is beam_search:
        options["beam_width"] = beam_width
    tokens, scores = search(
        context_markov_step(tables, rows_seen), initial_state=tf.zeros_like(rows),
        context=rows, start_id=START, end_id=END, limits=limits, max_length=max_length,
        drop_finished=drop_finished, **options,
    )
    return tokens.numpy(), scores.numpy(), rows_seen


@pytest.mark.parametrize("search,beam_width", [(greedy_search, 1), (beam_search, 3)])
def test_dropping_finished_rows_changes_no_result(search, beam_width):
    tables = random_tables(batch=6, vocab=6, seed=11)
    limits, max_length = [6, 2, 5, 3, 6, 1], 6
    kept = search_dropping(search, tables, limits, max_length, False, beam_width, alpha=0.6)
    dropped = search_dropping(search, tables, limits, max_length, True, beam_width, alpha=0.6)
    np.testing.assert_array_equal(dropped[0], kept[0])
    np.testing.assert_allclose(dropped[1], kept[1], rtol=1e-6)
    # The state-carried reference (source index as state, no context) agrees too.
    reference = (run_beam(tables, limits, beam_width, 0.6, max_length) if search is beam_search
                 else run_greedy(tables, limits, 0.6, max_length))
    np.testing.assert_array_equal(dropped[0], reference[0])
    assert kept[2] == [6 * beam_width] * len(kept[2])  # every row, every step
    assert sum(dropped[2]) < sum(kept[2])


@pytest.mark.parametrize("search,beam_width", [(greedy_search, 1), (beam_search, 2)])
def test_finished_rows_leave_when_the_others_fit_a_smaller_power_of_two(search, beam_width):
    # Decoding to the limits: after step t the rows not done are those whose limit exceeds t + 1.
    tables = random_tables(batch=6, vocab=6, seed=3)
    limits = [1, 5, 2, 5, 3, 1]
    *_, rows_seen = search_dropping(search, tables, limits, 5, True, beam_width,
                                    stop_at_end=False)
    # Not done after each step: 4, 3, 2, 2, 0 -> rows 6, 4 (4 fits in 4 < 6), 4 (3 fits in 4),
    # 2, 2.
    assert rows_seen == [beam_width * rows for rows in (6, 4, 4, 2, 2)]


@pytest.mark.parametrize("k", [1, 8, 24])
def test_top_k_in_blocks_equals_tensorflows_top_k_with_ties(k):
    rng = np.random.default_rng(k)
    rows, n = 16, 50 * TOP_K_BLOCK
    # Few distinct values, so ties abound within and across blocks (top_k prefers the lower
    # index); -inf where decoding bans a token; one row of equal values.
    values = rng.integers(0, 40, (rows, n)).astype(np.float32)
    values[:, [0, START]] = -np.inf
    values[3] = 1.0
    expected = tf.math.top_k(values, k=k)
    for k_given in (k, tf.constant(k)):
        found = top_k(tf.constant(values), k_given)
        np.testing.assert_array_equal(found[0].numpy(), expected.values.numpy())
        np.testing.assert_array_equal(found[1].numpy(), expected.indices.numpy())
    continuous = rng.normal(size=(rows, n)).astype(np.float32)
    np.testing.assert_array_equal(top_k(continuous, k)[1].numpy(),
                                  tf.math.top_k(continuous, k=k).indices.numpy())


def test_log_softmax_at_the_kept_entries_equals_the_full_log_softmax():
    rng = np.random.default_rng(5)
    logits = rng.normal(scale=4.0, size=(6, 128)).astype("float32")
    logits[:, [0, START]] = -np.inf  # never generated, as the decoder rules them out
    values, indices = tf.math.top_k(logits, k=8)
    expected = tf.gather(tf.nn.log_softmax(logits), indices, batch_dims=1)
    np.testing.assert_allclose(log_softmax_at(tf.constant(logits), values), expected, atol=1e-5)


def test_beam_search_under_xla_finds_its_top_k_without_sorting_the_candidates():
    # XLA turns a top-k (a sort then a slice) into its TopK kernel only when nothing else slices
    # the sort; a full sort of the 2 * beam best blocks' candidates cost 0.2 ms a beam step.
    batch, beam, vocab = 1, 4, 32 * TOP_K_BLOCK
    tables = random_tables(batch, vocab, seed=9)
    step_fn = markov_step(tables)

    def search(limits):
        return beam_search(
            step_fn, initial_state=tf.zeros((batch * beam,), tf.int32), start_id=START,
            end_id=END, limits=limits, max_length=6, beam_width=beam, alpha=0.6,
        )

    limits = tf.fill((batch,), 6)
    compiled = tf.function(search, jit_compile=True)
    hlo = compiled.experimental_get_compiler_ir(limits)(stage="optimized_hlo")
    score_sorts = [line for line in hlo.splitlines() if re.search(r"= \(f32\[.*\bsort\(", line)]
    assert 'custom_call_target="TopK"' in hlo
    assert not score_sorts, score_sorts
    np.testing.assert_array_equal(compiled(limits)[0].numpy(), tf.function(search)(limits)[0])
