"""Three lenses on one model: modes, logit rank and next-token geometry, with the learning coefficient.

The three works this book reproduces look at next-token prediction through three pieces of
linear algebra, each on its own models and data. This module puts them on *one* trained
language model, at each of its training checkpoints, and *one* corpus:

* **The alphabet and the histories.** Σ is the ``n_symbols − 1`` most frequent tokens of the
  corpus plus one symbol OTHER for all the rest (:func:`lib.languages.reduce_vocabulary`), so
  every matrix below is exact and small. A history x is a string of k kept tokens (no OTHER);
  the ``n_histories`` most frequent ones are kept (:func:`lib.ntp.extract_contexts`), and the
  same histories serve every lens (:class:`CorpusView`).
* **Lens 1, modes** (Chen & Murfet §4, Def 4.13): the data's conditional q(y|x) on those
  histories and its modes (:class:`lib.modes.Modes` of the joint q(x) q(y|x)); the model's own
  conditional P_M(y|x) (:func:`model_conditional`); the model's coordinates on the data's modes
  (:func:`lib.insensitivity.learning_curves`) and how many modes it carries (:func:`modes_carried`).
* **Lens 2, logit rank** (Golowich, Liu & Shetty Defs 2.1–2.2, App. A.1): the extended logit
  matrix L_M(H, F) on the same histories, with the futures F = {∅} ∪ Σ' (the empty future and
  each kept token), its spectrum and the exponent α at several sizes (:func:`alpha_by_size`), and
  principal angles between history subspaces (:func:`lens_alignment`).
* **Lens 3, NTP geometry** (Thrampoulidis 2024; Zhao et al. 2024): the support matrix S of the
  same contexts, the nuclear-norm NTP-SVM solution L^mm (:func:`lib.ntp.solve_ntp_svm`) and its
  factors, against the model's final hidden states and output embeddings
  (:func:`context_embeddings`, :func:`word_embeddings`).
* **Lens 4, the learning coefficient** (Chen & Murfet §2.3): λ̂ at each checkpoint by SGLD
  (:func:`checkpoint_llc`, :func:`lib.llc.estimate_llc`).

Two identities link the lenses and are checked on every checkpoint: with the empty future the
logit row of h is the centred log of P_M(·|h) (Def 2.1; :func:`empty_future_link`), and the
model's final hidden state h and output embeddings W give that same row as the centred W h (+ b)
(:func:`readout_link`). :func:`prepare_study` builds everything that does not depend on the
model, :func:`read_checkpoint` measures one checkpoint, and the functions of the last section
decide the chapter's findings against their nulls (the step-0 model, the shuffled corpus, random
subspaces, relabelled items).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Any, Callable, Sequence

import numpy as np
import scipy.special
import torch

from . import insensitivity as ins
from . import languages
from . import logits as lg
from . import ntp, ntp_experiments
from .logit_experiments import overlap_against_control
from .modes import Modes
from .models import prefix_reuse
from .models.causal_lm import CausalLM

MAX_CONTEXTS = 2_000_000        # contexts h∘f that model_conditional may ask a model for
BLOCK_BYTES = 2 ** 28           # memory of one block of histories in model_conditional
ALIGNMENT_Z = 2.0               # a difference counts when it is at least this many standard errors
READINGS = ("literal", "original")


class LensesError(ValueError):
    """Bad input to a lens, refused before any work."""


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise LensesError(f"parameter '{name}' must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _histories(histories) -> list[tuple[int, ...]]:
    if isinstance(histories, (str, bytes)) or not hasattr(histories, "__len__") or len(histories) == 0:
        raise LensesError("parameter 'histories' must be a non-empty list of token-id sequences")
    out = []
    for h in histories:
        arr = np.asarray(h)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise LensesError(f"parameter 'histories' must hold 1-D integer token sequences; got {arr.dtype} of "
                              f"shape {arr.shape}")
        out.append(tuple(int(t) for t in arr))
    return out


# ---------------------------------------------------------------------------
# The alphabet: kept tokens plus OTHER
# ---------------------------------------------------------------------------

def symbol_table(kept, vocab_size: int) -> np.ndarray:
    """The map token id → symbol of :func:`lib.languages.reduce_vocabulary`'s ``symbols``: the token
    ``kept[i]`` is symbol i, every other token the last symbol, OTHER (``kept`` may end with −1,
    the catch-all's marker). A length-``vocab_size`` integer array onto 0..|Σ|−1."""
    vocab_size = _positive_int("vocab_size", vocab_size, 2)
    kept = np.asarray(kept, dtype=np.int64).ravel()
    kept = kept[kept >= 0]
    if kept.size == 0 or kept.max() >= vocab_size or len(set(kept.tolist())) != kept.size:
        raise LensesError(f"parameter 'kept' must list distinct token ids below vocab_size = {vocab_size}")
    if kept.size >= vocab_size:
        raise LensesError("every token is kept: there is no OTHER symbol to merge the rest into")
    table = np.full(vocab_size, kept.size, dtype=np.int64)
    table[kept] = np.arange(kept.size)
    return table


def check_symbols(symbols, vocab_size: int) -> tuple[np.ndarray, int]:
    """``symbols`` as an int64 map of the ``vocab_size`` tokens onto 0..|Σ|−1, and |Σ|.

    Refused (:class:`LensesError`) unless it is a 1-D integer array of length ``vocab_size`` whose
    values are exactly 0..|Σ|−1, each one used (a map *onto* the alphabet)."""
    arr = np.asarray(symbols)
    if arr.ndim != 1 or arr.shape[0] != vocab_size or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise LensesError(f"parameter 'symbols' must map each of the {vocab_size} tokens to a symbol: a 1-D integer "
                          f"array of length {vocab_size}; got dtype {arr.dtype}, shape {arr.shape}")
    arr = arr.astype(np.int64)
    used = np.unique(arr)
    if used[0] != 0 or not np.array_equal(used, np.arange(used.size)):
        raise LensesError(f"parameter 'symbols' must be a map onto 0..|Σ|−1 (every symbol used, none negative); "
                          f"its values are {used[:8].tolist()}{' …' if used.size > 8 else ''}")
    return arr, int(used.size)


# ---------------------------------------------------------------------------
# Lens 1: the model's own conditional P_M(y | x) by the chain rule
# ---------------------------------------------------------------------------

def all_futures(alphabet_size: int, l: int) -> list[tuple[int, ...]]:
    """Every string over 0..alphabet_size−1 of length 0, 1, …, l−1: shortest first, each length in
    lexicographic order (the empty future first). The futures the chain rule for Σ^l needs."""
    alphabet_size, l = _positive_int("alphabet_size", alphabet_size), _positive_int("l", l)
    return [f for j in range(l) for f in product(range(alphabet_size), repeat=j)]


def chain_rule(next_probs: np.ndarray, onehot: np.ndarray, l: int) -> np.ndarray:
    """P(σ_1 … σ_l | h) for a block of histories from next-token distributions.

    ``next_probs``: (b, |F|, V), row [i, f] the distribution of the next token after h_i∘f for the
    futures f of :func:`all_futures` (V, l) in that order; ``onehot``: (V, |Σ|), the map token →
    symbol. With Q_{l−1}(f)[σ] = Σ_{t→σ} P(t | h∘f) and, going back one position at a time,

        Q_j(f)[σ, ρ] = Σ_{t→σ} P(t | h∘f) · Q_{j+1}(f∘t)[ρ],

    the result Q_0(∅) is (b, |Σ|^l), columns in lexicographic order of (σ_1, …, σ_l)."""
    b, n_f, V = next_probs.shape
    offsets = np.concatenate([[0], np.cumsum([V ** j for j in range(l)])])
    if offsets[-1] != n_f:
        raise LensesError(f"next_probs holds {n_f} futures; the chain rule to l = {l} over {V} tokens needs {offsets[-1]}")
    Q = next_probs[:, offsets[l - 1]:offsets[l]] @ onehot                        # (b, V^(l−1), |Σ|)
    for j in range(l - 2, -1, -1):
        P = next_probs[:, offsets[j]:offsets[j + 1]]                                # (b, V^j, V)
        Q = Q.reshape(b, V ** j, V, -1)
        Q = np.einsum("bpt,ts,bptr->bpsr", P, onehot, Q, optimize=True).reshape(b, V ** j, -1)
    return Q[:, 0]


def model_conditional(model, histories, l, symbols=None, *, alphabet_size: int | None = None,
                      max_contexts: int = MAX_CONTEXTS, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The model's conditional P_M(y | x): rows the histories, columns every y ∈ Σ^l in lexicographic
    order; every row sums to one (float64).

    Computed by the chain rule from next-token log-probabilities, P_M(y_1…y_l | x) = Π_j
    P_M(y_j | x∘y_{<j}), read through :func:`lib.logits.extended_logit_matrix` with the futures of
    :func:`all_futures` (every token string shorter than l), so each history's key/value cache is
    reused for all its futures. Each next-token distribution is renormalised in float64 before the
    product (the model's float32 log-softmax sums to one only to round-off).

    ``model``: a :class:`lib.models.causal_lm.CausalLM` or an oracle (a callable context → next-token
    log-probabilities or logits; give ``alphabet_size`` when it cannot be read off an answer).
    ``symbols`` (optional): a map of the V tokens onto a smaller alphabet 0..|Σ|−1 (e.g.
    :func:`symbol_table`); the probabilities of merged tokens are summed, at every position.
    Refused if it is not a map onto 0..|Σ|−1. Exact over the full vocabulary, the cost grows as
    V^(l−1): more than ``max_contexts`` contexts h∘f are refused before any work."""
    l = _positive_int("l", l)
    histories = _histories(histories)
    model = lg.as_model(model)
    if isinstance(model, CausalLM):
        V = model.vocab_size
    else:
        V = _positive_int("alphabet_size", alphabet_size) if alphabet_size is not None else lg.vocab_size(model, histories[0])
    if symbols is None:
        table, n_symbols = np.arange(V), V
    else:
        table, n_symbols = check_symbols(symbols, V)
    n_futures = sum(V ** j for j in range(l))
    if len(histories) * n_futures > max_contexts:
        raise LensesError(f"model_conditional at l = {l} reads {len(histories)} histories × {n_futures:,} futures "
                          f"(every token string shorter than l over V = {V}) = {len(histories) * n_futures:,} "
                          f"contexts, above max_contexts = {max_contexts:,}; lower l or use fewer histories")
    onehot = np.zeros((V, n_symbols))
    onehot[np.arange(V), table] = 1.0
    futures = all_futures(V, l)
    per_history = n_futures * V * 20 + n_symbols ** l * 8        # float32 rows, float64 copies, the result
    block = max(1, int(block_bytes // per_history))
    out = np.empty((len(histories), n_symbols ** l))
    for a in range(0, len(histories), block):
        chunk = histories[a:a + block]
        logp = lg.extended_logit_matrix(model, chunk, futures, None, centered=False, alphabet_size=V)
        logp = np.asarray(logp, dtype=np.float64).reshape(len(chunk), n_futures, V)
        probs = np.exp(logp - scipy.special.logsumexp(logp, axis=2, keepdims=True))
        out[a:a + len(chunk)] = chain_rule(probs, onehot, l)
    return out


def empty_future_link(logit_rows, conditional) -> float:
    """Largest |L_M(h, ∅)[z] − (log P_M(z|h) − mean_z' log P_M(z'|h))| over histories and tokens: the
    empty-future block of the extended logit matrix against the centred log of the model's
    conditional at l = 1 over the full vocabulary (Def 2.1 of Golowich, Liu & Shetty). Zero up to
    round-off."""
    L = np.asarray(logit_rows, dtype=np.float64)
    logp = np.log(np.asarray(conditional, dtype=np.float64))
    if L.shape != logp.shape:
        raise LensesError(f"the logit rows {L.shape} and the conditional {logp.shape} must have the same shape")
    return float(np.abs(L - (logp - logp.mean(axis=1, keepdims=True))).max())


# ---------------------------------------------------------------------------
# Comparing lenses: principal angles between history subspaces
# ---------------------------------------------------------------------------

def lens_alignment(A, B, r) -> np.ndarray:
    """Cosines (descending) of the principal angles between the top-r subspaces of two matrices on the
    same histories (rows).

    Each matrix's top-r subspace is the span, in R^{|H|}, of its r leading left singular vectors
    (the history side of its rank-r truncated SVD; for M = √q(x) q(y|x) these are the right modes
    ṽ_α of Chen & Murfet, for a logit matrix the column space of Golowich et al. §3.2). The columns
    of A and B may differ in number and meaning. Computed by :func:`lib.logits.column_space_angles`
    (:func:`lib.modes.principal_angles`); its null is :func:`alignment_null`."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[0]:
        raise LensesError(f"A and B must be matrices on the same histories (rows); got shapes {A.shape} and {B.shape}")
    r = _positive_int("r", r)
    if r > min(A.shape) or r > min(B.shape):
        raise LensesError(f"parameter 'r' = {r} exceeds the rank a {A.shape} or {B.shape} matrix can have")
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
        raise LensesError("A and B must be finite")
    return lg.column_space_angles(history_side(A), history_side(B), r)


def history_side(X) -> np.ndarray:
    """An m × m matrix with the same left singular vectors and singular values as a wide X (m × n,
    n > m): U Σ from the eigendecomposition X Xᵀ = U Σ² Uᵀ. For a logit matrix (m histories, |F|·V
    columns) it replaces the SVD of X by one of an m × m matrix, as
    :func:`lib.logits.normalised_singular_values` does for large wide matrices; a singular value
    below about 1e-8 σ_1 is not resolved (round-off of Σ²). X itself when n ≤ m."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise LensesError(f"X must be a matrix; got shape {X.shape}")
    if X.shape[1] <= X.shape[0]:
        return X
    values, vectors = np.linalg.eigh(X @ X.T)
    return vectors[:, ::-1] * np.sqrt(np.clip(values[::-1], 0.0, None))


def normalised_spectrum(L) -> np.ndarray:
    """:func:`lib.logits.normalised_singular_values` of L (singular values over √(entries), App. A.1.2),
    computed on :func:`history_side` (L)."""
    L = np.asarray(L, dtype=np.float64)
    R = history_side(L)
    return lg.normalised_singular_values(R) * np.sqrt(R.size / L.size)


def alignment_null(n: int, r: int, trials: int, seed: int = 0) -> np.ndarray:
    """(trials, r): the cosines of :func:`lens_alignment` between two independent uniformly random
    r-dimensional subspaces of R^n (:func:`lib.logits.random_subspace_cosine_trials`)."""
    return lg.random_subspace_cosine_trials(_positive_int("n", n), _positive_int("r", r), _positive_int("trials", trials),
                                            seed)


def history_dependent(X, q) -> np.ndarray:
    """√q(x) (X(x, ·) − Σ_x' q(x') X(x', ·)): the part of X that depends on the history, in the
    coordinates of L²(q) over the histories (the Euclidean product of these rows is ⟨·,·⟩_H).

    Two matrices that share only their history-independent part (the column mean over histories,
    e.g. q(y) for a conditional) would otherwise look aligned in their first direction whatever
    they are; comparing these parts asks whether they depend on the history in the same way."""
    X = np.asarray(X, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64).ravel()
    if X.ndim != 2 or q.shape[0] != X.shape[0] or (q < 0).any() or not q.sum() > 0:
        raise LensesError(f"q must be non-negative weights, one per row of X {X.shape}; got shape {q.shape}")
    q = q / q.sum()
    return np.sqrt(q)[:, None] * (X - q @ X)


# ---------------------------------------------------------------------------
# The corpus seen through the alphabet
# ---------------------------------------------------------------------------

@dataclass
class CorpusView:
    """The corpus at history length k: the m most frequent k-strings of kept tokens and what follows them.

    ``data`` (:class:`lib.ntp.NTPData`): the contexts in symbols (m × k), their frequencies π̂ (= q(x)
    renormalised over these histories), next-symbol distributions P (|Σ| × m), counts and labels;
    ``tokens`` (m × k): the same histories as token ids of the model's vocabulary."""

    k: int
    data: ntp.NTPData
    tokens: np.ndarray

    @property
    def histories(self) -> list[tuple[int, ...]]:
        return [tuple(int(t) for t in row) for row in self.tokens]

    @property
    def q_x(self) -> np.ndarray:
        return self.data.pi

    @property
    def conditional(self) -> np.ndarray:
        """q(y|x): (m, |Σ|), rows the histories."""
        return self.data.P.T

    @cached_property
    def modes(self) -> Modes:
        """The modes of the joint q(x) q(y|x) on these histories (Chen & Murfet §4.3)."""
        return Modes.from_joint(self.q_x[:, None] * self.conditional, zero_rows="raise", normalize=True)


def corpus_view(documents: Sequence[np.ndarray], kept: np.ndarray, labels: Sequence[str], k: int, n_histories: int,
                min_count: int = 2) -> CorpusView:
    """:class:`CorpusView` of ``documents`` (symbol streams of :func:`lib.languages.reduce_vocabulary`,
    one array per document: symbol i < |Σ|−1 is the token ``kept[i]``, the last symbol OTHER): the
    at most ``n_histories`` most frequent k-strings of kept symbols seen ``min_count`` times or more
    (:func:`lib.ntp.extract_contexts`)."""
    kept = np.asarray(kept, dtype=np.int64)
    if kept.size < 2 or kept[-1] != -1 or (kept[:-1] < 0).any():
        raise LensesError("parameter 'kept' must list the kept tokens' ids and end with −1 (OTHER), as "
                          "lib.languages.reduce_vocabulary's symbols do when some tokens are merged")
    k, n_histories = _positive_int("k", k), _positive_int("n_histories", n_histories, 2)
    data = ntp.extract_contexts(list(documents), list(labels), len(kept), k, None, min_count)
    m = min(n_histories, data.m)
    counts = data.counts[:, :m]
    n_j = counts.sum(0)
    data = ntp.NTPData(pi=n_j / n_j.sum(), P=counts / n_j, counts=counts, contexts=data.contexts[:m],
                       labels=data.labels, info={**data.info, "kept": m})
    return CorpusView(k, data, kept[data.contexts])


def conditional_at(stream, doc_offsets, contexts, n_symbols: int, unseen: str = "raise") -> np.ndarray:
    """The next-symbol distributions of a symbol stream after each of ``contexts`` (m × k symbols):
    (m, n_symbols), counted within documents (:func:`lib.text.ngrams.count_ngrams`).

    A context the stream never shows has no conditional: ``unseen = "raise"`` refuses it;
    ``"marginal"`` gives it the stream's next-symbol distribution over all contexts of length k,
    which is what any context's conditional is, in expectation, for a stream without sequential
    structure (the shuffled corpus, whose rarer histories a small corpus may lack)."""
    from .text.ngrams import count_ngrams

    if unseen not in ("raise", "marginal"):
        raise LensesError(f"parameter 'unseen' must be 'raise' or 'marginal'; got {unseen!r}")
    contexts = np.asarray(contexts, dtype=np.int64)
    if contexts.ndim != 2 or contexts.size == 0:
        raise LensesError(f"parameter 'contexts' must be an (m, k) array of symbols; got shape {contexts.shape}")
    k = contexts.shape[1]
    nc = count_ngrams(np.asarray(stream), k, 1, doc_offsets, n_symbols)
    weights = n_symbols ** np.arange(k - 1, -1, -1)
    have, want = nc.prefixes @ weights, contexts @ weights
    rows = np.searchsorted(have, want)
    found = (rows < have.size) & (have[np.minimum(rows, have.size - 1)] == want)
    if not found.all() and unseen == "raise":
        raise LensesError(f"{int((~found).sum())} of the {len(want)} contexts never occur in this stream "
                          f"(first: {contexts[np.flatnonzero(~found)[0]].tolist()})")
    all_counts = nc.counts.toarray()
    counts = np.zeros((len(want), n_symbols))
    counts[:, nc.suffixes[:, 0]] = all_counts[np.minimum(rows, have.size - 1)]
    marginal = np.zeros(n_symbols)
    marginal[nc.suffixes[:, 0]] = all_counts.sum(0)
    counts[~found] = marginal
    return counts / counts.sum(1, keepdims=True)


# ---------------------------------------------------------------------------
# Lens 3: what the model's geometry is made of
# ---------------------------------------------------------------------------

def context_embeddings(model, histories) -> np.ndarray:
    """(m, d): the model's final hidden state (after its last layer norm) at the last position of each
    history, the context embedding h_j of the NTP papers. Float64."""
    histories = _histories(histories)
    backbone, _ = prefix_reuse.lm_parts(model)
    out: list[np.ndarray | None] = [None] * len(histories)
    by_length: dict[int, list[int]] = {}
    for i, h in enumerate(histories):
        by_length.setdefault(len(h), []).append(i)
    with torch.inference_mode():
        for length, idx in by_length.items():
            if length == 0:
                raise LensesError(f"history {idx[0]} is empty: a language model needs a token of context")
            ids = torch.tensor([histories[i] for i in idx], dtype=torch.long, device=model.device)
            hidden = backbone(input_ids=ids, use_cache=False).last_hidden_state[:, -1].double().cpu().numpy()
            for r, i in enumerate(idx):
                out[i] = hidden[r]
    return np.stack(out)


def word_embeddings(model, token_ids) -> np.ndarray:
    """(n, d): the rows of the model's output embedding (unembedding) for ``token_ids``. Float64."""
    _, head = prefix_reuse.lm_parts(model)
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.min() < 0 or ids.max() >= head.weight.shape[0]:
        raise LensesError(f"parameter 'token_ids' must be token ids below {head.weight.shape[0]}")
    return head.weight.detach().double().cpu().numpy()[ids]


def readout_link(model, histories, logit_rows) -> float:
    """Largest |(W h + b) − mean − L_M(h, ∅)| over histories and tokens: the context embeddings
    (:func:`context_embeddings`) and the whole output embedding W (with its bias b, if any) give
    the empty-future logit rows of Lens 2, centred as Def 2.1. Zero up to round-off."""
    _, head = prefix_reuse.lm_parts(model)
    H = context_embeddings(model, histories)
    W = head.weight.detach().double().cpu().numpy()
    logits = H @ W.T + (head.bias.detach().double().cpu().numpy() if getattr(head, "bias", None) is not None else 0.0)
    logits -= logits.mean(axis=1, keepdims=True)
    return float(np.abs(logits - np.asarray(logit_rows, dtype=np.float64)).max())


def geometry_correlation(A, B, n_perm: int, seed: int = 0) -> tuple[float, float]:
    """(r, p): the correlation of the off-diagonal entries of two cosine matrices on the same items
    (:func:`lib.ntp_experiments.offdiag_corr`) and its permutation p-value against ``n_perm`` relabellings of
    B's items (:func:`lib.ntp_experiments.permutation_null`), (1 + #{null ≥ r}) / (n_perm + 1)."""
    r = ntp_experiments.offdiag_corr(A, B)
    null = ntp_experiments.permutation_null(A, B, n_perm=n_perm, seed=seed)
    return r, (1 + int((null >= r).sum())) / (n_perm + 1)


def paired_correlation_difference(A1, A0, B, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """(d, se): d = corr(A1, B) − corr(A0, B) of off-diagonal cosines (:func:`lib.ntp_experiments.offdiag_corr`), with
    the standard error of a paired bootstrap over the items: each replicate draws the items with
    replacement and correlates the pairs of distinct draws (i ≠ j as items) in both matrices."""
    A1, A0, B = (np.asarray(M, dtype=np.float64) for M in (A1, A0, B))
    n = B.shape[0]
    d = ntp_experiments.offdiag_corr(A1, B) - ntp_experiments.offdiag_corr(A0, B)
    rng = np.random.default_rng(seed)
    iu = np.triu_indices(n, 1)
    reps = []
    for _ in range(_positive_int("n_boot", n_boot, 2)):
        idx = rng.integers(0, n, n)
        a, b = idx[iu[0]], idx[iu[1]]
        keep = a != b
        a, b = a[keep], b[keep]
        x1, x0, y = A1[a, b], A0[a, b], B[a, b]
        reps.append(np.corrcoef(x1, y)[0, 1] - np.corrcoef(x0, y)[0, 1])
    return float(d), float(np.nanstd(reps, ddof=1))


# ---------------------------------------------------------------------------
# Lens 2: spectrum and α at several sizes
# ---------------------------------------------------------------------------

def alpha_by_size(L, n_futures: int, factors: Sequence[float]) -> dict[str, dict[float, float]]:
    """α of App. A.1.1 (:func:`lib.logits.fit_power_law`, both readings) on the normalised singular
    values of L downsized by each factor (App. A.1.2, :func:`lib.logits.downsized`: the first
    |H|/√i histories and |F|/√i futures). Returns {reading: {factor: α}}."""
    out: dict[str, dict[float, float]] = {r: {} for r in READINGS}
    for factor in factors:
        s = normalised_spectrum(lg.downsized(L, n_futures, float(factor)))
        for reading in READINGS:
            out[reading][float(factor)] = lg.fit_power_law(s, reading).alpha
    return out


# ---------------------------------------------------------------------------
# Lens 4: the learning coefficient of a checkpoint
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LLCSettings:
    """SGLD settings of λ̂ for a language model: those the chapter "Learning coefficients" validated
    (its ``lm_*`` parameters) unless a reader overrides them."""
    windows: int
    chains: int
    draws: int
    burn_in: int
    batch_size: int
    eps: float
    gamma: float


def checkpoint_llc(lm, windows: torch.Tensor, settings: LLCSettings, seed: int, device="cpu"):
    """λ̂ of a checkpoint (:func:`lib.llc.estimate_llc` with the per-window next-token loss
    :func:`lib.models.causal_lm.sequence_loss` on ``windows``; nβ = n / log n). The attention runs
    in plain ("eager") operations, which batch under ``vmap``."""
    from . import llc
    from .models.causal_lm import sequence_loss

    lm.model.config._attn_implementation = "eager"
    return llc.estimate_llc(lm.model, sequence_loss, (windows,), gamma=settings.gamma, eps=settings.eps,
                            chains=settings.chains, draws=settings.draws, burn_in=settings.burn_in,
                            batch_size=settings.batch_size, seed=seed, device=device, progress=False)


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
    from .empirical_modes import shuffle_tokens
    from .substrate import training_windows

    tokens = np.asarray(tokens)
    doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
    mapped, kept = languages.reduce_vocabulary(tokens, _positive_int("n_symbols", n_symbols, 3), vocab_size)
    if kept[-1] != -1:
        raise LensesError(f"the stream has at most {n_symbols} distinct tokens: no OTHER symbol, use fewer symbols")
    labels = [str(int(t)) for t in kept[:-1]] + ["OTHER"]
    ends = np.append(doc_offsets[1:], len(mapped))
    documents = [mapped[a:b] for a, b in zip(doc_offsets, ends)]
    lengths = sorted({_positive_int("history_lengths", k) for k in history_lengths})
    views = {k: corpus_view(documents, kept, labels, k, n_histories) for k in lengths}
    long_k = lengths[-1]
    long = views[long_k]
    if not 1 <= align_rank <= long.data.m // 4:
        raise LensesError(f"parameter 'align_rank' = {align_rank} must be in [1, m/4] for the m = {long.data.m} "
                          "histories (two subspaces of dimension above m/2 must intersect)")
    shuffled = conditional_at(shuffle_tokens(mapped, seed), doc_offsets, long.data.contexts, len(kept), "marginal")
    svm = (solve_svm or (lambda S: ntp.solve_ntp_svm(S, solver="SCS", eps=1e-9, max_iters=1_000_000)))(long.data.S)
    W_mm, H_mm = ntp.ufm_factors(svm.L)
    windows = training_windows(tokens, _positive_int("llc_windows", llc_windows), _positive_int("llc_context", llc_context, 2),
                               seed)
    return LensStudy(views=views, long_k=long_k, shuffled=shuffled, table=symbol_table(kept, vocab_size),
                     kept=kept[:-1], futures=[()] + [(int(t),) for t in kept[:-1]], svm=svm,
                     context_mm=ntp_experiments.cosine_matrix(H_mm.T), word_mm=ntp_experiments.cosine_matrix(W_mm[:-1]),
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
    context_cos = ntp_experiments.cosine_matrix(context_embeddings(model, long.histories))
    word_cos = ntp_experiments.cosine_matrix(word_embeddings(model, study.kept), center=True)
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


def carried_shares(modes: Modes, conditionals) -> np.ndarray:
    """(T, rank): c_α(w_t) / σ_α, the share of each data mode's coordinate that the model's conditional
    carries at each checkpoint (:func:`lib.insensitivity.learning_curves`; for q itself every share
    is 1, eq. 41 of Chen & Murfet)."""
    curves = ins.learning_curves(modes, np.asarray(conditionals), rows=modes.rows)
    return curves / modes.sigma[:curves.shape[1]]


def modes_carried(shares, level: float = 0.5) -> np.ndarray:
    """The number of modes whose share is at least ``level`` at each checkpoint (the chapter
    "Insensitivity" counts a mode as carried at one half)."""
    return (np.asarray(shares) >= level).sum(axis=-1)


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
    over histories (:func:`lib.logit_experiments.overlap_against_control`), with (i) the step-0
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
    from scipy.stats import spearmanr

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
    """The model the lenses look at.

    ``hub_model = "suite"``: the size ``model_size`` of the Introduction's suite at ``profile`` and
    ``seed`` (its settings and streams, :func:`lib.substrate.intro_settings`; trained by
    :func:`lib.substrate.train_book_suite`, or read from the cache, for that one size) at its saved
    checkpoints. Otherwise a hub name or local directory at ``hub_revisions``
    (:class:`lib.models.hub.ModelSeries`, every revision resolved before any work) and the training
    documents of ``corpus`` tokenized by its tokenizer."""
    from . import substrate

    device = device if isinstance(device, str) else str(device)      # "cpu", "cuda:0", "auto"
    if hub_model == "suite":
        p = substrate.intro_settings(profile, seed, device if device == "auto" else torch.device(device).type)
        text = substrate.load_text(p["corpus"], p["max_corpus_mb"])
        tok, train, held, _ = substrate.tokenized_corpus(text, p["tokenizer"], seed)
        suite = substrate.train_book_suite(train, held, tok, profile=profile, model_sizes=[model_size],
                                           context_length=p["context_length"], train_steps=p["train_steps"],
                                           batch_size=p["batch_size"], seed=seed, device=device)
        return LensModels(model_size, list(suite.checkpoint_steps), lambda step: suite.load(model_size, step, device),
                          np.asarray(train.tokens), np.asarray(train.doc_offsets), int(tok.vocab_size), tok.decode)
    from .models.hub import ModelSeries

    series = ModelSeries(hub_model, list(hub_revisions), device=device)
    text = substrate.load_text(corpus, max_corpus_mb)
    train_idx, _ = text.split(heldout_fraction=substrate.HELDOUT_FRACTION, seed=seed)
    docs = [np.asarray(series.encode(text.documents[i]), dtype=np.int64) for i in train_idx]
    docs = [d for d in docs if d.size]
    offsets = np.cumsum([0] + [d.size for d in docs[:-1]])
    vocab = series.load(series.revisions[-1]).vocab_size
    return LensModels(str(hub_model), list(series.revisions), series.load, np.concatenate(docs), offsets, int(vocab),
                      series.decode)


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


def language_condition_error(model, histories, symbols) -> float:
    """The model's conditional is a language (Chen & Murfet Def 3.2: summing over the last position gives the shorter conditional) as the
    chain rule builds it: the largest of |Σ_{y₂} P_M(y₁y₂ | x) − P_M(y₁ | x)| and |Σ_y P_M(y | x) − 1|
    over the histories, with :func:`model_conditional` at l = 2 and l = 1 on the alphabet
    ``symbols``. Zero up to the round-off of the model's float32 distributions, which the two calls
    evaluate in different batches (about 1e-7)."""
    two = model_conditional(model, histories, 2, symbols)
    one = model_conditional(model, histories, 1, symbols)
    n = one.shape[1]
    marginal = two.reshape(len(one), n, n).sum(axis=2)
    return float(max(np.abs(marginal - one).max(), np.abs(two.sum(axis=1) - 1).max(), np.abs(one.sum(axis=1) - 1).max()))


# ---------------------------------------------------------------------------
# One sentence per lens, from the run's numbers and verdicts
# ---------------------------------------------------------------------------

def _finding_clause(verdict: Verdict, reproduces: bool, yes: str, no: str) -> str:
    if verdict.undecided is not None:
        return f"undecided at these settings ({verdict.undecided})"
    return yes if reproduces else no


def modes_sentence(steps, counts, order: Verdict) -> str:
    """Lens 1 on this run: the modes carried over training and the order in which they came."""
    counts = np.asarray(counts)
    later = np.flatnonzero(counts > counts[0])
    when = f", the first added by step {steps[later[0]]}" if later.size else ""
    clause = _finding_clause(order, order.value is not None and order.value < 0,
                             f"the larger modes come first (ρ = {order.detail.get('rho', float('nan')):+.2f})",
                             f"the larger modes do not come first (ρ = {order.detail.get('rho', float('nan')):+.2f})")
    return (f"the model carries {int(counts[0])} of the data's modes at step 0 and {int(counts[-1])} at the end"
            f"{when}; whether larger modes are learned earlier: {clause}.")


def logits_sentence(steps, readings: Sequence[Reading], alignment: Verdict) -> str:
    """Lens 2 on this run: α on the whole matrix and the alignment of the logit subspace with the data's modes."""
    a0, a1 = (next(iter(r.alpha["original"].values())) for r in (readings[0], readings[-1]))
    d = alignment.detail
    weakest = min(d["z"], key=d["z"].get)
    clause = _finding_clause(alignment, alignment.value is not None and alignment.value >= ALIGNMENT_Z,
                             f"more aligned than every null (the closest, the {weakest}, by {d['z'][weakest]:.1f} s.e.)",
                             f"not more aligned than the {weakest} (z = {d['z'][weakest]:.1f})")
    return (f"α (whole matrix, original reading) goes from {a0:.2f} at step 0 to {a1:.2f} at the end, and the logit "
            f"subspace meets the data's modes at a mean cosine of {d['overlap']:.2f} (step 0: {d['step0_overlap']:.2f}, "
            f"random: {d['random_mean']:.2f}): {clause}.")


def geometry_sentence(first: Reading, last: Reading, verdicts: dict) -> str:
    """Lens 3 on this run: the word and context geometry against L^mm, at step 0 and at the end."""
    words, approach = verdicts["words"], verdicts["approach"]
    w = _finding_clause(words, words.value is not None and words.value <= 0.01,
                        "the permutation null is rejected", "the permutation null is not rejected")
    c = _finding_clause(approach, approach.value is not None and approach.value >= ALIGNMENT_Z,
                        f"a gain of {approach.value:.1f} s.e. over step 0",
                        f"no gain beyond step 0 (z = {approach.value:.1f})")
    return (f"the word geometry correlates with the L^mm factor at r = {last.geometry['words']:.2f} at the end "
            f"(step 0: {first.geometry['words']:.2f}; {w}), and the context geometry at r = "
            f"{last.geometry['contexts']:.2f} (step 0: {first.geometry['contexts']:.2f}; {c}).")


def llc_sentence(readings: Sequence[Reading], growth: Verdict) -> str:
    """Lens 4 on this run: λ̂ at step 0 and at the end, and its rank correlation with the modes carried."""
    first, last = readings[0].llc, readings[-1].llc
    clause = _finding_clause(growth, growth.value is not None and growth.value >= ALIGNMENT_Z,
                             f"a rise of {growth.value:.1f} s.e.", f"no rise ({growth.value:.1f} s.e.)")
    rho = growth.detail.get("rho_with_modes", float("nan"))
    tail = (f"; over the checkpoints its rank correlation with the number of modes carried is {rho:+.2f}"
            if math.isfinite(rho) else "")
    return (f"λ̂ is {first['llc']:.1f} ± {first['se']:.1f} at step 0 and {last['llc']:.1f} ± {last['se']:.1f} at the "
            f"end ({clause}){tail}.")


# ---------------------------------------------------------------------------
# Cost of a run (lowrank-book plan)
# ---------------------------------------------------------------------------

def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for parameter ``values`` (:class:`lib.book.costs.HeavyStep`): the
    logit matrices and the SGLD chains of every checkpoint, for the model ``values`` name."""
    from .book.costs import HeavyStep

    from .models.mini_pythia import SIZES

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
    llc_bytes = int(values.get("llc_chains") or 1) * (4 * params * 4 + int(values.get("llc_batch_size") or 1) * llc_ctx
                                                     * (vocab + 16 * d * layers) * 4)
    return [HeavyStep("extended logit matrices", f"{n_ckpt} checkpoints, |H| = {m}, |F| = {S}, V = {vocab}",
                      logit_bytes, n_ckpt * logit_flops, "n_histories, n_symbols"),
            HeavyStep("SGLD chains of λ̂", f"{n_ckpt} checkpoints, {values.get('llc_chains')} chains × "
                      f"{values.get('llc_draws')} draws × {values.get('llc_batch_size')} windows of {llc_ctx} tokens",
                      llc_bytes, n_ckpt * llc_flops, "llc_chains, llc_draws, llc_batch_size, llc_context")]


__all__ = ["ALIGNED_PAIRS", "CorpusView", "LLCSettings", "LensStudy", "LensesError", "Reading", "Verdict",
           "alignment_null", "alignment_verdict", "all_futures", "alpha_by_size", "carried_shares", "carried_verdict",
           "chain_rule", "check_symbols", "checkpoint_llc", "conditional_at", "context_embeddings", "corpus_view",
           "empty_future_link", "geometry_correlation", "geometry_verdicts", "heavy_steps", "history_dependent",
           "history_side", "normalised_spectrum", "LensModels", "lens_models", "read_checkpoints",
           "language_condition_error", "modes_sentence", "logits_sentence", "geometry_sentence",
           "llc_sentence",
           "learning_order", "lens_alignment", "llc_verdict", "model_conditional", "modes_carried",
           "paired_correlation_difference", "prepare_study", "read_checkpoint", "readout_link", "symbol_table",
           "word_embeddings"]
