"""The experiments of the chapter "Modes", each a function returning a result object.

The mathematics lives in :mod:`lib.modes` (modes, propensities, the mode basis, the effective
distribution), :mod:`lib.linalg` (principal angles) and :mod:`lib.languages` (the exact languages). This module runs
it over the chapter's languages and orders (k, l) and gathers what the chapter records, draws and
tabulates, so that each chapter cell is a call, a few records and a table or a figure:

* :func:`planted_readback` — planted bigrams are modes with σ = √q(S) (Lemmas 5.2, 5.6);
* :func:`identity_checks`, :func:`adjoint_checks` — the identities of §4.3–4.4 (Lemma 4.10,
  Lemma 4.14, eq. 41, Parseval) and of Remark 4.11 on every (language, (k, l));
* :func:`literal_family_study` — whether the paper's literal truncation span{e_αβ : α < χ}
  contains any conditional distribution;
* :func:`truncation_study` — the effective true distribution q^(χ) (Def. 4.16, the book's
  Choice) against the naive truncation (Remark 4.18);
* :func:`simultaneous_truncation_study` — whether truncating each (k, l) on its own keeps the
  language condition (Remark 4.19);
* :func:`history_ladder` — modes at history length k against k + 1 (beyond the paper; Remark 5.12).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .book.costs import HeavyStep
from .book.device import torch_threads
from .book.tables import Raw
from .languages import plant_bigrams, reduce_vocabulary
from .mode_comparisons import compare_history_lengths, planted_mode_errors, truncated_family
from .modes import Modes
from .ntp_experiments import REAL_SHAPES, check_real_model, real_models, real_tokenizer

MODE_BASIS_MAX_ENTRIES = 2 * 10 ** 7  # the mode basis's Gram matrix has (|Σ^k||Σ^l|)^2 entries: checked up to this
NUMERICAL_ZERO = 1e-9  # a KL difference or a truncation's move counts when above this (the solver's accuracy)


def case_label(name: str, kl) -> str:
    """'corpus (2, 1)': a language and its (k, l)."""
    return f"{name} ({kl[0]}, {kl[1]})"


# --- errors of several identities over several cases --------------------------------------------

@dataclass
class CaseErrors:
    """Errors of identities (0 in exact arithmetic) over cases: ``errors[case][identity]``.
    An identity may be missing from a case where it was not checked."""

    errors: dict = field(default_factory=dict)

    def cases(self, identity: str) -> list[str]:
        return [case for case, errs in self.errors.items() if errs.get(identity) is not None]

    def largest(self, identity: str) -> float:
        """The largest error of ``identity`` over the cases that check it."""
        return max(float(self.errors[case][identity]) for case in self.cases(identity))

    def worst_case(self, identity: str) -> str:
        return max(self.cases(identity), key=lambda case: float(self.errors[case][identity]))

    def largest_overall(self) -> float:
        return max(float(v) for errs in self.errors.values() for v in errs.values() if v is not None)

    def summary(self, identities: dict) -> list[dict]:
        """One row per identity (``identities``: key → what it says): the cases checked, the largest
        error and the case where it occurs."""
        return [{"identity": what, "cases": len(self.cases(key)), "largest error": self.largest(key),
                 "where": self.worst_case(key)} for key, what in identities.items() if self.cases(key)]


IDENTITIES = {"reconstruction": Raw(r"$\sum_\alpha\sigma_\alpha u_\alpha\tilde v_\alpha^{\mathsf T}=M$ (the SVD)"),
              "orthonormal_u": Raw(r"$U^{\mathsf T}U=I$"),
              "orthonormal_v": Raw(r"$\langle v_\alpha,v_\beta\rangle_V=\delta_{\alpha\beta}$"),
              "lemma_4_10": Raw(r"Lemma 4.10: $\sum_\alpha\rho_\alpha(y\mid x)=q(y\mid x)$"),
              "parseval": Raw(r"Parseval: $\sum_\alpha\sigma_\alpha^2=\lVert q\rVert_H^2$"),
              "lemma_4_14": Raw(r"Lemma 4.14: $e_{\alpha\beta}$ orthonormal"),
              "eq_41": Raw(r"eq. (41): $\langle q,e_{\alpha\beta}\rangle_H=\sigma_\alpha\delta_{\alpha\beta}$")}
ADJOINT = {"adjoint": Raw(r"$\langle Ca,b\rangle=\langle a,C^\dagger b\rangle_V$ (relative)"),
           "gram": Raw(r"$CC^\dagger=MM^{\mathsf T}$ (relative to $\sigma_0^2$)"),
           "triples": Raw(r"$Cv_\alpha=\sigma_\alpha u_\alpha$, $C^\dagger u_\alpha=\sigma_\alpha v_\alpha$")}


def identity_checks(modes: dict) -> tuple[CaseErrors, dict]:
    """:meth:`lib.modes.Modes.identity_errors` on every ``modes[(name, (k, l))]``, the mode basis
    wherever its Gram matrix has at most ``MODE_BASIS_MAX_ENTRIES`` entries. Returns the errors
    and, per case, the number of histories Lemma 4.10 was checked on."""
    errors, histories = CaseErrors(), {}
    for (name, kl), m in modes.items():
        small = (m.shape[0] * m.shape[1]) ** 2 <= MODE_BASIS_MAX_ENTRIES
        errs = m.identity_errors(mode_basis=small)
        histories[case_label(name, kl)] = errs.pop("lemma_4_10_histories")
        errors.errors[case_label(name, kl)] = errs
    return errors, histories


def adjoint_checks(modes: dict, seed: int) -> CaseErrors:
    """:meth:`lib.modes.Modes.adjoint_errors` (Remark 4.11) on every ``modes[(name, (k, l))]``."""
    return CaseErrors({case_label(name, kl): m.adjoint_errors(rng=seed) for (name, kl), m in modes.items()})


# --- planted bigrams ---------------------------------------------------------------------------

@dataclass
class PlantedReadback:
    """:func:`planted_readback`: the largest error of a planted triple (σ, u or ṽ; ``max_error``),
    the largest |σ² − chosen q(S)| (``max_readback_error``), and the table's rows at one (k, l)."""

    max_error: float
    max_readback_error: float
    rows: list


