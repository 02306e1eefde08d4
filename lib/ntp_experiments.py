"""Experiments of the chapter "Geometry of next-token prediction", built on :mod:`lib.ntp`.

The papers: Thrampoulidis, *Implicit Bias of Next-token Prediction* (NeurIPS 2024,
"NeurIPS'24"), and Zhao, Behnia, Vakilian & Thrampoulidis, *Implicit Geometry of Next-token
Prediction* (COLM 2024, "COLM'24"), as summarised in the talk of seed 004 (slide titles in
quotes). Each function runs one part of the chapter and returns a result object whose
``rows`` are the chapter's table:

* the corpus contexts and the entropy identity (:func:`corpus_contexts`, :func:`ce_identity_error`);
* the linear model of NeurIPS'24 App. A.2: gradient descent against Thm 2 and against the
  convex-smooth bound (:func:`linear_experiment`), and where overparameterisation stops
  (:func:`overparameterisation_scan`);
* the UFM's regularisation path (:func:`path_readout`) and the tightness of its logit-space
  relaxation (:func:`ufm_tightness`);
* the closed form for all k-subset supports (:func:`ksubset_experiment`);
* a transformer against the prediction (the talk's "Experiment"): training and read-out
  (:func:`train_transformer`), the same architecture untrained as the control
  (:func:`untrained_readouts`), the geometry read-outs (:func:`lib.ntp.cosine_matrix`,
  :func:`lib.ntp.offdiag_corr`, :func:`lib.ntp.permutation_null`) and the comparisons
  (:func:`compare_geometries`); subspace collapse (:func:`subspace_collapse`);
* the open question d < V (:func:`logit_spectra`, :func:`effective_rank`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import scipy.special

from .book import decide_effect
from .book.device import torch_threads
from .ntp import (NTPData, NTPError, LinearGeometry, cosine_matrix, cross_entropy, extract_contexts,
                  gd_excess_bound, gd_linear, k_subsets, kl_terms, l_star, linear_geometry, linear_w_mm,
                  ntp_svm_first_order, offdiag_corr, path_excess_bound, permutation_null, project_F, separability,
                  solve_ntp_svm, ufm_factors, ufm_objective, ufm_path, ufm_train, word_stream)

__all__ = [
    "CorpusContexts", "corpus_contexts", "ce_identity_error", "LinearRun", "linear_experiment", "OverparamScan",
    "overparameterisation_scan", "PathRun", "path_readout", "ufm_tightness", "KSubsetRun", "ksubset_experiment",
    "train_transformer", "untrained_readouts", "cosine_matrix", "offdiag_corr", "permutation_null",
    "compare_geometries", "PAIRS", "GeometryComparison", "geometry_comparison", "mean_and_se", "Collapse", "subspace_collapse", "centred", "energy_count", "effective_rank", "logit_spectra",
    "decade_index", "ksubset_geometry_error", "reinitialise",
    "REAL_MODELS", "PERM_ALPHA", "REAL_RESOLUTION", "REAL_PAIRS", "REAL_PREDICTIONS", "check_real_model", "load_real_model", "real_models", "real_tokenizer", "word_text",
    "context_text", "RealReadout", "support_words", "real_readout", "real_verdict", "RealGeometry", "real_geometry", "real_readouts", "readout_of",
    "REAL_SHAPES", "real_model_steps",
]


def decade_index(k: np.ndarray) -> int:
    """The index of the checkpoint nearest (in ratio) to a tenth of the last iteration."""
    k = np.asarray(k, float)
    return int(np.argmin(np.abs(np.log(k / (k[-1] / 10)))))


# --------------------------------------------------------------------------------------
# §1 Data
# --------------------------------------------------------------------------------------

@dataclass
class CorpusContexts:
    """The corpus contexts (``data``), the number of word tokens they were taken from, and the
    corpus's identity (the SHA-256 of its documents: the cache key of everything fitted to it)."""

    data: NTPData
    words: int
    corpus_id: str
    name: str

    def examples(self, n: int = 3) -> list[dict]:
        """The first n contexts (the most frequent) and the tokens that follow them."""
        return [{"context": self.data.decode(j), "followed by": ", ".join(self.data.support_labels(j)),
                 "count": int(self.data.counts[:, j].sum())} for j in range(min(n, self.data.m))]


def corpus_contexts(corpus: str, max_corpus_mb: float | None, V: int, T: int, m: int) -> CorpusContexts:
    """The m most frequent repeated contexts of length T of ``corpus`` at the word level, over the
    V − 1 most frequent words and OTHER (:func:`lib.ntp.extract_contexts`). ``corpus`` is any
    spec :func:`lib.substrate.load_text` reads: 'default', a local .txt/.md file or folder, or
    'hf:<dataset>' (streamed up to ``max_corpus_mb``)."""
    from . import substrate

    text = substrate.load_text(corpus, max_corpus_mb)
    streams, words = word_stream(text.documents)
    data = extract_contexts(streams, words, V=V, T=T, m=m)
    return CorpusContexts(data, int(sum(len(s) for s in streams)), text.sha256(), text.name)


def ce_identity_error(datasets: Sequence[NTPData], seed: int, scale: float = 3.0) -> tuple[float, float]:
    """Largest violation of CE(L) = H + Σ_j π̂_j KL(p̂_j ‖ softmax(l_j)) (slide "Entropy
    Lower-bound"), per context and weighted, for Gaussian logits of standard deviation ``scale`` on
    each data set, and the smallest weighted KL among them (the identity is tested far from
    KL = 0). The per-context entropies −Σ_z p̂_{j,z} log p̂_{j,z} are computed here, apart from
    :func:`lib.ntp.entropy_lower_bound`."""
    rng = np.random.default_rng([seed, 0])
    worst, smallest_kl = 0.0, math.inf
    for d in datasets:
        L = scale * rng.standard_normal(d.P.shape)
        h_j = -scipy.special.xlogy(d.P, d.P).sum(0)
        kl = kl_terms(d.pi, d.P, L)
        per = cross_entropy(d.pi, d.P, L, per_context=True)
        worst = max(worst, float(np.abs(per - h_j - kl).max()),
                    abs(cross_entropy(d.pi, d.P, L) - float(d.pi @ h_j) - float(d.pi @ kl)))
        smallest_kl = min(smallest_kl, float(d.pi @ kl))
    return worst, smallest_kl


