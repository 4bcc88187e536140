"""Command-line flags made from dataclass fields: one flag per field, so the dataclasses stay the
one source of truth for names, types, defaults and help.

A field `d_model: int` becomes `--d-model N`; `mixed_precision: bool` becomes the pair
`--mixed-precision` / `--no-mixed-precision`; `patience: int | None` takes an integer; a
`Literal["a", "b"]` field takes one of its values. The help text is the field's entry in its
class docstring's `Args:` section, with back-quoted field names written as their flags. A flag
that is not given leaves nothing on the namespace (`argparse.SUPPRESS`), so it can never
override a config file with a default.

Example:
    >>> import argparse, dataclasses
    >>> @dataclasses.dataclass
    ... class Run:
    ...     '''A run.
    ...
    ...     Args:
    ...         d_model: width of the model.
    ...         mixed_precision: compute in float16; see `d_model`.
    ...     '''
    ...     d_model: int = 512
    ...     mixed_precision: bool = False
    >>> flags = DataclassFlags((Run,))
    >>> parser = argparse.ArgumentParser()
    >>> flags.add_to(parser)
    >>> flags.given(parser.parse_args(["--d-model", "128", "--no-mixed-precision"]))
    {'d_model': 128, 'mixed_precision': False}
    >>> flags.given(parser.parse_args([]))
    {}
    >>> flags.help["mixed_precision"]
    'compute in float16; see --d-model.'
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Mapping, Sequence

# Metavars by value type; `_file` / `_dir` fields say which they take.
_METAVARS = {int: "N", float: "X", str: "TEXT"}


def docstring_arguments(cls: type) -> dict[str, str]:
    """The entries of a Google-style docstring's `Args:` (or `Attributes:`) section, each on one
    line.

    Returns:
        `{name: text}` in the docstring's order.

    Raises:
        ValueError: if the docstring has neither section.
    """
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    heading = next((line for line in lines if line in ("Args:", "Attributes:")), None)
    if heading is None:
        raise ValueError(f"{cls.__name__}'s docstring has no Args: or Attributes: section")
    entries: dict[str, str] = {}
    indent = None
    for line in lines[lines.index(heading) + 1 :]:
        if line and not line[0].isspace():
            break  # the next section
        depth = len(line) - len(line.lstrip())
        indent = indent or depth
        entry = re.match(r"\s*(\w+)(?: \([^)]*\))?: ?(.*)", line)
        if depth == indent and entry:
            name = entry[1]
            entries[name] = entry[2]
        elif line.strip():
            entries[name] += " " + line.strip()
    return entries


@dataclasses.dataclass(frozen=True)
class _Field:
    """One dataclass field as a flag."""

    name: str
    flag: str
    type: type
    default: object
    choices: tuple | None = None


class DataclassFlags:
    """The fields of some dataclasses as command-line flags.

    Args:
        classes: dataclasses whose fields become flags (names must not repeat across them).
        renamed: flags that are not the hyphenated field name, e.g. `{"tsv_file": "--tsv"}`.
        metavars: metavars other than the type's (`N`, `X`, `FILE`, `DIR`, `TEXT`).
        groups: `(title, field names)` pairs for `--help`; fields in none of them are listed
            under their class name.
    """

    def __init__(
        self,
        classes: Sequence[type],
        *,
        renamed: Mapping[str, str] | None = None,
        metavars: Mapping[str, str] | None = None,
        groups: Sequence[tuple[str, Sequence[str]]] = (),
    ):
        renamed = renamed or {}
        self.metavars = dict(metavars or {})
        self.fields: dict[str, _Field] = {}
        self._class_of: dict[str, type] = {}
        docs: dict[str, str] = {}
        for cls in classes:
            hints = typing.get_type_hints(cls)
            described = docstring_arguments(cls)
            for field in dataclasses.fields(cls):
                if field.name in self.fields:
                    raise ValueError(f"field {field.name!r} of {cls.__name__} is not unique")
                if field.name not in described:
                    raise ValueError(f"{cls.__name__}'s docstring does not describe {field.name}")
                value_type, choices = _flag_type(cls, field.name, hints[field.name])
                self.fields[field.name] = _Field(
                    name=field.name,
                    flag=renamed.get(field.name, "--" + field.name.replace("_", "-")),
                    type=value_type,
                    default=None if field.default is dataclasses.MISSING else field.default,
                    choices=choices,
                )
                self._class_of[field.name] = cls
                docs[field.name] = described[field.name]
        self.help = {name: self._with_flag_names(text) for name, text in docs.items()}
        unknown = {name for _, names in groups for name in names} - set(self.fields)
        if unknown:
            raise ValueError(f"groups name unknown fields: {', '.join(sorted(unknown))}")
        self.groups = list(groups)

    @property
    def flags(self) -> dict[str, str]:
        """`{field name: flag}`, e.g. `{"d_model": "--d-model", ...}`."""
        return {name: field.flag for name, field in self.fields.items()}

    def add_to(
        self, parser: argparse.ArgumentParser, shown_defaults: Mapping[str, object] | None = None
    ) -> None:
        """Adds one argument group per group, and one per class for the fields left over.

        Args:
            parser: where the flags go.
            shown_defaults: defaults to print in `--help` instead of the fields' own (they are
                only shown: a flag not given still sets nothing).
        """
        shown = {name: field.default for name, field in self.fields.items()}
        shown.update(shown_defaults or {})
        grouped = [name for _, names in self.groups for name in names]
        leftover: dict[str, list[str]] = {}
        for name in self.fields:
            if name not in grouped:
                leftover.setdefault(self._class_of[name].__name__, []).append(name)
        for title, names in [*self.groups, *leftover.items()]:
            group = parser.add_argument_group(title)
            for name in names:
                self._add(group, self.fields[name], shown[name])

    def given(self, args: argparse.Namespace) -> dict:
        """The fields given as flags, `{field name: value}`; the others are absent."""
        return {name: getattr(args, name) for name in self.fields if hasattr(args, name)}

    def _add(self, group, field: _Field, default) -> None:
        text = self.help[field.name].replace("%", "%%")
        if default is not None:
            shown = ("on" if default else "off") if field.type is bool else default
            text = f"{text.removesuffix('.')} (default: {shown})"
        if field.type is bool:
            group.add_argument(field.flag, dest=field.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
            return
        group.add_argument(field.flag, dest=field.name, type=field.type, choices=field.choices,
                           metavar=self._metavar(field), default=argparse.SUPPRESS, help=text)

    def _metavar(self, field: _Field) -> str | None:
        if field.name in self.metavars:
            return self.metavars[field.name]
        if field.choices:
            return None  # argparse lists them: {a,b,c}
        for suffix in ("file", "dir"):
            if field.name.endswith("_" + suffix):
                return suffix.upper()
        return _METAVARS[field.type]

    def _with_flag_names(self, text: str) -> str:
        """`text` with every back-quoted field name written as its flag."""

        def flag(match: re.Match) -> str:
            field = self.fields.get(match[1])
            return field.flag if field else match[0]

        return re.sub(r"`(\w+)`", flag, text)


def _flag_type(cls: type, name: str, hint) -> tuple[type, tuple | None]:
    """`(value type, choices)` of a field's type hint: `int`, `float`, `str`, `bool`, one of
    these or None, or a `Literal` of strings."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        values = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(values) == 1:
            return _flag_type(cls, name, values[0])
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        if all(isinstance(choice, str) for choice in choices):
            return str, choices
    if hint in (int, float, str, bool):
        return hint, None
    raise TypeError(f"{cls.__name__}.{name}: no command-line flag for type {hint}")