def planted_readback(pairs, alphabet_size: int, absolute, collective, seed: int, table_order=(2, 1)) -> PlantedReadback:
    """Plant absolute and collective bigrams of chosen probabilities q(S) on a random background
    chain (``lib.languages.plant_bigrams``) at every (k, l) of ``pairs``, and find each in the
    computed spectrum (``lib.mode_comparisons.planted_mode_errors``): σ = √q(S), u = e_y, ṽ ∝ √q on S
    (Lemmas 5.2, 5.6). The background is drawn from ``seed`` at every (k, l)."""
    chosen = [[p] for p in absolute] + [list(g) for g in collective]
    errors, readback, rows = [], [], []
    for kl in pairs:
        lang = plant_bigrams(*kl, alphabet_size, absolute=absolute, collective=collective, rng=seed)
        m = Modes.from_joint(lang.joint(*kl), zero_rows="drop")
        found = planted_mode_errors(m, lang.predicted_modes())
        errors += [max(f["sigma_error"], f["u_error"], f["v_error"], f["pair_error"]) for f in found]
        readback += [abs(m.sigma[f["index"]] ** 2 - sum(c)) for f, c in zip(found, chosen)]
        if tuple(kl) == tuple(table_order):
            rows = [{"bigram": f["kind"], "chosen q(S)": sum(c), "mode α": f["index"] + 1,
                     "σ": m.sigma[f["index"]], "σ²": m.sigma[f["index"]] ** 2, "|σ − √q(S)|": f["sigma_error"]}
                    for f, c in zip(found, chosen)]
    return PlantedReadback(max(errors), max(readback), rows)


# --- truncation ----------------------------------------------------------------------------------

@dataclass
class LiteralFamilyStudy:
    """:func:`literal_family_study`: per (language, (k, l)) the cutoffs 0 < χ < rank at which the
    literal family is empty (``rows``), their total (``empty_cutoffs`` of ``total_cutoffs``), and
    the largest difference between the two computations of the distance (``max_gap``)."""

    rows: list
    empty_cutoffs: int
    total_cutoffs: int
    max_gap: float