# --------------------------------------------------------------------------------------
# §2 The linear model (NeurIPS'24 App. A.2)
# --------------------------------------------------------------------------------------

@dataclass
class LinearRun:
    """Gradient descent on W ↦ CE(W Hf) with fixed Gaussian embeddings Hf (d × m): the geometry
    (W*, the projector onto F), the NTP-SVM solution W^mm, the GD trace at log-spaced checkpoints
    (:func:`lib.ntp.gd_linear`) and the bound B_k of :func:`lib.ntp.gd_excess_bound` there."""

    data: NTPData
    Hf: np.ndarray
    geometry: LinearGeometry
    W_mm: np.ndarray
    trace: dict
    bound: np.ndarray

    @property
    def k(self) -> np.ndarray:
        return self.trace["k"]

    def _ratio(self, series: np.ndarray) -> float:
        return float(series[-1] / series[decade_index(self.k)])

    @property
    def solution_error(self) -> float:
        """max(‖P_F(W^mm)‖/‖W^mm‖, relative residual of W*): W^mm ∈ F^⊥ and W* solves the compatibility system."""
        return max(float(np.linalg.norm(self.geometry.project_F(self.W_mm)) / np.linalg.norm(self.W_mm)),
                   self.geometry.residual)

    @property
    def excess_decade_ratio(self) -> float:
        """(CE − H) at the last iteration K over its value at K/10."""
        return self._ratio(self.trace["excess"])

    @property
    def subspace_decade_ratio(self) -> float:
        """‖P_F(W_K) − W*‖ over ‖P_F(W_{K/10}) − W*‖."""
        return self._ratio(self.trace["dist_F"])

    @property
    def direction_decade_ratio(self) -> float:
        """(1 − cos(W_K, W^mm)) over (1 − cos(W_{K/10}, W^mm))."""
        return self._ratio(1 - self.trace["cos_mm"])

    @property
    def log_growth(self) -> float:
        """Growth of ‖P_⊥(W_k)‖ from K/10 to K in units of ‖W^mm‖ ln(K/(K/10)): 1 when
        W_k ≈ W* + ln(k) W^mm + a bounded remainder."""
        i = decade_index(self.k)
        span = math.log(self.k[-1] / self.k[i])
        return float((self.trace["norm_perp"][-1] - self.trace["norm_perp"][i]) / (np.linalg.norm(self.W_mm) * span))

    @property
    def bound_ratio(self) -> float:
        """max_k (CE(W_k) − H) / B_k: at most 1 by the convex-smooth GD bound."""
        return float((self.trace["excess"] / self.bound).max())


def linear_experiment(data: NTPData, d: int, steps: int, seed: int, n_checkpoints: int = 60) -> LinearRun:
    """NeurIPS'24 App. A.2: Gaussian embeddings Hf ∈ R^{d×m}, W* and F (:func:`lib.ntp.linear_geometry`),
    W^mm (:func:`lib.ntp.linear_w_mm`), GD with η = 1/L_s from W_0 = 0 for ``steps`` iterations,
    and the bound B_k at its checkpoints."""
    Hf = np.random.default_rng([seed, 1]).standard_normal((d, data.m))
    geo = linear_geometry(data.P, Hf)
    W_mm = linear_w_mm(data.S, Hf)
    trace = gd_linear(data.pi, data.P, Hf, steps=steps, geometry=geo, W_mm=W_mm, n_checkpoints=n_checkpoints)
    bound = gd_excess_bound(data.pi, data.P, Hf, geo.W_star, W_mm, trace["eta"], trace["k"])
    return LinearRun(data, Hf, geo, W_mm, trace, bound)


@dataclass
class OverparamScan:
    """NTP_H-compatibility and NTP-separability of Gaussian embeddings at each width d (rows)."""

    m: int
    rows: list[dict]

    @property
    def failures_above_m(self) -> int:
        """Widths d > m at which either condition fails (the lemma says none)."""
        return sum(1 for r in self.rows if r["d"] > self.m and not (r["compatible"] and r["separable"]))

    def first(self, condition: str) -> int | None:
        """The smallest tested width at which ``condition`` ('compatible' or 'separable') holds."""
        return min((r["d"] for r in self.rows if r[condition]), default=None)


def overparameterisation_scan(data: NTPData, d_scan: Sequence[int], seed: int) -> OverparamScan:
    """For each d of ``d_scan``: Gaussian embeddings (d × m), compatibility by the relative
    least-squares residual of the linear system (≤ 1e-8) and separability as an LP feasibility
    problem (HiGHS; slide "NTP compatibility & separability", Lemma)."""
    rows = []
    for d in d_scan:
        Hd = np.random.default_rng([seed, 2, d]).standard_normal((d, data.m))
        rows.append({"d": d, "compatible": linear_geometry(data.P, Hd).compatible,
                     "separable": separability(data.S, Hd)})
    return OverparamScan(data.m, rows)


# --------------------------------------------------------------------------------------
# §3 The UFM's regularisation path (COLM'24)
# --------------------------------------------------------------------------------------

