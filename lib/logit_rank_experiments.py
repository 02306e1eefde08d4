"""The experiments of §3 of Golowich, Liu & Shetty on the book's models, each returning a result object.

Golowich, Liu & Shetty, "Sequences of Logits Reveal the Low Rank Structure of Language
Models" (2025), §3 and Appendices A–C (seed 003). :mod:`lib.logits` holds the definitions
(the extended logit matrix, the α fit, average KL, principal angles, LinGen); here they are
put together as the chapter "Logit rank" runs them, with the controls and the rules that
decide a finding:

* :func:`alpha_over_n` — the exponent α of App. A.1.1 at several sizes n = |H| = |F| (nested
  sub-matrices), in both readings of the fit; :func:`decide_band` and :func:`decide_sign`
  decide the α findings from that curve, or leave them undecided at this scale;
* :func:`low_rank_kl` — average KL (Def 3.1) to rank-r truncations, the rank-1 baseline of
  App. A.1.3 and Fact A.2 on every one; :func:`ratio_gain_over_null` — the rank-r/baseline ratio of a model
  against a model that learned nothing, decided by :func:`lib.book.decide_effect`;
* :func:`training_shape` — the shape of Fig. 3 (a drop from step 0, a rise to the end), on the KL or on the
  scale-free KL (:func:`scale_free_kl`);
* :func:`overlap_against_control` — §3.2 / App. A.2: the overlap of two column spaces against
  the same overlap for a control pair (the step-0 models), with a paired bootstrap standard error;
* :func:`lingen_comparison` — Algorithm 1 (§3.3) beside its baselines, per position;
* :func:`lemma_c18_check` — Lemma C.18's bound beside the divergence it bounds.
"""
from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
from packaging.utils import canonicalize_name

from . import lingen, logits as lg
from .book import decide_effect
from .book.claims import Effect
from .book.chapters import get_chapter
from .book.costs import HeavyStep
from .models.causal_lm import estimate_param_count, forward_flops
from .models.hub import model_config
from .models.mini_pythia import SIZES, mini_pythia_config
from .models.prefix_reuse import DEFAULT_BATCH_TOKENS

PAPER_N = 10_000   # |H| ≈ |F| ≈ 10^4 of the paper's spectra and fits (App. A.1.2)
READINGS = ("literal", "original")
PAPER_ALPHA_OLMO1B_TRAINED = 0.561  # Fig. 6a: OLMo-1b, final checkpoint, n ≈ 10^4
PAPER_ALPHA_OLMO1B_STEP0 = 0.374    # Fig. 6d: OLMo-1b, step 0 (the same model before training)


# ---------------------------------------------------------------------------
# α over n (App. A.1.1–A.1.2) and the rules that decide the α findings
# ---------------------------------------------------------------------------

@dataclass
class AlphaCurve:
    """α of the nested sub-matrices L[:n, :n·width] (the first n histories and n futures) for each
    n in ``sizes``, in both readings of App. A.1.1's fit (:func:`lib.logits.fit_power_law`)."""
    sizes: np.ndarray
    alpha: dict[str, np.ndarray]

    def at(self, reading: str, n: int) -> float:
        return float(self.alpha[reading][list(self.sizes).index(n)])


