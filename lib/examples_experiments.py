"""The studies of the chapter "Examples" (Chen & Murfet §5.2 and App. B on planted and real text).

The mathematics lives in :mod:`lib.empirical_modes` (counting, the paper's P and the weighted M,
their top components, the bigram measures, context snippets), :mod:`lib.modes`,
:mod:`lib.languages` (planted bigrams and their predicted modes), :mod:`lib.perturbation` and
:mod:`lib.linalg`. This module runs it the way the chapter does and gathers what the chapter records
and tabulates, so that each chapter cell is a call, a few records and a table or a figure:

* :func:`planted_noise_study`, :func:`noise_order_study` — planted bigrams under noise against first-
  and second-order perturbation theory (:mod:`lib.perturbation`) and Wedin's bound;
* :func:`planted_lemma_study`, :func:`planted_lemma_summary` — planted bigrams read back as modes
  (Lemmas 5.2, 5.6) over random languages; :func:`planted_orders_problem` refuses orders too large;
* :func:`analyse_order` and the row builders (:func:`counting_rows`, :func:`svd_rows`,
  :func:`overlap_rows`) — counting and the top components of P and M at each (k, l) of real text;
* :func:`method_agreement`, :func:`smoothing_sweep`, :func:`representative_components`,
  :func:`random_overlap_baseline` — the checks and readings of the chapter;
* :func:`text_statistics`, :func:`shuffled_null` — the statistics of §5.2 on the corpus and on
  shuffled copies of it (:func:`lib.empirical_modes.shuffle_tokens`);
* :func:`heavy_steps` — what the chapter costs before it runs (``chapters/examples.yml``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .book.costs import HeavyStep
from .book.parameters import ParameterError
from .empirical_modes import (EmpiricalModes, SequenceCounts, best_collective_set, check_bigram_modes,
                              conditional_matrix, conditional_modes, count_sequences, shuffle_tokens,
                              singular_value_agreement, top_components, weighted_matrix, weighted_modes)
from .languages import bigram_violation, planted_language
from .linalg import subspace_overlap
from .perturbation import (first_crossing, loglog_slope, match_mode, svd_perturbation, taylor_coefficients,
                           wedin_bound, weighted_matrix_of)
from .text import corpus as corpora, tokenization


# ---------------------------------------------------------------------------
# 1. Planted bigrams under noise (Chen & Murfet §5.1 with Defs 5.1/5.5 only nearly holding)
# ---------------------------------------------------------------------------

@dataclass
class NoisyMode:
    """One planted bigram followed along the noise level η (``planted_noise_study``)."""

    kind: str
    size: int
    mode: int                    # index at η = 0
    sigma0: float                # σ at η = 0 (= √q(S))
    eta: np.ndarray
    sigma: np.ndarray            # singular value of the tracked mode
    sigma_first: np.ndarray      # σ + η σ'
    sigma_second: np.ndarray     # σ + η σ' + ½ η² σ''
    vector_error_first: np.ndarray  # ‖(u, v)(η) − first-order (u, v)‖ (sign aligned)
    overlap: np.ndarray          # |⟨u(η), u(0)⟩|·|⟨v(η), v(0)⟩| of the tracked mode
    overlap_first: np.ndarray    # first-order prediction of |⟨u(η), u(0)⟩|·|⟨v(η), v(0)⟩|
    wedin_measured: np.ndarray   # √(sin²θ_u + sin²θ_v)
    wedin_bound: np.ndarray
    violation: np.ndarray        # bigram_violation(η)
    gap: float
    crossing: float              # first-order crossing η (``first_crossing``)
    dsigma: float
    d2sigma: float

    def breakdown(self, level: float = 0.9) -> float:
        """Smallest η of the grid where the overlap falls below ``level`` (inf if never)."""
        bad = np.flatnonzero(self.overlap < level)
        return float(self.eta[bad[0]]) if bad.size else math.inf


def planted_noise_study(k: int, l: int, etas, seed: int = 0, h: float = 1e-3, **planted) -> list[NoisyMode]:
    """Follow every planted bigram of ``planted_language(k, l, noise=η, rng=seed, **planted)`` as η
    grows, against first- and second-order perturbation theory at η = 0 (M₁, M₂ by
    ``taylor_coefficients`` with step h) and against Wedin's bound. Every history must have
    q(x) > 0 at η = 0 (true for k = 1), so that M(η) is smooth."""
    def lang(eta):
        return planted_language(k, l, noise=eta, rng=seed, **planted)

    def M_of(eta):
        return weighted_matrix_of(lang(eta).joint(k, l))

    base = lang(0.0)
    M0, M1, M2 = taylor_coefficients(M_of, h)
    if np.any(M0.sum(axis=0) == 0):
        raise ValueError("some history has q(x) = 0 at η = 0: M(η) is not smooth there (use k = 1)")
    pert = svd_perturbation(M0, M1, M2)
    p = len(pert.sigma)
    etas = np.asarray(etas, dtype=np.float64)
    svds = []
    joints = []
    for eta in etas:
        J = lang(float(eta)).joint(k, l)
        joints.append(J)
        U, s, Vt = np.linalg.svd(weighted_matrix_of(J))
        svds.append((U[:, :p], s, Vt[:p].T))
    out = []
    n_y, n_x = M0.shape
    for pm in base.predicted_modes():
        u_ref = pm.u(n_y)
        v_ref = pm.v_tilde(n_x)
        a, _ = match_mode(pert.U[:, :p], pert.V[:, :p], u_ref, v_ref)
        u0, v0 = pert.U[:, a], pert.V[:, a]
        cols = {name: np.empty(len(etas)) for name in ("sigma", "verr", "ov", "wm", "wb", "viol")}
        for i, (eta, (U, s, V)) in enumerate(zip(etas, svds)):
            b, ov = match_mode(U, V, u0, v0)
            sign = np.sign(U[:, b] @ u0) or 1.0
            u1, v1 = pert.vectors_first(a, eta)
            cols["sigma"][i] = s[b]
            cols["verr"][i] = math.hypot(np.linalg.norm(sign * U[:, b] - u1), np.linalg.norm(sign * V[:, b] - v1))
            cols["ov"][i] = ov
            cols["wm"][i], cols["wb"][i] = wedin_bound(M0, pert.sigma, a, s[b], U[:, b], V[:, b])
            cols["viol"][i] = bigram_violation(joints[i], pm.rows, pm.col)
        du, dv = np.linalg.norm(pert.du[:, a]), np.linalg.norm(pert.dv[:, a])
        ov_first = 1.0 / np.sqrt((1 + (etas * du) ** 2) * (1 + (etas * dv) ** 2))
        out.append(NoisyMode(pm.kind, len(pm.rows), a, float(pert.sigma[a]), etas, cols["sigma"],
                             pert.sigma_first(a, etas), pert.sigma_second(a, etas), cols["verr"], cols["ov"], ov_first, cols["wm"], cols["wb"],
                             cols["viol"], float(pert.gap[a]), first_crossing(pert, a), float(pert.dsigma[a]),
                             float(pert.d2sigma[a])))
    return out


@dataclass
class NoiseOrders:
    """:func:`noise_order_study` over the planted modes of several languages.

    ``slopes``: per mode, the fitted log-log orders of |σ − first order|, |σ − second order| and of the
    first-order vector error (predicted: 2, 3 and 2), fitted for η ≤ min(``fit_max``, η_×/20);
    ``sigma_order_deviation`` = max |order − predicted| over the two σ fits, ``vector_order_deviation``
    the same for the vectors; ``wedin_max_ratio``: the largest measured rotation over Wedin's bound;
    ``violation_minus_eta``: max |Def. 5.5 violation − η|; ``breakdown_ratios``: per mode, the η where
    the overlap first falls below 0.9 over the first-order crossing η_×; ``overlap_at_break``: the
    first-order overlap there, per mode that breaks."""

    slopes: np.ndarray
    sigma_order_deviation: float
    vector_order_deviation: float
    wedin_max_ratio: float
    violation_minus_eta: float
    breakdown_ratios: np.ndarray
    overlap_at_break: list

    def near_crossing(self, within: float = 0.15) -> int:
        """How many modes break within ``within`` (relative) of their first-order crossing."""
        return int(np.sum(np.abs(self.breakdown_ratios - 1) <= within))


def noise_order_study(modes, etas, fit_max: float = 1e-2, crossing_fraction: float = 20.0,
                      break_level: float = 0.9) -> NoiseOrders:
    """Fit the orders of the perturbation errors of every ``NoisyMode`` in ``modes`` (from
    :func:`planted_noise_study`, one grid ``etas``) well inside the expansion's range, which ends
    near the first crossing η_× (η ≤ min(fit_max, η_×/crossing_fraction)), and compare each mode's
    rotation with Wedin's bound and its break-down with the crossing."""
    etas = np.asarray(etas, dtype=np.float64)
    slopes, wedin, violation, ratios, at_break = [], 0.0, 0.0, [], []
    for m in modes:
        small = etas <= min(fit_max, m.crossing / crossing_fraction)
        slopes.append((loglog_slope(etas[small], np.abs(m.sigma - m.sigma_first)[small]),
                       loglog_slope(etas[small], np.abs(m.sigma - m.sigma_second)[small]),
                       loglog_slope(etas[small], m.vector_error_first[small])))
        ok = np.isfinite(m.wedin_bound)
        wedin = max(wedin, float(np.max(m.wedin_measured[ok] / m.wedin_bound[ok])))
        violation = max(violation, float(np.max(np.abs(m.violation - etas))))
        hit = np.flatnonzero(m.overlap < break_level)
        if hit.size:
            at_break.append(float(m.overlap_first[hit[0]]))
        ratios.append(m.breakdown(break_level) / m.crossing)
    slopes = np.array(slopes)
    return NoiseOrders(slopes, float(max(np.max(np.abs(slopes[:, 0] - 2)), np.max(np.abs(slopes[:, 1] - 3)))),
                       float(np.max(np.abs(slopes[:, 2] - 2))), wedin, violation, np.array(ratios), at_break)


