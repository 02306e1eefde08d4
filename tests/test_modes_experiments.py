"""The experiments of the chapter Modes (lib.modes_experiments), on small exact languages."""
import numpy as np
import pytest

from lib import languages as L, modes_experiments as mx
from lib.modes import Modes


def test_case_errors_summarise_each_identity_over_the_cases_that_check_it():
    errors = mx.CaseErrors({"a (1, 1)": {"x": 1e-16, "y": 3e-15}, "b (2, 1)": {"x": 2e-16, "y": None},
                            "c (1, 2)": {"x": 5e-17}})
    assert errors.cases("y") == ["a (1, 1)"] and errors.cases("x") == ["a (1, 1)", "b (2, 1)", "c (1, 2)"]
    assert errors.largest("x") == 2e-16 and errors.worst_case("x") == "b (2, 1)"
    assert errors.largest_overall() == 3e-15
    rows = errors.summary({"x": "the x identity", "y": "the y identity", "z": "never checked"})
    assert rows == [{"identity": "the x identity", "cases": 3, "largest error": 2e-16, "where": "b (2, 1)"},
                    {"identity": "the y identity", "cases": 1, "largest error": 3e-15, "where": "a (1, 1)"}]
    assert mx.case_label("corpus", (2, 1)) == "corpus (2, 1)"


@pytest.fixture(scope="module")
def small_modes():
    chain, hmm = L.random_markov_chain(3, 1, rng=0), L.random_hmm(3, 2, rng=1)
    return {(name, kl): Modes.from_joint(lang.joint(*kl), zero_rows="drop")
            for name, lang in (("chain", chain), ("hmm", hmm)) for kl in ((1, 1), (2, 1))}


def test_identity_and_adjoint_checks_hold_to_rounding_on_every_case(small_modes):
    errors, histories = mx.identity_checks(small_modes)
    assert sorted(errors.errors) == ["chain (1, 1)", "chain (2, 1)", "hmm (1, 1)", "hmm (2, 1)"]
    assert histories == {"chain (1, 1)": 3, "chain (2, 1)": 9, "hmm (1, 1)": 3, "hmm (2, 1)": 9}  # every history
    assert errors.largest_overall() < 1e-12 and len(errors.cases("lemma_4_14")) == 4  # small: the mode basis too
    assert "lemma_4_10_histories" not in errors.errors["chain (1, 1)"]
    adjoint = mx.adjoint_checks(small_modes, seed=0)
    assert adjoint.largest_overall() < 1e-12 and len(adjoint.errors) == 4


def test_planted_readback_reads_the_chosen_probabilities_back():
    planted = mx.planted_readback([(1, 1), (2, 1)], 3, [0.04, 0.01], [[0.01, 0.005]], seed=2)
    assert planted.max_error < 1e-10 and planted.max_readback_error < 1e-10
    assert [r["bigram"] for r in planted.rows] == ["absolute", "absolute", "collective"]
    assert [r["chosen q(S)"] for r in planted.rows] == pytest.approx([0.04, 0.01, 0.015])
    assert [r["σ"] for r in planted.rows] == pytest.approx(np.sqrt([0.04, 0.01, 0.015]), abs=1e-10)
    assert mx.planted_readback([(1, 1)], 3, [0.04], [], seed=2).rows == []  # the table's order is (2, 1)


def test_literal_family_and_truncation_studies(small_modes):
    literal = mx.literal_family_study(small_modes)
    assert literal.max_gap < 1e-10 and literal.total_cutoffs == sum(m.rank - 1 for m in small_modes.values())
    assert literal.empty_cutoffs == sum(r["literal family empty"] for r in literal.rows) <= literal.total_cutoffs
    truncated = {mx.case_label(*key): small_modes[key] for key in [("chain", (1, 1)), ("hmm", (2, 1))]}
    study = mx.truncation_study(truncated)
    assert study.full_rank_error < 1e-8 and study.chi0_mi_error < 1e-9 and study.kl_max_increase < 1e-10
    assert study.all_optimal and study.max_suboptimality <= 2e-10
    assert study.cutoffs == sum(len(c.chis) for c in study.curves.values())
    for name, c in study.curves.items():
        assert study.infinite(name) == int(np.isinf(c.kl_naive).sum())
        assert c.kl_effective[0] == pytest.approx(truncated[name].mutual_information(), abs=1e-9)
    assert [r["joint"] for r in study.rows] == list(truncated)


def test_simultaneous_truncation_keeps_the_language_where_nothing_is_truncated():
    chain = L.random_markov_chain(3, 1, rng=4)
    family = mx.simultaneous_truncation_study({"chain": chain}, chis=(1, 9), orders=[(1, 1), (1, 2), (2, 1)])
    full = [r for r in family.rows if r["χ"] == 9]
    assert full[0]["|Ã − A|"] < 1e-8 and family.control < 1e-8  # at full rank q^(χ) = q: a language
    assert family.smallest_defect("chain") is not None and family.smallest_defect("nobody") is None
    last = mx.LAST_POSITION
    rows = [{"language": "x", last: 0.3, "Ã₃ from (1, 2) − from (2, 1)": 0.1, "|Ã − A|": 1.0},
            {"language": "x", last: 0.05, "Ã₃ from (1, 2) − from (2, 1)": 0.2, "|Ã − A|": 1.0},
            {"language": "x", last: 0.0, "Ã₃ from (1, 2) − from (2, 1)": 0.0, "|Ã − A|": 0.0}]
    assert mx.SimultaneousTruncation(rows, 0.0, 0.0).smallest_defect("x") == 0.2


def test_the_history_ladder_of_a_markov_chain_is_inherited_from_its_order():
    chain = L.random_markov_chain(3, 1, rng=5)
    hmm = L.random_hmm(3, 3, rng=6, concentration=0.3)
    ladder = mx.history_ladder({"chain": chain, "hmm": hmm}, {"chain": 1, "hmm": 1}, 3, ranks=(1, 2))
    assert ladder.ks == [1, 2, 3] and len(ladder.comparisons["chain"]) == 2
    assert ladder.sigma_drop <= 1e-12 and ladder.lift_error < 1e-12
    assert ladder.inheritance_error({"chain": 1}) < 1e-8
    assert ladder.inheritance_error({"hmm": 1}) > 1e-6  # an HMM is not inherited exactly
    assert len(ladder.spectra_rows()) == 4 and len(ladder.angle_rows((1, 2))) == 8
    assert ladder.left_angle("chain", ranks=(1,)) == [float(c.left_angles[1].max())
                                                      for c in ladder.comparisons["chain"]]
