"""The `>>>` examples of the modules whose tests live elsewhere run as doctests. Examples that
need files on disk (a corpus, a trained run, an export) or a running cluster are marked
`+SKIP`; the others must give the output they show."""

import pytest


@pytest.mark.parametrize("module", [
    "keras_transformer.config",
    "keras_transformer.run_dir",
    "keras_transformer.text.corpus",
    "keras_transformer.text.tokenizer",
    "keras_transformer.training.accumulation",
    "keras_transformer.training.evaluation",
    "keras_transformer.training.losses",
    "keras_transformer.training.trainer",
    "serving.process",
])
def test_docstring_examples_run(run_doctests, module):
    run_doctests(module)
