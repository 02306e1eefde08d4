"""Every rule of the chapters Introduction, Hilbert space, Modes, Examples, ISAN learning, Learning coefficients,
Insensitivity and LLC theorems, both ways.

Each rule a chapter relies on is declared in its yml (a list's shape, a bound, a constraint over
several parameters, or a named lib validator), so the runner refuses a wrong value before any
kernel starts. Each row below is a refused value, a fragment of the one-line refusal (which names
the parameter and what is allowed), and a nearby value that passes the same checks.
"""
import resource
import subprocess
import sys

import pytest

from lib import REPO_ROOT
from lib.book.chapters import chapters
from lib.book.parameters import ParameterError
from lib.book.runner import check_parameters

RULES = [
    # Introduction: the list of sizes has a shape, the window a bound
    ("intro", {"model_sizes": []}, "parameter 'model_sizes'", "0 items, fewer than 1", {"model_sizes": ["p-tiny"]}),
    ("intro", {"model_sizes": ["p-tiny", "p-tiny"]}, "parameter 'model_sizes'", "the items repeat",
     {"model_sizes": ["p-tiny", "p-small"]}),
    ("intro", {"context_length": 4096}, "parameter 'context_length'", "<= 2048", {"context_length": 2048}),
    # Hilbert space: dense tensors of |Σ|^n entries
    ("hilbert", {"block_length": 7}, "parameter 'block_length'", "alphabet_size ** (2 * block_length) <= 2 ** 20",
     {"block_length": 6}),
    ("hilbert", {"markov_order": 15}, "parameter 'markov_order'", "alphabet_size ** (markov_order + 1) <= 2 ** 24",
     {"markov_order": 14}),
    ("hilbert", {"max_length": 16}, "parameter 'max_length'", "alphabet_size ** max_length <= 2 ** 24",
     {"max_length": 15}),
    ("hilbert", {"sample_tokens": 10 ** 9}, "parameter 'sample_tokens'", "<= 100000000", {"sample_tokens": 10 ** 8}),
    ("hilbert", {"seed": 2 ** 32}, "parameter 'seed'", "<= 4294967295", {"seed": 2 ** 32 - 1}),
    # Modes: the planted probabilities, the history ladder
    ("modes", {"planted_absolute": [0.1, 0.1]}, "parameter 'planted_absolute'",
     "sum(planted_absolute) + sum(sum(planted_collective, [])) <= 0.15", {"planted_absolute": [0.1, 0.03]}),
    ("modes", {"planted_absolute": [0.0]}, "parameter 'planted_absolute'", "item [0]: 0.0 is below 1e-06",
     {"planted_absolute": [1e-6]}),
    ("modes", {"planted_collective": [[]]}, "parameter 'planted_collective'", "item [0]: 0 items, fewer than 1",
     {"planted_collective": [[0.01]]}),
    ("modes", {"planted_absolute": [], "planted_collective": []}, "parameter 'planted_absolute'",
     "the planted language needs at least one bigram", {"planted_absolute": [], "planted_collective": [[0.01]]}),
    ("modes", {"max_history": 2}, "parameter 'max_history'", ">= 3", {"max_history": 3}),
    ("modes", {"max_history": 5}, "parameter 'max_history'", "corpus_symbols ** (max_history + 1) <= 2 ** 24",
     {"max_history": 4}),
    ("modes", {"corpus_order": 3}, "parameter 'max_history'", "max_history >= max(3, corpus_order + 1)",
     {"corpus_order": 3, "max_history": 4}),
    ("modes", {"corpus_order": 5, "max_history": 6}, "parameter 'corpus_order'",
     "corpus_symbols ** (corpus_order + 1) <= 2 ** 24", {"corpus_order": 4, "max_history": 5, "corpus_symbols": 12}),
    # Examples: shapes of the orders, the planted orders' validator
    ("examples", {"orders": [[1, 1]]}, "parameter 'orders'", "item [0]: 2 items, not 3", {"orders": [[1, 1, 5]]}),
    ("examples", {"orders": [[0, 1, 5]]}, "parameter 'orders'", "item [0][0]: 0 is below 1", {"orders": [[1, 1, 1]]}),
    ("examples", {"planted_orders": [[3, 2]]}, "parameter 'planted_orders'", "k + l = 5 is above 4",
     {"planted_orders": [[3, 1]]}),
    ("examples", {"n_components": 5}, "parameter 'n_components'", ">= 10", {"n_components": 10}),
    ("examples", {"sweep_order": [1]}, "parameter 'sweep_order'", "1 items, not 2", {"sweep_order": [1, 1]}),
    ("examples", {"alpha_sweep": [-1.0]}, "parameter 'alpha_sweep'", "item [0]: -1.0 is below 0",
     {"alpha_sweep": [0.0]}),
    # ISAN learning: exact enumeration of Σ^T, shapes of the fitted axes
    ("isan", {"grid_T": [30]}, "parameter 'grid_T'", "item [0]: 30 is above 24", {"grid_T": [12]}),
    ("isan", {"grid_T": [20]}, "parameter 'grid_T'", "max(grid_alphabet) ** max(grid_T) <= 2 ** 24", {"grid_T": [12]}),
    ("isan", {"thm43_configs": [[2, 3, 16]]}, "parameter 'thm43_configs'", "|Σ|^T = 3^16 strings is above 2^24",
     {"thm43_configs": [[2, 3, 15]]}),
    ("isan", {"thm43_configs": [[2, 1, 5]]}, "parameter 'thm43_configs'", "an alphabet has at least 2 tokens",
     {"thm43_configs": [[2, 2, 5]]}),
    ("isan", {"copying_n": [13]}, "parameter 'copying_n'", "item [0]: 13 is above 12", {"copying_n": [12]}),
    ("isan", {"parity_y": [[1, 2]]}, "parameter 'parity_y'", "item [0][1]: 2 is above 1", {"parity_y": [[1, 0]]}),
    ("isan", {"parity_n": [4]}, "parameter 'parity_n'", "1 items, fewer than 2", {"parity_n": [4, 6]}),
    ("isan", {"approx_etas": [0.01, 0.01]}, "parameter 'approx_etas'", "the items repeat",
     {"approx_etas": [0.01, 0.001]}),
    ("isan", {"scaling_d": [4, 4]}, "parameter 'scaling_d'", "the items repeat", {"scaling_d": [2, 4]}),
    # Logit rank: lists of numbers, the earlier checkpoint before the last (the suite's 8 in ci)
    ("logit_rank", {"ranks": [1, 2.5]}, "parameter 'ranks'", "item [1]", {"ranks": [1, 2]}),
    ("logit_rank", {"angle_ranks": ["5"]}, "parameter 'angle_ranks'", "item [0]", {"angle_ranks": [5]}),
    ("logit_rank", {"alpha_sizes": [30]}, "parameter 'alpha_sizes'", "1 items, fewer than 2", {"alpha_sizes": [30, 60]}),
    ("logit_rank", {"downsize": [1.0]}, "parameter 'downsize'", "min(downsize) > 1", {"downsize": [1.5]}),
    ("logit_rank", {"earlier_checkpoint": -1}, "parameter 'earlier_checkpoint'", "earlier_checkpoint != -1",
     {"earlier_checkpoint": -2}),
    ("logit_rank", {"earlier_checkpoint": 7}, "parameter 'earlier_checkpoint'", "<= 8 * (hub_model == 'suite')",
     {"earlier_checkpoint": 6}),
    ("logit_rank", {"earlier_checkpoint": -9}, "parameter 'earlier_checkpoint'", "<= earlier_checkpoint",
     {"earlier_checkpoint": -8}),
    # Geometry of next-token prediction: four heads, UFM widths below V
    ("ntp", {"tf_hidden": 30}, "parameter 'tf_hidden'", "tf_hidden % 4 == 0", {"tf_hidden": 32}),
    ("ntp", {"small_d": [40]}, "parameter 'small_d'", "max(small_d) < vocab", {"small_d": [39]}),
    # Learning coefficients: the measured size is any mini-Pythia size (trained with the Introduction's recipe),
    # the language model's chains and minibatches, smoke sizes only on the paper profile
    ("llc", {"lm_size": "p-huge"}, "parameter 'lm_size'", "p-tiny", {"lm_size": "p-70m"}),
    ("llc", {"rrr_cases": [[5, 4, 5, 0], [5, 4, 5]]}, "parameter 'rrr_cases'", "item [1] = [5, 4, 5]: four entries",
     {"rrr_cases": [[5, 4, 5, 0], [5, 4, 5, 1]]}),
    ("llc", {"noisy_case": [5, 3, 5, 6]}, "parameter 'noisy_case'", "must be <= min(M, H, N) = 3",
     {"noisy_case": [5, 3, 5, 3]}),
    ("llc", {"nc_cases": [[1, 2, 3]]}, "parameter 'nc_cases'", "the quadrature takes 1 or 2 entries",
     {"nc_cases": [[1, 2]]}),
    ("llc", {"lm_burn_in": 120}, "parameter 'lm_burn_in'", "lm_burn_in < lm_draws", {"lm_burn_in": 119}),
    ("llc", {"lm_batch_size": 1025}, "parameter 'lm_batch_size'", "lm_batch_size <= lm_windows",
     {"lm_batch_size": 1024}),
    ("llc", {"smoke_upstream": True}, "parameter 'smoke_upstream'", "profile == 'paper' or not smoke_upstream",
     {"smoke_upstream": True, "profile": "paper"}),
    # Insensitivity: the GPT-NeoX hidden sizes split among 4 heads
    ("insensitivity", {"transformer_hidden": [8, 30]}, "parameter 'transformer_hidden'",
     "item [1] = 30 is not a multiple of 4", {"transformer_hidden": [8, 32]}),
    ("insensitivity", {"smoke_upstream": True}, "parameter 'smoke_upstream'",
     "profile == 'paper' or not smoke_upstream", {"smoke_upstream": False}),
    # LLC theorems: the same heads rule for the sampled transformers; widths and cutoffs of any size are allowed
    # (a width is trained with the recipe of "Insensitivity", a χ at or above the rank is q itself)
    ("llc_theorems", {"transformer_widths": [6]}, "parameter 'transformer_widths'",
     "item [0] = 6 is not a multiple of 4", {"transformer_widths": [8]}),
    ("llc_theorems", {"chis": [0, 3]}, "parameter 'chis'", "item [0]: 0 is below 1", {"chis": [1, 3, 500]}),
    ("llc_theorems", {"model_widths": []}, "parameter 'model_widths'", "0 items, fewer than 1",
     {"model_widths": [7]}),
]


