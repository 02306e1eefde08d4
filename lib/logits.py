"""Extended logit matrices of language models and what §3 of Golowich, Liu & Shetty measures on them.

Golowich, Liu & Shetty, "Sequences of Logits Reveal the Low Rank Structure of Language
Models" (2025), §2–3 and Appendices A–B (seed 003). A model M answers next-token
log-probabilities log Pr_M[z | y] for a context y; its mean-centred logits (Def 2.1) are

    L_M[z | y] = log Pr_M[z | y] − (1/|Σ|) Σ_{z'} log Pr_M[z' | y],

and the extended logit matrix (Def 2.2) of histories H and futures F is

    L_M(H, F)[h, (f, z)] = L_M[z | h∘f],   column f_index·|Σ| + z  ("f-major").

With ``k`` (§3.1) only k columns are kept per future, L_{M,k}(H, F): for each f the k
tokens most likely after f alone (or k random tokens, App. A.1.5); the column of (f, z_j)
is f_index·k + j. Centring uses the full vocabulary before the selection.

What is here:

* :func:`extended_logit_matrix` — one implementation for every model: a
  :class:`lib.models.causal_lm.CausalLM` (or a hub / local name, loaded offline-aware), or any
  *oracle*, a callable context -> next-token log-probabilities or logits (as the ISANs of
  :mod:`lib.isan`). For a transformer each history is encoded once and its key/value cache
  reused for all its futures (:mod:`lib.models.prefix_reuse`, and on GPT-NeoX the last
  layer only where it is read, :mod:`lib.models.gpt_neox`); chunked to a memory budget,
  resumable, and split over ``torch.distributed`` ranks when launched that way.
  :func:`naive_extended_logit_matrix` is the reference: one forward pass of every h∘f.
* :func:`sample_spans` — histories and futures from documents as App. A.1.1 (characters) or
  A.3 (tokens).
* :func:`fit_power_law` — the α fit of App. A.1.1 in two readings (see its docstring),
  :func:`normalised_singular_values` (A.1.2), :func:`downsized` (A.1.2).
* :func:`rank_r_approximation`, :func:`average_kl` (Def 3.1), :func:`fact_a2_bound` (Fact A.2),
  :func:`rank1_baseline` (A.1.3).
* :func:`column_space_angles` and :func:`random_subspace_cosines` (§3.2, App. A.2).
* :func:`history_independent_fraction`, :func:`history_dependent_rms` — how much of a logit matrix is the
  same for every history, and how large the rest is.
* :func:`permute_tokens` (nonsense sets). LinGen (Algorithm 1, §3.3), its baselines and Lemma C.18's
  bound (App. C.4) use these matrices and are :mod:`lib.lingen`; their names answer here too.

The experiments of the chapter "Logit rank", with their controls and decision rules, are in
:mod:`lib.logit_rank_experiments`; loading a model by hub name and revision (:class:`ModelSeries`,
:func:`load_model`, :func:`load_tokenizer`, :func:`resolve_model_source`) is in
:mod:`lib.models.hub`, and those names are importable from here too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from .book import cache
from .book.moved import forward_moved
from .book.device import process_group
from .book.progress import progress as progress_bar
from .models import gpt_neox, prefix_reuse
from .models.causal_lm import (CausalLM, as_causal_lm, causal_lm_problem, check_fits_in_memory,
                               is_transformers_model, reads_input_ids)
# model loading by name and revision lives in lib.models.hub; its names stay importable from here
from .models.hub import ModelSeries, ModelSourceError, load_model, load_tokenizer, resolve_model_source  # noqa: F401
from .models.prefix_reuse import DEFAULT_BATCH_TOKENS
from .modes import principal_angles


class LogitsError(ValueError):
    """Bad input to an extended-logit-matrix computation, refused before any work."""


# Dense linear algebra goes through torch (float64), whose CPU threads the chapters set
# (``torch.set_num_threads``): NumPy's OpenBLAS starts its own threads, which on a shared
# machine made a 120 × 120 eigendecomposition 20 times slower and a 120 × 6000 SVD 25 times.

def as_tensor(x) -> torch.Tensor:
    """``x`` as a float64 CPU tensor (sharing memory where it can)."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))


def least_squares(A, b) -> np.ndarray:
    """argmin_x ‖A x − b‖₂ (the minimum-norm solution where A has dependent columns); ``b`` a vector,
    or a matrix whose columns are solved for at once (one factorisation of A for all of them)."""
    A, b = np.asarray(A, dtype=np.float64), np.asarray(b, dtype=np.float64)
    x = torch.linalg.lstsq(as_tensor(A), as_tensor(b.reshape(len(b), -1)), driver="gelsd").solution.numpy()
    return x[:, 0] if b.ndim == 1 else x


# ---------------------------------------------------------------------------
# models: a CausalLM or an oracle
# ---------------------------------------------------------------------------

def _is_lm(model) -> bool:
    return isinstance(model, CausalLM)