@dataclass
class PathRun:
    """The regularisation path L_λ at decreasing λ, read against L* and L^mm: per λ the relative
    distance ‖P_F(L_λ) − L*‖/‖L*‖, the excess CE − H, its bound B(λ)
    (:func:`lib.ntp.path_excess_bound`), cos(P_⊥ L_λ, L^mm) and ‖P_⊥ L_λ‖ (rows)."""

    lambdas: list[float]
    rows: list[dict]

    def _ratio(self, key: str) -> float:
        """The value at the smallest λ over the value at 100 times that λ."""
        last = self.rows[-1]
        ref = next(r for r in self.rows if abs(r["lambda"] / (100 * last["lambda"]) - 1) < 1e-9)
        return float(last[key] / ref[key])

    @property
    def subspace_ratio(self) -> float:
        return self._ratio("dist_F")

    @property
    def excess_ratio(self) -> float:
        return self._ratio("excess")

    @property
    def direction_ratio(self) -> float:
        return self._ratio("1 - cos")

    @property
    def bound_ratio(self) -> float:
        """max_λ (CE(L_λ) − H) / B(λ): at most 1 for optimal L_λ."""
        return max(r["excess"] / r["bound"] for r in self.rows)

    def table_rows(self) -> list[dict]:
        """The rows with the chapter's column names."""
        return [{"λ": r["lambda"], "‖P_F(L) − L*‖/‖L*‖": r["dist_F"], "CE − H": r["excess"], "bound B(λ)": r["bound"],
                 "1 − cos(P⊥L, Lᵐᵐ)": r["1 - cos"], "‖P⊥L‖": r["norm_perp"]} for r in self.rows]


def path_readout(data: NTPData, lambdas: Sequence[float], Ls: Sequence[np.ndarray], L_mm: np.ndarray) -> PathRun:
    """Read the path points ``Ls`` (the minimisers of CE(L) + 2λ‖L‖_* at ``lambdas``, e.g. from
    :func:`lib.ntp.ufm_logits`) against L* = :func:`lib.ntp.l_star` and ``L_mm`` (COLM'24 Thm)."""
    S, Ls_ = data.S, list(Ls)
    L_star = l_star(data.P)
    bounds = path_excess_bound(data.pi, data.P, L_star, L_mm, lambdas)
    rows = []
    for lam, L, bound in zip(lambdas, Ls_, bounds):
        PF = project_F(S, L)
        Pp = L - PF
        cos = float((Pp * L_mm).sum() / (np.linalg.norm(Pp) * np.linalg.norm(L_mm)))
        rows.append({"lambda": float(lam), "dist_F": float(np.linalg.norm(PF - L_star) / np.linalg.norm(L_star)),
                     "excess": cross_entropy(data.pi, data.P, L) - data.entropy, "bound": float(bound),
                     "1 - cos": 1 - cos, "norm_perp": float(np.linalg.norm(Pp))})
    return PathRun([float(x) for x in lambdas], rows)


def ufm_tightness(data: NTPData, lambdas: Sequence[float], Ls: Sequence[np.ndarray], seed: int,
                  max_iter: int = 3000) -> dict:
    """The factorised UFM min_{W,H} CE(WH) + λ(‖W‖² + ‖H‖²) by L-BFGS (d = V) against the convex
    relaxation's optimum CE(L_λ) + 2λ‖L_λ‖_* at each λ: the largest relative difference of the
    two optima, the largest gradient norm where L-BFGS stopped, and the largest error of
    ‖W‖² + ‖H‖² = 2‖L‖_* for the factors U√Σ, √ΣVᵀ of L_λ (slide "Logit-space relaxation")."""
    gap = grad = factor = 0.0
    for lam, L in zip(lambdas, Ls):
        fact = ufm_path(data.pi, data.P, [lam], max_iter=max_iter, seed=seed)[0]
        relaxed = ufm_objective(data.pi, data.P, L, lam)
        gap = max(gap, abs(fact["objective"] - relaxed) / abs(relaxed))
        grad = max(grad, fact["grad_norm"])
        W, H = ufm_factors(L, d=data.V)
        nuc = np.linalg.svd(L, compute_uv=False).sum()
        factor = max(factor, abs((W ** 2).sum() + (H ** 2).sum() - 2 * nuc) / nuc)
    return {"gap": float(gap), "grad_norm": float(grad), "factor_error": float(factor)}


# --------------------------------------------------------------------------------------
# §4 All k-subset supports
# --------------------------------------------------------------------------------------

@dataclass
class KSubsetRun:
    """The nuclear-norm NTP-SVM for all k-subset supports of [V], k = 1, …, V − 1 (rows): the
    distance of the SDP's L^mm to the best multiple of the centred (I − 11ᵀ/V)S and of the slide's
    (I − 11ᵀ)S (relative to ‖L^mm‖), the largest deviation from the stated geometry, the ADMM
    solver's relative difference, and each solve's certificate (max of gap and violation)."""

    V: int
    rows: list[dict]

    @property
    def certificates(self) -> list[float]:
        return [r["certificate"] for r in self.rows]


def _residual_to_multiple(L: np.ndarray, candidate: np.ndarray) -> float:
    c = float((candidate * L).sum() / (candidate * candidate).sum())
    return float(np.linalg.norm(L - c * candidate) / np.linalg.norm(L))


def ksubset_geometry_error(S: np.ndarray, L: np.ndarray) -> float:
    """Largest deviation of the factors of L from COLM'24 Prop. (ii)–(iii): word embeddings a simplex
    ETF (cos = −1/(V − 1)), context embeddings equinorm (relative SD of the norms) and collinear
    with Σ_{z∈S_j} w_z (1 − cos)."""
    V = S.shape[0]
    W, H = ufm_factors(L)
    cw = cosine_matrix(W)
    etf = np.abs(cw[~np.eye(V, dtype=bool)] + 1 / (V - 1)).max()
    norms = np.linalg.norm(H, axis=0)
    sums = W.T @ S
    coll = np.abs(1 - (sums * H).sum(0) / (np.linalg.norm(sums, axis=0) * norms)).max()
    return float(max(etf, norms.std() / norms.mean(), coll))


