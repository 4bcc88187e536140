"""Decoding defaults, in one place for the library, the exports and the command line.

Plain values and one pure function with no imports, so that the command line can show them in
`--help` without loading TensorFlow.
"""

# Beam width when none is asked for: the paper's (section 6.1).
DEFAULT_BEAM_WIDTH = 4
# Exponent of the GNMT length penalty ((5 + |Y|) / 6) ** alpha; 0.6 is the paper's.
DEFAULT_ALPHA = 0.6
# The length-penalty exponents a run with `tune_decoding` tries at the end, on validation.
LENGTH_PENALTY_GRID = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
# Room for the translation beyond the source length (capped at the model's max_length).
DEFAULT_EXTRA_LENGTH = 50
# Widest beam a request may ask an export's `translate_with_options` for (cost grows linearly).
MAX_BEAM_WIDTH = 16


def decoding_options(
    beam_width: int | None, alpha: float | None, own: dict | None = None
) -> tuple[int, float]:
    """The `(beam_width, alpha)` to decode with.

    With neither option given, a model's own decoding (`own`: `{"beam_width", "alpha"}`, such
    as what a run chose on validation) fills both; whatever is still unset takes the defaults.
    """
    if beam_width is None and alpha is None and own:
        beam_width, alpha = own.get("beam_width"), own.get("alpha")
    return (DEFAULT_BEAM_WIDTH if beam_width is None else int(beam_width),
            DEFAULT_ALPHA if alpha is None else float(alpha))