def is_language_model(model) -> bool:
    """Whether ``model`` is a language model rather than an oracle: a :class:`CausalLM`, a
    ``transformers`` model, or any ``torch.nn.Module`` whose ``forward`` takes ``input_ids``."""
    return _is_lm(model) or is_transformers_model(model) or reads_input_ids(model)


def as_model(model, device="cpu", name: str = "model"):
    """The one place where the library reads what it was given as a model: a :class:`CausalLM`
    (returned as is) or a callable oracle (context tuple -> next-token log-probabilities or logits).

    * A ``transformers`` causal LM (``AutoModelForCausalLM``, any ``PreTrainedModel`` with a
      language-model head) is wrapped: ``CausalLM(model)`` on the device it is on (``device`` is
      not used; the model is not moved), put in eval mode. It is never called as an oracle.
    * A ``transformers`` model without a language-model head, or an encoder–decoder, and any other
      ``torch.nn.Module`` whose ``forward`` takes ``input_ids`` (a language model that is not a
      ``PreTrainedModel``, e.g. an adapter wrapper) are refused with the fix.
    * A name or path is loaded with :meth:`CausalLM.from_pretrained` on ``device``
      (offline-aware: a hub name that cannot be had raises
      :class:`lib.models.causal_lm.ModelUnavailableError` at once).

    Refusals are :class:`LogitsError` naming the parameter ``name``."""
    if isinstance(model, (str, os.PathLike)):
        return CausalLM.from_pretrained(model, device=device)
    if _is_lm(model):
        return model
    if is_transformers_model(model):
        problem = causal_lm_problem(model)
        if problem is not None:
            raise LogitsError(f"parameter '{name}': {problem}")
        return as_causal_lm(model, name)
    if reads_input_ids(model):
        raise LogitsError(f"parameter '{name}' is a torch module that reads input_ids ({type(model).__name__}), a "
                          "language model, not an oracle (a callable context tuple -> next-token log-probabilities); "
                          "wrap it: CausalLM(model) (lib.models.causal_lm) where it is a transformers causal LM, "
                          "or pass an oracle that calls it")
    if callable(model):
        return model
    raise LogitsError(f"parameter '{name}' must be a CausalLM, a transformers causal LM (AutoModelForCausalLM), a "
                      f"model name or path, or a callable oracle; got {type(model).__name__}")


def context_limit(model) -> int | None:
    """Longest context the model accepts (max_position_embeddings), None for an oracle.
    ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    if not _is_lm(model):
        return None
    return getattr(model.config, "max_position_embeddings", None)


def vocab_size(model, probe: Sequence[int] | None = None) -> int:
    """|Σ|: the width of the model's next-token distribution (its language-model head), or of an
    oracle's answer to the context ``probe``. ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    if _is_lm(model):
        return model.vocab_size
    if probe is None:
        raise LogitsError("an oracle's vocabulary size is read off an answer: give alphabet_size")
    return int(np.asarray(model(tuple(probe))).shape[-1])


def as_sequences(name: str, seqs) -> list[tuple[int, ...]]:
    if isinstance(seqs, (str, bytes)) or not hasattr(seqs, "__len__"):
        raise LogitsError(f"parameter '{name}' must be a list of token-id sequences; got {type(seqs).__name__}")
    out = []
    for s in seqs:
        arr = np.asarray(s)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise LogitsError(f"parameter '{name}' must hold 1-D integer token sequences; got {arr.dtype} of "
                              f"shape {arr.shape}")
        out.append(tuple(int(x) for x in arr))
    return out


def _check_inputs(model, histories, futures, V, k, columns, need_nonempty_futures):
    if not histories:
        raise LogitsError("parameter 'histories' is empty: give at least one history")
    if not futures:
        raise LogitsError("parameter 'futures' is empty: give at least one future (() is the empty future Null)")
    lm = _is_lm(model)
    for name, seqs in (("histories", histories), ("futures", futures)):
        ids = [x for s in seqs for x in s]
        if ids and (min(ids) < 0 or max(ids) >= V):
            raise LogitsError(f"parameter '{name}' holds token ids in [{min(ids)}, {max(ids)}] but the vocabulary "
                              f"is 0..{V - 1}")
    if lm:
        empty = [i for i, h in enumerate(histories) if len(h) == 0]
        if empty:
            raise LogitsError(f"history {empty[0]} is empty: a language model needs at least one token of context "
                              f"({len(empty)} empty histories)")
    if need_nonempty_futures:
        empty = [j for j, f in enumerate(futures) if len(f) == 0]
        if empty:
            raise LogitsError(f"future {empty[0]} is empty: the top-k columns are the tokens most likely after f "
                              "alone, which needs f non-empty (drop empty futures, as App. A.1.1 does, or pass "
                              "'columns')")
    limit = context_limit(model)
    if limit is not None:
        longest = max(len(h) for h in histories) + max(len(f) for f in futures)
        if longest > limit:
            raise LogitsError(f"the longest context h∘f has {longest} tokens but the model reads at most {limit}; "
                              "use shorter histories or futures")
    if k is not None:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise LogitsError(f"parameter 'k' must be a positive integer or None; got {k!r}")
        if k > V:
            raise LogitsError(f"parameter 'k' = {k} exceeds the vocabulary size |Σ| = {V}")
    if columns is not None:
        columns = np.asarray(columns)
        if columns.ndim != 2 or columns.shape[0] != len(futures):
            raise LogitsError(f"parameter 'columns' must be a (|F|, k) array of token ids; got shape {columns.shape}")
        if columns.size and (columns.min() < 0 or columns.max() >= V):
            raise LogitsError("parameter 'columns' holds token ids outside the vocabulary")


