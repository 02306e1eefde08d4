"""λ̂ of a locally quadratic loss: what SGLD's LLC estimator computes when the loss is its Taylor model.

Near w*, L_n(w* + u) ≈ L_n(w*) + gᵀu + ½uᵀHu. Under the localised tempered posterior of Chen &
Murfet §2.4 (density ∝ exp(−nβL_n(w) − (γ/2)‖w − w*‖²)) and under SGLD's iterates (eq. 12) the
parameters are then Gaussian, and the estimator λ̂ = nβ(E[L_n(w)] − L_n(w*)) has a closed form in
the eigenvalues h_i of H and the coordinates g̃_i of g in its eigenvectors (:func:`quadratic_llc`).
With a_i = nβh_i + γ the posterior's value is

    λ̂ = ½ Σ_i nβh_i / a_i − ½ (nβ)² Σ_i g̃_i² (nβh_i + 2γ) / a_i²:

a count of the directions the data confine (each adds ½ once nβh_i ≫ γ) minus a drift off a w*
that is not a critical point. The chapter "LLC theorems" sets it beside the measured λ̂
(:class:`lib.llc_theorems_experiments.DialExperiment`): where it holds, λ̂ measures curvature at the
resolution γ/nβ.

Dense Hessians cost d² memory and d³ time. Above :data:`DENSE_LIMIT` parameters (where the dense form
stops paying, measured in ``benchmarks/bench_local_quadratic.py``) the chapter takes the Hessian-vector
path instead (:func:`taylor_quadratics`, :class:`TaylorQuadratic`): SGLD run on the Taylor model itself,
u ← u − (ε/2)(nβ(g + Hu) + γu) + √ε ξ with u = w − w*, one batched H u per step
(:mod:`lib.hessian`'s product, vmapped over the chains), its loss gᵀu + ½uᵀHu averaged as the estimator
averages L_n; and the curvature by Lanczos (:func:`lib.hessian.top_eigenvalues`). The two paths run the same
chains to float rounding where both run (:func:`taylor_chains` with a dense ``H u``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from . import hessian, llc, sgld
from .book.device import torch_threads
from .conditional_models import history_nll


def flat_loss(model: nn.Module, loss_fn, data):
    """(f, w0): the mean loss as a function of the flat parameter vector (the sampler's own
    flattening, :class:`lib.llc.FlatParameters`), and the model's own parameters."""
    from torch.func import functional_call

    wrapper, flat = llc.LossModule(model, loss_fn), llc.FlatParameters(model)

    def f(w: torch.Tensor) -> torch.Tensor:
        return functional_call(wrapper, flat.unflatten(w), tuple(data)).mean()

    return f, flat.w0


@dataclass
class LocalQuadratic:
    """The second-order Taylor model of each target's empirical loss at w*,
    L_n^(k)(w* + u) ≈ L_n^(k)(w*) + g_kᵀu + ½uᵀH_k u: ``eigenvalues[k]`` (d,) of H_k (ascending)
    and ``gradient[k]`` (d,) the coordinates of g_k in H_k's eigenvectors (k = 0: q, then one
    per χ, in the order of :func:`history_data`)."""

    eigenvalues: np.ndarray
    gradient: np.ndarray

    @property
    def dimension(self) -> int:
        return int(self.eigenvalues.shape[-1])

    @property
    def curvature(self) -> float:
        """The largest |Hessian eigenvalue| over the targets: the stiffest direction a step must resolve."""
        return float(np.max(np.abs(self.eigenvalues)))

    complete = True      # ``eigenvalues`` is the whole spectrum

    def llc(self, k: int, *, nbeta: float, gamma: float, eps: float | None = None, burn_in: int = 0,
            draws: int | None = None) -> float:
        """:func:`quadratic_llc` of target k."""
        return quadratic_llc(self.eigenvalues[k], self.gradient[k], nbeta=nbeta, gamma=gamma, eps=eps,
                             burn_in=burn_in, draws=draws)

    def predict(self, *, nbetas, gamma: float, eps: float, burn_in: int, draws: int, chains: int = 0,
                seed: int = 0) -> np.ndarray:
        """(B, K): the expected λ̂ of every temperature and target at SGLD's step ``eps`` over the steps
        burn_in..draws − 1, in closed form (:func:`quadratic_llc`; ``chains`` and ``seed`` unused)."""
        return np.array([[self.llc(k, nbeta=nb, gamma=gamma, eps=eps, burn_in=burn_in, draws=draws)
                          for k in range(self.eigenvalues.shape[0])] for nb in nbetas])


