"""lib.ntp_experiments: the chapter's experiments and their read-outs, each against a hand-made case,
the corpus parameter with a local folder, and the untrained-transformer control."""
import math

import numpy as np
import pytest

from lib import ntp
from lib import ntp_experiments as experiments

STORY = ("the cat sat on the mat . the dog sat on the rug . the cat ran to the dog . "
         "a cat sat on a mat . the dog ran to the cat . the cat sat on the rug .")


@pytest.fixture(scope="module")
def story_data():
    streams, vocab = ntp.word_stream([STORY] * 3)
    return ntp.extract_contexts(streams, vocab, V=8, T=2)


# --- §1 the corpus parameter: a local folder -----------------------------------------------------

def test_corpus_contexts_read_a_local_folder(tmp_path):
    (tmp_path / "a.txt").write_text(STORY)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text(STORY.replace("cat", "bird"))
    (tmp_path / "ignored.csv").write_text("x y z")
    out = experiments.corpus_contexts(str(tmp_path), 1.0, V=8, T=2, m=5)
    assert out.data.m == 5 and out.data.V == 8
    assert out.words == 2 * len(STORY.split())                 # both text files, not the .csv
    first = out.examples(1)[0]
    assert first["count"] == out.data.counts[:, 0].sum() and first["context"] == out.data.decode(0)
    same = experiments.corpus_contexts(str(tmp_path), None, V=8, T=2, m=5)
    assert same.corpus_id == out.corpus_id                     # the cache key: the documents, not max_corpus_mb
    (tmp_path / "a.txt").write_text(STORY + " the end .")
    assert experiments.corpus_contexts(str(tmp_path), 1.0, V=8, T=2, m=5).corpus_id != out.corpus_id


def test_the_chapter_takes_a_local_corpus_and_refuses_a_missing_one(tmp_path):
    from lib.book.chapters import get_chapter
    from lib.book.parameters import ParameterError

    (tmp_path / "a.txt").write_text(STORY)
    chapter = get_chapter("ntp")
    values = chapter.resolve({"corpus": str(tmp_path), "max_corpus_mb": 5.0})
    assert values["corpus"] == str(tmp_path) and values["max_corpus_mb"] == 5.0
    chapter.preflight(values)
    missing = chapter.resolve({"corpus": str(tmp_path / "no-such-folder")})
    with pytest.raises(ParameterError, match="corpus"):
        chapter.preflight(missing)
    with pytest.raises(ParameterError, match="max_corpus_mb"):
        chapter.resolve({"max_corpus_mb": 0.0})


def test_ce_identity_error_is_rounding_only_on_logits_far_from_the_data(story_data):
    synth = ntp.synthetic_data(V=5, m=4, k=2, seed=0)
    error, kl = experiments.ce_identity_error([story_data, synth], seed=0)
    assert error < 1e-13 and kl > 0.5                                # the identity is tested where KL is large


# --- §2 the linear model ---------------------------------------------------------------------------

def test_decade_index():
    assert experiments.decade_index(np.array([1, 5, 9, 11.5, 50, 100])) == 2    # |ln(9/10)| < |ln(11.5/10)|
    assert experiments.decade_index(np.array([1, 5, 9, 11, 50, 100])) == 3      # |ln(11/10)| < |ln(9/10)|


def make_linear_run(excess, dist, norm_perp, cos, bound, k, W_mm):
    trace = {"k": np.asarray(k), "excess": np.asarray(excess, float), "dist_F": np.asarray(dist, float),
             "norm_perp": np.asarray(norm_perp, float), "cos_mm": np.asarray(cos, float)}
    geo = ntp.LinearGeometry(np.zeros_like(W_mm), np.zeros((W_mm.size, 0)), 0.0, True)
    return experiments.LinearRun(None, None, geo, W_mm, trace, np.asarray(bound, float))