# ---------------------------------------------------------------------------
# 2. Studies the chapter runs (thin wrappers, so that the chapter holds no logic)
# ---------------------------------------------------------------------------

PLANTED_COLLECTIVE = ((0.02, 0.015), (0.01, 0.01, 0.012))
PLANTED_MAX_LENGTH = 4  # k + l of a planted-bigram check (see planted_orders_problem)


def require_sweep_order(orders, sweep_order) -> None:
    """Refuse (:class:`lib.book.parameters.ParameterError`, naming the parameter) a smoothing-sweep
    order [k, l] that is not the (k, l) of one of ``orders`` ([k, l, threshold] each): the sweep
    reads the counts and modes computed for that order."""
    known = [list(o[:2]) for o in orders]
    if list(sweep_order) not in known:
        raise ParameterError(f"parameter 'sweep_order': allowed values are the [k, l] of one of the orders {known}; "
                             f"got {list(sweep_order)!r}")


def planted_orders_problem(orders) -> str | None:
    """Why the (k, l) of :func:`planted_lemma_study` cannot be run, in a sentence, or None.

    The check takes a dense SVD of the planted language's joint over Σ^k × Σ^l. With the default
    bigrams (two absolute, collective ones of two and three histories) the planted alphabet has
    |Σ| = 4 + 7k + 4l tokens (background, reserved history and continuation tokens), so
    k + l = 4 is the longest order whose joint stays within ``lib.languages.DENSE_LIMIT``
    (|Σ|^(k+l) = 29^4 at (3, 1); 33^5 > 2^24 at (3, 2)). Used by the Examples chapter's
    declaration (``validate:``), so that a wrong order is refused before any work."""
    for i, order in enumerate(orders):
        k, l = order
        if k + l > PLANTED_MAX_LENGTH:
            return (f"item [{i}] = {list(order)}: k + l = {k + l} is above {PLANTED_MAX_LENGTH}, the longest planted "
                    f"joint that stays dense (|Σ|^(k+l) with |Σ| = 4 + 7k + 4l)")
    return None


