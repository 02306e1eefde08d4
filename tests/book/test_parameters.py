"""Parameter specifications: types, allowed values, presets, parameters cells."""
import re

import pytest

from lib.book.chapters import PROFILES, chapters, get_chapter
from lib.book.parameters import (Constraint, Param, ParameterError, ParamSpec, parameters_cell_values, parse_cli_value,
                                 suggest)


def test_type_and_allowed_values_are_enforced_with_named_messages():
    p = Param("profile", str, "ci", allowed=("ci", "paper"))
    assert p.check("paper") == "paper"
    with pytest.raises(ParameterError, match=r"parameter 'profile'.*'ci', 'paper'.*got 'cpi' \(str\)"):
        p.check("cpi")
    with pytest.raises(ParameterError, match=r"parameter 'profile'.*got 3 \(int\)"):
        p.check(3)


def test_numbers_bounds_bool_and_none():
    seed = Param("seed", int, 0, minimum=0)
    assert seed.check(5) == 5
    for bad in (-1, 1.5, True, "3", None):
        with pytest.raises(ParameterError, match="parameter 'seed'"):
            seed.check(bad)
    rate = Param("rate", float, 0.1, maximum=1.0, allow_none=True)
    assert rate.check(1) == 1.0 and isinstance(rate.check(1), float)
    assert rate.check(None) is None
    with pytest.raises(ParameterError, match="<= 1.0"):
        rate.check(2.0)


def test_list_items():
    p = Param("sizes", list, None, item_allowed=("a", "b"), allow_none=True)
    assert p.check(("a", "b")) == ["a", "b"]
    with pytest.raises(ParameterError, match="items from 'a', 'b'"):
        p.check(["a", "z"])


def test_unknown_name_lists_known_names():
    spec = ParamSpec((Param("seed", int, 0), Param("device", str, "auto")))
    with pytest.raises(ParameterError, match=r"unknown parameter 'seeed'.*seed, device"):
        spec.check({"seeed": 1})


def test_misspelt_names_get_the_closest_known_name():
    assert suggest("sed", ["profile", "seed", "device"]) == " (did you mean 'seed'?)"
    assert suggest("zzzz", ["profile", "seed", "device"]) == ""
    spec = ParamSpec((Param("seed", int, 0), Param("device", str, "auto")))
    with pytest.raises(ParameterError, match=r"did you mean 'device'\?"):
        spec.check({"devise": "cpu"})


def test_cli_values_and_parameters_cell():
    assert parse_cli_value("3") == 3
    assert parse_cli_value("0.5") == 0.5
    assert parse_cli_value("None") is None
    assert parse_cli_value("['p-tiny']") == ["p-tiny"]
    assert parse_cli_value("bpe:4096") == "bpe:4096"
    assert parameters_cell_values('profile = "ci"\nseed = 0\nx = None\n') == {"profile": "ci", "seed": 0, "x": None}
    with pytest.raises(ParameterError, match="only assignments of literals"):
        parameters_cell_values("import os\n")
    with pytest.raises(ParameterError, match="'seed' must be a literal"):
        parameters_cell_values("seed = len('ab')\n")


def test_every_chapter_has_common_parameters_and_complete_presets():
    for chapter in chapters().values():
        names = chapter.spec.names
        assert names[:3] == ["profile", "seed", "device"], chapter.id
        for profile in PROFILES:
            resolved = chapter.resolve({"profile": profile})
            assert None not in resolved.values(), (chapter.id, profile)


def test_resolve_fills_presets_and_keeps_overrides():
    intro = get_chapter("intro")
    ci = intro.resolve({})
    assert ci["profile"] == "ci" and ci["train_steps"] == intro.presets["ci"]["train_steps"]
    assert intro.resolve({"train_steps": 7})["train_steps"] == 7
    with pytest.raises(ParameterError, match="parameter 'train_steps'"):
        intro.resolve({"train_steps": "many"})
    with pytest.raises(ParameterError, match="unknown chapter"):
        get_chapter("nope")


