"""lib.position_llc: Chen & Murfet §7.1's per-position LLCs of a causal language model."""
import numpy as np
import pytest
import torch

from lib import llc
from lib import position_llc as pl


class _Bigram(torch.nn.Module):
    """A causal LM whose logits at each position read only the current token: p(y_t | y_<t) = p(y_t | y_{t−1})."""

    def __init__(self, V: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=g, dtype=torch.float64))
        self.calls = 0

    def forward(self, ids):
        self.calls += 1
        return self.table[ids]


def _windows(n=64, T=8, V=5, seed=0):
    return torch.randint(0, V, (n, T), generator=torch.Generator().manual_seed(seed))


_SGLD = dict(gamma=100.0, eps=1e-3, chains=3, draws=40, burn_in=10, batch_size=16, seed=0)


def test_per_position_llc_shapes_and_the_loss_it_defines():
    ids, model = _windows(), _Bigram(5)
    res = pl.per_position_llc(model, (ids,), [1, 4, 7], **_SGLD)
    assert res.positions == [1, 4, 7] and res.llc.shape == res.se.shape == res.init_loss.shape == (3,)
    assert len(res.results) == 3 and all(r.per_chain.shape == (3,) and r.loss.shape == (3, 30) for r in res.results)
    assert [d["position"] for d in res.diagnostics()] == [1, 4, 7] and np.all(np.isfinite(res.llc))
    assert res.settings["n"] == 64 and res.settings["nbeta"] == pytest.approx(64 / np.log(64))
    with torch.no_grad():
        logp = torch.log_softmax(model.table[ids[:, :-1]], -1)                    # (n, T − 1, V): predicts ids[:, 1:]
        direct = -logp.gather(-1, ids[:, 1:, None])[..., 0].mean(0)               # L_t(w*) for t = 1..T − 1
    assert np.allclose(res.init_loss, direct[[0, 3, 6]].numpy(), rtol=1e-12, atol=0)
    every = pl.per_position_llc(model, ids, range(1, 8), **{**_SGLD, "draws": 11})
    assert np.mean(every.init_loss) == pytest.approx(float(direct.mean()), rel=1e-12)   # the sequence loss: their mean


def test_per_position_llc_is_deterministic():
    ids, model = _windows(), _Bigram(5)
    a = pl.per_position_llc(model, (ids,), [2, 5], **_SGLD)
    b = pl.per_position_llc(model, (ids,), [2, 5], **_SGLD)
    assert all(np.array_equal(x.per_chain, y.per_chain) for x, y in zip(a.results, b.results))
    c = pl.per_position_llc(model, (ids,), [2, 5], **{**_SGLD, "seed": 1})
    assert not np.array_equal(a.results[0].per_chain, c.results[0].per_chain)


@pytest.mark.parametrize("positions", [[0, 3], [3, 8], [2, 2], [], [1.5], 3, [True]])
def test_per_position_llc_rejects_invalid_positions_before_sampling(positions):
    ids, model = _windows(), _Bigram(5)
    with pytest.raises(llc.LLCInputError, match=r"parameter 'positions' must .* \[1, 7\]"):
        pl.per_position_llc(model, (ids,), positions, **_SGLD)
    assert model.calls == 0                                                       # nothing was run


def test_positions_with_the_same_bigrams_have_the_same_llc():
    """By construction: the bigram model's L_t depends on the columns (t − 1, t) of the windows only. Copy
    columns (1, 2) into (5, 6): L_2 ≡ L_6 as functions of w, and with the same chains, minibatches and noise
    at every position λ̂_2 = λ̂_6 chain by chain, bit for bit. Positions 3 and 7 (their neighbours, which an
    off-by-one would compare) and position 4 keep different data and get different estimates."""
    ids = _windows(n=64, T=8, V=5, seed=3)
    ids[:, 5:7] = ids[:, 1:3]
    assert not torch.equal(ids[:, 2:4], ids[:, 6:8]) and not torch.equal(ids[:, 0:2], ids[:, 4:6])
    res = pl.per_position_llc(_Bigram(5, seed=1), (ids,), [2, 6, 3, 7, 4], **_SGLD)
    same, other = res.results[0].per_chain, res.results[1].per_chain
    assert np.array_equal(same, other) and res.init_loss[0] == res.init_loss[1]
    assert not np.array_equal(res.results[2].per_chain, res.results[3].per_chain)
    assert not np.array_equal(res.results[4].per_chain, same)



def test_per_position_spread_by_hand():
    class R:
        def __init__(self, per_chain):
            self.per_chain = np.asarray(per_chain, float)
    pos = pl.PerPositionLLC([1, 4, 9], np.array([2.0, 5.0, 1.0]), np.zeros(3), np.zeros(3),
                            [R([2, 2, 2]), R([5, 6, 4]), R([1, 2, 0])], {}, 0.0)
    s = pos.spread()
    assert (s["high"], s["low"], s["chains"]) == (4, 9, 3)
    assert s["difference"] == pytest.approx(4.0) and s["se"] == pytest.approx(0.0)
