"""Chapters, their parameters and their profiles.

Each chapter has a parameter specification (checked by the runner before execution and
by :func:`lib.chapter.setup` inside the notebook) and two presets:

* ``ci`` — minutes on 2 CPU cores (the chapter's budget is stated here and in the text),
  and still decides every claim;
* ``paper`` — the papers' scale: Hugging Face models and data, a GPU.

A parameter left as ``None`` in the ``parameters`` cell takes the profile's preset; a
value given by the reader (papermill ``-p``) overrides it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .params import Param, ParameterError, ParamSpec

PROFILES = ("ci", "paper")


def common_params() -> tuple[Param, ...]:
    """The parameters every chapter has."""
    return (
        Param("profile", str, "ci", "ci: minutes on 2 CPU cores; paper: the papers' scale on a GPU",
              allowed=PROFILES),
        Param("seed", int, 0, "seed of every random choice", minimum=0),
        Param("device", str, "auto", "auto takes CUDA when present", allowed=("auto", "cpu", "cuda")),
    )


def text_params() -> tuple[Param, ...]:
    """The parameters of a chapter that reads the corpus: source, size cap and tokenizer."""
    return (
        Param("corpus", str, None, "'default' (offline Python documentation), a local path, or 'hf:<dataset>'",
              allow_none=True),
        Param("max_corpus_mb", float, None, "read at most this many MB of a streamed corpus",
              minimum=0.01, allow_none=True),
        Param("tokenizer", str, None, "'bpe:<vocab size>', 'byte', or 'hf:<name or path>'", allow_none=True),
    )


@dataclass(frozen=True)
class Chapter:
    """One chapter: its id (file stem), source path, CI budget and parameter presets."""

    id: str
    path: str
    title: str
    budget_ci_s: int
    params: tuple[Param, ...] = ()
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def spec(self) -> ParamSpec:
        return ParamSpec(common_params() + self.params)

    def resolve(self, given: dict[str, Any]) -> dict[str, Any]:
        """Check ``given`` and fill every ``None`` with the profile's preset."""
        values = {**self.spec.defaults(), **self.spec.check(given)}
        preset = self.presets.get(values["profile"], {})
        for name, value in values.items():
            if value is None:
                if name not in preset:
                    raise ParameterError(f"parameter {name!r} is None and profile {values['profile']!r} has no preset for it")
                values[name] = self.spec[name].check(preset[name])
        return values


