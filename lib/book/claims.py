"""Claims and the checks that decide them.

A :class:`Claim` names the paper's statement, the paper's value or bound where there is
one, the chapter that measures it, the record (see :mod:`lib.book.records`) holding our value,
and a :class:`Check`. Each chapter declares its claims beside its source
(``chapters/<id>.yml``, read by :mod:`lib.book.chapters`). The tests, the runner and the
reproduction report all call :func:`evaluate`, so a claim passes or fails in exactly one
way. Nothing here is a measured number: values come only from executed chapters' records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """A decision rule on one recorded value.

    kinds: ``close`` (|value − target| ≤ atol + rtol·|target|), ``at_most``, ``at_least``,
    ``between`` (inclusive), ``equals`` (exact equality, for counts and strings).
    """

    kind: str
    target: Any = None
    atol: float = 0.0
    rtol: float = 0.0
    low: float | None = None
    high: float | None = None

    def decide(self, value: Any) -> bool:
        if value is None:
            return False
        if self.kind == "equals":
            return value == self.target
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return False
        if self.kind == "close":
            return abs(value - self.target) <= self.atol + self.rtol * abs(self.target)
        if self.kind == "at_most":
            return value <= self.high
        if self.kind == "at_least":
            return value >= self.low
        if self.kind == "between":
            return self.low <= value <= self.high
        raise ValueError(f"unknown check kind {self.kind!r}")

    @classmethod
    def from_declaration(cls, spec: Any) -> "Check":
        """The check a declaration writes as one mapping: ``{at_most: 1e-10}``, ``{at_least: 0.5}``,
        ``{between: [0.8, 1.25]}``, ``{equals: 0}`` or ``{close: 1.0, atol: 1e-9, rtol: 0.01}``."""
        if not isinstance(spec, dict):
            raise ValueError(f"a check is a mapping such as {{at_most: 1e-10}}; got {spec!r}")
        kinds = [k for k in spec if k in ("close", "at_most", "at_least", "between", "equals")]
        extra = set(spec) - set(kinds) - ({"atol", "rtol"} if kinds == ["close"] else set())
        if len(kinds) != 1 or extra:
            raise ValueError("a check names exactly one of close, at_most, at_least, between, equals "
                             f"(close may add atol, rtol); got {spec!r}")
        kind, value = kinds[0], spec[kinds[0]]
        if kind == "equals":
            return equals(value)
        if kind == "between":
            if not (isinstance(value, list) and len(value) == 2):
                raise ValueError(f"between takes [low, high]; got {value!r}")
            return between(_number(value[0]), _number(value[1]))
        if kind == "close":
            return close(_number(value), atol=_number(spec.get("atol", 0.0)), rtol=_number(spec.get("rtol", 0.0)))
        return at_most(_number(value)) if kind == "at_most" else at_least(_number(value))

    def describe(self) -> str:
        if self.kind == "equals":
            return f"= {self.target!r}"
        if self.kind == "close":
            tol = f"{self.atol:g}" if not self.rtol else f"{self.atol:g} + {self.rtol:g}·|target|"
            return f"|value − {self.target:g}| ≤ {tol}"
        if self.kind == "at_most":
            return f"≤ {self.high:g}"
        if self.kind == "at_least":
            return f"≥ {self.low:g}"
        return f"in [{self.low:g}, {self.high:g}]"


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"a check's bound must be a finite number; got {value!r}")
    return value


def close(target: float, atol: float = 0.0, rtol: float = 0.0) -> Check:
    return Check("close", target=target, atol=atol, rtol=rtol)


def at_most(bound: float) -> Check:
    return Check("at_most", high=bound)


def at_least(bound: float) -> Check:
    return Check("at_least", low=bound)


def between(low: float, high: float) -> Check:
    return Check("between", low=low, high=high)


def equals(target: Any) -> Check:
    return Check("equals", target=target)


@dataclass(frozen=True)
class Claim:
    id: str
    chapter: str
    statement: str
    source: str
    record: str
    check: Check
    paper_value: str | None = None


@dataclass(frozen=True)
class Result:
    claim: Claim
    value: Any
    status: str  # "pass", "fail" or "not run"


def evaluate(claim: Claim, records: dict[str, Any] | None) -> Result:
    """Decide ``claim`` from a chapter's record JSON (None: chapter not run)."""
    if records is None or claim.record not in records.get("values", {}):
        return Result(claim, None, "not run")
    value = records["values"][claim.record]["value"]
    return Result(claim, value, "pass" if claim.check.decide(value) else "fail")