def next_token_logprobs(model, contexts, alphabet_size: int | None = None) -> np.ndarray:
    """(|contexts|, |Σ|) array of log Pr_M[· | c] (an oracle's answers as given); ``model`` as
    :func:`as_model` reads it (a ``transformers`` causal LM is wrapped)."""
    model = as_model(model)
    contexts = as_sequences("contexts", contexts)
    if _is_lm(model):
        if any(len(c) == 0 for c in contexts):
            raise LogitsError("a language model needs at least one token of context; got an empty context")
        return prefix_reuse.next_token_rows(model, contexts).numpy()
    V = alphabet_size or vocab_size(model, contexts[0])
    out = np.empty((len(contexts), V))
    for i, c in enumerate(contexts):
        v = np.asarray(model(c), dtype=float)
        if v.shape != (V,):
            raise LogitsError(f"oracle: expected logits of shape ({V},), got {v.shape}")
        out[i] = v
    return out


def select_columns(model, futures, k: int, how: str = "top", seed: int = 0) -> np.ndarray:
    """(|F|, k) token ids kept per future: ``"top"`` = the k most likely after f alone (§3.1,
    descending probability), ``"random"`` = k distinct uniformly random tokens (App. A.1.5).
    ``model`` as :func:`as_model` reads it."""
    model = as_model(model)
    futures = as_sequences("futures", futures)
    if how not in ("top", "random"):
        raise LogitsError(f"parameter 'how' must be 'top' or 'random'; got {how!r}")
    V = vocab_size(model, futures[0] if futures else ())
    _check_inputs(model, [(0,)], futures, V, k, None, need_nonempty_futures=(how == "top"))
    if how == "random":
        rng = np.random.default_rng(seed)
        return np.stack([rng.choice(V, size=k, replace=False) for _ in futures]).astype(np.int64)
    lp = next_token_logprobs(model, futures)
    return np.argsort(-lp, axis=1, kind="stable")[:, :k].astype(np.int64)


# ---------------------------------------------------------------------------
# the extended logit matrix
# ---------------------------------------------------------------------------

def _oracle_rows(oracle, histories, futures, idx, V, cols, centered) -> np.ndarray:
    width = cols.shape[1] if cols is not None else V
    out = np.empty((len(idx), len(futures) * width))
    for r, i in enumerate(idx):
        for j, f in enumerate(futures):
            v = np.asarray(oracle(histories[i] + f), dtype=float)
            if v.shape != (V,):
                raise LogitsError(f"oracle: expected logits of shape ({V},), got {v.shape}")
            v = prefix_reuse.centre(v, centered)
            out[r, j * width:(j + 1) * width] = v if cols is None else v[cols[j]]
    return out