def ksubset_experiment(V: int, solver: str = "CLARABEL", admm_tol: float = 1e-9) -> KSubsetRun:
    """For k = 1, …, V − 1: the SDP (:func:`lib.ntp.solve_ntp_svm`) and ADMM
    (:func:`lib.ntp.ntp_svm_first_order`) on all C(V, k) supports of size k, compared with the two
    candidate closed forms (COLM'24 Prop.; slide "NTP max-margin logits")."""
    J = np.ones((V, V))
    rows = []
    for k in range(1, V):
        S = k_subsets(V, k)
        res = solve_ntp_svm(S, solver)
        admm = ntp_svm_first_order(S, tol=admm_tol)
        rows.append({"k": k, "m": S.shape[1], "nuclear norm": res.objective,
                     "to (I − 11ᵀ/V)S": _residual_to_multiple(res.L, (np.eye(V) - J / V) @ S),
                     "to (I − 11ᵀ)S": _residual_to_multiple(res.L, (np.eye(V) - J) @ S),
                     "geometry error": ksubset_geometry_error(S, res.L),
                     "ADMM difference": abs(admm.objective - res.objective) / res.objective,
                     "certificate": max(res.gap, res.violation)})
    return KSubsetRun(V, rows)


# --------------------------------------------------------------------------------------
# §5 A transformer against the prediction (the talk's "Experiment")
# --------------------------------------------------------------------------------------

def _transformer(data: NTPData, hidden: int, layers: int, heads: int):
    from .conditional_models import TransformerModel

    if data.contexts is None:
        raise NTPError("a transformer needs the contexts' tokens (data from extract_contexts)")
    return TransformerModel(data.contexts, data.V, hidden=hidden, layers=layers, heads=heads)


def train_transformer(data: NTPData, hidden: int, layers: int, steps: int, lr: float = 1e-3,
                      weight_decay: float = 0.01, heads: int = 4, seed: int = 0, device: str = "cpu") -> dict:
    """A GPT-NeoX (the book's :class:`lib.conditional_models.TransformerModel`) reading the T
    context tokens and predicting the next, trained full-batch with AdamW on the exact NTP loss
    CE = −Σ_j π̂_j Σ_z p̂_{j,z} log p(z | x_j). Returns the context embeddings H (d × m; the final
    hidden state at the last position, after the last layer norm), the word embeddings W
    (V × d; the unembedding), the logits L = WH (V × m), the loss curve and the seconds."""
    import torch

    torch.manual_seed(seed)
    model = _transformer(data, hidden, layers, heads).to(device)
    Pt = torch.as_tensor(data.P.T, dtype=torch.float32, device=device)
    pit = torch.as_tensor(data.pi, dtype=torch.float32, device=device)
    rows = torch.arange(data.m, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = np.empty(steps)
    t0 = time.perf_counter()
    with torch_threads(1):
        _adamw_loop(model, opt, rows, Pt, pit, losses, steps)
    seconds = time.perf_counter() - t0
    return _readout(model, data, losses, seconds)


def _adamw_loop(model, opt, rows, Pt, pit, losses, steps):
    for s in range(steps):
        opt.zero_grad()
        loss = -(pit * (Pt * model(rows)).sum(1)).sum()
        loss.backward()
        opt.step()
        losses[s] = float(loss.detach())


def _readout(model, data, losses, seconds):
    import torch

    model.eval()
    with torch.no_grad():
        rows = torch.arange(data.m, device=model.history_tokens.device)
        ids = model.history_tokens[rows]
        h = model.lm.gpt_neox(input_ids=ids, use_cache=False).last_hidden_state[:, -1, :]
        W = model.lm.get_output_embeddings().weight
        logits = model.lm(input_ids=ids, use_cache=False).logits[:, -1, :]
        H = h.double().T.cpu().numpy()
        Wn = W.double().cpu().numpy()
        check = float((logits.double() - (h.double() @ W.double().T)).abs().max())
    L = Wn @ H
    return {"H": H, "W": Wn, "L": L, "losses": losses, "seconds": np.array(seconds),
            "readout_error": np.array(check), "final_ce": np.array(cross_entropy(data.pi, data.P, L))}


def reinitialise(lm, generator, std: float | None = None) -> None:
    """Draw fresh weights for a GPT-NeoX from its own initialisation (that of
    ``GPTNeoXPreTrainedModel``): linear and embedding weights N(0, std²) with std the config's
    ``initializer_range``, biases 0, layer norms weight 1 and bias 0."""
    import torch
    from torch import nn

    std = lm.config.initializer_range if std is None else std
    with torch.no_grad():
        for module in lm.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()


def untrained_readouts(data: NTPData, hidden: int, layers: int, n: int, seed: int, heads: int = 4) -> list[dict]:
    """The read-out (H, W, L as in :func:`train_transformer`) of ``n`` untrained transformers of the
    same architecture, each a fresh draw of the initialisation (:func:`reinitialise`): the control
    that tells what the architecture alone, reading the context tokens, puts in the geometry."""
    import torch

    if n < 2:
        raise NTPError(f"the untrained control needs at least 2 models (a spread); got n={n}")
    torch.manual_seed(seed)
    model = _transformer(data, hidden, layers, heads)
    out = []
    with torch_threads(1):
        for i in range(n):
            reinitialise(model.lm, torch.Generator().manual_seed(10_000 * (seed + 1) + i))
            out.append(_readout(model, data, np.empty(0), 0.0))
    return out


def compare_geometries(pairs: Mapping[str, tuple], n_perm: int, seed: int) -> list[dict]:
    """One row per named pair (A, B, controls): the correlation r of the off-diagonal entries of
    the cosine matrices A and B, its relabelling p-value (1 + #{null ≥ r})/(n_perm + 1) against
    :func:`lib.ntp.permutation_null`, and the same correlation for each control matrix A₀ in place of A
    (A's model untrained): their mean and standard deviation, and z = (r − mean)/SD, how far
    training moved the geometry towards B beyond what the untrained architecture gives, with its
    standard error from the n controls, √(1/n + z²/(2(n − 1))) (the mean's and the SD's)."""
    rows = []
    for name, (A, B, controls) in pairs.items():
        r = offdiag_corr(A, B)
        null = permutation_null(A, B, n_perm=n_perm, seed=seed)
        r0 = np.array([offdiag_corr(A0, B) for A0 in controls])
        if r0.size < 2 or not np.isfinite(r0).all() or r0.std() == 0:
            raise NTPError(f"pair {name!r}: the controls need at least two finite, unequal correlations; got {r0}")
        sd = float(r0.std(ddof=1))
        z = (r - float(r0.mean())) / sd
        n = r0.size
        rows.append({"pair": name, "r": r, "p (relabelling)": (1 + int((null >= r).sum())) / (n_perm + 1),
                     "r untrained": float(r0.mean()), "SD untrained": sd, "z": z,
                     "se untrained": sd / math.sqrt(n), "se z": math.sqrt(1 / n + z * z / (2 * (n - 1)))})
    return rows


#: The compared pairs of geometries: key → (contexts or words, model, what it is compared with).
PAIRS = {"tf_ufm_contexts": ("contexts", "transformer", "UFM"),
         "tf_mm_contexts": ("contexts", "transformer", "L^mm factors"),
         "tf_support_contexts": ("contexts", "transformer", "supports"),
         "ufm_mm_contexts": ("contexts", "UFM", "L^mm factors"),
         "tf_mm_words": ("words", "transformer", "L^mm factors"),
         "ufm_mm_words": ("words", "UFM", "L^mm factors"),
         "tf_ufm_words": ("words", "transformer", "UFM")}


@dataclass
class GeometryComparison:
    """The cosine matrices of context embeddings (``contexts``: cos(H, H)) and of centred word
    embeddings (``words``: cos(Wᵀ, Wᵀ)) per model, and the support overlaps cos(S, S), cos(Sᵀ, Sᵀ);
    the same matrices of the untrained models (``untrained``: geometry → model → list); and per
    pair of :data:`PAIRS` the row of :func:`compare_geometries` (``rows``)."""

    contexts: dict
    words: dict
    untrained: dict
    rows: dict

    def table_rows(self) -> list[dict]:
        shown = ("r", "p (relabelling)", "r untrained", "SD untrained", "z", "se z")
        return [{"geometry": g, "model": a, "against": b, **{k: self.rows[key][k] for k in shown}}
                for key, (g, a, b) in PAIRS.items()]


def geometry_comparison(data: NTPData, embeddings: Mapping[str, tuple], untrained: Mapping[str, Sequence[tuple]],
                        n_perm: int, seed: int) -> GeometryComparison:
    """The talk's comparison ("Numerical Example"): ``embeddings`` maps 'transformer', 'UFM' and
    'L^mm factors' to word and context embeddings (W: V × d, H: d × m), ``untrained`` maps
    'transformer' and 'UFM' to the (W, H) of untrained copies; every pair of :data:`PAIRS` is read
    by :func:`compare_geometries`, with the untrained copies of the pair's model as the control."""
    def geometry(W, H):
        return cosine_matrix(np.asarray(H).T), cosine_matrix(W, center=True)

    contexts, words = {}, {}
    for name, (W, H) in embeddings.items():
        contexts[name], words[name] = geometry(W, H)
    contexts["supports"], words["supports"] = cosine_matrix(data.S.T), cosine_matrix(data.S)
    controls = {"contexts": {}, "words": {}}
    for name, copies in untrained.items():
        pairs = [geometry(W, H) for W, H in copies]
        controls["contexts"][name] = [c for c, _ in pairs]
        controls["words"][name] = [w for _, w in pairs]
    mats = {"contexts": contexts, "words": words}
    rows = compare_geometries({key: (mats[g][a], mats[g][b], controls[g][a]) for key, (g, a, b) in PAIRS.items()},
                              n_perm=n_perm, seed=seed)
    return GeometryComparison(contexts, words, controls, dict(zip(PAIRS, rows)))


def mean_and_se(values) -> tuple[float, float]:
    """The mean of independent draws and its standard error SD/√n (SD with n − 1)."""
    values = np.asarray(values, float)
    if values.size < 2:
        raise NTPError(f"a standard error needs at least two values; got {values.size}")
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(values.size))