def literal_family_study(modes: dict) -> LiteralFamilyStudy:
    """:meth:`lib.modes.Modes.literal_family_distance` at every intermediate cutoff of every case: the
    L²(q) distance of the constant function from the span of the top-χ features, by projection and
    from the coordinates σ_α⟨u_α, 1⟩; the literal family holds a conditional only where it is 0."""
    rows, gap = [], 0.0
    for (name, kl), m in modes.items():
        d = [m.literal_family_distance(c) for c in range(1, m.rank)]
        gap = max([gap] + [abs(e["projection"] - e["spectral"]) for e in d])
        rows.append({"language": name, "(k, l)": kl, "rank": m.rank, "cutoffs": len(d),
                     "literal family empty": sum(e["empty"] for e in d),
                     "distance at χ = 1": d[0]["projection"] if d else None})
    return LiteralFamilyStudy(rows, sum(r["literal family empty"] for r in rows), sum(r["cutoffs"] for r in rows), gap)


@dataclass
class TruncationStudy:
    """:func:`truncation_study` over named joints: the truncation curves (``curves[name]``) and what
    the chapter reads off them (see the fields)."""

    curves: dict
    full_rank_error: float        # max |q^(rank) − q|
    kl_max_increase: float        # max over χ of KL(q‖q^(χ+1)) − KL(q‖q^(χ))
    chi0_mi_error: float          # max |KL(q‖q^(0)) − I(X;Y)|
    max_suboptimality: float      # the solver's certified bound: max of λ²/2 + duality gap
    max_kkt: float
    all_optimal: bool
    exact_one_early: int          # joints where q^(χ) = q already at χ = rank − 1
    naive_below: int              # cutoffs where the clipped naive truncation's KL is lower by > 1e-9
    naive_above: int              # ... higher by > 1e-9 (infinite included)
    cutoffs: int
    rows: list

    def infinite(self, name: str) -> int:
        """Cutoffs of joint ``name`` at which the clipped naive truncation has infinite KL."""
        return int(np.isinf(self.curves[name].kl_naive).sum())


def truncation_study(truncated: dict) -> TruncationStudy:
    """The effective true distribution q^(χ) (Def. 4.16 with the book's Choice; ``Modes.effective``)
    and the clipped naive truncation (Remark 4.18) at every cutoff of each ``truncated[name]``."""
    curves = {name: m.truncation_curve() for name, m in truncated.items()}
    infos = [i for c in curves.values() for i in c.infos]
    below = {name: int(np.sum(c.kl_naive < c.kl_effective - NUMERICAL_ZERO)) for name, c in curves.items()}
    rows = [{"joint": name, "rank": c.rank, "first χ with q^(χ) = q": c.first_exact(),
             "I(X;Y) (nats)": truncated[name].mutual_information(), "χ with naive KL = ∞": int(np.isinf(c.kl_naive).sum()),
             "χ with naive KL lower": below[name], "max negative mass": c.negative_mass.max()}
            for name, c in curves.items()]
    return TruncationStudy(
        curves,
        full_rank_error=max(float(np.abs(m.effective(m.rank) - m.conditional).max()) for m in truncated.values()),
        kl_max_increase=max(c.max_increase for c in curves.values()),
        chi0_mi_error=max(abs(c.kl_effective[0] - truncated[name].mutual_information()) for name, c in curves.items()),
        max_suboptimality=max(i.newton_decrement ** 2 / 2 + i.duality_gap for i in infos),
        max_kkt=max(i.kkt_residual for i in infos), all_optimal=all(i.status == "optimal" for i in infos),
        exact_one_early=sum(c.first_exact() == c.rank - 1 for c in curves.values()),
        naive_below=sum(below.values()),
        naive_above=int(sum(np.sum(c.kl_naive > c.kl_effective + NUMERICAL_ZERO) for c in curves.values())),
        cutoffs=int(sum(len(c.chis) for c in curves.values())), rows=rows)


LAST_POSITION = Raw(r"$\sum_{\rm last}\tilde A_3-\tilde A_2$")  # a column of the simultaneous-truncation table


@dataclass
class SimultaneousTruncation:
    """:func:`simultaneous_truncation_study`: one row per (language, χ) and, over the rows where the
    truncation moved the joints, the largest ratio of the language-condition defect to that move
    (``worst_ratio``); over the rows where it moved nothing, the largest defect (``control``)."""

    rows: list
    worst_ratio: float
    control: float

    def smallest_defect(self, language: str) -> float | None:
        """The smallest defect (violation of Def. 3.2 or disagreement) of ``language`` over the cutoffs
        that truncate something; None if none does."""
        defects = [max(r[LAST_POSITION], r["Ã₃ from (1, 2) − from (2, 1)"]) for r in self.rows
                   if r["language"] == language and r["|Ã − A|"] > NUMERICAL_ZERO]
        return min(defects) if defects else None


