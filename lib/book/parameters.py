"""Chapter parameters: one specification, checked before anything runs.

Every chapter starts with a papermill ``parameters`` cell of literal assignments (the
defaults). Its declaration (``chapters/<id>.yml``, read by :mod:`lib.book.chapters`) says
what each parameter may be, as a list of :class:`Param`. The same specification is
checked twice: by the runner (:mod:`lib.book.runner`) *before* any cell executes, and by
:func:`lib.book.setup` inside the notebook, so that a chapter run with papermill
directly, or by hand, is checked too. Papermill alone only warns about unknown names and
never checks types.

Three kinds of check, all before any work: each value alone (:meth:`Param.check`: type,
allowed set, bounds, and a parameter's own ``validate``, e.g. the syntax of a tokenizer
spec); the values together (:class:`Constraint`, e.g. a tensor size limit over two
parameters); and what the machine must provide (:meth:`Param.preflight`: a GPU for
``device='cuda'``, an existing file for a corpus path), checked on the values a run will
use but never on a declaration's presets.
"""
from __future__ import annotations

import ast
import difflib
import importlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable


class ParameterError(ValueError):
    """A chapter parameter is unknown, of the wrong type, or outside its allowed values."""


_TYPE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", list: "list"}


@dataclass(frozen=True)
class Shape:
    """What a value (a parameter, or an item of a list parameter) may be: its type, bounds, allowed
    values and, for a list, its length, whether its items are distinct or increasing, and the shape of
    its items (nested to any depth). Declared in a chapter's yml, e.g. ``rrr_cases`` as
    ``{type: list, min_length: 1, items: {type: list, length: 4, items: {type: int, min: 0}}}``.
    """

    type: type
    minimum: float | None = None
    maximum: float | None = None
    allowed: tuple | None = None
    length: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    unique: bool = False
    increasing: bool = False
    items: "Shape | None" = None

    def describe(self) -> str:
        if self.allowed is not None:
            return "one of " + ", ".join(repr(a) for a in self.allowed)
        text = _TYPE_NAMES.get(self.type, self.type.__name__)
        bounds = [f">= {self.minimum:g}" if self.minimum is not None else "",
                  f"<= {self.maximum:g}" if self.maximum is not None else ""]
        text += "".join(" " + b for b in bounds if b)
        if self.type is not list:
            return text
        def items(n: int) -> str:
            return f"{n} item" + ("" if n == 1 else "s")

        sizes = ([items(self.length)] if self.length is not None else []) + \
                ([f"at least {items(self.min_length)}"] if self.min_length is not None else []) + \
                ([f"at most {items(self.max_length)}"] if self.max_length is not None else [])
        words = (["distinct"] if self.unique else []) + (["increasing"] if self.increasing else [])
        extra = ", ".join(sizes + words)
        of = f" of {self.items.describe()}" if self.items is not None else ""
        return "list" + (f" ({extra})" if extra else "") + of

    def problem(self, value: Any, where: str = "") -> str | None:
        """Why ``value`` does not have this shape (naming the item, e.g. ``item [2][0]``), or None."""
        at = f"item {where}: " if where else ""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.type is list and isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, self.type) or (self.type in (int, float) and isinstance(value, bool)):
            return f"{at}{value!r} is not {_TYPE_NAMES.get(self.type, self.type.__name__)}"
        if self.type is float and not math.isfinite(value):
            return f"{at}{value!r} is not a finite number"
        if self.allowed is not None and value not in self.allowed:
            return f"{at}{value!r} is not one of " + ", ".join(repr(a) for a in self.allowed)
        if self.minimum is not None and value < self.minimum:
            return f"{at}{value!r} is below {self.minimum:g}"
        if self.maximum is not None and value > self.maximum:
            return f"{at}{value!r} is above {self.maximum:g}"
        if self.type is not list:
            return None
        n = len(value)
        if self.length is not None and n != self.length:
            return f"{at}{n} items, not {self.length}"
        if self.min_length is not None and n < self.min_length:
            return f"{at}{n} items, fewer than {self.min_length}"
        if self.max_length is not None and n > self.max_length:
            return f"{at}{n} items, more than {self.max_length}"
        if self.items is not None:
            for i, item in enumerate(value):
                if (why := self.items.problem(item, f"{where}[{i}]")) is not None:
                    return why
        if self.unique and len({repr(v) for v in value}) != n:
            return f"{at}the items repeat"
        if self.increasing and any(not a < b for a, b in zip(value, value[1:])):
            return f"{at}the items are not increasing"
        return None