def alpha_over_n(L, width: int, sizes: Sequence[int]) -> AlphaCurve:
    """The α curve of one matrix L (rows: histories, columns: blocks of ``width`` per future), at the
    sizes n that it holds (n ≤ its histories and its futures); larger sizes are dropped."""
    L = np.asarray(L, dtype=np.float64)
    n_max = min(L.shape[0], L.shape[1] // width)
    sizes = np.array(sorted({int(n) for n in sizes if 4 <= n <= n_max}))
    if sizes.size == 0:
        raise lg.LogitsError(f"no size n in {list(sizes)} fits the {L.shape[0]} × {L.shape[1] // width}-future matrix")
    alpha = {r: np.empty(len(sizes)) for r in READINGS}
    for j, n in enumerate(sizes):
        s = lg.normalised_singular_values(L[:n, :n * width])
        for r in READINGS:
            alpha[r][j] = lg.fit_power_law(s, r).alpha
    return AlphaCurve(sizes, alpha)


def planted_alpha_curve(alpha: float, sizes: Sequence[int]) -> dict[str, np.ndarray]:
    """Both readings' fits to the exact power law σ_i = i^(−α), i = 1..n, for each n: the bias of a
    reading as a function of the size alone."""
    out = {r: np.empty(len(sizes)) for r in READINGS}
    for j, n in enumerate(sizes):
        s = np.arange(1, int(n) + 1, dtype=float) ** -alpha
        for r in READINGS:
            out[r][j] = lg.fit_power_law(s, r).alpha
    return out


def _side(x: float, low: float, high: float) -> str:
    return "below" if x < low else ("above" if x > high else "inside")


@dataclass
class BandDecision:
    """A finding "α ∈ [low, high]" decided from an α curve (:func:`decide_band`).

    ``value``: α (literal reading) at the largest n; ``decided``: whether every value the rule
    reads falls on one side of the band (then ``inside`` says which); ``reason`` says why not."""
    value: float
    decided: bool
    inside: bool | None
    projected: dict[str, float]
    slope: dict[str, float]
    reason: str | None


def decide_band(curve: AlphaCurve, low: float, high: float, n_paper: int = PAPER_N,
                upper_from: float = 4.0) -> BandDecision:
    """Decide "α ∈ [low, high]" (a band stated for the paper's size n ≈ ``n_paper``) from an α curve.

    The rule reads, for both readings, α at the largest n and α projected to ``n_paper`` along the
    least-squares slope of α against log₂ n over the sizes n ≥ n_max/``upper_from`` (the curve's last
    two doublings: the smallest sizes fit a few dozen singular values): the readings nearest the
    paper's scale. The finding is decided only when all four fall on one side of the band (inside:
    reproduces; below or above: does not reproduce here); otherwise it is undecided at this scale,
    with the values that disagree. The projection only ever withholds a verdict (it is one of the
    values that must agree), never grants one.
    """
    n_max = int(curve.sizes.max())
    top = curve.sizes >= n_max / upper_from
    values, projected, slope = [], {}, {}
    for r in READINGS:
        y, x = curve.alpha[r][top], np.log2(curve.sizes[top])
        slope[r] = float(np.polyfit(x, y, 1)[0]) if top.sum() >= 2 else 0.0
        projected[r] = float(curve.alpha[r][-1] + slope[r] * max(0.0, np.log2(n_paper / n_max)))
        values.append((f"{r} reading at n = {n_max}", float(curve.alpha[r][-1])))
        values.append((f"{r} reading projected to n = {n_paper}", projected[r]))
    sides = {_side(v, low, high) for _, v in values}
    value = float(curve.alpha["literal"][-1])
    if len(sides) == 1:
        side = sides.pop()
        return BandDecision(value, True, side == "inside", projected, slope, None)
    band = f"[{low:g}, {high:g}]" if np.isfinite(low) else f"≤ {high:g}"
    parts = "; ".join(f"{name}: {v:.3f} ({_side(v, low, high)})" for name, v in values)
    return BandDecision(value, False, None, projected, slope,
                        f"the readings nearest n = {n_paper} do not fall on one side of {band}: {parts}")


@dataclass
class SignDecision:
    """A finding "α(a) − α(b) > 0" decided from two α curves at equal sizes (:func:`decide_sign`).

    ``value``: the smallest gap if every gap is positive, the largest if every gap is negative,
    else the literal reading's gap at the largest n; ``gaps``: reading -> gaps at the sizes read."""
    value: float
    decided: bool
    sizes: np.ndarray
    gaps: dict[str, np.ndarray]
    reason: str | None


def decide_sign(a: AlphaCurve, b: AlphaCurve, upper_from: float = 4.0) -> SignDecision:
    """Decide whether α(a) exceeds α(b) from their curves: the gaps α(a) − α(b) at every size
    n ≥ n_max/``upper_from`` common to both, in both readings, must all have one sign."""
    common = np.array(sorted(set(a.sizes) & set(b.sizes)))
    common = common[common >= common.max() / upper_from]
    gaps = {r: np.array([a.at(r, n) - b.at(r, n) for n in common]) for r in READINGS}
    allg = np.concatenate(list(gaps.values()))
    if np.all(allg > 0):
        return SignDecision(float(allg.min()), True, common, gaps, None)
    if np.all(allg < 0):
        return SignDecision(float(allg.max()), True, common, gaps, None)
    return SignDecision(float(gaps["literal"][-1]), False, common, gaps,
                        "the gap changes sign across sizes or readings: "
                        + "; ".join(f"{r} at n = {n}: {g:+.3f}" for r in READINGS for n, g in zip(common, gaps[r])))


def decide_sign_against_nulls(decisions: dict) -> tuple[float, str | None]:
    """One verdict on "α(trained) exceeds the α of every model that learned nothing" from one
    :func:`decide_sign` per null (name -> :class:`SignDecision` of α(trained) − α(null)): (value, reason).

    A null decided at or above the trained α (every gap negative) settles it: the value is that gap
    (the most negative such), below 0, and the reason None. When every null is decided below, the value
    is the smallest gap, above 0. Otherwise the value is the smallest gap and the reason names each
    undecided null's."""
    if not decisions:
        raise lg.LogitsError("no null model to decide against")
    above = [d.value for d in decisions.values() if d.decided and d.value < 0]
    if above:
        return float(min(above)), None
    smallest = float(min(d.value for d in decisions.values()))
    if all(d.decided for d in decisions.values()):
        return smallest, None
    return smallest, "; ".join(f"against {name}: {d.reason}" for name, d in decisions.items() if not d.decided)


# ---------------------------------------------------------------------------
# average KL to low-rank approximations (Def 3.1, App. A.1.3, Fact A.2)
# ---------------------------------------------------------------------------

@dataclass
class LowRankKL:
    """Average KL of L to its rank-r truncations (full and downsized matrices), the rank-1 baseline's
    average KL and the largest Fact A.2 violation (Σ KL − ½‖L − A‖²_F, ≤ 0) over every rank and the
    baseline."""
    curves: dict[float, dict]
    baseline_kl: float
    max_violation: float
    baseline_row: np.ndarray | None = None  # the baseline's one row (:func:`baseline_row`), every history's


def low_rank_kl(model, L, futures, width: int, ranks: Sequence[int], downsize: Sequence[float] = (),
                usv=None) -> LowRankKL:
    """:class:`LowRankKL` of a model's L_{M,k}(H, F): the curves of :func:`lib.logits.avg_kl_curve`
    (factor 1 = the full matrix), and App. A.1.3's baseline, every row the centred logits after f
    alone at f's selected columns (the k most likely tokens after f, ``width`` = k)."""
    L = np.asarray(L, dtype=np.float64)
    usv = usv if usv is not None else lg.svd(L, "auto", q=max(ranks))
    curves = {1: lg.avg_kl_curve(L, width, ranks, usv=usv)}
    for i in downsize:
        curves[i] = lg.avg_kl_curve(lg.downsized(L, len(futures), i), width, ranks)
    row = baseline_row(model, futures, width)
    A1 = lg.rank1_baseline(row, L.shape[0])
    violations = [lg.fact_a2_violation(L, A1, width)]
    violations += [lg.fact_a2_violation(L, lg.rank_r_approximation(usv, r), width)
                   for r in ranks if r <= min(L.shape)]
    return LowRankKL(curves, lg.average_kl(L, A1, width), max(violations), row)


def baseline_row(model, futures, width: int) -> np.ndarray:
    """App. A.1.3's rank-1 baseline as one row (1, |F|·width): for each future f the centred log-probabilities
    after f alone, at f's selected columns (the ``width`` most likely tokens after f); every history's row."""
    cols = lg.select_columns(model, futures, width)
    lp = lg.next_token_logprobs(model, futures).astype(np.float64)
    return np.take_along_axis(lp - lp.mean(1, keepdims=True), cols, axis=1).reshape(1, -1)


def kl_ratio(L, row, width: int, r: int, usv=None) -> float:
    """D_KL^avg(L, A_r) / D_KL^avg(L, A_1) (Def 3.1): the rank-r truncated SVD against the rank-1 baseline whose
    every row is ``row`` (:func:`baseline_row`). Below 1 for any matrix whose rank-r truncation is close to it
    (Eckart–Young), learned or not: a finding needs a null."""
    L = np.asarray(L, dtype=np.float64)
    return kl_at_rank(L, width, r, usv) / lg.average_kl(L, lg.rank1_baseline(row, L.shape[0]), width)


def truncation(L, r: int) -> np.ndarray:
    """The rank-r truncated SVD of L as the projection of L onto the top-r eigenvectors of L Lᵀ:
    U_r U_rᵀ L = U_r S_r V_rᵀ (Eckart–Young), at the cost of an |H| × |H| eigenproblem (the exact SVD where L has
    more rows than columns)."""
    L = np.asarray(L, dtype=np.float64)
    if L.shape[0] > L.shape[1]:
        return lg.rank_r_approximation(lg.svd(L, "exact"), r)
    _, vecs = np.linalg.eigh(L @ L.T)
    P = vecs[:, ::-1][:, :r]
    return P @ (P.T @ L)


def row_kl(L, A, width: int) -> np.ndarray:
    """Per history h: the mean over futures of KL(softmax(L_{h,f}) ‖ softmax(A_{h,f})), blocks of ``width`` columns;
    its mean over h is D_KL^avg(L, A) of Def 3.1 (:func:`lib.logits.average_kl`)."""
    l3 = torch.as_tensor(np.asarray(L, dtype=np.float64)).reshape(len(L), -1, width)
    a3 = torch.as_tensor(np.ascontiguousarray(A, dtype=np.float64)).reshape(len(L), -1, width)
    lp, la = torch.log_softmax(l3, dim=2), torch.log_softmax(a3, dim=2)
    return (lp.exp() * (lp - la)).sum(dim=2).mean(dim=1).numpy()


RATIO_GAIN_RESOLUTION = 0.1
"""The smallest gain over a null that counts, for "a rank-r approximation beats the rank-1 baseline because of
what the model learned": the gain is 1 − ratio(model) / ratio(null), the fraction of the null's KL ratio that the
model removes. A tenth is the smallest share this chapter counts as structure the model learned: a stated
convention, not a measured spread (Eckart–Young puts every ratio below 1, so only the comparison with a null
means anything; the bootstrap then says whether the gain is measured at all)."""


@dataclass
class RatioGain:
    """:func:`ratio_gain_over_null`: the KL ratios (:func:`kl_ratio`) of a model and of a null model on the same
    histories and futures, the gain 1 − ratio/null_ratio decided by :func:`lib.book.decide_effect`, and its
    bootstrap s.e. (histories resampled with replacement, the same draws for both matrices)."""
    ratio: float
    null_ratio: float
    effect: Effect
    replicates: int

    @property
    def gain(self) -> float:
        return self.effect.estimate


def ratio_gain_over_null(L, row, L_null, row_null, width: int, r: int, *, replicates: int = 200, seed: int = 0,
                         resolution: float = RATIO_GAIN_RESOLUTION) -> RatioGain:
    """The gain g = 1 − kl_ratio(L) / kl_ratio(L_null) of a model over a null (a model that learned nothing: step
    0, or one trained on a stream with no sequential structure), with a paired bootstrap over the histories: each of
    ``replicates`` draws (numpy generator ``seed``) resamples the rows of both matrices with the same indices and
    recomputes both truncations (:func:`truncation`; the baseline's KL is per history, :func:`row_kl`); the s.e. is
    the draws' standard deviation. Decided by
    :func:`lib.book.decide_effect` at ``resolution`` (:data:`RATIO_GAIN_RESOLUTION`)."""
    L, L_null = np.asarray(L, dtype=np.float64), np.asarray(L_null, dtype=np.float64)
    if L.shape != L_null.shape:
        raise lg.LogitsError(f"the model's and the null's matrices must have one shape; got {L.shape}, {L_null.shape}")
    if int(replicates) < 2:
        raise lg.LogitsError(f"parameter 'replicates' must be an integer ≥ 2; got {replicates!r}")
    ratio, null_ratio = kl_ratio(L, row, width, r), kl_ratio(L_null, row_null, width, r)
    # per history: the baseline's KL (it does not depend on the other histories), kept across the draws
    base = [row_kl(M, np.broadcast_to(b, M.shape), width) for M, b in ((L, row), (L_null, row_null))]
    rng = np.random.default_rng(seed)
    draws = np.empty(int(replicates))
    for i in range(len(draws)):
        idx = rng.integers(0, L.shape[0], L.shape[0])
        ratios = [row_kl(M[idx], truncation(M[idx], r), width).mean() / b[idx].mean() for M, b in zip((L, L_null), base)]
        draws[i] = 1.0 - ratios[0] / ratios[1]
    effect = decide_effect(1.0 - ratio / null_ratio, float(np.std(draws, ddof=1)), resolution=resolution)
    return RatioGain(float(ratio), float(null_ratio), effect, int(replicates))


def decide_against_nulls(gains: dict) -> tuple[bool | None, str | None]:
    """One verdict over several nulls (name -> :class:`RatioGain`): the finding reproduces when it does against
    every null, does not when it fails against one, and is undecided otherwise, with each undecided null's reason."""
    if not gains:
        raise lg.LogitsError("no null model to decide against")
    verdicts = {name: g.effect.reproduces for name, g in gains.items()}
    if any(v is False for v in verdicts.values()):
        return False, None
    if all(v is True for v in verdicts.values()):
        return True, None
    return None, "; ".join(f"against {name}: {gains[name].effect.reason}" for name, v in verdicts.items() if v is None)


def kl_at_rank(L, width: int, r: int, usv=None) -> float:
    """D_KL^avg(L, A_r) (Def 3.1) for the rank-r truncated SVD A_r of L."""
    usv = usv if usv is not None else lg.svd(L, "auto", q=r)
    return lg.average_kl(L, lg.rank_r_approximation(usv, r), width)


# ---------------------------------------------------------------------------
# over training (Fig. 3)
# ---------------------------------------------------------------------------

@dataclass
class TrainingShape:
    """The average KL to rank r at each checkpoint, and the three numbers of Fig. 3's shape ("drops
    significantly, then rises slowly towards its final value"), with m the smallest KL at a checkpoint
    strictly between step 0 and the last: ``drop`` = m / KL(step 0), ``rise`` = KL(last) / m,
    ``final_over_start`` = KL(last) / KL(step 0)."""
    steps: list
    kl: np.ndarray
    argmin_step: object
    drop: float
    rise: float
    final_over_start: float


def scale_free_kl(kl: Sequence[float], history_rms: Sequence[float]) -> np.ndarray:
    """Average KL divided by the history-dependent variance (:func:`lib.logits.history_dependent_rms` squared), per
    checkpoint. For small logit residuals KL ≈ ½ × their mean square (Fact A.2's bound is that term), so a matrix
    whose rows hardly depend on the history has a small KL to any approximation; the quotient is the share of the
    history-dependent variance the rank-r approximation leaves, which does not shrink with the logits' scale."""
    kl, rms = np.asarray(kl, dtype=np.float64), np.asarray(history_rms, dtype=np.float64)
    if kl.shape != rms.shape or not np.all(rms > 0):
        raise lg.LogitsError(f"need one history-dependent rms > 0 per KL; got {rms!r} for {kl.shape[0]} values")
    return kl / rms ** 2


def training_shape(steps: Sequence, kl: Sequence[float]) -> TrainingShape:
    kl = np.asarray(kl, dtype=np.float64)
    if len(kl) < 3 or len(kl) != len(steps):
        raise lg.LogitsError(f"need the KL at three or more checkpoints (step 0, some between, the last); got {len(kl)}")
    j = 1 + int(np.argmin(kl[1:-1]))
    return TrainingShape(list(steps), kl, steps[j], float(kl[j] / kl[0]), float(kl[-1] / kl[j]),
                         float(kl[-1] / kl[0]))


# ---------------------------------------------------------------------------
# shared column spaces (§3.2, App. A.2) against a control pair
# ---------------------------------------------------------------------------

def future_group_grams(L, width: int, n_groups: int) -> np.ndarray:
    """(groups, n, n): Σ_{f in group g} L_f L_fᵀ for the futures (blocks of ``width`` columns) cut into
    ``n_groups`` contiguous groups; their sum is L Lᵀ, whose top eigenvectors span L's column space."""
    L = np.asarray(L, dtype=np.float64)
    n_f = L.shape[1] // width
    edges = np.linspace(0, n_f, min(n_groups, n_f) + 1).round().astype(int)
    return np.stack([L[:, a * width:b * width] @ L[:, a * width:b * width].T for a, b in zip(edges[:-1], edges[1:])])


def top_eigenvectors(gram, r: int) -> np.ndarray:
    """The r eigenvectors of the symmetric matrix ``gram`` with the largest eigenvalues (n, r)."""
    _, vecs = torch.linalg.eigh(lg.as_tensor(gram))
    return vecs.numpy()[:, ::-1][:, :r]


def mean_cosine(U1, U2) -> float:
    """Mean cosine of the principal angles between the spans of the orthonormal columns of U1 and U2."""
    return float(np.clip(torch.linalg.svdvals(lg.as_tensor(U1.T @ U2)).numpy(), 0.0, 1.0).mean())


def random_subspace_null(n: int, r: int, trials: int, seed: int = 0) -> tuple[float, float]:
    """Mean and standard deviation, over ``trials`` pairs of independent uniformly random
    r-dimensional subspaces of R^n, of the mean cosine of their principal angles."""
    means = lg.random_subspace_cosine_trials(n, r, trials, seed).mean(axis=1)
    return float(np.mean(means)), float(np.std(means, ddof=1)) if trials > 1 else 0.0


@dataclass
class OverlapComparison:
    """The overlap (mean cosine of the principal angles between rank-r column spaces) of a pair under
    test and of a control pair on the same histories, their difference with its paired bootstrap
    standard error ``se`` (histories and groups of futures resampled), ``z`` = difference / se, and
    each pair's z-score against two random r-dimensional subspaces (mean ``null_mean``, SD
    ``null_sd``), the null the paper's figures draw."""
    rank: int
    test: float
    control: float
    difference: float
    se: float
    z: float
    null_mean: float
    null_sd: float
    n_boot: int

    @property
    def z_test_vs_random(self) -> float:
        return (self.test - self.null_mean) / self.null_sd

    @property
    def z_control_vs_random(self) -> float:
        return (self.control - self.null_mean) / self.null_sd

    @property
    def z_or_none(self) -> float | None:
        """``z``, or None where the bootstrap standard error is zero (the difference cannot be scaled)."""
        return self.z if self.se > 0 else None


def smallest_overlap_z(controls: dict) -> float | None:
    """A claim "the pair under test overlaps more than every control pair": the smallest difference in standard
    errors over the comparisons (name -> :class:`OverlapComparison`), or None if one of them has a zero
    standard error."""
    if not controls:
        raise lg.LogitsError("no control pair to compare against")
    zs = [c.z_or_none for c in controls.values()]
    return None if None in zs else float(min(zs))


def overlap_against_control(test: tuple, control: tuple, width: int, r: int, n_boot: int = 200,
                            null_trials: int = 40, seed: int = 0, n_groups: int = 40) -> OverlapComparison:
    """Is the pair ``test`` = (L1, L2) more aligned than the pair ``control`` = (L3, L4)?

    All four matrices share their rows (histories, n of them) and hold blocks of ``width`` columns
    per future. The overlap of a pair is the mean cosine of the principal angles between the spans
    of their top-r left singular vectors (top eigenvectors of L Lᵀ). Its standard error comes from
    ``n_boot`` bootstrap replicates that resample the histories and ``n_groups`` contiguous groups
    of futures, the same draw for all four matrices, so the difference test − control is paired."""
    mats = [np.asarray(M, dtype=np.float64) for M in (*test, *control)]
    n = mats[0].shape[0]
    if any(M.shape[0] != n for M in mats):
        raise lg.LogitsError("the four matrices must share their histories (rows)")
    if not 1 <= r <= n // 2:
        raise lg.LogitsError(f"rank r = {r} must be in [1, n/2] = [1, {n // 2}] for n = {n} histories")
    grams = [future_group_grams(M, width, n_groups) for M in mats]

    def overlaps(idx, weights):
        U = [top_eigenvectors(np.tensordot(w, g, axes=1)[np.ix_(idx, idx)], r) for g, w in zip(grams, weights)]
        return mean_cosine(U[0], U[1]), mean_cosine(U[2], U[3])

    full = [np.ones(len(g)) for g in grams]
    t0, c0 = overlaps(np.arange(n), full)
    rng = np.random.default_rng(seed)
    def draw(groups):
        return rng.multinomial(groups, np.full(groups, 1 / groups)).astype(float)

    shared = len({len(g) for g in grams}) == 1          # then one draw of futures for all four: paired
    diffs = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        weights = [draw(len(grams[0]))] * 4 if shared else [draw(len(g)) for g in grams]
        t, c = overlaps(idx, weights)
        diffs.append(t - c)
    se = float(np.std(diffs, ddof=1))
    mu, sd = random_subspace_null(n, r, null_trials, seed)
    return OverlapComparison(r, t0, c0, t0 - c0, se, (t0 - c0) / se if se > 0 else float("nan"), mu, sd, n_boot)


# ---------------------------------------------------------------------------
# LinGen beside its baselines (§3.3, Figs 1b and 5, App. A.3)
# ---------------------------------------------------------------------------

LINGEN, SINGLE_TOKEN, WITH_EMPTY_FUTURE = "LinGen", "single-token", "LinGen + empty future"
SHORT_CONTEXT, EARLIER_CHECKPOINT = "short context", "earlier checkpoint"
BASELINES = (SINGLE_TOKEN, SHORT_CONTEXT, EARLIER_CHECKPOINT)


@dataclass
class LinGenComparison:
    """KL(generator ‖ M) per generation and position, ``kl[name]`` of shape (G, m), for LinGen and its
    baselines on the same G targets, their sampled ``tokens``, the regressed ``coefficients`` v (one row
    per target) of the generators that have them, and ``history_independent_fraction`` of the
    regression matrix L_{M,k}(H, F) (:func:`lib.logits.history_independent_fraction`)."""
    kl: dict[str, np.ndarray]
    history_independent_fraction: float = float("nan")
    tokens: dict[str, np.ndarray] = field(default_factory=dict)
    coefficients: dict[str, np.ndarray] = field(default_factory=dict)

    def per_position(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Mean KL at each position t = 1..m over the generations, and its standard error."""
        x = self.kl[name]
        return x.mean(0), x.std(0, ddof=1) / np.sqrt(len(x)) if len(x) > 1 else np.zeros(x.shape[1])

    def total(self, name: str, first: int = 1) -> float:
        """The mean over generations of Σ_{t ≥ first} KL_t (the paper's "total" for first = 1)."""
        return float(self.kl[name][:, first - 1:].sum(1).mean())

    def margin(self, name: str = LINGEN, baselines: Sequence[str] = BASELINES, first: int = 1):
        """(margin, se, best): the smallest baseline total minus ``name``'s total over positions
        t ≥ ``first``, with the standard error of the mean of the per-target differences to that
        baseline (the generators share their targets: paired)."""
        best = min(baselines, key=lambda b: self.total(b, first))
        d = self.kl[best][:, first - 1:].sum(1) - self.kl[name][:, first - 1:].sum(1)
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        return float(d.mean()), se, best


def lingen_comparison(model, histories, futures, targets, *, k: int, steps: int, samples: int = 1,
                      baselines: dict[str, "lingen.Generation"] | None = None, seed: int = 0,
                      matrix: Callable | None = None) -> LinGenComparison:
    """LinGen (Algorithm 1) with v regressed as §3.3 on L_{M,k}(H, F), beside the single-token
    baseline (v regressed on L_M(H, {Null}), full vocabulary), and the diagnostic that is not the
    paper's recipe: v regressed on both, the empty future's full row appended to the k-column blocks.

    Each of the ``targets`` is generated ``samples`` times, ``steps`` tokens each. ``baselines``:
    generations of the baselines that do not depend on H (short context, earlier checkpoint),
    computed once by :func:`history_free_baselines` and shared between H and its nonsense version.
    ``matrix(H, F)``: how L_{M,k} is computed (e.g. cached); default
    :func:`lib.logits.extended_logit_matrix`."""
    matrix = matrix or (lambda Hs, Fs: lg.extended_logit_matrix(model, Hs, Fs, k))
    LH, LT = (np.asarray(matrix(X, futures), dtype=np.float64) for X in (histories, targets))
    NH, NT = (lg.extended_logit_matrix(model, X, [()]).astype(np.float64) for X in (histories, targets))
    coefficients = {LINGEN: (LH, LT), SINGLE_TOKEN: (NH, NT),
                    WITH_EMPTY_FUTURE: (np.hstack([LH, NH]), np.hstack([LT, NT]))}
    G_targets = [t for t in targets for _ in range(samples)]
    out = LinGenComparison({}, lg.history_independent_fraction(LH, k))
    for name, (A, B) in coefficients.items():
        v = lingen.lingen_coefficients(A, B)   # one row per target, one factorisation of A
        out.coefficients[name] = v
        g = lingen.lingen(model, histories, np.repeat(v, samples, 0), G_targets, steps, seed=seed)
        out.kl[name], out.tokens[name] = g.kl, g.tokens
    for name, g in (baselines or {}).items():
        out.kl[name], out.tokens[name] = g.kl, g.tokens
    return out


def history_free_baselines(model, earlier, targets, *, steps: int, samples: int = 1, short_window: int,
                           seed: int = 0) -> dict[str, "lingen.Generation"]:
    """The baselines of App. A.3 that read no history set: the model with only its last
    ``short_window`` tokens of context, and an earlier checkpoint of it."""
    G_targets = [t for t in targets for _ in range(samples)]
    return {SHORT_CONTEXT: lingen.generate_baseline(lingen.short_context(model, short_window), model, G_targets, steps,
                                                seed=seed),
            EARLIER_CHECKPOINT: lingen.generate_baseline(lambda ctx: lg.next_token_logprobs(earlier, ctx), model,
                                                     G_targets, steps, seed=seed)}


def t_critical(n: int, level: float = 0.95) -> float:
    """The two-sided Student-t critical value with n − 1 degrees of freedom (a paired mean of n)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, max(n - 1, 1)))


# ---------------------------------------------------------------------------
# Lemma C.18 beside the divergence it bounds
# ---------------------------------------------------------------------------

def lemma_c18_check(model, histories, v, targets, steps: int, n_paths: int, seed: int = 0) -> list[dict]:
    """For each target h₀ (row i of ``v`` its coefficients): the estimates of Lemma C.18
    (:func:`lib.lingen.lemma_c18_estimates`), the bound minimised over α
    (:func:`lib.lingen.lemma_c18_bound`) and the ratio bound / measured D_KL(P_truth ‖ P_LinGen)."""
    rows = []
    for i, target in enumerate(targets):
        est = lingen.lemma_c18_estimates(model, histories, v[i], target, steps, n_paths, seed=seed + i)
        b = lingen.lemma_c18_bound(est["S1"], est["S2"], est["delta"], est["v_norm_sq"], steps)
        rows.append({"alpha": b["alpha"], "gamma": b["gamma"], "delta": est["delta"], "bound": b["bound"],
                     "measured_kl": est["measured_kl"], "ratio": b["bound"] / est["measured_kl"]})
    return rows


# ---------------------------------------------------------------------------
# What a run costs before it starts (lowrank-book plan; the declaration's `costs:`)
# ---------------------------------------------------------------------------

CHARS_PER_TOKEN = 4.0   # English under a GPT-NeoX-style BPE: about four characters a token
SVD_NITER = 4           # torch.svd_lowrank's power iterations in lib.logits.svd


def model_config_for(values: dict):
    """The transformers config of the chapter's largest model for the run's ``values``: the hub model's
    (:func:`lib.models.hub.model_config`), or the largest of the Introduction's suite at this profile."""
    if values["hub_model"] != "suite":
        revisions = values.get("hub_revisions") or [None]
        return model_config(values["hub_model"], revisions[-1])

    intro = get_chapter("intro").presets[values.get("profile", "ci")]
    vocab = int(str(intro["tokenizer"]).split(":")[1]) if str(intro["tokenizer"]).startswith("bpe:") else 50304
    largest = max(intro["model_sizes"], key=lambda s: SIZES[s]["hidden_size"] * SIZES[s]["num_hidden_layers"])
    return mini_pythia_config(largest, vocab, intro["context_length"])


def matrix_bytes(n_histories: int, n_futures: int, k: int, itemsize: int = 8) -> float:
    """Bytes of L_{M,k}(H, F): |H| × |F|·k entries."""
    return float(n_histories) * n_futures * k * itemsize


def svd_flops(m: int, n: int, q: int) -> float:
    """FLOPs of lib.logits.svd(·, "auto", q) on an m × n matrix: LAPACK's thin SVD (about
    4·m·n·min + 8·min³, Golub & Van Loan §8.6) up to lib.logits.EXACT_SVD_MAX_ENTRIES entries,
    torch.svd_lowrank beyond (2·(2·niter + 2) products of the matrix with an n × q or m × q block)."""
    small = min(m, n)
    if m * n <= lg.EXACT_SVD_MAX_ENTRIES:
        return 4.0 * m * n * small + 8.0 * small ** 3
    return 2.0 * (2 * SVD_NITER + 2) * m * n * min(q, small)


def regression_bytes(n_histories: int, n_columns: int) -> float:
    """Peak bytes of lib.lingen.lingen_coefficients on an |H| × n_columns float64 matrix: the matrix, its
    transposed contiguous copy and the least-squares solver's working copy (LAPACK gelsd overwrites its input)."""
    return 3 * 8.0 * n_histories * n_columns


def extended_matrix_flops(config, n_histories: int, n_futures: int, history_tokens: float,
                          future_tokens: float) -> float:
    """FLOPs of the forward passes of L_M(H, F) with each history's key/value cache reused
    (lib.models.prefix_reuse): every history once (``history_tokens`` on average, no logits), then
    every future after every history (``future_tokens``, attending to the history and itself), the
    full-vocabulary logits at the last position of each h∘f (lib.models.causal_lm.forward_flops)."""
    return (forward_flops(config, n_histories * history_tokens, history_tokens / 2, logits_at=0)
            + forward_flops(config, n_histories * n_futures * future_tokens, history_tokens + future_tokens / 2,
                            logits_at=n_histories * n_futures))


def heavy_steps(values: dict) -> list:
    """The heavy steps of the chapter "Logit rank" for the run's parameter ``values`` (the
    declaration's ``costs:``), each a :class:`lib.book.costs.HeavyStep`:

    1. the model's forward passes for every extended logit matrix the chapter computes (the main
       pair at |H| = |F| = max(n_spans, alpha_sizes), the control pair and the nonsense futures at
       n_spans, one per checkpoint at n_train, LinGen's at lingen_histories × lingen_futures; in the suite
       also the shuffled-trained nulls': the largest at max(n_spans, alpha_sizes), the smaller size and the
       nonsense futures at n_spans), with
       the history's key/value cache reused (lib.models.prefix_reuse): |H| history passes and
       |H|·|F| future passes, logits at the last position only;
    2. the float64 matrices the chapter holds at once (the two at the largest n, four at n_spans,
       the Gaussian null, one rank-r approximation in flight) and their truncated SVDs;
    3. LinGen's regression (§3.3) on top of what step 2 holds: L_{M,k}(H, F), L_M(H, {Null}), their
       concatenation and the least-squares solver's copy, one factorisation for all targets, for the
       three regressions and both options;
    4. LinGen's generation: G = lingen_targets·lingen_samples generations of lingen_steps tokens, each
       step an extended logit matrix of every history against the G prefixes z (full vocabulary, a
       block of histories at a time), for the three generators with coefficients and both options.
    """
    cfg = model_config_for(values)
    d, vocab = cfg.hidden_size, cfg.vocab_size
    k, n, n_train = values["k"], values["n_spans"], values["n_train"]
    n_big = max(n, max(values["alpha_sizes"]))
    mean_chars = (values["span_min_chars"] + values["span_max_chars"]) / 2
    t_h = min(values["max_span_tokens"], max(1.0, mean_chars / CHARS_PER_TOKEN))
    t_f = min(values["max_span_tokens"], max(1.0, (values["span_max_chars"] - values["span_min_chars"]) / 2
                                              / CHARS_PER_TOKEN))
    t_l = (values["lingen_min_tokens"] + values["lingen_max_tokens"]) / 2
    Hl, Fl, m = values["lingen_histories"], values["lingen_futures"], values["lingen_steps"]
    G = values["lingen_targets"] * values["lingen_samples"]
    n_checkpoints = len(values["hub_revisions"]) if values["hub_model"] != "suite" else 8

    def matrix_flops(nh, nf, th, tf):
        return extended_matrix_flops(cfg, nh, nf, th, tf)

    params = 4.0 * estimate_param_count(cfg)
    forward_peak = params + DEFAULT_BATCH_TOKENS * (16 * d + vocab) * 4.0
    nulls = values["hub_model"] == "suite"  # the shuffled-trained nulls (priced at the largest size's shape)
    passes = ((2 + nulls) * matrix_flops(n_big, n_big, t_h, t_f) + (4 + 2 * nulls) * matrix_flops(n, n, t_h, t_f)
              + n_checkpoints * matrix_flops(n_train, n_train, t_h, t_f)
              + 2 * (matrix_flops(Hl, Fl, t_l, t_l) + matrix_flops(values["lingen_targets"], Fl, t_l, t_l)))
    steps = [HeavyStep("the forward passes of the extended logit matrices",
                       f"|H| = |F| = {n_big} (main), {n} (controls), {n_train} × {n_checkpoints} checkpoints, "
                       f"LinGen {Hl} × {Fl}; ≈{t_h:.0f} + {t_f:.0f} tokens",
                       forward_peak, passes, "n_spans, n_train or lingen_histories")]

    held = ((2 + nulls) * matrix_bytes(n_big, n_big, k) + (5 + 2 * nulls) * matrix_bytes(n, n, k)
            + matrix_bytes(n_big, n_big, k, 4))
    q = max(list(values["ranks"]) + list(values["angle_ranks"]))
    svds = (7 * svd_flops(n, n * k, q) + n_checkpoints * svd_flops(n_train, n_train * k, q)
            + sum(svd_flops(int(n / i ** 0.5), int(n / i ** 0.5) * k, q) for i in values["downsize"]))
    steps.append(HeavyStep("the extended logit matrices held at once and their SVDs",
                           f"|H| = |F| = {n_big} and {n}, k = {k}, float64", held, svds, "n_spans or k", host=True))

    # L_{M,k}(H, F) and L_M(H, {Null}) beside the solve of their concatenation
    regression_peak = held + matrix_bytes(Hl, Fl, k) + 8.0 * Hl * vocab + regression_bytes(Hl, Fl * k + vocab)
    regression = 2 * sum(2.0 * cols * Hl * min(cols, Hl) for cols in (Fl * k, vocab, Fl * k + vocab))
    steps.append(HeavyStep("LinGen's regression", f"|H| = {Hl}, |F| = {Fl}, k = {k}, V = {vocab}, on top of "
                           "the matrices held", regression_peak, regression,
                           "lingen_histories or lingen_futures (or n_spans: the matrices held)", host=True))

    generation = 2 * 3 * sum(matrix_flops(Hl, G, t_l, max(t, 1)) for t in range(m))
    steps.append(HeavyStep("LinGen's generation", f"|H| = {Hl}, G = {G} generations of {m} tokens",
                           forward_peak + min(lingen.LINGEN_BLOCK_BYTES, 8.0 * Hl * G * vocab), generation, "lingen_histories or lingen_targets"))
    return steps + real_model_heavy_steps(values, held_before=held)


# ---------------------------------------------------------------------------
# A model no one here trained: SmolLM2-135M (and Gemma 3 270M) against an untrained twin
# ---------------------------------------------------------------------------

REAL_MODELS = ("smollm2-135m", "gemma3-270m")     # the GGUF models of lib.models.gguf_file
REAL_CORPORA = ("package-descriptions", "none")   # the second corpus of the real-model section
# App. A.1.2, Fig. 6 (n ≈ 10^4, literal reading as the appendix states it) and Fig. 2 (OLMo-7b)
PAPER_ALPHA = {"OLMo-1b": 0.561, "Gemma-1b": 0.565, "Llama-1b": 0.573, "Mamba-1.4b": 0.563, "OLMo-7b": 0.536,
               "OLMo-1b (step 0)": 0.374}
# The two GGUF models' shapes, from their files' headers (tested against lib.models.hub.model_config, which reads the
# whole header and takes tens of seconds): what `lowrank-book plan` prices without opening the files.
REAL_SHAPES = {
    "smollm2-135m": ("llama", {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                               "num_hidden_layers": 30, "num_key_value_heads": 3, "vocab_size": 49152,
                               "tie_word_embeddings": True}),
    "gemma3-270m": ("gemma3_text", {"hidden_size": 640, "intermediate_size": 2048, "num_attention_heads": 4,
                                    "num_hidden_layers": 18, "num_key_value_heads": 1, "vocab_size": 262144,
                                    "tie_word_embeddings": True}),
}
ALPHA_TRANSITION = 0.5   # Fact A.1: above it a fixed rank reaches a fixed relative Frobenius error
FUTURE_GROUPS = 40       # groups of futures resampled by the bootstraps of this section


PIN_FILES = ("requirements.txt", "constraints.txt", "requirements-models.txt")   # at the repository root


def pinned_distributions(root: Path | None = None) -> dict[str, str]:
    """The exact pins ``name==version`` of the book's pin files (:data:`PIN_FILES`), names normalised as
    PEP 503 has them (``packaging.utils.canonicalize_name``)."""

    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    pins = {}
    for fname in PIN_FILES:
        path = root / fname
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line)
            if m:
                pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def package_description_documents(min_chars: int = 2000, pins: dict[str, str] | None = None) -> list[str]:
    """A second offline corpus of real text: the long descriptions (README prose) of the Python
    distributions installed beside the book at exactly the versions its pin files name
    (:func:`pinned_distributions`), one document each, sorted by distribution name, those of at least
    ``min_chars`` characters after fenced code blocks and lines of markup (HTML, badges, tables, reST
    directives) are dropped. The pins decide the documents: a package installed by hand, another version,
    or the book's own (editable, its README) description is not read."""
    import importlib.metadata as md

    pins = pinned_distributions() if pins is None else pins
    markup = re.compile(r"^\s*(<|\[!\[|\||\.\. |:[a-z]+:|[=\-~*#^]{4,}\s*$|!\[)")
    docs = {}
    for dist in md.distributions():
        meta = dist.metadata
        name = canonicalize_name(meta.get("Name") or "")
        body = meta.get_payload() or meta.get("Description") or ""
        if not name or name in docs or pins.get(name) != meta.get("Version") or not isinstance(body, str):
            continue
        body = re.sub(r"```.*?```", "\n", body, flags=re.S)
        kept = "\n".join(line for line in body.splitlines() if not markup.match(line))
        kept = re.sub(r"\n{3,}", "\n\n", kept).strip()
        if len(kept) >= min_chars:
            docs[name] = kept
    return [docs[k] for k in sorted(docs)]


def common_spans(spans, encoders: Sequence[Callable], max_tokens: int, n: int) -> tuple[list[int], list[int]]:
    """Indices of the first ``n`` histories and the first ``n`` futures of a character draw
    (:func:`lib.logits.sample_spans`) that every tokenizer in ``encoders`` maps to between 1 and
    ``max_tokens`` tokens, so that every model reads the same text."""
    def ok(texts):
        return [i for i, t in enumerate(texts) if all(0 < len(enc(t)) <= max_tokens for enc in encoders)][:n]
    return ok(spans.histories), ok(spans.futures)


@dataclass
class AlphaBootstrap:
    """α of one matrix (both readings of App. A.1.1) with its bootstrap replicates
    (:func:`alpha_bootstrap`)."""
    alpha: dict[str, float]
    replicates: dict[str, np.ndarray]

    def se(self, reading: str) -> float:
        return float(np.std(self.replicates[reading], ddof=1))


def gram_alpha(gram) -> dict[str, float]:
    """Both readings of α (:func:`lib.logits.fit_power_law`) from the Gram matrix L Lᵀ: the singular values
    of L are the square roots of its eigenvalues (the fit is blind to their common scale)."""
    ev = torch.linalg.eigvalsh(lg.as_tensor(gram)).numpy()
    s = np.sqrt(np.clip(ev, 0.0, None))
    return {r: lg.fit_power_law(s, r).alpha for r in READINGS}


def alpha_bootstrap(mats: Sequence, width: int, n_boot: int, seed: int = 0,
                    n_groups: int = FUTURE_GROUPS) -> list[AlphaBootstrap]:
    """α of each matrix in ``mats`` (same histories, same futures: blocks of ``width`` columns), with
    ``n_boot`` bootstrap replicates that resample ``n_groups`` contiguous groups of futures with
    replacement, the same draw for every matrix, so that differences between them are paired.

    The histories are not resampled: a row drawn twice leaves L rank-deficient, and its spectrum, which is
    what α reads, would collapse at the tail. A replicate's Gram matrix is Σ_g w_g L_g L_gᵀ
    (:func:`future_group_grams`, w the multinomial counts), so each costs one n × n eigenproblem."""
    if n_boot < 2:
        raise lg.LogitsError(f"parameter 'n_boot' must be at least 2; got {n_boot}")
    grams = [future_group_grams(M, width, n_groups) for M in mats]
    groups = len(grams[0])
    if any(len(g) != groups for g in grams):
        raise lg.LogitsError("the matrices must hold the same number of futures")
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(groups, np.full(groups, 1 / groups), size=n_boot).astype(float)
    out = []
    for g in grams:
        reps = [gram_alpha(np.tensordot(w, g, axes=1)) for w in weights]
        out.append(AlphaBootstrap(gram_alpha(g.sum(0)),
                                  {r: np.array([x[r] for x in reps]) for r in READINGS}))
    return out


@dataclass
class IntervalDecision:
    """A finding "value above (or below) ``threshold``" decided from value ± z*·se
    (:func:`decide_against`): ``reproduces`` True when the whole interval is on the claimed side, False
    when it is on the other side, None (undecided, with ``reason``) when it holds the threshold."""
    value: float
    se: float
    threshold: float
    side: str
    z_star: float
    reproduces: bool | None
    reason: str | None

    @property
    def z(self) -> float:
        """(value − threshold) / se: the distance from the threshold in standard errors."""
        return (self.value - self.threshold) / self.se if self.se > 0 else float("inf") * np.sign(self.value - self.threshold)


def decide_against(value: float, se: float, threshold: float, side: str, z_star: float | None = None) -> IntervalDecision:
    """The rule of the real-model findings: a finding "value is ``side`` (``"above"`` or ``"below"``)
    ``threshold``" reproduces when value ∓ z*·se is on that side, does not reproduce when value ± z*·se is
    on the other side, and is undecided otherwise; z* = :data:`lib.book.Z_FINDING` (3) unless given.
    The claim's check (at_least / at_most ``threshold``) then agrees with the decision on its value."""
    from .book import Z_FINDING

    z_star = Z_FINDING if z_star is None else z_star
    if side not in ("above", "below"):
        raise lg.LogitsError(f"parameter 'side' must be 'above' or 'below'; got {side!r}")
    if not (np.isfinite(value) and np.isfinite(se)) or se < 0:
        raise lg.LogitsError(f"value and se must be finite with se ≥ 0; got {value!r} ± {se!r}")
    lower, upper = value - z_star * se, value + z_star * se
    if lower > threshold:
        decided = side == "above"
    elif upper < threshold:
        decided = side == "below"
    else:
        return IntervalDecision(value, se, threshold, side, z_star, None,
                                f"{value:.3f} ± {z_star:g} s.e. ({se:.3f}) = [{lower:.3f}, {upper:.3f}] holds {threshold:g}")
    return IntervalDecision(value, se, threshold, side, z_star, decided, None)


def kl_per_history(L, A, width: int) -> np.ndarray:
    """For each row h: the mean over the futures f of KL(softmax L_{h,f} ‖ softmax A_{h,f}), each block of
    ``width`` columns a distribution (Def 3.1 before its average over histories)."""
    L = np.asarray(L, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    n, m = L.shape
    P = torch.log_softmax(lg.as_tensor(L.reshape(n, m // width, width)), -1)
    Q = torch.log_softmax(lg.as_tensor(A.reshape(n, m // width, width)), -1)
    return (P.exp() * (P - Q)).sum(-1).mean(-1).numpy()


def paired_difference(a, b) -> tuple[float, float]:
    """mean(a − b) over paired observations and its standard error sd(a − b)/√n."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))


def real_model_config(name: str):
    """The transformers config of one of :data:`REAL_MODELS` for planning, built from :data:`REAL_SHAPES`."""
    from transformers import AutoConfig

    model_type, shape = REAL_SHAPES[name]
    return AutoConfig.for_model(model_type, **shape)


def real_model_heavy_steps(values: dict, held_before: float = 0.0) -> list:
    """The heavy steps of the section "A model no one here trained" (:func:`heavy_steps` appends them):
    the forward passes of L_{M,k} for the first of ``real_models`` trained and untrained on each corpus at
    n = max(real_sizes), its nonsense futures at real_angle_rows, every other model trained on the book's
    corpus; and the matrices held with their SVDs and the bootstrap's eigenproblems, on top of the
    ``held_before`` bytes the chapter's earlier sections still hold."""
    models = list(values.get("real_models") or [])
    if not models:
        return []
    k, n = values["k"], max(values["real_sizes"])
    na, n_boot = values["real_angle_rows"], values["real_bootstrap"]
    n_corpora = 1 + (values["real_corpus"] != "none")
    mean_chars = (values["real_span_min_chars"] + values["real_span_max_chars"]) / 2
    t_h = min(values["max_span_tokens"], max(1.0, mean_chars / CHARS_PER_TOKEN))
    t_f = min(values["max_span_tokens"], max(1.0, (values["real_span_max_chars"] - values["real_span_min_chars"]) / 2
                                              / CHARS_PER_TOKEN))
    flops, peak, what = 0.0, 0.0, []
    for j, name in enumerate(models):
        cfg = real_model_config(name)
        # history reuse, and (until Llama runs its last layer at the last position only) logits at every position
        full_logits = extended_matrix_flops(cfg, n, n, t_h, t_f) + n * n * max(t_f - 1, 0) * 2.0 * cfg.hidden_size * cfg.vocab_size
        if j == 0:
            flops += 2 * n_corpora * full_logits + 2 * (full_logits * (na / n) ** 2)
            what.append(f"{name} trained and untrained, {n_corpora} corpora, nonsense futures at {na}")
        else:
            flops += full_logits
            what.append(f"{name} trained")
        peak = max(peak, 2 * 4.0 * estimate_param_count(cfg) + DEFAULT_BATCH_TOKENS * (16 * cfg.hidden_size
                                                                                      + cfg.vocab_size) * 4.0)
    steps = [HeavyStep("the real models' forward passes", f"|H| = |F| = {n}, ≈{t_h:.0f} + {t_f:.0f} tokens; "
                       + "; ".join(what), peak, flops, "real_sizes or real_models")]
    n_mats = 2 * n_corpora + len(models) - 1
    groups = min(FUTURE_GROUPS, n)   # future_group_grams: at most one group per future
    held = held_before + 2 * matrix_bytes(n, n, k) + 2 * groups * 8.0 * n * n
    work = (n_mats * (svd_flops(n, n * k, n) + 2.0 * n * n * n * k)
            + n_mats * n_boot * (groups * n * n + 10.0 * n ** 3))
    steps.append(HeavyStep("the real models' matrices, SVDs and α bootstraps",
                           f"{n_mats} matrices at n = {n}, k = {k}, {n_boot} replicates of {groups} future groups",
                           held, work, "real_sizes or real_bootstrap", host=True))
    return steps
