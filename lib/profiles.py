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
    ]
    return {c.id: c for c in book}


def get_chapter(chapter_id: str) -> Chapter:
    book = chapters()
    if chapter_id not in book:
        raise ParameterError(f"unknown chapter {chapter_id!r}; chapters: {', '.join(book)}")
    return book[chapter_id]