def label(rule) -> str:
    chapter, bad = rule[0], rule[1]
    return chapter + ":" + ",".join(f"{k}={v}" for k, v in bad.items())


@pytest.mark.parametrize("chapter, bad, name, why, good", RULES, ids=[label(r) for r in RULES])
def test_each_rule_refuses_a_wrong_value_and_passes_a_near_one(chapter, bad, name, why, good):
    c = chapters()[chapter]
    with pytest.raises(ParameterError) as err:
        check_parameters(c, bad)
    assert str(err.value).startswith(name) and why in str(err.value), str(err.value)
    assert "got " in str(err.value)  # what was given
    check_parameters(c, good)


def test_every_rule_of_these_chapters_is_declared_not_checked_by_hand():
    """No chapter of this group checks a parameter in its cells: the first code cell is setup(...)."""
    from lib.book.chapters import read_notebook

    for chapter in ("intro", "hilbert", "modes", "examples", "isan", "llc", "insensitivity", "llc_theorems", "logit_rank"):
        nb = read_notebook(REPO_ROOT / chapters()[chapter].path)
        code = [cell.source for cell in nb.cells if cell.cell_type == "code"]
        assert f'setup("{chapter}")' in code[1], chapter
        assert not any("raise " in src for src in code), chapter


CLI_ROWS = [  # one per chapter through the command line: exit 2, one line, nothing written, within CPU_LIMIT_S
    (["intro", "-p", "model_sizes", "['p-tiny', 'p-tiny']"], "parameter 'model_sizes'", "the items repeat", None),
    (["hilbert", "-p", "max_length", "16"], "parameter 'max_length'", "alphabet_size ** max_length <= 2 ** 24", None),
    (["modes", "-p", "planted_absolute", "[0.1, 0.1]"], "parameter 'planted_absolute'", "<= 0.15", None),
    (["examples", "-p", "planted_orders", "[[3, 2]]"], "parameter 'planted_orders'", "k + l = 5 is above 4",
     "lib.examples_experiments"),
    (["isan", "-p", "grid_T", "[30]"], "parameter 'grid_T'", "item [0]: 30 is above 24", None),
    (["insensitivity", "-p", "transformer_hidden", "[8, 30]"], "parameter 'transformer_hidden'",
     "item [1] = 30 is not a multiple of 4", "lib.conditional_models"),
]