def simultaneous_truncation_study(languages: dict, chis, orders) -> SimultaneousTruncation:
    """``lib.mode_comparisons.truncated_family`` of each ``languages[name]`` at each cutoff: are the separately
    truncated joints Ã_{k+l}(xy) = q(x) q^(χ)(y|x) of ``orders`` still a language (Remark 4.19)?"""
    rows, worst, control = [], 0.0, 0.0
    for name, language in languages.items():
        for chi in chis:
            tf = truncated_family(language, chi, orders)
            if tf.truncation_size > NUMERICAL_ZERO:
                worst = max(worst, tf.max_violation / tf.truncation_size)
            else:
                control = max(control, tf.max_violation)
            rows.append({"language": name, "χ": chi, "χ solved per (k, l)": list(tf.chi_used.values()),
                         LAST_POSITION: max(tf.language_violation.values()),
                         "Ã₃ from (1, 2) − from (2, 1)": max(tf.agreement.values()),
                         "|Ã − A|": tf.truncation_size})
    return SimultaneousTruncation(rows, worst, control)


# --- modes across history lengths ------------------------------------------------------------------

@dataclass
class HistoryLadder:
    """:func:`history_ladder`: the modes of each language at k = 1, …, K (``ladder[name]``) and the
    comparison of each step k → k + 1 (``comparisons[name]``, ``lib.mode_comparisons.HistoryComparison``)."""

    ks: list
    ladder: dict
    comparisons: dict
    continuation_length: dict

    @property
    def sigma_drop(self) -> float:
        """max over languages, steps and α of σ_α^(k) − σ_α^(k+1) (≤ 0 for a stationary source)."""
        return max(c.sigma_drop for cs in self.comparisons.values() for c in cs)

    @property
    def lift_error(self) -> float:
        """The largest error of the lift J: of JᵀJ = I and of M_{k+1} J = M_k."""
        return max(max(c.isometry_error, c.intertwining_error) for cs in self.comparisons.values() for c in cs)

    def left_angle(self, name: str, ranks=(1, 2, 3)) -> list[float]:
        """Per step, the largest principal angle between the top-r left subspaces, over ``ranks``."""
        return [max(float(c.left_angles[r].max()) for r in ranks if r in c.left_angles) for c in self.comparisons[name]]

    def inheritance_error(self, orders: dict) -> float:
        """Once k reaches a language's Markov order (``orders[name]``): the largest principal angle
        (left and lifted right, every r) and the largest |Δσ| over the steps from that k on."""
        steps = [c for name, order in orders.items() for k, c in zip(self.ks, self.comparisons[name]) if k >= order]
        return max(max([float(np.max(a)) for a in list(c.left_angles.values()) + list(c.right_angles.values())]
                       + [float(np.abs(c.sigma_short - c.sigma_long[:len(c.sigma_short)]).max())]) for c in steps)

    def spectra_rows(self) -> list[dict]:
        return [{"language": name, "k → k+1": f"{k} → {k + 1}", "l": self.continuation_length[name],
                 "max σ^(k) − σ^(k+1)": c.sigma_drop, "leakage": c.leakage}
                for name, cs in self.comparisons.items() for k, c in zip(self.ks, cs)]

    def angle_rows(self, ranks) -> list[dict]:
        """Per language, step and side (left; right, lifted), the largest principal angle at each r."""
        rows = []
        for name, cs in self.comparisons.items():
            for k, c in zip(self.ks, cs):
                for side, angles in (("left", c.left_angles), ("right", c.right_angles)):
                    rows.append({"language": name, "k → k+1": f"{k} → {k + 1}", "side": side,
                                 **{f"r = {r}": float(angles[r].max()) if r in angles else None for r in ranks}})
        return rows


