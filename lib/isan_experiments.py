"""Experiments of the chapter "ISAN learning" (Golowich, Liu & Shetty 2025, §4 and Appendix C).

Everything the chapter computes lives here, built on :mod:`lib.isan`:

* Theorem 4.3 / Fact C.4 / Lemma C.3 / Fact C.2 / Remark 1 on random ISANs
  (:func:`theorem_4_3_table`);
* representation power: copying (:func:`copying_table`), a random linear-in-state SSM and
  its literal simulation (:func:`random_ssm`, :func:`ssm_sequence_logprobs`);
* Theorem 4.4: the learner over a grid (:func:`learning_grid`), one factor at a time from a
  base point and at long horizons (:func:`query_scaling`, :func:`horizon_sweep`), on the
  rare-branch stress test (:func:`rare_branch_sweep`, :func:`classify_rare_runs`), with
  power-law fits and their intervals (:func:`fit_power_law`, :func:`exponent_excess`), and the
  counts the algorithm's structure gives (:func:`final_pass_lookups`, :func:`query_count_bound`,
  :func:`polynomial_degrees`; Lemma C.17);
* Theorem C.13: learners of a noisy parity from *samples* (:func:`empirical_logprobs`,
  :func:`parity_mle`, :func:`parity_sample_learners`) against the logit-query learner
  (:func:`parity_query_learner`), and both at one longer n with the same budget
  (:func:`parity_budget_comparison`);
* beyond the paper: approximately low-rank models (:func:`perturbed_isan`,
  :func:`approx_low_rank_sweep`).

Sequences are indexed as in :mod:`lib.isan` (lexicographic, first token most significant).
"""

from __future__ import annotations

from dataclasses import dataclass

import time
from typing import Callable, Sequence

import numpy as np
import scipy.stats
from scipy.special import log_softmax

from .book.costs import HeavyStep
from .isan import (EXACT_RANK_TOL, ISAN, MAX_STRINGS, TimeVaryingISAN, all_futures, all_histories, centre,
                   check_enumerable, check_positive_int, check_prefix, copying_isan, copying_logprobs,
                   isan_from_low_rank_oracle, learn_from_logit_queries, logit_matrix, logit_rank, logprobs_of,
                   noisy_parity_isan, noisy_parity_logprobs, random_isan, rare_branch_isan, time_varying_to_isan,
                   tv_distance)

EXACT_TV_LIMIT = 2 ** 20  # above this many strings, TV is estimated by Monte Carlo


def _seed(*parts: int) -> np.random.Generator:
    """An independent generator for one cell of an experiment (stable under reordering)."""
    return np.random.default_rng([int(p) for p in parts])


# ---------------------------------------------------------------------------
# oracles, log-probabilities, divergences
# ---------------------------------------------------------------------------

class StateCachedOracle:
    """Logit queries to a TimeVaryingISAN that cache hidden states by prefix.

    Returns exactly ``model.next_logits(prefix)`` (up to float round-off of the same
    products), but a prefix whose parent was queried costs one d×d product instead of t.
    ``calls`` counts queries. Used where the learner's cost, not the oracle's, is timed.
    """

    def __init__(self, model: TimeVaryingISAN):
        self.model, self.calls, self._states = model, 0, {(): model.x0}
        # centre(B_t x) = (B_t − mean_z B_t[z]) x: the centring is linear, so it is applied to B once
        self._Bc = model.B - model.B.mean(axis=1, keepdims=True)

    def _state(self, p: tuple) -> np.ndarray:
        x = self._states.get(p)
        if x is None:
            x = self.model.A[len(p) - 1, p[-1]] @ self._state(p[:-1])
            self._states[p] = x
        return x

    def __call__(self, prefix) -> np.ndarray:
        p = prefix if type(prefix) is tuple else tuple(prefix)
        x = self._states.get(p)
        if x is None:
            z = p[-1] if p else None
            parent = self._states.get(p[:-1]) if p else None
            if (parent is not None and len(p) < self.model.T and type(z) is int
                    and 0 <= z < self.model.alphabet_size):  # a valid prefix: its parent was one
                x = self.model.A[len(p) - 1, z] @ parent
                self._states[p] = x
            else:
                p = check_prefix(prefix, self.model.alphabet_size, self.model.T - 1)
                x = self._state(p)
        self.calls += 1
        return self._Bc[len(p)] @ x


def string_logprobs(model: TimeVaryingISAN, Z) -> np.ndarray:
    """log Pr_model[s] for each row s of Z (shape (n, T)), without enumerating Σ^T."""
    Z = np.asarray(Z, dtype=np.int64)
    if Z.ndim != 2 or Z.shape[1] != model.T:
        raise ValueError(f"Z: expected shape (n, T) with T = {model.T}, got {Z.shape}")
    if Z.size and (Z.min() < 0 or Z.max() >= model.alphabet_size):
        raise ValueError(f"Z: tokens must lie in [0, {model.alphabet_size})")
    n = Z.shape[0]
    X = np.broadcast_to(model.x0, (n, model.d)).copy()
    lp = np.zeros(n)
    rows = np.arange(n)
    for t in range(model.T):
        lp += log_softmax(X @ model.B[t].T, axis=1)[rows, Z[:, t]]
        if t < model.T - 1:
            X = np.einsum("nij,nj->ni", model.A[t][Z[:, t]], X)
    return lp


def tv_monte_carlo(a: TimeVaryingISAN, b: TimeVaryingISAN, n: int, rng: np.random.Generator):
    """Unbiased estimate of TV(a, b) = E_{s~a}[max(0, 1 − P_b(s)/P_a(s))] from n samples of a.

    Returns (estimate, standard error).
    """
    n = check_positive_int("n", n, minimum=2)
    if (a.alphabet_size, a.T) != (b.alphabet_size, b.T):
        raise ValueError("b: expected a model over the same Σ^T as a")
    Z = a.sample(n, rng)
    w = np.maximum(0.0, 1.0 - np.exp(string_logprobs(b, Z) - string_logprobs(a, Z)))
    return float(w.mean()), float(w.std(ddof=1) / np.sqrt(n))