def test_linear_run_read_outs_on_a_hand_made_trace():
    k = np.array([1, 10, 100, 1000])
    W_mm = np.array([[3.0, 4.0]])                                  # ‖W^mm‖ = 5
    run = make_linear_run(excess=[1, 0.1, 0.02, 0.002], dist=[1, 1, 0.5, 0.1], norm_perp=5 * np.log(k) + 2,
                          cos=[0, 0.5, 0.9, 0.95], bound=[2, 1, 0.1, 0.004], k=k, W_mm=W_mm)
    assert run.excess_decade_ratio == pytest.approx(0.1)
    assert run.subspace_decade_ratio == pytest.approx(0.2)
    assert run.direction_decade_ratio == pytest.approx(0.05 / 0.1)
    assert run.log_growth == pytest.approx(1.0)                    # exactly ‖W^mm‖ per e-fold
    assert run.bound_ratio == pytest.approx(0.5)                    # the last checkpoint: 0.002 / 0.004
    assert run.solution_error == 0.0
    run.geometry.residual = 0.5                                    # W* fails the compatibility system
    assert run.solution_error == 0.5


def test_linear_experiment_runs_the_app_a2_pipeline():
    synth = ntp.synthetic_data(V=5, m=8, k=3, n=800, seed=0)
    run = experiments.linear_experiment(synth, d=12, steps=3000, seed=0, n_checkpoints=15)
    assert run.Hf.shape == (12, 8) and run.k[-1] == 3000
    assert abs(run.Hf.mean()) < 4 / math.sqrt(run.Hf.size) and run.Hf.std() == pytest.approx(1, abs=0.25)   # N(0, 1)
    assert np.allclose(run.W_mm, ntp.linear_w_mm(synth.S, run.Hf), atol=1e-6)
    assert np.allclose(run.bound, ntp.gd_excess_bound(synth.pi, synth.P, run.Hf, run.geometry.W_star, run.W_mm,
                                                      run.trace["eta"], run.k))
    assert run.solution_error < 1e-6 and run.bound_ratio <= 1.0
    assert 0 < run.excess_decade_ratio < 1 and run.log_growth > 0


def test_overparameterisation_scan_reads_its_rows():
    scan = experiments.OverparamScan(5, [{"d": 2, "compatible": False, "separable": False},
                                         {"d": 4, "compatible": True, "separable": False},
                                         {"d": 6, "compatible": True, "separable": False},
                                         {"d": 8, "compatible": True, "separable": True}])
    assert scan.failures_above_m == 1                               # d = 6 > m fails; d = 4 < m does not count
    at_m = experiments.OverparamScan(4, [{"d": 4, "compatible": True, "separable": False}])
    assert at_m.failures_above_m == 0                               # the lemma needs d > m, not d = m
    assert scan.first("compatible") == 4 and scan.first("separable") == 8
    assert experiments.OverparamScan(5, [{"d": 2, "compatible": False, "separable": False}]).first("separable") is None
    synth = ntp.synthetic_data(V=4, m=5, k=2, seed=0)
    real = experiments.overparameterisation_scan(synth, [1, 8], seed=0)
    assert [r["d"] for r in real.rows] == [1, 8] and real.failures_above_m == 0
    assert real.rows[0] == {"d": 1, "compatible": False, "separable": False}
    for row in real.rows:                       # the embeddings of each width, decided here by least squares
        Hd = np.random.default_rng([0, 2, row["d"]]).standard_normal((row["d"], synth.m))
        A, b = ntp.linear_constraints(synth.P, Hd)
        x = np.linalg.lstsq(A, b, rcond=None)[0]
        assert row["compatible"] == (np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b))


# --- §3 the path -----------------------------------------------------------------------------------