def extended_logit_matrix(model, histories, futures, k: int | None = None, centered: bool = True, *,
                          columns=None, column_selection: str = "top", column_seed: int = 0,
                          alphabet_size: int | None = None, rows_per_block: int = 32,
                          batch_tokens: int = DEFAULT_BATCH_TOKENS, workdir: str | Path | None = None,
                          progress: bool = False, distributed: bool = True, device="cpu",
                          pad_histories: bool | None = None, last_position_only: bool | None = None) -> np.ndarray:
    """The extended logit matrix L_M(H, F) of Def 2.2, or L_{M,k}(H, F) of §3.1 with ``k``.

    ``model``: a :class:`lib.models.causal_lm.CausalLM`, a ``transformers`` causal LM as a
    researcher has it (``AutoModelForCausalLM``; wrapped in ``CausalLM`` where it is, never called
    as an oracle), a model name or path (loaded with ``CausalLM.from_pretrained`` on ``device``), or
    an oracle (callable context tuple -> next-token log-probs or logits, float64); see
    :func:`as_model`. ``histories``, ``futures``: lists of token-id sequences (``()`` is
    the empty future Null). ``centered``: mean-centre over the full vocabulary (Def 2.1);
    False keeps the model's log-probabilities (an oracle's answers as given).

    Columns are f-major: f_index·|Σ| + z, or f_index·k + j for the j-th selected token of f.
    ``k`` selects columns per future with ``column_selection`` (``"top"``: the k most likely
    after f alone; ``"random"``: k random tokens, ``column_seed``); or pass ``columns``, a
    (|F|, k) array of token ids, directly.

    A language model is run history by history with key/value-cache reuse (see the module
    docstring); ``rows_per_block`` histories share a block, a pass over futures holds about
    ``batch_tokens`` tokens (histories' and futures'). ``pad_histories``: histories of unequal
    lengths share a block, their key/value caches left-padded (with an attention mask and
    position ids, so every entry is that of the unpadded pass); None (the default) does so
    where the model allows it (a plain ``DynamicCache``, and a probe on two histories that
    checks padded against unpadded entries), False keeps blocks of equal lengths, True insists
    (refused otherwise). ``last_position_only``: on a GPT-NeoX backbone (Pythia, the book's suite)
    the passes over futures run the model's layers directly and the last layer only at each
    future's last position (:func:`lib.models.gpt_neox.neox_last_hidden`); None (the default) does so where a probe
    finds it equal to the backbone's own forward, False always uses the backbone's forward,
    True insists (refused otherwise). ``workdir``: finished blocks are saved there and skipped on a rerun
    (resume). Under ``torchrun`` (``distributed=True``) each rank computes every
    world-th block and the blocks are gathered, so every rank returns the whole matrix.
    Returns float32 for a language model, float64 for an oracle. Bad input (empty or too
    long sequences, k > |Σ|, a matrix that cannot fit in memory) is refused before any work.
    """
    model = as_model(model, device)
    histories, futures = as_sequences("histories", histories), as_sequences("futures", futures)
    lm = _is_lm(model)
    if not lm and alphabet_size is None and histories and futures:
        alphabet_size = vocab_size(model, histories[0] + futures[0])
    if not lm and alphabet_size is None:
        raise LogitsError("give alphabet_size when histories or futures is empty")
    if not lm and (isinstance(alphabet_size, bool) or not isinstance(alphabet_size, (int, np.integer))
                   or alphabet_size < 1):
        raise LogitsError(f"parameter 'alphabet_size' must be a positive integer; got {alphabet_size!r}")
    V = model.vocab_size if lm else int(alphabet_size)
    if columns is None and k is not None:
        _check_inputs(model, histories, futures, V, k, None, need_nonempty_futures=column_selection == "top")
    else:
        _check_inputs(model, histories, futures, V, None, columns, need_nonempty_futures=False)
    width = V if (columns is None and k is None) else (k if columns is None else np.asarray(columns).shape[1])
    n_bytes = len(histories) * len(futures) * width * (4 if lm else 8)
    check_fits_in_memory(n_bytes, "cpu", f"the {len(histories)}×{len(futures) * width} extended logit matrix",
                         hint="use fewer histories or futures, or a smaller k")
    if columns is None and k is not None:
        columns = select_columns(model, futures, k, column_selection, column_seed)
    cols = None if columns is None else np.asarray(columns, dtype=np.int64)

    if not lm:
        return _oracle_rows(model, histories, futures, list(range(len(histories))), V, cols, centered)

    supported = prefix_reuse.padding_supported(model) if pad_histories is not False else False
    if pad_histories and not supported:
        raise LogitsError(f"pad_histories=True needs a plain DynamicCache and a backbone honouring attention_mask "
                          f"and position_ids; {type(model.model).__name__} fails that check (use None or False)")
    fast = prefix_reuse.last_position_supported(model) if last_position_only is not False else False
    if last_position_only and not fast:
        raise LogitsError(f"last_position_only=True needs a GPT-NeoX backbone with a plain DynamicCache whose layers "
                          f"the fast path reproduces; {type(model.model).__name__} fails that check (use None or False)")
    rank, world = process_group() if distributed else (0, 1)
    blocks = prefix_reuse.history_blocks(histories, rows_per_block, padded=supported)
    mine = [(b, idx) for b, idx in enumerate(blocks) if b % world == rank]
    wd = Path(workdir) if workdir is not None else None
    if wd is not None:
        wd.mkdir(parents=True, exist_ok=True)
    parts: dict[int, np.ndarray] = {}
    bar = progress_bar(desc="logit rows", total=sum(len(i) for _, i in mine), disable=not progress)
    for b, idx in mine:
        layout = f"{'p' if supported else 'e'}{rows_per_block}"   # padded or equal-length blocks of this size
        path = wd / f"block-{layout}-{b:06d}.npy" if wd is not None else None
        if path is not None and path.is_file():
            rows = np.load(path)
        else:
            rows = prefix_reuse.block_rows(model, histories, futures, idx, cols, centered, batch_tokens, fast)
            if path is not None:
                tmp = path.with_suffix(".tmp.npy")
                np.save(tmp, rows)
                os.replace(tmp, path)
        parts[b] = rows
        bar.update(len(idx))
    bar.close()
    if world > 1:
        import torch.distributed as dist

        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, parts)
        parts = {b: rows for p in gathered for b, rows in p.items()}
    out = np.empty((len(histories), len(futures) * width), dtype=np.float32)
    for b, idx in enumerate(blocks):
        out[idx] = parts[b]
    return out