def tv_exact_or_mc(a: TimeVaryingISAN, b: TimeVaryingISAN, rng: np.random.Generator,
                   exact_limit: int | None = None, mc_samples: int = 20_000):
    """Exact TV when |Σ|^T <= exact_limit (default EXACT_TV_LIMIT), else Monte Carlo.
    Returns (tv, stderr, exact?)."""
    if a.alphabet_size ** a.T <= (EXACT_TV_LIMIT if exact_limit is None else exact_limit):
        return tv_distance(a, b), 0.0, True
    tv, se = tv_monte_carlo(a, b, mc_samples, rng)
    return tv, se, False


def kl_divergence(a, b, T: int | None = None) -> float:
    """Exact KL(a ‖ b) = Σ_s P_a(s) (log P_a(s) − log P_b(s)) in nats, by enumeration.

    a, b as in :func:`lib.isan.tv_distance` (models or log-probability arrays).
    Strings with P_a(s) = 0 contribute 0; P_a(s) > 0 = P_b(s) gives inf.
    """
    la, lb = logprobs_of("a", a, T), logprobs_of("b", b, T)
    if la.shape != lb.shape:
        raise ValueError(f"b: expected log-probabilities of shape {la.shape} (as a), got {lb.shape}")
    pa = np.exp(la)
    live = pa > 0
    if np.any(np.isneginf(lb[live])):
        return float("inf")
    return float(max(0.0, np.sum(pa[live] * (la[live] - lb[live]))))


# ---------------------------------------------------------------------------
# Theorem 4.3, Lemma C.3, Fact C.2, Remark 1
# ---------------------------------------------------------------------------

def full_logit_matrix(oracle: Callable, alphabet_size: int, T: int, t: int) -> np.ndarray:
    """L_M(Σ^t, Σ^{≤T−1−t}): Theorem 4.3's matrix (the futures that still have a next token)."""
    return logit_matrix(oracle, all_histories(alphabet_size, t), all_futures(alphabet_size, T - 1 - t),
                        alphabet_size)


def rank_profile(oracle: Callable, alphabet_size: int, T: int, tol: float = EXACT_RANK_TOL) -> list[int]:
    """Numerical ranks of L_M(Σ^t, Σ^{≤T−1−t}) for t = 0..T−1."""
    return [logit_rank(full_logit_matrix(oracle, alphabet_size, T, t), tol) for t in range(T)]


def generic_rank(d: int, alphabet_size: int, T: int, t: int) -> int:
    """Rank of L(Σ^t, Σ^{≤T−1−t}) for a generic ISAN of hidden dim d: min(d, #rows, (|Σ|−1)·#futures)."""
    S = alphabet_size
    n_futures = sum(S ** k for k in range(T - t))
    return min(d, S ** t, (S - 1) * n_futures)


def effective_rank(d: int, alphabet_size: int, T: int) -> int:
    """max_t generic_rank(d, |Σ|, T, t): the hidden dimension a generic ISAN of nominal dimension d
    actually uses over Σ^T (d itself once |Σ|^t and the futures leave room for d rows)."""
    return max(generic_rank(d, alphabet_size, T, t) for t in range(T))


def configurations_problem(configs) -> str | None:
    """Why the random ISANs [d, |Σ|, T] of :func:`theorem_4_3_table` cannot be built and checked
    exactly, in a sentence, or None: an alphabet needs |Σ| >= 2 tokens, and the exact checks
    enumerate Σ^T, so |Σ|^T is held to ``lib.isan.MAX_STRINGS`` = 2^24. Used by the ISAN chapter's
    declaration (``validate:``), so that a configuration is refused before any work."""
    for i, config in enumerate(configs):
        d, S, T = config
        if S < 2:
            return f"item [{i}] = {list(config)}: |Σ| = {S}; an alphabet has at least 2 tokens"
        if S ** T > MAX_STRINGS:
            return (f"item [{i}] = {list(config)}: |Σ|^T = {S}^{T} strings is above 2^24, the most that are "
                    "enumerated exactly (lib.isan.MAX_STRINGS)")
    return None


def theorem_4_3_table(configs: Sequence[tuple[int, int, int]], seed: int, tol: float = EXACT_RANK_TOL) -> list[dict]:
    """For each (d, |Σ|, T): a random ISAN, its logit ranks (mean-centred and normalised) at
    every t against the generic prediction, the ISAN rebuilt from logit queries alone
    (Lemma C.3) and its TV, and the time-invariant ISAN of dim T·d (Fact C.2) and its TV."""
    rows = []
    for i, (d, S, T) in enumerate(configs):
        m = random_isan(d, S, T, _seed(seed, 43, i, d, S, T))
        centred = rank_profile(m.next_logits, S, T, tol)
        normalised = rank_profile(m.next_logprobs, S, T, tol)
        predicted = [generic_rank(d, S, T, t) for t in range(T)]
        rebuilt, n_queries = isan_from_low_rank_oracle(m.next_logits, S, T, d, tol=tol, return_queries=True)
        inv = time_varying_to_isan(m)
        rows.append(dict(
            d=d, S=S, T=T, ranks=centred, predicted=predicted, normalised_ranks=normalised,
            rank_mismatches=sum(r != p for r, p in zip(centred, predicted)),
            max_rank=max(centred), max_normalised_rank=max(normalised),
            rebuilt_d=rebuilt.d, rebuild_queries=n_queries, rebuild_tv=tv_distance(m, rebuilt),
            invariant_d=inv.d, invariant_tv=tv_distance(inv, m, T=T)))
    return rows


# ---------------------------------------------------------------------------
# representation power (Appendix C.2)
# ---------------------------------------------------------------------------

def copying_table(ns: Sequence[int], Cs: Sequence[float]) -> list[dict]:
    """TV of Fact C.9's ISAN (hidden dim n+1) to the n-bit copying distribution, per (n, C),
    with the bound n·e^{−C/2} (each copy step errs with probability 1/(1 + e^{C/2}))."""
    rows = []
    for n in ns:
        target = copying_logprobs(n)
        for C in Cs:
            m = copying_isan(n, C)
            rows.append(dict(n=n, C=float(C), d=m.d, tv=tv_distance(m, target), bound=n * np.exp(-C / 2)))
    return rows