def test_path_run_ratios_on_hand_made_rows():
    rows = [{"lambda": lam, "dist_F": d, "excess": e, "bound": b, "1 - cos": c, "norm_perp": 1.0}
            for lam, d, e, b, c in ((1e-2, 1, 1, 2, 0.5), (1e-3, 0.5, 0.3, 0.6, 0.1), (1e-4, 0.01, 0.02, 0.1, 0.05))]
    path = experiments.PathRun([1e-2, 1e-3, 1e-4], rows)
    assert path.subspace_ratio == pytest.approx(0.01) and path.excess_ratio == pytest.approx(0.02)
    assert path.direction_ratio == pytest.approx(0.1) and path.bound_ratio == pytest.approx(0.5)
    assert path.table_rows()[0]["λ"] == 1e-2


def test_path_readout_against_l_star_and_l_mm():
    synth = ntp.synthetic_data(V=4, m=6, k=2, seed=2)
    L_mm = ntp.ntp_svm(synth.S)
    L_star = ntp.l_star(synth.P)
    exactish = L_star + 20 * L_mm                                  # far along the ray: close to the limit
    path = experiments.path_readout(synth, [1e-2, 1e-4], [L_star + 2 * L_mm, exactish], L_mm)
    assert path.rows[0]["dist_F"] == pytest.approx(0, abs=1e-6)   # P_F(L* + ρL^mm) = L*
    assert path.rows[1]["1 - cos"] == pytest.approx(0, abs=1e-6)
    assert path.rows[1]["norm_perp"] == pytest.approx(20 * np.linalg.norm(L_mm), rel=1e-6)
    assert path.rows[1]["excess"] < path.rows[0]["excess"]
    for row, L, lam in zip(path.rows, [L_star + 2 * L_mm, exactish], [1e-2, 1e-4]):
        assert row["excess"] == pytest.approx(ntp.cross_entropy(synth.pi, synth.P, L) - synth.entropy)
        assert row["bound"] == pytest.approx(ntp.path_excess_bound(synth.pi, synth.P, L_star, L_mm, [lam])[0])
    off = np.random.default_rng(0).standard_normal(L_mm.shape)    # a direction not orthogonal to F
    doubled = experiments.path_readout(synth, [1e-2], [2 * L_star + L_mm], off).rows[0]
    assert doubled["dist_F"] == pytest.approx(1.0)                 # ‖2L* − L*‖ / ‖L*‖
    Pp = L_mm - ntp.project_F(synth.S, L_mm)
    assert doubled["1 - cos"] == pytest.approx(1 - (Pp * off).sum() / (np.linalg.norm(Pp) * np.linalg.norm(off)))


def test_ufm_tightness_on_a_small_problem():
    synth = ntp.synthetic_data(V=4, m=5, k=2, seed=3)
    L, _ = ntp.ufm_logits(synth.pi, synth.P, 1e-2)
    tight = experiments.ufm_tightness(synth, [1e-2], [L], seed=0, max_iter=2000)
    assert tight["gap"] < 1e-6 and tight["factor_error"] < 1e-9
    assert tight["grad_norm"] == pytest.approx(ntp.ufm_path(synth.pi, synth.P, [1e-2], max_iter=2000)[0]["grad_norm"])
    L2, _ = ntp.ufm_logits(synth.pi, synth.P, 1e-1)
    both = experiments.ufm_tightness(synth, [1e-1, 1e-2], [L2, 0.5 * L], seed=0, max_iter=2000)
    assert both["gap"] > 1e-4                                       # every λ is compared, not only the first
    wrong = experiments.ufm_tightness(synth, [1e-2], [0.5 * L], seed=0, max_iter=2000)
    assert wrong["gap"] > 1e-4                                      # a non-optimal L is exposed


# --- §4 k-subsets ----------------------------------------------------------------------------------