def planted_lemma_study(orders, n_languages: int, seed: int = 0, background_size: int = 4,
                        absolute=(0.06, 0.03), collective=PLANTED_COLLECTIVE) -> list[dict]:
    """``check_bigram_modes`` on ``n_languages`` random planted languages (backgrounds drawn from
    seed, seed+1, …) for every (k, l) in ``orders``: one row per planted bigram."""
    rows = []
    for k, l in orders:
        for i in range(n_languages):
            lang = planted_language(k, l, background_size, absolute, collective, rng=seed + i)
            for c in check_bigram_modes(lang, k, l):
                rows.append(dict(k=k, l=l, language=seed + i, alphabet=lang.alphabet_size, kind=c.kind, size=c.size,
                                 mode=c.mode, cluster=c.cluster, sigma=c.sigma_predicted, sigma_error=c.sigma_error,
                                 vector_error=c.vector_error, own_propensity_error=c.own_propensity_error,
                                 other_propensity_max=c.other_propensity_max, violation=c.violation))
    return rows


def planted_lemma_summary(rows: list[dict]) -> list[dict]:
    """:func:`planted_lemma_study`'s rows summed up per (k, l) and kind of bigram: how many were
    checked, and the largest error in σ, in the vectors, of the own-mode propensities (against the
    indicator of the bigram) and of the other modes' propensities (against 0)."""
    out = []
    for k, l in dict.fromkeys((r["k"], r["l"]) for r in rows):
        for kind in ("absolute", "collective"):
            sel = [r for r in rows if (r["k"], r["l"], r["kind"]) == (k, l, kind)]
            if sel:
                out.append({"(k, l)": (k, l), "bigram": kind, "checked": len(sel),
                            "σ error": max(r["sigma_error"] for r in sel),
                            "vector error": max(r["vector_error"] for r in sel),
                            "own propensity": max(r["own_propensity_error"] for r in sel),
                            "other propensities": max(r["other_propensity_max"] for r in sel)})
    return out


