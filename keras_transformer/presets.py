"""Named recipes: the paper's base and big models (Vaswani et al., 2017, table 3) and the small
CPU recipe benchmarked on Multi30k.

A preset is one flat dict in the run directory's `config.json` format (`TransformerConfig` fields
and `TrainingSettings` fields side by side), so `--preset NAME` is the same as `--config` with
that file; `--config` and flags given with it override its values.
"""

from __future__ import annotations

from types import MappingProxyType

# Section 5.1-5.4 and table 3: one shared ~37,000-piece source-target vocabulary, one embedding
# matrix for both embeddings and the output projection (section 3.4), batches of about 25,000
# target tokens, warm-up 4,000 steps, label smoothing 0.1, the last 5 (base) or 20 (big)
# checkpoints averaged (section 6.1).
_PAPER = {
    "num_encoder_layers": 6,
    "num_decoder_layers": 6,
    "label_smoothing": 0.1,
    "source_vocab_size": 37_000,
    "target_vocab_size": 37_000,
    "share_embeddings": True,
    "tie_output_embedding": True,
    "max_length": 256,
    "shared_vocab": True,
    "vocab_size": 37_000,
    "batch_tokens": 25_000,
    "warmup_steps": 4000,
    "save_every": 1000,
    "eval_every": 5000,
}

PRESETS = MappingProxyType({
    "transformer_base": MappingProxyType({
        **_PAPER,
        "d_model": 512, "num_heads": 8, "d_ff": 2048, "dropout": 0.1,
        "steps": 100_000, "average_checkpoints": 5,
    }),
    "transformer_big": MappingProxyType({
        **_PAPER,
        "d_model": 1024, "num_heads": 16, "d_ff": 4096, "dropout": 0.3,
        "steps": 300_000, "average_checkpoints": 20,
    }),
    # What 2 CPU cores train in an hour on Multi30k (d_model 128, 3+3 layers, one 8,000-piece
    # vocabulary and one embedding matrix, bfloat16, about 2,048 target tokens per step, greedy
    # BLEU on 500 validation sentences every 1,000 steps, the learning rate cooled to zero over
    # the last 20% of the hour, the last 5 saves averaged); see the README's Performance section.
    # `steps` is only a ceiling: the time budget ends the run.
    "multi30k_small": MappingProxyType({
        "num_encoder_layers": 3, "num_decoder_layers": 3,
        "d_model": 128, "num_heads": 4, "d_ff": 512, "dropout": 0.15, "max_length": 128,
        "label_smoothing": 0.1, "share_embeddings": True, "tie_output_embedding": True,
        "shared_vocab": True, "vocab_size": 8000, "batch_tokens": 2048, "warmup_steps": 2000,
        "steps": 100_000, "save_every": 500, "eval_every": 1000, "eval_sentences": 500,
        "time_budget_minutes": 60, "mixed_precision": True, "average_checkpoints": 5,
        "tune_decoding": True, "cooldown_fraction": 0.2,
    }),
})


def preset_values(name: str) -> dict:
    """The flat `config.json` values of preset `name`.

    Raises:
        ValueError: naming the known presets when `name` is not one.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return dict(PRESETS[name])