# A refusal's CPU time: Python, lib.book and the one declaration the command reads (jupytext parses its notebook),
# measured at 0.6-0.9 s on the 2-core build machine while it ran other work; 2 s leaves twice that for a slower
# or busier machine (CPU time, not wall time, so other processes' load does not count). A rule that only the
# library can check (``validate: lib.module:function``) costs the import of that module on top, measured here.
CPU_LIMIT_S = 2.0


def children_cpu(command) -> tuple[subprocess.CompletedProcess, float]:
    """The command's result and the CPU time (user + system) it took, in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


@pytest.mark.parametrize("args, name, why, validator", CLI_ROWS, ids=[a[0] for a, _, _, _ in CLI_ROWS])
def test_the_runner_refuses_before_any_kernel_starts(args, name, why, validator, tmp_path):
    """Within CPU_LIMIT_S of the runner's own CPU time (plus, for a rule a library function checks, what
    importing its module costs), held to CPU time so that a machine shared with other work cannot fail it."""
    proc, cpu = children_cpu([sys.executable, "-m", "lib", "run", *args, "--out", str(tmp_path)])
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert name in proc.stderr and why in proc.stderr and "got " in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir())
    library = children_cpu([sys.executable, "-c", f"import {validator}"])[1] if validator else 0.0
    assert cpu < CPU_LIMIT_S + library, (cpu, library)
