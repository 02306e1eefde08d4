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
(:func:`readout_link`). The chapter's study, which puts these on its model's checkpoints
(:func:`lib.lenses_experiments.prepare_study`, :func:`lib.lenses_experiments.read_checkpoint`), and
the verdicts that decide its findings against their nulls, are in :mod:`lib.lenses_experiments`.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import product
from typing import Sequence

import numpy as np
import scipy.special
import torch

from . import insensitivity as ins
from . import llc
from . import logits as lg
from . import ntp
from .book.moved import forward_moved
from .modes import Modes
from .models import prefix_reuse
from .models.causal_lm import CausalLM, sequence_loss
from .text.ngrams import count_ngrams

MAX_CONTEXTS = 2_000_000        # contexts h∘f that model_conditional may ask a model for
BLOCK_BYTES = 2 ** 28           # memory of one block of histories in model_conditional
READINGS = ("literal", "original")


class LensesError(ValueError):
    """Bad input to a lens, refused before any work."""


def check_positive_int(name: str, value, minimum: int = 1) -> int:
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
    vocab_size = check_positive_int("vocab_size", vocab_size, 2)
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
    alphabet_size, l = check_positive_int("alphabet_size", alphabet_size), check_positive_int("l", l)
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

    ``model``: a :class:`lib.models.causal_lm.CausalLM`, a ``transformers`` causal LM (wrapped, as
    :func:`lib.logits.as_model` reads it) or an oracle (a callable context → next-token
    log-probabilities or logits; give ``alphabet_size`` when it cannot be read off an answer).
    ``symbols`` (optional): a map of the V tokens onto a smaller alphabet 0..|Σ|−1 (e.g.
    :func:`symbol_table`); the probabilities of merged tokens are summed, at every position.
    Refused if it is not a map onto 0..|Σ|−1. Exact over the full vocabulary, the cost grows as
    V^(l−1): more than ``max_contexts`` contexts h∘f are refused before any work."""
    l = check_positive_int("l", l)
    histories = _histories(histories)
    model = lg.as_model(model)
    if isinstance(model, CausalLM):
        V = model.vocab_size
    else:
        V = check_positive_int("alphabet_size", alphabet_size) if alphabet_size is not None else lg.vocab_size(model, histories[0])
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
    r = check_positive_int("r", r)
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
    return lg.random_subspace_cosine_trials(check_positive_int("n", n), check_positive_int("r", r), check_positive_int("trials", trials),
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
    k, n_histories = check_positive_int("k", k), check_positive_int("n_histories", n_histories, 2)
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

def language_model(model) -> CausalLM:
    """``model`` as a :class:`lib.models.causal_lm.CausalLM`: itself, or a ``transformers`` causal LM
    wrapped (:func:`lib.logits.as_model`). An oracle is refused: Lens 3 and Lens 4 read the model's
    hidden states, output embedding and parameters, which an oracle does not have."""
    model = lg.as_model(model)
    if not isinstance(model, CausalLM):
        raise LensesError(f"parameter 'model' must be a language model (a CausalLM or a transformers causal LM): "
                          f"this lens reads its hidden states, output embedding or parameters; got "
                          f"{type(model).__name__}")
    return model


def context_embeddings(model, histories) -> np.ndarray:
    """(m, d): the model's final hidden state (after its last layer norm) at the last position of each
    history, the context embedding h_j of the NTP papers. Float64. ``model`` as :func:`language_model`
    reads it."""
    model = language_model(model)
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
    """(n, d): the rows of the model's output embedding (unembedding) for ``token_ids``. Float64.
    ``model`` as :func:`language_model` reads it."""
    _, head = prefix_reuse.lm_parts(language_model(model))
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.min() < 0 or ids.max() >= head.weight.shape[0]:
        raise LensesError(f"parameter 'token_ids' must be token ids below {head.weight.shape[0]}")
    return head.weight.detach().double().cpu().numpy()[ids]


def readout_link(model, histories, logit_rows) -> float:
    """Largest |(W h + b) − mean − L_M(h, ∅)| over histories and tokens: the context embeddings
    (:func:`context_embeddings`) and the whole output embedding W (with its bias b, if any) give
    the empty-future logit rows of Lens 2, centred as Def 2.1. Zero up to round-off. ``model`` as
    :func:`language_model` reads it."""
    model = language_model(model)
    _, head = prefix_reuse.lm_parts(model)
    H = context_embeddings(model, histories)
    W = head.weight.detach().double().cpu().numpy()
    logits = H @ W.T + (head.bias.detach().double().cpu().numpy() if getattr(head, "bias", None) is not None else 0.0)
    logits -= logits.mean(axis=1, keepdims=True)
    return float(np.abs(logits - np.asarray(logit_rows, dtype=np.float64)).max())


def geometry_correlation(A, B, n_perm: int, seed: int = 0) -> tuple[float, float]:
    """(r, p): the correlation of the off-diagonal entries of two cosine matrices on the same items
    (:func:`lib.ntp.offdiag_corr`) and its permutation p-value against ``n_perm`` relabellings of
    B's items (:func:`lib.ntp.permutation_null`), (1 + #{null ≥ r}) / (n_perm + 1)."""
    r = ntp.offdiag_corr(A, B)
    null = ntp.permutation_null(A, B, n_perm=n_perm, seed=seed)
    return r, (1 + int((null >= r).sum())) / (n_perm + 1)


