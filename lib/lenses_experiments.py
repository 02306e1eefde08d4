"""The chapter "Three lenses on one model": its study, verdicts, sentences and cost.

The mathematics of the lenses (the alphabet, the model's conditional by the chain rule, the
logit matrix's spectrum and α, principal angles between history subspaces, the corpus view,
the model's geometry, λ̂ of a checkpoint) is in :mod:`lib.lenses`. Here it is put together as the
chapter runs it: :func:`lens_models` gives the model over its training (one size of the
Introduction's suite, or one hub model's revisions: :func:`lib.substrate.model_source`),
:func:`prepare_study` builds everything that does not depend on the model, :func:`read_checkpoint`
measures one checkpoint through every lens (:func:`read_checkpoints` all of them), the verdicts
decide the chapter's findings against their nulls (the step-0 model, the shuffled corpus, random
subspaces, relabelled items), one sentence per lens says what the run found, and
:func:`heavy_steps` is the chapter's cost for ``lowrank-book plan``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from scipy.stats import spearmanr

from . import insensitivity as ins
from . import languages
from . import logits as lg
from . import ntp, substrate
from .book.costs import HeavyStep
from .empirical_modes import shuffle_tokens
from .lenses import (LLCSettings, CorpusView, LensesError, alpha_by_size, check_positive_int, checkpoint_llc,
                     conditional_at, context_embeddings, corpus_view, empty_future_link, geometry_correlation,
                     history_dependent, history_side, lens_alignment, model_conditional, normalised_spectrum,
                     paired_correlation_difference, readout_link, symbol_table, word_embeddings)
from .logit_rank_experiments import overlap_against_control
from .models.causal_lm import CausalLM
from .models.mini_pythia import SIZES
from .modes import Modes
from .substrate import training_windows

ALIGNMENT_Z = 2.0               # a difference counts when it is at least this many standard errors

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
                       "min_ess": float(np.min(res.diagnostics["ess"])), "init_loss": res.init_loss,
                       "divergent": len(res.diagnostics["divergent"]), "seconds": res.seconds}
    return reading


# ---------------------------------------------------------------------------
# Over training: what relates to what, each against its null
# ---------------------------------------------------------------------------

@dataclass
class Verdict:
    """A finding's value and, where the run cannot decide it, the reason (``undecided``)."""
    value: float | None
    undecided: str | None = None
    detail: dict = field(default_factory=dict)


def carried_verdict(counts) -> Verdict:
    """Does the trained model carry more of the data's modes than its step-0 self? The value is the
    final count minus the step-0 count (the null: the model before training); it is exact, so the
    finding is decided as reproduces when positive."""
    counts = np.asarray(counts)
    return Verdict(float(counts[-1] - counts[0]), None, {"step0": int(counts[0]), "final": int(counts[-1])})


def learning_order(steps, modes: Modes, conditionals, level: float, n_boot: int, seed: int) -> Verdict:
    """Are larger modes learned earlier? Spearman's ρ between σ_α and the step at which the model's
    coordinate on mode α covers ``level`` of its way (:func:`lib.insensitivity.learning_steps`), over
    the modes carried at the end, with a 90% bootstrap interval
    (:func:`lib.insensitivity.rank_correlation`). The value is the interval's upper end: below 0
    reproduces, a lower end above 0 does not; an interval across 0 (or fewer than 3 modes) is
    undecided."""
    curves = ins.learning_curves(modes, np.asarray(conditionals), rows=modes.rows)
    when, carried = ins.learning_steps(steps, curves, modes.sigma, level=level, learned=level)
    rc = ins.rank_correlation(modes.sigma[:len(when)][carried], when[carried], n_boot=n_boot, seed=seed)
    detail = {**rc, "steps": when.tolist(), "carried": carried.tolist()}
    if rc["n"] < 3:
        return Verdict(None, f"only {rc['n']} modes are carried at the end; a rank correlation needs 3", detail)
    if rc["low"] <= 0 <= rc["high"]:
        return Verdict(rc["high"], f"the 90% interval of ρ, [{rc['low']:+.2f}, {rc['high']:+.2f}], contains 0 "
                                   f"({rc['n']} modes over {len(steps)} checkpoints)", detail)
    return Verdict(rc["high"], None, detail)


