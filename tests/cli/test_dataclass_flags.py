"""`DataclassFlags`: types, `--no-` pairs, help from the docstring, and the errors that keep a
dataclass and its flags from drifting apart."""

from __future__ import annotations

import argparse
import dataclasses
import typing

import pytest

from keras_transformer.cli.dataclass_flags import DataclassFlags, docstring_arguments
from keras_transformer.config import TransformerConfig
from keras_transformer.settings import TrainingSettings


@dataclasses.dataclass
class Example:
    """An example.

    Args:
        width: how wide, see `mode` (100% means `width_of_nothing`).
        mode: one of two: `"fast"` or `"exact"`;
            a second line.
        limit (int | None): no limit when None.
        fast: go fast.
    """

    width: int = 8
    mode: typing.Literal["fast", "exact"] = "fast"
    limit: int | None = None
    fast: bool = True


def parser_for(flags: DataclassFlags) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="example")
    flags.add_to(parser)
    return parser


def test_docstring_examples(run_doctests):
    run_doctests("keras_transformer.cli.dataclass_flags")


def test_docstring_entries_are_joined_lines_with_flag_names():
    assert docstring_arguments(Example) == {
        "width": "how wide, see `mode` (100% means `width_of_nothing`).",
        "mode": 'one of two: `"fast"` or `"exact"`; a second line.',
        "limit": "no limit when None.",
        "fast": "go fast.",
    }
    flags = DataclassFlags((Example,))
    assert flags.help["width"] == "how wide, see --mode (100% means `width_of_nothing`)."


def test_an_attributes_section_works_too():
    @dataclasses.dataclass
    class Point:
        """A point.

        Attributes:
            x: across.
            y: up.

        Example:
            >>> Point(1, 2)  # doctest: +SKIP
        """

        x: float = 0.0
        y: float = 0.0

    assert docstring_arguments(Point) == {"x": "across.", "y": "up."}


@pytest.mark.parametrize("cls", [TransformerConfig, TrainingSettings])
def test_the_project_dataclasses_document_exactly_their_fields(cls):
    assert list(docstring_arguments(cls)) == [field.name for field in dataclasses.fields(cls)]


def test_types_defaults_and_boolean_pairs():
    flags = DataclassFlags((Example,), renamed={"limit": "--max"})
    parser = parser_for(flags)
    assert flags.given(parser.parse_args([])) == {}  # nothing given, nothing set
    given = flags.given(parser.parse_args(["--width", "3", "--mode", "exact", "--max", "7",
                                           "--no-fast"]))
    assert given == {"width": 3, "mode": "exact", "limit": 7, "fast": False}
    assert flags.given(parser.parse_args(["--no-fast", "--fast"])) == {"fast": True}  # last wins
    text = parser.format_help()
    assert "Example:" in text  # fields in no group are listed under their class
    assert "--fast, --no-fast" in text and "(default: on)" in text
    assert "--width N" in text and "(default: 8)" in text and "100% means" in text
    assert "{fast,exact}" in text


@pytest.mark.parametrize("arguments, message", [
    (["--width", "wide"], "argument --width: invalid int value: 'wide'"),
    (["--mode", "slow"], "argument --mode: invalid choice: 'slow'"),
    (["--fast=yes"], "argument --fast/--no-fast: ignored explicit argument 'yes'"),
    (["--widht", "3"], "unrecognized arguments: --widht 3"),
])
def test_bad_values_name_the_flag(capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_:
        parser_for(DataclassFlags((Example,))).parse_args(arguments)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_groups_order_the_help():
    flags = DataclassFlags((Example,), groups=[("speed", ["fast", "mode"])])
    text = parser_for(flags).format_help()
    text = text[text.index("options:"):]  # after the usage line
    speed, rest = text.index("speed:"), text.index("Example:")
    assert speed < text.index("--fast") < text.index("--mode") < rest < text.index("--width")


def test_drift_between_a_dataclass_and_its_flags_is_an_error():
    @dataclasses.dataclass
    class Undocumented:
        """No arguments here.

        Args:
            other: something else.
        """

        size: int = 1

    with pytest.raises(ValueError, match="does not describe size"):
        DataclassFlags((Undocumented,))

    @dataclasses.dataclass
    class Bare:
        size: int = 1

    with pytest.raises(ValueError, match="Bare's docstring has no Args: or Attributes: section"):
        DataclassFlags((Bare,))

    @dataclasses.dataclass
    class Listed:
        """A list.

        Args:
            sizes: sizes.
        """

        sizes: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="Listed.sizes: no command-line flag for type"):
        DataclassFlags((Listed,))
    with pytest.raises(ValueError, match="groups name unknown fields: nope"):
        DataclassFlags((Example,), groups=[("g", ["nope"])])
    with pytest.raises(ValueError, match="'width' of Example is not unique"):
        DataclassFlags((Example, Example))