def random_ssm(d: int, p: int, q: int, alphabet_size: int, rng: np.random.Generator) -> dict:
    """A random *selective* linear-in-state SSM (Defs C.5, C.6): A, B, C, D are nonlinear
    functions of the input u (tanh, Gaussian and trigonometric gates). Returns the keyword
    arguments of :func:`lib.isan.ssm_to_isan` and :func:`ssm_sequence_logprobs`."""
    A0, A1 = rng.standard_normal((2, d, d)) / np.sqrt(d)
    B0, C0, D0 = rng.standard_normal((d, p)), rng.standard_normal((q, d)), rng.standard_normal((q, p))
    w, v = rng.standard_normal(p), rng.standard_normal(p)
    return dict(
        x0=rng.standard_normal(d), u1=rng.standard_normal(p),
        V=rng.standard_normal((p, alphabet_size)), U=rng.standard_normal((alphabet_size, q)),
        A=lambda u: A0 + np.tanh(u @ w) * A1,
        B=lambda u: B0 * np.exp(-0.5 * (u ** 2).sum()),
        C=lambda u: C0 * np.cos(u @ v),
        D=lambda u: D0 * (1.0 + np.sin(u @ w)))


def ssm_sequence_logprobs(x0, u1, V, U, A, B, C, D, T: int) -> np.ndarray:
    """log Pr[z_1..z_T] of a linear-in-state SSM (Defs C.5, C.6), simulated literally along
    every branch of Σ^T (lexicographic order): y_t = C(u_t)x_{t−1} + D(u_t)u_t,
    z_t ~ softmax(U y_t), x_t = A(u_t)x_{t−1} + B(u_t)u_t, u_{t+1} = V e(z_t)."""
    U, V = np.asarray(U, dtype=float), np.asarray(V, dtype=float)
    S = U.shape[0]
    check_enumerable(S, T)
    nodes = [(np.asarray(x0, dtype=float), np.asarray(u1, dtype=float), 0.0)]
    for _ in range(T):
        nxt = []
        for x, u, lp in nodes:
            y = C(u) @ x + D(u) @ u
            logp = log_softmax(U @ y)
            x_new = A(u) @ x + B(u) @ u
            nxt.extend((x_new, V[:, z], lp + logp[z]) for z in range(S))
        nodes = nxt
    return np.array([lp for _, _, lp in nodes])


def logprob_table_oracle(logprobs, alphabet_size: int, T: int) -> Callable:
    """Logit queries (Def C.14) of *any* distribution on Σ^T given by its log-probabilities
    (lexicographic order): the mean-centred log-marginal of the next token after a prefix.
    No model behind it: used to apply Lemma C.3 to a distribution's definition."""
    S = check_positive_int("alphabet_size", alphabet_size)
    check_enumerable(S, T)
    lp = np.asarray(logprobs, dtype=float)
    if lp.shape != (S ** T,):
        raise ValueError(f"logprobs: expected shape ({S ** T},), got {lp.shape}")
    table = lp.reshape((S,) * T)

    def oracle(prefix):
        p = check_prefix(prefix, S, T - 1)
        sub = table[p].reshape(S, -1)
        m = sub.max(axis=1, keepdims=True)
        marg = (m + np.log(np.exp(sub - m).sum(axis=1, keepdims=True)))[:, 0]
        return centre(marg)
    return oracle


def noisy_parity_table(ys, p: float, tol: float = EXACT_RANK_TOL) -> list[dict]:
    """Fact C.11 for each hidden vector y: TV of the dimension-2 ISAN to Def C.10, the logit
    ranks of the *definition* (through :func:`logprob_table_oracle`) at every t, and the ISAN
    of hidden dimension 1 that Lemma C.3 rebuilds from the definition's logit queries, with its TV."""
    rows = []
    for y in ys:
        y = np.asarray(y)
        n = y.size
        truth = noisy_parity_logprobs(y, p)
        oracle = logprob_table_oracle(truth, 2, n + 1)
        ranks = rank_profile(oracle, 2, n + 1, tol)
        dim1 = isan_from_low_rank_oracle(oracle, 2, n + 1, 1, tol=tol)
        m = noisy_parity_isan(y, p)
        rows.append(dict(n=n, y="".join(map(str, y.tolist())), d=m.d, tv=tv_distance(m, truth), ranks=ranks,
                         max_rank=max(ranks), dim1_tv=tv_distance(dim1, truth)))
    return rows


# ---------------------------------------------------------------------------
# Theorem 4.4: the learner over a grid
# ---------------------------------------------------------------------------

def theorem_n(d: int, T: int, eps: float) -> int:
    """Algorithm 2's sample size N = ⌈4T/ε · ln(dT/ε)⌉."""
    return int(np.ceil(4 * T / eps * np.log(d * T / eps)))


def exhaustive_queries(alphabet_size: int, T: int) -> int:
    """|Σ^{≤T−1}|: the number of distinct prefixes a learner could ever query."""
    return sum(alphabet_size ** k for k in range(T))


def final_pass_lookups(N: int, alphabet_size: int, T: int, sizes, future_sizes) -> int:
    """Prefix look-ups of Algorithm 3's last (certifying) pass, from the final sizes |H_t|, |F_t|:

        Σ_{t=1}^{T−1} [ N·t + (N + |H_t| + |Σ|·|H_{t−1}|) · (|F_t| + |Σ|·|F_{t+1}|) ]   (F_T = ∅),

    N samples of M[:t] drawn token by token (t look-ups each, Fact C.15), and every candidate row
    (H_t, H_{t−1}∘Σ, the samples S_t) read on every column of F_t ∪ Σ∘F_{t+1}. The count the
    algorithm's structure gives before the cache removes repeated prefixes: the short prefixes
    repeat once |Σ|^t < N, so distinct queries can be far fewer."""
    S = alphabet_size
    H, F = list(sizes), list(future_sizes) + [0]
    if len(H) != T or len(F) != T + 1:
        raise ValueError(f"sizes, future_sizes: expected T = {T} entries each, got {len(H)} and {len(F) - 1}")
    return int(sum(N * t + (N + H[t] + S * H[t - 1]) * (F[t] + S * F[t + 1]) for t in range(1, T)))


