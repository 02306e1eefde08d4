"""The chapter "Modes" on a released model (lib.modes_experiments: token_documents, real_view, real_modes,
real_conditionals, real_model_steps). Fast tests on hand-made streams, exact conditionals and a tiny Llama
written as a GGUF file (tests/models/gguf_standins.py)."""
from __future__ import annotations

import numpy as np
import pytest

from lib import modes_experiments as E
from lib.modes import Modes
from lib.ntp import NTPError

pytestmark = pytest.mark.usefixtures("offline_private_cache")


def markov_stream(n: int, seed: int, V: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A first-order chain on tokens 0..V−1 with peaked rows (tokens 0..3 frequent), in 20 documents."""
    rng = np.random.default_rng(seed)
    T = rng.dirichlet(np.full(V, 0.3), size=V)
    T[:, :4] += 0.5
    T /= T.sum(1, keepdims=True)
    x, out = 0, []
    for _ in range(n):
        x = rng.choice(V, p=T[x])
        out.append(x)
    offsets = np.arange(0, n, n // 20)
    return np.array(out), offsets


class FakeTokenizer:
    """Splits on spaces; a word's id is its length (a tokenizer the test can count by hand)."""

    def __call__(self, texts, add_special_tokens=False):
        assert add_special_tokens is False
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


def test_token_documents_concatenates_and_drops_empty_documents():
    tokens, offsets = E.token_documents(FakeTokenizer(), ["a bb", "", "ccc dddd e"])
    assert tokens.tolist() == [1, 2, 3, 4, 1] and offsets.tolist() == [0, 2]
    with pytest.raises(ValueError, match="documents"):
        E.token_documents(FakeTokenizer(), ["", " "])


def test_real_view_counts_histories_as_a_direct_count_does():
    tokens, offsets = markov_stream(4000, seed=0)
    view, table = E.real_view(tokens, offsets, 8, n_symbols=5, k=1, n_histories=10)
    kept = [int(t) for t in np.flatnonzero(table < 4)]
    assert table.tolist().count(4) == 4                       # four tokens merged into OTHER
    # independent: count (history, next symbol) within documents by hand
    sym = table[tokens]
    ends = list(offsets[1:]) + [len(tokens)]
    counts = np.zeros((4, 5))
    for a, b in zip(offsets, ends):
        for i in range(a, b - 1):
            if sym[i] < 4:
                counts[sym[i], sym[i + 1]] += 1
    order = [int(table[h[0]]) for h in view.histories]
    assert sorted(order) == list(range(4)) and set(h[0] for h in view.histories) <= set(kept)
    assert np.allclose(view.data.counts.T, counts[order])


def exact_view_and_conditionals():
    tokens, offsets = markov_stream(20000, seed=1)
    view, _ = E.real_view(tokens, offsets, 8, n_symbols=6, k=1, n_histories=10)
    q = view.conditional
    uniform = np.full_like(q, 1 / q.shape[1])
    return view, q, uniform


def test_real_modes_the_data_itself_against_a_uniform_model():
    view, q, uniform = exact_view_and_conditionals()
    rm = E.real_modes(view, {"init": uniform, "final": q}, n_boot=50, seed=0)
    r = view.modes.rank
    # eq. 41: q̂ itself has share 1 on every mode (independent of the bootstrap)
    assert np.allclose(rm.noise.shares[1], 1.0)
    # the carried rule: share ≥ 1/2 and share > 3 s.d.
    assert rm.carried(1) == [a for a in range(r) if rm.noise.sd[1, a] * 3 < 1]
    assert rm.carried(0) == [a for a in range(r) if rm.noise.shares[0, a] >= 0.5
                             and rm.noise.shares[0, a] > 3 * rm.noise.sd[0, a]]
    # the model's own modes: q̂'s are the data's (overlap 1 mode by mode), with the same σ
    assert np.allclose(rm.sigma["trained"][:r], rm.sigma["data"][:r])
    assert np.allclose(rm.overlap["trained"], 1.0)
    own = Modes.from_joint(view.q_x[:, None] * uniform, zero_rows="raise", normalize=True)
    assert np.allclose(rm.sigma["twin"], own.sigma)
    gain = len(rm.carried(1)) - len(rm.carried(0))
    assert rm.verdict.detail["trained"]["estimate"] == gain
    assert rm.verdict.reproduces is (gain - 3 * rm.verdict.detail["trained"]["se"] > 0)
    assert len(rm.table_rows()) == r


def test_real_modes_a_model_equal_to_its_twin_does_not_reproduce():
    view, q, _ = exact_view_and_conditionals()
    rm = E.real_modes(view, {"init": q, "final": q}, n_boot=30, seed=0)
    assert rm.carried(0) == rm.carried(1)
    assert rm.verdict.reproduces is False


def test_real_modes_is_deterministic_given_the_seed():
    view, q, uniform = exact_view_and_conditionals()
    a = E.real_modes(view, {"init": uniform, "final": q}, n_boot=20, seed=3)
    b = E.real_modes(view, {"init": uniform, "final": q}, n_boot=20, seed=3)
    assert np.array_equal(a.noise.sd, b.noise.sd) and a.verdict.value == b.verdict.value


def test_check_real_model_refuses_before_any_work():
    assert E.check_real_model("smollm2-135m") == "smollm2-135m"
    with pytest.raises(NTPError, match="real_model"):
        E.check_real_model("llama")


def test_real_model_steps():
    values = {"real_histories": 300, "real_history": 2, "real_symbols": 32, "real_boot": 100,
              "corpus": "default", "max_corpus_mb": 1000.0}
    assert E.real_model_steps({**values, "real_model": "none"}) == []
    steps = E.real_model_steps({**values, "real_model": "smollm2-135m"})
    assert len(steps) == 3
    assert steps[0].flops == pytest.approx(E.TOKENIZE_FLOPS_PER_BYTE * E.DEFAULT_CORPUS_MB * 1e6)
    streamed = E.real_model_steps({**values, "real_model": "smollm2-135m", "corpus": "hf:x/y", "max_corpus_mb": 2.0})
    assert streamed[0].flops == pytest.approx(E.TOKENIZE_FLOPS_PER_BYTE * 2e6)


def test_real_conditionals_on_a_tiny_gguf_model(tiny_file):
    """P_M(y|x) on the alphabet: each row sums to one and is the model's next-token distribution with the
    merged tokens' probabilities summed (computed here from the model's logits)."""
    import torch

    name = f"gguf:{tiny_file}"
    tok = E.real_tokenizer(name)
    tokens, offsets = E.token_documents(tok, ["the cat sat on the mat. the end."] * 30)
    V = 64
    view, table = E.real_view(tokens, offsets, V, n_symbols=5, k=2, n_histories=6)
    conds = E.real_conditionals(name, view, table)
    assert set(conds) == {"final", "init"}
    from lib.ntp_experiments import real_models

    net = real_models(name)["final"].model
    for i, h in enumerate(view.histories):
        with torch.no_grad():
            p = torch.softmax(net(input_ids=torch.tensor([h])).logits[0, -1].double(), -1).numpy()
        assert np.allclose(conds["final"][i], np.bincount(table, weights=p, minlength=5), atol=1e-6)
    assert np.allclose(conds["init"].sum(1), 1.0)
    assert not np.allclose(conds["init"], conds["final"])
