"""BLEU during training: the scorer's translations and score against an independent greedy decoder
and sacreBLEU; the evaluation schedule."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import sacrebleu

from keras_transformer.run_dir import load_run
from keras_transformer.training.evaluation import BleuEvaluation, BleuScorer


@pytest.fixture(scope="module")
def run_and_pairs(trained_run_dir):
    run = load_run(trained_run_dir, compile=False)
    sources = open(run.settings.source_file, encoding="utf-8").read().splitlines()
    targets = open(run.settings.target_file, encoding="utf-8").read().splitlines()
    picked = list(range(0, len(sources), 23))  # short and long sentences, mixed
    return run, [sources[i] for i in picked], [targets[i] for i in picked]


def test_scorer_translates_like_plain_greedy_decoding_in_order(run_and_pairs, uncached_greedy):
    run, sources, references = run_and_pairs
    scorer = BleuScorer(run.model, run.source_tokenizer, run.target_tokenizer, sources,
                        references, batch_size=4)
    assert len({len(s) for s in sources}) > 1  # the scorer sorts by length; order must survive
    assert scorer.translate(sources) == uncached_greedy(run, sources)


def test_scorer_is_sacrebleu_of_its_translations(run_and_pairs, uncached_greedy):
    run, sources, references = run_and_pairs
    hypotheses = uncached_greedy(run, sources)

    def scorer(references, lowercase=False):
        return BleuScorer(run.model, run.source_tokenizer, run.target_tokenizer, sources,
                          references, lowercase=lowercase)

    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert scorer(references)() == pytest.approx(expected)
    assert expected > 50  # the trained model translates its training sentences
    # German nouns are capitalised: lower-cased references only match case-insensitively.
    lowered = [reference.lower() for reference in references]
    insensitive = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert scorer(lowered, lowercase=True)() == pytest.approx(insensitive)
    assert scorer(lowered)() < insensitive - 10


def test_scorer_needs_references_for_every_source(run_and_pairs):
    run, sources, _ = run_and_pairs
    with pytest.raises(ValueError, match="as many references as sources"):
        BleuScorer(run.model, run.source_tokenizer, run.target_tokenizer, sources, sources[:1])


def test_evaluation_runs_every_n_epochs_and_after_the_last():
    scores = iter(range(100))
    evaluated = {}

    class Keep(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            evaluated[epoch + 1] = logs.get("val_bleu")

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.ones((4, 2)), np.zeros((4, 1)), epochs=5, verbose=0,
              callbacks=[BleuEvaluation(lambda: float(next(scores)), every=2), Keep()])
    assert evaluated == {1: None, 2: 0.0, 3: None, 4: 1.0, 5: 2.0}