def query_count_bound(d: int, alphabet_size: int, T: int, N: int) -> int:
    """A worst-case bound on the distinct logit queries of lib.isan.learn_from_logit_queries for a model
    of logit rank <= d (so |H_t|, |F_t| <= d + 1):

        dT · (T−1) · [ N·T/2 + (N + (d+1)(|Σ|+1)) · (d+1)(|Σ|+1) ]  +  T(d+1)((|Σ|+1)(d+1) + 1),

    at most dT passes of the while loop (Lemma C.17), each drawing at most N samples of each length
    t (t look-ups each: Σ_t N·t = N·T(T−1)/2) and reading at most N + (d+1) + |Σ|(d+1) rows on at most
    (d+1)(|Σ|+1) columns for each t, then Algorithm 2's final solve. A polynomial in (d, |Σ|, T, N), with
    N = ⌈4T/ε·ln(dT/ε)⌉: degree 3 in d, 2 in |Σ|, 4 in T and 1 in 1/ε, up to the logarithm."""
    c = (d + 1) * (alphabet_size + 1)
    passes = d * T * (T - 1) * (N * T / 2 + (N + c) * c)
    return int(np.ceil(passes + T * (d + 1) * (c + 1)))


def polynomial_degrees(d: int, T: int, eps: float) -> dict:
    """Degrees of :func:`query_count_bound` in d, |Σ|, T and 1/ε, each raised by the local exponent
    1/ln(dT/ε) of the logarithm in N where N enters (d, T, 1/ε). Exponents fitted to the learner's
    query count are *consistent with Theorem 4.4's polynomial* when none exceeds these."""
    log_part = 1.0 / np.log(d * T / eps)
    return {"d_eff": 3.0, "S": 2.0, "T": 4.0 + log_part, "eps": 1.0 + log_part}


def learn_once(model: TimeVaryingISAN, eps: float, rng: np.random.Generator, *, d: int | None = None,
               rank_tol: float | None = None, tv_rng: np.random.Generator | None = None,
               exact_limit: int | None = None, mc_samples: int = 20_000, cached_oracle: bool = True) -> dict:
    """Run the logit-query learner once on ``model`` and measure it: TV (exact up to
    ``exact_limit`` strings, else Monte Carlo), queries, wall time, N and the learned dimension.

    The oracle is a StateCachedOracle (``cached_oracle``; one d×d product per new prefix) or the
    model's own ``next_logits`` (t products per query, as in benchmarks/bench_isan.py); the
    wall time includes the oracle's work either way."""
    oracle = StateCachedOracle(model) if cached_oracle else model.next_logits
    kw = {} if rank_tol is None else {"rank_tol": rank_tol}
    t0 = time.perf_counter()
    learned, n_queries, info = learn_from_logit_queries(oracle, model.alphabet_size, model.T, eps, rng,
                                                        d=model.d if d is None else d, return_info=True, **kw)
    seconds = time.perf_counter() - t0
    tv, se, exact = tv_exact_or_mc(model, learned, tv_rng or rng, exact_limit, mc_samples)
    S, T = model.alphabet_size, model.T
    return dict(d=model.d, d_eff=effective_rank(model.d, S, T), S=S, T=T, eps=eps, tv=tv, tv_se=se,
                tv_exact=exact, queries=n_queries, seconds=seconds, N=info["N"], samples=info["samples"],
                iterations=info["iterations"], d_used=info["d_used"],
                iteration_ratio=info["iterations"] / (info["d_used"] * T), hidden_dim=info["hidden_dim"],
                final_pass=final_pass_lookups(info["N"], S, T, info["sizes"], info["future_sizes"]),
                bound=query_count_bound(info["d_used"], S, T, info["N"]),
                exhaustive=exhaustive_queries(S, T), model=learned)


def learning_grid(ds, alphabet_sizes, Ts, epss, repeats: int, seed: int, scale: float = 1.0) -> list[dict]:
    """The learner on random ISANs over the grid d × |Σ| × T × ε, ``repeats`` times each
    (a fresh random ISAN and learner seed per repeat). One row per run (learned model dropped)."""
    rows = []
    for d in ds:
        for S in alphabet_sizes:
            for T in Ts:
                for r in range(repeats):
                    model = random_isan(d, S, T, _seed(seed, 44, d, S, T, r), scale=scale)
                    for eps in epss:
                        row = learn_once(model, eps, _seed(seed, 45, d, S, T, r, round(1e6 * eps)))
                        row.pop("model")
                        rows.append(dict(row, repeat=r))
    return rows


def grid_summary(rows: list[dict]) -> list[dict]:
    """Per grid point (d, |Σ|, T, ε): mean and max TV over repeats, mean queries and seconds."""
    keys = sorted({(r["d"], r["S"], r["T"], r["eps"]) for r in rows})
    out = []
    for k in keys:
        sel = [r for r in rows if (r["d"], r["S"], r["T"], r["eps"]) == k]
        out.append(dict(d=k[0], d_eff=sel[0]["d_eff"], S=k[1], T=k[2], eps=k[3], runs=len(sel),
                        mean_tv=float(np.mean([r["tv"] for r in sel])), max_tv=max(r["tv"] for r in sel),
                        queries=float(np.mean([r["queries"] for r in sel])),
                        seconds=float(np.mean([r["seconds"] for r in sel])),
                        N=sel[0]["N"], exhaustive=sel[0]["exhaustive"],
                        hidden_dim=max(r["hidden_dim"] for r in sel),
                        iteration_ratio=max(r["iteration_ratio"] for r in sel)))
    return out


def horizon_sweep(d: int, alphabet_size: int, Ts, eps: float, repeats: int, seed: int,
                  mc_samples: int = 20_000) -> list[dict]:
    """The learner at long horizons T (where |Σ^{≤T−1}| far exceeds the queries it makes);
    TV exact up to EXACT_TV_LIMIT strings, Monte Carlo beyond."""
    rows = []
    for T in Ts:
        for r in range(repeats):
            model = random_isan(d, alphabet_size, T, _seed(seed, 46, d, alphabet_size, T, r))
            row = learn_once(model, eps, _seed(seed, 47, T, r), tv_rng=_seed(seed, 48, T, r),
                             mc_samples=mc_samples)
            row.pop("model")
            rows.append(dict(row, repeat=r))
    return rows