def test_a_parameters_own_check_and_what_the_machine_must_provide():
    here = {"yes"}
    p = Param("spec", str, "a:1", forms="'a:<int>'", validate=lambda v: None if v[2:].isdigit() else "not an int",
              requires=lambda v: None if v in here else "not here")
    assert p.check("a:2") == "a:2" and p.describe() == "'a:<int>'"
    with pytest.raises(ParameterError, match=r"^parameter 'spec': allowed values are 'a:<int>'; got 'a:x' \(str\): "
                                             r"not an int$"):
        p.check("a:x")
    p.check("a:3")  # syntax only: what the machine provides is the preflight's business
    with pytest.raises(ParameterError, match=r"got 'a:3' \(str\): not here$"):
        p.preflight("a:3")
    here.add("a:3")
    p.preflight("a:3")
    ParamSpec((p,)).preflight({"spec": "a:3"})


def test_constraints_evaluate_safe_expressions_only():
    c = Constraint("k", "V ** (2 * k) <= 2 ** 20", "tensors must fit")
    assert c.names() == {"V", "k"}
    c.enforce({"V": 3, "k": 6})
    with pytest.raises(ParameterError, match=r"^parameter 'k': allowed values satisfy V \*\* \(2 \* k\) <= 2 \*\* 20 "
                                             r"\(with V = 3\), tensors must fit; got 7$"):
        c.enforce({"V": 3, "k": 7})
    with pytest.raises(ParameterError, match=r"got 1000000000$"):  # refused at once, not computed
        c.enforce({"V": 3, "k": 10 ** 9})
    assert Constraint("xs", "len(xs) <= max(a, 2)").holds({"xs": [1, 2], "a": 1})
    for unsafe in ("__import__('os').system('true')", "(1).real", "[x for x in a]", "open('f')"):
        with pytest.raises(ValueError, match="not allowed|may be called"):
            Constraint("a", unsafe).holds({"a": [1]})


def test_integer_at_least_names_the_parameter():
    import numpy as np

    from lib.book.parameters import integer_at_least

    assert integer_at_least("chains", 4) == 4 and integer_at_least("r", np.int64(0), 0) == 0
    for bad in (0, -3, 2.0, True, "3", None):
        with pytest.raises(ValueError, match=r"parameter 'chains' must be an integer >= 1; got"):
            integer_at_least("chains", bad)

    class Mine(ValueError):
        pass

    with pytest.raises(Mine):
        integer_at_least("k", 1, 2, Mine)


def test_list_shapes_refuse_each_kind_of_wrong_value_and_name_the_item():
    from lib.book.parameters import Shape

    case = Shape(list, length=4, items=Shape(int, minimum=0))
    cases = Shape(list, min_length=1, items=case)
    p = Param("rrr_cases", list, None, shape=cases, allow_none=True)
    assert p.check([[5, 3, 5, 0]]) == [[5, 3, 5, 0]]
    for bad, why in (([[5, 3, 5]], "item [0]: 3 items, not 4"), ([], "0 items, fewer than 1"),
                     ([[5, 3, 5, -1]], "item [0][3]: -1 is below 0"), ([[5, 3, 5, 0.5]], "item [0][3]: 0.5 is not int"),
                     ([[5, 3, 5, True]], "item [0][3]: True is not int"), ([["a", 3, 5, 0]], "item [0][0]: 'a' is not int"),
                     ("[[5,3,5,0]]", "got '[[5,3,5,0]]' (str)")):
        with pytest.raises(ParameterError, match="parameter 'rrr_cases'") as err:
            p.check(bad)
        assert why in str(err.value), (bad, str(err.value))
    assert "list (at least 1 item) of list (4 items) of int >= 0" in p.describe()
    ranks = Param("ranks", list, None, shape=Shape(list, min_length=1, unique=True, increasing=True,
                                                   items=Shape(int, minimum=1, maximum=512)), allow_none=True)
    assert ranks.check([1, 4, 8]) == [1, 4, 8]
    for bad, why in (([1, 4, 100000], "item [2]: 100000 is above 512"), ([4, 1], "not increasing"),
                     ([1, 1], "the items repeat"), ([0], "item [0]: 0 is below 1")):
        with pytest.raises(ParameterError, match=re.escape(why)):
            ranks.check(bad)
    gammas = Param("sweep_gamma", list, None, shape=Shape(list, items=Shape(float, minimum=0.0)), allow_none=True)
    assert gammas.check([1, 2.5]) == [1, 2.5]
    with pytest.raises(ParameterError, match=r"parameter 'sweep_gamma'.*item \[0\]: 'a' is not float"):
        gammas.check(["a"])
    with pytest.raises(ParameterError, match="is not a finite number"):
        gammas.check([float("inf")])