def local_quadratics(model: nn.Module, datas, max_dimension: int = 6000, loss_fn=None) -> LocalQuadratic:
    """Hessians and gradients at the model's parameters w* of the mean losses ``loss_fn(model, data)``
    for each data in ``datas`` (default: the per-history data (rows, W_k) and loss of
    :func:`lib.llc_theorems.history_data` and :func:`lib.conditional_models.history_nll`), as
    :class:`LocalQuadratic`. Dense Hessians by reverse-over-reverse differentiation (d² entries
    each; refused above ``max_dimension`` parameters before any work), one torch thread."""
    d = sum(p.numel() for p in model.parameters())
    if d > max_dimension:
        raise ValueError(f"local_quadratics forms dense {d} × {d} Hessians; the model has more than "
                         f"max_dimension = {max_dimension} parameters")
    import scipy.linalg

    if loss_fn is None:
        loss_fn = history_nll
    eigenvalues, gradient = [], []
    with torch_threads(1):
        for data in datas:
            f, w0 = flat_loss(model, loss_fn, data)
            w0 = w0.detach().to(torch.float64)
            H = torch.func.jacrev(torch.func.jacrev(f))(w0).detach().numpy()
            g = torch.func.grad(f)(w0).detach().numpy()
            ev, Q = scipy.linalg.eigh(0.5 * (H + H.T), driver="evd")          # divide and conquer: the fastest here
            eigenvalues.append(ev)
            gradient.append(Q.T @ g)
    return LocalQuadratic(np.array(eigenvalues), np.array(gradient))


DENSE_LIMIT = 3500
"""Parameters above which the chapter's quadratic model takes the Hessian-vector path: the crossover measured
by ``benchmarks/bench_local_quadratic.py`` (benchmarks/README.md, HISTORY.md): at 5 β × 8 chains × 1000 steps
per target the dense form took 0.32, 0.77 and 1.29 times the Hessian-vector path's time at d = 2210, 3026 and
3842 (its d³ eigendecomposition overtaking): they cross near 3,500; every ci model stays dense."""


def taylor_chains(hvp, gradient: torch.Tensor, *, nbetas, gamma: float, eps: float, chains: int, draws: int,
                  burn_in: int, seed: int, device="cpu") -> np.ndarray:
    """(B, C) per-chain λ̂ of SGLD (Chen & Murfet eq. 12) run on the Taylor model L_n(w* + u) − L_n(w*) =
    gᵀu + ½uᵀHu, for B = len(``nbetas``) temperatures × ``chains`` chains at one step ``eps``: from u₀ = 0,

        u ← u − (ε/2)(nβ(g + Hu) + γu) + √ε ξ_t,      λ̂_c = nβ · mean_{t = burn_in..draws−1} (gᵀu_t + ½u_tᵀHu_t),

    ``hvp`` mapping a (R, d) batch of u to H u (any symmetric H: :func:`lib.hessian.hessian_vector_product`
    vmapped, or a dense ``u @ H``), ``gradient`` g (d,). The noise ξ_t (chains, d) is the stream
    :func:`lib.llc_theorems.grid_chains` draws for ``seed`` (:func:`lib.sgld.chunk_generators`' chunk 0), shared by
    every temperature: the Taylor chains are coupled to the model's own chains. Its expectation is
    :func:`quadratic_llc` with ``eps``, ``burn_in`` and ``draws``."""
    nb = torch.as_tensor([float(v) for v in nbetas], dtype=gradient.dtype, device=device).view(-1, 1, 1)
    B, C, D = nb.shape[0], int(chains), gradient.numel()
    for name, v, lo in (("chains", C, 1), ("draws", draws, 1), ("burn_in", burn_in, 0)):
        if not (isinstance(v, (int, np.integer)) and v >= lo):
            raise ValueError(f"parameter '{name}' must be an integer ≥ {lo}; got {v!r}")
    if burn_in >= draws:
        raise ValueError(f"parameter 'burn_in' must be below 'draws' ({draws}); got {burn_in}")
    g = gradient.to(device).view(1, 1, D)
    u = torch.zeros(B, C, D, dtype=gradient.dtype, device=device)
    acc = torch.zeros(B, C, dtype=torch.float64, device=device)
    _, noise_gen = sgld.chunk_generators(seed, 0, device)
    xi = torch.empty(C, D, dtype=gradient.dtype, device=device)
    half, root = 0.5 * float(eps), float(eps) ** 0.5
    for t in range(int(draws)):
        Hu = hvp(u.view(B * C, D)).view(B, C, D)
        if t >= burn_in:
            acc += ((g * u).sum(-1) + 0.5 * (u * Hu).sum(-1)).double()
        noise = sgld.draw_noise(xi, noise_gen)
        u = u - half * (nb * (g + Hu) + gamma * u) + root * noise
    return (nb.view(B, 1).double() * acc / (draws - burn_in)).cpu().numpy()