def fit_power_law(rows: list[dict], response: str, variables: Sequence[str],
                  transforms: dict | None = None) -> dict:
    """Least squares log(response) = c + Σ_k a_k log(variable_k); returns the exponents a_k,
    the intercept, R² and the number of rows. ``transforms`` maps a variable name to a
    function applied before the log (e.g. {"eps": lambda e: 1/e} for the exponent of 1/ε)."""
    transforms = transforms or {}
    if len(rows) < len(variables) + 1:
        raise ValueError(f"rows: need at least {len(variables) + 1} rows to fit {len(variables)} exponents, "
                         f"got {len(rows)}")
    y = np.log([float(r[response]) for r in rows])
    X = np.column_stack([np.ones(len(rows))] + [
        np.log([float(transforms.get(v, lambda a: a)(r[v])) for r in rows]) for v in variables])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss if ss > 0 else 1.0
    dof = len(rows) - X.shape[1]
    if dof > 0 and np.linalg.matrix_rank(X) == X.shape[1]:
        sigma2 = float((resid ** 2).sum()) / dof
        se = np.sqrt(np.diag(sigma2 * np.linalg.inv(X.T @ X)))[1:]
        q = float(scipy.stats.t.ppf(0.975, dof))
    else:  # no residual degrees of freedom (or a variable that never varies): no interval
        se, q = np.full(len(variables), np.inf), np.inf
    return dict(exponents=dict(zip(variables, map(float, coef[1:]))), intercept=float(coef[0]), r2=r2,
                n=len(rows), stderr=dict(zip(variables, map(float, se))),
                interval={v: (float(c - q * e), float(c + q * e)) for v, c, e in zip(variables, coef[1:], se)})


def exponent_excess(fit: dict, allowed: dict) -> float:
    """max over the fitted variables of (lower end of the 95% interval − allowed exponent): <= 0 when no
    exponent is significantly above the degree allowed for it, i.e. the data are consistent with a
    polynomial of those degrees (one-sided test at level 2.5% per variable; see :func:`polynomial_degrees`)."""
    missing = set(fit["interval"]) - set(allowed)
    if missing:
        raise ValueError(f"allowed: no degree given for {sorted(missing)}")
    return max(fit["interval"][v][0] - allowed[v] for v in fit["interval"])


def query_scaling(base: dict, axes: dict, repeats: int, seed: int, mc_samples: int = 20_000) -> list[dict]:
    """Theorem 4.4's query count, one factor at a time: random ISANs at ``base`` = dict(d, S, T, eps)
    and at every value of ``axes`` = {factor: values} with the other factors at the base (the base
    point itself is run once per repeat, labelled factor "base"). One row per run (model dropped);
    TV exact up to EXACT_TV_LIMIT strings, Monte Carlo beyond."""
    keys = ("d", "S", "T", "eps")
    if set(base) != set(keys):
        raise ValueError(f"base: expected the keys {keys}, got {sorted(base)}")
    bad = set(axes) - set(keys)
    if bad:
        raise ValueError(f"axes: factors must be among {keys}, got {sorted(bad)}")
    repeats = check_positive_int("repeats", repeats)
    points = [("base", dict(base))] + [(f, dict(base, **{f: v})) for f, vals in axes.items() for v in vals
                                       if v != base[f]]
    rows = []
    for factor, p in points:
        for r in range(repeats):
            model = random_isan(p["d"], p["S"], p["T"], _seed(seed, 56, p["d"], p["S"], p["T"], r))
            row = learn_once(model, p["eps"], _seed(seed, 57, p["d"], p["S"], p["T"], r, round(1e6 * p["eps"])),
                             tv_rng=_seed(seed, 58, p["d"], p["S"], p["T"], r), mc_samples=mc_samples)
            row.pop("model")
            rows.append(dict(row, factor=factor, repeat=r))
    return rows


def rare_branch_sweep(epss, deltas, repeats: int, seed: int, C: float = 5.0) -> list[dict]:
    """Theorem 4.4's ε at work: E[TV] of the learner on rare_branch_isan(δ) over learner seeds,
    per (ε, δ). A branch of probability δ ≪ 1/N is missed (TV = δ(σ(2C) − 1/2)), δ ≫ 1/N found."""
    rows = []
    for eps in epss:
        for delta in deltas:
            model = rare_branch_isan(delta, C)
            missed_tv = float(delta * (1 / (1 + np.exp(-2 * C)) - 0.5))
            tvs, iters = [], []
            for r in range(repeats):
                learned, _, info = learn_from_logit_queries(model.next_logits, 2, 4, eps,
                                                            _seed(seed, 49, r, round(1e6 * eps)), d=2,
                                                            return_info=True)
                tvs.append(tv_distance(model, learned))
                iters.append(info["iterations"] / (2 * 4))
            rows.append(dict(eps=eps, delta=float(delta), N=theorem_n(2, 4, eps), mean_tv=float(np.mean(tvs)),
                             max_tv=float(np.max(tvs)), missed_tv=missed_tv, iteration_ratio=max(iters),
                             **classify_rare_runs(tvs, missed_tv)))
    return rows


def classify_rare_runs(tvs, missed_tv: float) -> dict:
    """Decide from the TV alone whether each run found the rare direction: found when TV < missed_tv/2
    (a run either finds it, TV ≈ 0, or returns the k = 0 model, TV = missed_tv exactly). Returns the
    found fraction, the largest TV of a found run (0 if none) and the largest relative error
    |TV − missed_tv| / missed_tv of a missed run (0 if none)."""
    tvs = np.asarray(tvs, dtype=float)
    if tvs.ndim != 1 or tvs.size == 0:
        raise ValueError(f"tvs: expected a non-empty 1-d array of TV distances, got shape {tvs.shape}")
    if not missed_tv > 0:
        raise ValueError(f"missed_tv: expected a positive TV, got {missed_tv!r}")
    found = tvs < missed_tv / 2
    return dict(found_fraction=float(found.mean()),
                found_max_tv=float(tvs[found].max()) if found.any() else 0.0,
                missed_rel_error=float(np.abs(tvs[~found] - missed_tv).max() / missed_tv) if (~found).any() else 0.0)


# ---------------------------------------------------------------------------
# Theorem C.13 at small n: noisy parity from samples vs from logit queries
# ---------------------------------------------------------------------------

def string_index(Z, alphabet_size: int) -> np.ndarray:
    """Lexicographic index of each row of Z (first token most significant)."""
    Z = np.asarray(Z, dtype=np.int64)
    return Z @ (alphabet_size ** np.arange(Z.shape[1] - 1, -1, -1, dtype=np.int64))


