"""Comparing sets of modes: with the modes a construction predicts, across history lengths, and across
the separately truncated joints of one language (Chen & Murfet §4–5).

* :func:`planted_mode_errors`: each predicted mode of a planted language (``lib.languages``: σ = √q(S),
  ṽ ∝ √q on S, u = e_y) matched with the computed spectrum, with its σ and vector errors.
* :func:`history_lift` and :func:`compare_history_lengths`: the modes of history length k against
  those of k + 1, through the lift of a k-history to the (k+1)-histories that end with it.
* :func:`truncated_family` (Remark 4.19): every (k, l) truncated at one cutoff χ, and whether the
  truncated joints still form a language (Def 3.2).

The modes themselves are :class:`lib.modes.Modes`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .linalg import principal_angles
from .modes import Modes


def planted_mode_errors(modes: Modes, predicted, cluster_rtol: float = 1e-9) -> list[dict]:
    """Match each predicted mode (``lib.languages.PredictedMode``: σ = √q(S), ṽ ∝ √q on S, u = e_y)
    to the computed mode with the nearest singular value; report the errors.

    Keys: ``kind``, ``index`` (computed mode), ``sigma`` (predicted), ``q_S`` (= σ² predicted),
    ``sigma_error`` |σ_computed − σ|, ``gap`` (distance to the next-nearest computed σ),
    ``cluster`` (number of computed σ within ``cluster_rtol``·σ_0 of the prediction: where it is
    > 1, e.g. two planted bigrams of equal q(S), single singular vectors are not determined),
    ``cluster_modes`` (their indices), ``rows`` (the planted histories' rows in ``modes``),
    ``u_error``, ``v_error`` (largest entry of the predicted u, ṽ minus its projection onto the
    computed singular subspace of that cluster: sign- and rotation-invariant), ``pair_error``
    max(|Mṽ − σu|, |Mᵀu − σṽ|) for the predicted vectors (an exact singular triple regardless of
    degeneracy)."""
    M = modes.matrix
    M = M.toarray() if sp.issparse(M) else M
    out = []
    for pm in predicted:
        rows = np.searchsorted(modes.rows, pm.rows)
        if np.any(rows >= len(modes.rows)) or not np.array_equal(modes.rows[rows], pm.rows):
            raise ValueError("a predicted history has q(x) = 0 in this joint")
        vt = np.zeros(modes.shape[0])
        vt[rows] = np.sqrt(pm.q_rows / pm.q_rows.sum())
        u = pm.u(modes.shape[1])
        dist = np.abs(modes.sigma - pm.sigma)
        i = int(np.argmin(dist))
        gap = float(np.sort(dist)[1]) if len(dist) > 1 else np.inf
        C = np.union1d(np.flatnonzero(dist <= cluster_rtol * modes.sigma[0]), [i])
        Uc, Vc = modes.u[:, C], modes.v_tilde[:, C]
        out.append(dict(kind=pm.kind, index=i, sigma=float(pm.sigma), q_S=float(pm.q_rows.sum()),
                        sigma_error=float(dist[i]), gap=gap, cluster=len(C), cluster_modes=C, rows=rows,
                        u_error=float(np.abs(u - Uc @ (Uc.T @ u)).max()),
                        v_error=float(np.abs(vt - Vc @ (Vc.T @ vt)).max()),
                        pair_error=float(max(np.abs(M @ vt - pm.sigma * u).max(),
                                             np.abs(M.T @ u - pm.sigma * vt).max()))))
    return out


def history_lift(short: Modes, long: Modes, alphabet_size: int) -> sp.csr_matrix:
    """The map J̃: V_k → V_{k+1} in orthonormal coordinates that lifts a function of the history x
    to the function of (a, x) ignoring the earliest token a:  J̃[ax, x] = √(q(ax)/q(x)).

    ``short`` and ``long`` are the modes at (k, l) and (k+1, l) of the same language (codes as in
    ``lib.languages``: the last k tokens of ax have code (code of ax) mod V^k). J̃ is an isometry
    iff Σ_a q(ax) = q(x) (first-position marginalisation: a stationary source), and then
    M_{k,l} = M_{k+1,l} J̃ (the language condition for the first position)."""
    V = int(alphabet_size)
    n_short = short.n_rows_in
    x_long = long.rows
    x_short = x_long % n_short
    if n_short * V != long.n_rows_in:
        raise ValueError(f"the joints do not look like (k, l) and (k+1, l) over |Σ| = {V}: "
                         f"{n_short} and {long.n_rows_in} histories")
    col = np.searchsorted(short.rows, x_short)
    if np.any(col >= len(short.rows)) or not np.array_equal(short.rows[col], x_short):
        raise ValueError("a history of length k+1 occurs whose last k tokens have q = 0 at length k")
    vals = np.sqrt(long.q_x / short.q_x[col])
    return sp.csr_matrix((vals, (np.arange(len(x_long)), col)), shape=(len(x_long), len(short.rows)))


@dataclass
class HistoryComparison:
    """``compare_history_lengths``: modes at (k, l) against modes at (k+1, l).

    ``sigma_short``, ``sigma_long``: the singular values (all of them).
    ``sigma_drop``: max_α (σ_α^(k) − σ_α^(k+1)) (≤ 0 for a stationary source: they can only grow).
    ``isometry_error``: max |J̃ᵀJ̃ − I|; ``intertwining_error``: max |M_{k+1} J̃ − M_k|.
    ``left_angles[r]``: principal angles between span{u_0..u_{r-1}} at k and at k+1 (R^{Σ^l}).
    ``right_angles[r]``: principal angles between the lifted span J̃ span{ṽ_0..ṽ_{r-1}} at k and
    span{ṽ_0..ṽ_{r-1}} at k+1 (in V_{k+1}, orthonormal coordinates).
    ``leakage``: ‖M_{k+1}(I − J̃J̃ᵀ)‖_F², the part of the (k+1)-operator the lift cannot see
    (0 iff q(y | a x) does not depend on the earliest token a)."""

    sigma_short: np.ndarray
    sigma_long: np.ndarray
    sigma_drop: float
    isometry_error: float
    intertwining_error: float
    left_angles: dict
    right_angles: dict
    leakage: float


def compare_history_lengths(short: Modes, long: Modes, alphabet_size: int, ranks=(1, 2, 3, 5)) -> HistoryComparison:
    """Relate the modes of C_{k,l} and C_{k+1,l} of one language (beyond the paper; cf. Remark 5.12).

    For a stationary source, M_k = M_{k+1} J̃ with J̃ an isometry (``history_lift``), so
    M_k M_kᵀ = M_{k+1} J̃J̃ᵀ M_{k+1}ᵀ ≼ M_{k+1} M_{k+1}ᵀ: every singular value can only grow
    with the history, σ_α^(k) ≤ σ_α^(k+1) (Courant–Fischer). Equality of the two left Gram
    operators, hence identical σ and left singular vectors with lifted right ones, holds iff
    q(y | a x) does not depend on the earliest token a (e.g. a Markov chain of order ≤ k)."""
    J = history_lift(short, long, alphabet_size)
    Ms = short.matrix
    Ml = long.matrix
    Ms = Ms.toarray() if sp.issparse(Ms) else Ms
    Ml = Ml.toarray() if sp.issparse(Ml) else Ml
    JtJ = (J.T @ J).toarray()
    MlJ = np.asarray(J.T @ Ml.T).T                               # M_{k+1} J̃ without densifying J̃
    proj = Ml - np.asarray((J @ (J.T @ Ml.T))).T                 # M_{k+1}(I − J̃J̃ᵀ)
    n = min(short.n_modes, long.n_modes)
    left, right = {}, {}
    lifted = np.asarray(J @ short.v_tilde)
    for r in ranks:
        r = int(r)
        if 1 <= r <= n:
            left[r] = principal_angles(short.u[:, :r], long.u[:, :r])
            right[r] = principal_angles(lifted[:, :r], long.v_tilde[:, :r])
    return HistoryComparison(short.sigma.copy(), long.sigma.copy(),
                             float(np.max(short.sigma[:n] - long.sigma[:n])),
                             float(np.abs(JtJ - np.eye(JtJ.shape[0])).max()),
                             float(np.abs(MlJ - Ms).max()), left, right, float(np.sum(proj ** 2)))


# ---------------------------------------------------------------------------
# Remark 4.19: truncating each (k, l) separately, and the language condition
# ---------------------------------------------------------------------------

@dataclass
class TruncatedFamily:
    """``truncated_family``: the joints Ã_{k+l}(xy) = q(x) q^(χ)(y|x) of one language, each (k, l)
    truncated on its own at the same cutoff χ, as tensors over Σ^{k+l} (``tensors[(k, l)]``).

    ``language_violation``: for (k, l), (k', l') with k + l = k' + l' + 1, max |Σ_last Ã^{(k,l)} −
    Ã^{(k',l')}| (Def. 3.2 between the truncated tensors); ``agreement``: for k + l = k' + l',
    max |Ã^{(k,l)} − Ã^{(k',l')}| (two truncations of one A_n); ``truncation_size``: max over (k, l)
    of |Ã − A| (how much truncation moved the joint, the scale to read the two against);
    ``chi_used``: the cutoff solved per (k, l) (χ capped at the rank, raised past ties)."""

    chi: int
    tensors: dict
    language_violation: dict
    agreement: dict
    truncation_size: float
    chi_used: dict

    @property
    def max_violation(self) -> float:
        vals = list(self.language_violation.values()) + list(self.agreement.values())
        return float(max(vals)) if vals else 0.0


def truncated_family(language, chi: int, orders) -> TruncatedFamily:
    """Truncate every (k, l) of ``orders`` of a ``lib.languages`` language at the same χ (Def 4.16,
    the book's Choice) and measure whether the truncated joints still form a language (Def 3.2),
    as Remark 4.19 asks: the paper notes that truncating one (k, l) at a time ignores the language
    condition that ties the A_n together. Histories with q(x) = 0 keep Ã = 0."""
    orders = [tuple(int(v) for v in o) for o in orders]
    if not orders or any(len(o) != 2 or min(o) < 1 for o in orders):
        raise ValueError(f"orders must be a non-empty list of (k, l) with k, l >= 1, got {orders!r}")
    V = int(language.alphabet_size)
    tensors, used, size = {}, {}, 0.0
    for k, l in orders:
        joint = language.joint(k, l)
        joint = joint.toarray() if sp.issparse(joint) else np.asarray(joint, dtype=np.float64)
        m = Modes.from_joint(joint, zero_rows="drop")
        c = m.check_chi(min(int(chi), m.n_modes))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            p, info = m.effective(c, return_info=True)
        full = np.zeros_like(joint)
        full[m.rows] = m.q_x[:, None] * p
        tensors[(k, l)] = full.reshape((V,) * (k + l))
        used[(k, l)] = info.chi_used
        size = max(size, float(np.abs(full - joint).max()))
    violation, agreement = {}, {}
    for a in orders:
        for b in orders:
            if sum(a) == sum(b) + 1:
                violation[(a, b)] = float(np.abs(tensors[a].sum(axis=-1) - tensors[b]).max())
            elif sum(a) == sum(b) and a < b:
                agreement[(a, b)] = float(np.abs(tensors[a] - tensors[b]).max())
    return TruncatedFamily(int(chi), tensors, violation, agreement, size, used)