@dataclass
class OrderAnalysis:
    """Everything the chapter computes for one (k, l) of real text."""

    k: int
    l: int
    counts: SequenceCounts
    P: EmpiricalModes            # the paper's matrix, smoothing α
    P0: EmpiricalModes           # the same without smoothing (α = 0): P(y|x) = c(xy)/c(x)
    M: EmpiricalModes            # the weighted operator
    count_seconds: float


def analyse_order(tokens, doc_offsets, vocab_size, k: int, l: int, min_count: int, r: int = 100,
                  alpha: float = 1.0, smoothing: str = "observed", seed: int = 0) -> OrderAnalysis:
    """Count and threshold (App. B), then the top-r components of P (α), P (α = 0) and M, each by
    the paper's randomized/Lanczos rule. A kept matrix with fewer than r + 1 rows or columns (a high
    threshold on a small corpus) gives its min(shape) − 1 leading components, all the rule can return."""
    t0 = time.perf_counter()
    counts = count_sequences(tokens, k, l, doc_offsets, vocab_size, min_count)
    t_count = time.perf_counter() - t0
    if min(counts.shape) < 2:
        raise ValueError(f"order (k, l) = ({k}, {l}) at threshold {min_count} keeps a {counts.shape[0]} × "
                         f"{counts.shape[1]} matrix: too few histories or continuations for any component; "
                         "lower the threshold or read a larger corpus")
    r = min(r, min(counts.shape) - 1)
    P = conditional_modes(counts, r, alpha, smoothing, seed=seed)
    P0 = conditional_modes(counts, r, 0.0, "none", seed=seed)
    M = weighted_modes(counts, r, seed=seed)
    return OrderAnalysis(k, l, counts, P, P0, M, t_count)


def counting_rows(analyses: dict) -> list[dict]:
    """Per order (k, l) of real text: the threshold, the histories seen, the kept matrix's shape and
    non-zeros, and the share of windows kept (``analyses``: (k, l) → :class:`OrderAnalysis`)."""
    return [{"(k, l)": (A.k, A.l), "threshold t": A.counts.min_x_count, "histories seen": A.counts.n_x_seen,
             "kept x × y": f"{A.counts.shape[0]:,} × {A.counts.shape[1]:,}", "non-zeros": A.counts.counts.nnz,
             "windows kept": A.counts.kept_fraction} for A in analyses.values()]


def svd_rows(analyses: dict) -> list[dict]:
    """Per order: the SVD method the paper's rule picks, the top singular value of P and of M, and
    the seconds spent counting and on each SVD."""
    return [{"(k, l)": (A.k, A.l), "SVD (rule)": A.P.method, "σ₁ of P": A.P.sigma[0], "σ₁ of M": A.M.sigma[0],
             "count (s)": round(A.count_seconds, 2), "SVD of P (s)": round(A.P.seconds, 1),
             "SVD of M (s)": round(A.M.seconds, 1)} for A in analyses.values()]


STAND_INS = ("Example 5.7 (a top component)", "Examples 5.9 and 5.10 (single leading components)",
             "the reading after Example 5.8 (a perturbed collective bigram)", "Example 5.8 (a seventh component)")