def alignment_verdict(study: LensStudy, first: Reading, last: Reading, *, n_boot: int, null_trials: int, seed: int,
                      resolution: float) -> Verdict:
    """Is the trained model's logit subspace aligned with the data's modes beyond every null?

    The overlap is the mean cosine of :func:`lens_alignment` between the history-dependent parts of
    the final L_M(H, F) and of q (rank ``study.align_rank``). It is compared, with a paired bootstrap
    over histories (:func:`lib.logit_rank_experiments.overlap_against_control`), with (i) the step-0
    model's logits against q, (ii) the final logits against the shuffled corpus's conditional, and
    with (iii) random subspaces (its z-score). The value is the smallest of the three z's:
    ≥ :data:`ALIGNMENT_Z` reproduces; below it, a difference that the run could have resolved
    (2 s.e. ≤ ``resolution``, in mean cosine) does not reproduce, otherwise undecided."""
    if first.logits is None or last.logits is None:
        raise LensesError("the first and last readings must keep their logit matrices (keep_logits=True)")
    q, r = study.long.q_x, study.align_rank
    data = history_dependent(study.long.conditional, q)
    trained, start = history_dependent(last.logits, q), history_dependent(first.logits, q)
    shuffled = history_dependent(study.shuffled, q)
    vs_step0 = overlap_against_control((trained, data), (start, data), 1, r, n_boot=n_boot, null_trials=null_trials,
                                       seed=seed)
    vs_shuffled = overlap_against_control((trained, data), (trained, shuffled), 1, r, n_boot=n_boot,
                                          null_trials=null_trials, seed=seed + 1)
    zs = {"step-0 model": vs_step0.z, "shuffled corpus": vs_shuffled.z, "random subspaces": vs_step0.z_test_vs_random}
    ses = {"step-0 model": vs_step0.se, "shuffled corpus": vs_shuffled.se, "random subspaces": vs_step0.null_sd}
    detail = {"overlap": vs_step0.test, "step0_overlap": vs_step0.control, "shuffled_overlap": vs_shuffled.control,
              "random_mean": vs_step0.null_mean, "random_sd": vs_step0.null_sd, "z": zs, "se": ses}
    weakest = min(zs, key=zs.get)
    if zs[weakest] < ALIGNMENT_Z and 2 * ses[weakest] > resolution:
        return Verdict(zs[weakest], f"against the {weakest} the difference is {zs[weakest]:.2f} s.e. with 2 s.e. = "
                                    f"{2 * ses[weakest]:.3f} > {resolution} in mean cosine", detail)
    return Verdict(zs[weakest], None, detail)


def geometry_verdicts(study: LensStudy, first: Reading, last: Reading, *, level: float, n_boot: int, seed: int,
                      resolution: float) -> dict[str, Verdict]:
    """The NTP chapter's comparisons on this model, and whether training moves toward them.

    ``contexts``, ``words``: the permutation p-value of the final model's context (word) geometry
    against the L^mm factors' (the NTP chapter's rule: p ≤ ``level`` reproduces). ``approach``: the
    gain in that correlation for contexts from step 0 to the end, in paired-bootstrap standard errors
    over contexts (:func:`paired_correlation_difference`): ≥ :data:`ALIGNMENT_Z` reproduces; below it, a
    gain the run could have resolved (2 s.e. ≤ ``resolution``) does not, otherwise undecided."""
    out = {name: Verdict(last.geometry[f"{name}_p"], None, {"r": last.geometry[name], "step0_r": first.geometry[name]})
           for name in ("contexts", "words")}
    d, se = paired_correlation_difference(last.context_cos, first.context_cos, study.context_mm, n_boot, seed)
    detail = {"difference": d, "se": se}
    if not se > 0:
        out["approach"] = Verdict(None, f"the paired bootstrap has no spread (s.e. = {se}), so the gain {d:+.3f} "
                                        "cannot be put in standard errors", detail)
        return out
    z = d / se
    if z < ALIGNMENT_Z and 2 * se > resolution:
        out["approach"] = Verdict(float(z), f"the gain {d:+.3f} is {z:.2f} s.e. with 2 s.e. = {2 * se:.3f} > "
                                            f"{resolution}", detail)
    else:
        out["approach"] = Verdict(float(z), None, detail)
    return out


