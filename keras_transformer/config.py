"""Hyper-parameters of the Transformer as one dataclass (kept on disk by `run_dir`'s
`config.json`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer.

    Defaults are the paper's base model (Vaswani et al., 2017, table 3).

    Args:
        source_vocab_size: number of source token ids (id 0 is padding).
        target_vocab_size: number of target token ids (id 0 is padding).
        num_encoder_layers: N, the number of unshared encoder layers.
        num_decoder_layers: N, the number of unshared decoder layers.
        d_model: width of every sub-layer output and of the embeddings.
        num_heads: attention heads; must divide `d_model` (d_k = d_model / num_heads).
        d_ff: inner width of the position-wise feed-forward network.
        dropout: rate applied to embeddings, sub-layer outputs and attention weights.
        max_length: longest sequence (tokens) the positional encoding covers.
        norm_first: pre-LN residual blocks (`x + sublayer(norm(x))`) instead of the paper's post-LN.
        share_embeddings: one embedding matrix for source and target (needs equal vocab sizes).
        tie_output_embedding: the output projection is the transposed target embedding matrix
            (no separate `logits` layer, no bias).
        label_smoothing: epsilon of label-smoothed cross-entropy (0.1 in the paper).
    """

    source_vocab_size: int = 8000
    target_vocab_size: int = 8000
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    max_length: int = 256
    norm_first: bool = False
    share_embeddings: bool = False
    tie_output_embedding: bool = False
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        for name in (
            "source_vocab_size",
            "target_vocab_size",
            "num_encoder_layers",
            "num_decoder_layers",
            "d_model",
            "num_heads",
            "d_ff",
            "max_length",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"TransformerConfig.{name} must be a positive integer, got {value!r}"
                )
        if self.d_model % self.num_heads:
            raise ValueError(
                f"TransformerConfig.num_heads ({self.num_heads}) must divide "
                f"d_model ({self.d_model})"
            )
        for name in ("dropout", "label_smoothing"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"TransformerConfig.{name} must be in [0, 1), got {value!r}")
        for name in ("norm_first", "share_embeddings", "tie_output_embedding"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TransformerConfig.{name} must be true or false")
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(
                "TransformerConfig.share_embeddings needs source_vocab_size "
                f"({self.source_vocab_size}) == target_vocab_size ({self.target_vocab_size})"
            )

    @property
    def d_k(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.num_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TransformerConfig:
        """Builds a config, naming any key that is not a field."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s): {', '.join(unknown)}")
        return cls(**values)

    @classmethod
    def from_preset(cls, name: str) -> TransformerConfig:
        """The model of a named preset: "transformer_base", "transformer_big" (the paper's table 3,
        37,000-piece shared vocabulary) or "multi30k_small" (see `presets.PRESETS`).

        Example:
            >>> TransformerConfig.from_preset("transformer_big").d_model
            1024
        """
        from keras_transformer.presets import preset_values

        fields = {field.name for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in preset_values(name).items() if key in fields})

    def replace(self, **changes) -> TransformerConfig:
        return dataclasses.replace(self, **changes)