def representative_components(analyses: dict, sweep_order) -> list[tuple[EmpiricalModes, int, str]]:
    """Components of M that stand in for the paper's Examples 5.7–5.11, as (modes, index, which
    example): the leading mode of the first order, the leading mode at the sweep order, the most
    bigram-like of the first ten at the longest k (the reading after Example 5.8), and the seventh
    at the longest l (Example 5.8 shows a seventh component)."""
    orders = list(analyses.values())
    longest_k = next(A for A in orders if A.k == max(a.k for a in orders))
    longest_l = next(A for A in orders if A.l == max(a.l for a in orders))
    picks = [(orders[0].M, 0), (analyses[tuple(sweep_order)].M, 0),
             (longest_k.M, int(np.argmax(longest_k.M.bigram_overlaps()[:10]))),
             (longest_l.M, min(6, longest_l.M.n_modes - 1))]
    return [(modes, alpha, example) for (modes, alpha), example in zip(picks, STAND_INS)]


@dataclass
class MethodAgreement:
    """:func:`method_agreement`: per operator ('P', 'M'), the largest relative difference between the
    Lanczos and the randomized singular values, over the top 10 (``top10``) and all r (``all``), and
    each method's seconds (``seconds[operator][method]``)."""

    top10: dict
    all: dict
    seconds: dict


def method_agreement(counts: SequenceCounts, r: int, alpha: float, smoothing: str = "observed",
                     seed: int = 0) -> MethodAgreement:
    """Both SVD methods (randomized and Lanczos) on the paper's P and on M of one count table, so that
    the one the paper's rule did not pick is checked against the one it did (App. B)."""
    top10, every, seconds = {}, {}, {}
    for name, mat in (("P", conditional_matrix(counts, alpha, smoothing)), ("M", weighted_matrix(counts))):
        res = {m: top_components(mat, r, m, seed=seed) for m in ("lanczos", "randomized")}
        top10[name] = singular_value_agreement(res["lanczos"].s, res["randomized"].s, 10)
        every[name] = singular_value_agreement(res["lanczos"].s, res["randomized"].s)
        seconds[name] = {m: x.seconds for m, x in res.items()}
    return MethodAgreement(top10, every, seconds)


def max_tied(em: EmpiricalModes, tie_rtol: float = 1e-2, n_modes: int = 10) -> int:
    """The most histories tied at the top x-loading among the ``n_modes`` leading modes."""
    return int(max(em.component(a, tie_rtol=tie_rtol).n_tied for a in range(min(n_modes, em.n_modes))))


def smoothing_sweep(analysis: OrderAnalysis, alphas, alpha: float, r: int, smoothing: str = "observed",
                    tie_rtol: float = 1e-2, seed: int = 0, overlap_cut: float = 0.7) -> list[dict]:
    """The paper's P at each smoothing a of ``alphas`` (a = 0 and a = ``alpha`` reuse the analysis's
    P0 and P), and the weighted M, at one order: the mean log10 c(x) of the 10 leading modes'
    histories, the most tied histories among them, the share of modes with bigram overlap at least
    ``overlap_cut``, and the overlap of the top-10 continuation subspace with M's."""
    A = analysis
    rows = []
    for a in alphas:
        Pa = A.P0 if a == 0 else (A.P if a == alpha else conditional_modes(A.counts, r, a, smoothing, seed=seed))
        rows.append({"operator": f"P, a = {a:g}", "mean log₁₀ c(x)": mean_log_count(Pa),
                     "most tied histories": max_tied(Pa, tie_rtol), "share with overlap ≥ 0.7":
                     float(np.mean(Pa.bigram_overlaps() >= overlap_cut)),
                     "continuation overlap with M": subspace_overlap(Pa.y_vectors, A.M.y_vectors, 10)})
    rows.append({"operator": "M", "mean log₁₀ c(x)": mean_log_count(A.M), "most tied histories": max_tied(A.M, tie_rtol),
                 "share with overlap ≥ 0.7": float(np.mean(A.M.bigram_overlaps() >= overlap_cut)),
                 "continuation overlap with M": 1.0})
    return rows


