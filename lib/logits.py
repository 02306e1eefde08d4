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
  reused for all its futures: histories sorted by length share a block, their caches
  left-padded to the longest with an attention mask and position ids that give every entry
  of its unpadded pass (where the model's cache is a plain ``DynamicCache``; otherwise only
  histories of equal length share a block); futures batched by length and right-padded
  (under causal attention a padding token after the last real token is never attended to by
  it); the head evaluated only at the selected columns. On GPT-NeoX (Pythia, the book's
  suite) the passes over futures run the layers directly (:func:`_neox_last_hidden`): only
  the last position's distribution is read, so the last layer computes its query, attention,
  output projection and MLP there alone (its keys and values everywhere), and the first
  layer's token-wise parts are computed once per distinct token; a probe against the
  backbone's own forward decides per model. Chunked to a memory budget,
  resumable, and split over ``torch.distributed`` ranks when launched that way.
  :func:`naive_extended_logit_matrix` is the reference: one forward pass of every h∘f.
* :class:`ModelSeries`, :func:`load_model`, :func:`resolve_model_source` — a model by hub name
  or local directory at its revisions (training checkpoints), offline from the local cache.
* :func:`sample_spans` — histories and futures from documents as App. A.1.1 (characters) or
  A.3 (tokens).
* :func:`fit_power_law` — the α fit of App. A.1.1 in two readings (see its docstring),
  :func:`normalised_singular_values` (A.1.2), :func:`downsized` (A.1.2).
* :func:`rank_r_approximations`, :func:`average_kl` (Def 3.1), :func:`fact_a2_bound` (Fact A.2),
  :func:`rank1_baseline` (A.1.3).
* :func:`column_space_angles` and :func:`random_subspace_cosines` (§3.2, App. A.2).
* :func:`permute_tokens` (nonsense sets), :func:`lingen_coefficients`, :func:`lingen` (Algorithm 1,
  §3.3) and its baselines, :func:`lemma_c18_bound` (App. C.4).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .book.device import process_group

DEFAULT_BATCH_TOKENS = 2 ** 13   # tokens of one future pass (batch × padded future length)
GiB = 2 ** 30


class LogitsError(ValueError):
    """Bad input to an extended-logit-matrix computation, refused before any work."""


# ---------------------------------------------------------------------------
# models: a CausalLM or an oracle
# ---------------------------------------------------------------------------

def _is_lm(model) -> bool:
    from .models.causal_lm import CausalLM

    return isinstance(model, CausalLM)


def as_model(model, device="cpu"):
    """``model`` itself if it is a CausalLM or a callable oracle; a name or path is loaded with
    :meth:`CausalLM.from_pretrained` (offline-aware: a hub name that cannot be had raises
    :class:`lib.models.causal_lm.ModelUnavailableError` at once)."""
    from .models.causal_lm import CausalLM

    if isinstance(model, (str, os.PathLike)):
        return CausalLM.from_pretrained(model, device=device)
    if _is_lm(model) or callable(model):
        return model
    raise LogitsError(f"parameter 'model' must be a CausalLM, a model name or path, or a callable oracle; "
                      f"got {type(model).__name__}")


