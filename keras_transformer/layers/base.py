"""What encoder and decoder layers, and their stacks, have in common: one list of block
arguments, and the Add & Norm sub-layers built from it."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.initializers import get_initializer, serialize_initializer
from keras_transformer.layers.precision import normalization_policy
from keras_transformer.layers.residual import LAYER_NORM_EPSILON, AddNorm

# The hyper-parameters every encoder/decoder layer and stack takes, in the order of
# `TransformerBlock.__init__`. Stacks hand them on to their layers, `get_config` saves them and
# `build_transformer` fills them from a `TransformerConfig`: all from this one list.
BLOCK_ARGUMENTS = (
    "d_model",
    "num_heads",
    "d_ff",
    "dropout",
    "norm_first",
    "activation",
    "layer_norm_epsilon",
    "kernel_initializer",
    "bias_initializer",
)
_INITIALIZERS = ("kernel_initializer", "bias_initializer")


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`: their shared
    hyper-parameters (`BLOCK_ARGUMENTS`) and config.

    Args:
        d_model: model width.
        num_heads: attention heads (must divide `d_model`).
        d_ff: inner width of the feed-forward networks.
        dropout: dropout on sub-layer outputs, attention weights and FFN activations.
        norm_first: pre-LN residual blocks instead of the paper's post-LN.
        activation: FFN activation.
        layer_norm_epsilon: epsilon of every layer norm.
        kernel_initializer: initializer of the attention and FFN kernels.
        bias_initializer: initializer of the attention and FFN biases.
    """

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = get_initializer(kernel_initializer)
        self.bias_initializer = get_initializer(bias_initializer)

    def block_arguments(self) -> dict:
        """`BLOCK_ARGUMENTS` as constructor arguments (initializers serialized): the config of
        this block, and what a stack gives each of its layers."""
        values = {name: getattr(self, name) for name in BLOCK_ARGUMENTS}
        for name in _INITIALIZERS:
            values[name] = serialize_initializer(values[name])
        return values

    def layer_norm(self, name: str) -> keras.layers.LayerNormalization:
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name=name,
            dtype=normalization_policy(self.dtype_policy),
        )

    def dropout_layer(self) -> Dropout:
        return Dropout(self.dropout, dtype=self.dtype_policy)

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(self.block_arguments())
        return config


class TransformerLayer(TransformerBlock):
    """Base of `EncoderLayer` and `DecoderLayer`: builds their sub-layers, each inside its
    Add & Norm."""

    def _add_norm(self, sublayer: keras.layers.Layer, name: str) -> AddNorm:
        return AddNorm(
            sublayer,
            dropout=self.dropout,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            name=name,
            dtype=self.dtype_policy,
        )

    def attention_sublayer(self, name: str) -> AddNorm:
        """`MultiHeadAttention` (reachable as `.sublayer`) inside an `AddNorm` named `name`."""
        attention = MultiHeadAttention(
            num_heads=self.num_heads,
            d_model=self.d_model,
            dropout=self.dropout,
            kernel_initializer=serialize_initializer(self.kernel_initializer),
            bias_initializer=serialize_initializer(self.bias_initializer),
            name="attention",
            dtype=self.dtype_policy,
        )
        return self._add_norm(attention, name)

    def feed_forward_sublayer(self) -> AddNorm:
        """`FeedForward` (reachable as `.sublayer`) inside an `AddNorm` named `feed_forward`."""
        feed_forward = FeedForward(
            d_model=self.d_model,
            d_ff=self.d_ff,
            dropout=self.dropout,
            activation=self.activation,
            kernel_initializer=serialize_initializer(self.kernel_initializer),
            bias_initializer=serialize_initializer(self.bias_initializer),
            name="network",
            dtype=self.dtype_policy,
        )
        return self._add_norm(feed_forward, "feed_forward")


class LayerStack(TransformerBlock):
    """Base of `Encoder` and `Decoder`: dropout on the embedded input, N unshared layers made by
    `make_block(index)`, and a final norm for pre-LN (whose last residual is not normalized).

    Args:
        num_layers: N.
        **kwargs: `BLOCK_ARGUMENTS` (see `TransformerBlock`) and Keras layer arguments.
    """

    def __init__(self, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.input_dropout = self.dropout_layer()
        self.blocks = [self.make_block(index) for index in range(num_layers)]
        self.final_norm = self.layer_norm("final_norm") if self.norm_first else None

    def make_block(self, index: int) -> TransformerBlock:
        """Builds layer `index` of the stack (from `block_arguments()`)."""
        raise NotImplementedError

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        if self.final_norm is not None:
            self.final_norm.build(input_shape)
        self.built = True

    def normalize_output(self, x):
        """The final norm of a pre-LN stack; the identity for post-LN."""
        return x if self.final_norm is None else self.final_norm(x)

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers)
        return config
