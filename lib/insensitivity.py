"""Mode insensitivity (Chen & Murfet §6): the log-probability map, its Jacobian, and the
constants δ_χ(w), ε_χ(w) of Defs 6.3–6.4.

A *conditional model* (see :mod:`lib.conditional_models`) maps history indices (B,) - rows of
the joint that ``modes`` (a :class:`lib.modes.Modes`) was built from - to log-probabilities
over the continuations (B, |Σ^l|). With H = H_{k,l}, ⟨f, g⟩_H = Σ_x q(x) f(x)·g(x):

* the log-probability map (Def 6.1)   ℓ(w) = log p(·|·, w) ∈ H;
* its Jacobian (Def 6.2)               J_w: R^d → H,  (J_w t)(x, y) = Σ_i t_i ∂_i log p(y|x, w);
* the pairings (52)–(53) with the difference q − q^(χ) (q^(χ) = ``modes.effective(χ)``, the
  history marginal of q kept):

      g_i(w) = ⟨q − q^(χ), ∂_i log p(·|·, w)⟩_H,     e(w) = ⟨q − q^(χ), log p(·|·, w)⟩_H;

* the insensitivity constants (the book's reading of Defs 6.3–6.4, whose formulas were lost in
  the paper's text extraction; the prose around them describes (52)–(53) as functionals whose
  sizes bound the insensitivity): δ_χ(w) = ‖g(w)‖₂ (gradient insensitivity, Def 6.3) and
  ε_χ(w) = |e(w)| (log-probability insensitivity, Def 6.4).

Since L(w) = −Σ_x q(x) Σ_y q(y|x) log p(y|x, w) and L^(χ) is the same with q^(χ)(y|x),

      ∇L(w) − ∇L^(χ)(w) = −g(w),       L(w) − L^(χ)(w) = −e(w),

so δ_χ = ‖∇L − ∇L^(χ)‖ and ε_χ = |L − L^(χ)|. :func:`constants` computes the right-hand sides
directly by autograd of the two losses; :func:`pairings` goes through the Jacobian J_w (formed
in chunks); :func:`constants_all` takes every χ at once as vector–Jacobian products. The tests
and the chapter check that they agree.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .book.moved import forward_moved
from .modes import Modes

DEFAULT_MAX_BYTES = 512 * 2 ** 20  # Jacobian chunk budget

# The chapter "Insensitivity"'s studies and costs moved to lib.insensitivity_experiments: their old names
# here still answer (lib.book.moved), without an import upwards.
__getattr__ = forward_moved(__name__, dict.fromkeys((
    "TabularCheck", "tabular_check", "FinalConstants", "final_constants", "delta_along_training", "learning_order",
    "plausibility_curve", "plausibility_checks", "entropy_rate_comparison", "model_specs", "heavy_steps"),
    "lib.insensitivity_experiments"))


class InsensitivityError(ValueError):
    """A model, a cutoff or a request that does not fit the language's modes."""


# ---------------------------------------------------------------------------
# Checks and the effective distributions
# ---------------------------------------------------------------------------

_EFFECTIVE: "weakref.WeakKeyDictionary[Modes, dict]" = weakref.WeakKeyDictionary()


def check_chi(modes: Modes, chi) -> int:
    """χ must be an integer in [0, rank]: keep the modes 0..χ−1 (χ = rank keeps them all)."""
    if isinstance(chi, (bool, np.bool_)) or not isinstance(chi, (int, np.integer)) or not 0 <= chi <= modes.rank:
        raise InsensitivityError(f"parameter 'chi' must be an integer in [0, {modes.rank}] (the rank); got {chi!r}")
    return int(chi)


def effective(modes: Modes, chi: int) -> np.ndarray:
    """q^(χ)(y|x) over the kept histories (``modes.effective(chi)``, memoised per ``modes``)."""
    chi = check_chi(modes, chi)
    store = _EFFECTIVE.setdefault(modes, {})
    if chi not in store:
        cond, info = modes.effective(chi, return_info=True)
        if info.status != "optimal":
            raise InsensitivityError(f"q^(χ) at χ = {chi}: the solver ended '{info.status}' "
                                     f"(KKT residual {info.kkt_residual:.1e})")
        store[chi] = cond
    return store[chi]