def resolve_model_source(name_or_path, revision: str | None = None, cache_dir=None,
                         local_files_only: bool | None = None) -> tuple[str, dict]:
    """Where a model (and its tokenizer) at ``revision`` is read from: ``(source, kwargs)`` for
    ``from_pretrained``. Refuses clearly, before any weights are read, what cannot be had.

    * A local directory without a revision: the directory itself.
    * A local directory with a revision: its subdirectory named ``revision`` (a local copy of a
      checkpoint series, one ``save_pretrained`` folder per revision, e.g. ``pythia-70m/step0``);
      refused (:class:`LogitsError`, listing the revisions there) if it is absent.
    * A hub name ("org/name") offline (``HF_HUB_OFFLINE`` set, ``local_files_only=True``, or the
      hub not reachable): the snapshot of that revision (default ``main``) in the local Hugging
      Face cache (``cache_dir``, default the usual one), found through its ``refs/<revision>``;
      refused with :class:`lib.models.causal_lm.ModelUnavailableError` naming the revision if it
      is not there.
    * A hub name online: the name, with ``revision`` (and ``cache_dir``) passed on to
      ``from_pretrained``, which downloads that revision.
    """
    from .models.causal_lm import HUB_NAME, ModelUnavailableError, _env_offline, _hub_reachable

    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise LogitsError(f"parameter 'revision' must be None or a non-empty string (a branch, tag or commit); "
                          f"got {revision!r}")
    name = os.fspath(name_or_path)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LogitsError(f"parameter 'model' is the file {name!r}; give a directory written by save_pretrained")
        if revision is None:
            return str(path), {}
        sub = path / revision
        if not sub.is_dir():
            there = sorted(p.name for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
            raise LogitsError(f"no revision {revision!r} under the local model directory {name!r}: a local model "
                              f"with revisions is one save_pretrained folder per revision; found "
                              f"{there or 'none'}")
        return str(sub), {}
    if not HUB_NAME.match(name) or name.startswith((".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"no such local model directory: {name!r}, and not a hub name 'org/name'")
    if local_files_only is None:
        local_files_only = _env_offline() or not _hub_reachable()
    if not local_files_only:
        kwargs = {"revision": revision} if revision is not None else {}
        return name, kwargs | ({"cache_dir": str(cache_dir)} if cache_dir is not None else {})
    from huggingface_hub import snapshot_download

    try:
        snap = snapshot_download(name, revision=revision, cache_dir=cache_dir, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - LocalEntryNotFoundError, a bad cache, an unknown revision
        raise ModelUnavailableError(
            f"cannot load {name!r} at revision {revision or 'main'!r}: no network is available (offline mode or the "
            f"hub cannot be reached) and that revision is not in the local Hugging Face cache"
            f"{f' {cache_dir}' if cache_dir is not None else ''} ({type(err).__name__}). What works offline: a "
            "revision cached earlier, a local directory written by save_pretrained (with one subfolder per "
            "revision), or the book's own mini-Pythia suite (hub_model: suite).") from None
    return snap, {}


def load_model(name_or_path, revision: str | None = None, device="cpu", cache_dir=None,
               local_files_only: bool | None = None):
    """A :class:`lib.models.causal_lm.CausalLM` from a hub name or local directory at ``revision``
    (see :func:`resolve_model_source`: offline a hub revision is read from the local cache)."""
    from .models.causal_lm import CausalLM

    source, kwargs = resolve_model_source(name_or_path, revision, cache_dir, local_files_only)
    return CausalLM.from_pretrained(source, device=device, **kwargs)


def load_tokenizer(name_or_path, revision: str | None = None, cache_dir=None, local_files_only: bool | None = None):
    """The tokenizer saved with a model (``AutoTokenizer``), found as :func:`load_model` finds the model."""
    return _tokenizer_from(*resolve_model_source(name_or_path, revision, cache_dir, local_files_only))


def _tokenizer_from(source: str, kwargs: dict):
    from transformers import AutoTokenizer

    if Path(source).is_dir():                      # a local directory or a cached snapshot: never the network
        kwargs = {"local_files_only": True}
    return AutoTokenizer.from_pretrained(source, **kwargs)


class ModelSeries:
    """One model at several revisions (training checkpoints, first = step 0, last = final) with the
    tokenizer saved with its last revision: the models of the chapter "Logit rank" when they
    come from the hub (e.g. ``EleutherAI/pythia-70m`` at ``step0`` … ``step143000``) or from a
    local directory holding one ``save_pretrained`` folder per revision.

    Every revision is resolved when the series is made (:func:`resolve_model_source`), so an
    offline machine without one of them fails at once, naming it, before any matrix is
    computed. ``encode`` maps text to token ids (no special tokens), ``decode`` back;
    ``load(revision)`` gives a :class:`lib.models.causal_lm.CausalLM`; ``model_id(revision)``
    names it uniquely for the book's cache."""

    def __init__(self, name_or_path, revisions: Sequence[str], device="cpu", cache_dir=None,
                 local_files_only: bool | None = None):
        revisions = list(revisions) if revisions is not None else []
        if len(revisions) < 2 or len(set(revisions)) != len(revisions):
            raise LogitsError(f"parameter 'hub_revisions' must list at least two distinct revisions, step 0 first and "
                              f"the final one last; got {revisions!r}")
        self.name, self.revisions, self.device = os.fspath(name_or_path), revisions, device
        self._where = {r: resolve_model_source(self.name, r, cache_dir, local_files_only) for r in revisions}
        self.tokenizer = _tokenizer_from(*self._where[revisions[-1]])

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))

    def load(self, revision: str):
        from .models.causal_lm import CausalLM

        if revision not in self._where:
            raise LogitsError(f"revision {revision!r} is not one of this series' {self.revisions}")
        source, kwargs = self._where[revision]
        return CausalLM.from_pretrained(source, device=self.device, **kwargs)

    def model_id(self, revision: str) -> str:
        path = Path(self.name).expanduser()
        return f"{path.resolve() if path.exists() else self.name}@{revision}"


def context_limit(model) -> int | None:
    """Longest context the model accepts (max_position_embeddings), None for an oracle."""
    if not _is_lm(model):
        return None
    return getattr(model.config, "max_position_embeddings", None)


def vocab_size(model, probe: Sequence[int] | None = None) -> int:
    if _is_lm(model):
        return model.vocab_size
    if probe is None:
        raise LogitsError("an oracle's vocabulary size is read off an answer: give alphabet_size")
    return int(np.asarray(model(tuple(probe))).shape[-1])


def _as_seqs(name: str, seqs) -> list[tuple[int, ...]]:
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


# ---------------------------------------------------------------------------
# next-token rows: one context at a time (oracles) or batched (LMs)
# ---------------------------------------------------------------------------

def _centre(logp: np.ndarray | torch.Tensor, centered: bool):
    if not centered:
        return logp
    return logp - logp.mean(-1, keepdims=True) if isinstance(logp, np.ndarray) else logp - logp.mean(-1, keepdim=True)


def _lm_parts(model):
    net = model.model
    backbone, head = net.base_model, net.get_output_embeddings()
    if backbone is None or head is None or backbone is net:
        raise LogitsError(f"{type(net).__name__} has no separate backbone and output head; history reuse needs both")
    return backbone, head


def _lm_rows(model, contexts: list[tuple[int, ...]], batch_tokens: int = DEFAULT_BATCH_TOKENS) -> torch.Tensor:
    """log Pr_M[· | c] for every context (float32, CPU): right-padded batches, last real position."""
    backbone, head = _lm_parts(model)
    out = torch.empty(len(contexts), model.vocab_size)
    order = sorted(range(len(contexts)), key=lambda i: len(contexts[i]))
    with torch.inference_mode():
        i = 0
        while i < len(order):
            T = len(contexts[order[min(len(order) - 1, i)]])
            b = max(1, batch_tokens // max(T, 1))
            idx = order[i:i + b]
            T = max(len(contexts[j]) for j in idx)
            ids = torch.zeros(len(idx), T, dtype=torch.long)
            last = torch.empty(len(idx), dtype=torch.long)
            for r, j in enumerate(idx):
                ids[r, :len(contexts[j])] = torch.tensor(contexts[j])
                last[r] = len(contexts[j]) - 1
            hid = backbone(input_ids=ids.to(model.device), use_cache=False).last_hidden_state
            hid = hid[torch.arange(len(idx)), last.to(model.device)]
            out[idx] = torch.log_softmax(head(hid).float(), -1).cpu()
            i += len(idx)
    return out


def next_token_logprobs(model, contexts, alphabet_size: int | None = None) -> np.ndarray:
    """(|contexts|, |Σ|) array of log Pr_M[· | c] (an oracle's answers as given)."""
    contexts = _as_seqs("contexts", contexts)
    if _is_lm(model):
        if any(len(c) == 0 for c in contexts):
            raise LogitsError("a language model needs at least one token of context; got an empty context")
        return _lm_rows(model, contexts).numpy()
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
    descending probability), ``"random"`` = k distinct uniformly random tokens (App. A.1.5)."""
    futures = _as_seqs("futures", futures)
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

def _blocks(histories, rows_per_block: int, padded: bool = False) -> list[list[int]]:
    """Histories cut into blocks of at most ``rows_per_block``, sorted by token length.

    ``padded=False``: only histories of equal length share a block (one unpadded batched pass);
    ``padded=True``: consecutive histories in length order share a block whatever their lengths
    (their key/value caches are left-padded to the longest, see :func:`_block_rows`)."""
    order = sorted(range(len(histories)), key=lambda i: (len(histories[i]), i))
    if padded:
        return [order[a:a + rows_per_block] for a in range(0, len(order), rows_per_block)]
    by_len: dict[int, list[int]] = {}
    for i in order:
        by_len.setdefault(len(histories[i]), []).append(i)
    blocks = []
    for L in sorted(by_len):
        ids = by_len[L]
        blocks += [ids[a:a + rows_per_block] for a in range(0, len(ids), rows_per_block)]
    return blocks


def _plain_kv_cache(cache) -> bool:
    """Whether ``cache`` is a plain ``DynamicCache`` of ``DynamicLayer`` s holding (batch, heads, length,
    head_dim) keys and values: then histories of unequal lengths can share a pass, their caches
    left-padded (:func:`_block_rows`). Other caches (sliding windows, quantised, state-space, legacy
    tuples) keep the equal-length path."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer
    except ImportError:  # pragma: no cover - very old transformers
        return False
    return (type(cache) is DynamicCache and len(cache.layers) > 0
            and all(type(layer) is DynamicLayer and getattr(layer, "keys", None) is not None
                    and layer.keys.ndim == 4 and layer.values.ndim == 4 for layer in cache.layers))


def _remember(model, key: str, ok: bool) -> bool:
    """Keep a probe's verdict on the model (as attribute ``key``), where the model takes attributes."""
    try:
        setattr(model, key, ok)
    except AttributeError:  # pragma: no cover - a frozen wrapper
        pass
    return ok


def _padding_supported(model) -> bool:
    """Probe once per model: a plain key/value cache, and left-padded histories that give the same
    entries as unpadded ones on a two-history example (so a backbone that ignored the attention
    mask or the position ids would be caught, not trusted)."""
    key = "_lib_logits_padding_supported"
    known = getattr(model, key, None)
    if known is not None:
        return known
    backbone, _ = _lm_parts(model)
    ok = False
    try:
        with torch.inference_mode():
            enc = backbone(input_ids=torch.zeros(1, 2, dtype=torch.long, device=model.device), use_cache=True)
        if _plain_kv_cache(enc.past_key_values):
            a, b = 1 % model.vocab_size, 2 % model.vocab_size
            hs, fs = [(a,), (b, a, b)], [(b,), (a, b)]
            padded = _block_rows(model, hs, fs, [0, 1], None, True, 10 ** 6)
            alone = np.vstack([_block_rows(model, hs, fs, [i], None, True, 10 ** 6) for i in (0, 1)])
            ok = bool(np.isfinite(padded).all() and np.abs(padded - alone).max() <= 1e-4)
    except (TypeError, ValueError, RuntimeError, AttributeError, IndexError):
        ok = False
    return _remember(model, key, ok)


def _shared_history_cache(kv, B: int):
    """A ``DynamicCache`` whose row g·B + r holds the keys and values ``kv`` of history g (G rows), for
    B futures per history, written once per layer straight into the concatenation the attention
    reads (no repeated copy of the history's cache before it)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    class _SharedHistoryLayer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            out = []
            for past, new in ((self.keys, key_states), (self.values, value_states)):
                G, L = past.shape[0], past.shape[-2]
                buf = new.new_empty((G, B) + new.shape[1:-2] + (L + new.shape[-2], new.shape[-1]))
                buf[..., :L, :] = past[:, None]                                   # broadcast over B futures
                buf[..., L:, :] = new.view((G, B) + new.shape[1:])
                out.append(buf.view((G * B,) + buf.shape[2:]))
            self.keys, self.values = out
            return self.keys, self.values

    cache = DynamicCache()
    cache.layers = []
    for K, Vv in kv:
        layer = _SharedHistoryLayer()
        layer.lazy_initialization(K, Vv)
        layer.keys, layer.values = K, Vv
        cache.layers.append(layer)
    return cache


def _future_batches(lengths: Sequence[int], order: Sequence[int], G: int, L: int, batch_tokens: int,
                    slack: float = 0.1) -> list[list[int]]:
    """Futures (``order``: indices sorted by length) cut into passes of G·B·(L + T_max) ≤ ``batch_tokens``
    tokens (L: the history length, T_max the longest future in the pass), at most ``slack`` of the
    future tokens right padding."""
    batches, cur, real = [], [], 0
    for j in order:
        T = lengths[j]                       # ≥ every length in cur (sorted)
        if cur and (G * (len(cur) + 1) * (L + T) > batch_tokens or (len(cur) + 1) * T > (1 + slack) * (real + T)):
            batches.append(cur)
            cur, real = [], 0
        cur.append(j)
        real += T
    if cur:
        batches.append(cur)
    return batches


# ---------------------------------------------------------------------------
# GPT-NeoX: only what the last position needs (the last layer at one position per future)
# ---------------------------------------------------------------------------

def _neox_backbone(model):
    """The GPT-NeoX backbone of ``model`` (Pythia and the book's mini suite), or None for another
    architecture (those keep the generic path through the backbone's own forward)."""
    backbone, _ = _lm_parts(model)
    if type(backbone).__name__ != "GPTNeoXModel":
        return None
    need = ("embed_in", "layers", "final_layer_norm", "rotary_emb")
    if not all(hasattr(backbone, a) for a in need) or len(backbone.layers) == 0:
        return None
    a = backbone.layers[0].attention
    if not all(hasattr(a, x) for x in ("query_key_value", "dense", "head_size", "rotary_ndims", "scaling")):
        return None
    return backbone


class _NeoxBlock:
    """What the passes over futures of one block of G histories share (GPT-NeoX fast path).

    * Per layer the histories' keys (rotated) and values, (G, heads, L_max, head_dim), left-padded,
      and an additive mask (G, L_max): 0 at real positions, −∞ at padding.
    * Layer 1's token-wise parts for the tokens of the futures (its input is the token's
      embedding alone): the embedding, the fused query/key/value projection of its pre-norm,
      and, with parallel residual branches, the MLP of its second norm.
    """

    def __init__(self, backbone, kv, lens_t, keep, b_max: int, t_max: int, tokens: torch.Tensor):
        self.backbone, self.lens_t, self.keep, self.kv = backbone, lens_t, keep, kv
        G, nh, Lmax, hs = kv[0][0].shape
        self.G, self.nh, self.hs, self.Lmax = G, nh, hs, Lmax
        zero = torch.zeros((), dtype=kv[0][0].dtype, device=keep.device)
        self.hist_bias = torch.where(keep, zero, zero - float("inf"))                # (G, L_max)
        layer = backbone.layers[0]
        self.tokens = torch.unique(tokens)
        self.lookup = torch.full((int(self.tokens.max()) + 1,), -1, dtype=torch.long, device=tokens.device)
        self.lookup[self.tokens] = torch.arange(len(self.tokens), device=tokens.device)
        e = backbone.embed_in(self.tokens)
        self.embed = e
        self.qkv1 = layer.attention.query_key_value(layer.input_layernorm(e))
        self.mlp1 = layer.mlp(layer.post_attention_layernorm(e)) if layer.use_parallel_residual else None


def _rope_into(dst: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """dst ← rotary embedding of x on its first ``cos.shape[-1]`` dimensions per head (GPT-NeoX's
    partial rotary: x_rot·cos + rotate_half(x_rot)·sin), the other dimensions copied."""
    rd = cos.shape[-1]
    half = rd // 2
    xr = x[..., :rd]
    dst[..., rd:] = x[..., rd:]
    dst[..., :half] = xr[..., :half] * cos[..., :half] - xr[..., half:] * sin[..., :half]
    dst[..., half:rd] = xr[..., half:] * cos[..., half:] + xr[..., :half] * sin[..., half:]
    return dst


def _shared_prefix_attention(q, k, v, K_h, V_h, bias, scale: float) -> torch.Tensor:
    """Softmax attention of queries q (G, heads, B, Q, hs) over history g's keys K_h[g] (G, heads,
    L, hs), shared by its B futures, followed by each future's own keys k (G, heads, B, T, hs);
    ``bias`` (G, 1, ·, Q, L + T) is added to the scores (0 or −∞). The history part is one
    batched product per history for all its futures' queries (no copy of its keys per future);
    both parts share one softmax. Returns (G, heads, B, Q, hs)."""
    G, nh, B, Q, hs = q.shape
    L = K_h.shape[-2]
    s_h = torch.matmul(q.view(G, nh, B * Q, hs), K_h.transpose(-1, -2)).view(G, nh, B, Q, L)
    s = torch.cat([s_h, torch.matmul(q, k.transpose(-1, -2))], -1).mul_(scale).add_(bias)
    p = torch.softmax(s, -1)
    o = torch.matmul(p[..., :L].reshape(G, nh, B * Q, L), V_h).view(G, nh, B, Q, hs)
    return o + torch.matmul(p[..., L:], v)


def _neox_last_hidden(blk: _NeoxBlock, f_ids: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """Final-normed hidden states (G, B, d) at the last real position t* of each future, GPT-NeoX.

    ``blk``: the block's histories (:class:`_NeoxBlock`); ``f_ids`` (B, T_f): the pass's futures,
    right-padded; ``last`` (B,): the index t* of each future's last real token. Every h∘f gets
    the computation of the backbone's forward at the positions that reach t*:

    * layers 1 … N−1 at every future position t: pre-norm, fused query/key/value projection,
      partial rotary at position |h| + t, attention over the history's keys (padding hidden)
      and the future's own keys up to t (:func:`_shared_prefix_attention`), output projection
      and MLP (parallel or sequential residual as configured). Layer 1's projection and
      (parallel) MLP read the token's embedding alone, so they are looked up per token
      (:class:`_NeoxBlock`);
    * layer N: its keys and values at every position (t* attends to them), but its query,
      attention, output projection, MLP and the final norm only at t*.
    """
    bb = blk.backbone
    layers = bb.layers
    G, nh, hs, Lmax = blk.G, blk.nh, blk.hs, blk.Lmax
    B, Tf = f_ids.shape
    dev = f_ids.device
    scale = layers[0].attention.scaling

    r = blk.lookup[f_ids]                                                        # (B, Tf) rows of layer 1's tables
    x = blk.embed[r][None].expand(G, B, Tf, -1)                                  # (G, B, Tf, d), shared over g
    d = x.shape[-1]
    pos = blk.lens_t[:, None] + torch.arange(Tf, device=dev)[None]                # (G, Tf): |h| + t
    cos, sin = bb.rotary_emb(blk.embed[:1], position_ids=pos)                    # (G, Tf, rd)
    cos_f, sin_f = cos[:, None, None], sin[:, None, None]                        # over (G, heads, B, Tf, ·)
    zero = torch.zeros((), dtype=x.dtype, device=dev)
    causal = torch.where(torch.ones(Tf, Tf, dtype=torch.bool, device=dev).tril(), zero, zero - float("inf"))
    bias = torch.cat([blk.hist_bias[:, None, :].expand(G, Tf, Lmax), causal[None].expand(G, Tf, Tf)], -1)  # (G, Tf, S)

    def heads(t, n):                                                            # (G, B, n, heads·hs) -> (G, heads, B, n, hs)
        return t.reshape(G, B, n, nh, -1).permute(0, 3, 1, 2, 4)

    for li, layer in enumerate(layers[:-1]):
        att = layer.attention
        if li == 0:
            qkv = blk.qkv1[r][None].expand(G, B, Tf, 3 * d)
        else:
            qkv = att.query_key_value(layer.input_layernorm(x))
        q, k, v = heads(qkv, Tf).split(hs, dim=-1)                               # (G, heads, B, Tf, hs)
        q = _rope_into(q.new_empty((G, nh, B, Tf, hs)), q, cos_f, sin_f)
        k = _rope_into(k.new_empty((G, nh, B, Tf, hs)), k, cos_f, sin_f)
        o = _shared_prefix_attention(q, k, v, blk.kv[li][0], blk.kv[li][1], bias[:, None, None], scale)
        o = att.dense(o.permute(0, 2, 3, 1, 4).reshape(G, B, Tf, d))
        if li == 0 and blk.mlp1 is not None:
            x = x + o + blk.mlp1[r][None]
        elif layer.use_parallel_residual:
            x = x + o + layer.mlp(layer.post_attention_layernorm(x))
        else:
            x = x + o
            x = x + layer.mlp(layer.post_attention_layernorm(x))

    li, layer = len(layers) - 1, layers[-1]
    att = layer.attention
    W = att.query_key_value.weight.view(nh, 3, hs, d)
    b_qkv = att.query_key_value.bias
    bq = b_qkv.view(nh, 3, hs)[:, 0].reshape(-1) if b_qkv is not None else None
    bkv = b_qkv.view(nh, 3, hs)[:, 1:].reshape(-1) if b_qkv is not None else None
    rows = torch.arange(B, device=dev)
    h = layer.input_layernorm(x)                                                  # (G, B, Tf, d)
    kvp = heads(torch.nn.functional.linear(h, W[:, 1:].reshape(nh * 2 * hs, d), bkv), Tf)   # (G, heads, B, Tf, 2hs)
    k = _rope_into(h.new_empty((G, nh, B, Tf, hs)), kvp[..., :hs], cos_f, sin_f)
    v = kvp[..., hs:]
    x_l = x[:, rows, last]                                                        # (G, B, d) at t*
    h_l = h[:, rows, last]
    q = heads(torch.nn.functional.linear(h_l, W[:, 0].reshape(nh * hs, d), bq), 1)        # (G, heads, B, 1, hs)
    cl, sl = cos[:, last][:, None, :, None], sin[:, last][:, None, :, None]       # (G, 1, B, 1, rd)
    q = _rope_into(q.new_empty(q.shape), q, cl, sl)
    o = _shared_prefix_attention(q, k, v, blk.kv[li][0], blk.kv[li][1], bias[:, last][:, None, :, None], scale)
    o = att.dense(o.permute(0, 2, 3, 1, 4).reshape(G, B, d))                      # row t* of each
    if layer.use_parallel_residual:
        x_l = x_l + o + layer.mlp(layer.post_attention_layernorm(x_l))
    else:
        x_l = x_l + o
        x_l = x_l + layer.mlp(layer.post_attention_layernorm(x_l))
    return bb.final_layer_norm(x_l)                                               # (G, B, d)


def _last_position_supported(model) -> bool:
    """Probe once per model: a GPT-NeoX backbone with a plain key/value cache whose
    :func:`_neox_last_hidden` gives the same entries (to 1e-4) as the backbone's own forward on
    a small example (histories of two lengths, futures of three), so a variant of the
    architecture that the hand-written layer loop does not follow is caught, not trusted."""
    key = "_lib_logits_last_position_supported"
    known = getattr(model, key, None)
    if known is not None:
        return known
    ok = False
    if _neox_backbone(model) is not None:
        try:
            V = model.vocab_size
            a, b, c = 1 % V, 2 % V, 3 % V
            # futures of 10 and 11 tokens share a pass (right padding inside it), one token has its own
            hs = [(a, c), (b, a, b, c)]
            fs = [(b,), tuple((7 * i + 1) % V for i in range(10)), tuple((5 * i + 2) % V for i in range(11))]
            limit = context_limit(model)
            if limit is not None and limit < 15:
                fs = [f[:limit - 4] for f in fs]
            blocks = [[0, 1]] if _padding_supported(model) else [[0], [1]]
            for idx in blocks:
                with torch.inference_mode():
                    enc = _lm_parts(model)[0](input_ids=torch.zeros(1, 2, dtype=torch.long, device=model.device),
                                              use_cache=True)
                if not _plain_kv_cache(enc.past_key_values):
                    raise ValueError("not a plain cache")
                fast = _block_rows(model, hs, fs, idx, None, True, 10 ** 6, fast=True)
                slow = _block_rows(model, hs, fs, idx, None, True, 10 ** 6, fast=False)
                ok = bool(np.isfinite(fast).all() and np.abs(fast - slow).max() <= 1e-4)
                if not ok:
                    break
        except (TypeError, ValueError, RuntimeError, AttributeError, IndexError):
            ok = False
    return _remember(model, key, ok)


def _block_rows(model, histories, futures, idx, cols, centered, batch_tokens, fast: bool = False) -> np.ndarray:
    """Rows ``idx`` of the matrix, by history reuse.

    The histories of the block are encoded once (equal lengths in one unpadded pass each). If
    they differ in length, their key/value caches are left-padded with zeros to the longest,
    L_max, and every pass over futures gets an attention mask hiding the padding and position
    ids counting from each history's own length, so each h∘f sees exactly the keys, values and
    positions of its unpadded forward pass. Futures are batched by length (right padding is never
    attended to by the last real token under causal attention); row g·B + r of a pass is future r
    after history g. ``fast`` (GPT-NeoX with a plain cache, see :func:`_last_position_supported`):
    the passes over futures run :func:`_neox_last_hidden`, the last layer only where it is read."""
    backbone, head = _lm_parts(model)
    G, nF = len(idx), len(futures)
    width = cols.shape[1] if cols is not None else model.vocab_size
    out = np.empty((G, nF, width), dtype=np.float32)
    dev = model.device
    lens = [len(histories[i]) for i in idx]
    Lmax = max(lens)
    f_len = [len(f) for f in futures]
    order = sorted(range(nF), key=lambda j: (f_len[j], j))
    with torch.inference_mode():
        if len(set(lens)) == 1:
            enc = backbone(input_ids=torch.tensor([histories[i] for i in idx], dtype=torch.long, device=dev),
                           use_cache=True)
            cache, h_last, kv = enc.past_key_values, enc.last_hidden_state[:, -1], None
            if _plain_kv_cache(cache):
                kv = [(layer.keys, layer.values) for layer in cache.layers]
        else:  # left-padded caches of unequal lengths (only when _padding_supported)
            parts: dict[int, list[int]] = {}
            for r, L in enumerate(lens):
                parts.setdefault(L, []).append(r)
            kv, h_last = None, None
            for L, rs in parts.items():
                enc = backbone(input_ids=torch.tensor([histories[idx[r]] for r in rs], dtype=torch.long,
                                                      device=dev), use_cache=True)
                layers = enc.past_key_values.layers
                if kv is None:
                    kv = [(l.keys.new_zeros((G,) + l.keys.shape[1:-2] + (Lmax, l.keys.shape[-1])),
                           l.values.new_zeros((G,) + l.values.shape[1:-2] + (Lmax, l.values.shape[-1])))
                          for l in layers]
                    h_last = enc.last_hidden_state.new_empty(G, enc.last_hidden_state.shape[-1])
                rt = torch.tensor(rs, device=dev)
                for (K, Vv), l in zip(kv, layers):
                    K[rt, ..., Lmax - L:, :] = l.keys
                    Vv[rt, ..., Lmax - L:, :] = l.values
                h_last[rt] = enc.last_hidden_state[:, -1]
            cache = None
        lens_t = torch.tensor(lens, dtype=torch.long, device=dev)
        keep = torch.arange(Lmax, device=dev)[None] >= (Lmax - lens_t)[:, None]     # (G, Lmax) real keys

        W = getattr(head, "weight", None)
        direct = centered and cols is not None and isinstance(head, torch.nn.Linear)
        if direct:  # centred logits need no softmax: L[z] = (W_z − W̄)·x + (b_z − b̄) (Def 2.1)
            Wc = (W - W.mean(0, keepdim=True)).float()
            bc = (head.bias - head.bias.mean()).float() if head.bias is not None else None
            cols_t = torch.from_numpy(cols).to(dev)
        elif cols is not None:
            cols_t = torch.from_numpy(cols).to(dev)

        def emit(js, hidden):  # hidden: (G, len(js), d)
            jt = torch.tensor(js, device=dev)
            if direct:  # only the selected columns of the head
                sel = cols_t[jt]                                                 # (B, k)
                vals = torch.einsum("gbd,bkd->gbk", hidden.float(), Wc[sel])
                if bc is not None:
                    vals = vals + bc[sel][None]
            else:
                vals = _centre(torch.log_softmax(head(hidden).float(), -1), centered)
                if cols is not None:
                    vals = torch.gather(vals, 2, cols_t[jt][None].expand(G, -1, -1))
            out[:, js] = vals.cpu().numpy()

        nulls = [j for j in order if f_len[j] == 0]
        if nulls:
            emit(nulls, h_last[:, None, :].expand(G, len(nulls), h_last.shape[-1]))
        rest = [j for j in order if f_len[j] > 0]
        batches = _future_batches(f_len, rest, G, Lmax, batch_tokens)
        blk = None
        if fast and kv is not None and batches:
            toks = torch.tensor([0] + [t for j in rest for t in futures[j]], dtype=torch.long, device=dev)
            blk = _NeoxBlock(backbone, kv, lens_t, keep, max(len(js) for js in batches),
                             max(f_len[j] for j in rest), toks)
        for js in batches:
            B, Tf = len(js), max(f_len[j] for j in js)
            f_ids = torch.zeros(B, Tf, dtype=torch.long)
            for r, j in enumerate(js):
                f_ids[r, :f_len[j]] = torch.tensor(futures[j])
            last = torch.tensor([f_len[j] - 1 for j in js], device=dev)
            ids = f_ids.to(dev).repeat(G, 1)                  # row g·B + r: future r after history g
            if blk is not None:                               # GPT-NeoX: the last layer at t* only
                emit(js, _neox_last_hidden(blk, f_ids.to(dev), last))
                continue
            kwargs = {}
            if kv is not None:                                # plain cache: no deepcopy, no repeated copy
                c = _shared_history_cache(kv, B)
                if Lmax != min(lens):
                    mask = torch.cat([keep, keep.new_ones(G, Tf)], 1).repeat_interleave(B, 0)
                    kwargs = {"attention_mask": mask.long(),
                              "position_ids": (lens_t[:, None] + torch.arange(Tf, device=dev)).repeat_interleave(B, 0)}
            else:
                c = copy.deepcopy(cache)
                c.batch_repeat_interleave(B)                  # history g's cache repeated for each of its B futures
            hid = backbone(input_ids=ids, past_key_values=c, use_cache=True, **kwargs).last_hidden_state
            hid = hid.reshape(G, B, Tf, -1)[:, torch.arange(B, device=dev), last]   # (G, B, d)
            emit(js, hid)
    return out.reshape(G, nF * width)


def _oracle_rows(oracle, histories, futures, idx, V, cols, centered) -> np.ndarray:
    width = cols.shape[1] if cols is not None else V
    out = np.empty((len(idx), len(futures) * width))
    for r, i in enumerate(idx):
        for j, f in enumerate(futures):
            v = np.asarray(oracle(histories[i] + f), dtype=float)
            if v.shape != (V,):
                raise LogitsError(f"oracle: expected logits of shape ({V},), got {v.shape}")
            v = _centre(v, centered)
            out[r, j * width:(j + 1) * width] = v if cols is None else v[cols[j]]
    return out


def extended_logit_matrix(model, histories, futures, k: int | None = None, centered: bool = True, *,
                          columns=None, column_selection: str = "top", column_seed: int = 0,
                          alphabet_size: int | None = None, rows_per_block: int = 32,
                          batch_tokens: int = DEFAULT_BATCH_TOKENS, workdir: str | Path | None = None,
                          progress: bool = False, distributed: bool = True, device="cpu",
                          pad_histories: bool | None = None, last_position_only: bool | None = None) -> np.ndarray:
    """The extended logit matrix L_M(H, F) of Def 2.2, or L_{M,k}(H, F) of §3.1 with ``k``.

    ``model``: a :class:`lib.models.causal_lm.CausalLM`, a model name or path (loaded with
    ``CausalLM.from_pretrained``), or an oracle (callable context tuple -> next-token log-probs
    or logits, float64). ``histories``, ``futures``: lists of token-id sequences (``()`` is
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
    future's last position (:func:`_neox_last_hidden`); None (the default) does so where a probe
    finds it equal to the backbone's own forward, False always uses the backbone's forward,
    True insists (refused otherwise). ``workdir``: finished blocks are saved there and skipped on a rerun
    (resume). Under ``torchrun`` (``distributed=True``) each rank computes every
    world-th block and the blocks are gathered, so every rank returns the whole matrix.
    Returns float32 for a language model, float64 for an oracle. Bad input (empty or too
    long sequences, k > |Σ|, a matrix that cannot fit in memory) is refused before any work.
    """
    from .book.progress import progress as progress_bar
    from .models.causal_lm import check_fits_in_memory

    model = as_model(model, device)
    histories, futures = _as_seqs("histories", histories), _as_seqs("futures", futures)
    lm = _is_lm(model)
    if not lm and alphabet_size is None and histories and futures:
        alphabet_size = vocab_size(model, histories[0] + futures[0])
    if not lm and alphabet_size is None:
        raise LogitsError("give alphabet_size when histories or futures is empty")
    V = model.vocab_size if lm else int(alphabet_size)
    if not lm and (not isinstance(V, (int, np.integer)) or V < 1):
        raise LogitsError(f"parameter 'alphabet_size' must be a positive integer; got {alphabet_size!r}")
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

    supported = _padding_supported(model) if pad_histories is not False else False
    if pad_histories and not supported:
        raise LogitsError(f"pad_histories=True needs a plain DynamicCache and a backbone honouring attention_mask "
                          f"and position_ids; {type(model.model).__name__} fails that check (use None or False)")
    fast = _last_position_supported(model) if last_position_only is not False else False
    if last_position_only and not fast:
        raise LogitsError(f"last_position_only=True needs a GPT-NeoX backbone with a plain DynamicCache whose layers "
                          f"the fast path reproduces; {type(model.model).__name__} fails that check (use None or False)")
    rank, world = process_group() if distributed else (0, 1)
    blocks = _blocks(histories, rows_per_block, padded=supported)
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
            rows = _block_rows(model, histories, futures, idx, cols, centered, batch_tokens, fast)
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
    """Reference for :func:`extended_logit_matrix`: one batched forward pass of every h∘f, no reuse."""
    histories, futures = _as_seqs("histories", histories), _as_seqs("futures", futures)
    contexts = [h + f for h in histories for f in futures]
    rows = _centre(_lm_rows(model, contexts, batch_tokens), centered).numpy()
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
    from .book import cache

    histories, futures = _as_seqs("histories", histories), _as_seqs("futures", futures)
    params = {"model": str(model_id), "histories": [list(h) for h in histories],
              "futures": [list(f) for f in futures], "k": k, "centered": centered,
              "selection": column_selection, "column_seed": column_seed}

    def compute(workdir):
        L = extended_logit_matrix(model, histories, futures, k, centered, column_selection=column_selection,
                                  column_seed=column_seed, workdir=Path(workdir) / "blocks", progress=progress,
                                  **kwargs)
        np.save(Path(workdir) / "matrix.npy", L)

    entry = cache.cached("extended-logits", params, compute, fmt="dir", sources=[extended_logit_matrix])
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
    seqs = _as_seqs("seqs", seqs)
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
    coef, *_ = np.linalg.lstsq(X * w[:, None], np.log(sig) * w, rcond=None)
    return PowerLawFit(alpha=float(-coef[1]), beta=float(coef[2]), c=float(coef[0]), n=int(n), reading=reading)


def normalised_singular_values(L) -> np.ndarray:
    """Singular values (descending) divided by √(number of entries), as App. A.1.2."""
    L = np.asarray(L, dtype=np.float64)
    if L.shape[1] > 8 * L.shape[0] and L.shape[0] > 2000:  # wide and large: eigenvalues of the Gram matrix
        ev = np.linalg.eigvalsh(L @ L.T)[::-1]
        return np.sqrt(np.clip(ev, 0, None)) / np.sqrt(L.size)
    return np.linalg.svd(L, compute_uv=False) / np.sqrt(L.size)


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

def svd(L, method: str = "exact", q: int | None = None, seed: int = 0):
    """(U, S, Vh) of L: ``"exact"`` (LAPACK) or ``"lowrank"`` (``torch.svd_lowrank`` with q
    components, as the paper)."""
    L = np.asarray(L, dtype=np.float64)
    if method == "exact":
        return np.linalg.svd(L, full_matrices=False)
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
    if method == "auto":  # exact where it is cheap, torch.svd_lowrank (as the paper) on large matrices
        method = "exact" if L.size <= 5 * 10 ** 7 else "lowrank"
    if usv is None:  # ``usv``: an SVD of L computed before, reused
        usv = svd(L, method, q=max(ranks) if method == "lowrank" else None, seed=seed)
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
    from .modes import principal_angles

    def top(L, usv=None):
        if usv is not None:
            return usv[0][:, :r]
        L = np.asarray(L, dtype=np.float64)
        if L.size <= 5 * 10 ** 7:
            return np.linalg.svd(L, full_matrices=False)[0][:, :r]
        return svd(L, "lowrank", q=min(min(L.shape), r + 10))[0][:, :r]

    return np.cos(principal_angles(top(L1, usv1), top(L2, usv2)))


def random_subspace_cosines(n: int, r: int, seed: int = 0, trials: int = 20) -> np.ndarray:
    """Mean cosines (descending) of the principal angles between two independent uniformly random
    r-dimensional subspaces of R^n (the dashed baseline of Figs 4 and 11)."""
    from .modes import principal_angles

    rng = np.random.default_rng(seed)
    cos = [np.cos(principal_angles(rng.standard_normal((n, r)), rng.standard_normal((n, r))))
           for _ in range(trials)]
    return np.mean(cos, axis=0)


def nearest_neighbours(L) -> np.ndarray:
    """For each row h, the index of the row h' ≠ h nearest in Euclidean distance (§3.2, Table 1)."""
    L = np.asarray(L, dtype=np.float64)
    sq = (L ** 2).sum(1)
    D = sq[:, None] + sq[None, :] - 2 * L @ L.T
    np.fill_diagonal(D, np.inf)
    return D.argmin(1)


# ---------------------------------------------------------------------------
# LinGen (Algorithm 1, §3.3) and Lemma C.18
# ---------------------------------------------------------------------------

def lingen_coefficients(L_H, L_target, ridge: float = 0.0) -> np.ndarray:
    """v minimising ‖L(h_targ, F) − vᵀ L(H, F)‖² (+ ridge·‖v‖²): the regression of §3.3."""
    A = np.asarray(L_H, dtype=np.float64)
    b = np.asarray(L_target, dtype=np.float64).ravel()
    if A.shape[1] != b.size:
        raise LogitsError(f"L_target has {b.size} columns but L_H has {A.shape[1]}")
    if ridge > 0:
        return np.linalg.solve(A @ A.T + ridge * np.eye(A.shape[0]), A @ b)
    return np.linalg.lstsq(A.T, b, rcond=None)[0]


def _kl_rows(p_log: np.ndarray, q_log: np.ndarray) -> np.ndarray:
    """KL(p ‖ q) row-wise from log-probabilities."""
    return (np.exp(p_log) * (p_log - q_log)).sum(-1)


def _log_softmax(x):
    import scipy.special as sp

    return sp.log_softmax(np.asarray(x, dtype=np.float64), axis=-1)


@dataclass
class Generation:
    """Generated tokens (G, m) and the per-position KL(generator ‖ model) (G, m)."""
    tokens: np.ndarray
    kl: np.ndarray


def lingen(model, histories, v, targets, m: int, seed: int = 0, **kwargs) -> Generation:
    """Algorithm 1 for several targets at once: generation g has coefficients ``v[g]`` over
    ``histories``; at step t it samples z_t ~ softmax(v[g]ᵀ L_M(H, {z_{1:t−1}})) (full vocabulary,
    mean-centred logits), querying M only at h∘z for h ∈ H. Beside each step the KL of this
    distribution from the model's own p(· | h_targ∘z_{1:t−1}) (KL(LinGen ‖ M), the direction
    of Corollary C.19) is recorded; h_targ itself is queried only for that measurement."""
    rng = np.random.default_rng(seed)
    histories, targets = _as_seqs("histories", histories), _as_seqs("targets", targets)
    v = np.asarray(v, dtype=np.float64)
    G = len(targets)
    toks = np.zeros((G, m), dtype=np.int64)
    kls = np.zeros((G, m))
    for t in range(m):
        fut = [tuple(int(x) for x in toks[g, :t]) for g in range(G)]
        L = extended_logit_matrix(model, histories, fut, None, True, **kwargs).astype(np.float64)
        V = L.shape[1] // G
        logits = np.einsum("gh,hgv->gv", v, L.reshape(len(histories), G, V))
        q = _log_softmax(logits)
        p = next_token_logprobs(model, [targets[g] + fut[g] for g in range(G)])
        kls[:, t] = _kl_rows(q, p)
        for g in range(G):
            toks[g, t] = rng.choice(V, p=np.exp(q[g]) / np.exp(q[g]).sum())
    return Generation(toks, kls)


def generate_baseline(sampler: Callable[[list[tuple[int, ...]]], np.ndarray], model, targets, m: int,
                      seed: int = 0) -> Generation:
    """Generation from a baseline next-token sampler (contexts -> log-probs, e.g. a short
    context window or an earlier checkpoint), with KL(baseline ‖ M) at each position."""
    rng = np.random.default_rng(seed)
    targets = _as_seqs("targets", targets)
    G = len(targets)
    toks = np.zeros((G, m), dtype=np.int64)
    kls = np.zeros((G, m))
    for t in range(m):
        ctx = [targets[g] + tuple(int(x) for x in toks[g, :t]) for g in range(G)]
        q = _log_softmax(sampler(ctx))
        p = next_token_logprobs(model, ctx)
        kls[:, t] = _kl_rows(q, p)
        for g in range(G):
            toks[g, t] = rng.choice(q.shape[1], p=np.exp(q[g]) / np.exp(q[g]).sum())
    return Generation(toks, kls)


def short_context(model, window: int) -> Callable:
    """The model reading only the last ``window`` tokens of each context (baseline (b) of §3.3)."""
    return lambda ctx: next_token_logprobs(model, [c[-window:] for c in ctx])


def lemma_c18_bound(S1: np.ndarray, S2: np.ndarray, delta: float, v_norm_sq: float, k: int,
                    alphas: Sequence[float] | None = None) -> dict:
    """Lemma C.18: D_KL(P_truth ‖ P_LinGen) ≤ 2k √(αΔ + γ(1 + ‖v‖²)) whenever S2 ⪯ α S1 + γ I.

    ``S1``, ``S2``: the second-moment matrices E[L(H₀,{f}) L(H₀,{f})ᵀ] under P1 (random
    futures) and P2 (continuations of h₀ by M). For each α on a grid the smallest γ is
    λ_max(S2 − α S1)⁺; the bound is minimised over the grid. Returns alpha, gamma, bound."""
    alphas = np.geomspace(1e-3, 1e3, 121) if alphas is None else np.asarray(alphas, dtype=float)
    best = None
    for a in alphas:
        gamma = max(float(np.linalg.eigvalsh(S2 - a * S1)[-1]), 0.0)
        b = 2 * k * np.sqrt(a * delta + gamma * (1 + v_norm_sq))
        if best is None or b < best["bound"]:
            best = {"alpha": float(a), "gamma": gamma, "bound": float(b)}
    return best


def lemma_c18_estimates(model, histories, v, target, m: int, n_paths: int, seed: int = 0, **kwargs) -> dict:
    """The quantities of Lemma C.18 for one target h₀ and coefficients v, from samples:

    * S1 = E_{P1}[X_f X_fᵀ] and Δ = E_{P1} ‖L_M(h₀, f) − vᵀ L_M(H, f)‖² with f a uniformly random
      string of uniform length t ∈ {0..m−1} (``n_paths`` random strings, every prefix);
    * S2 = E_{P2}[X_f X_fᵀ] with f a continuation of h₀ sampled from M (``n_paths`` paths, every
      prefix), X_f = L_M(H ∪ {h₀}, {f}) over the full vocabulary (mean-centred);
    * the measured D_KL(P_truth ‖ P_LinGen) over m tokens: along the same sampled continuations,
      Σ_t KL(M(· | h₀∘z_{<t}) ‖ softmax(vᵀ L_M(H, {z_{<t}}))), averaged over paths (chain rule).
    """
    rng = np.random.default_rng(seed)
    histories, target = _as_seqs("histories", histories), tuple(int(x) for x in target)
    v = np.asarray(v, dtype=np.float64)
    n = len(histories)
    S = {"truth": np.zeros((n + 1, n + 1)), "random": np.zeros((n + 1, n + 1))}
    delta, kl = 0.0, np.zeros(n_paths)
    V = None
    paths = {"truth": np.zeros((n_paths, m), dtype=np.int64), "random": None}
    for kind in ("truth", "random"):
        if kind == "random":
            paths["random"] = rng.integers(0, V, size=(n_paths, m))
        for t in range(m):
            fut = [tuple(int(x) for x in paths[kind][g, :t]) for g in range(n_paths)]
            L = extended_logit_matrix(model, histories, fut, None, True, **kwargs).astype(np.float64)
            V = L.shape[1] // n_paths
            LH = L.reshape(n, n_paths, V)
            p0 = next_token_logprobs(model, [target + f for f in fut]).astype(np.float64)
            L0 = p0 - p0.mean(-1, keepdims=True)
            for g in range(n_paths):
                X = np.vstack([L0[g][None], LH[:, g]])
                S[kind] += X @ X.T / (n_paths * m)
            lin = np.einsum("h,hgv->gv", v, LH)
            if kind == "truth":
                kl += _kl_rows(p0, _log_softmax(lin))
                for g in range(n_paths):
                    pg = np.exp(p0[g])
                    paths["truth"][g, t] = rng.choice(V, p=pg / pg.sum())
            else:
                delta += float(((L0 - lin) ** 2).sum()) / (n_paths * m)
    return {"S1": S["random"], "S2": S["truth"], "delta": delta, "measured_kl": float(kl.mean()),
            "v_norm_sq": float(v @ v)}
