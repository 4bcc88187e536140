"""`decoding_options`: a model's own decoding fills both options only when neither is given."""

import pytest

from keras_transformer.inference.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BEAM_WIDTH,
    decoding_options,
)

OWN = {"beam_width": 3, "alpha": 1.4}


@pytest.mark.parametrize("beam_width, alpha, own, expected", [
    (None, None, None, (DEFAULT_BEAM_WIDTH, DEFAULT_ALPHA)),
    (None, None, {}, (DEFAULT_BEAM_WIDTH, DEFAULT_ALPHA)),
    (None, None, OWN, (3, 1.4)),
    (1, None, OWN, (1, DEFAULT_ALPHA)),
    (None, 0.8, OWN, (DEFAULT_BEAM_WIDTH, 0.8)),
    (2, 1.0, OWN, (2, 1.0)),
    (None, None, {"alpha": 1.2}, (DEFAULT_BEAM_WIDTH, 1.2)),
])
def test_own_options_fill_in_only_when_none_is_given(beam_width, alpha, own, expected):
    assert decoding_options(beam_width, alpha, own) == expected