@dataclass
class TaylorQuadratic:
    """The Taylor model of each target's loss at w* without a dense Hessian (:func:`taylor_quadratics`):
    ``losses[k]`` the mean loss of target k as a function of the flat parameters, ``w0`` w*, ``gradients``
    (K, d) g_k in parameter coordinates, ``eigenvalues`` (K, m) the m eigenvalues of H_k of largest
    magnitude (Lanczos, :func:`lib.hessian.top_eigenvalues`; not the whole spectrum: ``complete`` is False)."""

    losses: list
    w0: torch.Tensor
    gradients: np.ndarray
    eigenvalues: np.ndarray
    complete = False

    @property
    def dimension(self) -> int:
        return int(self.w0.numel())

    @property
    def curvature(self) -> float:
        """The largest |Hessian eigenvalue| over the targets (Lanczos)."""
        return float(np.max(np.abs(self.eigenvalues)))

    def hvp(self, k: int):
        """(R, d) → (R, d): H_k u for a batch of u: the gradient's graph at w* built once, and each batch one
        batched backward through it (double backward, ``is_grads_batched``); where an operation has no double
        backward, forward-over-reverse (``torch.func.jvp`` of ``grad``) vmapped over the batch. The two agree to
        rounding."""
        f, w0 = self.losses[k], self.w0
        try:
            with torch.enable_grad():
                w = w0.clone().requires_grad_(True)
                g = torch.autograd.grad(f(w), w, create_graph=True)[0]

            def batched(U):
                with torch.enable_grad():
                    return torch.autograd.grad(g, w, grad_outputs=U, is_grads_batched=True, retain_graph=True)[0]

            batched(torch.zeros(1, w0.numel(), dtype=w0.dtype, device=w0.device))
            return batched
        except RuntimeError:
            grad_f = torch.func.grad(f)
            return torch.func.vmap(lambda u: torch.func.jvp(grad_f, (w0,), (u,))[1])

    def predict(self, *, nbetas, gamma: float, eps: float, burn_in: int, draws: int, chains: int,
                seed: int) -> np.ndarray:
        """(B, K): λ̂ of every temperature and target, the mean over ``chains`` SGLD chains on the Taylor
        model (:func:`taylor_chains`, the noise of the model's own chains for ``seed``), one torch thread."""
        out = []
        with torch_threads(1):
            for k in range(len(self.losses)):
                g = torch.as_tensor(self.gradients[k], dtype=self.w0.dtype)
                out.append(taylor_chains(self.hvp(k), g, nbetas=nbetas, gamma=gamma, eps=eps, chains=chains,
                                         draws=draws, burn_in=burn_in, seed=seed).mean(axis=-1))
        return np.stack(out, axis=1)


