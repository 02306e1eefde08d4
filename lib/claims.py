"""The claims registry: every checkable claim of the book, with the check that decides it.

A :class:`Claim` names the paper's statement, the paper's value or bound where there is
one, the chapter that measures it, the record (see :mod:`lib.record`) holding our value,
and a :class:`Check`. The tests and the reproduction report both call :func:`evaluate`, so
a claim passes or fails in exactly one way. Nothing here is a measured number: values
come only from executed chapters' records.
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


CLAIMS: list[Claim] = [
    # --- Introduction: the substrate every chapter stands on -------------------------------
    Claim("intro.corpus-size", "intro",
          "The offline default corpus is real English text of at least 10 MB.",
          "Foundation (issue 2, §4)", "corpus_megabytes", at_least(10.0), ">= 10 MB"),
    Claim("intro.tokenizer-roundtrip", "intro",
          "The byte-level BPE tokenizer decodes every held-out document back to the exact same text.",
          "Foundation (issue 2, §4)", "roundtrip_failures", equals(0), "0 failures"),
    Claim("intro.ngram-marginal", "intro",
          "Summing the (1,1) bigram count table over its continuation gives the unigram counts of "
          "every position that has a successor in its document (marginalisation, exactly).",
          "Chen & Murfet, Def. 3.2 (language condition)", "ngram_marginal_max_error", equals(0)),
    Claim("intro.zipf-exponent", "intro",
          "Word frequencies follow Zipf's law f(r) ∝ r^(−s) with s close to 1 over ranks 10–10⁴.",
          "Zipf (1949); Piantadosi (2014)", "zipf_exponent", between(0.8, 1.25), "s ≈ 1"),
    Claim("intro.model-beats-unigram", "intro",
          "The largest mini model's final held-out loss is below the unigram entropy of the tokens "
          "(the model uses context).",
          "Foundation (issue 2, §5)", "heldout_gain_over_unigram_nats", at_least(0.05)),
    Claim("intro.training-reduces-loss", "intro",
          "Training reduces held-out loss from its step-0 value (≈ log V) for every model in the suite.",
          "Foundation (issue 2, §5)", "min_loss_reduction_nats", at_least(1.0)),
]

_BY_ID = {c.id: c for c in CLAIMS}
if len(_BY_ID) != len(CLAIMS):  # pragma: no cover - guarded by tests
    raise RuntimeError("duplicate claim ids in the registry")


def get_claim(claim_id: str) -> Claim:
    try:
        return _BY_ID[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim {claim_id!r}; registered claims: {', '.join(sorted(_BY_ID))}") from None


def claims_for(chapter: str) -> list[Claim]:
    return [c for c in CLAIMS if c.chapter == chapter]


def evaluate(claim: Claim, records: dict[str, Any] | None) -> Result:
    """Decide ``claim`` from a chapter's record JSON (None: chapter not run)."""
    if records is None or claim.record not in records.get("values", {}):
        return Result(claim, None, "not run")
    value = records["values"][claim.record]["value"]
    return Result(claim, value, "pass" if claim.check.decide(value) else "fail")