def empirical_logprobs(Z, alphabet_size: int) -> np.ndarray:
    """The empirical distribution of the sample rows Z (n, T) over Σ^T (−inf where unseen):
    maximum likelihood over *all* distributions on Σ^T."""
    Z = np.asarray(Z, dtype=np.int64)
    n, T = Z.shape
    check_enumerable(alphabet_size, T)
    counts = np.bincount(string_index(Z, alphabet_size), minlength=alphabet_size ** T)
    with np.errstate(divide="ignore"):
        return np.log(counts) - np.log(n)


def fwht(f) -> np.ndarray:
    """Fast Walsh–Hadamard transform: F[y] = Σ_z f[z] (−1)^{popcount(y & z)}, length 2^n."""
    F = np.array(f, dtype=float)
    n = F.size
    if n & (n - 1):
        raise ValueError(f"f: expected a length that is a power of 2, got {n}")
    h = 1
    while h < n:
        F = F.reshape(-1, 2, h)
        F = np.stack([F[:, 0] + F[:, 1], F[:, 0] - F[:, 1]], axis=1).reshape(-1)
        h *= 2
    return F


def parity_mle(Z) -> tuple[np.ndarray, float, int]:
    """Maximum likelihood over the noisy parities of Def C.10 (a family of ISANs of dim 2)
    from samples Z (m, n+1) of {0,1}^{n+1}: every y ∈ {0,1}^n is scored by its number of
    agreements b = ⟨y, z⟩ mod 2 (all 2^n at once by a Walsh–Hadamard transform), then
    p̂ = 1 − agreements/m. Returns (ŷ, p̂, candidates examined = 2^n)."""
    Z = np.asarray(Z, dtype=np.int64)
    m, n1 = Z.shape
    n = n1 - 1
    if n < 1:
        raise ValueError("Z: expected samples of length n + 1 >= 2")
    z_idx = string_index(Z[:, :n], 2)
    f = np.bincount(z_idx, weights=1.0 - 2.0 * Z[:, n], minlength=2 ** n)  # #(b=0) − #(b=1) per z
    F = fwht(f)                                                           # agreements − disagreements
    best = int(np.argmax(F))
    agree = (m + F[best]) / 2
    y_hat = np.array([(best >> (n - 1 - i)) & 1 for i in range(n)])
    p_hat = float(np.clip(1.0 - agree / m, 0.5 / m, 0.5 - 1e-9))
    return y_hat, p_hat, 2 ** n


