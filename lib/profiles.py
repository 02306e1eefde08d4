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
                Param("corpus", str, None, "'default' (offline Python documentation), a local path, or 'hf:<dataset>'",
                      allow_none=True),
                Param("max_corpus_mb", float, None, "read at most this many MB of a streamed corpus",
                      minimum=0.01, allow_none=True),
                Param("tokenizer", str, None, "'bpe:<vocab size>', 'byte', or 'hf:<name or path>'", allow_none=True),
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
        # --- end of chapters: add new chapters above this line (any order; _toc.yml sets reading order) ---
    ]
    return {c.id: c for c in book}


def get_chapter(chapter_id: str) -> Chapter:
    book = chapters()
    if chapter_id not in book:
        raise ParameterError(f"unknown chapter {chapter_id!r}; chapters: {', '.join(book)}")
    return book[chapter_id]
