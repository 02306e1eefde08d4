"""Chapter parameters: one specification, checked before anything runs.

Every chapter starts with a papermill ``parameters`` cell of literal assignments (the
defaults). Its declaration (``chapters/<id>.yml``, read by :mod:`lib.book.chapters`) says
what each parameter may be, as a list of :class:`Param`. The same specification is
checked twice: by the runner (:mod:`lib.book.runner`) *before* any cell executes, and by
:func:`lib.book.setup` inside the notebook, so that a chapter run with papermill
directly, or by hand, is checked too. Papermill alone only warns about unknown names and
never checks types.
"""
from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from typing import Any


class ParameterError(ValueError):
    """A chapter parameter is unknown, of the wrong type, or outside its allowed values."""


_TYPE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", list: "list"}


@dataclass(frozen=True)
class Param:
    """One chapter parameter.

    ``type``: int, float, str, bool or list; ``allowed``: a finite set of values (or None);
    ``minimum``/``maximum``: inclusive numeric bounds; ``allow_none``: None means
    "take the profile's preset"; ``item_allowed``: allowed items of a list parameter.
    """

    name: str
    type: type
    default: Any
    help: str = ""
    allowed: tuple | None = None
    minimum: float | None = None
    maximum: float | None = None
    allow_none: bool = False
    item_allowed: tuple | None = None

    def describe(self) -> str:
        """What values are allowed, in words."""
        parts = [_TYPE_NAMES.get(self.type, self.type.__name__)]
        if self.allowed is not None:
            parts = ["one of " + ", ".join(repr(a) for a in self.allowed)]
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        if self.item_allowed is not None:
            parts.append("items from " + ", ".join(repr(a) for a in self.item_allowed))
        if self.allow_none:
            parts.append("or None (the profile's preset)")
        return " ".join(parts)

    def check(self, value: Any) -> Any:
        """Return ``value`` (an int is accepted for a float) or raise :class:`ParameterError`."""
        if value is None:
            if self.allow_none:
                return None
            self._fail(value)
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.type is list and isinstance(value, tuple):
            value = list(value)
        ok_type = isinstance(value, self.type) and not (self.type in (int, float) and isinstance(value, bool))
        if not ok_type:
            self._fail(value)
        if self.allowed is not None and value not in self.allowed:
            self._fail(value)
        if self.minimum is not None and value < self.minimum:
            self._fail(value)
        if self.maximum is not None and value > self.maximum:
            self._fail(value)
        if self.item_allowed is not None and any(item not in self.item_allowed for item in value):
            self._fail(value)
        return value

    def _fail(self, value: Any) -> None:
        raise ParameterError(
            f"parameter {self.name!r}: allowed values are {self.describe()}; "
            f"got {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class ParamSpec:
    """The parameters of one chapter, in the order of its ``parameters`` cell."""

    params: tuple[Param, ...] = field(default_factory=tuple)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ParameterError(f"unknown parameter {name!r}; this chapter's parameters are: {', '.join(self.names)}"
                             f"{suggest(name, self.names)}")

    def check(self, values: dict[str, Any]) -> dict[str, Any]:
        """Check every given value; unknown names are errors that list the known ones."""
        return {name: self[name].check(value) for name, value in values.items()}

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


def suggest(name: str, known) -> str:
    """`` (did you mean 'seed'?)`` when a known name is close to the misspelt ``name``, else ``''``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_cli_value(text: str) -> Any:
    """Parse a ``-p NAME VALUE`` value: a Python literal if it is one, else the string itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parameters_cell_values(source: str) -> dict[str, Any]:
    """The names and literal values assigned in a ``parameters`` cell's source."""
    values: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise ParameterError("a parameters cell may hold only assignments of literals, one name each; "
                                 f"found: {ast.unparse(node)}")
        try:
            values[node.targets[0].id] = ast.literal_eval(node.value)
        except ValueError as err:
            raise ParameterError(f"parameter {node.targets[0].id!r} must be a literal in the parameters cell") from err
    return values
