"""The Hessian H = ∇²L(w) of a loss through its products H v only: never a dense d × d matrix.

For a loss L of parameters w (all of a model's weights, or a named part of them with the rest held
fixed), H v = d/dt ∇L(w + t v) at t = 0. :func:`hessian_vector_product` computes it forward-over-reverse
(``torch.func.jvp`` of ``torch.func.grad``: one gradient's cost about twice) or by double backward
(``torch.autograd.grad`` of ⟨∇L, v⟩, for operations without a forward-mode rule); memory is a few
copies of w and one backward's activations, whatever d is. On these products:

* :func:`top_eigenvalues`: the k eigenvalues of H of largest magnitude (or the k largest, or smallest)
  by implicitly restarted Lanczos (ARPACK's ``eigsh`` on a ``LinearOperator``), started from a
  vector drawn from ``seed``: deterministic given the seed;
* :func:`hutchinson_trace`: tr H = E[zᵀHz] for z with E[zzᵀ] = I (Rademacher entries; Hutchinson
  1989), the mean of ``samples`` such quadratic forms with its standard error.

The chapter "LLC theorems" reads H's extremes through them (Theorem 7.4's hypothesis nβ‖H‖ < γ, and
Remark 7.5's curvature trace nβ tr H / 2γ of λ̂ in that regime).

A loss is a closure ``loss(params)`` of a dict (or list) of tensors, the part of the weights it
varies, e.g. ``lambda p: loss_fn(functional_call(model, {**frozen, **p}, batch))``; ``params`` the point w
at which H is taken, with the same keys (or order).
"""
from __future__ import annotations

import numpy as np
import torch


def _as_tree(params):
    """(list of tensors, rebuild) for a dict or list/tuple of tensors."""
    if isinstance(params, dict):
        keys = list(params)
        return [params[k] for k in keys], (lambda ts: dict(zip(keys, ts)))
    if isinstance(params, (list, tuple)):
        return list(params), list
    raise TypeError(f"parameter 'params' must be a dict or a list of tensors; got {type(params).__name__}")


def hessian_vector_product(loss, params, vectors, method: str = "forward"):
    """H v with H = ∇²loss(params), for ``vectors`` v of ``params``' structure (a dict of tensors of the
    same keys and shapes, or a list in the same order); returns H v in that structure, detached.

    ``method``: "forward" (forward-over-reverse: ``torch.func.jvp`` of ``torch.func.grad``) or
    "reverse" (double backward: ∇_w ⟨∇L(w), v⟩ with ``torch.autograd``); the two agree to rounding."""
    if method not in ("forward", "reverse"):
        raise ValueError(f"parameter 'method' must be 'forward' or 'reverse'; got {method!r}")
    ws, rebuild = _as_tree(params)
    vs, _ = _as_tree(vectors)
    if len(vs) != len(ws) or any(v.shape != w.shape for v, w in zip(vs, ws)):
        raise ValueError("parameter 'vectors' must have the shapes of 'params'; got "
                         f"{[tuple(v.shape) for v in vs]} for {[tuple(w.shape) for w in ws]}")
    ws = [w.detach() for w in ws]
    vs = [v.detach().to(dtype=w.dtype, device=w.device) for v, w in zip(vs, ws)]
    if method == "forward":
        def g(*xs):
            return torch.func.grad(lambda *ys: loss(rebuild(list(ys))), argnums=tuple(range(len(xs))))(*xs)

        out = torch.func.jvp(g, tuple(ws), tuple(vs))[1]
    else:
        with torch.enable_grad():
            xs = [w.clone().requires_grad_(True) for w in ws]
            grads = torch.autograd.grad(loss(rebuild(xs)), xs, create_graph=True)
            dot = sum((gr * v).sum() for gr, v in zip(grads, vs))
            out = torch.autograd.grad(dot, xs, allow_unused=True)
        out = [torch.zeros_like(w) if o is None else o for o, w in zip(out, ws)]
    return rebuild([o.detach() for o in out])


