"""Claims and the checks that decide them.

A :class:`Claim` names the paper's statement, the paper's value or bound where there is
one, the chapter that measures it, the record (see :mod:`lib.book.records`) holding our value,
a :class:`Check`, and a kind:

* ``must_hold``: an identity, a theorem, a closed form or a property of the book's own code.
  Its verdict is ``pass`` or ``fail``, and a failure fails the tests.
* ``consistency``: two computations of one quantity, or a bound that is a theorem, checked on
  our numbers. These also gate the tests. They are reported apart because passing them is
  not evidence about the papers' claims.
* ``finding``: a paper's empirical finding measured on the book's models and data, with our
  value beside the paper's. The check decides ``reproduces`` or ``does not reproduce here``.
  Neither verdict fails the tests. A missing or non-finite value is ``invalid``, and that fails them.

Any claim can also be ``undecided at these settings``: the chapter recorded why its run
leaves nothing to decide (``record(..., undecided="no case where 3 s.e. < 5% of λ")``), for
example a reader's parameter list without the case the claim needs. That is a verdict, not a
failure; the book's own ``ci`` run must decide every claim that must hold (its test says so).

A chapter's prose names a verdict with :func:`verdict_words` (what the claim's check decides on its value).
A finding that an effect exists is decided by one rule across the book, :func:`decide_effect` (z ≥
:data:`Z_FINDING` reproduces; an upper bound below the claim's stated resolution does not; otherwise
undecided).

Each chapter declares its claims beside its source
(``chapters/<id>.yml``, read by :mod:`lib.book.chapters`). The tests, the runner and the
reproduction report all call :func:`evaluate`, so a claim passes or fails in exactly one
way. Nothing here is a measured number: values come only from executed chapters' records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("must_hold", "consistency", "finding")
REPRODUCES, NOT_REPRODUCED = "reproduces", "does not reproduce here"
UNDECIDED = "undecided at these settings"
INCOMPLETE = "incomplete"  # the chapter's run stopped before its end: none of its claims counts


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
    kind: str = "must_hold"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id!r}: kind must be one of {', '.join(KINDS)}; got {self.kind!r}")


@dataclass(frozen=True)
class Result:
    claim: Claim
    value: Any
    status: str  # pass / fail (must_hold, consistency); reproduces / does not reproduce here / invalid (finding);
    #              undecided at these settings (any kind); not run
    reason: str | None = None  # why the run left the claim undecided

    @property
    def decided(self) -> bool:
        return self.status != UNDECIDED

    @property
    def ok(self) -> bool:
        """Whether this result lets the tests pass. A finding's verdict never fails them; an invalid value does.
        An undecided claim is not a failure (whether a run must decide it is the caller's rule); a claim of
        an incomplete run never passes."""
        if self.status == INCOMPLETE:
            return False
        if self.status == UNDECIDED:
            return True
        if self.claim.kind == "finding":
            return self.status in (REPRODUCES, NOT_REPRODUCED)
        return self.status == "pass"


def verdict_words(claim: Claim, value: Any, undecided: str | None = None, *,
                  undecided_words: str = UNDECIDED) -> str:
    """A claim's verdict on ``value`` in words, for a chapter's prose: :data:`REPRODUCES` or
    :data:`NOT_REPRODUCED` as the claim's check decides, or ``undecided_words`` where the run gave a
    reason (``undecided``, as passed to ``record(..., undecided=...)``) to decide nothing.

    Only the check decides here (a missing value reads as not reproduced); the report's verdict on the
    recorded value is :func:`evaluate`'s."""
    if undecided:
        return undecided_words
    return REPRODUCES if claim.check.decide(value) else NOT_REPRODUCED


Z_FINDING = 3.0
"""The z at which an effect counts as measured, one value for every finding of the book. Under a Gaussian
null a one-sided excursion of 3 s.e. has probability 0.13%: across the book's ~60 findings that is less
than one false reproduction in ten full runs."""


@dataclass(frozen=True)
class Effect:
    """An effect (a gain, a gap, a correlation above its null) decided by :func:`decide_effect`:
    ``reproduces`` is True, False, or None (undecided, with ``reason``)."""

    estimate: float
    se: float
    resolution: float
    z_star: float
    reproduces: bool | None
    reason: str | None

    @property
    def lower(self) -> float:
        """The effect's lower bound at ``z_star`` s.e."""
        return self.estimate - self.z_star * self.se

    @property
    def upper(self) -> float:
        """The effect's upper bound at ``z_star`` s.e."""
        return self.estimate + self.z_star * self.se


def decide_effect(estimate: float, se: float, *, resolution: float, z_star: float = Z_FINDING) -> Effect:
    """The book's one rule for a finding that says "there is an effect" (estimate ± se, effect > 0):

    * **does not reproduce here** when the upper bound estimate + z*·se is below ``resolution``, the
      smallest effect that counts (stated, with its reason from the quantity's scale, in the claim's
      yml). The run rules out any effect that large; a significant effect smaller than the resolution
      does not count either. Identical first and last models (estimate 0, se 0) land here;
    * **reproduces** when the lower bound estimate − z*·se is above 0 (z ≥ z*) and the first case
      does not apply;
    * **undecided** otherwise: the interval holds both 0 and ``resolution``, and the reason says so.

    A non-finite estimate or se, a negative se or a resolution ≤ 0 is refused (ValueError)."""
    if not (math.isfinite(estimate) and math.isfinite(se)) or se < 0:
        raise ValueError(f"decide_effect: estimate and se must be finite with se ≥ 0, got {estimate!r} ± {se!r}")
    if not (math.isfinite(resolution) and resolution > 0) or not z_star > 0:
        raise ValueError(f"decide_effect: resolution and z_star must be > 0, got {resolution!r}, {z_star!r}")
    lower, upper = estimate - z_star * se, estimate + z_star * se
    reproduces, reason = None, None
    if upper < resolution:
        reproduces = False
    elif lower > 0:
        reproduces = True
    else:
        reason = (f"the run cannot tell an effect of {resolution:g} from none: {estimate:.3g} ± {z_star:g} s.e. "
                  f"({se:.2g}) spans [{lower:.3g}, {upper:.3g}]")
    return Effect(float(estimate), float(se), float(resolution), float(z_star), reproduces, reason)


def _valid(value: Any) -> bool:
    """A value a finding can be decided on: present and, if a number, finite."""
    if value is None:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return math.isfinite(value)
    return True


def evaluate(claim: Claim, records: dict[str, Any] | None) -> Result:
    """Decide ``claim`` from a chapter's record JSON (None: chapter not run).

    A chapter that ran without writing the claim's record gives ``not run`` for a claim that
    must hold and ``invalid`` for a finding; neither lets the tests pass. A record whose run did not
    end (``meta.incomplete``) gives ``incomplete`` for every claim. A record marked
    undecided gives ``undecided at these settings`` with the recorded reason, whatever its value.
    """
    if records is None:
        return Result(claim, None, "not run")
    entry = records.get("values", {}).get(claim.record)
    value = None if entry is None else entry["value"]
    if records.get("meta", {}).get("incomplete"):
        return Result(claim, value, INCOMPLETE, records["meta"]["incomplete"])
    if entry is not None and entry.get("undecided"):
        return Result(claim, value, UNDECIDED, entry["undecided"])
    if claim.kind == "finding":
        if not _valid(value):
            return Result(claim, value, "invalid")
        return Result(claim, value, REPRODUCES if claim.check.decide(value) else NOT_REPRODUCED)
    if entry is None:
        return Result(claim, None, "not run")
    return Result(claim, value, "pass" if claim.check.decide(value) else "fail")