@dataclass
class Collapse:
    """Pairs of distinct contexts with identical supports of size ≥ 2 (the talk's "subspace
    collapse"), the mean cosine of their embeddings, the mean over all pairs, and the closest pairs."""

    pairs: int
    mean_cos: float | None
    all_pairs_mean_cos: float
    rows: list[dict] = field(default_factory=list)


def subspace_collapse(data: NTPData, C: np.ndarray, top: int = 5) -> Collapse:
    """Contexts j < j' with S_j = S_j' and |S_j| ≥ 2, and the cosine C_{jj'} of their embeddings."""
    S = data.S
    same = [(i, j) for i in range(data.m) for j in range(i + 1, data.m)
            if S[:, i].sum() >= 2 and np.array_equal(S[:, i], S[:, j])]
    iu = np.triu_indices(data.m, 1)
    rows = [{"cos": float(C[i, j]), "context": data.decode(i), "context ′": data.decode(j),
             "shared support": ", ".join(data.support_labels(i))}
            for i, j in sorted(same, key=lambda ij: -C[ij])[:top]]
    return Collapse(len(same), float(np.mean([C[i, j] for i, j in same])) if same else None,
                    float(C[iu].mean()), rows)


# --------------------------------------------------------------------------------------
# §6 The open question d < V
# --------------------------------------------------------------------------------------

def centred(L) -> np.ndarray:
    """L with each column's mean removed (logits are defined up to a constant per column)."""
    L = np.asarray(L, float)
    return L - L.mean(0, keepdims=True)


def energy_count(s, share: float = 0.99) -> int:
    """The number of the singular values ``s`` (in decreasing order) needed to hold ``share`` of
    Σσ_i² (the energy)."""
    s = np.asarray(s, float)
    e = np.cumsum(s ** 2) / (s ** 2).sum()
    return int(np.searchsorted(e, share) + 1)


def effective_rank(L, share: float = 0.99) -> int:
    """The number of singular values of L needed to hold ``share`` of the energy Σσ_i²."""
    return energy_count(np.linalg.svd(np.asarray(L, float), compute_uv=False), share)