def test_ksubset_geometry_error_against_its_definition():
    """Each of the three deviations computed here from the factors, on a random L and on the closed form."""
    S = ntp.k_subsets(5, 2)
    L = (np.eye(5) - np.ones((5, 5)) / 5) @ S + 0.2 * np.random.default_rng(3).standard_normal(S.shape)
    W, H = ntp.ufm_factors(L)
    unit = W / np.linalg.norm(W, axis=1, keepdims=True)
    etf = max(abs(unit[a] @ unit[b] + 1 / 4) for a in range(5) for b in range(5) if a != b)
    norms = np.linalg.norm(H, axis=0)
    sums = W.T @ S
    coll = max(abs(1 - sums[:, j] @ H[:, j] / (np.linalg.norm(sums[:, j]) * norms[j])) for j in range(S.shape[1]))
    assert experiments.ksubset_geometry_error(S, L) == pytest.approx(max(etf, norms.std() / norms.mean(), coll))
    norms_only = experiments.ksubset_geometry_error(S, np.diag([1.0, 1, 1, 1, 1]) @ ((np.eye(5) - np.ones((5, 5)) / 5) @ S)
                                                    @ np.diag(np.linspace(1, 2, 10)))
    assert norms_only > 0.1                                       # unequal context norms are a deviation


def test_ksubset_geometry_error_both_ways():
    S = ntp.k_subsets(5, 2)
    centred = (np.eye(5) - np.ones((5, 5)) / 5) @ S
    assert experiments.ksubset_geometry_error(S, centred) < 1e-12
    assert experiments.ksubset_geometry_error(S, centred + 0.3 * np.random.default_rng(0).standard_normal(S.shape)) > 0.05


def test_ksubset_experiment_rows_against_independent_computations():
    run = experiments.ksubset_experiment(4)
    assert [r["k"] for r in run.rows] == [1, 2, 3] and [r["m"] for r in run.rows] == [4, 6, 4]
    J = np.ones((4, 4))
    for row in run.rows:
        S = ntp.k_subsets(4, row["k"])
        centred, slide = (np.eye(4) - J / 4) @ S, (np.eye(4) - J) @ S
        assert row["nuclear norm"] == pytest.approx(np.linalg.svd(centred, compute_uv=False).sum(), rel=1e-7)
        L = ntp.solve_ntp_svm(S).L
        c = np.linalg.lstsq(slide.reshape(-1, 1), L.reshape(-1), rcond=None)[0][0]
        assert row["to (I − 11ᵀ)S"] == pytest.approx(np.linalg.norm(L - c * slide) / np.linalg.norm(L), rel=1e-6)
        assert row["to (I − 11ᵀ/V)S"] < 1e-6 and row["geometry error"] < 1e-6
        admm = ntp.ntp_svm_first_order(S, tol=1e-9).objective
        sdp = ntp.solve_ntp_svm(S).objective
        assert row["ADMM difference"] == pytest.approx(abs(admm - sdp) / sdp, rel=1e-6, abs=1e-15)
        assert row["certificate"] < 1e-6
    assert run.certificates == [r["certificate"] for r in run.rows]


# --- §5 geometry read-outs and the untrained control -----------------------------------------------

def test_compare_geometries_both_ways():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 4))
    target = ntp.cosine_matrix(X)
    related = ntp.cosine_matrix(X + 0.3 * rng.standard_normal(X.shape))
    unrelated = ntp.cosine_matrix(rng.standard_normal((30, 4)))
    controls = [ntp.cosine_matrix(rng.standard_normal((30, 4))) for _ in range(20)]
    rows = experiments.compare_geometries({"related": (related, target, controls),
                                           "unrelated": (unrelated, target, controls)}, n_perm=200, seed=0)
    r0 = np.array([ntp.offdiag_corr(c, target) for c in controls])
    assert rows[0]["r untrained"] == pytest.approx(r0.mean()) and rows[0]["SD untrained"] == pytest.approx(r0.std(ddof=1))
    assert rows[0]["z"] == pytest.approx((rows[0]["r"] - r0.mean()) / r0.std(ddof=1))
    null = ntp.permutation_null(unrelated, target, n_perm=200, seed=0)
    assert rows[1]["p (relabelling)"] == pytest.approx((1 + (null >= rows[1]["r"]).sum()) / 201)
    assert rows[0]["z"] > 5 and rows[0]["p (relabelling)"] == pytest.approx(1 / 201)
    assert abs(rows[1]["z"]) < 3 and rows[1]["p (relabelling)"] > 0.01
    assert rows[0]["se z"] == pytest.approx(math.sqrt(1 / 20 + rows[0]["z"] ** 2 / 38))
    assert rows[0]["se untrained"] == pytest.approx(r0.std(ddof=1) / math.sqrt(20))
    with pytest.raises(ntp.NTPError, match="controls"):
        experiments.compare_geometries({"same": (related, target, [controls[0]] * 3)}, n_perm=10, seed=0)