def naive_extended_logit_matrix(model, histories, futures, columns=None, centered: bool = True,
                                batch_tokens: int = DEFAULT_BATCH_TOKENS) -> np.ndarray:
    """Reference for :func:`extended_logit_matrix`: one batched forward pass of every h∘f, no reuse.
    ``model``: a language model as :func:`as_model` reads it (not an oracle)."""
    model = as_model(model)
    if not _is_lm(model):
        raise LogitsError(f"parameter 'model' must be a language model (a CausalLM or a transformers causal LM); "
                          f"got {type(model).__name__}: an oracle's matrix is extended_logit_matrix's own loop")
    histories, futures = as_sequences("histories", histories), as_sequences("futures", futures)
    contexts = [h + f for h in histories for f in futures]
    rows = prefix_reuse.centre(prefix_reuse.next_token_rows(model, contexts, batch_tokens), centered).numpy()
    nH, nF = len(histories), len(futures)
    rows = rows.reshape(nH, nF, -1)
    if columns is not None:
        cols = np.asarray(columns)
        rows = np.take_along_axis(rows, cols[None, :, :], axis=2)
    return rows.reshape(nH, -1)


def cached_extended_logit_matrix(model_id: str, model, histories, futures, k: int | None = 50,
                                 centered: bool = True, column_selection: str = "top", column_seed: int = 0,
                                 progress: bool = False, **kwargs) -> np.ndarray:
    """:func:`extended_logit_matrix` stored in the book's cache by (model_id, H, F, k, selection).

    ``model_id`` names the model uniquely (e.g. the checkpoint directory, or hub name and
    revision). The entry is a directory, so an interrupted large matrix resumes from its
    finished row blocks."""
    histories, futures = as_sequences("histories", histories), as_sequences("futures", futures)
    params = {"model": str(model_id), "histories": [list(h) for h in histories],
              "futures": [list(f) for f in futures], "k": k, "centered": centered,
              "selection": column_selection, "column_seed": column_seed}

    def compute(workdir):
        L = extended_logit_matrix(model, histories, futures, k, centered, column_selection=column_selection,
                                  column_seed=column_seed, workdir=Path(workdir) / "blocks", progress=progress,
                                  **kwargs)
        np.save(Path(workdir) / "matrix.npy", L)

    entry = cache.cached("extended-logits", params, compute, fmt="dir",
                         sources=[extended_logit_matrix, prefix_reuse.block_rows, gpt_neox.neox_last_hidden])
    return np.load(Path(entry) / "matrix.npy")


# ---------------------------------------------------------------------------
# histories and futures from a corpus (App. A.1.1, A.3)
# ---------------------------------------------------------------------------

@dataclass
class Spans:
    """Histories and futures as text (character spans) and the documents they came from."""
    histories: list[str]
    futures: list[str]
    history_docs: list[int]
    future_docs: list[int]


def _cut_at_word(y: str, ell: int) -> int:
    """The whitespace position of ``y`` nearest to ``ell`` (the cut rounded to a whole word)."""
    spaces = [i for i, ch in enumerate(y) if ch.isspace()]
    if not spaces:
        return ell
    return min(spaces, key=lambda i: (abs(i - ell), i))


def sample_spans(documents: Sequence[str], n: int, l_min: int, l_max: int, seed: int = 0,
                 one_per_document: bool = True) -> Spans:
    """App. A.1.1 in characters: 2n distinct documents of at least ``l_max`` characters; in each
    a uniformly random contiguous span y of ``l_max`` characters and ℓ ~ Unif{l_min..l_max}
    rounded to the nearest word boundary; the first n give histories y[:ℓ], the other n
    futures y[ℓ:] (the remainder). Measured in characters, so one (H, F) serves every tokenizer.

    ``one_per_document=False`` (a corpus with fewer than 2n long documents): each document is
    cut into consecutive disjoint windows of ``l_max`` characters from a random offset, and
    2n distinct windows are drawn, so a document may give several spans (never overlapping)."""
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise LogitsError(f"parameter 'n' must be a positive integer; got {n!r}")
    if not (1 <= l_min <= l_max):
        raise LogitsError(f"need 1 <= l_min <= l_max; got {l_min}, {l_max}")
    rng = np.random.default_rng(seed)
    if one_per_document:
        long_enough = [i for i, d in enumerate(documents) if len(d) >= l_max]
        if len(long_enough) < 2 * n:
            raise LogitsError(f"only {len(long_enough)} documents have at least {l_max} characters; need 2n = "
                              f"{2 * n} (or pass one_per_document=False)")
        chosen = rng.choice(long_enough, size=2 * n, replace=False)
        windows = []
        for d in chosen:
            doc = documents[int(d)]
            s = int(rng.integers(0, len(doc) - l_max + 1))
            windows.append((int(d), s))
    else:
        allw = []
        for d, doc in enumerate(documents):
            if len(doc) < l_max:
                continue
            off = int(rng.integers(0, len(doc) % l_max + 1))
            allw += [(d, s) for s in range(off, len(doc) - l_max + 1, l_max)]
        if len(allw) < 2 * n:
            raise LogitsError(f"the documents hold only {len(allw)} disjoint windows of {l_max} characters; "
                              f"need 2n = {2 * n}")
        windows = [allw[i] for i in rng.choice(len(allw), size=2 * n, replace=False)]
    hs, fs = [], []
    for r, (d, s) in enumerate(windows):
        y = documents[d][s:s + l_max]
        cut = _cut_at_word(y, int(rng.integers(l_min, l_max + 1)))
        (hs if r < n else fs).append(y[:cut] if r < n else y[cut:])
    return Spans(hs, fs, [d for d, _ in windows[:n]], [d for d, _ in windows[n:]])


