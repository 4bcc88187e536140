"""What encoder and decoder layers, and their stacks, have in common."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import sublayer_input, sublayer_output

LAYER_NORM_EPSILON = 1e-6


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`: their shared
    hyper-parameters and config.

    Args:
        d_model: model width.
        num_heads: attention heads (must divide `d_model`).
        d_ff: inner width of the feed-forward networks.
        dropout: dropout on sub-layer outputs, attention weights and FFN activations.
        norm_first: pre-LN residual blocks instead of the paper's post-LN.
        activation: FFN activation.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Outputs line up with the query positions, so an implicit padding mask rides through.
        self.supports_masking = True
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation

    def layer_norm(self, name: str) -> keras.layers.LayerNormalization:
        return keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name=name, dtype=self.dtype_policy
        )

    def dropout_layer(self) -> Dropout:
        return Dropout(self.dropout, dtype=self.dtype_policy)

    def sublayer_options(self) -> dict:
        """Constructor arguments for the layers a stack is made of."""
        return dict(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            norm_first=self.norm_first,
            activation=self.activation,
            dtype=self.dtype_policy,
        )

    def compute_output_shape(self, input_shape, *args, **kwargs):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            norm_first=self.norm_first,
            activation=self.activation,
        )
        return config


class TransformerLayer(TransformerBlock):
    """Base of `EncoderLayer` and `DecoderLayer`: builds their sub-layers, each with the norm and
    dropout of its Add & Norm, and runs the feed-forward sub-layer that ends both."""

    def attention_sublayer(self, name: str):
        """`(MultiHeadAttention, LayerNormalization, Dropout)` named `name`, `name_norm`."""
        attention = MultiHeadAttention(
            self.num_heads, self.d_model, self.dropout, name=name, dtype=self.dtype_policy
        )
        return attention, self.layer_norm(f"{name}_norm"), self.dropout_layer()

    def feed_forward_sublayer(self):
        """`(FeedForward, LayerNormalization, Dropout)` named `feed_forward`, `..._norm`."""
        feed_forward = FeedForward(
            self.d_model, self.d_ff, self.dropout, self.activation, name="feed_forward",
            dtype=self.dtype_policy,
        )
        return feed_forward, self.layer_norm("feed_forward_norm"), self.dropout_layer()

    def feed_forward_residual(self, x, training=None):
        """The last sub-layer: `x` through the feed-forward network inside its Add & Norm."""
        h = sublayer_input(x, self.feed_forward_norm, self.norm_first)
        return sublayer_output(
            x, self.feed_forward(h, training=training), self.feed_forward_norm,
            self.feed_forward_dropout, self.norm_first, training,
        )


class LayerStack(TransformerBlock):
    """Base of `Encoder` and `Decoder`: dropout on the embedded input, N unshared layers made by
    `make_block(index)`, and a final norm for pre-LN (whose last residual is not normalized).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, norm_first, activation: see `TransformerBlock`.
    """

    def __init__(self, num_layers: int, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.num_layers = num_layers
        self.input_dropout = self.dropout_layer()
        self.blocks = [self.make_block(index) for index in range(num_layers)]
        self.final_norm = self.layer_norm("final_norm") if self.norm_first else None

    def make_block(self, index: int) -> TransformerBlock:
        """Builds layer `index` of the stack."""
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
