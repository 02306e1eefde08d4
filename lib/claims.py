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
    # --- ISAN learning (Golowich, Liu & Shetty 2025, §4 and Appendix C) ---------------------
    Claim("isan.thm43-isan-low-rank", "isan",
          "A random time-varying ISAN of hidden dimension d has mean-centred logit matrices "
          "L(Σ^t, Σ^{≤T−1−t}) of rank at most d at every t, and exactly min(d, #rows, (|Σ|−1)·#futures) "
          "(so exactly d wherever the matrix is large enough): number of (model, t) mismatches.",
          "Golowich et al., Theorem 4.3 (⇒, Fact C.4)", "thm43_rank_mismatches", equals(0),
          "rank ≤ d for every t"),
    Claim("isan.thm43-low-rank-isan", "isan",
          "From logit queries alone, a model of logit rank d is rebuilt as a time-varying ISAN of hidden "
          "dimension d with the same distribution on Σ^T (largest TV over the test models).",
          "Golowich et al., Theorem 4.3 (⇐, Lemma C.3)", "thm43_rebuild_max_tv", at_most(1e-10),
          "same distribution (TV 0)"),
    Claim("isan.remark1", "isan",
          "With normalised logits (log-probabilities) instead of mean-centred ones, the logit matrix of "
          "every test ISAN has rank above d at some t (smallest excess over the test models).",
          "Golowich et al., Remark 1", "remark1_min_rank_excess", at_least(1)),
    Claim("isan.fact-c2", "isan",
          "A time-varying ISAN of dimension d is a time-invariant ISAN of dimension T·d with the same "
          "distribution on Σ^T (largest TV over the test models).",
          "Golowich et al., Fact C.2", "fact_c2_max_tv", at_most(1e-12), "same distribution, dim Td"),
    Claim("isan.fact-c7", "isan",
          "A random selective linear-in-state SSM (nonlinear gates A(u), B(u), C(u), D(u)) is reproduced "
          "by an ISAN of hidden dimension d + 2q + 1: TV to a literal simulation of the SSM.",
          "Golowich et al., Fact C.7", "ssm_tv", at_most(1e-10), "exact, dim d + 2q + 1"),
    Claim("isan.fact-c9", "isan",
          "The (n+1)-dimensional copying ISAN comes arbitrarily close to the n-bit copying distribution: "
          "largest TV over the n tested at C = 40.",
          "Golowich et al., Fact C.9", "copying_tv_large_c", at_most(1e-6), "arbitrarily close in TV"),
    Claim("isan.fact-c9-rate", "isan",
          "The copying ISAN's TV never exceeds n·e^(−C/2) (each copy step errs with probability "
          "1/(1+e^(C/2))): largest excess of TV over the bound, over all (n, C) tested.",
          "Golowich et al., Fact C.9 (proof, our bound)", "copying_max_excess_over_bound", at_most(1e-12)),
    Claim("isan.fact-c11", "isan",
          "A noisy parity over {0,1}^(n+1) is generated exactly by a time-varying ISAN of hidden "
          "dimension 2 (largest TV to Def. C.10 over the parities tested).",
          "Golowich et al., Fact C.11", "parity_max_tv", at_most(1e-12), "exact, dim 2"),
    Claim("isan.fact-c11-rank", "isan",
          "The logit matrices of a noisy parity have rank at most 2 at every t (largest rank found).",
          "Golowich et al., Fact C.11 (proof)", "parity_max_logit_rank", at_most(2), "≤ 2"),
    Claim("isan.parity-dim-one", "isan",
          "Beyond the paper: with |Σ| = 2 and mean-centred logits the two parity rows are negatives of "
          "each other, so the logit rank is 1 and Lemma C.3 rebuilds the noisy parity exactly with hidden "
          "dimension 1 (largest TV).",
          "This book (sharpens Fact C.11)", "parity_dim1_max_tv", at_most(1e-10)),
    Claim("isan.thm44-grid", "isan",
          "The logit-query learner returns M' with E[TV(M, M')] ≤ ε at every point of the grid d × |Σ| × T × ε "
          "on random ISANs (largest mean TV / ε over the grid).",
          "Golowich et al., Theorem 4.4", "grid_max_tv_over_eps", at_most(1.0), "E[TV] ≤ ε"),
    Claim("isan.thm44-rare", "isan",
          "On a model whose second direction hides behind a first token of probability δ, E[TV] stays "
          "≤ ε for every δ and ε tried (largest mean TV / ε); here the sampled rank tests matter.",
          "Golowich et al., Theorem 4.4 and Lemma C.17", "rare_max_tv_over_eps", at_most(1.0), "E[TV] ≤ ε"),
    Claim("isan.thm44-queries", "isan",
          "The learner's queries are polynomial, not exhaustive: at the longest horizon (|Σ| = 3, d = 4, "
          "ε = 0.2) it queries under 5% of the prefixes Σ^{≤T−1}.",
          "Golowich et al., Theorem 4.4 (poly(d, |Σ|, T, 1/ε) queries)", "horizon_query_fraction",
          at_most(0.05), "poly(d, |Σ|, T, 1/ε)"),
    Claim("isan.learner-time", "isan",
          "The learner on a random ISAN with d = 8, |Σ| = 4, T = 10, ε = 0.05 finishes in under a minute "
          "on the chapter's machine (wall seconds, oracle included).",
          "Issue 5 (performance)", "learner_seconds_d8_s4_t10", at_most(60.0)),
    Claim("isan.c13-samples-exponential", "isan",
          "Learning a noisy parity from samples by counting (the empirical distribution, maximum "
          "likelihood over all distributions) needs a sample count that doubles with every bit: fitted "
          "slope of log2(samples to reach mean TV ≤ 0.1) against n.",
          "Golowich et al., Theorem C.13 (illustration at small n)", "empirical_samples_log2_slope",
          between(0.8, 1.2)),
    Claim("isan.c13-queries-exact", "isan",
          "The logit-query learner learns every tested noisy parity exactly (largest TV).",
          "Golowich et al., Theorem 4.4 with Fact C.11", "parity_query_max_tv", at_most(1e-9)),
    Claim("isan.approx-exact", "isan",
          "Beyond the paper: on rank-d ISANs perturbed by η (true rank d + k), the learner with a rank "
          "tolerance far below η recovers the perturbed model exactly (largest TV over η).",
          "This book", "approx_small_tol_max_tv", at_most(1e-9)),
    Claim("isan.approx-gap", "isan",
          "Beyond the paper: with the rank tolerance in the spectral gap, the learner returns a rank-d model "
          "whose TV to the perturbed model is within 3× that of the unperturbed rank-d ISAN (largest ratio "
          "over η).",
          "This book", "approx_gap_tv_ratio", at_most(3.0)),
    # --- Hilbert space (Chen & Murfet §3–4.2, Remark 4.12, Lemma 4.15) -----------------------
    Claim("hilbert.language-condition", "hilbert",
          "Each synthetic exact source of the chapter (Markov chain, HMM, mixture, chain with a non-stationary "
          "start) is a language: summing A_{n+1} over its last position gives A_n (largest deviation, n < N).",
          "Chen & Murfet, Def. 3.2", "language_condition_max_violation", at_most(1e-12)),
    Claim("hilbert.window-frequencies-not-language", "hilbert",
          "The window frequencies of one finite text are not exactly a language: the deviation from Def. 3.2 "
          "is positive and at most 1/(T − n) for a text of T tokens (recorded: deviation × (T − n), worst n).",
          "This book (Def. 3.2 on finite text)", "window_violation_scaled", between(1e-3, 1.0)),
    Claim("hilbert.orthonormal-basis", "hilbert",
          "The vectors √q(x) e_x are an orthonormal basis of V_k (largest entry of Gram − I).",
          "Chen & Murfet, Remark 4.3", "remark_4_3_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-5", "hilbert",
          "Parseval in V_k: ⟨a, b⟩_V = Σ_x q(x) ⟨a, e_x⟩_V ⟨b, e_x⟩_V for random a, b (relative error).",
          "Chen & Murfet, Lemma 4.5 (our reading)", "lemma_4_5_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-6", "hilbert",
          "Inverting the isomorphism v ↦ ⟨v, ·⟩_V sends a functional φ to Σ_x q(x) φ(e_x) e_x (largest error "
          "over random functionals).",
          "Chen & Murfet, Lemma 4.6", "lemma_4_6_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-7", "hilbert",
          "The composite tensor → linear map → function sends e_x ⊗ e_y to the function x' ↦ δ_{xx'} e_y / q(x) "
          "(largest relative error over all word tensors).",
          "Chen & Murfet, Lemma 4.7", "lemma_4_7_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-8", "hilbert",
          "The fundamental tensor A_{k+l} corresponds to the conditional x ↦ q(·|x), computed independently as "
          "A_{k+l}/A_k (largest error over the chapter's languages).",
          "Chen & Murfet, Lemma 4.8", "lemma_4_8_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-15", "hilbert",
          "Pairing an observable with a conditional in H_{k,l} is an expectation: ⟨O, p⟩_H = E_{x~q, y~p(·|x)} O "
          "for the data and for a model (largest error of the exact identity).",
          "Chen & Murfet, Lemma 4.15", "lemma_4_15_error", at_most(1e-12)),
    Claim("hilbert.lemma-4-15-sampled", "hilbert",
          "The same pairing agrees with a Monte-Carlo average over pairs sampled from the language "
          "(largest |difference| in standard errors).",
          "Chen & Murfet, Lemma 4.15", "lemma_4_15_z", at_most(5.0)),
    Claim("hilbert.perron-frobenius", "hilbert",
          "For k = l the matrix of q(y|x) is column-stochastic, and for a stationary source its Perron–Frobenius "
          "vector is the marginal q(x) (largest deviation over the stationary languages).",
          "Chen & Murfet, Remark 4.12", "perron_vector_error", at_most(1e-12)),
    # --- Modes (Chen & Murfet §4.3–4.5, §5.1) ------------------------------------------------
    Claim("modes.language-condition", "modes",
          "Every language whose modes the chapter computes, the corpus-derived one included, passes the "
          "language condition for the last and for the first position (stationary sources).",
          "Chen & Murfet, Def. 3.2", "modes_language_max_violation", at_most(1e-12)),
    Claim("modes.planted-sigma", "modes",
          "A planted absolute bigram gives a singular value √q(x) and a collective one √q(S), with u = e_y and "
          "ṽ ∝ √q on S (largest error in σ, u or ṽ over the planted bigrams and (k, l); vectors compared as "
          "subspaces where planted probabilities coincide).",
          "Chen & Murfet, Lemmas 5.2 and 5.6", "planted_sigma_max_error", at_most(1e-10),
          "σ = √q(x) (absolute), √q(S) (collective)"),
    Claim("modes.planted-readback", "modes",
          "The planted probabilities chosen in the parameters are read back off the spectrum as σ² "
          "(largest |σ² − chosen q(S)|).",
          "Chen & Murfet, Lemmas 5.2 and 5.6", "planted_readback_max_error", at_most(1e-10)),
    Claim("modes.top-sigma-bounds", "modes",
          "Beyond the paper: the largest singular value lies between ‖q(y)‖₂ and √max_y q(y) (largest violation "
          "over the chapter's languages and (k, l)).",
          "This book (Cauchy–Schwarz)", "top_sigma_bound_violation", at_most(1e-12)),
    Claim("modes.lemma-4-10", "modes",
          "Propensities summed over all modes give the conditional: Σ_α ρ_α(y|x) = q(y|x) (largest error).",
          "Chen & Murfet, Lemma 4.10", "lemma_4_10_max_error", at_most(1e-10)),
    Claim("modes.lemma-4-14", "modes",
          "The mode basis e_{αβ} is orthonormal in H_{k,l} (largest entry of its Gram matrix minus the identity).",
          "Chen & Murfet, Lemma 4.14", "lemma_4_14_max_error", at_most(1e-10)),
    Claim("modes.eq-41", "modes",
          "The coordinates of q(·|·) in the mode basis are ⟨q, e_{αβ}⟩_H = σ_α δ_{αβ} (largest error).",
          "Chen & Murfet, eq. (41)", "eq_41_max_error", at_most(1e-12)),
    Claim("modes.effective-full-rank", "modes",
          "At full rank the effective true distribution is the true conditional: q^(χ) = q for χ = rank "
          "(largest |q^(rank) − q| over the truncated languages).",
          "Chen & Murfet, Def. 4.16 (with the book's Choice)", "effective_full_rank_error", at_most(1e-8)),
    Claim("modes.kl-monotone", "modes",
          "KL(q ‖ q^(χ)) does not increase with χ, since P_χ ⊂ P_{χ+1} (largest increase from χ to χ + 1).",
          "Chen & Murfet, Def. 4.16 (with the book's Choice)", "kl_max_increase", at_most(1e-10)),
    Claim("modes.chi0-mutual-information", "modes",
          "Beyond the paper: with the constant feature of the Choice, q^(0) is the marginal q(y), so "
          "KL(q ‖ q^(0)) is the mutual information I(X; Y) (largest |difference|).",
          "This book (MATH.md §4 Choice)", "chi0_mi_error", at_most(1e-9)),
    Claim("modes.naive-negative", "modes",
          "The naive truncation Σ_{α<χ} ρ_α is not a distribution in general: on the corpus language it puts "
          "negative mass on some continuations (largest negative mass over χ).",
          "Chen & Murfet, Remark 4.18", "naive_max_negative_mass", at_least(1e-4)),
    Claim("modes.sigma-monotone-in-k", "modes",
          "Beyond the paper: for a stationary source every singular value of C_{k,l} is at most the same-index "
          "singular value of C_{k+1,l} (largest σ^(k) − σ^(k+1) over the languages, k and α).",
          "This book (Remark 5.12 left open)", "sigma_k_max_drop", at_most(1e-12)),
    Claim("modes.markov-inheritance", "modes",
          "Beyond the paper: once k reaches the Markov order of the corpus language, the modes at (k+1, l) are "
          "those at (k, l), lifted: largest principal angle between the top-r left and lifted right singular "
          "subspaces, and largest |Δσ|.",
          "This book (Remark 5.12 left open)", "markov_inheritance_max_angle", at_most(1e-8)),
    # --- Examples (Chen & Murfet §5, Appendices B–C) ----------------------------------------------
    Claim("examples.lemma-5-2", "examples",
          "An absolute bigram (x, y) is a mode: (√q(x), e_y, e_x) satisfies both singular-triple equations of M, "
          "√q(x) is in the computed spectrum and e_y, e_x lie in its singular subspaces (largest error over the "
          "planted absolute bigrams of random languages and (k, l)).",
          "Chen & Murfet, Lemma 5.2", "absolute_max_error", at_most(1e-10), "exact"),
    Claim("examples.lemma-5-6", "examples",
          "A collective bigram (S, y) is a mode: (√q(S), e_y, ṽ_S) with ṽ_S ∝ √q(x) on S is a singular triple of M "
          "(largest error in σ, vectors and defining equations over the planted collective bigrams).",
          "Chen & Murfet, Lemma 5.6", "collective_max_error", at_most(1e-10), "exact"),
    Claim("examples.remark-5-3", "examples",
          "The propensity of a bigram's own mode is 1 on the pairs (x, y), x ∈ S, and 0 on every other pair "
          "(largest deviation over the planted bigrams).",
          "Chen & Murfet, Remark 5.3", "own_propensity_max_error", at_most(1e-10), "ρ = 1 on the bigram, 0 elsewhere"),
    Claim("examples.lemma-5-4", "examples",
          "No other mode carries any of a bigram's prediction: every other mode has propensity 0 from the histories "
          "of S and towards y (our reading of the lost statement; largest |ρ| over other modes).",
          "Chen & Murfet, Lemma 5.4 (reconstructed)", "other_propensity_max", at_most(1e-10), "exact"),
    Claim("examples.perturbation-sigma", "examples",
          "When a planted bigram only nearly holds (noise η), perturbation theory predicts σ(η) with error O(η²) at "
          "first order and O(η³) at second order: largest |fitted order − predicted order| over the planted modes, "
          "fitted for η ≤ min(10⁻², η_×/20) with η_× the mode's first-order crossing.",
          "This book (perturbation theory of §5.1)", "perturbation_sigma_order_deviation", at_most(0.1)),
    Claim("examples.perturbation-vectors", "examples",
          "The first-order singular vectors of a nearly-held bigram are off by O(η²): largest |fitted order − 2| "
          "over the planted modes, η ≤ min(10⁻², η_×/20).",
          "This book (perturbation theory of §5.1)", "perturbation_vector_order_deviation", at_most(0.1)),
    Claim("examples.wedin", "examples",
          "The rotation of a planted mode under noise never exceeds Wedin's sin θ bound (largest measured/bound "
          "over all planted modes and noise levels).",
          "Wedin (1972); this book", "wedin_max_ratio", at_most(1.0)),
    Claim("examples.svd-agreement", "examples",
          "Randomized SVD and Lanczos agree on the leading singular values of the chapter's largest matrices (P "
          "and M; largest relative difference of the top 10).",
          "Chen & Murfet, App. B (method)", "svd_agreement_top10", at_most(1e-8), "either method may be used"),
    Claim("examples.real-ties", "examples",
          "On real text many histories share the top loading of a leading mode (largest number of histories tied "
          "at the top x-loading among the 10 leading modes of M at the sweep order).",
          "Chen & Murfet, §5.2 (after Example 5.8)", "weighted_max_tied", at_least(10),
          "a large number of sequences with the same largest loading"),
    Claim("examples.real-dominant-continuation", "examples",
          "A leading mode on real text has one dominant continuation (median share of the y-side's squared norm "
          "on its top continuation, over the 20 leading modes of M at the sweep order).",
          "Chen & Murfet, §5.2 (after Example 5.8)", "weighted_median_y_mass", at_least(0.5),
          "a clear dominating token sequence"),
    Claim("examples.real-collective-fraction", "examples",
          "Many modes of real text are perturbed collective bigrams: share of the top modes of M, pooled over the "
          "chapter's (k, l), whose bigram overlap is at least 0.7 (random directions: ≈ 0).",
          "Chen & Murfet, §5.2 (reading of Examples 5.7–5.11)", "collective_fraction", at_least(0.2),
          "\"some perturbation of the collective bigrams\""),
    Claim("examples.smoothing-ties", "examples",
          "Beyond the paper: Laplace smoothing with a = 1 removes the exact ties from P's leading modes (ratio of "
          "the largest tie count at a = 1 to that at a = 0, sweep order).",
          "This book (App. B eq. 78)", "smoothing_tie_ratio", at_most(0.1)),
    Claim("examples.weighted-frequency", "examples",
          "Beyond the paper: the weighted M puts its leading modes on more frequent histories than the unsmoothed P "
          "(smallest gap, in decades of count, over the chapter's (k, l)).",
          "This book (MATH.md §3 vs App. B)", "weighted_log_count_gap", at_least(0.3)),
    # --- end of registry: chapters add their claims above this line, grouped by chapter ---
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