@lru_cache(maxsize=None)
def chapters() -> dict[str, Chapter]:
    """Every chapter of the book, by id."""
    from .models import SIZES

    sizes = tuple(SIZES)
    book = [
        Chapter(
            "intro", "chapters/intro.md", "Introduction", budget_ci_s=240,
            params=(
                *text_params(),
                Param("model_sizes", list, None, "mini-Pythia sizes to train", item_allowed=sizes, allow_none=True),
                Param("train_steps", int, None, "optimizer steps per model", minimum=1, allow_none=True),
                Param("batch_size", int, None, "sequences per step", minimum=1, allow_none=True),
                Param("context_length", int, None, "tokens per training window", minimum=2, allow_none=True),
            ),
            presets={
                "ci": dict(corpus="default", max_corpus_mb=1000.0, tokenizer="bpe:2048",
                           model_sizes=["p-tiny", "p-small"], train_steps=400, batch_size=16, context_length=64),
                "paper": dict(corpus="hf:monology/pile-uncopyrighted", max_corpus_mb=200.0,
                              tokenizer="hf:EleutherAI/pythia-70m", model_sizes=["p-small", "p-base", "p-70m"],
                              train_steps=20000, batch_size=64, context_length=256),
            },
        ),
        Chapter(
            "report", "chapters/appendix/report.md", "Reproduction report", budget_ci_s=30,
            params=(Param("records_dir", str, "", "folder of chapter records ('': the book's, _build/records)"),),
        ),
        Chapter(
            "isan", "chapters/isan.md", "ISAN learning", budget_ci_s=150,
            params=(
                Param("thm43_configs", list, None, "random ISANs [d, |Σ|, T] for Theorem 4.3, Lemma C.3, Fact C.2 "
                      "and Remark 1 (exhaustive logit matrices: keep |Σ|^T small)", allow_none=True),
                Param("copying_n", list, None, "bit counts n of the copying distribution (Fact C.9)", allow_none=True),
                Param("parity_y", list, None, "hidden 0/1 vectors y of the noisy parities of Fact C.11", allow_none=True),
                Param("grid_d", list, None, "hidden dimensions d of the learning grid (Theorem 4.4)", allow_none=True),
                Param("grid_alphabet", list, None, "alphabet sizes |Σ| of the learning grid", allow_none=True),
                Param("grid_T", list, None, "sequence lengths T of the learning grid (|Σ|^T <= 2^24)", allow_none=True),
                Param("grid_eps", list, None, "target accuracies ε of the learning grid, each in (0, 1)",
                      allow_none=True),
                Param("grid_repeats", int, None, "random ISANs (and learner seeds) per grid point", minimum=1,
                      allow_none=True),
                Param("horizon_T", list, None, "long horizons T for the query count (|Σ| = 3, d = 4, ε = 0.2)",
                      allow_none=True),
                Param("rare_repeats", int, None, "learner seeds per (ε, δ) on the rare-branch stress test",
                      minimum=1, allow_none=True),
                Param("parity_n", list, None, "noisy-parity lengths n for the learners from samples (Theorem C.13)",
                      allow_none=True),
                Param("parity_max_samples", int, None, "largest sample count m given to the learners from samples",
                      minimum=16, allow_none=True),
                Param("parity_query_n", list, None, "noisy-parity lengths n for the logit-query learner",
                      allow_none=True),
                Param("parity_repeats", int, None, "random y (and sample sets) per (n, m)", minimum=1,
                      allow_none=True),
                Param("approx_etas", list, None, "perturbation sizes η of the approximately low-rank ISANs",
                      allow_none=True),
                Param("approx_tol_points", int, None, "rank tolerances tried per η (log-spaced, 1e-8 to 0.3)",
                      minimum=2, allow_none=True),
            ),
            presets={
                "ci": dict(thm43_configs=[[2, 2, 8], [3, 3, 6], [4, 2, 9], [5, 3, 6], [6, 4, 5]],
                           copying_n=[1, 2, 4, 6], parity_y=[[1], [1, 0, 1], [0, 1, 1, 0, 1], [1, 1, 0, 1, 0, 0, 1]],
                           grid_d=[2, 4, 8], grid_alphabet=[2, 3, 4], grid_T=[3, 5, 7], grid_eps=[0.3, 0.1, 0.05],
                           grid_repeats=2, horizon_T=[6, 8, 10, 12, 14, 16], rare_repeats=20,
                           parity_n=[2, 4, 6, 8, 10, 12], parity_max_samples=2 ** 17,
                           parity_query_n=[2, 4, 6, 8, 10, 12], parity_repeats=3,
                           approx_etas=[1e-2, 1e-3, 1e-4], approx_tol_points=10),
                "paper": dict(thm43_configs=[[2, 2, 8], [3, 3, 6], [4, 2, 9], [5, 3, 6], [6, 4, 5], [8, 2, 12],
                                             [8, 3, 8], [8, 4, 6]],
                              copying_n=[1, 2, 4, 6, 8, 10],
                              parity_y=[[1], [1, 0, 1], [0, 1, 1, 0, 1], [1, 1, 0, 1, 0, 0, 1],
                                        [1, 0, 1, 1, 0, 1, 0, 1, 1, 1]],
                              grid_d=[2, 4, 8], grid_alphabet=[2, 3, 4], grid_T=[4, 6, 8, 10],
                              grid_eps=[0.3, 0.1, 0.05, 0.02], grid_repeats=5,
                              horizon_T=[6, 8, 10, 12, 14, 16, 18, 20], rare_repeats=200,
                              parity_n=[2, 4, 6, 8, 10, 12, 14], parity_max_samples=2 ** 21,
                              parity_query_n=[2, 4, 6, 8, 10, 12, 14, 16, 18, 20], parity_repeats=10,
                              approx_etas=[1e-1, 1e-2, 1e-3, 1e-4], approx_tol_points=16),
            },
        ),
        Chapter(
            "hilbert", "chapters/hilbert.md", "Hilbert space", budget_ci_s=120,
            params=(
                Param("alphabet_size", int, None, "|Σ| of the synthetic exact languages", minimum=2, allow_none=True),
                Param("markov_order", int, None, "order of the random Markov chain", minimum=1, allow_none=True),
                Param("hmm_states", int, None, "hidden states of the random HMM", minimum=1, allow_none=True),
                Param("block_length", int, None, "k = l: history and continuation length (|Σ|^(2k) <= 2^20)",
                      minimum=1, allow_none=True),
                Param("max_length", int, None, "check the language condition on A_1..A_N with this N", minimum=2,
                      allow_none=True),
                Param("sample_tokens", int, None, "length of the sampled text whose window frequencies are tested",
                      minimum=100, allow_none=True),
                Param("mc_samples", int, None, "sampled (x, y) pairs for the Monte-Carlo check of Lemma 4.15",
                      minimum=100, allow_none=True),
            ),
            presets={
                "ci": dict(alphabet_size=3, markov_order=2, hmm_states=4, block_length=2, max_length=5,
                           sample_tokens=20_000, mc_samples=200_000),
                "paper": dict(alphabet_size=4, markov_order=3, hmm_states=8, block_length=3, max_length=7,
                              sample_tokens=1_000_000, mc_samples=2_000_000),
            },
        ),
        Chapter(
            "modes", "chapters/modes.md", "Modes", budget_ci_s=150,
            params=(
                *text_params(),
                Param("corpus_symbols", int, None, "symbols of the corpus language: the most frequent tokens + OTHER",
                      minimum=3, allow_none=True),
                Param("corpus_order", int, None, "Markov order of the corpus language", minimum=1, allow_none=True),
                Param("corpus_alpha", float, None, "additive smoothing of the corpus language's counts",
                      minimum=1e-6, allow_none=True),
                Param("max_history", int, None, "compare modes at history lengths k = 1..max_history",
                      minimum=2, allow_none=True),
                Param("alphabet_size", int, None, "|Σ| of the random Markov chain and HMM (background of the planted "
                      "language)", minimum=2, allow_none=True),
                Param("hmm_states", int, None, "hidden states of the random HMM", minimum=1, allow_none=True),
                Param("planted_absolute", list, None, "chosen probabilities q(h) of the planted absolute bigrams",
                      allow_none=True),
                Param("planted_collective", list, None, "per planted collective bigram, the chosen q(h) of each of "
                      "its histories", allow_none=True),
            ),
            presets={
                "ci": dict(corpus="default", max_corpus_mb=1000.0, tokenizer="byte", corpus_symbols=27, corpus_order=2,
                           corpus_alpha=0.1, max_history=3, alphabet_size=4, hmm_states=6,
                           planted_absolute=[0.04, 0.01], planted_collective=[[0.01, 0.005]]),
                "paper": dict(corpus="hf:monology/pile-uncopyrighted", max_corpus_mb=200.0,
                              tokenizer="hf:EleutherAI/pythia-70m", corpus_symbols=64, corpus_order=2,
                              corpus_alpha=0.1, max_history=3, alphabet_size=6, hmm_states=10,
                              planted_absolute=[0.05, 0.02, 0.005], planted_collective=[[0.01, 0.005, 0.002]]),
            },
        ),
        Chapter(
            "examples", "chapters/examples.md", "Examples", budget_ci_s=240,
            params=(
                *text_params(),
                Param("orders", list, None, "real text: [k, l, count threshold] per (history, continuation) length",
                      allow_none=True),
                Param("n_components", int, None, "top singular components per matrix (the paper: 100)", minimum=1,
                      allow_none=True),
                Param("laplace_alpha", float, None, "smoothing a of P(y|x) = (c(xy) + a)/(c(x) + a N_Y)", minimum=0.0,
                      allow_none=True),
                Param("smoothing", str, None, "where the smoothing applies: observed pairs, every cell, or none",
                      allowed=("observed", "full", "none"), allow_none=True),
                Param("alpha_sweep", list, None, "smoothing values a compared at the sweep order", allow_none=True),
                Param("sweep_order", list, None, "[k, l] of the smoothing sweep (must be one of orders)",
                      allow_none=True),
                Param("tie_rtol", float, None, "histories within this relative distance of the top loading are tied",
                      minimum=0.0, maximum=0.5, allow_none=True),
                Param("planted_orders", list, None, "[k, l] pairs of the planted-bigram checks", allow_none=True),
                Param("planted_languages", int, None, "random planted languages per (k, l)", minimum=1,
                      allow_none=True),
                Param("noise_languages", int, None, "planted languages followed along the noise level", minimum=1,
                      allow_none=True),
                Param("noise_points", int, None, "noise levels η, log-spaced on [1e-4, 1]", minimum=8,
                      allow_none=True),
            ),
            presets={
                "ci": dict(corpus="default", max_corpus_mb=1000.0, tokenizer="bpe:2048",
                           orders=[[1, 1, 5], [2, 1, 10], [3, 1, 10], [1, 2, 10], [2, 2, 10]], n_components=100,
                           laplace_alpha=1.0, smoothing="observed", alpha_sweep=[1.0, 0.1, 0.01, 0.001, 0.0],
                           sweep_order=[2, 1], tie_rtol=0.01, planted_orders=[[1, 1], [2, 1], [1, 2], [2, 2]],
                           planted_languages=3, noise_languages=5, noise_points=61),
                "paper": dict(corpus="hf:monology/pile-uncopyrighted", max_corpus_mb=1000.0,
                              tokenizer="hf:EleutherAI/pythia-70m",
                              orders=[[1, 1, 20], [2, 1, 50], [3, 1, 50], [1, 2, 50], [2, 2, 100], [1, 3, 100]],
                              n_components=100, laplace_alpha=1.0, smoothing="observed",
                              alpha_sweep=[1.0, 0.1, 0.01, 0.001, 0.0], sweep_order=[2, 1], tie_rtol=0.01,
                              planted_orders=[[1, 1], [2, 1], [1, 2], [2, 2], [3, 1], [1, 3]],
                              planted_languages=10, noise_languages=20, noise_points=121),
            },
        ),
        # --- end of chapters: add new chapters above this line (any order; _toc.yml sets reading order) ---
    ]
    return {c.id: c for c in book}


def get_chapter(chapter_id: str) -> Chapter:
    book = chapters()
    if chapter_id not in book:
        raise ParameterError(f"unknown chapter {chapter_id!r}; chapters: {', '.join(book)}")
    return book[chapter_id]
