"""The chapter "Learning coefficients"'s study of a language model: λ̂ across the checkpoints of a mini-Pythia
model the Introduction trains (:func:`llc_over_training`, after Hoogland et al. 2024), and the model's shape at a
profile (:func:`suite_config`), which the chapter's cost declaration and the chapter "LLC theorems" read.
"""
from __future__ import annotations

import torch

from .. import substrate
from ..llc import estimate_llc, warnings_to_terminal
from ..models import mini_pythia
from ..models.causal_lm import sequence_loss
from ..text.tokenization import tokenizer_vocab_size


def llc_over_training(suite, size: str, windows: torch.Tensor, *, gamma, eps, chains, draws, burn_in, batch_size,
                      seed, device="auto") -> list[dict]:
    """λ̂ at every checkpoint of one model of a :class:`lib.models.mini_pythia.Suite` (Hoogland et al. 2024).

    L_n is the mean next-token loss on ``windows`` (a (n, T) token tensor, one window one sample) and nβ = n/log n;
    the SGLD settings are :func:`lib.llc.estimate_llc`'s. Returns one row per checkpoint: step, λ̂ ± s.e., L_n(w*),
    the held-out loss the suite recorded there, split R̂ and the fraction of chains that diverged."""
    history = suite.history[size]
    rows = []
    for step in suite.checkpoint_steps:
        lm = suite.load(size, step, device=device)
        lm.model.set_attn_implementation("eager")  # plain attention ops batch under vmap; fused SDPA does not
        with warnings_to_terminal():
            res = estimate_llc(lm.model, sequence_loss, (windows,), gamma=gamma, eps=eps, chains=chains, draws=draws,
                               burn_in=burn_in, batch_size=batch_size, seed=seed, device=device, progress=False)
        rows.append({"step": step, "llc": res.llc, "se": res.se, "init_loss": res.init_loss,
                     "heldout_loss": history["heldout_loss"][history["checkpoint_step"].index(step)],
                     "rhat": res.diagnostics["rhat"], "diverged": res.divergent_fraction,
                     "params": sum(p.numel() for p in lm.model.parameters())})
    return rows


def suite_config(profile: str, seed: int, size: str, smoke: bool = False):
    """The ``transformers`` config of mini-Pythia ``size`` as the Introduction's presets at ``profile``
    (``smoke``: its smoke sizes) train it, with the vocabulary of its tokenizer
    (:func:`lib.text.tokenization.tokenizer_vocab_size`, looked up in the local Hugging Face cache for a hub or
    folder tokenizer), and its checkpoint steps."""
    p = substrate.intro_settings(profile, seed, "cpu", smoke)
    config = mini_pythia.mini_pythia_config(size, tokenizer_vocab_size(p["tokenizer"], look_up_local=True),
                                            p["context_length"])
    return config, mini_pythia.log_spaced_steps(p["train_steps"], 8)


__all__ = ["llc_over_training", "suite_config"]