def history_ladder(languages: dict, continuation_length: dict, max_history: int, ranks=(1, 2, 3, 5)) -> HistoryLadder:
    """Modes of C_{k,l} for k = 1, …, ``max_history`` (l = ``continuation_length[name]``) and
    ``lib.mode_comparisons.compare_history_lengths`` between consecutive k, for each named language."""
    ks = list(range(1, max_history + 1))
    ladder = {name: [Modes.from_joint(languages[name].joint(k, l), zero_rows="drop") for k in ks]
              for name, l in continuation_length.items()}
    comparisons = {name: [compare_history_lengths(a, b, languages[name].alphabet_size, ranks=ranks)
                          for a, b in zip(ms[:-1], ms[1:])] for name, ms in ladder.items()}
    return HistoryLadder(ks, ladder, comparisons, dict(continuation_length))


# --------------------------------------------------------------------------- what the chapter costs

NEWTON_STEPS_PER_FEATURE = 12   # Newton steps of Modes.effective at cutoff χ, at most this × (χ + 1) (measured ≈ 8)


def svd_cost(m: int, n: int) -> tuple[float, float]:
    """(peak bytes, FLOPs) of ``Modes.from_joint`` on an m × n joint: the joint, M, U, Vᵀ and the
    divide-and-conquer workspace (LAPACK's gesdd with thin vectors asks for about 4·min² + 7·min + max
    values) in float64, and the Golub–Van Loan count 14·m·k² + 8·k³ of a thin SVD (k = min(m, n);
    Matrix Computations, 4th ed., Fig. 8.6.1)."""
    k, big = min(m, n), max(m, n)
    values = 2 * m * n + big * k + k * k + (4 * k * k + 7 * k + big)
    return 8.0 * values, 14.0 * big * k * k + 8.0 * k ** 3


def effective_cost(histories: int, continuations: int, rank: int) -> tuple[float, float]:
    """(peak bytes, FLOPs) of ``Modes.truncation_curve``: the effective distribution q^(χ) at every cutoff
    χ ≤ rank, each at most NEWTON_STEPS_PER_FEATURE·(χ + 1) Newton steps, a step forming and factoring
    one d × d Hessian Φᵀdiag(q/p²)Φ per continuation (d = χ + 1 features; 2·histories·d² + d³/3 FLOPs).
    Memory: a handful of histories × continuations arrays (p, q, their ratios, the step) and Φ."""
    flops = sum(NEWTON_STEPS_PER_FEATURE * d * continuations * (2.0 * histories * d * d + d ** 3 / 3)
                for d in range(1, rank + 2))
    return 8.0 * (8 * histories * continuations + histories * (rank + 1)), flops


def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for its resolved parameters ``values``: the dense SVD of the corpus
    language at (k, l) = (2, 2), the history ladder's widest joint at (max_history, 1), and the effective
    distribution at every cutoff of the corpus language's (2, 1) joint. ``corpus_symbols`` S sets all
    three (S⁴, S^(max_history+1) and ~S⁷ FLOPs); the planted language's alphabet
    |Σ| + 3·#absolute + 2·#collective histories + #collective bigrams enters the ladder too."""
    S, K = values["corpus_symbols"], values["max_history"]
    planted = (values["alphabet_size"] + 3 * len(values["planted_absolute"])
               + 2 * len(sum(values["planted_collective"], [])) + len(values["planted_collective"]))
    widest = max(S, planted)
    svd_bytes, svd_flops = svd_cost(S ** 2, S ** 2)
    ladder_bytes, ladder_flops = svd_cost(widest ** K, widest)
    eff_bytes, eff_flops = effective_cost(S ** 2, S, S)
    return [
        HeavyStep("modes of the corpus language at (2, 2)", f"a {S ** 2} × {S ** 2} dense SVD", svd_bytes, svd_flops,
                  "corpus_symbols", host=True),
        HeavyStep(f"history ladder at k = {K}", f"a {widest ** K} × {widest} dense SVD", ladder_bytes, ladder_flops,
                  "max_history or corpus_symbols", host=True),
        HeavyStep("effective distributions of the corpus language at (2, 1)",
                  f"{S + 1} cutoffs on {S ** 2} histories × {S} continuations", eff_bytes, eff_flops, "corpus_symbols", host=True),
    ] + real_model_steps(values)


# --------------------------------------------------------------------------- a model no one here trained