def taylor_quadratics(model: nn.Module, datas, top: int = 8, loss_fn=None, seed: int = 0) -> TaylorQuadratic:
    """:class:`TaylorQuadratic` of the mean losses ``loss_fn(model, data)`` for each data in ``datas`` (default
    as :func:`local_quadratics`) at the model's parameters w*, in float64: gradients, and the ``top``
    eigenvalues of largest magnitude of each Hessian by Lanczos on Hessian-vector products
    (:func:`lib.hessian.top_eigenvalues`, started from ``seed``). Memory: a few vectors of d, never d²."""
    if loss_fn is None:
        loss_fn = history_nll
    losses, grads, tops = [], [], []
    with torch_threads(1):
        for data in datas:
            f, w0 = flat_loss(model, loss_fn, data)
            w0 = w0.detach().to(torch.float64)
            losses.append(f)
            grads.append(torch.func.grad(f)(w0).detach().numpy())
            k = int(min(top, w0.numel() - 1))
            tops.append(hessian.top_eigenvalues(lambda p: f(p["w"]), {"w": w0}, k=k, seed=seed, tol=1e-6))
    return TaylorQuadratic(losses, w0, np.array(grads), np.array(tops))


def quadratic_model(model: nn.Module, datas, dense_limit: int = DENSE_LIMIT, loss_fn=None, seed: int = 0):
    """The quadratic model of each target at w*: dense (:func:`local_quadratics`, closed-form predictions) at
    most ``dense_limit`` parameters, else without a dense Hessian (:func:`taylor_quadratics`, predictions from
    SGLD on the Taylor model)."""
    d = sum(p.numel() for p in model.parameters())
    if d <= dense_limit:
        return local_quadratics(model, datas, max_dimension=max(dense_limit, 6000), loss_fn=loss_fn)
    return taylor_quadratics(model, datas, loss_fn=loss_fn, seed=seed)