def llc_verdict(readings: Sequence[Reading], counts) -> Verdict:
    """Does λ̂ grow as the model comes to carry modes? The value is (λ̂_final − λ̂_0) / s.e. (chains are
    independent, so s.e.² = s.e._0² + s.e._final²), the null being the step-0 model: ≥ :data:`ALIGNMENT_Z`
    reproduces, ≤ −ALIGNMENT_Z does not; in between the chains' spread is too large to say. The
    detail adds Spearman's ρ over checkpoints between λ̂ and the number of modes carried."""
    first, last = readings[0].llc, readings[-1].llc
    se = math.hypot(first["se"], last["se"])
    z = (last["llc"] - first["llc"]) / se if se > 0 else float("nan")
    lam = [r.llc["llc"] for r in readings]
    rho = float(spearmanr(lam, counts).statistic) if np.ptp(counts) > 0 and np.ptp(lam) > 0 else float("nan")
    detail = {"difference": last["llc"] - first["llc"], "se": se, "rho_with_modes": rho,
              "max_rhat": max(r.llc["rhat"] for r in readings), "min_ess": min(r.llc["min_ess"] for r in readings)}
    if not math.isfinite(z):
        return Verdict(None, "the chains' standard error is not finite", detail)
    if abs(z) < ALIGNMENT_Z:
        return Verdict(z, f"λ̂ moves by {detail['difference']:+.1f} from step 0 to the end, {z:+.2f} s.e.: the "
                          "chains' spread is too large to say", detail)
    return Verdict(z, None, detail)


# ---------------------------------------------------------------------------
# The model and its corpus: one size of the Introduction's suite, or one hub model's revisions
# ---------------------------------------------------------------------------

@dataclass
class LensModels:
    """One model over its training: ``steps`` (checkpoint labels, step 0 first, the final one last),
    ``load(step)`` → :class:`lib.models.causal_lm.CausalLM`, and the token stream it was trained on
    (``tokens`` with its document starts ``doc_offsets``; its vocabulary ``vocab_size`` = the width
    of the model's logits)."""
    name: str
    steps: list
    load: Callable[[Any], CausalLM]
    tokens: np.ndarray
    doc_offsets: np.ndarray
    vocab_size: int
    decode: Callable[[Sequence[int]], str]


def lens_models(*, profile: str, seed: int, model_size: str, hub_model: str = "suite", hub_revisions=(),
                corpus: str | None = None, max_corpus_mb: float = 1000.0, device="cpu") -> LensModels:
    """The model the lenses look at (:func:`lib.substrate.model_source`).

    ``hub_model = "suite"``: the size ``model_size`` of the Introduction's suite at ``profile`` and
    ``seed`` (its settings and streams, :func:`lib.substrate.intro_settings`; trained by
    :func:`lib.substrate.train_book_suite`, or read from the cache, for that one size) at its saved
    checkpoints. Otherwise a hub name or local directory at ``hub_revisions``
    (:class:`lib.models.hub.ModelSeries`, every revision resolved before any work) and the training
    documents of ``corpus`` tokenized by its tokenizer."""
    device = device if isinstance(device, str) else str(device)      # "cpu", "cuda:0", "auto"
    source = substrate.model_source(hub_model, hub_revisions, profile=profile, seed=seed, device=device,
                                    model_sizes=[model_size])
    if hub_model == "suite":
        train = source.train
        return LensModels(model_size, source.steps, lambda step: source.load(model_size, step),
                          np.asarray(train.tokens), np.asarray(train.doc_offsets), int(source.tokenizer.vocab_size),
                          source.decode)
    text = substrate.load_text(corpus, max_corpus_mb)
    train_idx, _ = text.split(heldout_fraction=substrate.HELDOUT_FRACTION, seed=seed)
    docs = [np.asarray(source.encode(text.documents[i]), dtype=np.int64) for i in train_idx]
    docs = [d for d in docs if d.size]
    offsets = np.cumsum([0] + [d.size for d in docs[:-1]])
    vocab = source.load(hub_model, source.steps[-1]).vocab_size
    return LensModels(str(hub_model), source.steps, lambda step: source.load(hub_model, step), np.concatenate(docs),
                      offsets, int(vocab), source.decode)


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


def modes_sentence(steps, counts, order: Verdict) -> str:
    """Lens 1 on this run: the modes carried over training and the order in which they came."""
    counts = np.asarray(counts)
    later = np.flatnonzero(counts > counts[0])
    when = f", the first added by step {steps[later[0]]}" if later.size else ""
    rho = order.detail.get("rho", float("nan"))
    clause = _finding_clause(order, order.value is not None and order.value < 0,
                             f"the larger modes come first (ρ = {rho:+.2f})",
                             f"the larger modes do not come first (ρ = {rho:+.2f})",
                             "whether the larger modes come first")
    return (f"The model carries {int(counts[0])} of the data's modes at step 0 and {int(counts[-1])} at the end"
            f"{when}. {_sentence(clause)}")


