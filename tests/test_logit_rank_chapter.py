"""The chapter "Logit rank" refuses, before any kernel starts, parameter values it cannot run (each rule of
chapters/logit_rank.yml both ways: a value just inside passes, one just outside is refused, naming the
parameter), and the suite facts its rules rely on."""
import inspect

import pytest

from lib.book.chapters import get_chapter
from lib.book.parameters import ParameterError

HUB = {"hub_model": "EleutherAI/pythia-70m", "hub_revisions": ["step0", "step1000", "step143000"]}


@pytest.fixture(scope="module")
def chapter():
    return get_chapter("logit_rank")


@pytest.mark.parametrize("good, bad, name", [
    ({"compare_rank": 3}, {"compare_rank": 31}, "compare_rank"),           # any rank ≤ n_spans/4, in ranks or not
    ({"ranks": [1, 4, 120]}, {"ranks": [1, 4, 100000]}, "ranks"),
    ({"ranks": [1]}, {"ranks": [0, 4]}, "ranks"),
    ({"earlier_checkpoint": 6}, {"earlier_checkpoint": 7}, "earlier_checkpoint"),       # 8 checkpoints: 0..6
    ({"earlier_checkpoint": -8}, {"earlier_checkpoint": -9}, "earlier_checkpoint"),
    ({"earlier_checkpoint": -2}, {"earlier_checkpoint": -1}, "earlier_checkpoint"),     # never the last
    ({"earlier_checkpoint": 0}, {"earlier_checkpoint": 99}, "earlier_checkpoint"),
    ({**HUB, "earlier_checkpoint": 1}, {**HUB, "earlier_checkpoint": 2}, "earlier_checkpoint"),
    ({**HUB, "earlier_checkpoint": -3}, {**HUB, "earlier_checkpoint": -4}, "earlier_checkpoint"),
    (HUB, {**HUB, "hub_revisions": ["step0", "step143000"]}, "hub_revisions"),
    ({"train_rank": 10}, {"train_rank": 11}, "train_rank"),                 # n_train = 40
    ({"angle_claim_rank": 30}, {"angle_claim_rank": 31}, "angle_claim_rank"),
    ({"angle_ranks": [5, 120]}, {"angle_ranks": [5, 121]}, "angle_ranks"),
    ({"overlap_rows": 120}, {"overlap_rows": 121}, "overlap_rows"),
    ({"downsize": [2, 225]}, {"downsize": [2, 226]}, "downsize"),          # n_spans/√i ≥ 8
    ({"downsize": [1.5]}, {"downsize": [1]}, "downsize"),
    ({"alpha_sizes": [8, 16]}, {"alpha_sizes": [7, 16]}, "alpha_sizes"),
    ({"alpha_sizes": [8, 16]}, {"alpha_sizes": [16]}, "alpha_sizes"),
    ({"lingen_targets": 3}, {"lingen_targets": 2}, "lingen_samples"),
    ({"n_train": 120}, {"n_train": 121}, "n_train"),
])
def test_rules_both_ways(chapter, good, bad, name):
    chapter.resolve(good)
    with pytest.raises(ParameterError, match=f"parameter '{name}'"):
        chapter.resolve(bad)


def test_both_profiles_satisfy_the_rules_and_take_a_corpus(chapter):
    for profile in ("ci", "paper"):
        values = chapter.resolve({"profile": profile})
        assert values["corpus"] and values["max_corpus_mb"] > 0
    chapter.resolve({"corpus": "default", "max_corpus_mb": 5.0})


def test_the_suite_has_the_eight_checkpoints_the_rule_counts():
    """The earlier_checkpoint rule counts the suite's 8 checkpoints: train_suite's default, as the Introduction
    trains it (every profile's train_steps gives 8 distinct log-spaced steps)."""
    from lib.models import mini_pythia

    assert inspect.signature(mini_pythia.train_suite).parameters["n_checkpoints"].default == 8
    intro = get_chapter("intro")
    for profile in ("ci", "paper"):
        steps = intro.resolve({"profile": profile})["train_steps"]
        assert len(mini_pythia.log_spaced_steps(steps, 8)) == 8