#: A mode counts as carried when the model's share c_α/σ_α reaches one half (the rule of the chapters
#: "Insensitivity" and "Three lenses") and exceeds z* = 3 s.d. of its sampling error
#: (:func:`lib.lenses_experiments.carried_above_noise`).
CARRIED_LEVEL = 0.5
#: Tokenizing costs no floating-point work; it is priced as this many FLOP-equivalents a byte of text
#: (measured: 14 MB of the book's corpus in 27 s with SmolLM2's tokenizer on one busy core, at a matmul
#: rate of about 45 GFLOP/s).
TOKENIZE_FLOPS_PER_BYTE = 9.0e4
#: The size of the book's default corpus (the installed packages' docstrings, lib.text.corpus), which prices
#: tokenizing a local corpus before it is read.
DEFAULT_CORPUS_MB = 14.0


def token_documents(tokenizer, documents) -> tuple[np.ndarray, np.ndarray]:
    """The documents tokenized by ``tokenizer`` (no special tokens), empty ones dropped: (one stream of
    token ids, the offset at which each document starts)."""
    ids = tokenizer(list(documents), add_special_tokens=False)["input_ids"]
    ids = [np.asarray(d, dtype=np.int64) for d in ids if len(d)]
    if not ids:
        raise ValueError("parameter 'documents' holds no text the tokenizer turns into tokens")
    return np.concatenate(ids), np.cumsum([0] + [d.size for d in ids[:-1]]).astype(np.int64)


def real_view(tokens, doc_offsets, vocab_size: int, *, n_symbols: int, k: int, n_histories: int):
    """The corpus seen through an alphabet of the model's tokens: the ``n_symbols`` − 1 most frequent tokens
    and OTHER (:func:`lib.languages.reduce_vocabulary`), and the ``n_histories`` most frequent k-strings of
    kept tokens with what follows them (:func:`lib.lenses.corpus_view`, whose ``modes`` are those of the
    empirical joint q̂(x) q̂(y|x), Chen & Murfet §4.3). Returns (view, the map token → symbol)."""
    from .lenses import corpus_view, symbol_table      # deferred: lib.lenses loads torch

    tokens, doc_offsets = np.asarray(tokens), np.asarray(doc_offsets, dtype=np.int64)
    mapped, kept = reduce_vocabulary(tokens, n_symbols, vocab_size)
    if kept[-1] != -1:
        raise ValueError(f"parameter 'n_symbols' = {n_symbols}: the stream has no more distinct tokens, so no OTHER")
    ends = np.append(doc_offsets[1:], len(mapped))
    documents = [mapped[a:b] for a, b in zip(doc_offsets, ends)]
    labels = [str(int(t)) for t in kept[:-1]] + ["OTHER"]
    return corpus_view(documents, kept, labels, k, n_histories), symbol_table(kept, vocab_size)


@dataclass
class RealModes:
    """A released model and its untrained twin against the corpus's modes. ``noise``: the shares c_α/σ_α of
    each data mode the two carry, with their bootstrap s.d. and the carried masks (rows: twin, trained;
    :class:`lib.lenses_experiments.CarriedModes`); ``verdict``: does training make the model carry more
    modes than its twin (:func:`lib.lenses_experiments.carried_verdict`); ``sigma``: the singular values of
    the data's joint and of each model's joint q̂(x) P_M(y|x); ``overlap``: |⟨u_α(data), u_α(model)⟩| per
    mode α of the model's own modes against the data's (same index)."""

    noise: object
    verdict: object
    sigma: dict
    overlap: dict

    def carried(self, row: int = 1) -> list[int]:
        """The indices α of the data modes carried by the twin (row 0) or the trained model (row 1)."""
        return [int(a) for a in np.flatnonzero(self.noise.carried[row])]

    def table_rows(self) -> list[dict]:
        n = self.noise
        return [{"mode α": a, "σ_α": float(n.sigma[a]), "share trained": float(n.shares[1, a]),
                 "s.d. trained": float(n.sd[1, a]), "carried": bool(n.carried[1, a]),
                 "share twin": float(n.shares[0, a]), "carried by twin": bool(n.carried[0, a])}
                for a in range(len(n.sigma))]


