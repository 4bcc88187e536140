"""The "Add & Norm" around every sub-layer, post-LN (the paper) or pre-LN.

Post-LN: `x = norm(x + dropout(sublayer(x)))`. Pre-LN: `x = x + dropout(sublayer(norm(x)))`.
Split in two so that sub-layers with extra inputs and outputs (masks, caches, attention weights)
are called in between:

    h = sublayer_input(x, norm, norm_first)
    y = sublayer(h, ...)
    x = sublayer_output(x, y, norm, dropout, norm_first, training)
"""

from __future__ import annotations


def sublayer_input(x, norm, norm_first: bool):
    """What the sub-layer sees: `norm(x)` for pre-LN, `x` itself for post-LN."""
    return norm(x) if norm_first else x


def sublayer_output(x, sublayer_result, norm, dropout, norm_first: bool, training=None):
    """Residual connection (with dropout on the sub-layer result) and, for post-LN, the norm."""
    residual = x + dropout(sublayer_result, training=training)
    return residual if norm_first else norm(residual)
