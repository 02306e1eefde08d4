"""The cost of a run before it starts: heavy steps, the device, the refusal of a step that cannot fit."""
import dataclasses
import math

import pytest

from lib.book import costs
from lib.book.chapters import chapters
from lib.book.parameters import ParameterError
from lib.book.runner import fits_the_device

STEP = costs.HeavyStep("the extended logit matrix", "|H| = 10000, |F| = 10000, k = 50", 38e9, 2e15,
                       "n_spans or k")


def test_a_step_that_does_not_fit_is_named_with_its_sizes_and_what_shrinks_it():
    small = costs.HeavyStep("a product", "n = 10", 1e6, 2e3)
    costs.check_fits("logit_rank", [small], costs.named_gpu(24, 80))
    with pytest.raises(costs.DoesNotFit) as err:
        costs.check_fits("logit_rank", [small, STEP], costs.named_gpu(24, 80))
    assert str(err.value) == ("logit_rank: the extended logit matrix at |H| = 10000, |F| = 10000, k = 50 needs 38 GB; "
                              "a 24 GB GPU at 80 TFLOP/s (stated) has 24 GB: lower n_spans or k")
    costs.check_fits("logit_rank", [small, STEP], costs.named_gpu(80, 80))  # 38 GB fits 80 GB


def test_plan_lines_add_the_time_at_the_devices_rate():
    device = costs.Device("test", 100e9, 1e12)
    lines = costs.plan_lines("logit_rank", [STEP, costs.HeavyStep("b", "n = 1", 1e3, 1e12)], device)
    assert lines[0].startswith("logit_rank on test, 100 GB, 1e+03 GFLOP/s measured")
    assert "peak 38 GB (fits), 2 PFLOP, ~33.3 min" in lines[1] and "~1 s" in lines[2]
    assert lines[3].startswith("    total: 2 PFLOP, ~33.4 min")
    assert "no heavy steps declared" in costs.plan_lines("hilbert", [], device)[0]
    assert "DOES NOT FIT" in costs.plan_lines("x", [STEP], costs.Device("small", 1e9, 1e9))[1]


def test_this_machine_is_measured():
    rate = costs.measure_matmul_flops("cpu", n=128, repeats=2)
    assert 1e6 < rate < 1e14
    cpu = costs.this_device("cpu", measure=False)
    assert cpu.memory_bytes > 1e8 and math.isnan(cpu.flops_per_s)


def test_the_runner_refuses_before_any_work_a_run_that_cannot_fit():
    hilbert = chapters()["hilbert"]
    values = hilbert.resolve({})
    fits_the_device(hilbert, values)  # no heavy steps: nothing to refuse
    huge = dataclasses.replace(hilbert, costs=lambda v: [costs.HeavyStep("the Gram matrix", "n = 10⁷", 1e18, 1e21,
                                                                         "alphabet_size")])
    with pytest.raises(ParameterError, match=r"hilbert: the Gram matrix at n = 10⁷ needs 1e\+09 GB; CPU .* has .*: "
                                             r"lower alphabet_size"):
        fits_the_device(huge, values)
