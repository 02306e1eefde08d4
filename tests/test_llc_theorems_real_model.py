"""The released-model section of lib.llc_theorems_experiments: the chunked Hessian map and its Lanczos top eigenvalue
and Hutchinson trace against the dense Hessian of a tiny restricted part (numpy.linalg.eigvalsh), and Theorem 7.4's
hypotheses at hand-made constants, both ways."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import functional_call

from lib import llc_theorems_experiments as ex
from lib.llc_experiments import real_model as rm

V, D, FF = 24, 8, 12


def tiny_problem(part="mlp.down_proj", n=6, T=6):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=16, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).double().eval()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5)
    ids = torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(1))
    data = (rm.entry_states(model, ids, 1), ids[:, 1:])
    return rm.restrict(model, 1, part), data


def dense_hessian(stack, data):
    """The d × d Hessian of L_n in the part's weights, by torch.autograd.functional.hessian of the flat vector."""
    (name, w0), = [(k, p.detach()) for k, p in stack.named_parameters() if p.requires_grad]

    def loss(flat):
        return rm.restricted_loss(lambda s: functional_call(stack, {name: flat.view(w0.shape)}, (s,), strict=False),
                                  data).mean()

    return torch.autograd.functional.hessian(loss, w0.reshape(-1).clone()).numpy()


@pytest.mark.parametrize("chunk", [1, 4, 6])
def test_chunked_products_are_the_dense_hessian_times_v(chunk):
    stack, data = tiny_problem()
    H = dense_hessian(stack, data)
    op = ex.SampleHessian(stack, data, rm.restricted_loss, chunk=chunk)
    v = np.random.default_rng(0).standard_normal(op.dimension)
    # Llama's RMSNorm computes in float32 whatever the model's dtype: agreement to float32 rounding
    np.testing.assert_allclose(op.matvec(v), H @ v, rtol=1e-4, atol=1e-5 * np.abs(H @ v).max())
    assert op.products == 1


def test_lanczos_top_eigenvalue_and_residual_against_eigvalsh():
    stack, data = tiny_problem()
    H = dense_hessian(stack, data)
    exact = np.linalg.eigvalsh((H + H.T) / 2)
    h = ex.part_hessian(stack, data, rm.restricted_loss, ncv=20, tol=1e-10, seed=0)
    assert h.d == D * FF
    assert h.lambda_max == pytest.approx(exact[-1], rel=1e-4)   # float32 norms (see above)
    assert h.residual < 1e-3
    assert np.isnan(h.trace) and h.probes == 0


def test_hutchinson_trace_against_the_dense_trace():
    stack, data = tiny_problem()
    H = dense_hessian(stack, data)
    h = ex.part_hessian(stack, data, rm.restricted_loss, ncv=10, tol=1e-6, probes=200, seed=1)
    assert abs(h.trace - np.trace(H)) <= 4 * h.trace_se
    # Rademacher probes: zᵀHz − tr H = Σ_{i≠j} z_i z_j H_ij, so the error's variance is 2 Σ_{i≠j} H_ij²
    off = H - np.diag(np.diag(H))
    assert h.trace_se == pytest.approx(np.sqrt(2 * np.sum(off ** 2) / 200), rel=0.3)


def test_theorem_hypotheses_both_ways():
    ok = ex.theorem_hypotheses(lambda_max=10.0, nbeta=9.0, gamma=300.0, eps=1e-4)
    assert ok["nbeta_M_below_gamma"] and ok["contracts"] and ok["in_paper_interval"] and ok["stable"]
    assert ok["eps_a_max"] == pytest.approx(1e-4 * (90 + 300)) and ok["accurate"]
    assert ok["stiffest_bias"] == pytest.approx(1 / (1 - 0.039 / 4) - 1)
    steep = ex.theorem_hypotheses(lambda_max=40.0, nbeta=9.0, gamma=300.0, eps=1e-4)   # nβM = 360 > γ
    assert not steep["nbeta_M_below_gamma"] and not steep["contracts"] and not steep["in_paper_interval"]
    assert steep["stable"]
    big_step = ex.theorem_hypotheses(lambda_max=10.0, nbeta=9.0, gamma=300.0, eps=0.02)  # ε·a = 7.8: diverges
    assert not big_step["stable"] and not big_step["accurate"] and big_step["stiffest_bias"] == float("inf")
    assert not big_step["eps_gamma_below_2"]
    # Remark 7.5's interval has a lower end γ − 2/ε, which the derived contraction a < 1 does not share: with
    # εγ > 2 it reads ε(γ + nβM) < 4 (here 3.001)
    low = ex.theorem_hypotheses(lambda_max=0.1, nbeta=1.0, gamma=300.0, eps=0.01)       # γ − 2/ε = 100 > nβM
    assert not low["in_paper_interval"] and low["contracts"] and not low["eps_gamma_below_2"]


def test_real_hessian_steps_price_each_part_and_none_skips():
    values = {"profile": "ci", "seed": 0, "device": "cpu", "smoke_upstream": False, "real_model": "smollm2-135m",
              "real_parts": ["mlp.down_proj", "mlp"], "real_revisions": ["final"], "real_ncv": 6, "real_probes": 4}
    steps = ex.real_hessian_steps(values)
    assert len(steps) == 2 and "mlp.down_proj" in steps[0].name and "mlp of" in steps[1].name
    assert steps[1].flops > steps[0].flops * 0.99 and steps[1].peak_bytes > steps[0].peak_bytes  # d: 3× the weights
    assert all(s.flops > 0 and s.peak_bytes > 0 for s in steps)
    assert ex.real_hessian_steps(values | {"real_model": "none"}) == []