def logit_spectra(data: NTPData, named: Mapping[str, np.ndarray], small_d: Sequence[int], steps: int, lr: float,
                  seed: int) -> dict[str, np.ndarray]:
    """Singular values of the centred logit matrices of ``named`` and of UFMs of each width d in
    ``small_d`` (AdamW, weight decay 0.01, ``steps`` steps on the corpus contexts)."""
    mats = {name: centred(L) for name, L in named.items()}
    for d in small_d:
        W, H, _ = ufm_train(data.pi, data.P, d, steps=steps, lr=lr, weight_decay=0.01, seed=seed)
        mats[f"UFM d={d}"] = centred(W @ H)
    return {name: np.linalg.svd(L, compute_uv=False) for name, L in mats.items()}


# ---------------------------------------------------------------------------
# What a run costs before it starts (lowrank-book plan; the declaration's `costs:`)
# ---------------------------------------------------------------------------

SVM_ITERATIONS = 10_000   # SCS iterations assumed for the NTP-SVM at eps = 1e-7 (its cap is 10^6; at ci it takes ~10^3–10^4)


def transformer_config(vocab: int, hidden: int, layers: int, context_length: int):
    """The shape of the chapter's transformer (lib.conditional_models.TransformerModel: GPT-NeoX, d_ff = 4d,
    four heads) as a transformers config, for the cost formulas of lib.models.causal_lm."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                         intermediate_size=4 * hidden, max_position_embeddings=max(context_length, 8))


def heavy_steps(values: dict) -> list:
    """The heavy steps of the chapter "Geometry of next-token prediction" for the run's parameter
    ``values`` (the declaration's ``costs:``), each a :class:`lib.book.costs.HeavyStep`:

    1. the nuclear-norm NTP-SVM on the m = contexts corpus contexts (cvxpy, SCS): a semidefinite cone of
       order V + m, whose projection (an eigendecomposition, about 9·n³ FLOPs) dominates each of the
       assumed :data:`SVM_ITERATIONS` iterations; memory: a few dense n × n matrices;
    2. gradient descent on the linear model of NeurIPS'24 App. A.2 (V = 10, m = 50, d = 60): two
       V × d × m products a step;
    3. the transformer and the UFM beside it: tf_steps full-batch AdamW steps on the m contexts of T
       tokens (3× a forward pass each), then n_untrained fresh initialisations read out once; memory:
       lib.models.causal_lm.estimate_training_bytes;
    4. the permutation tests: n_perm relabellings of each of the four m × m geometry correlations.
    """
    from .book.costs import HeavyStep
    from .models.causal_lm import estimate_training_bytes, forward_flops

    V, m, T = values["vocab"], values["contexts"], values["context_length"]
    n = V + m
    steps = [HeavyStep("the NTP-SVM (semidefinite cone, SCS)", f"V = {V}, m = {m}: a cone of order {n}",
                       8.0 * 6 * n * n, 9.0 * n ** 3 * SVM_ITERATIONS, "contexts or vocab", host=True)]
    steps.append(HeavyStep("gradient descent on the linear model", f"{values['gd_steps']} steps, V = 10, m = 50, d = 60",
                           8.0 * 4 * 10 * 50 * 60, 2 * 2 * 10 * 60 * 50 * float(values["gd_steps"]), "gd_steps", host=True))
    cfg = transformer_config(V, values["tf_hidden"], values["tf_layers"], T)
    train = 3 * values["tf_steps"] * forward_flops(cfg, m * T, T / 2) + values["n_untrained"] * forward_flops(
        cfg, m * T, T / 2)
    steps.append(HeavyStep("the transformer's training and its untrained controls",
                           f"d = {values['tf_hidden']}, {values['tf_layers']} layers, {values['tf_steps']} steps on "
                           f"{m} contexts of {T} tokens, {values['n_untrained']} controls",
                           float(estimate_training_bytes(cfg, m, T)), train, "tf_hidden, tf_layers or tf_steps"))
    steps.append(HeavyStep("the permutation tests", f"{values['n_perm']} relabellings of 4 m × m correlations, m = {m}",
                           8.0 * 4 * m * m, 4 * 4.0 * m * m * values["n_perm"], "n_perm", host=True))
    steps += real_model_steps(values)
    return steps


#: The shapes of the released models (their GGUF headers), for pricing §7 before anything is loaded:
#: width, layers, feed-forward width, vocabulary.
REAL_SHAPES = {"smollm2-135m": (576, 30, 1536, 49152), "gemma3-270m": (640, 18, 2048, 262144)}


def real_model_steps(values: dict) -> list:
    """The heavy steps of §7 (none with real_model: none): loading the released model and its twin
    (float32, both held: 8 bytes a parameter; the first run also dequantises them into the cache) and
    reading the m contexts through the backbone (about T + 2 tokens each: 2 FLOPs a token per parameter outside
    the embedding, twice; keys and values counted at full width, an upper bound for grouped-query attention), then n_perm
    relabellings of 4 correlations (counted twice: lib.lenses.geometry_correlation and the verdict's
    quantile) and real_boot paired-bootstrap replicates of 4 pairs (two correlations of m² entries each)."""
    from .book.costs import HeavyStep

    name = values.get("real_model") or "none"
    if name == "none":
        return []
    d, layers, ff, vocab = REAL_SHAPES[name]
    params = layers * (4 * d * d + 3 * d * ff) + vocab * d
    m, T = values["contexts"], values["context_length"]
    n_perm, n_boot = values["n_perm"], values.get("real_boot") or 0
    return [HeavyStep(f"§7: {name} and its untrained twin read on the corpus contexts",
                      f"{params / 1e6:.0f}M parameters, {m} contexts of about {T + 2} tokens, twice",
                      8.0 * params, 2 * 2.0 * (params - vocab * d) * m * (T + 2) + 2 * 4.0 * params,
                      "real_model or contexts", host=True),
            HeavyStep("§7: relabellings and the paired bootstrap", f"{n_perm} relabellings and {n_boot} replicates of "
                      f"4 correlations, m = {m}", 8.0 * 4 * m * m, 4 * 4.0 * m * m * (2 * n_perm + 2 * n_boot),
                      "n_perm or real_boot", host=True)]


# --------------------------------------------------------------------------------------
# §7 A model no one here trained (a released language model against its untrained twin)
# --------------------------------------------------------------------------------------

#: The released models the chapters may read (``real_model``), and "none" to skip them.
REAL_MODELS = ("smollm2-135m", "gemma3-270m", "none")
#: The permutation level a real model's correlation must beat: the one-sided normal tail at the book's
#: z* = 3 (lib.book.Z_FINDING), 0.00135, so that the relabelling test is as strict as every other finding.
PERM_ALPHA = 0.00135
#: The smallest gain in correlation over the untrained twin that counts: Cohen's "small" correlation (0.1),
#: the resolution the Three lenses chapter uses for the same read-out.
REAL_RESOLUTION = 0.1
#: The compared pairs: key → (geometry, what the model's cosines are compared with).
REAL_PAIRS = {"mm_contexts": ("contexts", "L^mm factors"), "support_contexts": ("contexts", "supports"),
              "mm_words": ("words", "L^mm factors"), "support_words": ("words", "supports")}
#: What the talk predicts for each pair (slide "Numerical Example"; heat maps, no number given).
REAL_PREDICTIONS = {"mm_contexts": "eigenfactors of L^mm predict geometry",
                    "support_contexts": "support overlaps give a good proxy",
                    "mm_words": "eigenfactors of L^mm predict geometry",
                    "support_words": "support overlaps give a good proxy"}


def check_real_model(real_model) -> str:
    """``real_model`` if it is one of :data:`REAL_MODELS`; refused otherwise, naming the allowed values."""
    if real_model not in REAL_MODELS:
        raise NTPError(f"parameter 'real_model' must be one of {', '.join(REAL_MODELS)}; got {real_model!r}")
    return real_model


def load_real_model(name: str, device="cpu"):
    """({"final": the released model, "init": its untrained twin}, tokenizer) of a GGUF model
    (:func:`lib.models.hub.load_model` at revisions "final" and "init"; the twin has the same
    configuration, a seeded initialisation and the same quantise–dequantise round trip, so the two differ
    by training alone). The tokenizer is read from the dequantised folder (the GGUF header's, saved there)."""
    return real_models(name, device), real_tokenizer(name)


def real_models(name: str, device="cpu") -> dict:
    """{"final": the released GGUF model ``name``, "init": its untrained twin} (:func:`load_real_model`)."""
    from .models import hub

    return {rev: hub.load_model(name, rev, device=device) for rev in ("final", "init")}


def real_tokenizer(name: str):
    """The tokenizer of the GGUF model ``name`` (its header's, saved in the dequantised folder)."""
    from .models import gguf_file, hub

    return hub.tokenizer_from(str(gguf_file.dequantised_dir(name, "final")), {})


def word_text(label: str) -> str:
    """A corpus word as it reads after other words: ' word', and the full stop '.' as itself."""
    return "." if label == "." else " " + label


def context_text(labels) -> str:
    """A corpus context (its words) as text: words separated by spaces, the full stop attached."""
    return "".join(word_text(w) for w in labels).lstrip()


@dataclass
class RealReadout:
    """What a released model's geometry is read from on the corpus contexts: ``H`` (m × d) the final hidden
    states (after the last norm) at each context's last token, ``W`` (n × d) the output-embedding rows
    of the ``words`` (indices into the corpus vocabulary) at their first token ``token_ids``;
    ``single_token``: how many of those words are one token; ``tied``: whether the output embedding is
    the input embedding."""

    H: np.ndarray
    W: np.ndarray
    words: np.ndarray
    token_ids: np.ndarray
    single_token: int
    tied: bool


def support_words(data: NTPData) -> np.ndarray:
    """The corpus words (not OTHER, symbol V − 1, which no single token stands for) that follow at least
    one of the contexts: the rows of S the word geometry is read on."""
    return np.flatnonzero(data.S[:-1].sum(1) > 0)


def real_readout(model, tokenizer, data: NTPData) -> RealReadout:
    """The context embeddings (:func:`lib.lenses.context_embeddings`) of the corpus contexts written as text
    (:func:`context_text`) and tokenized by ``tokenizer``, and the output-embedding rows
    (:func:`lib.lenses.word_embeddings`) of the first token of each support word (:func:`support_words`,
    :func:`word_text`)."""
    from . import lenses            # deferred: lib.lenses loads torch

    if data.contexts is None or data.labels is None:
        raise NTPError("a real model reads the contexts as text: data must come from extract_contexts (tokens and labels)")
    texts = [context_text([data.labels[t] for t in row]) for row in data.contexts]
    histories = [tuple(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    words = support_words(data)
    pieces = [tokenizer(word_text(data.labels[z]), add_special_tokens=False)["input_ids"] for z in words]
    ids = np.array([p[0] for p in pieces], dtype=np.int64)
    net = model.model
    tied = bool(getattr(net.config, "tie_word_embeddings", False)) and \
        net.get_output_embeddings().weight.data_ptr() == net.get_input_embeddings().weight.data_ptr()
    return RealReadout(lenses.context_embeddings(model, histories), lenses.word_embeddings(model, ids), words, ids,
                       sum(len(p) == 1 for p in pieces), tied)


def real_verdict(r: float, null: np.ndarray, effect, alpha: float = PERM_ALPHA):
    """The finding "the trained model's geometry follows the prediction" for one pair, decided twice:

    * against relabelling: r must exceed the (1 − ``alpha``) quantile r_α of ``null`` (the permutation
      null); with fewer than 1/alpha relabellings r_α is not resolved and the verdict is undecided;
    * against the untrained twin: ``effect`` (:func:`lib.book.decide_effect` of the paired difference
      r − r_twin) must reproduce.

    Returns a :class:`lib.lenses_experiments.Verdict` whose value is the margin in correlation units:
    r − r_α when that is negative; else upper − resolution (< 0) when the twin effect does not reproduce;
    else min(lower, r − r_α) ≥ 0 when both hold; undecided when the twin effect is."""
    from .lenses_experiments import Verdict, effect_record      # deferred: it loads torch

    null = np.asarray(null, float)
    detail = {"twin": effect_record(effect), "n_perm": int(null.size)}
    if null.size * alpha < 1:
        return Verdict(r, f"{null.size} relabellings cannot resolve the level {alpha:g} (need {math.ceil(1 / alpha)})",
                       detail)
    r_alpha = float(np.quantile(null, 1 - alpha))
    detail["r_alpha"] = r_alpha
    if r < r_alpha:
        return Verdict(r - r_alpha, None, detail)
    if effect.reproduces is False:
        return Verdict(effect.upper - effect.resolution, None, detail)
    if effect.reproduces is None:
        return Verdict(effect.estimate, f"against the untrained twin: {effect.reason}", detail)
    return Verdict(min(effect.lower, r - r_alpha), None, detail)


@dataclass
class RealGeometry:
    """A released model's geometry against the prediction and against its untrained twin: the cosine
    matrices (``mats[geometry][name]``, name 'final', 'init', 'L^mm factors', 'supports'), and per pair of
    :data:`REAL_PAIRS` its row (``rows``: r, p, r_twin, the paired difference and its s.e.) and its
    :func:`real_verdict` (``verdicts``)."""

    mats: dict
    rows: dict
    verdicts: dict

    def table_rows(self) -> list[dict]:
        out = []
        for key, (g, b) in REAL_PAIRS.items():
            row, v = self.rows[key], self.verdicts[key]
            out.append({"geometry": g, "against": b, "r trained": row["r"], "p (relabelling)": row["p"],
                        "r twin": row["r_twin"], "r − r twin": row["d"], "s.e.": row["se"],
                        "verdict": "undecided" if v.reproduces is None else
                        ("reproduces" if v.reproduces else "does not reproduce"),
                        "the talk": REAL_PREDICTIONS[key]})
        return out


def real_geometry(data: NTPData, L_mm: np.ndarray, final: RealReadout, init: RealReadout, *, n_perm: int,
                  n_boot: int, seed: int, resolution: float = REAL_RESOLUTION) -> RealGeometry:
    """The talk's comparison ("Numerical Example") for a released model: cosines of its context embeddings
    cos(H, H) and centred word embeddings cos(W, W) (centred over the support words; logits do not
    change when one vector is added to every word embedding) against those of the factors of ``L_mm``
    (:func:`lib.ntp.ufm_factors`; word rows those of the support words, centred the same way) and of the
    supports, cos(S, S) over contexts and cos(Sᵀ, Sᵀ) over words. Per pair: r and its relabelling
    p-value (:func:`lib.lenses.geometry_correlation`), the twin's r, and the paired difference with its
    bootstrap s.e. over items (:func:`lib.lenses.paired_correlation_difference`), decided by
    :func:`lib.book.decide_effect` at ``resolution`` and :func:`real_verdict`."""
    from . import lenses            # deferred: lib.lenses loads torch

    if not np.array_equal(final.words, init.words):
        raise NTPError("the trained model and its twin must be read on the same words")
    words = final.words
    W_mm, H_mm = ufm_factors(L_mm)
    mats = {"contexts": {"final": cosine_matrix(final.H), "init": cosine_matrix(init.H),
                         "L^mm factors": cosine_matrix(H_mm.T), "supports": cosine_matrix(data.S.T)},
            "words": {"final": cosine_matrix(final.W, center=True), "init": cosine_matrix(init.W, center=True),
                      "L^mm factors": cosine_matrix(W_mm[words], center=True),
                      "supports": cosine_matrix(data.S[words])}}
    rows, verdicts = {}, {}
    for key, (g, b) in REAL_PAIRS.items():
        A1, A0, B = mats[g]["final"], mats[g]["init"], mats[g][b]
        r, p = lenses.geometry_correlation(A1, B, n_perm=n_perm, seed=seed)
        null = permutation_null(A1, B, n_perm=n_perm, seed=seed)
        d, se = lenses.paired_correlation_difference(A1, A0, B, n_boot=n_boot, seed=seed)
        effect = decide_effect(d, se, resolution=resolution)
        rows[key] = {"r": r, "p": p, "r_twin": offdiag_corr(A0, B), "d": d, "se": se}
        verdicts[key] = real_verdict(r, null, effect)
    return RealGeometry(mats, rows, verdicts)


def real_readouts(name: str, data: NTPData, device="cpu") -> dict:
    """:func:`real_readout` of the released model ``name`` and of its untrained twin (:func:`load_real_model`)
    as one dict of arrays (``H_final``, ``W_final``, ``H_init``, ``W_init``, ``words``, ``token_ids``,
    ``single_token``, ``tied``), the form the book's cache stores; :func:`readout_of` reads one back."""
    models, tokenizer = load_real_model(name, device)
    out = {}
    with torch_threads(1):
        for rev, model in models.items():
            ro = real_readout(model, tokenizer, data)
            out[f"H_{rev}"], out[f"W_{rev}"] = ro.H, ro.W
    out.update(words=ro.words, token_ids=ro.token_ids, single_token=np.array(ro.single_token), tied=np.array(ro.tied))
    return out


def readout_of(arrays: Mapping, revision: str) -> RealReadout:
    """The :class:`RealReadout` of ``revision`` ('final' or 'init') from :func:`real_readouts`' arrays."""
    return RealReadout(np.asarray(arrays[f"H_{revision}"]), np.asarray(arrays[f"W_{revision}"]),
                       np.asarray(arrays["words"]), np.asarray(arrays["token_ids"]), int(arrays["single_token"]),
                       bool(arrays["tied"]))