def test_geometry_comparison_reads_every_pair_with_its_models_controls(story_data):
    rng = np.random.default_rng(2)
    V, m = story_data.V, story_data.m
    emb = {name: (rng.standard_normal((V, 3)), rng.standard_normal((3, m))) for name in ("transformer", "UFM")}
    emb["L^mm factors"] = ntp.ufm_factors(ntp.ntp_svm(story_data.S))
    copies = {name: [(rng.standard_normal((V, 3)), rng.standard_normal((3, m))) for _ in range(4)]
              for name in ("transformer", "UFM")}
    out = experiments.geometry_comparison(story_data, emb, copies, n_perm=50, seed=0)
    assert list(out.rows) == list(experiments.PAIRS) and len(out.table_rows()) == len(experiments.PAIRS)
    assert np.allclose(out.contexts["supports"], ntp.cosine_matrix(story_data.S.T))
    assert np.allclose(out.words["UFM"], ntp.cosine_matrix(emb["UFM"][0], center=True))
    row = out.rows["ufm_mm_words"]                                  # the UFM's own untrained copies are its control
    r0 = [ntp.offdiag_corr(ntp.cosine_matrix(W, center=True), out.words["L^mm factors"])
          for W, _ in copies["UFM"]]
    assert row["r untrained"] == pytest.approx(np.mean(r0))
    assert row["r"] == pytest.approx(ntp.offdiag_corr(out.words["UFM"], out.words["L^mm factors"]))


def test_untrained_readouts_draw_the_models_initialisation(story_data):
    import torch

    from lib.conditional_models import TransformerModel

    torch.manual_seed(0)
    fresh = TransformerModel(story_data.contexts, story_data.V, hidden=8, layers=1, heads=4)
    redrawn = TransformerModel(story_data.contexts, story_data.V, hidden=8, layers=1, heads=4)
    experiments.reinitialise(redrawn.lm, torch.Generator().manual_seed(3))
    for (name, a), b in zip(fresh.named_parameters(), redrawn.parameters()):
        a, b = a.detach(), b.detach()
        if a.std() == 0:                                          # layer norms and biases: constants
            assert torch.equal(a, b), name
        else:                                                     # weights: N(0, 0.02²), a new draw
            assert not torch.equal(a, b) and float(b.std()) == pytest.approx(float(a.std()), rel=0.35), name
    with torch.no_grad():                                          # a trained-looking model: every weight moved
        for param in redrawn.parameters():
            param.add_(1.0)
    experiments.reinitialise(redrawn.lm, torch.Generator().manual_seed(3))
    for (name, a), b in zip(fresh.named_parameters(), redrawn.parameters()):
        if a.detach().std() == 0:
            assert torch.equal(a.detach(), b.detach()), name       # layer norms 1 and 0, biases 0 again
    outs = experiments.untrained_readouts(story_data, hidden=8, layers=1, n=3, seed=0)
    again = experiments.untrained_readouts(story_data, hidden=8, layers=1, n=3, seed=0)
    assert len(outs) == 3 and all(o["readout_error"] < 1e-4 for o in outs)
    assert np.array_equal(outs[1]["H"], again[1]["H"])            # deterministic given the seed
    assert not np.allclose(outs[0]["H"], outs[1]["H"])            # distinct draws
    with pytest.raises(ntp.NTPError, match="at least 2"):
        experiments.untrained_readouts(story_data, hidden=8, layers=1, n=1, seed=0)