def paired_correlation_difference(A1, A0, B, n_boot: int, seed: int = 0) -> tuple[float, float]:
    """(d, se): d = corr(A1, B) − corr(A0, B) of off-diagonal cosines (:func:`lib.ntp.offdiag_corr`), with
    the standard error of a paired bootstrap over the items: each replicate draws the items with
    replacement and correlates the pairs of distinct draws (i ≠ j as items) in both matrices."""
    A1, A0, B = (np.asarray(M, dtype=np.float64) for M in (A1, A0, B))
    n = B.shape[0]
    d = ntp.offdiag_corr(A1, B) - ntp.offdiag_corr(A0, B)
    rng = np.random.default_rng(seed)
    iu = np.triu_indices(n, 1)
    reps = []
    for _ in range(check_positive_int("n_boot", n_boot, 2)):
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
    """SGLD settings of λ̂ for a language model: by default those of the chapter "Learning coefficients"'s
    language-model curve (its ``lm_*`` presets), which none of its claims validates; a reader may override
    them. Whether a run's chains mixed is checked on each estimate (split R̂, ESS)."""
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
    in plain ("eager") operations, which batch under ``vmap``. ``lm`` as :func:`language_model` reads
    it. The estimate's warnings (:attr:`lib.llc.LLCResult.warnings`: λ̂ < 0, split R̂ above 1.05, λ̂
    far above d/2) go to the terminal that runs the book, not a page; the result holds them."""
    lm = language_model(lm)
    lm.model.set_attn_implementation("eager")
    with llc.warnings_to_terminal(llc.LLCWarning):
        return llc.estimate_llc(lm.model, sequence_loss, (windows,), gamma=settings.gamma, eps=settings.eps,
                                chains=settings.chains, draws=settings.draws, burn_in=settings.burn_in,
                                batch_size=settings.batch_size, seed=seed, device=device, progress=False)


# ---------------------------------------------------------------------------
# Over training: the modes a model carries, and its conditional as a language
# ---------------------------------------------------------------------------

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


def language_condition_error(model, histories, symbols) -> float:
    """The model's conditional is a language (Chen & Murfet Def 3.2: summing over the last position gives the shorter conditional) as the
    chain rule builds it: the largest of |Σ_{y₂} P_M(y₁y₂ | x) − P_M(y₁ | x)| and |Σ_y P_M(y | x) − 1|
    over the histories, with :func:`model_conditional` at l = 2 and l = 1 on the alphabet
    ``symbols``. Zero up to the round-off of the model's float32 distributions, which the two calls
    evaluate in different batches (about 1e-7). ``model`` as :func:`model_conditional` reads it."""
    model = lg.as_model(model)
    two = model_conditional(model, histories, 2, symbols)
    one = model_conditional(model, histories, 1, symbols)
    n = one.shape[1]
    marginal = two.reshape(len(one), n, n).sum(axis=2)
    return float(max(np.abs(marginal - one).max(), np.abs(two.sum(axis=1) - 1).max(), np.abs(one.sum(axis=1) - 1).max()))


__all__ = ["CorpusView", "LLCSettings", "LensesError", "alignment_null", "all_futures", "alpha_by_size",
           "carried_shares", "chain_rule", "check_positive_int", "check_symbols", "checkpoint_llc", "conditional_at",
           "context_embeddings", "corpus_view", "empty_future_link", "geometry_correlation", "history_dependent",
           "history_side", "language_condition_error", "language_model", "lens_alignment", "model_conditional", "modes_carried",
           "normalised_spectrum", "paired_correlation_difference", "readout_link", "symbol_table", "word_embeddings"]

# Names that moved to the chapter's study, lib.lenses_experiments: still answered here (lib.book.moved).
__getattr__ = forward_moved(__name__, {name: "lib.lenses_experiments" for name in (
    "ALIGNED_PAIRS", "ALIGNMENT_Z", "LensModels", "LensStudy", "Reading", "Verdict", "alignment_verdict",
    "carried_verdict", "geometry_sentence", "geometry_verdicts", "heavy_steps", "learning_order", "lens_models",
    "llc_sentence", "llc_verdict", "logits_sentence", "modes_sentence", "prepare_study", "read_checkpoint",
    "read_checkpoints")})