def real_modes(view, conditionals: dict, *, n_boot: int, seed: int, level: float = CARRIED_LEVEL) -> RealModes:
    """Which of the data's modes (``view``'s) a released model carries, against its untrained twin.

    ``conditionals``: {"init": P_twin(y|x), "final": P_trained(y|x)}, each (m, |Σ|) on the view's histories
    (:func:`lib.lenses.model_conditional` at l = 1). The carried modes are those of
    :func:`lib.lenses_experiments.carried_above_noise` (share ≥ ``level`` and above 3 s.d. of a bootstrap of
    q̂'s counts); the finding, modes carried by the trained model minus by the twin, is
    :func:`lib.lenses_experiments.carried_verdict` with the twin as both the reference and the null (the twin's
    own gain over itself is zero, so the verdict reads the trained model's gain by :func:`lib.book.decide_effect`
    at a resolution of one mode)."""
    from .lenses_experiments import carried_above_noise, carried_verdict      # deferred: it loads torch

    conds = np.stack([np.asarray(conditionals["init"], float), np.asarray(conditionals["final"], float)])
    noise = carried_above_noise(view, conds, level=level, n_boot=n_boot, seed=seed)
    verdict = carried_verdict(noise, first=0, last=1, null=0)
    data = view.modes
    sigma, overlap = {"data": data.sigma}, {}
    for name, row in (("trained", 1), ("twin", 0)):
        own = Modes.from_joint(view.q_x[:, None] * conds[row], zero_rows="raise", normalize=True)
        sigma[name] = own.sigma
        r = min(data.rank, own.rank)
        overlap[name] = np.abs((data.u[:, :r] * own.u[:, :r]).sum(0))
    return RealModes(noise, verdict, sigma, overlap)


def real_conditionals(name: str, view, table, device="cpu") -> dict:
    """P_M(y|x) of the released model ``name`` and of its untrained twin
    (:func:`lib.ntp_experiments.load_real_model`) on the view's histories and alphabet ``table``
    (:func:`lib.lenses.model_conditional`, l = 1): {"final": (m, |Σ|), "init": (m, |Σ|)}."""
    from .lenses import model_conditional             # deferred: lib.lenses loads torch

    models = real_models(name, device)
    with torch_threads(1):
        return {rev: model_conditional(model, view.histories, 1, table) for rev, model in models.items()}


def real_model_steps(values: dict, text_bytes: float | None = None) -> list:
    """The heavy steps of the section on a released model (none with real_model: none): tokenizing the
    corpus (:data:`TOKENIZE_FLOPS_PER_BYTE`; ``text_bytes`` of text, default max_corpus_mb for a streamed corpus
    and :data:`DEFAULT_CORPUS_MB` for a local one),
    the model and its twin on real_histories histories of real_history tokens (2 FLOPs a token per parameter,
    the shapes of :data:`lib.ntp_experiments.REAL_SHAPES`; both held in float32), and real_boot bootstrap
    replicates (an SVD of the m × |Σ| joint each, :func:`svd_cost`)."""
    name = values.get("real_model") or "none"
    if name == "none":
        return []
    d, layers, ff, vocab = REAL_SHAPES[name]
    params = layers * (4 * d * d + 3 * d * ff) + vocab * d
    m, k, S, n_boot = values["real_histories"], values["real_history"], values["real_symbols"], values["real_boot"]
    if text_bytes is None:   # a streamed corpus is cut at max_corpus_mb; a local one is read whole
        streamed = str(values.get("corpus") or "").startswith("hf:")
        text_bytes = (values.get("max_corpus_mb") or 0) * 1e6 if streamed else DEFAULT_CORPUS_MB * 1e6
    text = float(text_bytes)
    boot_bytes, boot_flops = svd_cost(m, S)
    return [HeavyStep("tokenizing the corpus with the released model's tokenizer", f"{text / 1e6:.0f} MB of text",
                      8.0 * text, TOKENIZE_FLOPS_PER_BYTE * text, "max_corpus_mb", host=True),
            HeavyStep(f"{name} and its untrained twin on the histories", f"{params / 1e6:.0f}M parameters, {m} "
                      f"histories of {k} tokens, twice", 8.0 * params + 2 * m * vocab * 4,
                      2 * 2.0 * params * m * k, "real_histories", host=True),
            HeavyStep("the bootstrap of q̂'s counts", f"{n_boot} replicates of a {m} × {S} SVD", boot_bytes,
                      n_boot * (boot_flops + 4.0 * m * S * S), "real_boot", host=True)]