def dense_conditional(modes: Modes) -> np.ndarray:
    """q(y|x) over the kept histories as a dense array (``modes.conditional`` may be sparse)."""
    cond = modes.conditional
    return cond.toarray() if hasattr(cond, "toarray") else np.asarray(cond)


def difference_weights(modes: Modes, chi: int) -> np.ndarray:
    """D_χ(x, y) = q(x) (q(y|x) − q^(χ)(y|x)) over kept histories: ⟨q − q^(χ), f⟩_H = Σ D_χ · f."""
    cond = dense_conditional(modes)
    return modes.q_x[:, None] * (cond - effective(modes, chi))


def _rows(modes: Modes) -> torch.Tensor:
    return torch.as_tensor(np.asarray(modes.rows), dtype=torch.long)


def check_model(model: nn.Module, modes: Modes) -> torch.dtype:
    """The model must read joint rows (its ``n_rows``, if it has one, equals the joint's) and
    return log-probabilities over |Σ^l| continuations. Returns the model's dtype."""
    n_rows_in, n_cols = modes.n_rows_in, modes.shape[1]
    for name, want in (("n_rows", n_rows_in), ("n_cols", n_cols)):
        have = getattr(model, name, want)
        if have != want:
            raise InsensitivityError(f"the model's support does not match the language: model {name} = {have}, "
                                     f"the joint has {want} (|Σ^k| rows × |Σ^l| columns)")
    params = list(model.parameters())
    if not params:
        raise InsensitivityError("the model has no parameters")
    dtype = params[0].dtype
    with torch.no_grad():
        out = model(_rows(modes)[:2])
    if out.shape != (min(2, len(modes.rows)), n_cols):
        raise InsensitivityError(f"the model must map history indices (B,) to log-probabilities (B, {n_cols}); "
                                 f"got shape {tuple(out.shape)}")
    err = float(torch.logsumexp(out.double(), dim=-1).abs().max())
    if not err <= (1e-9 if dtype == torch.float64 else 1e-4):
        raise InsensitivityError(f"the model's outputs are not log-probabilities: |logsumexp| = {err:.2e}")
    return dtype


# ---------------------------------------------------------------------------
# Def 6.1, Def 6.2
# ---------------------------------------------------------------------------

def log_prob_map(model: nn.Module, modes: Modes) -> torch.Tensor:
    """ℓ(w) = log p(·|·, w) ∈ H_{k,l} (Def 6.1) over the kept histories, shape (|Σ^k|, |Σ^l|)."""
    check_model(model, modes)
    return model(_rows(modes))


def _functional(model: nn.Module):
    names = [n for n, _ in model.named_parameters()]
    buffers = dict(model.named_buffers())

    def f(params: tuple, rows: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, ({**dict(zip(names, params)), **buffers}), (rows,))

    return f, tuple(p.detach() for p in model.parameters())