class HessianOperator:
    """H at ``params`` as a linear map of flat float64 vectors (length d = the parts' total size), in the
    parts' order: :meth:`matvec` is :func:`hessian_vector_product` of the unflattened vector."""

    def __init__(self, loss, params, method: str = "forward"):
        self.loss, self.method = loss, method
        self.params = params
        ws, self._rebuild = _as_tree(params)
        self._ws = ws
        self.sizes = [w.numel() for w in ws]
        self.dimension = int(sum(self.sizes))
        self.products = 0

    def matvec(self, v) -> np.ndarray:
        flat = torch.as_tensor(np.asarray(v, dtype=np.float64).ravel())
        parts = [p.view(w.shape) for p, w in zip(torch.split(flat, self.sizes), self._ws)]
        out, _ = _as_tree(hessian_vector_product(self.loss, self.params, self._rebuild(parts), self.method))
        self.products += 1
        return torch.cat([o.reshape(-1) for o in out]).to(device="cpu", dtype=torch.float64).numpy()

    def linear_operator(self):
        from scipy.sparse.linalg import LinearOperator

        d = self.dimension
        return LinearOperator((d, d), matvec=self.matvec, rmatvec=self.matvec, dtype=np.float64)


def top_eigenvalues(loss, params, k: int = 1, *, which: str = "LM", seed: int = 0, tol: float = 1e-8,
                    maxiter: int | None = None, method: str = "forward") -> np.ndarray:
    """The ``k`` eigenvalues of H = ∇²loss(params) of largest magnitude (``which`` = "LM"), largest
    ("LA") or smallest ("SA"), by implicitly restarted Lanczos (ARPACK ``eigsh`` on H v products),
    started from a standard normal vector drawn from ``seed``; sorted by decreasing |λ| ("LM"), decreasing
    λ ("LA") or increasing λ ("SA"). ``tol``: ARPACK's relative accuracy of each eigenvalue. Refused
    unless 1 ≤ k < d (Lanczos needs k < d; for tiny d take the dense spectrum)."""
    from scipy.sparse.linalg import eigsh

    if which not in ("LM", "LA", "SA"):
        raise ValueError(f"parameter 'which' must be 'LM', 'LA' or 'SA'; got {which!r}")
    op = HessianOperator(loss, params, method)
    d = op.dimension
    if not (isinstance(k, (int, np.integer)) and 1 <= k < d):
        raise ValueError(f"parameter 'k' must be an integer in [1, {d - 1}] (d = {d} parameters); got {k!r}")
    v0 = np.random.default_rng(seed).standard_normal(d)
    ev = eigsh(op.linear_operator(), k=int(k), which=which, v0=v0, tol=tol, maxiter=maxiter,
               return_eigenvectors=False)
    if which == "LM":
        return ev[np.argsort(-np.abs(ev), kind="stable")]
    return np.sort(ev)[::-1] if which == "LA" else np.sort(ev)


def hutchinson_trace(loss, params, samples: int = 64, *, seed: int = 0, method: str = "forward") -> tuple[float, float]:
    """(estimate, standard error) of tr H, H = ∇²loss(params), by Hutchinson's estimator: the mean of
    zᵀHz over ``samples`` vectors z with independent Rademacher (±1) entries from ``seed`` (E[zᵀHz] = tr H
    since E[zzᵀ] = I; its variance is 2 Σ_{i≠j} H_ij², so a diagonal H is exact). Standard error: the
    sample standard deviation / √samples (NaN for one sample)."""
    if not (isinstance(samples, (int, np.integer)) and samples >= 1):
        raise ValueError(f"parameter 'samples' must be an integer ≥ 1; got {samples!r}")
    op = HessianOperator(loss, params, method)
    rng = np.random.default_rng(seed)
    q = np.empty(int(samples))
    for s in range(int(samples)):
        z = rng.integers(0, 2, op.dimension) * 2.0 - 1.0
        q[s] = z @ op.matvec(z)
    se = float(q.std(ddof=1) / np.sqrt(samples)) if samples > 1 else float("nan")
    return float(q.mean()), se
