"""The real-model section of the chapter "Logit rank" (lib.logit_rank_experiments, section "A model no one here
trained"): the second corpus, the shared spans, α from the Gram matrix and its paired bootstrap over futures, the
± z*·s.e. rule, the per-history KL, the cost of the section, its parameter rules; each against an independent
computation or a hand-made case, each rule both ways. The pipeline runs once on a tiny Llama written as a GGUF
file (tests/models/gguf_standins.py) and its untrained twin."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from lib import logit_rank_experiments as lx, logits as lg
from lib.book.chapters import get_chapter
from lib.book.parameters import ParameterError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------
# the second corpus and the spans every tokenizer reads
# ---------------------------------------------------------------------------

def test_package_descriptions_are_real_prose_without_code_blocks():
    import importlib.metadata as md

    docs = lx.package_description_documents(min_chars=2000)
    assert docs == lx.package_description_documents(min_chars=2000)          # same environment, same documents
    assert len(docs) >= 20 and all(len(d) >= 2000 for d in docs)
    assert not any("```" in d for d in docs)
    assert not any(line.lstrip().startswith("<") for d in docs for line in d.splitlines())
    # an independent count: distributions whose raw description is long enough can only lose text to the filter
    raw = {(d.metadata.get("Name") or "").lower() for d in md.distributions()
           if len(d.metadata.get_payload() or d.metadata.get("Description") or "") >= 2000}
    assert len(docs) <= len(raw)
    assert len(lx.package_description_documents(min_chars=10 ** 9)) == 0


def test_package_descriptions_read_only_what_the_pins_name(tmp_path):
    """The corpus is a function of the pin files: no pins, no documents; a pin at another version drops
    its package; the book's own (editable) distribution is never read."""
    import importlib.metadata as md

    pins = lx.pinned_distributions()
    assert pins["torch"] == "2.13.0" and "lowrank-book" not in pins
    assert lx.package_description_documents(pins={}) == []
    docs = lx.package_description_documents(min_chars=2000)
    long_one = next(n for n in sorted(pins) if n != "lowrank-book"
                    and len(md.metadata(n).get_payload() or "") >= 20000)
    fewer = lx.package_description_documents(min_chars=2000, pins={**pins, long_one: "0.0.0"})
    assert len(fewer) == len(docs) - 1
    readme = md.metadata("lowrank-book").get_payload() or ""
    assert not any(readme[:200] and readme[:200] in d for d in docs)
    (tmp_path / "requirements.txt").write_text("# a comment\nFoo_Bar.baz == 1.2 ; python_version > '3'\nqux>=1\n")
    assert lx.pinned_distributions(tmp_path) == {"foo-bar-baz": "1.2"}


def test_common_spans_keeps_what_every_tokenizer_reads():
    draw = type("Draw", (), {"histories": ["ab", "", "abcdef", "abc", "a"],
                             "futures": ["x", "xyz", "", "xy", "wxyz"]})()
    chars = lambda s: tuple(s)                                    # noqa: E731 - one token per character
    pairs = lambda s: tuple(s[i:i + 2] for i in range(0, len(s), 2))   # noqa: E731 - one per two characters
    h, f = lx.common_spans(draw, [chars, pairs], max_tokens=3, n=10)
    assert h == [0, 3, 4] and f == [0, 1, 3]                      # "" and the 6- and 4-character spans dropped
    assert lx.common_spans(draw, [chars], max_tokens=3, n=2) == ([0, 3], [0, 1])


# ---------------------------------------------------------------------------
# α from the Gram matrix, and its bootstrap over groups of futures
# ---------------------------------------------------------------------------