def test_transformer_readout_gives_the_model_logits(story_data):
    out = experiments.train_transformer(story_data, hidden=8, layers=1, steps=20, lr=1e-2)
    at_init = experiments.train_transformer(story_data, hidden=8, layers=1, steps=0)
    assert out["losses"][0] == pytest.approx(float(at_init["final_ce"]), rel=1e-5)   # the π-weighted CE
    assert out["readout_error"] < 1e-4                        # WH is the model's last-position logits
    assert np.allclose(out["L"], out["W"] @ out["H"])
    assert out["losses"][-1] < out["losses"][0]
    assert float(out["final_ce"]) == pytest.approx(ntp.cross_entropy(story_data.pi, story_data.P, out["L"]))
    with pytest.raises(ntp.NTPError, match="contexts"):
        experiments.train_transformer(ntp.synthetic_data(V=4, m=3, k=2), hidden=8, layers=1, steps=1)


def test_subspace_collapse_by_hand():
    """Supports {0,1}, {0,1}, {0,1}, {2}, {2}, {1,2}: three pairs share a support of size two; the
    pair sharing {2} is too small to count."""
    S = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 1], [0, 0, 0, 1, 1, 1]], float)
    data = ntp.NTPData(pi=np.full(6, 1 / 6), P=S / S.sum(0))
    C = np.eye(6)
    C[0, 1], C[0, 2], C[1, 2], C[3, 4], C[0, 5] = 0.5, 0.9, 0.7, 0.99, 0.1
    C = np.maximum(C, C.T)
    out = experiments.subspace_collapse(data, C, top=2)
    assert out.pairs == 3 and out.mean_cos == pytest.approx(0.7)
    assert [r["cos"] for r in out.rows] == pytest.approx([0.9, 0.7])            # the closest pairs first
    assert out.rows[0]["context"] == "context 0" and out.rows[0]["context ′"] == "context 2"
    assert out.all_pairs_mean_cos == pytest.approx((0.5 + 0.9 + 0.7 + 0.99 + 0.1) / 15)
    assert experiments.subspace_collapse(data, C * 0).mean_cos == 0.0
    alone = ntp.NTPData(pi=np.full(2, 0.5), P=np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert experiments.subspace_collapse(alone, np.eye(2)).mean_cos is None


def test_mean_and_se_by_hand():
    assert experiments.mean_and_se([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1 / math.sqrt(3)))
    with pytest.raises(ntp.NTPError, match="two"):
        experiments.mean_and_se([1.0])


# --- §6 spectra ------------------------------------------------------------------------------------

def test_energy_count_and_effective_rank_by_hand():
    assert experiments.energy_count([3.0, 1.0, 0.1]) == 2          # 9/10.01 < 0.99 ≤ 10/10.01
    assert experiments.energy_count([1.0, 0.0]) == 1
    assert experiments.effective_rank(np.diag([1.0, 1e-3, 1e-4])) == 1
    assert experiments.effective_rank(np.eye(4)) == 4
    assert np.allclose(experiments.centred(np.array([[1.0, 2.0], [3.0, 6.0]])), [[-1, -2], [1, 2]])


def test_logit_spectra_trains_the_narrow_ufms(story_data):
    spectra = experiments.logit_spectra(story_data, {"L*": ntp.l_star(story_data.P)}, [1, 2], steps=50, lr=1e-2,
                                        seed=0)
    assert set(spectra) == {"L*", "UFM d=1", "UFM d=2"}
    assert experiments.energy_count(spectra["UFM d=1"], share=1 - 1e-12) == 1    # rank one
    W, H, _ = ntp.ufm_train(story_data.pi, story_data.P, 2, steps=50, lr=1e-2, weight_decay=0.01, seed=0)
    assert np.allclose(spectra["UFM d=2"], np.linalg.svd(experiments.centred(W @ H), compute_uv=False))
    assert np.allclose(spectra["L*"], np.linalg.svd(experiments.centred(ntp.l_star(story_data.P)), compute_uv=False))