def overlap_rows(analyses: dict, cut: float = 0.7) -> list[dict]:
    """Per order: the median bigram overlap of the modes of M and of P, and the share at least ``cut``."""
    return [{"(k, l)": (A.k, A.l), "M: median overlap": float(np.median(A.M.bigram_overlaps())),
             "M: share ≥ 0.7": float(np.mean(A.M.bigram_overlaps() >= cut)),
             "P: median overlap": float(np.median(A.P.bigram_overlaps())),
             "P: share ≥ 0.7": float(np.mean(A.P.bigram_overlaps() >= cut))} for A in analyses.values()]


def mean_log_count(em: EmpiricalModes, n_modes: int = 10) -> float:
    """Average over the leading ``n_modes`` of Σ_x x_vector(x)² log10 c(x): the typical frequency
    (in decades) of the histories a mode's x side sits on (Euclidean-unit x vectors: U of P, ṽ of M)."""
    logc = np.log10(em.counts.x_counts)
    return float(np.mean([(em.x_vectors[:, a] ** 2) @ logc for a in range(min(n_modes, em.n_modes))]))


def random_overlap_baseline(em: EmpiricalModes, n: int = 100, seed: int = 0) -> np.ndarray:
    """Bigram overlaps of ``n`` random unit directions in the operator's coordinates (Gaussian
    x and y vectors, same shapes and x-side weights as ``em``): what chance gives."""
    rng = np.random.default_rng(seed)
    n_x, n_y = em.x_vectors.shape[0], em.y_vectors.shape[0]
    out = np.empty(n)
    for i in range(n):
        b = rng.standard_normal(n_y)
        b /= np.linalg.norm(b)
        xv = rng.standard_normal(n_x)
        xv /= np.linalg.norm(xv)
        g = xv / np.sqrt(em.x_weights)
        if g[np.argmax(np.abs(g))] < 0:
            g = -g
        _, cos = best_collective_set(g, em.x_weights)
        out[i] = np.abs(b).max() * cos
    return out


def load_token_stream(corpus: str, tokenizer: str, max_corpus_mb: float, seed: int = 0):
    """(corpus, tokenizer, token stream of the whole corpus). A 'bpe:<V>' tokenizer is trained on
    the training documents of the book's split (as in the introduction), so it is the same one."""
    options = {"max_bytes": int(max_corpus_mb * 1e6)} if corpus.startswith("hf:") else {}
    text = corpora.load_corpus(corpus, **options)
    train_idx, _ = text.split(heldout_fraction=0.1, seed=seed)
    tok = tokenization.get_tokenizer(tokenizer, corpus=text.subset(train_idx) if tokenizer.startswith("bpe:") else None)
    return text, tok, tokenization.encode_corpus(text, tok)


# ---------------------------------------------------------------------------
# 3. The statistics of §5.2 on real text, and a shuffled-corpus null model
# ---------------------------------------------------------------------------

def text_statistics(M_by_order: dict, P_sweep: EmpiricalModes, sweep_order, tie_rtol: float = 1e-2,
                    n_tie_modes: int = 10, n_mass_modes: int = 20, overlap_cut: float = 0.7) -> dict:
    """The numbers with which the book measures the paper's reading of its examples (§5.2, after
    Example 5.8), from the top modes of M at every order (``M_by_order``: (k, l) → EmpiricalModes
    of the weighted operator) and of the paper's smoothed P at the sweep order:

    ``smoothed_max_tied``  most histories tied at the top x-loading among P's ``n_tie_modes`` leading modes
    ``weighted_max_tied``  the same for M at the sweep order
    ``median_y_mass``      median over M's ``n_mass_modes`` leading modes (sweep order) of the share
                           of the y side on its dominant continuation
    ``collective_fraction`` share of all computed modes of M, pooled over the orders, whose bigram
                           overlap is at least ``overlap_cut``
    One function for the corpus and for its null (:func:`shuffled_null`), so both are measured alike."""
    sweep_order = tuple(sweep_order)
    if sweep_order not in M_by_order:
        raise ValueError(f"sweep_order {list(sweep_order)} must be one of the orders {[list(o) for o in M_by_order]}")
    M = M_by_order[sweep_order]
    overlaps = np.concatenate([E.bigram_overlaps() for E in M_by_order.values()])
    return dict(smoothed_max_tied=max_tied(P_sweep, tie_rtol, n_tie_modes), weighted_max_tied=max_tied(M, tie_rtol, n_tie_modes),
                median_y_mass=float(np.median([M.component(a, tie_rtol=tie_rtol).y_mass
                                               for a in range(min(n_mass_modes, M.n_modes))])),
                collective_fraction=float(np.mean(overlaps >= overlap_cut)))