def jacobian_chunks(model: nn.Module, modes: Modes, max_bytes: int = DEFAULT_MAX_BYTES):
    """Yield (slice of kept histories, J) with J[x, y, i] = ∂_i log p(y|x, w) (Def 6.2, eq. 50),
    shape (chunk, |Σ^l|, d), parameters flattened in ``model.parameters()`` order.

    Vectorised: ``vmap`` over histories of ``jacrev`` of one history's log-probabilities.
    Chunks hold at most ``max_bytes`` of Jacobian (with a factor 3 for the backward's
    workspace); an error is raised before any work if one history does not fit."""
    dtype = check_model(model, modes)
    f, params = _functional(model)
    d = sum(p.numel() for p in params)
    n_x, n_y = modes.shape
    per_history = 3 * n_y * d * torch.finfo(dtype).bits // 8
    chunk = int(max_bytes // per_history)
    if chunk < 1:
        raise InsensitivityError(f"the Jacobian of one history ({n_y} × {d} entries, ~{per_history / 2**20:.0f} MiB "
                                 f"with workspace) does not fit max_bytes = {max_bytes / 2**20:.0f} MiB")

    def one(params, row):
        return f(params, row[None])[0]

    jac = torch.func.vmap(torch.func.jacrev(one), in_dims=(None, 0))
    rows = _rows(modes)
    for start in range(0, n_x, chunk):
        sl = slice(start, min(start + chunk, n_x))
        blocks = jac(params, rows[sl])
        yield sl, torch.cat([b.reshape(b.shape[0], n_y, -1) for b in blocks], dim=-1)


def jacobian(model: nn.Module, modes: Modes, max_bytes: int = DEFAULT_MAX_BYTES) -> torch.Tensor:
    """The whole Jacobian J_w (|Σ^k|, |Σ^l|, d) of Def 6.2 (see :func:`jacobian_chunks`)."""
    return torch.cat([J for _, J in jacobian_chunks(model, modes, max_bytes)], dim=0)


# ---------------------------------------------------------------------------
# The constants δ_χ, ε_χ (Defs 6.3, 6.4)
# ---------------------------------------------------------------------------

@dataclass
class Constants:
    """Insensitivity at one w and one χ: ``delta`` = ‖∇L − ∇L^(χ)‖₂ (Def 6.3), ``eps`` =
    |L − L^(χ)| (Def 6.4), ``grad_diff`` = ∇L − ∇L^(χ) (flattened in ``model.parameters()``
    order), ``loss_diff`` = L − L^(χ), ``loss`` = L(w), ``loss_chi`` = L^(χ)(w) (exact sums)."""

    chi: int
    delta: float
    eps: float
    grad_diff: np.ndarray
    loss_diff: float
    loss: float
    loss_chi: float


def _flat_grad(value: torch.Tensor, params) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, params, retain_graph=True)])


def constants(model: nn.Module, modes: Modes, chi: int) -> Constants:
    """δ_χ(w), ε_χ(w) at the model's current parameters, from L(w) and L^(χ)(w) computed
    directly (exact sums over Σ^k × Σ^l) and their gradients by autograd."""
    chi = check_chi(modes, chi)
    dtype = check_model(model, modes)
    cond = dense_conditional(modes)
    q = torch.as_tensor(modes.q_x[:, None] * cond, dtype=dtype)
    q_chi = torch.as_tensor(modes.q_x[:, None] * effective(modes, chi), dtype=dtype)
    params = [p for p in model.parameters()]
    logp = model(_rows(modes))
    L, L_chi = -(q * logp).sum(), -(q_chi * logp).sum()
    grad_diff = (_flat_grad(L, params) - _flat_grad(L_chi, params)).detach().cpu().numpy().astype(np.float64)
    loss_diff = float((L - L_chi).detach())
    return Constants(chi, float(np.linalg.norm(grad_diff)), abs(loss_diff), grad_diff, loss_diff, float(L.detach()),
                     float(L_chi.detach()))


@dataclass
class Pairing:
    """The pairings (52)–(53): ``grad`` g_i = ⟨q − q^(χ), ∂_i log p⟩_H (the cotangent of J_w),
    ``value`` e = ⟨q − q^(χ), log p⟩_H."""

    chi: int
    grad: np.ndarray
    value: float


def pairings(model: nn.Module, modes: Modes, chis=None, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Pairing]:
    """(52)–(53) for every χ in ``chis`` (default 0..rank) through the Jacobian J_w, one pass
    over the histories: g_χ = Σ_{x,y} D_χ(x, y) J_w[x, y, :], e_χ = Σ D_χ · log p."""
    chis = list(range(modes.rank + 1)) if chis is None else [check_chi(modes, c) for c in chis]
    dtype = check_model(model, modes)
    D = torch.as_tensor(np.stack([difference_weights(modes, c) for c in chis]), dtype=dtype)   # (χ, x, y)
    with torch.no_grad():
        logp = model(_rows(modes))
    values = torch.einsum("cxy,xy->c", D, logp)
    grads = None
    for sl, J in jacobian_chunks(model, modes, max_bytes):
        part = torch.einsum("cxy,xyi->ci", D[:, sl], J)
        grads = part if grads is None else grads + part
    return [Pairing(c, grads[i].cpu().numpy().astype(np.float64), float(values[i])) for i, c in enumerate(chis)]