def planted(n, width, alpha, seed):
    """An n × n·width matrix with singular values i^(−α) and random singular vectors."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n * width, n)))
    return (U * np.arange(1, n + 1) ** -alpha) @ V.T


def test_gram_alpha_is_the_fit_to_the_singular_values():
    L = np.random.default_rng(1).standard_normal((30, 90)) @ np.diag(np.linspace(2, 0.1, 90))
    s = np.linalg.svd(L, compute_uv=False)
    got = lx.gram_alpha(L @ L.T)
    for r in lx.READINGS:
        assert got[r] == pytest.approx(lg.fit_power_law(s, r).alpha, abs=1e-8)
    assert lx.gram_alpha(planted(40, 3, 0.7, 0) @ planted(40, 3, 0.7, 0).T)["original"] == pytest.approx(0.7, abs=1e-6)


def test_alpha_bootstrap_replicates_are_fits_to_reweighted_futures():
    width, n = 2, 24
    A, B = planted(n, width, 0.6, 2), planted(n, width, 0.3, 3)
    a, b = lx.alpha_bootstrap([A, B], width, n_boot=5, seed=7, n_groups=6)
    for M, res in ((A, a), (B, b)):
        for r in lx.READINGS:
            assert res.alpha[r] == pytest.approx(lg.fit_power_law(lg.normalised_singular_values(M), r).alpha, abs=1e-8)
    # replicate 0 by hand: the same multinomial draw, the futures of group g repeated w_g times
    rng = np.random.default_rng(7)
    w = rng.multinomial(6, np.full(6, 1 / 6), size=5)[0]
    edges = np.linspace(0, n, 7).round().astype(int)
    cols = [c for g in range(6) for _ in range(w[g]) for c in range(edges[g] * width, edges[g + 1] * width)]
    s = np.linalg.svd(A[:, cols], compute_uv=False)
    assert a.replicates["original"][0] == pytest.approx(lg.fit_power_law(s, "original").alpha, abs=1e-8)
    assert a.se("original") > 0 and np.isfinite(b.se("literal"))
    # paired: the same draws for both matrices, so a matrix against itself has a gap of exactly 0 in every replicate
    c, d = lx.alpha_bootstrap([A, A.copy()], width, n_boot=5, seed=7, n_groups=6)
    assert np.array_equal(c.replicates["original"], d.replicates["original"])
    with pytest.raises(lg.LogitsError, match="n_boot"):
        lx.alpha_bootstrap([A], width, n_boot=1)
    with pytest.raises(lg.LogitsError, match="same number of futures"):
        lx.alpha_bootstrap([A, A[:, :width * (n - 4)]], width, n_boot=3, n_groups=40)


def test_alpha_bootstrap_is_deterministic_given_the_seed():
    A = planted(20, 2, 0.5, 4)
    one = lx.alpha_bootstrap([A], 2, 6, seed=3)[0].replicates["literal"]
    assert np.array_equal(one, lx.alpha_bootstrap([A], 2, 6, seed=3)[0].replicates["literal"])
    assert not np.array_equal(one, lx.alpha_bootstrap([A], 2, 6, seed=4)[0].replicates["literal"])


# ---------------------------------------------------------------------------
# the ± z*·s.e. rule
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, se, side, expected", [
    (0.60, 0.02, "above", True), (0.60, 0.04, "above", None), (0.40, 0.02, "above", False),
    (0.40, 0.02, "below", True), (0.60, 0.02, "below", False), (0.45, 0.02, "below", None),
])
def test_decide_against_both_ways(value, se, side, expected):
    d = lx.decide_against(value, se, 0.5, side)
    assert d.reproduces is expected and (d.reason is None) == (expected is not None)
    assert d.z == pytest.approx((value - 0.5) / se)


@settings(max_examples=200, deadline=None)
@given(st.floats(-5, 5), st.floats(0, 3), st.floats(-2, 2), st.sampled_from(["above", "below"]))
def test_decide_against_agrees_with_the_claims_check(value, se, threshold, side):
    """A decided finding's value is on the side its check (at_least / at_most threshold) reads."""
    d = lx.decide_against(value, se, threshold, side)
    if d.reproduces is not None:
        on_claimed_side = value >= threshold if side == "above" else value <= threshold
        assert d.reproduces == on_claimed_side
        assert abs(value - threshold) > 3 * se or se == 0


def test_decide_against_refuses_bad_input():
    with pytest.raises(lg.LogitsError, match="side"):
        lx.decide_against(0.6, 0.1, 0.5, "over")
    with pytest.raises(lg.LogitsError, match="finite"):
        lx.decide_against(float("nan"), 0.1, 0.5, "above")
    with pytest.raises(lg.LogitsError, match="finite"):
        lx.decide_against(0.6, -0.1, 0.5, "above")


# ---------------------------------------------------------------------------
# KL per history
# ---------------------------------------------------------------------------

def test_kl_per_history_by_hand_and_its_mean_is_def_3_1():
    L = np.array([[0.0, np.log(3.0), 0.0, 0.0]])             # one history, two futures of width 2
    A = np.zeros_like(L)
    p = np.array([0.25, 0.75])
    by_hand = (np.sum(p * np.log(p / 0.5)) + 0.0) / 2
    assert lx.kl_per_history(L, A, 2)[0] == pytest.approx(by_hand, abs=1e-12)
    rng = np.random.default_rng(5)
    L, A = rng.standard_normal((7, 12)), rng.standard_normal((7, 12))
    per = lx.kl_per_history(L, A, 3)
    assert per.shape == (7,) and np.all(per >= 0)
    assert per.mean() == pytest.approx(lg.average_kl(L, A, 3), rel=1e-10)


def test_paired_difference_by_hand():
    m, se = lx.paired_difference([3.0, 5.0, 7.0], [1.0, 2.0, 3.0])
    assert m == pytest.approx(3.0) and se == pytest.approx(1.0 / np.sqrt(3))


