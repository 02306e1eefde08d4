"""lib.substrate.shuffled_null_model: the learned-nothing model every finding about learning is decided against.
Its stream is a seeded permutation of the training stream (same counts, no sequence), its recipe the
Introduction's, its cache entry its own; bad values are refused before any training starts."""
import numpy as np
import pytest
import torch

from lib import substrate
from lib.models import mini_pythia

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def markov_stream(n=3000, V=24, seed=0):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(V, 0.1), size=V)
    x = [0]
    for _ in range(n - 1):
        x.append(int(rng.choice(V, p=P[x[-1]])))
    return np.array(x, dtype=np.int64)


def smoke_null(tmp_path, monkeypatch, **kw):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    train, held = markov_stream(), markov_stream(600, seed=1)
    return substrate.shuffled_null_model("paper", 0, "cpu", model_size="p-tiny", train=train, held=held,
                                         vocab_size=24, smoke=True, **kw), train, held


def test_the_recipe_is_the_introductions_on_a_permuted_stream(monkeypatch):
    seen = {}

    def fake(train, held, tok, **kw):
        seen.update(train=train.tokens, held=held.tokens, vocab=tok.vocab_size, **kw)
        return mini_pythia.Suite(sizes=kw["model_sizes"], checkpoint_steps=[0, 1])

    monkeypatch.setattr(substrate, "train_book_suite", fake)
    train, held = markov_stream(), markov_stream(600, seed=1)
    null = substrate.shuffled_null_model("ci", 3, "cpu", model_size="p-small", train=train, held=held, vocab_size=24)
    p = substrate.intro_settings("ci", 3, "cpu")
    assert (seen["context_length"], seen["train_steps"], seen["batch_size"], seen["seed"], seen["profile"]) == \
        (p["context_length"], p["train_steps"], p["batch_size"], 3, "ci")
    assert seen["model_sizes"] == ["p-small"] and seen["vocab"] == 24
    # a permutation of the stream: same counts, other order; the held-out stream is left as it is
    assert np.array_equal(np.sort(seen["train"]), np.sort(train)) and not np.array_equal(seen["train"], train)
    assert np.array_equal(seen["train"], np.random.default_rng(3).permutation(train))   # shuffle_seed = seed
    assert np.array_equal(seen["held"], held) and np.array_equal(null.tokens, seen["train"])
    # its bigram statistics are gone: the shuffled stream's conditional entropy is the unigram entropy's
    def cond_entropy(x, V=24):
        c = np.zeros((V, V))
        np.add.at(c, (x[:-1], x[1:]), 1)
        pxy = c / c.sum()
        px = pxy.sum(1, keepdims=True)
        return -np.nansum(pxy * np.log(pxy / px, where=pxy > 0, out=np.zeros_like(pxy)))
    assert cond_entropy(seen["train"]) > cond_entropy(train) + 0.5
    substrate.shuffled_null_model("ci", 3, "cpu", model_size="p-small", train=train, held=held, vocab_size=24,
                                  shuffle_seed=4)
    assert not np.array_equal(seen["train"], null.tokens)                                 # another shuffle


@pytest.mark.parametrize("kw, match", [
    (dict(model_size="p-huge"), "model_size"),
    (dict(shuffle_seed=-1), "shuffle_seed"),
    (dict(shuffle_seed=True), "shuffle_seed"),
    (dict(train=np.arange(10)), "'train' and 'held'"),
    (dict(train=np.arange(10), held=np.arange(10)), "vocab_size"),
])
def test_bad_values_are_refused_before_training(monkeypatch, kw, match):
    monkeypatch.setattr(substrate, "train_book_suite", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match=match):
        substrate.shuffled_null_model("ci", 0, "cpu", **{"model_size": "p-tiny", **kw})


def test_it_trains_from_the_same_initialisation_into_its_own_cache_entry(tmp_path, monkeypatch):
    null, train, held = smoke_null(tmp_path, monkeypatch)
    p = substrate.intro_settings("paper", 0, "cpu", smoke=True)
    trained = substrate.train_book_suite(type("S", (), {"tokens": train}), type("S", (), {"tokens": held}),
                                         type("T", (), {"vocab_size": 24}), profile="paper", model_sizes=["p-tiny"],
                                         context_length=p["context_length"], train_steps=p["train_steps"],
                                         batch_size=p["batch_size"], seed=0, device="cpu")
    assert null.suite.directory["p-tiny"] != trained.directory["p-tiny"]          # keyed by the shuffled stream
    a, b = null.load(0).model.state_dict(), trained.load("p-tiny", 0, "cpu").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)                                # step 0: the same model
    a, b = null.load().model.state_dict(), trained.load("p-tiny", None, "cpu").model.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)                            # then other data
    again, _, _ = smoke_null(tmp_path, monkeypatch)                               # read from its cache entry
    assert again.suite.directory == null.suite.directory and again.steps == null.steps