def pairing(model: nn.Module, modes: Modes, chi: int, max_bytes: int = DEFAULT_MAX_BYTES) -> Pairing:
    """(52)–(53) at one χ through the Jacobian (see :func:`pairings`)."""
    return pairings(model, modes, [chi], max_bytes)[0]


def constants_all(model: nn.Module, modes: Modes, chis=None, max_bytes: int = DEFAULT_MAX_BYTES) -> list[Constants]:
    """:class:`Constants` for every χ (default 0..rank) at once: g_χ = J_wᵀ D_χ is a
    vector–Jacobian product, so one forward pass over all histories (``torch.func.vjp``)
    and one pull-back per cutoff give every g_χ without forming J_w. δ_χ = ‖g_χ‖,
    ε_χ = |e_χ|, ∇L − ∇L^(χ) = −g_χ, L − L^(χ) = −e_χ. (``max_bytes`` is accepted for a
    uniform signature; memory is one forward graph plus one gradient.)"""
    chis = list(range(modes.rank + 1)) if chis is None else [check_chi(modes, c) for c in chis]
    dtype = check_model(model, modes)
    f, params = _functional(model)
    rows = _rows(modes)
    logp, pullback = torch.func.vjp(lambda *p: f(p, rows), *params)
    D = torch.as_tensor(np.stack([difference_weights(modes, c) for c in chis]), dtype=dtype, device=logp.device)
    # a loop over cutoffs (not histories): ``vmap`` of the pull-back was slower here, as
    # batching rules (embedding backward) re-trace for every new graph
    G = torch.stack([torch.cat([b.reshape(-1) for b in pullback(D[i])]) for i in range(len(chis))])
    G = G.detach().double().cpu().numpy()
    values = torch.einsum("cxy,xy->c", D, logp.detach()).double().cpu().numpy()
    cond = dense_conditional(modes)
    L = float(-(modes.q_x[:, None] * cond * logp.detach().double().cpu().numpy()).sum())
    return [Constants(c, float(np.linalg.norm(G[i])), abs(float(values[i])), -G[i], -float(values[i]), L,
                      L + float(values[i])) for i, c in enumerate(chis)]


# ---------------------------------------------------------------------------
# Mode coordinates of a model (Def 4.13)
# ---------------------------------------------------------------------------

def coordinates(modes: Modes, f) -> np.ndarray:
    """C[α, β] = ⟨f, e_{αβ}⟩_H for f (|Σ^k| kept, |Σ^l|) or a stack (T, |Σ^k|, |Σ^l|), in the
    complete mode basis of q (Def 4.13): C = (√q ṽ_full)ᵀ F U_full. For f = q(·|·),
    C = diag(σ) (eq. 41)."""
    Vf, Uf = modes.full_bases()
    f = np.asarray(f, dtype=np.float64)
    left = Vf * np.sqrt(modes.q_x)[:, None]
    return np.einsum("xa,...xy,yb->...ab", left, f, Uf, optimize=True)


def mode_coordinates(model: nn.Module, modes: Modes) -> dict:
    """A model's coordinates in the mode basis of q: ``logp`` ⟨log p(·|·, w), e_{αβ}⟩_H and
    ``prob`` ⟨p(·|·, w), e_{αβ}⟩_H (both (A, B)); ``learned`` = diag(prob)[:rank] / σ, the
    share of each mode's coordinate σ_α that the model's own conditional carries; and
    ``propensities``, the model's own propensities ρ^p_α (:func:`model_propensities`) for
    the modes α < rank of q."""
    with torch.no_grad():
        logp = log_prob_map(model, modes).double().cpu().numpy()
    prob = coordinates(modes, np.exp(logp))
    r = modes.rank
    return {"logp": coordinates(modes, logp), "prob": prob, "learned": np.diag(prob)[:r] / modes.sigma[:r],
            "propensities": model_propensities(modes, np.exp(logp), np.arange(r))}