def sample_token_spans(documents: Sequence[Sequence[int]], n: int, l_min: int, l_max: int, seed: int = 0,
                       part: str = "history", one_per_document: bool = True) -> list[tuple[int, ...]]:
    """App. A.3 in tokens: as :func:`sample_spans` with lengths counted in tokens (for one model):
    ``part="history"`` keeps y[:ℓ], ``"future"`` the remainder y[ℓ:]. ``one_per_document=False``
    draws disjoint windows, several per document where needed."""
    if part not in ("history", "future"):
        raise LogitsError(f"parameter 'part' must be 'history' or 'future'; got {part!r}")
    if not (1 <= l_min <= l_max):
        raise LogitsError(f"need 1 <= l_min <= l_max; got {l_min}, {l_max}")
    rng = np.random.default_rng(seed)
    allw = []
    for d, doc in enumerate(documents):
        if len(doc) < l_max:
            continue
        if one_per_document:
            allw.append((d, int(rng.integers(0, len(doc) - l_max + 1))))
        else:
            off = int(rng.integers(0, len(doc) % l_max + 1))
            allw += [(d, s) for s in range(off, len(doc) - l_max + 1, l_max)]
    if len(allw) < n:
        raise LogitsError(f"only {len(allw)} {'documents' if one_per_document else 'disjoint windows'} of at "
                          f"least {l_max} tokens; need {n}")
    out = []
    for i in rng.choice(len(allw), size=n, replace=False):
        d, s = allw[int(i)]
        y = np.asarray(documents[d])[s:s + l_max]
        ell = int(rng.integers(l_min, l_max + 1))
        out.append(tuple(int(t) for t in (y[:ell] if part == "history" else y[ell:])))
    return out


def permute_tokens(seqs, seed: int = 0) -> list[tuple[int, ...]]:
    """The "nonsense" set of §3.2–3.3: all tokens of all sequences randomly permuted among them
    (each sequence keeps its length)."""
    seqs = as_sequences("seqs", seqs)
    flat = np.array([t for s in seqs for t in s], dtype=np.int64)
    flat = flat[np.random.default_rng(seed).permutation(len(flat))]
    out, a = [], 0
    for s in seqs:
        out.append(tuple(int(x) for x in flat[a:a + len(s)]))
        a += len(s)
    return out


# ---------------------------------------------------------------------------
# spectra and the power-law fit (App. A.1.1–A.1.2)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PowerLawFit:
    """log σ_i ≈ c − α log(i/n) + β log((n−i)/n), weighted least squares with weights 1/i."""
    alpha: float
    beta: float
    c: float
    n: int
    reading: str


def fit_power_law(singular_values, reading: str = "literal") -> PowerLawFit:
    """The exponent α of σ_i ≈ C·i^{−α} fitted as App. A.1.1.

    ``singular_values``: the n singular values of an n×m matrix (n ≤ m), any order. The
    largest is excluded; the regression has covariates log(i/n) and log((n−i)/n), labels
    log σ_i and weights 1/i (weighted least squares: Σ_i (1/i)·residual_i²). Two readings of
    the index i:

    * ``"literal"`` (the appendix's words): after dropping the largest, the 2nd … nth values
      are renamed σ_1 … σ_{n−1}, i ∈ [n−1];
    * ``"original"``: σ_i keeps its rank in the full spectrum, i = 2 … n−1 (i = n would put
      log 0 in the second covariate).

    On an exact power law the original reading recovers α; the literal one shifts every
    index by one and biases α low (by ≈ 0.08 at α = 0.6, n = 400).
    """
    if reading not in ("literal", "original"):
        raise LogitsError(f"parameter 'reading' must be 'literal' or 'original'; got {reading!r}")
    s = np.sort(np.asarray(singular_values, dtype=np.float64).ravel())[::-1]
    n = s.size
    if n < 4 or not np.all(np.isfinite(s)):
        raise LogitsError(f"need at least 4 finite singular values; got {n}")
    if reading == "literal":
        sig, i = s[1:], np.arange(1, n, dtype=float)
    else:
        sig, i = s[1:n - 1], np.arange(2, n, dtype=float)
    keep = sig > 0
    sig, i = sig[keep], i[keep]
    X = np.column_stack([np.ones_like(i), np.log(i / n), np.log((n - i) / n)])
    w = np.sqrt(1.0 / i)
    coef = least_squares(X * w[:, None], np.log(sig) * w)
    return PowerLawFit(alpha=float(-coef[1]), beta=float(coef[2]), c=float(coef[0]), n=int(n), reading=reading)