def _power_sums(x: np.ndarray, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """S1 = Σ_t r^t and S2 = Σ_t r^{2t} over t = start..start + count − 1, with r = 1 − x,
    computed through log1p/expm1 where 0 < r (so that a tiny x keeps its digits)."""
    x = np.asarray(x, dtype=np.float64)
    out = []
    for power, one_minus in ((1, x), (2, x * (2 - x))):
        with np.errstate(all="ignore"):
            smooth = x < 1
            log_rho = power * np.log1p(-np.where(smooth, x, 0.0))
            head = np.where(smooth, np.exp(start * log_rho), np.power((1 - x) ** power, start))
            tail = np.where(smooth, -np.expm1(count * log_rho), 1 - np.power((1 - x) ** power, count))
            s = np.where(one_minus == 0, float(count), head * tail / np.where(one_minus == 0, 1.0, one_minus))
        out.append(s)
    return out[0], out[1]


def quadratic_llc(eigenvalues, gradient, *, nbeta: float, gamma: float, eps: float | None = None,
                  burn_in: int = 0, draws: int | None = None) -> float:
    """λ̂ = nβ (E[L_n(w)] − L_n(w*)) when L_n is its Taylor model at w*, L_n(w* + u) − L_n(w*) =
    gᵀu + ½uᵀHu (``eigenvalues`` h_i of H, ``gradient`` g̃ = g in H's eigenbasis), under the
    localised tempered posterior of Chen & Murfet §2.4 (eq. 12's SGLD). With a_i = nβh_i + γ:

    * ``eps`` None: the posterior itself (Gaussian, precision nβH + γ, mean −nβ(nβH + γ)⁻¹g),

          λ̂ = ½ Σ_i nβh_i / a_i − ½ (nβ)² Σ_i g̃_i² (nβh_i + 2γ) / a_i²       (NaN unless every a_i > 0);

    * ``eps`` given, ``draws`` None: SGLD's stationary law at step ε (per direction the mean
      −nβg̃_i/a_i and the variance 1/(a_i (1 − εa_i/4)); NaN unless 0 < εa_i < 4);
    * ``eps`` and ``draws`` given: the expectation of the estimator SGLD computes, chains started
      at w* and the loss averaged over steps t = burn_in..draws − 1: per direction the mean
      m_t = b(1 − r^t)/(1 − r) and the variance v_t = ε(1 − r^{2t})/(1 − r²), with r = 1 − εa_i/2
      and b = −εnβg̃_i/2, so that E[L_n(w_t) − L_n(w*)] = Σ_i g̃_i m_t + ½h_i(m_t² + v_t).

    Exact for a quadratic loss; for a model, a prediction whose error is the loss's Taylor
    remainder over the region the chains visit."""
    h = np.asarray(eigenvalues, dtype=np.float64)
    g = np.asarray(gradient, dtype=np.float64)
    if h.shape != g.shape or h.ndim != 1:
        raise ValueError(f"eigenvalues and gradient must be vectors of one length; got {h.shape} and {g.shape}")
    nbeta, gamma = float(nbeta), float(gamma)
    a = nbeta * h + gamma
    if eps is None:
        if draws is not None or burn_in:
            raise ValueError("a finite run (draws, burn_in) needs its step 'eps'")
        if np.any(a <= 0):
            return float("nan")
        return float(0.5 * np.sum(nbeta * h / a) - 0.5 * nbeta ** 2 * np.sum(g ** 2 * (nbeta * h + 2 * gamma) / a ** 2))
    eps = float(eps)
    x = eps * a / 2                                       # r = 1 − x per direction
    b = -eps * nbeta * g / 2
    if draws is None:
        if np.any((x <= 0) | (x >= 2)):
            return float("nan")
        mean = b / x
        return float(nbeta * np.sum(g * mean + 0.5 * h * (mean ** 2 + eps / (x * (2 - x)))))
    burn_in, draws = int(burn_in), int(draws)
    T = draws - burn_in
    if burn_in < 0 or T < 1:
        raise ValueError(f"need 0 <= burn_in < draws; got burn_in = {burn_in}, draws = {draws}")
    squares = lambda m: m * (m + 1) * (2 * m + 1) / 6.0          # Σ_{t ≤ m} t²
    sum_t, sum_t2 = T * (burn_in + draws - 1) / 2.0, squares(draws - 1.0) - squares(burn_in - 1.0)
    S1, S2 = _power_sums(x, burn_in, T)
    zero = x == 0
    xs = np.where(zero, 1.0, x)
    with np.errstate(all="ignore"):
        sum_m = np.where(zero, b * sum_t, b * (T - S1) / xs)
        sum_m2 = np.where(zero, b ** 2 * sum_t2, b ** 2 * (T - 2 * S1 + S2) / xs ** 2)
        flat = zero | (x == 2)                                # r² = 1: v_t = εt
        sum_v = np.where(flat, eps * sum_t, eps * (T - S2) / np.where(flat, 1.0, x * (2 - x)))
    return float(nbeta / T * np.sum(g * sum_m + 0.5 * h * (sum_m2 + sum_v)))


def local_quadratics_cost(n_params: int, weights: int, histories: int, tokens: int, targets: int) -> tuple[float, float]:
    """(peak bytes, floating-point operations) of :func:`local_quadratics` for ``targets`` losses of a model
    with ``n_params`` parameters (``weights`` of them in matrix products) on ``histories`` histories of
    ``tokens`` tokens: per target, d reverse-over-reverse passes (about 12 operations per weight per token
    each, twice a gradient) and a symmetric eigendecomposition with vectors (about 9 d³); at the peak the
    Hessian, its symmetrised copy, the eigenvectors and the solver's workspace, 4 d² float64 values."""
    d = float(n_params)
    return 4 * 8 * d * d, targets * (12.0 * weights * histories * tokens * d + 9 * d ** 3)



def taylor_quadratics_cost(n_params: int, weights: int, histories: int, tokens: int, n_cols: int, targets: int, *,
                           n_betas: int, chains: int, draws: int, lanczos_products: int = 300) -> tuple[float, float]:
    """(peak bytes, floating-point operations) of :func:`taylor_quadratics` and :meth:`TaylorQuadratic.predict`
    for ``targets`` losses: per target, ``lanczos_products`` Hessian-vector products for the extremes and
    ``n_betas`` × ``chains`` Taylor chains of ``draws`` steps, one product per chain and step; a product is
    forward-over-reverse, about twice a gradient (12 operations per matmul weight per token). Peak, in float64:
    the chains' state, products and noise (4 vectors of d per chain) and the batched forward-over-reverse's
    log-probabilities with their tangents and gradients (6 per chain per history and column)."""
    R = float(n_betas * chains)
    peak = 8.0 * (4 * R * n_params + 6 * R * histories * n_cols)
    flops = targets * 12.0 * weights * histories * tokens * (lanczos_products + R * draws)
    return peak, flops