def model_propensities(modes: Modes, p, alphas=None) -> np.ndarray:
    """A conditional p(·|·) (|Σ^k| kept, |Σ^l|) split along the right modes of q, as the
    propensities of Def 4.9 split q:

        ρ^p_α(y|x) = φ_α(x) Σ_β ⟨p, e_{αβ}⟩_H u_β(y) = φ_α(x) Σ_{x'} q(x') φ_α(x') p(y|x'),

    with φ_α = ⟨v_α, e_x⟩_V over a complete basis of V_k. Σ_α ρ^p_α = p, and for p = q this
    is ρ_α of Def 4.9. Returns (len(alphas), |Σ^k|, |Σ^l|) (default: all |Σ^k| directions)."""
    Vf, _ = modes.full_bases()
    phi = Vf / np.sqrt(modes.q_x)[:, None]
    a = np.arange(Vf.shape[1]) if alphas is None else np.atleast_1d(alphas)
    reads = np.einsum("x,xa,xy->ay", modes.q_x, phi[:, a], np.asarray(p, dtype=np.float64))
    return phi[:, a].T[:, :, None] * reads[:, None, :]


def learning_curves(modes: Modes, conditionals, rows=None) -> np.ndarray:
    """c_α(t) = ⟨p(·|·, w_t), e_{αα}⟩_H for a trajectory of conditionals (T, |Σ^k| rows of the
    joint, |Σ^l|) (``rows`` selects the kept histories, default ``modes.rows``): (T, rank)."""
    rows = modes.rows if rows is None else rows
    C = coordinates(modes, np.asarray(conditionals)[:, rows])
    r = modes.rank
    return np.stack([np.diagonal(c)[:r] for c in C])


