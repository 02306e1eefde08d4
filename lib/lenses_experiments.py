"""The chapter "Three lenses on one model": its study, verdicts, sentences and cost.

The mathematics of the lenses (the alphabet, the model's conditional by the chain rule, the
logit matrix's spectrum and α, principal angles between history subspaces, the corpus view,
the model's geometry, λ̂ of a checkpoint) is in :mod:`lib.lenses`. Here it is put together as the
chapter runs it: :func:`lens_models` gives the model over its training (one size of the
Introduction's suite, or one hub model's revisions: :func:`lib.substrate.model_source`),
:func:`prepare_study` builds everything that does not depend on the model, :func:`read_checkpoint`
measures one checkpoint through every lens (:func:`read_checkpoints` all of them, :func:`read_null`
the learned-nothing model), the verdicts decide the chapter's findings against their nulls (the step-0
model, the shuffled corpus, random subspaces, relabelled items) and against the learned-nothing model
(:func:`learned_verdict`, with :func:`lib.book.decide_effect` and the resolutions :data:`RESOLUTION`),
one sentence per lens says what the run found, and :func:`heavy_steps` is the chapter's cost for
``lowrank-book plan``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import insensitivity as ins
from . import languages
from . import logits as lg
from . import ntp, substrate
from .book import Z_FINDING, decide_effect
from .book.costs import HeavyStep
from .empirical_modes import shuffle_tokens
from .lenses import (LLCSettings, CorpusView, LensesError, alpha_by_size, check_positive_int, checkpoint_llc,
                     conditional_at, context_embeddings, corpus_view, empty_future_link, geometry_correlation,
                     history_dependent, history_side, lens_alignment, model_conditional, normalised_spectrum,
                     paired_correlation_difference, readout_link, symbol_table, word_embeddings, carried_shares)
from .llc_experiments import MIXED_ESS, MIXED_RHAT
from .logit_rank_experiments import overlap_against_control
from .models.causal_lm import CausalLM
from .models.mini_pythia import SIZES
from .modes import Modes
from .substrate import training_windows

# ---------------------------------------------------------------------------
# The study: what does not depend on the model, and one checkpoint's reading
# ---------------------------------------------------------------------------

@dataclass
class LensStudy:
    """Everything the lenses share across checkpoints.

    ``views[k]``: the corpus at history length k (:class:`CorpusView`); ``long_k`` the longest, on
    which Lenses 2 and 3 are read; ``shuffled``: the conditional of the shuffled corpus at those
    histories (the null of a corpus without sequential structure); ``table``: token → symbol;
    ``futures``: ∅ and each kept token; ``svm``: L^mm of the support matrix (:class:`lib.ntp.SVMResult`);
    ``context_mm`` (m × m) and ``word_mm`` (kept × kept): cosines of the factors of L^mm;
    ``windows``: the training windows that define L_n for λ̂."""

    views: dict[int, CorpusView]
    long_k: int
    shuffled: np.ndarray
    table: np.ndarray
    kept: np.ndarray
    futures: list[tuple[int, ...]]
    svm: Any
    context_mm: np.ndarray
    word_mm: np.ndarray
    windows: torch.Tensor
    align_rank: int
    alpha_factors: tuple[float, ...]

    @property
    def long(self) -> CorpusView:
        return self.views[self.long_k]


def prepare_study(tokens, doc_offsets, vocab_size: int, *, n_symbols: int, history_lengths: Sequence[int],
                  n_histories: int, align_rank: int, alpha_factors: Sequence[float], llc_windows: int,
                  llc_context: int, seed: int, solve_svm: Callable | None = None) -> LensStudy:
    """The corpus side of the lenses from a token stream (``tokens`` with its document ``doc_offsets``):
    the alphabet, a :class:`CorpusView` per history length, the shuffled corpus's conditional
    (:func:`lib.empirical_modes.shuffle_tokens` with ``seed``) at the longest one, L^mm of its
    support matrix (``solve_svm(S)``, default :func:`lib.ntp.solve_ntp_svm` with SCS; the chapter
    passes a cached one) and the training windows of λ̂ (:func:`lib.substrate.training_windows`)."""
    tokens = np.asarray(tokens)
    doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
    mapped, kept = languages.reduce_vocabulary(tokens, check_positive_int("n_symbols", n_symbols, 3), vocab_size)
    if kept[-1] != -1:
        raise LensesError(f"the stream has at most {n_symbols} distinct tokens: no OTHER symbol, use fewer symbols")
    labels = [str(int(t)) for t in kept[:-1]] + ["OTHER"]
    ends = np.append(doc_offsets[1:], len(mapped))
    documents = [mapped[a:b] for a, b in zip(doc_offsets, ends)]
    lengths = sorted({check_positive_int("history_lengths", k) for k in history_lengths})
    views = {k: corpus_view(documents, kept, labels, k, n_histories) for k in lengths}
    long_k = lengths[-1]
    long = views[long_k]
    if not 1 <= align_rank <= long.data.m // 4:
        raise LensesError(f"parameter 'align_rank' = {align_rank} must be in [1, m/4] for the m = {long.data.m} "
                          "histories (two subspaces of dimension above m/2 must intersect)")
    shuffled = conditional_at(shuffle_tokens(mapped, seed), doc_offsets, long.data.contexts, len(kept), "marginal")
    svm = (solve_svm or (lambda S: ntp.solve_ntp_svm(S, solver="SCS", eps=1e-9, max_iters=1_000_000)))(long.data.S)
    W_mm, H_mm = ntp.ufm_factors(svm.L)
    windows = training_windows(tokens, check_positive_int("llc_windows", llc_windows), check_positive_int("llc_context", llc_context, 2),
                               seed)
    return LensStudy(views=views, long_k=long_k, shuffled=shuffled, table=symbol_table(kept, vocab_size),
                     kept=kept[:-1], futures=[()] + [(int(t),) for t in kept[:-1]], svm=svm,
                     context_mm=ntp.cosine_matrix(H_mm.T), word_mm=ntp.cosine_matrix(W_mm[:-1]),
                     windows=windows, align_rank=int(align_rank), alpha_factors=tuple(float(f) for f in alpha_factors))


ALIGNED_PAIRS = ("logits~data", "model~data", "logits~model", "logits~shuffled")


@dataclass
class Reading:
    """One checkpoint seen through every lens.

    ``conditional[k]``: P_M(y|x) on the histories of length k (m × |Σ|); ``link_error`` and
    ``readout_error``: the two identities between the lenses; ``singular_values``: the normalised
    spectrum of L_M(H, F); ``alpha[reading][factor]``; ``cosines[pair]``: :func:`lens_alignment` of
    the history-dependent parts (:func:`history_dependent`) of the pairs of :data:`ALIGNED_PAIRS`;
    ``context_cos``, ``word_cos``: the cosine matrices of the model's context embeddings and centred
    word embeddings; ``geometry[...]``: their correlation with the L^mm factors' and its permutation
    p-value; ``llc``: λ̂ and its diagnostics; ``logits``: L_M(H, F) itself when kept."""

    step: int
    conditional: dict[int, np.ndarray]
    link_error: float
    readout_error: float
    singular_values: np.ndarray
    alpha: dict[str, dict[float, float]]
    cosines: dict[str, np.ndarray]
    context_cos: np.ndarray
    word_cos: np.ndarray
    geometry: dict[str, float]
    llc: dict[str, float] = field(default_factory=dict)
    logits: np.ndarray | None = None


def read_checkpoint(model, study: LensStudy, step: int, *, n_perm: int, seed: int, keep_logits: bool = False,
                    llc_settings: LLCSettings | None = None, device="cpu") -> Reading:
    """Every lens on one checkpoint ``model`` (a :class:`lib.models.causal_lm.CausalLM`); λ̂ last (when
    ``llc_settings`` is given), since SGLD needs the attention in plain operations."""
    long = study.long
    cond = {k: model_conditional(model, v.histories, 1, study.table) for k, v in study.views.items()}
    L = lg.extended_logit_matrix(model, long.histories, study.futures, None, centered=True).astype(np.float64)
    V = L.shape[1] // len(study.futures)
    full = model_conditional(model, long.histories, 1)
    link = empty_future_link(L[:, :V], full)
    readout = readout_link(model, long.histories, L[:, :V])
    q = long.q_x
    parts = {"logits": history_side(history_dependent(L, q)), "model": history_dependent(cond[study.long_k], q),
             "data": history_dependent(long.conditional, q), "shuffled": history_dependent(study.shuffled, q)}
    cosines = {pair: lens_alignment(parts[pair.split("~")[0]], parts[pair.split("~")[1]], study.align_rank)
               for pair in ALIGNED_PAIRS}
    context_cos = ntp.cosine_matrix(context_embeddings(model, long.histories))
    word_cos = ntp.cosine_matrix(word_embeddings(model, study.kept), center=True)
    r_c, p_c = geometry_correlation(context_cos, study.context_mm, n_perm, seed)
    r_w, p_w = geometry_correlation(word_cos, study.word_mm, n_perm, seed)
    reading = Reading(step=step, conditional=cond, link_error=link, readout_error=readout,
                      singular_values=normalised_spectrum(L), alpha=alpha_by_size(L, len(study.futures),
                                                                                             study.alpha_factors),
                      cosines=cosines, context_cos=context_cos, word_cos=word_cos,
                      geometry={"contexts": r_c, "contexts_p": p_c, "words": r_w, "words_p": p_w},
                      logits=L if keep_logits else None)
    if llc_settings is not None:
        res = checkpoint_llc(model, study.windows, llc_settings, seed, device)
        reading.llc = {"llc": res.llc, "se": res.se, "rhat": float(res.diagnostics["rhat"]),
                       "min_ess": float(np.min(res.diagnostics["ess"])), "total_ess": float(np.sum(res.diagnostics["ess"])), "init_loss": res.init_loss,
                       "divergent": len(res.diagnostics["divergent"]), "seconds": res.seconds}
    return reading


# ---------------------------------------------------------------------------
# Over training: what relates to what, each against its null
# ---------------------------------------------------------------------------

@dataclass
class Verdict:
    """A finding decided against its nulls. ``value``: the margin (in the quantity's units) by which the
    run's z*-s.e. intervals clear the lines that decide it (:func:`learned_verdict`): ≥ 0 reproduces,
    < 0 does not; ``undecided``: why the run cannot decide (then ``value`` is the trained model's
    estimate, or None); ``detail``: the trained and the learned-nothing model's effects and more."""
    value: float | None
    undecided: str | None = None
    detail: dict = field(default_factory=dict)

    @property
    def reproduces(self) -> bool | None:
        """True (reproduces), False (does not reproduce here) or None (undecided)."""
        return None if self.undecided is not None or self.value is None else self.value >= 0


ALIGNMENT_Z = Z_FINDING          # the book's one z* (lib.book.Z_FINDING = 3); the old name answers

RESOLUTION = {
    # Each finding's smallest effect that counts, fixed from the quantity's scale before any run (the yml's
    # claims state the same numbers and reasons).
    "modes": 1.0,      # modes carried: a count; one more mode is the smallest change there is
    "rho": 0.3,        # Spearman ρ (learning order): ρ² = 0.09, under a tenth of the ranks' variance
    "cosine": 0.1,     # mean cosine of principal angles: half what two random r-subspaces of R^m share by chance
    #                    (0.19 at m = 100, r = 5; 0.17 at m = 500, r = 20: lib.lenses.alignment_null)
    "corr": 0.1,       # Pearson r of off-diagonal cosines: Cohen's smallest ("small") correlation
    "llc": 1.0,        # λ̂: a regular parameter adds 1/2, so 1 is two parameters' worth of complexity
}
GEOMETRY_LEVEL = 0.01            # the NTP chapter's permutation level for the word geometry
NO_NULL_FOR_HUB = ("no learned-nothing model is trained beside a hub model (its training recipe is not the "
                   "book's), so the run cannot tell learned structure from what a shuffled stream gives")


def effect_record(effect) -> dict:
    """An :class:`lib.book.claims.Effect` as plain numbers for the records."""
    if effect is None:
        return None
    return {"estimate": effect.estimate, "se": effect.se, "lower": effect.lower, "upper": effect.upper,
            "resolution": effect.resolution,
            "verdict": {True: "shows it", False: "does not show it", None: "undecided"}[effect.reproduces],
            "reason": effect.reason}


def learned_verdict(trained, null, *, null_missing: str | None = None, detail: dict | None = None) -> Verdict:
    """A finding about learning, decided against a model that learned nothing: it reproduces only when the
    trained model shows the effect and the learned-nothing model (trained on the shuffled stream) does
    not, each decided by :func:`lib.book.decide_effect` (``trained``, ``null``: its Effects).

    * the trained model does not show it (its upper bound is below the resolution): does not reproduce,
      value upper − resolution < 0;
    * it does, and the null does too (the null's lower bound > 0): does not reproduce, value −lower < 0 —
      the effect is there without learning;
    * it does and the null does not: reproduces, value min(lower, upper − resolution, resolution −
      null's upper) ≥ 0;
    * otherwise undecided, with the reason (``null_missing`` when there is no null model to decide)."""
    detail = {**(detail or {}), "trained": effect_record(trained), "null": effect_record(null)}
    if trained.reproduces is False:
        return Verdict(trained.upper - trained.resolution, None, detail)
    if trained.reproduces is None:
        return Verdict(trained.estimate, f"the trained model: {trained.reason}", detail)
    if null is None:
        return Verdict(trained.estimate, null_missing or NO_NULL_FOR_HUB, detail)
    if null.reproduces is True:
        return Verdict(-null.lower, None, detail)
    if null.reproduces is None:
        return Verdict(trained.estimate, f"the model trained on the shuffled stream: {null.reason}", detail)
    return Verdict(min(trained.lower, trained.upper - trained.resolution, trained.resolution - null.upper), None,
                   detail)


def all_of(effects: dict):
    """Several Effects of one model read as one (each against its own comparator): it does not show the
    effect when any of them does not, shows it when all do, and is undecided otherwise; returns the
    deciding Effect (the first that does not, else the first undecided, else the weakest by lower bound)."""
    for want in (False, None):
        for e in effects.values():
            if e.reproduces is want:
                return e
    return min(effects.values(), key=lambda e: e.lower)


# ----- Lens 1: modes carried above their sampling error

@dataclass
class CarriedModes:
    """The share c_α/σ_α of each data mode that each model carries, with its sampling error.

    ``shares`` (T, rank) and ``sd`` (T, rank): the share and its s.d. over bootstrap replicates of q̂'s
    counts; ``carried`` (T, rank): share ≥ level and share > z*·sd; ``counts`` (T,) and ``boot_counts``
    (n_boot, T): the modes carried, on the data and on each replicate (same rule, same sd)."""
    sigma: np.ndarray
    shares: np.ndarray
    sd: np.ndarray
    carried: np.ndarray
    counts: np.ndarray
    boot_counts: np.ndarray
    level: float


def carried_above_noise(view: CorpusView, conditionals, *, level: float, n_boot: int, seed: int,
                        z_star: float = Z_FINDING) -> CarriedModes:
    """Which of the data's modes (``view``, at one history length) each model carries, above noise.

    ``conditionals`` (T, m, |Σ|): the models' P_M(y|x) on the view's histories. The share of mode α is
    c_α/σ_α (:func:`lib.lenses.carried_shares`); q̂ comes from finite counts, so its modes, and the
    shares, carry sampling error: each of ``n_boot`` replicates redraws the (history, next symbol)
    counts from the multinomial of q̂ with their total (seeded) and recomputes the modes and the
    shares (a history no replicate count reaches is dropped). A mode is carried when its share
    reaches ``level`` and exceeds z* times its bootstrap s.d.: a tail mode whose σ_α is small has
    a share that any model moves by chance, and does not count."""
    conds = np.asarray(conditionals, dtype=np.float64)
    counts = np.asarray(view.data.counts, dtype=np.float64).T              # (m, |Σ|)
    modes = view.modes
    r = modes.rank
    shares = carried_shares(modes, conds)[:, :r]
    total = int(round(counts.sum()))
    p = (counts / counts.sum()).ravel()
    rng = np.random.default_rng(seed)
    boots = np.full((check_positive_int("n_boot", n_boot, 2),) + shares.shape, np.nan)
    for b in range(n_boot):
        joint = rng.multinomial(total, p).reshape(counts.shape).astype(np.float64)
        mb = Modes.from_joint(joint, zero_rows="drop", normalize=True)
        curves = ins.learning_curves(mb, conds, rows=mb.rows)
        k = min(r, mb.rank, curves.shape[1])
        boots[b, :, :k] = curves[:, :k] / mb.sigma[:k]
    sd = np.nanstd(boots, axis=0, ddof=1)
    rule = lambda s: (s >= level) & (s > z_star * sd)                           # noqa: E731
    carried = rule(shares)
    boot_counts = np.stack([rule(np.nan_to_num(x, nan=-np.inf)).sum(-1) for x in boots])
    return CarriedModes(modes.sigma[:r], shares, sd, carried, carried.sum(-1), boot_counts, float(level))


def carried_verdict(noise: CarriedModes, *, first: int = 0, last: int = -1, null: int | None = None,
                    resolution: float = RESOLUTION["modes"]) -> Verdict:
    """Does training add modes the model carries? The effect is the modes carried at ``last`` minus at
    ``first`` (step 0), its s.e. the s.d. of that difference over the replicates of
    :func:`carried_above_noise`; the learned-nothing model (row ``null``) gets the same effect against the
    same step 0. Decided by :func:`learned_verdict` (resolution: one mode)."""
    def gain(i):
        d = noise.boot_counts[:, i] - noise.boot_counts[:, first]
        return decide_effect(float(noise.counts[i] - noise.counts[first]), float(np.std(d, ddof=1)),
                             resolution=resolution)
    detail = {"step0": int(noise.counts[first]), "final": int(noise.counts[last]),
              "shuffled": None if null is None else int(noise.counts[null])}
    return learned_verdict(gain(last), None if null is None else gain(null), detail=detail)


def rho_with_se(x, y, n_boot: int, seed: int) -> dict:
    """Spearman's ρ of (x, y) with its 90% percentile interval and the s.d. of the same bootstrap's
    replicates (pairs resampled with ``seed``): :func:`lib.insensitivity.rank_correlation` with ``se``."""
    return ins.rank_correlation(x, y, n_boot=n_boot, seed=seed, se=True)


def order_effect(steps, modes: Modes, conditionals, level: float, n_boot: int, seed: int, carried=None,
                 resolution: float = RESOLUTION["rho"]):
    """(Effect or None, detail): −ρ, Spearman's ρ between σ_α and the step at which the model's coordinate
    on mode α covers ``level`` of its way (:func:`lib.insensitivity.learning_steps`), over the modes
    ``carried`` at the end (default: share ≥ ``level``), with its bootstrap s.e. (:func:`rho_with_se`).
    None with fewer than 3 carried modes (no rank correlation)."""
    curves = ins.learning_curves(modes, np.asarray(conditionals), rows=modes.rows)
    when, reached = ins.learning_steps(steps, curves, modes.sigma, level=level, learned=level)
    mask = reached if carried is None else np.asarray(carried, bool)[:len(when)]
    rc = rho_with_se(modes.sigma[:len(when)][mask], when[mask], n_boot=n_boot, seed=seed)
    detail = {**rc, "steps": when.tolist(), "carried": mask.tolist()}
    if rc["n"] < 3 or not np.isfinite(rc["se"]) or not np.isfinite(rc["rho"]):
        return None, detail
    return decide_effect(-rc["rho"], rc["se"], resolution=resolution), detail


def learning_order(steps, modes: Modes, conditionals, level: float, n_boot: int, seed: int, *, carried=None,
                   null_conditionals=None, null_carried=None, resolution: float = RESOLUTION["rho"]) -> Verdict:
    """Are larger modes learned earlier? The effect is −ρ (:func:`order_effect`; the null of no order is
    ρ = 0), decided by :func:`lib.book.decide_effect` (z* = 3, resolution 0.3 in ρ). The learned-nothing
    model's checkpoints (``null_conditionals``, its carried modes ``null_carried``) get the same test;
    a model that carries fewer than 3 modes shows no order. Combined by :func:`learned_verdict`; the
    trained model with fewer than 3 carried modes is undecided."""
    trained, detail = order_effect(steps, modes, conditionals, level, n_boot, seed, carried, resolution)
    if trained is None:
        return Verdict(None, f"only {detail['n']} modes are carried at the end; a rank correlation needs 3", detail)
    if null_conditionals is None:
        return learned_verdict(trained, None, detail=detail)
    null, null_detail = order_effect(steps, modes, null_conditionals, level, n_boot, seed, null_carried, resolution)
    if null is None:      # fewer than 3 modes: no order at all, which is what "does not show it" means here
        null = decide_effect(0.0, 0.0, resolution=resolution)
    return learned_verdict(trained, null, detail={**detail, "null_order": null_detail})


# ----- Lens 2 and 3: alignment and geometry

def _alignment_effects(study: LensStudy, logits_model, logits_step0, *, n_boot: int, null_trials: int, seed: int,
                       resolution: float, against_corpus: bool, n_groups: int | None = None) -> tuple[dict, dict]:
    q, r = study.long.q_x, study.align_rank
    groups = {} if n_groups is None else {"n_groups": n_groups}
    data = history_dependent(study.long.conditional, q)
    model, start = history_dependent(logits_model, q), history_dependent(logits_step0, q)
    vs0 = overlap_against_control((model, data), (start, data), 1, r, n_boot=n_boot, null_trials=null_trials,
                                  seed=seed, **groups)
    effects = {"step-0 model": decide_effect(vs0.difference, vs0.se, resolution=resolution),
               "random subspaces": decide_effect(vs0.test - vs0.null_mean, vs0.null_sd, resolution=resolution)}
    detail = {"overlap": vs0.test, "step0_overlap": vs0.control, "random_mean": vs0.null_mean,
              "random_sd": vs0.null_sd}
    if against_corpus:
        shuffled = history_dependent(study.shuffled, q)
        vsc = overlap_against_control((model, data), (model, shuffled), 1, r, n_boot=n_boot, null_trials=null_trials,
                                      seed=seed + 1, **groups)
        effects["shuffled corpus"] = decide_effect(vsc.difference, vsc.se, resolution=resolution)
        detail["shuffled_overlap"] = vsc.control
    return effects, detail


def alignment_verdict(study: LensStudy, first: Reading, last: Reading, *, n_boot: int, null_trials: int, seed: int,
                      resolution: float = RESOLUTION["cosine"], null: Reading | None = None) -> Verdict:
    """Is the trained model's logit subspace aligned with the data's modes beyond every null?

    The overlap is the mean cosine of the principal angles between the top-r history subspaces of the
    history-dependent parts of L_M(H, F) and of q (rank ``study.align_rank``). The trained model's
    effect is its overlap minus (i) the step-0 model's, (ii) its own overlap with the shuffled corpus's
    conditional (bootstraps over histories and groups of futures,
    :func:`lib.logit_rank_experiments.overlap_against_control`, paired: as many groups as the data has
    columns, so one draw serves all four matrices) and (iii) the mean overlap of random
    subspaces (s.e. their s.d.), each decided by :func:`lib.book.decide_effect` and read together by
    :func:`all_of`. The learned-nothing model (``null``, trained on the shuffled stream; its logits
    kept) gets effects (i) and (iii); combined by :func:`learned_verdict`. ``value`` in mean cosine."""
    if first.logits is None or last.logits is None or (null is not None and null.logits is None):
        raise LensesError("the first, last (and null) readings must keep their logit matrices (keep_logits=True)")
    # one draw of future groups for all four matrices (the comparison is paired only when their group counts
    # agree): as many groups as the data's conditional has columns, at most overlap_against_control's 40
    n_groups = min(40, np.asarray(study.long.conditional).shape[1])
    effects, detail = _alignment_effects(study, last.logits, first.logits, n_boot=n_boot, null_trials=null_trials,
                                         seed=seed, resolution=resolution, against_corpus=True, n_groups=n_groups)
    detail["effects"] = {k: effect_record(e) for k, e in effects.items()}
    detail["z"] = {k: e.estimate / e.se if e.se > 0 else float("inf") * np.sign(e.estimate)
                   for k, e in effects.items()}
    null_effect = None
    if null is not None:
        n_eff, n_detail = _alignment_effects(study, null.logits, first.logits, n_boot=n_boot,
                                             null_trials=null_trials, seed=seed, resolution=resolution,
                                             against_corpus=False, n_groups=n_groups)
        detail["null_overlap"] = n_detail["overlap"]
        detail["null_effects"] = {k: effect_record(e) for k, e in n_eff.items()}
        # the null shows the effect only if it beats step 0 and random subspaces both
        null_effect = all_of(n_eff)
    return learned_verdict(all_of(effects), null_effect, detail=detail)


def geometry_verdicts(study: LensStudy, first: Reading, last: Reading, *, level: float = GEOMETRY_LEVEL,
                      n_boot: int, seed: int, resolution: float = RESOLUTION["corr"],
                      null: Reading | None = None) -> dict[str, Verdict]:
    """The NTP chapter's comparisons on this model, and whether training moves toward them.

    ``contexts``: the permutation p-value of the final model's context geometry against the L^mm factors'.
    ``words``: the same for the word geometry (the NTP chapter's rule: p ≤ ``level`` shows it), decided
    against the learned-nothing model ``null``: reproduces only if its p-value does not reach ``level``;
    ``value`` is the margin in p: min(level − p, p_null − level) when it reproduces, level − p < 0 when the
    trained model does not show it, p_null − level < 0 when the null shows it too.
    ``approach``: the gain in the context correlation from step 0 to the end, with its paired-bootstrap
    s.e. over contexts (:func:`paired_correlation_difference`), decided by :func:`lib.book.decide_effect`;
    the null model's gain from the same step 0 likewise; combined by :func:`learned_verdict`. Identical
    first and last models give a gain of 0 with s.e. 0: does not reproduce."""
    out = {name: Verdict(last.geometry[f"{name}_p"], None, {"r": last.geometry[name], "step0_r": first.geometry[name]})
           for name in ("contexts", "words")}
    p, null_p = last.geometry["words_p"], None if null is None else null.geometry["words_p"]
    out["words"].detail.update(p=p, null_p=null_p, null_r=None if null is None else null.geometry["words"])
    if p > level:                                    # the trained model does not show it
        out["words"].value = level - p
    elif null_p is None:
        out["words"].value, out["words"].undecided = level - p, NO_NULL_FOR_HUB
    elif null_p <= level:                            # the shuffled-trained model shows it too
        out["words"].value = min(null_p - level, -np.finfo(float).tiny)
    else:
        out["words"].value = min(level - p, null_p - level)
    def gain(model):
        d, se = paired_correlation_difference(model.context_cos, first.context_cos, study.context_mm, n_boot, seed)
        return decide_effect(d, se if np.isfinite(se) else 0.0, resolution=resolution)
    trained = gain(last)
    null_effect = None if null is None else gain(null)
    out["approach"] = learned_verdict(trained, null_effect, detail={"difference": trained.estimate, "se": trained.se})
    return out


# ----- Lens 4: λ̂, gated by mixing

def mixing_problem(llc: dict, name: str) -> str | None:
    """Why a λ̂ reading should not count: split R̂ above the chapter "Learning coefficients"'s bound
    (:data:`lib.llc_experiments.MIXED_RHAT`) or a pooled ESS (the chains' ESS summed) below its floor
    (:data:`lib.llc_experiments.MIXED_ESS`); None when it mixed."""
    rhat, ess = llc["rhat"], llc.get("total_ess", float("nan"))
    problems = []
    if not rhat <= MIXED_RHAT:
        problems.append(f"split R̂ {rhat:.3f} > {MIXED_RHAT:g}")
    if not ess >= MIXED_ESS:
        problems.append(f"pooled ESS {ess:.0f} < {MIXED_ESS:g}")
    return f"{name}: {' and '.join(problems)}" if problems else None


def llc_verdict(first: dict, last: dict, null: dict | None = None, *, resolution: float = RESOLUTION["llc"]) -> Verdict:
    """Does λ̂ grow with training? The effect is λ̂_final − λ̂_0 (independent chains: s.e.² = s.e._0² +
    s.e._final²), and the learned-nothing model's λ̂ − λ̂_0 likewise (``first``, ``last``, ``null``: λ̂
    readings with ``llc``, ``se``, ``rhat``, ``total_ess``), decided by :func:`lib.book.decide_effect` and
    combined by :func:`learned_verdict`. Undecided when any reading has not mixed (:func:`mixing_problem`):
    the chapter "Learning coefficients" counts no estimate whose chains did not mix."""
    readings = {"step 0": first, "the final model": last, **({} if null is None else {"the shuffled-trained model": null})}
    detail = {"difference": last["llc"] - first["llc"], "se": math.hypot(first["se"], last["se"]),
              "max_rhat": max(v["rhat"] for v in readings.values()),
              "min_total_ess": min(v.get("total_ess", float("nan")) for v in readings.values())}
    def gain(v):
        se = math.hypot(first["se"], v["se"])
        if not math.isfinite(se) or not math.isfinite(v["llc"] - first["llc"]):
            return None
        return decide_effect(v["llc"] - first["llc"], se, resolution=resolution)
    trained, null_effect = gain(last), None if null is None else gain(null)
    if trained is None:
        return Verdict(None, "the chains' standard error is not finite", detail)
    verdict = learned_verdict(trained, null_effect, detail=detail)
    problems = [p for p in (mixing_problem(v, k) for k, v in readings.items()) if p]
    if problems:
        verdict.undecided = ("the chains have not mixed (" + "; ".join(problems) + "), and the chapter \"Learning "
                             "coefficients\" counts no estimate from chains that have not mixed")
        verdict.value = trained.estimate
    return verdict


# ---------------------------------------------------------------------------
# The model and its corpus: one size of the Introduction's suite, or one hub model's revisions
# ---------------------------------------------------------------------------

@dataclass
class LensModels:
    """One model over its training: ``steps`` (checkpoint labels, step 0 first, the final one last),
    ``load(step)`` → :class:`lib.models.causal_lm.CausalLM`, and the token stream it was trained on
    (``tokens`` with its document starts ``doc_offsets``; its vocabulary ``vocab_size`` = the width
    of the model's logits). ``null``: the learned-nothing model beside it
    (:class:`lib.substrate.NullModel`, the same recipe on the shuffled stream), or None."""
    name: str
    steps: list
    load: Callable[[Any], CausalLM]
    tokens: np.ndarray
    doc_offsets: np.ndarray
    vocab_size: int
    decode: Callable[[Sequence[int]], str]
    null: Any = None


def lens_models(*, profile: str, seed: int, model_size: str, hub_model: str = "suite", hub_revisions=(),
                corpus: str | None = None, max_corpus_mb: float = 1000.0, device="cpu", null: bool = True) -> LensModels:
    """The model the lenses look at (:func:`lib.substrate.model_source`) and its learned-nothing null.

    ``hub_model = "suite"``: the size ``model_size`` of the Introduction's suite at ``profile`` and
    ``seed`` (its settings and streams, :func:`lib.substrate.intro_settings`; trained by
    :func:`lib.substrate.train_book_suite`, or read from the cache, for that one size) at its saved
    checkpoints. Otherwise a hub name or local directory at ``hub_revisions``
    (:class:`lib.models.hub.ModelSeries`, every revision resolved before any work) and the training
    documents of ``corpus`` tokenized by its tokenizer. With ``null`` and the suite, the learned-nothing
    model: the mini-Pythia ``model_size`` trained with the Introduction's recipe on the shuffled training
    stream (:func:`lib.substrate.shuffled_null_model`, shuffled with ``seed``); a hub model has none
    (:data:`NO_NULL_FOR_HUB`)."""
    device = device if isinstance(device, str) else str(device)      # "cpu", "cuda:0", "auto"
    source = substrate.model_source(hub_model, hub_revisions, profile=profile, seed=seed, device=device,
                                    model_sizes=[model_size])
    if hub_model == "suite":
        train = source.train
        nothing = substrate.shuffled_null_model(profile, seed, device, model_size=model_size) if null else None
        return LensModels(model_size, source.steps, lambda step: source.load(model_size, step),
                          np.asarray(train.tokens), np.asarray(train.doc_offsets), int(source.tokenizer.vocab_size),
                          source.decode, nothing)
    text = substrate.load_text(corpus, max_corpus_mb)
    train_idx, _ = text.split(heldout_fraction=substrate.HELDOUT_FRACTION, seed=seed)
    docs = [np.asarray(source.encode(text.documents[i]), dtype=np.int64) for i in train_idx]
    docs = [d for d in docs if d.size]
    offsets = np.cumsum([0] + [d.size for d in docs[:-1]])
    vocab = source.load(hub_model, source.steps[-1]).vocab_size
    return LensModels(str(hub_model), source.steps, lambda step: source.load(hub_model, step), np.concatenate(docs),
                      offsets, int(vocab), source.decode, None)


def null_conditionals(models: LensModels, study: "LensStudy", k: int | None = None) -> np.ndarray | None:
    """(T, m, |Σ|): the learned-nothing model's P_M(y|x) at each of its checkpoints, on the histories of
    length ``k`` (default the longest), on the study's alphabet (:func:`lib.lenses.model_conditional`);
    None without a null model."""
    if models.null is None:
        return None
    view = study.views[study.long_k if k is None else k]
    out = []
    for step in models.null.steps:
        model = models.null.load(step)
        out.append(model_conditional(model, view.histories, 1, study.table))
        del model
    return np.array(out)


def read_checkpoints(models: LensModels, study: "LensStudy", *, n_perm: int, seed: int,
                     llc_settings: LLCSettings | None, device="cpu", progress: Callable | None = None) -> list:
    """:func:`read_checkpoint` at every checkpoint of ``models`` (the first and last keep their logit
    matrices, which the findings compare); ``progress(step)`` is called before each."""
    readings = []
    for i, step in enumerate(models.steps):
        if progress is not None:
            progress(step)
        model = models.load(step)
        readings.append(read_checkpoint(model, study, step, n_perm=n_perm, seed=seed,
                                        keep_logits=i in (0, len(models.steps) - 1), llc_settings=llc_settings,
                                        device=device))
        del model
    return readings


def read_null(models: LensModels, study: "LensStudy", *, n_perm: int, seed: int, llc_settings: LLCSettings | None,
              device="cpu") -> "Reading | None":
    """:func:`read_checkpoint` of the learned-nothing model's final checkpoint (its logit matrix kept), or
    None without one."""
    if models.null is None:
        return None
    model = models.null.load()
    return read_checkpoint(model, study, "shuffled", n_perm=n_perm, seed=seed, keep_logits=True,
                           llc_settings=llc_settings, device=device)


# ---------------------------------------------------------------------------
# One sentence per lens, from the run's numbers and verdicts
# ---------------------------------------------------------------------------

def _sentence(text: str) -> str:
    """``text`` as a sentence: a first letter a–z made upper case (a symbol such as λ̂ is left as it
    is), a full stop at the end."""
    text = text.strip()
    if text[:1].isascii() and text[:1].islower():
        text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def _finding_clause(verdict: Verdict, reproduces: bool, yes: str, no: str, question: str) -> str:
    """The verdict as a clause ending in a full stop: ``yes`` or ``no``; or, undecided, ``question``
    followed by "is undecided at these settings" and, as a sentence of its own, the reason (the run's
    diagnostics are kept out of the verdict's sentence)."""
    if verdict.undecided is not None:
        return f"{question} is undecided at these settings. {_sentence(verdict.undecided)}"
    clause = yes if reproduces else no
    return clause if clause.endswith(".") else clause + "."     # "… s.e." ends the sentence too


def _verdict_clause(verdict: Verdict, yes: str, no: str, question: str) -> str:
    return _finding_clause(verdict, bool(verdict.reproduces), yes, no, question)


def _null_phrase(verdict: Verdict) -> str:
    """Which of the two models decided a verdict that does not reproduce."""
    null = verdict.detail.get("null") or {}
    trained = verdict.detail.get("trained") or {}
    if trained.get("verdict") == "shows it" and null.get("verdict") == "shows it":
        return "the model trained on the shuffled stream shows it too"
    return "the trained model does not show it beyond step 0"


def modes_sentence(steps, noise: "CarriedModes", gain: Verdict, order: Verdict) -> str:
    """Lens 1 on this run: the modes carried above noise at step 0, at the end and by the learned-nothing
    model, and the order in which they came."""
    counts = noise.counts
    shuffled = gain.detail.get("shuffled")
    null_text = "" if shuffled is None else f", and the model trained on the shuffled stream {shuffled}"
    carried = _verdict_clause(gain, "training adds modes that learning nothing does not",
                              f"training does not add modes here: {_null_phrase(gain)}",
                              "whether training adds modes")
    rho = order.detail.get("rho", float("nan"))
    clause = _verdict_clause(order, f"the larger modes come first (ρ = {rho:+.2f})",
                             f"the larger modes do not come first (ρ = {rho:+.2f}; {_null_phrase(order)})",
                             "whether the larger modes come first")
    return (f"Above their sampling error, the model carries {int(counts[0])} of the data's modes at step 0 and "
            f"{int(counts[len(steps) - 1])} at the end{null_text}; {carried} {_sentence(clause)}")


def logits_sentence(steps, readings: Sequence[Reading], alignment: Verdict) -> str:
    """Lens 2 on this run: α on the whole matrix and the alignment of the logit subspace with the data's modes."""
    a0, a1 = (next(iter(r.alpha["original"].values())) for r in (readings[0], readings[-1]))
    d = alignment.detail
    null = "" if d.get("null_overlap") is None else f", shuffled-trained model: {d['null_overlap']:.2f}"
    clause = _verdict_clause(alignment, "it is more aligned than every null, and the shuffled-trained model is not",
                             f"the alignment does not reproduce: {_null_phrase(alignment)}",
                             "whether it is more aligned than every null")
    return (f"On the whole matrix, α (original reading) goes from {a0:.2f} at step 0 to {a1:.2f} at the end. The "
            f"logit subspace meets the data's modes at a mean cosine of {d['overlap']:.2f} (step 0: "
            f"{d['step0_overlap']:.2f}, random: {d['random_mean']:.2f}{null}); {clause}")


def geometry_sentence(first: Reading, last: Reading, verdicts: dict, null: Reading | None = None) -> str:
    """Lens 3 on this run: the word and context geometry against the NTP-SVM solution's factors, at step
    0, at the end and for the learned-nothing model. Plain text (a glued text holds no math), so the
    solution is named in words."""
    words, approach = verdicts["words"], verdicts["approach"]
    null_w = "" if null is None else f", shuffled-trained model: {null.geometry['words']:.2f}"
    w = _verdict_clause(words, "the permutation null is rejected for it alone",
                        "the finding does not reproduce" + (" (the shuffled-trained model rejects it too)"
                                                            if words.detail.get("null_p") is not None
                                                            and words.detail["null_p"] <= GEOMETRY_LEVEL
                                                            and words.detail["p"] <= GEOMETRY_LEVEL else ""),
                        "whether only training gives it")
    gain = approach.detail.get("trained") or {}
    c = _verdict_clause(approach, f"a gain of {gain.get('estimate', float('nan')):+.2f} over step 0 that "
                                  "the shuffled-trained model does not show",
                        f"the gain does not reproduce: {_null_phrase(approach)}", "whether it gains over step 0")
    null_c = "" if null is None else f", shuffled-trained model: {null.geometry['contexts']:.2f}"
    return (f"The word geometry correlates with the word factor of the NTP-SVM solution at r = "
            f"{last.geometry['words']:.2f} at the end (step 0: {first.geometry['words']:.2f}{null_w}); {w} "
            f"The context geometry correlates with its context factor at r = {last.geometry['contexts']:.2f} "
            f"(step 0: {first.geometry['contexts']:.2f}{null_c}); {c}")


def llc_sentence(first: dict, last: dict, null: dict | None, growth: Verdict) -> str:
    """Lens 4 on this run: λ̂ at step 0, at the end and of the learned-nothing model, and the verdict."""
    clause = _verdict_clause(growth, "λ̂ rises with training and not without it",
                             f"the rise does not reproduce: {_null_phrase(growth)}", "whether it rises with learning")
    null_text = "" if null is None else f", and {null['llc']:.1f} ± {null['se']:.1f} for the shuffled-trained model"
    return (f"The estimate λ̂ is {first['llc']:.1f} ± {first['se']:.1f} at step 0 and {last['llc']:.1f} ± "
            f"{last['se']:.1f} at the end{null_text}; {clause}")


# ---------------------------------------------------------------------------
# Cost of a run (lowrank-book plan)
# ---------------------------------------------------------------------------

def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for parameter ``values`` (:class:`lib.book.costs.HeavyStep`): the
    logit matrices and the SGLD chains of every checkpoint (and of the learned-nothing model's final one),
    for the model ``values`` name, and training the learned-nothing model (the suite only)."""
    hub = values.get("hub_model") or "suite"
    if hub == "suite":       # the Introduction's suite: 8 checkpoints, its ci vocabulary and context
        shape = SIZES.get(values.get("model_size"), SIZES["p-70m"])
        n_ckpt, d, layers, vocab, ctx = 8, shape["hidden_size"], shape["num_hidden_layers"], 2048, 64
    else:                    # Pythia-70m's shape at each revision
        n_ckpt, d, layers, vocab, ctx = len(values.get("hub_revisions") or []), 512, 6, 50304, 2048
    m, S = int(values.get("n_histories") or 0), int(values.get("n_symbols") or 0)
    body = 12 * layers * d * d
    params = body + 2 * vocab * d
    logit_flops = 2 * m * S * (body + vocab * d)                 # one token per (history, future) on the cache
    logit_bytes = 3 * m * S * vocab * 8                          # the matrix, its float64 copy and centred parts
    llc_ctx = min(int(values.get("llc_context") or ctx), ctx)
    tokens = int(values.get("llc_chains") or 0) * int(values.get("llc_draws") or 0) * int(values.get("llc_batch_size") or 0) * llc_ctx
    llc_flops = 6 * params * tokens + 2 * params * int(values.get("llc_windows") or 0) * llc_ctx
    # one chain: lib.llc's sampler runs the chains in chunks that fit the device (lib.sgld.chains_per_chunk)
    llc_bytes = (4 * params * 4 + int(values.get("llc_batch_size") or 1) * llc_ctx * (vocab + 16 * d * layers) * 4)
    readings = n_ckpt + (1 if hub == "suite" else 0)            # the learned-nothing model's final checkpoint
    steps = [HeavyStep("extended logit matrices", f"{readings} checkpoints, |H| = {m}, |F| = {S}, V = {vocab}",
                       logit_bytes, readings * logit_flops, "n_histories, n_symbols"),
             HeavyStep("SGLD chains of λ̂", f"{readings} checkpoints, {values.get('llc_chains')} chains × "
                       f"{values.get('llc_draws')} draws × {values.get('llc_batch_size')} windows of {llc_ctx} tokens",
                       llc_bytes, readings * llc_flops, "llc_chains, llc_draws, llc_batch_size, llc_context")]
    if hub == "suite":       # the learned-nothing model: the Introduction's recipe on the shuffled stream, once
        intro = substrate.intro_settings(values.get("profile") or "ci")
        size = values.get("model_size") if values.get("model_size") in SIZES else "p-70m"
        n_train, batch, context = intro["train_steps"], intro["batch_size"], intro["context_length"]
        steps.append(HeavyStep(f"training {size} on the shuffled stream (cached after the first run)",
                               f"{n_train} steps of {batch} windows × {context} tokens, vocabulary {vocab}", 0.0,
                               substrate.training_step_flops(size, vocab, batch, context) * n_train,
                               "model_size"))
    return steps


__all__ = ["ALIGNED_PAIRS", "ALIGNMENT_Z", "GEOMETRY_LEVEL", "NO_NULL_FOR_HUB", "RESOLUTION", "CarriedModes",
           "LensModels", "LensStudy", "Reading", "Verdict", "alignment_verdict", "all_of", "carried_above_noise",
           "carried_verdict", "effect_record", "learned_verdict", "mixing_problem", "null_conditionals",
           "order_effect", "read_null", "rho_with_se", "geometry_sentence", "geometry_verdicts", "heavy_steps", "learning_order", "lens_models",
           "llc_sentence", "llc_verdict", "logits_sentence", "modes_sentence", "prepare_study", "read_checkpoint",
           "read_checkpoints"]