# ---------------------------------------------------------------------------
# the section's cost and parameters
# ---------------------------------------------------------------------------

def test_real_model_steps_are_priced_and_scale_with_n():
    chapter = get_chapter("logit_rank")
    values = chapter.resolve({"profile": "ci"})
    assert lx.real_model_heavy_steps(values | {"real_models": []}) == []
    small = lx.real_model_heavy_steps(values)
    big = lx.real_model_heavy_steps(values | {"real_sizes": [16, 32, 64], "real_angle_rows": 48})
    # n² pairs of futures after histories: four times the work at twice n (the n history passes only double)
    assert len(small) == 2 and big[0].flops == pytest.approx(4 * small[0].flops, rel=0.05)
    names = [s.name for s in lx.heavy_steps(values)]
    assert "the real models' forward passes" in names
    both = lx.real_model_heavy_steps(values | {"real_models": ["smollm2-135m", "gemma3-270m"]})
    assert both[0].flops > small[0].flops


@pytest.mark.slow
@pytest.mark.parametrize("name", lx.REAL_MODELS)
def test_planning_shapes_are_the_gguf_headers(name):
    """REAL_SHAPES against the config transformers reads from each file's header (tens of seconds each)."""
    from lib.models.hub import model_config

    cfg, ref = lx.real_model_config(name), model_config(name)
    for key in lx.REAL_SHAPES[name][1]:
        assert getattr(cfg, key) == getattr(ref, key), key
    assert cfg.model_type == ref.model_type


@pytest.mark.parametrize("good, bad, name", [
    ({"real_models": ["gemma3-270m"]}, {"real_models": ["gpt2"]}, "real_models"),
    ({"real_models": []}, {"real_models": ["smollm2-135m", "smollm2-135m"]}, "real_models"),
    ({"real_corpus": "none"}, {"real_corpus": "wiki"}, "real_corpus"),
    ({"real_sizes": [8, 16, 24]}, {"real_sizes": [16, 32]}, "real_sizes"),
    ({"real_angle_rank": 6}, {"real_angle_rank": 7}, "real_angle_rank"),          # real_angle_rows = 24
    ({"real_angle_rows": 32}, {"real_angle_rows": 33}, "real_angle_rows"),        # max(real_sizes) = 32
    ({"real_kl_rank": 8}, {"real_kl_rank": 9}, "real_kl_rank"),
    ({"real_span_max_chars": 16}, {"real_span_max_chars": 15}, "real_span_max_chars"),
])
def test_real_model_rules_both_ways(good, bad, name):
    chapter = get_chapter("logit_rank")
    chapter.resolve(good)
    with pytest.raises(ParameterError, match=f"parameter '{name}'"):
        chapter.resolve(bad)


# ---------------------------------------------------------------------------
# the pipeline on a tiny GGUF stand-in and its untrained twin
# ---------------------------------------------------------------------------

def test_the_section_runs_on_a_tiny_gguf_model_and_its_twin(tmp_path, monkeypatch):
    from lib.models.hub import ModelSeries
    from tests.models.gguf_standins import write_tiny_llama_gguf

    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = write_tiny_llama_gguf(tmp_path / "tiny.gguf", seed=0)
    series = ModelSeries(f"gguf:{path}", ["init", "final"], init_seed=0)
    words = "the then than ant on to a an tea nest ton".split()
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(words, 60)) for _ in range(20)]
    draw = lg.sample_spans(docs, 40, 8, 24, seed=0, one_per_document=False)
    hi, fi = lx.common_spans(draw, [series.encode], max_tokens=12, n=16)
    H = [series.encode(draw.histories[i]) for i in hi]
    F = [series.encode(draw.futures[i]) for i in fi]
    n = min(len(H), len(F))
    assert n >= 12
    k = 8
    L = {rev: lg.extended_logit_matrix(series.load(rev), H[:n], F[:n], k).astype(np.float64)
         for rev in ("final", "init")}
    assert not np.allclose(L["final"], L["init"])                       # the twin is another model
    trained, twin = lx.alpha_bootstrap([L["final"], L["init"]], k, n_boot=10, seed=0, n_groups=6)
    for rev, res in (("final", trained), ("init", twin)):
        curve = lx.alpha_over_n(L[rev], k, [n])
        assert res.alpha["original"] == pytest.approx(curve.alpha["original"][-1], abs=1e-8)
    usv = lg.svd(L["final"], "exact")
    per = lx.kl_per_history(L["final"], lg.rank_r_approximation(usv, 2), k)
    assert per.mean() == pytest.approx(lx.kl_at_rank(L["final"], k, 2), rel=1e-8)