def learning_steps(steps, curves, sigma, level: float = 0.5, learned: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The first step at which each mode's coordinate has covered ``level`` of its way from
    c_α(0) to its final value c_α(T), and a mask of the modes *learned* at all (final
    coordinate ≥ ``learned`` · σ_α). Returns (steps (rank,), float, NaN where never; mask)."""
    steps = np.asarray(steps, dtype=np.float64)
    curves = np.asarray(curves)
    start, end = curves[0], curves[-1]
    span = end - start
    frac = np.divide(curves - start, span, out=np.zeros_like(curves), where=np.abs(span) > 0)
    out = np.full(curves.shape[1], np.nan)
    for a in range(curves.shape[1]):
        hit = np.flatnonzero(frac[:, a] >= level)
        if hit.size:
            out[a] = steps[hit[0]]
    return out, end >= learned * np.asarray(sigma)[:curves.shape[1]]


def rank_correlation(x, y, n_boot: int = 2000, seed: int = 0, level: float = 0.9, *, se: bool = False) -> dict:
    """Spearman's ρ between x and y with a percentile bootstrap interval (pairs resampled); with ``se``,
    also the s.d. of the same bootstrap's replicates (key ``"se"``)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    nan = float("nan")
    if len(x) < 3:
        return {"rho": nan, "low": nan, "high": nan, "n": int(len(x))} | ({"se": nan} if se else {})
    rho = float(spearmanr(x, y).statistic)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        i = rng.integers(0, len(x), len(x))
        if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
            boots.append(spearmanr(x[i], y[i]).statistic)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    out = {"rho": rho, "low": float(lo), "high": float(hi), "n": int(len(x))}
    if se:
        out["se"] = float(np.std(boots, ddof=1)) if len(boots) > 1 else nan
    return out


# ---------------------------------------------------------------------------
# §6.2: the plausibility argument for log-probability insensitivity
# ---------------------------------------------------------------------------

def project_family(modes: Modes, f, chi: int) -> np.ndarray:
    """Π_χ f: the H-orthogonal projection of f (|Σ^k| kept, |Σ^l|) onto H_χ = {c(y) + Σ_{α<χ}
    φ_α(x) w_α(y)} (the book's reading of the truncated family of Def 4.16, chapter "Modes"): each
    column regressed on 1, φ_0..φ_{χ−1} in L²(q)."""
    chi = check_chi(modes, chi)
    s = np.sqrt(modes.q_x)
    B = modes.family_basis(chi)
    g = s[:, None] * np.asarray(f, dtype=np.float64)          # V-coordinates of each column
    return (B @ (B.T @ g)) / s[:, None]


def norm_H(modes: Modes, f) -> float:
    return float(np.sqrt(max(modes.inner_H(f, f), 0.0)))


def plausibility(modes: Modes, chi: int, logp=None) -> dict:
    """The quantities of §6.2 at cutoff χ (eqs. 56–58, the book's reading):

    * ``parseval_tail``  Σ_{α≥χ} σ_α² = ‖q − q̃_χ‖²_H (Parseval; q̃_χ the naive truncation);
    * ``parseval_direct`` ‖q − q̃_χ‖²_H computed from the conditionals (equal to the above);
    * ``projection_gap`` ‖Π_χ q − q^(χ)‖_H, the distance between the orthogonal projection of
      q onto H_χ and the effective distribution (both in H_χ);
    * with ``logp`` = log p(·|·, w) (kept histories): ``value`` ⟨q − q^(χ), log p⟩_H, its split
      (58) ``term_tail`` = ⟨q − Π_χ q, (1 − Π_χ) log p⟩_H + ``term_family`` = ⟨Π_χ q − q^(χ),
      Π_χ log p⟩_H, and the Cauchy–Schwarz bound ``bound`` = ‖q − Π_χ q‖ ‖(1 − Π_χ) log p‖ +
      ‖Π_χ q − q^(χ)‖ ‖Π_χ log p‖ ≥ |value|."""
    chi = check_chi(modes, chi)
    cond = dense_conditional(modes)
    q_chi = effective(modes, chi)
    proj_q = project_family(modes, cond, chi)
    out = {"chi": chi, "parseval_tail": float(np.sum(modes.sigma[chi:] ** 2)),
           "parseval_direct": norm_H(modes, cond - modes.naive_truncation(chi)) ** 2,
           "projection_gap": norm_H(modes, proj_q - q_chi), "tail_norm": norm_H(modes, cond - proj_q)}
    if logp is not None:
        logp = np.asarray(logp, dtype=np.float64)
        proj_l = project_family(modes, logp, chi)
        out["value"] = modes.inner_H(cond - q_chi, logp)
        out["term_tail"] = modes.inner_H(cond - proj_q, logp - proj_l)
        out["term_family"] = modes.inner_H(proj_q - q_chi, proj_l)
        out["bound"] = out["tail_norm"] * norm_H(modes, logp - proj_l) + out["projection_gap"] * norm_H(modes, proj_l)
    return out



# ---------------------------------------------------------------------------
# Cost models: a model's matmul weights, its training steps, and the Jacobian J_w
# ---------------------------------------------------------------------------

def matmul_weights(model: nn.Module) -> int:
    """Entries of the model's ``nn.Linear`` weights: the parameters a token's forward pass multiplies
    (an embedding is a lookup, a bias an addition)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def training_flops(weights: int, rows: int, tokens_per_row: int, steps: int) -> float:
    """Floating-point operations of ``steps`` full-batch steps over ``rows`` distinct histories: a forward
    pass is 2 operations per matmul weight per token read, a backward pass twice that (6 in all)."""
    return 6.0 * weights * rows * tokens_per_row * steps


def jacobian_cost(n_params: int, n_histories: int, n_cols: int, tokens_per_row: int, max_bytes: int,
                  itemsize: int = 8) -> tuple[float, float]:
    """(peak bytes, floating-point operations) of one Jacobian J_w (Def 6.2) formed by
    :func:`jacobian_chunks`: a chunk of histories holds 3 × |Σ^l| × d entries each (the Jacobian and the
    backward's workspace), up to ``max_bytes``; each of the |Σ^k|·|Σ^l| rows of J is one vector–Jacobian
    product, a backward pass of about 4 operations per matmul weight (``n_params``) per token."""
    per_history = 3 * n_cols * n_params * itemsize
    chunk = max(1, min(n_histories, int(max_bytes // per_history)))
    return float(chunk * per_history), 4.0 * n_params * tokens_per_row * n_histories * n_cols