def test_constraints_read_membership_and_other_parameters():
    one_of = Constraint("compare_rank", "compare_rank in ranks", "the comparison needs its rank's fit")
    one_of.enforce({"compare_rank": 4, "ranks": [1, 4, 8]})
    with pytest.raises(ParameterError, match=r"parameter 'compare_rank': allowed values satisfy compare_rank in ranks "
                                             r"\(with ranks = \[1, 4, 8\]\), the comparison needs its rank's fit; got 3"):
        one_of.enforce({"compare_rank": 3, "ranks": [1, 4, 8]})
    less = Constraint("burn_in", "burn_in < draws")
    less.enforce({"burn_in": 99, "draws": 100})
    with pytest.raises(ParameterError, match="got 100"):
        less.enforce({"burn_in": 100, "draws": 100})
    index = Constraint("earlier_checkpoint", "0 <= earlier_checkpoint < len(steps)")
    index.enforce({"earlier_checkpoint": 2, "steps": [0, 1, 10]})
    with pytest.raises(ParameterError):
        index.enforce({"earlier_checkpoint": 99, "steps": [0, 1, 10]})
    with pytest.raises(ValueError, match="is not allowed"):
        Constraint("x", "[y for y in x]").names()
    with pytest.raises(ValueError, match="only"):
        Constraint("x", "open(x)").names()


def test_a_declared_validator_is_a_lib_function_by_name():
    from lib.book.parameters import named_validator

    check = named_validator("lib.book.parameters:parse_cli_value")  # any lib function: called with the value
    assert check("[1, 2]") == [1, 2]
    with pytest.raises(ValueError, match="lib.module:function"):
        named_validator("os:system")
    with pytest.raises(ValueError, match="is not a function"):
        named_validator("lib.book.parameters:NO_SUCH")(1)


def test_increasing_means_strictly_increasing_without_unique():
    """``increasing`` alone (no ``unique`` to catch a repeat first) refuses equal neighbours: [1, 1, 2] is not
    increasing, as [2, 1] is not; [1, 2, 3] is. Both the list's shape and a parameter with that shape."""
    from lib.book.parameters import Shape

    shape = Shape(list, increasing=True, items=Shape(int))
    assert shape.problem([1, 2, 3]) is None and shape.problem([5]) is None and shape.problem([]) is None
    for bad in ([1, 1, 2], [2, 1], [1, 2, 2]):
        assert shape.problem(bad) == "the items are not increasing", bad
    lengths = Param("history_lengths", list, None, shape=shape, allow_none=True)
    assert lengths.check([1, 2, 3]) == [1, 2, 3]
    for bad in ([1, 1, 2], [2, 1]):
        with pytest.raises(ParameterError, match=r"parameter 'history_lengths'.*the items are not increasing"):
            lengths.check(bad)
    floats = Shape(list, increasing=True, items=Shape(float))
    assert floats.problem([0.1, 0.2]) is None and floats.problem([0.1, 0.1]) == "the items are not increasing"


def test_a_named_validator_can_be_left_to_the_book_check_and_a_local_one_cannot():
    """``library=False`` (reading a declaration's own presets) skips a validator named as ``lib.module:function``,
    whose module may take seconds to import; a validator written in lib.book, and a reader's value checked
    by default, are never skipped."""
    from lib.book.parameters import is_named, named_validator

    named = named_validator("lib.book.chapters:hub_model_source_problem")
    assert is_named(named) and not is_named(lambda v: None)
    p = Param("hub_model", str, "suite", validate=named)
    assert p.check("/no/such/model", library=False) == "/no/such/model"
    with pytest.raises(ParameterError, match="parameter 'hub_model'.*no such folder"):
        p.check("/no/such/model")
    local = Param("spec", str, "a", validate=lambda v: None if v == "a" else "not a")
    with pytest.raises(ParameterError, match="not a"):
        local.check("b", library=False)
    spec = ParamSpec((p,))
    assert spec.check({"hub_model": "/no/such"}, library=False) == {"hub_model": "/no/such"}
    with pytest.raises(ParameterError):
        spec.check({"hub_model": "/no/such"})
