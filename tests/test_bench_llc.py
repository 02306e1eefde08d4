"""benchmarks/bench_llc.py's RRR eager ceiling: the hand-batched step computes what a per-chain step does."""

import pytest
import torch

from benchmarks import bench_llc
from benchmarks.llc_side import rrr_sample_loss
from benchmarks.tiny_transformer import rrr_model


def test_rrr_chains_step_is_each_chains_loss_and_gradient(monkeypatch):
    """Every chain's loss from the batched step equals the model's own full-batch RRR loss (F.mse_loss, an
    independent computation), and the gradients the step takes are the per-chain autograd gradients."""
    torch.manual_seed(0)
    model = rrr_model(5, 3, 5)
    x, y = torch.randn(40, 5), torch.randn(40, 5)
    taken = {}
    real_grad = torch.autograd.grad

    def spy(outputs, inputs, **kw):
        taken["grads"] = real_grad(outputs, inputs, **kw)
        return taken["grads"]

    monkeypatch.setattr(torch.autograd, "grad", spy)
    losses = bench_llc.rrr_chains_step(model, x, y, chains=3)
    monkeypatch.undo()
    expected = torch.nn.functional.mse_loss(model(x), y)
    assert losses.shape == (3,)
    torch.testing.assert_close(losses, expected.detach().expand(3))
    assert torch.allclose(rrr_sample_loss(model, x, y).mean(), expected)
    ga, gb = torch.autograd.grad(expected, (model[0].weight, model[1].weight))
    a_grads, b_grads = taken["grads"]
    assert a_grads.shape == (3, 3, 5) and b_grads.shape == (3, 5, 3)
    for c in range(3):
        torch.testing.assert_close(a_grads[c], ga)
        torch.testing.assert_close(b_grads[c], gb)


def test_rrr_chains_step_moves_with_the_weights():
    """A chain whose weights differ gives a different loss: the step reads the model's weights, not a copy made
    once (the ceiling times the real arithmetic)."""
    torch.manual_seed(1)
    model = rrr_model(5, 3, 5)
    x, y = torch.randn(20, 5), torch.randn(20, 5)
    before = bench_llc.rrr_chains_step(model, x, y, chains=2)
    with torch.no_grad():
        model[1].weight.mul_(2.0)
    after = bench_llc.rrr_chains_step(model, x, y, chains=2)
    torch.testing.assert_close(after, torch.nn.functional.mse_loss(model(x), y).detach().expand(2))
    assert not torch.allclose(before, after)


def test_a_ceiling_of_no_steps_is_refused_by_name(capsys):
    """Zero or negative timed steps would give no rate: refused before any work, naming the flag and the value."""
    for flag, value in (("--rrr-ceiling-steps", "0"), ("--ceiling-steps", "-3")):
        with pytest.raises(SystemExit) as stop:
            bench_llc.main([flag, value])
        assert stop.value.code == 2
        assert f"{flag} must be an integer >= 1; got {int(value)}" in capsys.readouterr().err