def logits_sentence(steps, readings: Sequence[Reading], alignment: Verdict) -> str:
    """Lens 2 on this run: α on the whole matrix and the alignment of the logit subspace with the data's modes."""
    a0, a1 = (next(iter(r.alpha["original"].values())) for r in (readings[0], readings[-1]))
    d = alignment.detail
    weakest = min(d["z"], key=d["z"].get)
    clause = _finding_clause(alignment, alignment.value is not None and alignment.value >= ALIGNMENT_Z,
                             f"it is more aligned than every null (the closest, the {weakest}, by {d['z'][weakest]:.1f} s.e.)",
                             f"it is not more aligned than the {weakest} (z = {d['z'][weakest]:.1f})",
                             "whether it is more aligned than every null")
    return (f"On the whole matrix, α (original reading) goes from {a0:.2f} at step 0 to {a1:.2f} at the end. The "
            f"logit subspace meets the data's modes at a mean cosine of {d['overlap']:.2f} (step 0: "
            f"{d['step0_overlap']:.2f}, random: {d['random_mean']:.2f}); {clause}")


def geometry_sentence(first: Reading, last: Reading, verdicts: dict) -> str:
    """Lens 3 on this run: the word and context geometry against the NTP-SVM solution's factors, at step
    0 and at the end. Plain text (a glued text holds no math), so the solution is named in words."""
    words, approach = verdicts["words"], verdicts["approach"]
    w = ("the permutation null is rejected" if words.value is not None and words.value <= 0.01 else
         "the permutation null is not rejected") if words.undecided is None else "undecided"
    c = _finding_clause(approach, approach.value is not None and approach.value >= ALIGNMENT_Z,
                        f"that is a gain of {approach.value:.1f} s.e. over step 0",
                        f"there is no gain beyond step 0 (z = {approach.value:.1f})",
                        "whether it gains over step 0")
    words_note = "" if words.undecided is None else f" {_sentence(words.undecided)}"
    return (f"The word geometry correlates with the word factor of the NTP-SVM solution at r = "
            f"{last.geometry['words']:.2f} at the end (step 0: {first.geometry['words']:.2f}; {w}).{words_note} "
            f"The context geometry correlates with its context factor at r = {last.geometry['contexts']:.2f} "
            f"(step 0: {first.geometry['contexts']:.2f}); {c}")


def llc_sentence(readings: Sequence[Reading], growth: Verdict) -> str:
    """Lens 4 on this run: λ̂ at step 0 and at the end, and its rank correlation with the modes carried."""
    first, last = readings[0].llc, readings[-1].llc
    clause = _finding_clause(growth, growth.value is not None and growth.value >= ALIGNMENT_Z,
                             f"that is a rise of {growth.value:.1f} s.e.", f"there is no rise ({growth.value:.1f} s.e.)",
                             "whether it rises")
    rho = growth.detail.get("rho_with_modes", float("nan"))
    tail = (f" Over the checkpoints its rank correlation with the number of modes carried is {rho:+.2f}."
            if math.isfinite(rho) else "")
    return (f"The estimate λ̂ is {first['llc']:.1f} ± {first['se']:.1f} at step 0 and {last['llc']:.1f} ± "
            f"{last['se']:.1f} at the end; {clause}{tail}")


# ---------------------------------------------------------------------------
# Cost of a run (lowrank-book plan)
# ---------------------------------------------------------------------------

def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for parameter ``values`` (:class:`lib.book.costs.HeavyStep`): the
    logit matrices and the SGLD chains of every checkpoint, for the model ``values`` name."""
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
    return [HeavyStep("extended logit matrices", f"{n_ckpt} checkpoints, |H| = {m}, |F| = {S}, V = {vocab}",
                      logit_bytes, n_ckpt * logit_flops, "n_histories, n_symbols"),
            HeavyStep("SGLD chains of λ̂", f"{n_ckpt} checkpoints, {values.get('llc_chains')} chains × "
                      f"{values.get('llc_draws')} draws × {values.get('llc_batch_size')} windows of {llc_ctx} tokens",
                      llc_bytes, n_ckpt * llc_flops, "llc_chains, llc_draws, llc_batch_size, llc_context")]


__all__ = ["ALIGNED_PAIRS", "ALIGNMENT_Z", "LensModels", "LensStudy", "Reading", "Verdict", "alignment_verdict",
           "carried_verdict", "geometry_sentence", "geometry_verdicts", "heavy_steps", "learning_order", "lens_models",
           "llc_sentence", "llc_verdict", "logits_sentence", "modes_sentence", "prepare_study", "read_checkpoint",
           "read_checkpoints"]