def shuffled_null(tokens, doc_offsets, vocab_size, orders, sweep_order, n_shuffles: int, r: int = 100,
                  alpha: float = 1.0, smoothing: str = "observed", tie_rtol: float = 1e-2, seed: int = 0) -> list[dict]:
    """:func:`text_statistics` on ``n_shuffles`` shuffled copies of the corpus (:func:`shuffle_tokens`,
    seeds seed, seed+1, …), counted and thresholded exactly as the corpus (``orders``: [k, l, t]),
    with top-r modes of M at every order and of the smoothed P at the sweep order. One dict per
    shuffle; orders whose thresholded matrix is too small for r modes use min(shape) − 1."""
    if not (isinstance(n_shuffles, (int, np.integer)) and n_shuffles >= 1):
        raise ValueError(f"n_shuffles must be an integer >= 1, got {n_shuffles!r}")
    sweep_order = tuple(sweep_order)
    if sweep_order not in [tuple(o[:2]) for o in orders]:
        raise ValueError(f"sweep_order {list(sweep_order)} must be one of the orders {[list(o[:2]) for o in orders]}")
    out = []
    for i in range(int(n_shuffles)):
        shuffled = shuffle_tokens(tokens, seed + i)
        Ms, P = {}, None
        for k, l, t in orders:
            counts = count_sequences(shuffled, k, l, doc_offsets, vocab_size, t)
            rr = min(r, min(counts.shape) - 1)
            if rr < 1:
                continue
            Ms[(k, l)] = weighted_modes(counts, rr, seed=seed)
            if (k, l) == sweep_order:
                P = conditional_modes(counts, rr, alpha, smoothing, seed=seed)
        if P is None:
            raise ValueError(f"the shuffled corpus keeps too few histories at the sweep order {list(sweep_order)}")
        out.append(text_statistics(Ms, P, sweep_order, tie_rtol))
    return out


POISSON_SIDES = 3.0  # a count beyond the null is decided only beyond this many √(null count)


def count_band(null_max: int | float) -> float:
    """The spread a count statistic of the shuffled null is read with: 3 √max(1, largest null count). A count of
    independent rare events (here, histories tied at a mode's top loading) fluctuates like a Poisson variable, by
    about √count, and a handful of shuffled copies cannot measure that spread themselves."""
    return POISSON_SIDES * float(np.sqrt(max(1.0, float(null_max))))


def count_margin_undecided(margin: int | float, null_max: int | float) -> str | None:
    """Why a count's margin over the shuffled null (corpus − largest null value) decides nothing, or None where it
    does: a margin of at least 1 but under :func:`count_band` of the null is within the null's own spread. A margin
    of 0 or less is decided (the corpus does not exceed the null), and so is one beyond the band."""
    band = count_band(null_max)
    if 1 <= margin < band:
        return (f"the corpus exceeds the shuffled null by {margin:g}, within its Poisson spread "
                f"3√max(1, {null_max:g}) = {band:.1f}")
    return None


# ---------------------------------------------------------------------------
# What the chapter costs
# ---------------------------------------------------------------------------

BYTES_PER_TOKEN = 3.0         # corpus bytes per token: fewer than GPT-NeoX's ~4 on English, so more tokens
COUNT_BYTES_PER_TOKEN = 96    # counting's peak per corpus token (traced at 10^6 tokens: 31 to 82, V = 2048 and 50304)


DEFAULT_CORPUS_MB = 16.0      # the offline default corpus, at most (lib.text.corpus: the pinned environment's docs)


def corpus_tokens(values: dict) -> int:
    """Tokens of the corpus a run reads, at most, at :data:`BYTES_PER_TOKEN`: ``max_corpus_mb`` of a
    streamed corpus, the offline default's :data:`DEFAULT_CORPUS_MB`, a local file or folder's size."""
    corpus = values["corpus"]
    if corpus.startswith("hf:"):
        mb = values["max_corpus_mb"]
    elif corpus == "default":
        mb = DEFAULT_CORPUS_MB
    else:
        path = Path(corpus)
        files = [path] if path.is_file() else list(path.rglob("*")) if path.is_dir() else []
        mb = sum(f.stat().st_size for f in files if f.is_file()) / 1e6
    return int(mb * 1e6 / BYTES_PER_TOKEN)


