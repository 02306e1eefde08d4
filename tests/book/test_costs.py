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


def test_host_steps_are_held_to_the_hosts_memory_and_priced_at_its_rate():
    """A 30 GB NumPy step on a 24 GB GPU whose host has 64 GB fits; on a host with 16 GB it is refused, naming
    the host; its time is the host's (30 TFLOP at 1e11 FLOP/s = 300 s), a device step's the GPU's."""
    host = costs.Device("CPU (2 threads)", 64e9, 1e11)
    counting = costs.HeavyStep("counting", "n = 1e9", 30e9, 30e12, "max_corpus_mb", host=True)
    gpu = costs.named_gpu(24, 80, host=host)
    costs.check_fits("examples", [counting], gpu)
    with pytest.raises(costs.DoesNotFit, match=r"examples: counting at n = 1e9 needs 30 GB; CPU \(small\) has 16 GB"):
        costs.check_fits("examples", [counting], costs.named_gpu(80, 80, host=costs.Device("CPU (small)", 16e9, 1e11)))
    with pytest.raises(costs.DoesNotFit):  # a device step of the same size does not fit the 24 GB GPU
        costs.check_fits("examples", [dataclasses.replace(counting, host=False)], gpu)
    lines = costs.plan_lines("examples", [counting, costs.HeavyStep("b", "n = 1", 1e3, 80e12)], gpu)
    assert "counting (n = 1e9) on the host, CPU (2 threads): peak 30 GB (fits), 30 TFLOP, ~5 min" in lines[1]
    assert "~1 s" in lines[2] and "~5.02 min" in lines[3]
    alone = costs.Device("CPU", 64e9, 1e11)  # on the CPU itself a host step is an ordinary step
    assert "on the host" not in costs.plan_lines("examples", [counting], alone)[1]


def test_a_step_without_a_memory_estimate_says_so():
    lines = costs.plan_lines("isan", [costs.HeavyStep("the learner", "T = 10", 0, 1e9)], costs.Device("d", 1e9, 1e9))
    assert "peak not estimated" in lines[1] and "peak 0" not in lines[1]


def test_plan_command_for_a_gpu_and_its_stated_host():
    """`plan --gpu 80 300 --host-gb 128`: Examples' host steps (41.7 GB at the paper preset) fit the stated host;
    on a 16 GB host they do not; --host-gb without --gpu is refused."""
    import subprocess
    import sys

    from lib import REPO_ROOT

    def plan(*args):
        return subprocess.run([sys.executable, "-m", "lib", "plan", "examples", "--profile", "paper", *args],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)

    big = plan("--gpu", "80", "300", "--host-gb", "128")
    assert big.returncode == 0, big.stderr
    host_lines = [line for line in big.stdout.splitlines() if "on the host, a host with 128 GB (stated)" in line]
    assert len(host_lines) == 2 and all("(fits)" in line for line in host_lines)
    small = plan("--gpu", "80", "300", "--host-gb", "16")
    assert small.stdout.count("DOES NOT FIT") == 2
    refused = plan("--host-gb", "16")
    assert refused.returncode == 2 and "--host-gb describes the host of a GPU" in refused.stderr
