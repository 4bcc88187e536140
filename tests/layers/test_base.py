import inspect

import numpy as np

from keras_transformer.layers import BLOCK_ARGUMENTS, Decoder, Encoder
from keras_transformer.layers.base import TransformerBlock


def test_block_arguments_are_the_constructors_keyword_only_parameters():
    parameters = inspect.signature(TransformerBlock.__init__).parameters.values()
    keyword_only = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert tuple(keyword_only) == BLOCK_ARGUMENTS


def test_stacks_hand_every_block_argument_to_every_sublayer():
    arguments = dict(
        d_model=8, num_heads=2, d_ff=12, dropout=0.125, norm_first=True, activation="gelu",
        layer_norm_epsilon=1e-3, kernel_initializer="ones", bias_initializer="ones",
    )
    for stack in (Encoder(2, **arguments), Decoder(2, **arguments)):
        assert {name: stack.get_config()[name] for name in ("d_model", "dropout")} == {
            "d_model": 8, "dropout": 0.125
        }
        stack.build((1, 3, 8))
        assert stack.final_norm.epsilon == 1e-3
        for block in stack.blocks:
            assert block.block_arguments() == stack.block_arguments()
            for sublayer in (block.self_attention, block.feed_forward):
                assert sublayer.norm.epsilon == 1e-3 and sublayer.norm_first
                assert sublayer.dropout == 0.125
            attention = block.self_attention.sublayer
            assert attention.num_heads == 2 and attention.dropout == 0.125
            network = block.feed_forward.sublayer
            assert network.d_ff == 12 and network.activation == "gelu"
            for weight in (attention.query_dense.kernel, network.output_dense.bias):
                np.testing.assert_array_equal(np.asarray(weight), 1.0)
