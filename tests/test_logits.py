"""lib.logits: extended logit matrices (history reuse against the plain computation, oracles, sharding),
the α fit in both readings, average KL and Fact A.2, spans, LinGen, Lemma C.18, and bad input."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lib import isan, logits as lg
from lib.models import prefix_reuse
from lib.models.causal_lm import CausalLM, ModelUnavailableError

torch.set_num_threads(1)


def tiny_lm(seed=0, vocab=40, ctx=48):
    from transformers import AutoModelForCausalLM

    from lib.models.mini_pythia import mini_pythia_config

    torch.manual_seed(seed)
    return CausalLM(AutoModelForCausalLM.from_config(mini_pythia_config("p-tiny", vocab, ctx)), "cpu")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm()


def seqs(rng, n, lo, hi, vocab=40):
    return [tuple(int(x) for x in rng.integers(0, vocab, rng.integers(lo, hi + 1))) for _ in range(n)]


# ---------------------------------------------------------------------------
# the matrix
# ---------------------------------------------------------------------------

def test_history_reuse_matches_one_pass_per_context(lm):
    rng = np.random.default_rng(0)
    H, F = seqs(rng, 11, 1, 9), seqs(rng, 9, 0, 7)
    F[3] = ()                                              # the empty future Null
    full = lg.extended_logit_matrix(lm, H, F, rows_per_block=3, batch_tokens=200)
    ref = lg.naive_extended_logit_matrix(lm, H, F)
    assert full.shape == (11, 9 * 40)
    assert np.abs(full - ref).max() < 1e-4
    # the comparison can fail: the same futures in another order give another matrix
    perm = [F[i] for i in np.roll(np.arange(9), 1)]
    assert np.abs(lg.naive_extended_logit_matrix(lm, H, perm) - full).max() > 1e-2
    # log-probabilities (centered=False): rows of each block are normalised
    lp = lg.extended_logit_matrix(lm, H, F, centered=False)
    assert np.abs(np.exp(lp.reshape(11, 9, 40)).sum(-1) - 1).max() < 1e-5
    assert np.abs(lp - lg.naive_extended_logit_matrix(lm, H, F, centered=False)).max() < 1e-4
    # centred rows sum to zero in every block (Def 2.1); log-probs do not
    assert np.abs(full.reshape(11, 9, 40).sum(-1)).max() < 1e-3
    assert np.abs(lp.reshape(11, 9, 40).sum(-1)).max() > 1.0


def test_top_k_and_random_columns(lm):
    rng = np.random.default_rng(1)
    H, F = seqs(rng, 7, 2, 6), seqs(rng, 6, 1, 5)
    cols = lg.select_columns(lm, F, 5)
    lp = lg.next_token_logprobs(lm, F)
    for j in range(6):                                    # the 5 most likely tokens after f alone, in order
        assert set(cols[j]) == set(np.argsort(-lp[j])[:5])
        assert np.all(np.diff(lp[j][cols[j]]) <= 0)
    Lk = lg.extended_logit_matrix(lm, H, F, k=5)
    full = lg.extended_logit_matrix(lm, H, F)
    picked = np.take_along_axis(full.reshape(7, 6, 40), cols[None], 2).reshape(7, -1)
    assert np.abs(Lk - picked).max() < 1e-4               # column f_index·k + j is (f, z_j)
    assert np.abs(Lk - lg.naive_extended_logit_matrix(lm, H, F, columns=cols)).max() < 1e-4
    rnd = lg.select_columns(lm, F, 5, how="random", seed=3)
    assert rnd.shape == (6, 5) and all(len(set(r)) == 5 for r in rnd)
    assert not np.array_equal(np.sort(rnd, 1), np.sort(cols, 1))
    Lr = lg.extended_logit_matrix(lm, H, F, k=5, column_selection="random", column_seed=3)
    assert np.abs(Lr - np.take_along_axis(full.reshape(7, 6, 40), rnd[None], 2).reshape(7, -1)).max() < 1e-4


def test_oracle_path_is_the_isan_logit_matrix():
    m = isan.random_isan(2, 3, 4, np.random.default_rng(4))
    H, F = isan.all_histories(3, 2), isan.all_futures(3, 1)
    L = lg.extended_logit_matrix(m.next_logits, H, F, centered=False)
    assert L.dtype == np.float64
    assert np.array_equal(L, isan.logit_matrix(m.next_logits, H, F, 3))
    # centring log-probabilities gives the logits (Def 2.1); without centring they differ
    lp = lg.extended_logit_matrix(m.next_logprobs, H, F, centered=True)
    assert np.abs(lp - L).max() < 1e-12
    assert np.abs(lg.extended_logit_matrix(m.next_logprobs, H, F, centered=False) - L).max() > 0.1


def test_resume_from_saved_blocks(lm, tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    H, F = seqs(rng, 8, 1, 5), seqs(rng, 4, 1, 4)
    first = lg.extended_logit_matrix(lm, H, F, k=3, workdir=tmp_path, rows_per_block=2)
    assert len(list(tmp_path.glob("block-*.npy"))) >= 4

    def boom(*a, **k):
        raise AssertionError("a finished block was recomputed")

    monkeypatch.setattr(prefix_reuse, "block_rows", boom)
    assert np.array_equal(lg.extended_logit_matrix(lm, H, F, k=3, workdir=tmp_path, rows_per_block=2), first)
    with pytest.raises(AssertionError, match="recomputed"):     # without the saved blocks it must compute
        lg.extended_logit_matrix(lm, H, F, k=3, workdir=tmp_path / "fresh", rows_per_block=2)


WORKER = r"""
import sys, numpy as np, torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[2])
from tests.test_logits import tiny_lm, seqs
from lib import logits as lg
lm = tiny_lm()
rng = np.random.default_rng(5)
H, F = seqs(rng, 13, 1, 8), seqs(rng, 6, 1, 6)
L = lg.extended_logit_matrix(lm, H, F, k=4, rows_per_block=2)
import torch.distributed as dist
rank = dist.get_rank() if dist.is_initialized() else 0
world = dist.get_world_size() if dist.is_initialized() else 1
if rank == 0:
    np.save(sys.argv[1], L)
    open(sys.argv[1] + ".world", "w").write(str(world))