def counting_cost(n_tokens: int, k: int, l: int, vocab_size: int = 50304) -> tuple[float, float]:
    """(peak bytes, operations) of :func:`count_sequences` on ``n_tokens`` tokens: the windows' int64
    codes, their sort and the sparse table, :data:`COUNT_BYTES_PER_TOKEN` bytes a token, plus the dense
    table of continuations (a bool and an int64 rank per code) that ``lib.text.ngrams`` uses when V^l is
    at most max(4n, 2^24); and a sort of n windows of k + l tokens (n·log₂n·(k + l) comparisons)."""
    dense = float(vocab_size) ** l <= max(4 * n_tokens + 1024, 2 ** 24)
    peak = COUNT_BYTES_PER_TOKEN * n_tokens + (9.0 * vocab_size ** l if dense else 0.0)
    return float(peak), float(n_tokens * max(1.0, np.log2(max(n_tokens, 2))) * (k + l))


def components_cost(n_tokens: int, min_count: int, r: int, n_iter: int = 7, n_oversamples: int = 10,
                    vocab_size: int = 50304, k: int = 1, l: int = 1) -> tuple[float, float]:
    """(peak bytes, FLOPs) of the top-r components of P, P (a = 0) and M at one order
    (:func:`analyse_order`) from a corpus of ``n_tokens``: at most min(V^k, n/t) histories reach the
    threshold t, as many continuations (min(V^l, n/t): they are thresholded alike) and n non-zeros. Three sparse matrices (values, indices, their
    transposes: 24 bytes a non-zero each), and the randomized SVD's blocks of (rows + columns) × (r + p)
    float64 (three at once: the block, its product, the QR's workspace). FLOPs: 2·(n_iter + 1) products with the matrix and its transpose,
    2·nnz·(r + p) each, and as many QRs, 4·(rows + cols)·(r + p)², for each of the three matrices."""
    rows, cols = min(float(vocab_size) ** k, n_tokens / min_count), min(float(vocab_size) ** l, n_tokens / min_count)
    nnz = min(float(n_tokens), rows * cols)
    ell = r + n_oversamples
    peak = 3 * 24 * nnz + 8 * 3 * (rows + cols) * ell
    flops = 3 * (n_iter + 1) * 2 * (2 * 2 * nnz * ell + 4 * (rows + cols) * ell ** 2)
    return float(peak), float(flops)


def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for its resolved parameters ``values``: the corpus's token stream,
    counting each (k, l) of ``orders`` (peak at the costliest), and the components of every order
    (peak at the largest), once for the corpus and once per shuffled copy."""
    from .substrate import tokenizer_vocab_size  # deferred: lib.substrate imports torch

    n = corpus_tokens(values)
    vocab = tokenizer_vocab_size(values["tokenizer"])
    orders = [tuple(o) for o in values["orders"]]
    copies = 1 + values["null_shuffles"]
    k, l = max(orders, key=lambda o: counting_cost(n, o[0], o[1], vocab)[0])[:2]
    count_bytes = max(counting_cost(n, a, b, vocab)[0] for a, b, _ in orders)
    count_ops = copies * sum(counting_cost(n, a, b, vocab)[1] for a, b, _ in orders)
    costs = {o: components_cost(n, o[2], values["n_components"], vocab_size=vocab, k=o[0], l=o[1]) for o in orders}
    ck, cl, t = max(orders, key=lambda o: costs[o][0])
    svd_bytes, svd_flops = costs[ck, cl, t][0], copies * sum(f for _, f in costs.values())
    return [
        HeavyStep("counting the corpus's windows", f"{n:.3g} tokens at most, peak at (k, l) = ({k}, {l}), "
                  f"{len(values['orders'])} orders × {copies} copies",
                  count_bytes + 8.0 * n, count_ops, "max_corpus_mb", host=True),
        HeavyStep("top components of P and M", f"r = {values['n_components']} at (k, l) = ({ck}, {cl}), "
                  f"threshold {t}, at most {min(vocab ** ck, n / t):.3g} histories", svd_bytes, svd_flops,
                  "max_corpus_mb or n_components", host=True),
    ]