@dataclass(frozen=True)
class Param:
    """One chapter parameter.

    ``type``: int, float, str, bool or list; ``allowed``: a finite set of values (or None);
    ``minimum``/``maximum``: inclusive numeric bounds; ``allow_none``: None means
    "take the profile's preset"; ``item_allowed``: allowed items of a list parameter;
    ``forms``: the allowed values in words (a string spec's forms), shown instead of the
    type; ``validate(value)``: a reason the value is malformed, or None; ``requires(value)``:
    a reason this machine cannot run the value (no GPU, no such file), or None, asked by
    :meth:`preflight` only.
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
    shape: Shape | None = None  # a list's length and the shape of its items (see Shape)
    forms: str | None = None
    validate: Callable[[Any], str | None] | None = field(default=None, compare=False, repr=False)
    requires: Callable[[Any], str | None] | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        """What values are allowed, in words."""
        parts = [self.forms or _TYPE_NAMES.get(self.type, self.type.__name__)]
        if self.allowed is not None:
            parts = ["one of " + ", ".join(repr(a) for a in self.allowed)]
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        if self.item_allowed is not None:
            parts.append("items from " + ", ".join(repr(a) for a in self.item_allowed))
        if self.shape is not None:
            parts = [self.shape.describe()]
        if self.allow_none:
            parts.append("or None (the profile's preset)")
        return " ".join(parts)

    def check(self, value: Any, *, library: bool = True) -> Any:
        """Return ``value`` (an int is accepted for a float) or raise :class:`ParameterError`.

        ``library=False`` leaves out a ``validate`` that names a library function (:func:`named_function`:
        importing it may take seconds), for reading a declaration's own presets cheaply; a reader's
        value is always checked in full."""
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
            self._fail(value, suggest(next(i for i in value if i not in self.item_allowed), self.item_allowed)
                       if all(isinstance(i, str) for i in self.item_allowed) else "")
        if self.shape is not None and (reason := self.shape.problem(value)) is not None:
            self._fail(value, f": {reason}")
        if self.validate is not None and (library or not is_named(self.validate)) \
                and (reason := self.validate(value)):
            self._fail(value, f": {reason}")
        return value

    def preflight(self, value: Any) -> None:
        """Raise :class:`ParameterError` if this machine cannot run ``value`` (see ``requires``)."""
        if value is not None and self.requires is not None and (reason := self.requires(value)):
            self._fail(value, f": {reason}")

    def _fail(self, value: Any, why: str | None = None) -> None:
        if why is None:  # a misspelt choice gets the closest allowed one
            choices = [a for a in self.allowed or () if isinstance(a, str)]
            why = suggest(value, choices) if isinstance(value, str) else ""
        raise ParameterError(
            f"parameter {self.name!r}: allowed values are {self.describe()}; "
            f"got {value!r} ({type(value).__name__}){why}")


_SAFE_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Load, ast.Constant,
               ast.Call, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.Mult, ast.Div,
               ast.FloorDiv, ast.Mod, ast.Pow, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn,
               ast.Subscript, ast.Slice, ast.List, ast.Tuple, ast.IfExp)
_SAFE_FUNCTIONS = {"len": len, "min": min, "max": max, "abs": abs, "sum": sum, "sorted": sorted, "set": set,
                   "all": all, "any": any}


@dataclass(frozen=True)
class Constraint:
    """A rule over several parameters, checked once presets are filled in.

    ``check`` is a Python expression over parameter names (arithmetic, comparisons, ``in``,
    ``and``/``or``/``not``, indexing, ``len``/``min``/``max``/``abs``/``sum``/``sorted``/``set``/
    ``all``/``any``), e.g. ``alphabet_size ** (2 * block_length) <= 2 ** 20``, ``compare_rank in ranks``
    or ``burn_in < draws``; ``parameter`` is the one a
    violation is reported against; ``help`` says why the rule exists.
    """

    parameter: str
    check: str
    help: str = ""

    def names(self) -> set[str]:
        """The parameter names the expression reads; SyntaxError/ValueError if it is not a safe expression."""
        tree = ast.parse(self.check, mode="eval")
        for node in ast.walk(tree):
            if not isinstance(node, _SAFE_NODES):
                raise ValueError(f"constraint {self.check!r}: {type(node).__name__} is not allowed")
            if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _SAFE_FUNCTIONS):
                raise ValueError(f"constraint {self.check!r}: only {', '.join(_SAFE_FUNCTIONS)} may be called")
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
        return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - calls

    def holds(self, values: dict[str, Any]) -> bool:
        """Whether the rule holds; integers are read as floats, so that a huge given value
        overflows (OverflowError) instead of computing an enormous power."""
        self.names()  # refuses anything but a safe expression
        floats = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in values.items()}
        return bool(eval(compile(ast.parse(self.check, mode="eval"), "<constraint>", "eval"),  # noqa: S307
                         {"__builtins__": {}, **_SAFE_FUNCTIONS}, floats))

    def enforce(self, values: dict[str, Any]) -> None:
        """Raise :class:`ParameterError` naming :attr:`parameter`, the rule and the other values it read."""
        note = ""
        try:
            ok = self.holds(values)
        except OverflowError:  # far past any limit
            ok = False
        except (ArithmeticError, TypeError, ValueError) as err:
            ok, note = False, f"; the rule fails to evaluate: {err}"
        if not ok:
            others = ", ".join(f"{n} = {values[n]!r}" for n in sorted(self.names()) if n != self.parameter)
            raise ParameterError(
                f"parameter {self.parameter!r}: allowed values satisfy {self.check}"
                + (f" (with {others})" if others else "") + (f", {self.help}" if self.help else "")
                + f"; got {values.get(self.parameter)!r}{note}")


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

    def check(self, values: dict[str, Any], *, library: bool = True) -> dict[str, Any]:
        """Check every given value; unknown names are errors that list the known ones (``library``: see
        :meth:`Param.check`)."""
        return {name: self[name].check(value, library=library) for name, value in values.items()}

    def preflight(self, values: dict[str, Any]) -> None:
        """Check that this machine can run ``values`` (:meth:`Param.preflight` of each)."""
        for name, value in values.items():
            self[name].preflight(value)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


def named_function(spec: str, role: str = "validate") -> Callable[..., Any]:
    """The library function a declaration names as ``lib.module:function`` (for ``role``), imported when
    first called, so that reading a declaration stays cheap; a name that does not resolve fails there,
    with the name."""
    module, _, name = str(spec).partition(":")
    if not (module.startswith("lib.") and name.isidentifier()):
        raise ValueError(f"{role} names a function as 'lib.module:function'; got {spec!r}")

    def call(*args: Any) -> Any:
        function = getattr(importlib.import_module(module), name, None)
        if not callable(function):
            raise ValueError(f"{role}: {spec!r} is not a function")
        return function(*args)

    call.__qualname__ = str(spec)
    call.named = str(spec)
    return call


def is_named(function: Callable[..., Any]) -> bool:
    """Whether ``function`` is a library function named by a declaration (:func:`named_function`)."""
    return bool(getattr(function, "named", None))


def named_validator(spec: str) -> Callable[[Any], str | None]:
    """The function a declaration names as ``validate: lib.module:function``: given a value, it returns
    why the value is malformed (a sentence) or None."""
    return named_function(spec, "validate")


def integer_at_least(name: str, value, minimum: int = 1, error: type[Exception] = ValueError) -> int:
    """``value`` as an ``int`` if it is an integer (Python or NumPy, not a bool) of at least
    ``minimum``; otherwise ``error`` with a message naming the parameter, the allowed values
    and what was given. The library's argument checks all go through here."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise error(f"parameter '{name}' must be an integer >= {minimum}; got {value!r}")
    return int(value)


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
