"""The cost estimates of the chapters "Logit rank" and "Geometry of next-token prediction" against
counts and measurements: FLOPs against torch's own operation counter (FlopCounterMode, which counts
every matrix product of a forward pass), peak memory against the resident-set high-water mark of a
subprocess, and the plan's refusal at the paper sizes on a GPU too small for them.

Factors: a forward pass of a GPT-NeoX is counted to within 10% (the formula leaves out only norms and
embeddings); the extended logit matrix's passes are an upper bound within 3× (the last-position path
of lib.models.prefix_reuse skips the last layer's work at every position but the last, which the
formula counts); the regression's peak within [0.5, 1.5]× (the allocator may reuse freed pages)."""
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from lib import logit_rank_experiments as lx, logits as lg, ntp_experiments as nx
from lib.book.chapters import get_chapter
from lib.book.costs import DoesNotFit, check_fits, named_gpu
from lib.models.causal_lm import CausalLM, forward_flops


def small_neox(vocab=300, d=64, layers=2):
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=4 * d, max_position_embeddings=128)
    torch.manual_seed(0)
    return cfg, GPTNeoXForCausalLM(cfg).eval()


def counted(fn):
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        fn()
    return fc.get_total_flops()


@pytest.mark.parametrize("d,layers,batch,length", [(64, 2, 4, 20), (32, 3, 2, 40)])
def test_forward_flops_matches_torch_count(d, layers, batch, length):
    cfg, model = small_neox(d=d, layers=layers)
    ids = torch.randint(0, cfg.vocab_size, (batch, length))
    measured = counted(lambda: model(ids))
    estimate = forward_flops(cfg, batch * length, length / 2)
    assert 0.9 * measured <= estimate <= 1.1 * measured


def test_forward_flops_counts_the_unembedding_where_asked():
    cfg, _ = small_neox()
    full, none = forward_flops(cfg, 10, 5), forward_flops(cfg, 10, 5, logits_at=0)
    assert full - none == pytest.approx(10 * 2 * cfg.hidden_size * cfg.vocab_size)


def test_extended_matrix_flops_bound_the_counted_passes():
    cfg, model = small_neox()
    lm = CausalLM(model, device="cpu")
    rng = np.random.default_rng(0)
    H = [tuple(int(t) for t in rng.integers(0, 300, 12)) for _ in range(10)]
    F = [tuple(int(t) for t in rng.integers(0, 300, 6)) for _ in range(8)]
    estimate = lx.extended_matrix_flops(cfg, len(H), len(F), 12, 6)
    for k in (5, None):
        measured = counted(lambda: lg.extended_logit_matrix(lm, H, F, k))
        assert measured <= estimate <= 3 * measured


def test_svd_flops_switches_at_the_exact_limit():
    m = 100
    n = lg.EXACT_SVD_MAX_ENTRIES // m
    assert lx.svd_flops(m, n, 10) == 4.0 * m * n * m + 8.0 * m ** 3
    assert lx.svd_flops(m, n + 1, 10) == 2.0 * 10 * m * (n + 1) * 10


def test_transformer_training_flops_match_torch_count():
    from lib.conditional_models import TransformerModel

    V, m, T, d, layers = 20, 30, 4, 16, 2
    contexts = np.random.default_rng(0).integers(0, V, (m, T))
    model = TransformerModel(contexts, V, hidden=d, layers=layers, heads=4)
    with FlopCounterMode(display=False) as fc:
        out = model(torch.arange(m))
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    estimate = 3 * forward_flops(nx.transformer_config(V, d, layers, T), m * T, T / 2)
    assert 0.5 * fc.get_total_flops() <= estimate <= 2 * fc.get_total_flops()


def paper_values(chapter_id, **extra):
    chapter = get_chapter(chapter_id)
    return chapter.resolve({"profile": "paper", **extra})


