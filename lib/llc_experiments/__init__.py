"""The chapter "Learning coefficients"'s studies, verdicts and cost declaration (``chapters/llc.yml``'s ``costs:``).

The estimator itself is :mod:`lib.llc` and the closed forms, models and problems with known λ are
:mod:`lib.known_llc`; here they are put to the chapter's tests, in two parts:

* :mod:`lib.llc_experiments.known_cases`: the estimator checked on models whose λ is known (the regular model
  against the exact value of its Euler scheme, reduced-rank regression at one nβ and in the limit nβ → ∞,
  normal crossings against quadrature, noisy labels at the empirical minimiser), with the verdicts on them
  (:func:`beyond_tolerance_z`, :data:`RRR_BAND`, :data:`MIXED_RHAT`, :data:`MIXED_ESS`) and the validators the declaration names;
* :mod:`lib.llc_experiments.language_model`: λ̂ across a mini-Pythia model's checkpoints;
* :mod:`lib.llc_experiments.real_model`: λ̂ of one part of a released model's weights (the rest frozen) beside
  its untrained twin's.

Their public names are importable from here; :func:`heavy_steps` is the whole chapter's cost declaration (the
known-λ part alone is :func:`lib.llc_experiments.known_cases.heavy_steps`).
"""
from __future__ import annotations

from ..book.costs import HeavyStep
from ..llc import lm_sgld_cost
from . import known_cases
from .known_cases import (BIAS_TOLD, MIXED_ESS, MIXED_RHAT, RRR_BAND, CrossingLimit, KnownCaseEstimate, NbetaLimit,
                          PrecisionPoint, RegularCheck, RRRValidation, band_fractions, beyond_tolerance_z,
                          check_crossing_cases, check_rrr_cases, check_singular_crossing, crossing_at_precision,
                          crossing_cases_problem, crossing_points, log_form_check, noisy_rrr,
                          normal_crossing_limits, regular_check, rrr_case_problem, rrr_cases_problem,
                          singular_crossing_problem, validate_rrr)
from .language_model import llc_over_training, suite_config
from . import real_model


def heavy_steps(values: dict) -> list:
    """The heavy steps of the chapter "Learning coefficients" at the resolved parameter ``values``: the known-λ
    problems (:func:`lib.llc_experiments.known_cases.heavy_steps`; at most a few dozen parameters per chain, they
    cost chain-steps and a few MB), then the step that grows with the paper's scale: SGLD on the mini-Pythia
    model ``lm_size`` at every checkpoint (:func:`llc_over_training`)."""
    config, checkpoints = suite_config(values["profile"], values["seed"], values["lm_size"], values["smoke_upstream"])
    peak, flops = lm_sgld_cost(config, chains=values["lm_chains"], steps=values["lm_draws"],
                               batch_size=values["lm_batch_size"], windows=values["lm_windows"])
    lm = HeavyStep(f"SGLD on mini-Pythia {values['lm_size']} at {len(checkpoints)} checkpoints",
                   f"{config.vocab_size} tokens, context {config.max_position_embeddings}, {values['lm_chains']} chains "
                   f"× {values['lm_draws']} steps × {values['lm_batch_size']} windows",
                   peak_bytes=peak, flops=flops * len(checkpoints), shrink="lm_chains or lm_batch_size")
    return known_cases.heavy_steps(values) + [lm] + real_model_steps(values)


def real_model_steps(values: dict) -> list:
    """The heavy step of the released model's section (:func:`lib.llc_experiments.real_model.trained_vs_twin`)
    at ``values``: none when ``real_model`` is ``none``."""
    if values.get("real_model", "none") == "none":  # values of a declaration before this section: none
        return []
    shape = real_model.model_shape(values["real_model"])
    d = real_model.shape_part_size(shape, values["real_part"])
    peak, flops = real_model.real_model_cost(
        shape, part_d=d, from_top=values["real_layer_from_top"], windows=values["real_windows"],
        context=values["real_context"], chains=values["real_chains"], draws=values["real_draws"],
        batch_size=values["real_batch_size"])
    return [HeavyStep(f"SGLD on {values['real_part']} of {values['real_model']} and its twin",
                      f"d = {d}, {values['real_chains']} chains × {values['real_draws']} steps × "
                      f"{values['real_batch_size']} windows of {values['real_context']} tokens, vocabulary "
                      f"{shape.vocab_size}", peak_bytes=peak, flops=flops, shrink="real_chains or real_draws")]


__all__ = ["CrossingLimit", "KnownCaseEstimate", "MIXED_ESS", "MIXED_RHAT", "NbetaLimit", "RRRValidation",
           "RRR_BAND", "RegularCheck", "band_fractions", "beyond_tolerance_z", "check_crossing_cases", "check_rrr_cases", "crossing_cases_problem",
           "heavy_steps", "llc_over_training", "log_form_check", "noisy_rrr", "normal_crossing_limits",
           "regular_check", "real_model", "real_model_steps", "rrr_case_problem", "rrr_cases_problem", "suite_config", "validate_rrr"]