def random_parity_vector(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random non-zero y ∈ {0,1}^n."""
    while True:
        y = rng.integers(0, 2, n)
        if y.any():
            return y


def parity_sample_learners(ns, repeats: int, p: float, seed: int, max_samples: int,
                           min_log2: int = 3, beyond_log2: int = 7) -> list[dict]:
    """For each n, sample count m = 2^k (k = min_log2 .. n + beyond_log2, m <= max_samples) and
    repeat: draw a random non-zero y, m samples of the noisy parity (y, p) from its ISAN, and
    measure the TV to the truth of (a) the empirical distribution and (b) the maximum-likelihood
    noisy parity (:func:`parity_mle`), and the wall time of each."""
    rows = []
    for n in ns:
        ms = [2 ** k for k in range(min_log2, n + beyond_log2 + 1) if 2 ** k <= max_samples]
        for m in ms:
            for r in range(repeats):
                rng = _seed(seed, 50, n, m, r)
                y = random_parity_vector(n, rng)
                truth = noisy_parity_logprobs(y, p)
                Z = noisy_parity_isan(y, p).sample(m, rng)
                t0 = time.perf_counter()
                emp = empirical_logprobs(Z, 2)
                t_emp = time.perf_counter() - t0
                t0 = time.perf_counter()
                y_hat, p_hat, cand = parity_mle(Z)
                t_mle = time.perf_counter() - t0
                rows.append(dict(n=n, m=m, repeat=r, p=p, empirical_tv=tv_distance(emp, truth),
                                 mle_tv=tv_distance(noisy_parity_logprobs(y_hat, p_hat), truth),
                                 mle_exact=bool(np.array_equal(y_hat, y)), mle_candidates=cand,
                                 empirical_seconds=t_emp, mle_seconds=t_mle))
    return rows


def samples_needed(rows: list[dict], key: str, tau: float) -> dict:
    """Per n: the sample count m at which the mean over repeats of ``key`` first falls to tau,
    interpolated linearly in (log m, mean TV) between the bracketing grid points (None if never)."""
    out = {}
    for n in sorted({r["n"] for r in rows}):
        ms = sorted({r["m"] for r in rows if r["n"] == n})
        tv = [float(np.mean([r[key] for r in rows if r["n"] == n and r["m"] == m])) for m in ms]
        out[n] = None
        for i, (m, v) in enumerate(zip(ms, tv)):
            if v <= tau:
                if i == 0:
                    out[n] = float(m)
                else:
                    lo, hi, vlo = np.log(ms[i - 1]), np.log(m), tv[i - 1]
                    out[n] = float(np.exp(lo + (vlo - tau) / (vlo - v) * (hi - lo)))
                break
    return out


def parity_query_learner(ns, eps: float, p: float, seed: int, repeats: int = 1) -> list[dict]:
    """The logit-query learner (Theorem 4.4, d = 2 by Fact C.11) on random noisy parities."""
    rows = []
    for n in ns:
        for r in range(repeats):
            rng = _seed(seed, 51, n, r)
            model = noisy_parity_isan(random_parity_vector(n, rng), p)
            row = learn_once(model, eps, _seed(seed, 52, n, r), d=2, exact_limit=MAX_STRINGS)
            row.pop("model")
            rows.append(dict(row, n=n, repeat=r))
    return rows


def parity_budget_comparison(n: int, eps: float, p: float, seed: int) -> dict:
    """Theorem C.13 at one n: the logit-query learner (d = 2) on a random noisy parity, then the counting
    estimator given as many samples m as the learner made queries. The empirical distribution puts
    mass only on the <= m strings it saw, each of probability <= (1−p)/2^n, so its TV is at least
    support_bound = 1 − m(1−p)/2^n (a theorem, recorded beside the measured TV)."""
    n = check_positive_int("n", n)
    rng = _seed(seed, 59, n)
    y = random_parity_vector(n, rng)
    model = noisy_parity_isan(y, p)
    row = learn_once(model, eps, _seed(seed, 60, n), d=2, exact_limit=MAX_STRINGS)
    row.pop("model")
    m = int(row["queries"])
    emp = empirical_logprobs(model.sample(m, _seed(seed, 61, n)), 2)
    return dict(row, n=n, p=p, budget_samples=m, empirical_tv=tv_distance(emp, noisy_parity_logprobs(y, p)),
                support_bound=max(0.0, 1.0 - m * (1 - p) / 2 ** n),
                query_fraction=row["queries"] / exhaustive_queries(2, n + 1))


# ---------------------------------------------------------------------------
# beyond the paper: approximately low-rank models
# ---------------------------------------------------------------------------

@dataclass
class ParityHardness:
    """:func:`parity_hardness`: the learners from samples (``samples``, rows of
    :func:`parity_sample_learners`), the logit-query learner (``queries``, rows of
    :func:`parity_query_learner`) and the comparison at one longer n (``budget``, of
    :func:`parity_budget_comparison`); per n the samples each learner from samples needs for a mean
    TV of ``tau`` (``need_counting``, ``need_mle``; None where never reached), and the fitted slope
    of log2(samples needed by counting) against n over the n that reach it (``counting_slope``)."""

    samples: list
    queries: list
    budget: dict
    tau: float
    need_counting: dict
    need_mle: dict
    counting_slope: float

    @property
    def fitted_ns(self) -> list[int]:
        return [n for n, m in self.need_counting.items() if m is not None]

    def counting_log2_at(self, n: int) -> float:
        """log2 of the samples counting would need at ``n``, extrapolated along the fitted slope from
        the longest fitted n."""
        last = max(self.fitted_ns)
        return float(np.log2(self.need_counting[last]) + self.counting_slope * (n - last))

    def rows(self) -> list[dict]:
        """Per n, what each learner pays: samples for TV ≤ tau (counting, MLE), the MLE's candidates,
        and the logit-query learner's queries and TV (the last row: the comparison at ``budget['n']``)."""
        query = {r["n"]: r for r in self.queries}
        ns = sorted(set(self.need_counting) | set(query))
        rows = [{"n": n, "counting: samples": self.need_counting.get(n), "MLE: samples": self.need_mle.get(n),
                 "MLE: candidates": 2 ** n, "queries": query[n]["queries"] if n in query else None,
                 "TV of the query learner": query[n]["tv"] if n in query else None} for n in ns]
        b = self.budget
        return rows + [{"n": b["n"], "counting: samples": None, "MLE: samples": None, "MLE: candidates": 2 ** b["n"],
                        "queries": b["queries"], "TV of the query learner": b["tv"]}]


def parity_hardness(sample_ns, query_ns, repeats: int, p: float, seed: int, max_samples: int, compare_n: int,
                    compare_eps: float, tau: float = 0.1, eps: float = 0.1) -> ParityHardness:
    """Theorem C.13 illustrated at small n: the two learners from samples (counting and maximum
    likelihood over noisy parities) on ``sample_ns``, the logit-query learner at accuracy ``eps`` on
    ``query_ns``, and the query learner against counting at the same budget at ``compare_n``."""
    samples = parity_sample_learners(sample_ns, repeats, p, seed, max_samples)
    queries = parity_query_learner(query_ns, eps, p, seed)
    budget = parity_budget_comparison(compare_n, compare_eps, p, seed)
    need_counting = samples_needed(samples, "empirical_tv", tau)
    need_mle = samples_needed(samples, "mle_tv", tau)
    fitted = [n for n, m in need_counting.items() if m is not None]
    slope = float(np.polyfit(fitted, np.log2([need_counting[n] for n in fitted]), 1)[0])
    return ParityHardness(samples, queries, budget, tau, need_counting, need_mle, slope)


def perturbed_isan(base: TimeVaryingISAN, k: int, eta: float, rng: np.random.Generator) -> TimeVaryingISAN:
    """A rank-d ISAN plus a perturbation of size eta: hidden dim d + k, block lower-triangular
    A = [[A_base, 0], [G, H]] (the first d coordinates evolve exactly as in ``base``; the k extra
    ones are driven by them), B = [B_base, eta·E] with E ~ N(0, 1). So every mean-centred logit
    is base's plus eta times a linear function of the extra state: L = L_base + eta·L_extra."""
    k = check_positive_int("k", k)
    T, S, d = base.T, base.alphabet_size, base.d
    D = d + k
    A = np.zeros((T, S, D, D))
    A[:, :, :d, :d] = base.A
    A[:, :, d:, :d] = rng.standard_normal((T, S, k, d)) / np.sqrt(D)
    A[:, :, d:, d:] = rng.standard_normal((T, S, k, k)) / np.sqrt(D)
    B = np.zeros((T, S, D))
    B[:, :, :d] = base.B
    B[:, :, d:] = eta * rng.standard_normal((T, S, k))
    x0 = np.concatenate([base.x0, rng.standard_normal(k) / np.sqrt(k)])
    return TimeVaryingISAN(x0, A, B)


def normalised_spectrum(oracle: Callable, alphabet_size: int, T: int, t: int) -> np.ndarray:
    """Singular values of L_M(Σ^t, Σ^{≤T−1−t}) divided by the largest."""
    s = np.linalg.svd(full_logit_matrix(oracle, alphabet_size, T, t), compute_uv=False)
    return s / s[0]


def gap_tolerance(spectrum, d: int) -> float:
    """Geometric mean of the d-th and (d+1)-th normalised singular values: a rank tolerance in
    the spectral gap that keeps d directions."""
    s = np.asarray(spectrum, dtype=float)
    return float(np.sqrt(s[d - 1] * s[d]))


def approx_low_rank_sweep(d: int, alphabet_size: int, T: int, k: int, etas, tols, eps: float,
                          seed: int) -> dict:
    """The learner with rank tolerance ``tol`` on rank-d ISANs perturbed by eta (hidden dim d+k).

    Returns dict(rows=[...], spectra={eta: normalised spectrum at t = T//2}, base=...): one row per
    (eta, tol) and one per eta at the gap tolerance (tol_kind "gap"), with the learned hidden
    dim, TV and KL(perturbed ‖ learned), and the TV/KL of the unperturbed base to the perturbed
    model (what a perfect rank-d answer could achieve by dropping the perturbation)."""
    base = random_isan(d, alphabet_size, T, _seed(seed, 53, d, alphabet_size, T))
    rows, spectra = [], {}
    for e_i, eta in enumerate(etas):
        model = perturbed_isan(base, k, eta, _seed(seed, 54, e_i))
        lp = model.sequence_logprobs()
        spec = normalised_spectrum(model.next_logits, alphabet_size, T, T // 2)
        spectra[float(eta)] = spec
        base_tv, base_kl = tv_distance(lp, base), kl_divergence(lp, base)
        gap = gap_tolerance(spec, d)
        for kind, tol in [("grid", t) for t in tols] + [("gap", gap)]:
            learned, n_queries, info = learn_from_logit_queries(
                StateCachedOracle(model), alphabet_size, T, eps, _seed(seed, 55, e_i), d=d + k,
                rank_tol=tol, return_info=True)
            llp = learned.sequence_logprobs()
            rows.append(dict(eta=float(eta), tol=float(tol), tol_kind=kind, hidden_dim=info["hidden_dim"],
                             tv=tv_distance(lp, llp), kl=kl_divergence(lp, llp), queries=n_queries,
                             base_tv=base_tv, base_kl=base_kl))
    return dict(rows=rows, spectra=spectra, base=base)


# --------------------------------------------------------------------------- what the chapter costs

def enumeration_cost(alphabet_size: int, T: int, d: int) -> tuple[float, float]:
    """(peak bytes, FLOPs) of an exact TV between two ISANs on Σ^T (:func:`lib.isan.tv_distance`): both
    models' log-probabilities of the |Σ|^T strings and the exp/abs temporaries of the sum (four arrays
    of |Σ|^T float64), plus one expansion block of ``sequence_logprobs`` (at most 2^22 floats, or
    |Σ|^T·(d + 1) when smaller). Arithmetic: each string's state x_t = A[z_t] x_{t−1} and logits B x
    (2d² + 2d|Σ| FLOPs at the last position, which dominates the geometric sum), twice."""
    n = alphabet_size ** T
    block = min(2 ** 22, n * (d + 1))
    return 8.0 * (4 * n + block), 2.0 * n * (2 * d * d + 2 * d * alphabet_size)


def learner_cost(d: int, alphabet_size: int, T: int, eps: float) -> float:
    """FLOPs of one run of the logit-query learner, at most: :func:`query_count_bound` queries with
    N = :func:`theorem_n`, each a state update through a prefix of at most T tokens (2d² FLOPs a token)
    and the logits B x (2d|Σ|). A worst case (the cache and the early end of the while loop make far
    fewer), and only the arithmetic: each query is a Python call, which the wall time is mostly made of.
    Its memory, the cache of distinct queries, is left out of the plan (peak 0): that bound is too loose
    to refuse a run by."""
    queries = query_count_bound(d, alphabet_size, T, theorem_n(d, T, eps))
    return float(queries) * (2 * d * d * T + 2 * d * alphabet_size)


def heavy_steps(values: dict) -> list:
    """The chapter's heavy steps for its resolved parameters ``values``: the logit-query learner's runs
    (grid, query scaling, the performance point), the exact laws on Σ^T of its learning grid (every
    run's TV to the truth is exact) and of its Theorem 4.3 models, and the noisy parities of the sample
    learners (m samples of n + 1 bits) and of the budget comparison (2^(n+1) strings at
    ``parity_compare_n``)."""
    grid = [(d, S, T) for d in values["grid_d"] for S in values["grid_alphabet"] for T in values["grid_T"]]
    runs = len(values["grid_eps"]) * values["grid_repeats"]
    grid_peak = max(enumeration_cost(S, T, d)[0] for d, S, T in grid)
    grid_flops = runs * sum(enumeration_cost(S, T, d)[1] for d, S, T in grid)
    S_max, T_max = max(values["grid_alphabet"]), max(values["grid_T"])
    thm = [enumeration_cost(S, T, d) for d, S, T in values["thm43_configs"]]
    n_max = max(values["parity_n"])
    m = values["parity_max_samples"]
    sample_bytes = 8.0 * (m * (n_max + 1) + 4 * 2 ** (n_max + 1))    # the samples, the table and the two laws
    sample_flops = values["parity_repeats"] * sum(
        (n + 1) * 2 ** (n + 1) + 2 ** k * (n + 1) * 4 for n in values["parity_n"]
        for k in range(3, n + 8) if 2 ** k <= m)                     # the MLE's transform and the sampling
    c = values["parity_compare_n"]
    compare_bytes, compare_flops = enumeration_cost(2, c + 1, 2)
    base = dict(d=4, S=3, T=16, eps=0.2)    # the query-scaling experiment's base point (chapters/isan.md)
    scaling = ([dict(base, d=d) for d in values["scaling_d"]] + [dict(base, S=S) for S in values["scaling_alphabet"]]
               + [dict(base, eps=e) for e in values["scaling_eps"]] + [dict(base, T=T) for T in values["horizon_T"]])
    learner_runs = ([(d, S, T, e) for d, S, T in grid for e in values["grid_eps"]] * values["grid_repeats"]
                    + [(p["d"], p["S"], p["T"], p["eps"]) for p in scaling] * values["scaling_repeats"]
                    + [(8, 4, 10, 0.05)])
    return [
        HeavyStep("the logit-query learner's runs", f"{len(learner_runs)} runs up to T = "
                  f"{max(r[2] for r in learner_runs)} (query bound of Lemma C.17)", 0.0,
                  sum(learner_cost(*r) for r in learner_runs), "grid_*, scaling_*, horizon_T or the repeats", host=True),
        HeavyStep("exact TVs of the learning grid", f"{len(grid) * runs} runs up to |Σ|^T = {S_max}^{T_max}",
                  grid_peak, grid_flops, "grid_T or grid_alphabet", host=True),
        HeavyStep("Theorem 4.3 models", f"{len(thm)} configurations", max(b for b, _ in thm),
                  3.0 * sum(f for _, f in thm), "thm43_configs", host=True),
        HeavyStep("noisy-parity learners from samples", f"up to m = {m} samples at n = {n_max}", sample_bytes,
                  float(sample_flops), "parity_max_samples or parity_n", host=True),
        HeavyStep("the parity budget comparison", f"2^{c + 1} strings at n = {c}", compare_bytes, compare_flops,
                  "parity_compare_n", host=True),
    ]