def normalised_singular_values(L) -> np.ndarray:
    """Singular values (descending) divided by √(number of entries), as App. A.1.2."""
    L = np.asarray(L, dtype=np.float64)
    if L.shape[1] > 8 * L.shape[0] and L.shape[0] > 2000:  # wide and large: eigenvalues of the Gram matrix
        ev = torch.linalg.eigvalsh(as_tensor(L @ L.T)).numpy()[::-1]
        return np.sqrt(np.clip(ev, 0, None)) / np.sqrt(L.size)
    return torch.linalg.svdvals(as_tensor(L)).numpy() / np.sqrt(L.size)


def downsized(L, n_futures: int, factor: float) -> np.ndarray:
    """App. A.1.2: the first |H|/√factor histories and the first |F|/√factor futures (whole
    column blocks) of L (|F| = ``n_futures`` blocks): about 1/factor of the entries."""
    L = np.asarray(L)
    width = L.shape[1] // n_futures
    nh = max(1, int(round(L.shape[0] / np.sqrt(factor))))
    nf = max(1, int(round(n_futures / np.sqrt(factor))))
    return L[:nh, :nf * width]


# ---------------------------------------------------------------------------
# low-rank approximation and average KL (Def 3.1, Fact A.2, App. A.1.3)
# ---------------------------------------------------------------------------

EXACT_SVD_MAX_ENTRIES = 5 * 10 ** 7   # above this many entries "auto" takes torch.svd_lowrank, as the paper (A.1.3)


def svd(L, method: str = "exact", q: int | None = None, seed: int = 0):
    """(U, S, Vh) of L: ``"exact"`` (LAPACK), ``"lowrank"`` (``torch.svd_lowrank`` with q
    components, as the paper), or ``"auto"``: exact up to :data:`EXACT_SVD_MAX_ENTRIES` entries,
    low-rank beyond."""
    L = np.asarray(L, dtype=np.float64)
    if method == "auto":
        method = "exact" if L.size <= EXACT_SVD_MAX_ENTRIES else "lowrank"
    if method == "exact":
        U, S, Vh = torch.linalg.svd(as_tensor(L), full_matrices=False)
        return U.numpy(), S.numpy(), Vh.numpy()
    if method == "lowrank":
        torch.manual_seed(seed)
        U, S, V = torch.svd_lowrank(torch.from_numpy(L), q=q or min(L.shape), niter=4)
        return U.numpy(), S.numpy(), V.numpy().T
    raise LogitsError(f"parameter 'method' must be 'exact' or 'lowrank'; got {method!r}")


def rank_r_approximation(usv, r: int) -> np.ndarray:
    """The truncated SVD U_r S_r V_r^T (the best rank-r approximation in Frobenius norm when exact)."""
    U, S, Vh = usv
    return (U[:, :r] * S[:r]) @ Vh[:r]


def _block_kl(L: np.ndarray, A: np.ndarray, width: int) -> np.ndarray:
    """KL(softmax(L_{h,f}) ‖ softmax(A_{h,f})) for every (h, f): blocks of ``width`` columns."""
    import scipy.special as sp

    n = L.shape[0]
    l3 = L.reshape(n, -1, width).astype(np.float64)
    a3 = A.reshape(n, -1, width).astype(np.float64)
    lp, la = sp.log_softmax(l3, axis=2), sp.log_softmax(a3, axis=2)
    return (np.exp(lp) * (lp - la)).sum(axis=2)


def average_kl(L, A, width: int) -> float:
    """D_KL^avg(L, A) of Def 3.1: the mean over (h, f) of KL(softmax(L_{h,f}) ‖ softmax(A_{h,f})),
    each block of ``width`` columns (|Σ|, or k: the distributions restricted to the selected
    columns, as App. A.1.3)."""
    L, A = np.asarray(L), np.asarray(A)
    if L.shape != A.shape or L.shape[1] % width:
        raise LogitsError(f"L and A must have the same shape, a multiple of width = {width} columns; got "
                          f"{L.shape} and {A.shape}")
    return float(_block_kl(L, A, width).mean())


def fact_a2_bound(L, A) -> float:
    """Fact A.2's right-hand side ½‖L − A‖²_F, a bound on Σ_{h,f} KL(softmax(L_{h,f}) ‖ softmax(A_{h,f}))
    for any block width (divide by |H||F| for the average of Def 3.1)."""
    L, A = np.asarray(L, dtype=np.float64), np.asarray(A, dtype=np.float64)
    return float(((L - A) ** 2).sum() / 2.0)