def test_logit_rank_paper_preset_fits_80_gb_and_is_refused_on_24_gb_naming_what_to_lower(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hub-cache")   # the known Pythia-70m shape, not a stand-in
    steps = lx.heavy_steps(paper_values("logit_rank"))
    check_fits("logit_rank", steps, named_gpu(80, 300))
    with pytest.raises(DoesNotFit, match=r"logit_rank: .* needs .* GB; .* has 24 GB: lower .*n_spans"):
        check_fits("logit_rank", steps, named_gpu(24, 80))


def test_logit_rank_paper_sizes_of_the_paper_do_not_fit_80_gb(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hub-cache")
    values = paper_values("logit_rank") | {"n_spans": 10000, "lingen_histories": 40000, "lingen_futures": 10000}
    with pytest.raises(DoesNotFit, match="n_spans"):
        check_fits("logit_rank", lx.heavy_steps(values), named_gpu(80, 300))


def test_held_matrices_grow_with_the_square_of_n_spans(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", "/nonexistent-hub-cache")
    values = paper_values("logit_rank")
    a = {s.name: s for s in lx.heavy_steps(values)}
    b = {s.name: s for s in lx.heavy_steps(values | {"n_spans": 2 * values["n_spans"]})}
    held = "the extended logit matrices held at once and their SVDs"
    assert b[held].peak_bytes == pytest.approx(4 * a[held].peak_bytes)
    assert a[held].peak_bytes == pytest.approx(lx.matrix_bytes(4000, 4000, 50) * 7 + lx.matrix_bytes(4000, 4000, 50, 4))


def test_ntp_paper_preset_fits_24_gb():
    steps = nx.heavy_steps(paper_values("ntp"))
    check_fits("ntp", steps, named_gpu(24, 80))
    assert {s.name for s in steps} >= {"the NTP-SVM (semidefinite cone, SCS)", "the permutation tests"}


REGRESSION_PEAK = """
import resource, numpy as np
from lib import logits as lg
def status_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark (VmHWM) to the resident size now
base = status_kb("VmRSS")
A = np.random.default_rng(0).standard_normal(({n}, {cols}))
B = np.random.default_rng(1).standard_normal((3, {cols}))
lg.lingen_coefficients(A, B)
print((status_kb("VmHWM") - base) * 1024)
"""


@pytest.mark.slow
def test_regression_bytes_against_the_measured_peak():
    n, cols = 800, 40000
    out = subprocess.run([sys.executable, "-c", REGRESSION_PEAK.format(n=n, cols=cols)], capture_output=True,
                         text=True, check=True)
    measured = float(out.stdout.split()[-1])
    assert 0.5 * measured <= lx.regression_bytes(n, cols) <= 1.5 * measured


def test_lingen_coefficients_of_several_targets_are_the_rows_solved_one_at_a_time():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((6, 40)), rng.standard_normal((3, 40))
    v = lg.lingen_coefficients(A, B)
    for i in range(3):
        assert np.allclose(v[i], np.linalg.lstsq(A.T, B[i], rcond=None)[0], atol=1e-10)


def test_lingen_by_history_blocks_is_lingen_at_once(monkeypatch):
    cfg, model = small_neox(vocab=50, d=32)
    lm = CausalLM(model, device="cpu")
    rng = np.random.default_rng(1)
    H = [tuple(int(t) for t in rng.integers(0, 50, 5)) for _ in range(7)]
    targets = [tuple(int(t) for t in rng.integers(0, 50, 4)) for _ in range(2)]
    v = rng.standard_normal((2, 7)) / 7
    whole = lg.lingen(lm, H, v, targets, 3, seed=0)
    monkeypatch.setattr(lg, "LINGEN_BLOCK_BYTES", 8 * 2 * 50 * 2)   # two histories a block
    assert lg.history_blocks_within(7, 2 * 50, lg.LINGEN_BLOCK_BYTES) == [[0, 1], [2, 3], [4, 5], [6]]
    blocks = lg.lingen(lm, H, v, targets, 3, seed=0)
    assert np.array_equal(whole.tokens, blocks.tokens)
    assert np.allclose(whole.kl, blocks.kl, atol=1e-9)


def test_matrix_bytes_is_the_size_of_the_computed_matrix():
    cfg, model = small_neox()
    lm = CausalLM(model, device="cpu")
    rng = np.random.default_rng(2)
    H = [tuple(int(t) for t in rng.integers(0, 300, 4)) for _ in range(5)]
    F = [tuple(int(t) for t in rng.integers(0, 300, 3)) for _ in range(3)]
    L = lg.extended_logit_matrix(lm, H, F, 7)
    assert lx.matrix_bytes(5, 3, 7, L.itemsize) == L.nbytes
    assert lx.matrix_bytes(5, 3, 7) == L.astype(np.float64).nbytes