"""


@pytest.mark.slow   # two torchrun processes start torch and transformers: over a minute on a shared 2-core machine
def test_torchrun_two_processes_match_one(tmp_path):
    from lib import REPO_ROOT

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, str(script), str(tmp_path / "one.npy"), str(REPO_ROOT)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29531",
                          str(script), str(tmp_path / "two.npy"), str(REPO_ROOT)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert (tmp_path / "two.npy.world").read_text() == "2" and (tmp_path / "one.npy.world").read_text() == "1"
    a, b = np.load(tmp_path / "one.npy"), np.load(tmp_path / "two.npy")
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5


# ---------------------------------------------------------------------------
# bad input, refused before work
# ---------------------------------------------------------------------------

def test_bad_input_is_refused(lm, monkeypatch):
    rng = np.random.default_rng(3)
    H, F = seqs(rng, 3, 1, 4), seqs(rng, 3, 1, 4)
    with pytest.raises(lg.LogitsError, match="'histories' is empty"):
        lg.extended_logit_matrix(lm, [], F)
    with pytest.raises(lg.LogitsError, match="'futures' is empty"):
        lg.extended_logit_matrix(lm, H, [])
    with pytest.raises(lg.LogitsError, match="history 1 is empty"):
        lg.extended_logit_matrix(lm, [H[0], ()], F)
    with pytest.raises(lg.LogitsError, match="future 0 is empty"):
        lg.extended_logit_matrix(lm, H, [(), F[1]], k=3)
    with pytest.raises(lg.LogitsError, match="reads at most 48"):
        lg.extended_logit_matrix(lm, [tuple(range(30))], [tuple(range(19))])
    lg.extended_logit_matrix(lm, [tuple(range(30))], [tuple(range(18))], k=2)      # 48 tokens: fits
    with pytest.raises(lg.LogitsError, match="exceeds the vocabulary size"):
        lg.extended_logit_matrix(lm, H, F, k=41)
    lg.extended_logit_matrix(lm, H, F, k=40)
    for bad_k in (0, -3, 2.5, True):
        with pytest.raises(lg.LogitsError, match="'k' must be a positive integer"):
            lg.extended_logit_matrix(lm, H, F, k=bad_k)
    with pytest.raises(lg.LogitsError, match="token ids"):
        lg.extended_logit_matrix(lm, [(0, 40)], F)
    import lib.models.causal_lm as clm

    need = 3 * 3 * 40 * 4                                    # |H|·|F|·|Σ| float32 entries
    monkeypatch.setattr(clm, "available_memory", lambda device: need)
    lg.extended_logit_matrix(lm, H, F)                        # exactly fits
    monkeypatch.setattr(clm, "available_memory", lambda device: need - 1)
    with pytest.raises(MemoryError, match="extended logit matrix"):
        lg.extended_logit_matrix(lm, H, F)
    calls = []
    monkeypatch.setattr(lg, "select_columns", lambda *a, **k: calls.append(1))
    with pytest.raises(MemoryError, match="extended logit matrix"):  # refused before the columns are chosen
        lg.extended_logit_matrix(lm, H, F, k=40)
    assert not calls


def test_model_name_unavailable_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailableError, match="cannot load"):
        lg.extended_logit_matrix("no-such-org/no-such-model-xyz", [(1, 2)], [(3,)])
    # a model saved to a folder loads offline by its path, and gives the model's own matrix
    model = tiny_lm(5)
    model.model.save_pretrained(tmp_path / "m")
    H, F = [(1, 2), (3, 4, 5)], [(6,), (7, 8)]
    assert np.abs(lg.extended_logit_matrix(str(tmp_path / "m"), H, F) - lg.extended_logit_matrix(model, H, F)).max() \
        <= 1e-6


# ---------------------------------------------------------------------------
# the α fit (App. A.1.1) and spectra
# ---------------------------------------------------------------------------

def test_power_law_fit_two_readings():
    s = np.arange(1, 401, dtype=float) ** -0.6
    lit, orig = lg.fit_power_law(s, "literal"), lg.fit_power_law(s, "original")
    assert abs(orig.alpha - 0.6) < 1e-9 and abs(orig.beta) < 1e-9
    assert 0.51 < lit.alpha < 0.53 and 0.08 < lit.beta < 0.10       # the numbers: ≈ 0.52 and ≈ 0.09
    s4 = np.arange(1, 401, dtype=float) ** -0.4
    assert abs(lg.fit_power_law(s4, "original").alpha - 0.4) < 1e-9   # not 0.6 on another exponent
    assert abs(lg.fit_power_law(s4, "original").alpha - 0.6) > 0.1
    # the log((n−i)/n) covariate absorbs an edge drop: a planted edge changes β, not α
    edge = s * ((400 - np.arange(1, 401) + 0.5) / 400) ** 0.3
    fe = lg.fit_power_law(edge, "original")
    assert abs(fe.alpha - 0.6) < 0.02 and fe.beta > 0.2
    assert lg.fit_power_law(s[::-1], "literal").alpha == lit.alpha        # order does not matter
    with pytest.raises(lg.LogitsError, match="reading"):
        lg.fit_power_law(s, "other")
    with pytest.raises(lg.LogitsError, match="at least 4"):
        lg.fit_power_law([1.0, 0.5])


def test_gaussian_matrix_is_flat_and_downsizing():
    G = np.random.default_rng(0).standard_normal((120, 6000))
    assert lg.fit_power_law(lg.normalised_singular_values(G), "literal").alpha < 0.1
    low = np.random.default_rng(0).standard_normal((120, 5)) @ np.random.default_rng(1).standard_normal((5, 6000))
    low += 0.01 * G                                                     # low rank: a steep spectrum
    assert lg.fit_power_law(lg.normalised_singular_values(low), "literal").alpha > 0.5
    D = lg.downsized(np.zeros((100, 60 * 7)), 60, 4)
    assert D.shape == (50, 30 * 7)


# ---------------------------------------------------------------------------
# average KL, Fact A.2, baselines
# ---------------------------------------------------------------------------

def test_average_kl_and_fact_a2():
    rng = np.random.default_rng(0)
    L = rng.standard_normal((20, 6 * 7)) * 2
    assert lg.average_kl(L, L, 7) == pytest.approx(0.0, abs=1e-12)
    assert lg.average_kl(L, L + 3.0, 7) == pytest.approx(0.0, abs=1e-12)   # a shift per block changes nothing
    A = L + rng.standard_normal(L.shape)
    kl = lg.average_kl(L, A, 7)
    assert kl > 0.01
    # direct KL of one block
    p, q = np.exp(L[3, 7:14]) / np.exp(L[3, 7:14]).sum(), np.exp(A[3, 7:14]) / np.exp(A[3, 7:14]).sum()
    assert lg._block_kl(L, A, 7)[3, 1] == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-10)
    # Fact A.2 holds for every rank; a bound ten times smaller does not
    usv = lg.svd(L)
    for r in range(1, 7):
        Ar = lg.rank_r_approximation(usv, r)
        assert lg.fact_a2_violation(L, Ar, 7) <= 1e-9
    total = lg._block_kl(L, A, 7).sum()
    assert total <= lg.fact_a2_bound(L, A)
    # near its worst case (two equally likely tokens, a small opposite shift) the sum is half the bound,
    # so a bound five times smaller is violated: the check can fail
    L2, A2 = np.zeros((1, 2)), np.array([[1e-3, -1e-3]])
    tight = lg._block_kl(L2, A2, 2).sum()
    assert tight == pytest.approx(0.5 * lg.fact_a2_bound(L2, A2), rel=1e-3)
    assert tight > 0.2 * lg.fact_a2_bound(L2, A2)
    assert lg.fact_a2_violation(L2, A2, 2) < 0 and lg.fact_a2_violation(L2, 10 * A2, 2) < 0
    cur = lg.avg_kl_curve(L, 7, [1, 2, 4, 8, 20])
    assert np.array_equal(lg.avg_kl_curve(L, 7, [1, 2, 4, 8, 20], usv=usv)["kl"], cur["kl"])
    assert np.all(np.diff(cur["kl"]) <= 1e-12) and cur["kl"][-1] < 1e-10 and np.all(cur["kl"] <= cur["bound"] + 1e-12)
    # torch.svd_lowrank agrees with the exact truncation on an exactly low-rank matrix
    M = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 50))
    assert np.abs(lg.rank_r_approximation(lg.svd(M, "lowrank", q=6), 3) - M).max() < 1e-8
    B = lg.rank1_baseline(np.arange(6.0), 4)
    assert B.shape == (4, 6) and np.linalg.matrix_rank(B) == 1


# ---------------------------------------------------------------------------
# spans, nonsense sets, angles, neighbours
# ---------------------------------------------------------------------------

def test_spans_as_appendix_a11():
    words = [" ".join(f"w{d}x{i}" for i in range(60)) for d in range(30)]
    sp = lg.sample_spans(words, 10, 20, 60, seed=1)
    assert len(sp.histories) == len(sp.futures) == 10
    assert len(set(sp.history_docs + sp.future_docs)) == 20                  # 2n distinct documents
    for h, d in zip(sp.histories, sp.history_docs):
        assert h in words[d] and len(h) <= 60
        end = words[d].index(h) + len(h)
        assert end == len(words[d]) or words[d][end] == " "                  # cut at a word boundary
    for f, d in zip(sp.futures, sp.future_docs):
        assert f in words[d] and (f == "" or f[0] == " ")
    with pytest.raises(lg.LogitsError, match="need 2n"):
        lg.sample_spans(words, 20, 20, 60)
    many = lg.sample_spans(words, 20, 20, 60, one_per_document=False)
    assert len(many.histories) == 20
    toks = [np.arange(100) + 1000 * d for d in range(12)]
    hs = lg.sample_token_spans(toks, 8, 8, 30, seed=0)
    assert all(8 <= len(h) <= 30 for h in hs)
    fs = lg.sample_token_spans(toks, 8, 8, 30, seed=0, part="future")
    assert all(len(f) <= 22 for f in fs)


def test_permute_tokens_and_angles():
    rng = np.random.default_rng(0)
    S = seqs(rng, 10, 1, 6)
    P = lg.permute_tokens(S, seed=1)
    assert [len(s) for s in P] == [len(s) for s in S]
    assert sorted(t for s in P for t in s) == sorted(t for s in S for t in s) and P != S
    L1 = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 300))
    L2 = L1 @ rng.standard_normal((300, 200))                                # same column space
    assert np.allclose(lg.column_space_angles(L1, L2, 8), 1.0, atol=1e-8)
    assert np.allclose(lg.column_space_angles(None, None, 8, lg.svd(L1), lg.svd(L2)), 1.0, atol=1e-8)
    L3 = rng.standard_normal((40, 300))
    assert lg.column_space_angles(L1, L3, 8).mean() < 0.9
    base = lg.random_subspace_cosines(40, 8, trials=10)
    assert base.shape == (8,) and base.mean() < 0.9
    X = np.array([[0.0, 0], [0.1, 0], [5, 5], [5.2, 5]])
    assert list(lg.nearest_neighbours(X)) == [1, 0, 3, 2]


# ---------------------------------------------------------------------------
# LinGen and Lemma C.18
# ---------------------------------------------------------------------------

def test_lingen_exact_when_target_is_a_history(lm):
    rng = np.random.default_rng(4)
    H = seqs(rng, 5, 2, 6)
    targets = [H[2], H[4]]
    v = np.zeros((2, 5))
    v[0, 2] = v[1, 4] = 1.0                                                # h_targ's own row
    g = lg.lingen(lm, H, v, targets, 4, seed=0)
    assert g.tokens.shape == (2, 4) and g.kl.max() < 1e-6
    g0 = lg.lingen(lm, H, np.zeros((2, 5)), targets, 4, seed=0)           # uniform: far from the model
    assert g0.kl.min() > 1e-3
    # regression recovers exact coefficients
    LH = rng.standard_normal((5, 30))
    assert np.allclose(lg.lingen_coefficients(LH, np.array([1.0, -2, 0, 0, 0.5]) @ LH), [1, -2, 0, 0, 0.5])
    # the baselines: the model itself has KL 0, a short window does not
    ctx = [tuple(rng.integers(0, 40, 12)) for _ in range(3)]
    same = lg.generate_baseline(lambda c: lg.next_token_logprobs(lm, c), lm, ctx, 3)
    assert same.kl.max() < 1e-6
    assert lg.generate_baseline(lg.short_context(lm, 1), lm, ctx, 3).kl.mean() > 1e-4


def test_lemma_c18(lm):
    rng = np.random.default_rng(6)
    S1 = np.cov(rng.standard_normal((4, 50)))
    b = lg.lemma_c18_bound(S1, S1, delta=0.0, v_norm_sq=1.0, k=3)          # S2 = S1: α = 1, γ = 0 works
    assert b["bound"] == pytest.approx(0.0, abs=1e-6)
    b1 = lg.lemma_c18_bound(S1, S1, delta=1.0, v_norm_sq=1.0, k=3)
    b2 = lg.lemma_c18_bound(S1, S1 + 10 * np.eye(4), delta=1.0, v_norm_sq=1.0, k=3)
    assert b2["bound"] > b1["bound"] > 0                                   # a larger S2 needs a larger α or γ
    H = seqs(rng, 4, 2, 5)
    v = np.zeros(4)
    v[1] = 1.0
    est = lg.lemma_c18_estimates(lm, H, v, H[1], 3, 2, seed=0)
    assert est["measured_kl"] < 1e-6 and est["delta"] < 1e-6                 # target = a history: exact
    est2 = lg.lemma_c18_estimates(lm, H, 0.5 * v, H[1], 3, 2, seed=0)
    bound = lg.lemma_c18_bound(est2["S1"], est2["S2"], est2["delta"], est2["v_norm_sq"], 3)
    assert est2["measured_kl"] > 1e-4 and bound["bound"] >= est2["measured_kl"]


# ---------------------------------------------------------------------------
# the direction of every divergence, against a hand computation
# ---------------------------------------------------------------------------

V3 = 4


def hand_oracle(ctx):
    """A hand-made model on 4 tokens: log-probabilities that depend on the last token and the length."""
    z = np.arange(V3)
    last = ctx[-1] if ctx else 0
    logits = np.cos(1.3 * z * (1 + last) + 0.7 * len(ctx)) * 2.0
    return logits - np.log(np.exp(logits).sum())


def other_oracle(ctx):
    """A second hand-made model (a baseline sampler): another dependence on the context."""
    z = np.arange(V3)
    logits = np.sin(0.9 * z + 0.4 * sum(ctx)) * 3.0
    return logits - np.log(np.exp(logits).sum())


def kl(p_log, q_log):
    """KL(p ‖ q) written out."""
    p = np.exp(p_log)
    return float(sum(p[i] * (p_log[i] - q_log[i]) for i in range(len(p))))


def centred(x):
    return x - x.mean()


def test_average_kl_is_kl_of_l_from_a():
    """D_KL^avg(L, A) averages KL(softmax L_{h,f} ‖ softmax A_{h,f}), not the reverse."""
    L = np.array([[3.0, 0.0, -1.0, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 2.0, -2.0, 1.0]])
    A = np.array([[0.0, 1.0, 0.0, 0.0, 0.0, 3.0], [1.0, -1.0, 0.5, 0.0, 0.0, 0.0]])
    ls = lambda x: x - np.log(np.exp(x).sum())                                       # noqa: E731
    blocks = [(L[h, 3 * f:3 * f + 3], A[h, 3 * f:3 * f + 3]) for h in range(2) for f in range(2)]
    forward = np.mean([kl(ls(a), ls(b)) for a, b in blocks])
    backward = np.mean([kl(ls(b), ls(a)) for a, b in blocks])
    assert abs(forward - backward) > 0.05
    assert lg.average_kl(L, A, 3) == pytest.approx(forward, rel=1e-12)
    total = sum(kl(ls(a), ls(b)) for a, b in blocks)
    assert lg.fact_a2_violation(L, A, 3) == pytest.approx(total - 0.5 * ((L - A) ** 2).sum(), rel=1e-12)


def test_lingen_records_kl_of_lingen_from_the_model():
    """Algorithm 1 samples from q = softmax(Σ_h v_h L_M[· | h∘z_{<t}]) and records KL(q ‖ M(· | h_targ∘z_{<t}))."""
    H, target, v = [(0,), (1, 2), (3,)], (2, 1), np.array([[1.5, -1.0, 0.8]])
    g = lg.lingen(hand_oracle, H, v, [target], 2, seed=3)
    for t in range(2):
        z = tuple(int(x) for x in g.tokens[0, :t])
        q = sum(v[0, i] * centred(hand_oracle(h + z)) for i, h in enumerate(H))
        q = q - np.log(np.exp(q).sum())
        p = hand_oracle(target + z)
        assert abs(kl(q, p) - kl(p, q)) > 0.05 * kl(q, p)             # the example tells the directions apart
        assert g.kl[0, t] == pytest.approx(kl(q, p), rel=1e-9)
    # the tokens are LinGen's samples: with v putting all weight on a sharp row, the sample is its argmax
    sharp = lambda ctx: np.log(np.array([1e-12, 1 - 3e-12, 1e-12, 1e-12]))             # noqa: E731
    assert lg.lingen(sharp, [(0,)], np.array([[5.0]]), [(1,)], 3).tokens.tolist() == [[1, 1, 1]]


def test_baseline_generation_records_kl_of_the_baseline_from_the_model():
    targets = [(1, 3), (0,)]
    g = lg.generate_baseline(lambda ctx: np.stack([other_oracle(c) for c in ctx]), hand_oracle, targets, 2, seed=1)
    for i, target in enumerate(targets):
        for t in range(2):
            ctx = target + tuple(int(x) for x in g.tokens[i, :t])
            q, p = other_oracle(ctx), hand_oracle(ctx)
            assert abs(kl(q, p) - kl(p, q)) > 0.05 * kl(q, p)
            assert g.kl[i, t] == pytest.approx(kl(q, p), rel=1e-9)
    # the short-context baseline reads only the last `window` tokens
    seen = []
    lg.short_context(lambda c: seen.append(c) or np.zeros(2), 2)([(1, 2, 3), (4,)])
    assert set(seen) == {(2, 3), (4,)} and seen[-2:] == [(2, 3), (4,)]


def test_lemma_c18_measures_kl_of_the_truth_from_lingen():
    """The measured D_KL(P_truth ‖ P_LinGen) of Lemma C.18 (KL(M ‖ LinGen) along M's samples), by hand at m = 1,
    with S1, S2 and Δ written out."""
    H, target, v = [(0,), (1, 2)], (3,), np.array([0.8, 0.4])
    est = lg.lemma_c18_estimates(hand_oracle, H, v, target, 1, 3, seed=0)
    p = hand_oracle(target)
    LH = np.stack([centred(hand_oracle(h)) for h in H])
    lin = v @ LH
    q = lin - np.log(np.exp(lin).sum())
    assert abs(kl(p, q) - kl(q, p)) > 0.05 * kl(p, q)
    assert est["measured_kl"] == pytest.approx(kl(p, q), rel=1e-9)
    X = np.vstack([centred(p), LH])
    assert np.allclose(est["S1"], X @ X.T) and np.allclose(est["S2"], X @ X.T)   # m = 1: only the empty future
    assert est["delta"] == pytest.approx(float(((centred(p) - lin) ** 2).sum()), rel=1e-9)
    assert est["v_norm_sq"] == pytest.approx(0.8, rel=1e-12)


def test_next_token_logprobs_and_vocab_of_an_oracle():
    ctx = [(1,), (2, 3)]
    assert np.allclose(lg.next_token_logprobs(hand_oracle, ctx), np.stack([hand_oracle(c) for c in ctx]))
    assert lg.vocab_size(hand_oracle, (1,)) == V3 and lg.context_limit(hand_oracle) is None
    with pytest.raises(lg.LogitsError, match="alphabet_size"):
        lg.vocab_size(hand_oracle)
    with pytest.raises(lg.LogitsError, match="shape"):
        lg.next_token_logprobs(hand_oracle, ctx, alphabet_size=5)


# ---------------------------------------------------------------------------
# what must hold for every input (hypothesis)
# ---------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

finite = st.floats(-12, 12, allow_nan=False, allow_infinity=False)


@st.composite
def logit_pairs(draw):
    n, blocks, width = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(2, 5))
    shape = (n, blocks * width)
    return draw(hnp.arrays(np.float64, shape, elements=finite)), draw(hnp.arrays(np.float64, shape, elements=finite)), \
        width


@settings(max_examples=200, deadline=None)
@given(logit_pairs())
def test_fact_a2_holds_for_every_pair(pair):
    L, A, width = pair
    total = lg._block_kl(L, A, width).sum()
    assert total >= -1e-9                                              # a KL is never negative
    assert lg.fact_a2_violation(L, A, width) <= 1e-9 * (1 + total)
    assert lg.average_kl(L, A, width) == pytest.approx(total / (L.shape[0] * (L.shape[1] // width)), abs=1e-9)
    shift = np.repeat(np.arange(L.shape[1] // width, dtype=float), width)[None]   # a constant per block
    assert lg.average_kl(L + 2 * shift, A - shift, width) == pytest.approx(lg.average_kl(L, A, width), abs=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.integers(0, 10 ** 6), finite, st.floats(0, 5))
def test_lemma_c18_bound_takes_the_smallest_gamma(d, seed, delta_log, v_norm_sq):
    rng = np.random.default_rng(seed)
    X1, X2 = rng.standard_normal((d, 3 * d)), rng.standard_normal((d, 2 * d)) * rng.uniform(0.1, 3)
    S1, S2 = X1 @ X1.T / (3 * d), X2 @ X2.T / (2 * d)
    delta = float(np.exp(delta_log / 4))
    b = lg.lemma_c18_bound(S1, S2, delta, v_norm_sq, 3)
    gap = np.linalg.eigvalsh(b["alpha"] * S1 + b["gamma"] * np.eye(d) - S2)
    assert gap.min() >= -1e-9 * (1 + b["gamma"])                      # S2 ⪯ α S1 + γ I
    if b["gamma"] > 1e-6:                                              # and no smaller γ would do
        assert np.linalg.eigvalsh(b["alpha"] * S1 + 0.999 * b["gamma"] * np.eye(d) - S2).min() < 0
    assert b["bound"] == pytest.approx(2 * 3 * np.sqrt(b["alpha"] * delta + b["gamma"] * (1 + v_norm_sq)), rel=1e-12)
    grid = np.geomspace(1e-3, 1e3, 121)
    for a in grid[::20]:                                                # the minimum over the grid
        g = max(float(np.linalg.eigvalsh(S2 - a * S1)[-1]), 0.0)
        assert b["bound"] <= 2 * 3 * np.sqrt(a * delta + g * (1 + v_norm_sq)) + 1e-12


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10 ** 6), st.integers(1, 3))
def test_lemma_c18_bounds_the_measured_divergence_on_random_models(seed, m):
    """The lemma holds for the empirical distributions, whatever the model and v (an ISAN here)."""
    rng = np.random.default_rng(seed)
    model = isan.random_isan(2, 3, 6, rng)
    H = [tuple(int(x) for x in rng.integers(0, 3, rng.integers(1, 3))) for _ in range(3)]
    v = rng.standard_normal(3)
    target = tuple(int(x) for x in rng.integers(0, 3, 2))
    est = lg.lemma_c18_estimates(model.next_logprobs, H, v, target, m, 2, seed=seed)
    b = lg.lemma_c18_bound(est["S1"], est["S2"], est["delta"], est["v_norm_sq"], m)
    assert b["bound"] >= est["measured_kl"] - 1e-9


@settings(max_examples=100, deadline=None)
@given(st.floats(0.1, 2.0), st.integers(8, 600))
def test_original_reading_is_exact_on_every_power_law(alpha, n):
    s = np.arange(1, n + 1, dtype=float) ** -alpha
    assert lg.fit_power_law(s, "original").alpha == pytest.approx(alpha, abs=1e-8)
    assert lg.fit_power_law(s, "literal").alpha < alpha                # the literal reading is biased low


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float64, (5, 12), elements=finite))
def test_history_independent_fraction_is_a_share(L):
    f = lg.history_independent_fraction(L, 3)
    assert -1e-12 <= f <= 1 + 1e-12
    same = np.repeat(L[:1], 5, axis=0)
    assert lg.history_independent_fraction(same, 3) == pytest.approx(1.0)


def test_history_independent_fraction_by_hand():
    # two histories, one future of width 2: block-centred rows (1, −1) and (3, −3); mean (2, −2)
    L = np.array([[5.0, 3.0], [3.0, -3.0]])
    assert lg.history_independent_fraction(L, 2) == pytest.approx(2 * 8 / (2 + 18))
    assert lg.history_independent_fraction(L + np.array([[7.0, 7.0], [-1.0, -1.0]]), 2) == pytest.approx(0.8)
    assert lg.history_independent_fraction(np.array([[1.0, -1.0], [-1.0, 1.0]]), 2) == pytest.approx(0.0)
    assert lg.history_independent_fraction(1e-3 * L, 2) == pytest.approx(2 * 8 / (2 + 18))   # a share: scale-free
    assert lg.history_independent_fraction(np.ones((3, 4)), 2) == 1.0                        # nothing varies at all
    with pytest.raises(lg.LogitsError, match="multiple"):
        lg.history_independent_fraction(L, 3)


# ---------------------------------------------------------------------------
# spectra, truncations and subspaces against closed forms
# ---------------------------------------------------------------------------

def test_spectra_and_truncation_closed_forms():
    rng = np.random.default_rng(3)
    L = rng.standard_normal((6, 20))
    s = np.linalg.svd(L, compute_uv=False)
    assert np.allclose(lg.normalised_singular_values(L), s / np.sqrt(120))
    usv = lg.svd(L)
    for r in (1, 3, 6):                                                # Eckart–Young
        err = np.linalg.norm(L - lg.rank_r_approximation(usv, r))
        assert err == pytest.approx(np.sqrt((s[r:] ** 2).sum()), abs=1e-10)
        assert np.linalg.matrix_rank(lg.rank_r_approximation(usv, r)) == r
    cur = lg.avg_kl_curve(L, 4, [0, 1, 2, 6, 9], usv=usv)
    assert list(cur["ranks"]) == [1, 2, 6]                              # ranks outside 1..min(shape) dropped
    assert cur["bound"][0] == pytest.approx(lg.fact_a2_bound(L, lg.rank_r_approximation(usv, 1)) / 30)
    assert cur["kl"][1] == pytest.approx(lg.average_kl(L, lg.rank_r_approximation(usv, 2), 4))
    assert cur["kl"][2] == pytest.approx(0.0, abs=1e-12)
    D = lg.downsized(np.arange(12 * 8 * 3.0).reshape(12, 24), 8, 4)    # first |H|/2 rows, first |F|/2 blocks
    assert np.array_equal(D, np.arange(12 * 8 * 3.0).reshape(12, 24)[:6, :12])
    assert lg.downsized(np.ones((3, 8)), 4, 1e6).shape == (1, 2)          # at least one history and one future
    B = lg.rank1_baseline(np.array([1.0, 2.0, 3.0]), 2)
    assert np.array_equal(B, [[1, 2, 3], [1, 2, 3]])
    with pytest.raises(lg.LogitsError, match="method"):
        lg.svd(L, "other")
    with pytest.raises(lg.LogitsError, match="same shape"):
        lg.average_kl(L, L[:, :8], 4)


def test_principal_angles_by_hand():
    # two planes in R^3 sharing the x axis, the second tilted by 60° about it: cosines 1 and 1/2
    P1 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    P2 = np.array([[1.0, 0.0], [0.0, 0.5], [0.0, np.sqrt(3) / 2]])
    cos = lg.column_space_angles(P1 @ np.diag([5.0, 1.0]), P2 @ np.diag([4.0, 2.0]), 2)
    assert np.allclose(cos, [1.0, 0.5])
    # one random direction in R^n: E|cos| = Γ(n/2) / (√π Γ((n+1)/2)) ≈ √(2/(πn))
    from scipy.special import gammaln
    n = 50
    want = np.exp(gammaln(n / 2) - gammaln((n + 1) / 2)) / np.sqrt(np.pi)
    assert lg.random_subspace_cosines(n, 1, trials=4000)[0] == pytest.approx(want, rel=0.05)


def test_lingen_coefficients_with_ridge():
    rng = np.random.default_rng(2)
    A, b = rng.standard_normal((4, 9)), rng.standard_normal(9)
    v = lg.lingen_coefficients(A, b, ridge=0.7)
    assert np.allclose(v, np.linalg.solve(A @ A.T + 0.7 * np.eye(4), A @ b))
    assert np.allclose(lg.lingen_coefficients(A, b), np.linalg.lstsq(A.T, b, rcond=None)[0])
    with pytest.raises(lg.LogitsError, match="columns"):
        lg.lingen_coefficients(A, b[:5])


def test_token_spans_lengths():
    toks = [np.arange(100) + 1000 * d for d in range(12)]
    for part in ("history", "future"):
        spans = lg.sample_token_spans(toks, 10, 8, 30, seed=4, part=part)
        for s in spans:                                                   # consecutive tokens of one document
            assert np.all(np.diff(s) == 1) and len({t // 1000 for t in s}) <= 1
        lengths = [len(s) for s in spans]
        assert all(8 <= x <= 30 for x in lengths) if part == "history" else all(0 <= x <= 22 for x in lengths)
    h = lg.sample_token_spans(toks, 10, 8, 30, seed=4)
    f = lg.sample_token_spans(toks, 10, 8, 30, seed=4, part="future")
    assert all(len(a) + len(b) == 30 for a, b in zip(h, f))                # the same windows, cut at ℓ
    with pytest.raises(lg.LogitsError, match="need 50"):
        lg.sample_token_spans(toks, 50, 8, 30)
    # a document of exactly ℓ_max tokens holds one window, at its start
    for per_doc in (True, False):
        (one,) = lg.sample_token_spans([np.arange(30)], 1, 8, 30, seed=1, part="history", one_per_document=per_doc)
        assert one[0] == 0


def test_columns_and_oracle_input_refused():
    H, F = [(1,), (2,)], [(0,), (3,)]
    ok = lg.extended_logit_matrix(hand_oracle, H, F, columns=np.array([[0, 3], [1, 2]]))
    assert ok.shape == (2, 4) and ok[1, 2] == pytest.approx(centred(hand_oracle((2, 3)))[1])
    for bad in ([[0, 4], [1, 2]], [[0, 1], [-1, 2]]):                  # one id above, one below the vocabulary
        with pytest.raises(lg.LogitsError, match="outside the vocabulary"):
            lg.extended_logit_matrix(hand_oracle, H, F, columns=np.array(bad))
    with pytest.raises(lg.LogitsError, match=r"\(\|F\|, k\)"):
        lg.extended_logit_matrix(hand_oracle, H, F, columns=np.array([[0, 1]]))
    with pytest.raises(lg.LogitsError, match="alphabet_size"):
        lg.extended_logit_matrix(hand_oracle, [], F)
    for bad in (0, -2, 2.5):
        with pytest.raises(lg.LogitsError, match="'alphabet_size' must be a positive integer"):
            lg.extended_logit_matrix(hand_oracle, H, F, alphabet_size=bad)
    with pytest.raises(lg.LogitsError, match="must be a CausalLM"):
        lg.extended_logit_matrix(42, H, F)
    with pytest.raises(lg.LogitsError, match="'how'"):
        lg.select_columns(hand_oracle, F, 2, how="best")


def test_spans_use_distinct_windows():
    """one_per_document=False draws 2n distinct disjoint windows: with exactly 2n windows available, every
    window is used once (each document gives its 4 windows of 50 characters, no more, no fewer)."""
    docs = [" ".join(f"d{d:02d}w{i:02d}" for i in range(40))[:200] for d in range(10)]
    assert all(len(d) == 200 for d in docs)
    sp = lg.sample_spans(docs, 20, 10, 50, seed=5, one_per_document=False)
    counts = np.bincount(sp.history_docs + sp.future_docs, minlength=10)
    assert counts.tolist() == [4] * 10
    with pytest.raises(lg.LogitsError, match="disjoint windows"):
        lg.sample_spans(docs, 21, 10, 50, one_per_document=False)


def test_history_dependent_rms_by_hand():
    # block-centred rows (1, −1) and (3, −3): their mean (2, −2); what depends on the history: (∓1, ±1)
    L = np.array([[5.0, 3.0], [3.0, -3.0]])
    assert lg.history_dependent_rms(L, 2) == pytest.approx(1.0)
    assert lg.history_dependent_rms(np.tile(L[:1], (3, 1)), 2) == pytest.approx(0.0)
    assert np.allclose(lg.block_centred(L, 2), [[1.0, -1.0], [3.0, -3.0]])
    with pytest.raises(lg.LogitsError, match="multiple"):
        lg.block_centred(L, 3)


def test_large_matrices_take_the_low_rank_svd(monkeypatch):
    """Above EXACT_SVD_MAX_ENTRIES the "auto" SVD is torch.svd_lowrank (as the paper): on an exactly low-rank
    matrix it gives the same truncations, column spaces and KL curve as the exact one."""
    rng = np.random.default_rng(7)
    L1 = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 40))
    L2 = L1 @ rng.standard_normal((40, 24))                                # the same column space
    exact = lg.avg_kl_curve(L1, 4, [1, 2, 3])
    calls = []
    lowrank = torch.svd_lowrank
    monkeypatch.setattr(torch, "svd_lowrank", lambda *a, **k: calls.append(k.get("q")) or lowrank(*a, **k))
    monkeypatch.setattr(lg, "EXACT_SVD_MAX_ENTRIES", L1.size)                # at the threshold: still exact
    lg.svd(L1, "auto", q=3)
    assert calls == []
    monkeypatch.setattr(lg, "EXACT_SVD_MAX_ENTRIES", 100)
    assert np.allclose(lg.column_space_angles(L1, L2, 3), 1.0, atol=1e-6)
    assert calls == [13, 13]                                                # r + 10 components, both matrices
    cur = lg.avg_kl_curve(L1, 4, [1, 2, 3])
    assert calls[-1] == 3 and np.allclose(cur["kl"], exact["kl"], atol=1e-8)
    U, S, Vh = lg.svd(L1, "auto", q=3)
    assert U.shape == (30, 3) and np.allclose((U * S) @ Vh, L1, atol=1e-8)


def test_random_subspace_trials():
    trials = lg.random_subspace_cosine_trials(30, 4, 6, seed=2)
    assert trials.shape == (6, 4) and np.all(np.diff(trials, axis=1) <= 1e-12) and np.all((trials >= 0) & (trials <= 1))
    assert np.allclose(lg.random_subspace_cosines(30, 4, seed=2, trials=6), trials.mean(0))
    assert np.allclose(lg.random_subspace_cosine_trials(5, 5, 3), 1.0)      # two r = n subspaces are all of R^n


def sharp_oracle(ctx):
    """Token 1 with probability 1 − O(1e-12) after every context; the other logits depend on the context."""
    z = np.arange(V3)
    logits = 0.5 * np.cos(0.8 * z * (1 + sum(ctx)) + len(ctx)) + 30.0 * (z == 1)
    return logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()


def test_lemma_c18_follows_the_models_own_continuations():
    """P2 is M's continuations of h₀: with a model that always continues with token 1, S2 and the measured
    divergence over m = 2 tokens are those along h₀, h₀∘1, written out by hand."""
    H, target, v = [(0,), (2, 3)], (3,), np.array([0.7, 0.5])
    est = lg.lemma_c18_estimates(sharp_oracle, H, v, target, 2, 3, seed=0)
    X, kls = [], []
    for f in ((), (1,)):
        p = sharp_oracle(target + f)
        LH = np.stack([centred(sharp_oracle(h + f)) for h in H])
        lin = v @ LH
        kls.append(kl(p, lin - np.log(np.exp(lin).sum())))
        X.append(np.vstack([centred(p), LH]))
    assert est["measured_kl"] == pytest.approx(sum(kls), rel=1e-6)
    assert np.allclose(est["S2"], (X[0] @ X[0].T + X[1] @ X[1].T) / 2, rtol=1e-8)
    assert not np.allclose(est["S1"], est["S2"], rtol=1e-3)                  # random strings: another second moment


def test_span_lengths_refused():
    docs = ["a b c d e f g h i j " * 5] * 4
    for bad in ((0, 10), (5, 4)):
        with pytest.raises(lg.LogitsError, match="l_min <= l_max"):
            lg.sample_spans(docs, 1, *bad)
        with pytest.raises(lg.LogitsError, match="l_min <= l_max"):
            lg.sample_token_spans([np.arange(40)] * 3, 1, *bad)
    lg.sample_spans(docs, 1, 1, 10)


# ---------------------------------------------------------------------------
# a transformers model as a researcher has it: wrapped, never called as an oracle
# ---------------------------------------------------------------------------

def researcher_model(arch: str, seed: int = 0):
    """A tiny randomly initialised transformers causal LM built offline from a config (2 layers, d = 16,
    vocabulary 50), as a researcher holds it: a bare ``PreTrainedModel``, in training mode."""
    from transformers import AutoModelForCausalLM, GPTNeoXConfig, LlamaConfig

    shape = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=64)
    config = GPTNeoXConfig(**shape) if arch == "gpt_neox" else LlamaConfig(num_key_value_heads=2, **shape)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def brute_force_logits(model, histories, futures) -> np.ndarray:
    """L_M(H, F) by Def 2.2 written out: the model run on each h∘f alone, the log-softmax of its logits at the last
    position (float64), centred over the vocabulary (Def 2.1); columns f-major."""
    rows = []
    with torch.no_grad():
        for h in histories:
            row = []
            for f in futures:
                logits = model(input_ids=torch.tensor([list(h) + list(f)])).logits[0, -1].double()
                logp = torch.log_softmax(logits, -1)
                row.append((logp - logp.mean()).numpy())
            rows.append(np.concatenate(row))
    return np.array(rows)


@pytest.mark.parametrize("arch", ["gpt_neox", "llama"])
def test_a_transformers_model_is_wrapped_and_gives_its_matrix(arch):
    model = researcher_model(arch)
    assert model.training                                  # as from_config leaves it
    H, F = [(1, 2), (3,), (4, 5, 6)], [(), (7,), (8, 9)]   # 3×3, the empty future included
    raw = lg.extended_logit_matrix(model, H, F)
    wrapped = lg.extended_logit_matrix(CausalLM(model, "cpu"), H, F)
    np.testing.assert_array_equal(raw, wrapped)
    assert raw.shape == (3, 3 * 50) and raw.dtype == np.float32
    assert np.abs(raw - brute_force_logits(model, H, F)).max() < 1e-5
    # the comparison can fail: another model's brute force is far from this matrix
    assert np.abs(raw - brute_force_logits(researcher_model(arch, seed=1), H, F)).max() > 1e-2
    assert not model.training and model.device.type == "cpu"   # wrapped in eval mode, where it was
    # top-k columns and the other entry points that take a model read it the same way
    np.testing.assert_array_equal(lg.extended_logit_matrix(model, H, F[1:], k=3),
                                  lg.extended_logit_matrix(CausalLM(model, "cpu"), H, F[1:], k=3))
    np.testing.assert_array_equal(lg.select_columns(model, F[1:], 4), lg.select_columns(CausalLM(model, "cpu"), F[1:], 4))
    lp = lg.next_token_logprobs(model, H)
    assert np.abs(lp - brute_force_logits(model, H, [()])).max() > 1.0     # log-probabilities, not centred
    assert np.abs(lp - lp.mean(1, keepdims=True) - brute_force_logits(model, H, [()])).max() < 1e-5
    assert np.abs(lg.naive_extended_logit_matrix(model, H, F) - raw).max() < 1e-5
    assert lg.vocab_size(model) == 50 and lg.context_limit(model) == 64
    short = lg.short_context(model, 1)([(1, 2), (5, 6)])
    assert np.abs(short - lg.next_token_logprobs(model, [(2,), (6,)])).max() < 1e-6


def test_lingen_and_baselines_take_a_transformers_model():
    model = researcher_model("gpt_neox")
    H, targets, v = [(1, 2), (3,)], [(4, 5)], np.array([[0.7, 0.3]])
    a = lg.lingen(model, H, v, targets, m=2, seed=3)
    b = lg.lingen(CausalLM(model, "cpu"), H, v, targets, m=2, seed=3)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.kl, b.kl, rtol=0, atol=1e-9)
    sampler = lg.short_context(model, 1)
    c = lg.generate_baseline(sampler, model, targets, m=2, seed=1)
    d = lg.generate_baseline(sampler, CausalLM(model, "cpu"), targets, m=2, seed=1)
    np.testing.assert_array_equal(c.tokens, d.tokens)


def test_a_model_that_is_not_a_causal_lm_is_refused_with_the_fix():
    from transformers import AutoModel, T5Config, T5ForConditionalGeneration

    H, F = [(1, 2)], [(3,)]
    backbone = AutoModel.from_config(researcher_model("gpt_neox").config)   # hidden states, no head
    with pytest.raises(lg.LogitsError, match="no language-model head.*AutoModelForCausalLM"):
        lg.extended_logit_matrix(backbone, H, F)
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2))
    with pytest.raises(lg.LogitsError, match="encoder-decoder"):
        lg.extended_logit_matrix(t5, H, F)

    class Wrapper(torch.nn.Module):                       # reads input_ids but is not a PreTrainedModel
        def __init__(self):
            super().__init__()
            self.inner = researcher_model("gpt_neox")

        def forward(self, input_ids, **kwargs):
            return self.inner(input_ids=input_ids, **kwargs)

    with pytest.raises(lg.LogitsError, match=r"wrap it: CausalLM\(model\)"):
        lg.extended_logit_matrix(Wrapper(), H, F)
    # an oracle, even a torch module called on a tuple, stays an oracle
    class TupleOracle(torch.nn.Module):
        def forward(self, context):
            return torch.log_softmax(torch.arange(4.0) * len(context), -1).numpy()

    L = lg.extended_logit_matrix(TupleOracle(), H, F, centered=False)
    assert np.allclose(L, TupleOracle()((1, 2, 3)))


def test_lingen_names_answer_from_lib_logits_too():
    from lib import lingen

    for name in ("lingen", "lingen_coefficients", "generate_baseline", "short_context", "lemma_c18_bound",
                 "lemma_c18_estimates", "Generation", "history_blocks_within", "LINGEN_BLOCK_BYTES"):
        assert getattr(lg, name) is getattr(lingen, name)