def avg_kl_curve(L, width: int, ranks: Sequence[int], method: str = "auto", seed: int = 0, usv=None) -> dict:
    """Average KL of L to its rank-r truncated SVD for each r, and the Fact A.2 bound
    ‖L − A_r‖²_F / (2·#blocks) for each r. Returns arrays ``ranks``, ``kl``, ``bound``."""
    L = np.asarray(L, dtype=np.float64)
    n_blocks = L.shape[0] * (L.shape[1] // width)
    ranks = [int(r) for r in ranks if 1 <= r <= min(L.shape)]
    if usv is None:  # ``usv``: an SVD of L computed before, reused
        usv = svd(L, method, q=max(ranks), seed=seed)
    kl, bound = [], []
    for r in ranks:
        A = rank_r_approximation(usv, r)
        kl.append(average_kl(L, A, width))
        bound.append(fact_a2_bound(L, A) / n_blocks)
    return {"ranks": np.array(ranks), "kl": np.array(kl), "bound": np.array(bound)}


def rank1_baseline(future_rows, n_histories: int) -> np.ndarray:
    """App. A.1.3's baseline: every row is the logits after f alone, L_M[· | f] at f's selected
    columns (``future_rows``: a 1 × |F|·width row), i.e. the rank-1 matrix 1·row."""
    row = np.asarray(future_rows, dtype=np.float64).reshape(1, -1)
    return np.repeat(row, n_histories, axis=0)


def fact_a2_violation(L, A, width: int) -> float:
    """Σ_{h,f} KL − ½‖L − A‖²_F (≤ 0 by Fact A.2; positive would be a counterexample)."""
    L, A = np.asarray(L, dtype=np.float64), np.asarray(A, dtype=np.float64)
    return float(_block_kl(L, A, width).sum() - 0.5 * ((L - A) ** 2).sum())


# ---------------------------------------------------------------------------
# shared structure: principal angles (§3.2, App. A.2)
# ---------------------------------------------------------------------------

def column_space_angles(L1, L2, r: int, usv1=None, usv2=None) -> np.ndarray:
    """Cosines (descending) of the principal angles between the column spans of the rank-r
    truncated SVDs of L1 and L2 (same histories, rows): spans of their top-r left singular vectors.
    ``usv1``, ``usv2``: SVDs of L1, L2 computed before (reused; L1, L2 are then not read)."""
    def top(L, usv=None):
        if usv is not None:
            return usv[0][:, :r]
        return svd(L, "auto", q=min(min(np.shape(L)), r + 10))[0][:, :r]

    return np.cos(principal_angles(top(L1, usv1), top(L2, usv2)))


def random_subspace_cosine_trials(n: int, r: int, trials: int, seed: int = 0) -> np.ndarray:
    """(trials, r): for each of ``trials`` pairs of independent uniformly random r-dimensional subspaces
    of R^n, the cosines (descending) of their principal angles (the null of Figs 4 and 11)."""
    rng = np.random.default_rng(seed)
    return np.stack([np.cos(principal_angles(rng.standard_normal((n, r)), rng.standard_normal((n, r))))
                     for _ in range(trials)])


def random_subspace_cosines(n: int, r: int, seed: int = 0, trials: int = 20) -> np.ndarray:
    """Mean cosines (descending) of the principal angles between two independent uniformly random
    r-dimensional subspaces of R^n (the dashed baseline of Figs 4 and 11)."""
    return random_subspace_cosine_trials(n, r, trials, seed).mean(axis=0)


def block_centred(L, width: int) -> np.ndarray:
    """L with each (h, f) block of ``width`` columns centred to mean 0 (a block of logits is defined up to
    a constant: softmax ignores it)."""
    L = np.asarray(L, dtype=np.float64)
    if L.ndim != 2 or L.shape[1] % width:
        raise LogitsError(f"L has shape {L.shape}; its columns must be a multiple of width = {width}")
    X = L.reshape(L.shape[0], -1, width)
    return (X - X.mean(2, keepdims=True)).reshape(L.shape)


def history_independent_fraction(L, width: int) -> float:
    """The share of L's variance that does not depend on the history.

    With X = :func:`block_centred` L, the history-independent part is X's column mean over the
    histories, x̄. Returns |H|·‖x̄‖² / ‖X‖² in [0, 1]: 1 when every history has the same row,
    near 1/|H| when rows are independent noise around zero."""
    X = block_centred(L, width)
    total = float((X ** 2).sum())
    return float(X.shape[0] * (X.mean(0) ** 2).sum() / total) if total > 0 else 1.0


def history_dependent_rms(L, width: int) -> float:
    """The root mean square of what depends on the history: √(mean of (X − x̄)²) for X =
    :func:`block_centred` L and x̄ its column mean over the histories (nats, in logit units)."""
    X = block_centred(L, width)
    return float(np.sqrt(((X - X.mean(0)) ** 2).mean()))


def nearest_neighbours(L) -> np.ndarray:
    """For each row h, the index of the row h' ≠ h nearest in Euclidean distance (§3.2, Table 1)."""
    L = np.asarray(L, dtype=np.float64)
    sq = (L ** 2).sum(1)
    D = sq[:, None] + sq[None, :] - 2 * L @ L.T
    np.fill_diagonal(D, np.inf)
    return D.argmin(1)


__getattr__ = forward_moved(__name__, {name: "lib.lingen" for name in (
    "lingen_coefficients",
    "Generation",
    "LINGEN_BLOCK_BYTES",
    "history_blocks_within",
    "lingen",
    "generate_baseline",
    "short_context",
    "lemma_c18_bound",
    "lemma_c18_estimates",
)})
