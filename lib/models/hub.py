"""A model by hub name or local directory at a revision (a training checkpoint), offline-aware.

The chapter "Logit rank" follows one model through its training checkpoints: on the hub
these are revisions of one repository (``EleutherAI/pythia-70m`` at ``step0`` …
``step143000``), on disk one ``save_pretrained`` folder per revision. Everything here
resolves where such a model is read from *before* any weights are read, so a machine
without a revision fails at once and names it:

* :func:`resolve_model_source` — ``(source, kwargs)`` for ``from_pretrained``;
* :func:`load_model`, :func:`load_tokenizer` — a :class:`~lib.models.causal_lm.CausalLM`
  and the tokenizer saved with it;
* :class:`ModelSeries` — one model at several revisions with one tokenizer.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from . import gguf_file
from .causal_lm import HUB_NAME, CausalLM, ModelUnavailableError, hub_offline, hub_reachable


class ModelSourceError(ValueError):
    """A model name, directory or revision that cannot name a model, refused before any weights are read."""


def resolve_model_source(name_or_path, revision: str | None = None, cache_dir=None,
                         local_files_only: bool | None = None) -> tuple[str, dict]:
    """Where a model (and its tokenizer) at ``revision`` is read from: ``(source, kwargs)`` for
    ``from_pretrained``. Refuses clearly, before any weights are read, what cannot be had.

    * A local directory without a revision: the directory itself.
    * A local directory with a revision: its subdirectory named ``revision`` (a local copy of a
      checkpoint series, one ``save_pretrained`` folder per revision, e.g. ``pythia-70m/step0``);
      refused (:class:`ModelSourceError`, listing the revisions there) if it is absent.
    * A hub name ("org/name") offline (``HF_HUB_OFFLINE`` set, ``local_files_only=True``, or the
      hub not reachable): the snapshot of that revision (default ``main``) in the local Hugging
      Face cache (``cache_dir``, default the usual one), found through its ``refs/<revision>``;
      refused with :class:`lib.models.causal_lm.ModelUnavailableError` naming the revision if it
      is not there.
    * A hub name online: the name, with ``revision`` (and ``cache_dir``) passed on to
      ``from_pretrained``, which downloads that revision.
    * A GGUF model (``"gguf:<path>"``, ``"smollm2-135m"``, ``"gemma3-270m"``; :mod:`lib.models.gguf_file`):
      the name with ``{"revision": "init" | "final"}``, the file and the revision checked here.
    """
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ModelSourceError(f"parameter 'revision' must be None or a non-empty string (a branch, tag or commit); "
                               f"got {revision!r}")
    name = os.fspath(name_or_path)
    if gguf_file.is_gguf_name(name):
        try:
            revision = gguf_file.check_revision(revision)
        except gguf_file.GGUFError as err:
            raise ModelSourceError(str(err)) from None
        gguf_file.gguf_path(name)
        return name, {"revision": revision}
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelSourceError(f"parameter 'model' is the file {name!r}; give a directory written by "
                                   "save_pretrained")
        if revision is None:
            return str(path), {}
        sub = path / revision
        if not sub.is_dir():
            there = sorted(p.name for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
            raise ModelSourceError(f"no revision {revision!r} under the local model directory {name!r}: a local "
                                   f"model with revisions is one save_pretrained folder per revision; found "
                                   f"{there or 'none'}")
        return str(sub), {}
    if not HUB_NAME.match(name) or name.startswith((".", "~")) or name.count("/") > 1:
        raise FileNotFoundError(f"no such local model directory: {name!r}, and not a hub name 'org/name'")
    if local_files_only is None:
        local_files_only = hub_offline() or not hub_reachable()
    if not local_files_only:
        kwargs = {"revision": revision} if revision is not None else {}
        return name, kwargs | ({"cache_dir": str(cache_dir)} if cache_dir is not None else {})
    from huggingface_hub import snapshot_download

    try:
        snap = snapshot_download(name, revision=revision, cache_dir=cache_dir, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - LocalEntryNotFoundError, a bad cache, an unknown revision
        raise ModelUnavailableError(
            f"cannot load {name!r} at revision {revision or 'main'!r}: no network is available (offline mode or the "
            f"hub cannot be reached) and that revision is not in the local Hugging Face cache"
            f"{f' {cache_dir}' if cache_dir is not None else ''} ({type(err).__name__}). What works offline: a "
            "revision cached earlier, a local directory written by save_pretrained (with one subfolder per "
            "revision), or the book's own mini-Pythia suite (hub_model: suite).") from None
    return snap, {}


def load_model(name_or_path, revision: str | None = None, device="cpu", cache_dir=None,
               local_files_only: bool | None = None) -> CausalLM:
    """A :class:`lib.models.causal_lm.CausalLM` from a hub name or local directory at ``revision``
    (see :func:`resolve_model_source`: offline a hub revision is read from the local cache)."""
    source, kwargs = resolve_model_source(name_or_path, revision, cache_dir, local_files_only)
    return CausalLM.from_pretrained(source, device=device, **kwargs)


def tokenizer_from(source: str, kwargs: dict):
    """``AutoTokenizer`` from a resolved source (:func:`resolve_model_source`); a local directory or
    cached snapshot is read without the network."""
    from transformers import AutoTokenizer

    if gguf_file.is_gguf_name(source):  # the tokenizer the GGUF file's header holds
        path = gguf_file.gguf_path(source)
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    if Path(source).is_dir():
        kwargs = {"local_files_only": True}
    return AutoTokenizer.from_pretrained(source, **kwargs)


def load_tokenizer(name_or_path, revision: str | None = None, cache_dir=None, local_files_only: bool | None = None):
    """The tokenizer saved with a model (``AutoTokenizer``), found as :func:`load_model` finds the model."""
    return tokenizer_from(*resolve_model_source(name_or_path, revision, cache_dir, local_files_only))


# Shapes of the hub models the paper presets name, for planning a run before anything is downloaded
# (the config.json of each model on the hub: GPT-NeoX, d_ff = 4d, untied embeddings).
KNOWN_SHAPES = {
    "EleutherAI/pythia-70m": {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                              "intermediate_size": 2048, "vocab_size": 50304},
    "EleutherAI/pythia-160m": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                               "intermediate_size": 3072, "vocab_size": 50304},
    "EleutherAI/pythia-410m": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                               "intermediate_size": 4096, "vocab_size": 50304},
}


def model_config(name_or_path, revision: str | None = None):
    """The ``transformers`` config of a model at ``revision`` without reading its weights: from its
    ``config.json`` where :func:`resolve_model_source` finds one here (a local directory, a cached
    snapshot), else, for a model of :data:`KNOWN_SHAPES`, a GPT-NeoX config of that shape (so a run
    can be planned before anything is downloaded). ``ModelSourceError`` for any other model."""
    from transformers import AutoConfig, GPTNeoXConfig

    if gguf_file.is_gguf_name(name_or_path):  # the GGUF header's (the same for both revisions)
        path = gguf_file.gguf_path(name_or_path)
        return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    try:
        source, _ = resolve_model_source(name_or_path, revision, local_files_only=True)
        if Path(source, "config.json").is_file():
            return AutoConfig.from_pretrained(source, local_files_only=True)
    except (ModelSourceError, ModelUnavailableError, FileNotFoundError, OSError):
        pass
    name = os.fspath(name_or_path)
    if name in KNOWN_SHAPES:
        return GPTNeoXConfig(**KNOWN_SHAPES[name])
    raise ModelSourceError(f"no config.json of {name!r} at revision {revision or 'main'!r} here, and its shape is not "
                           f"one of the known {sorted(KNOWN_SHAPES)}")


def hub_model_problem(name: str) -> str | None:
    """Why the chapter's ``hub_model`` cannot be read on this machine (offline, a hub name with no
    revision in the local Hugging Face cache), or None: the declaration's preflight, before any
    kernel starts. Each revision is checked when :class:`ModelSeries` is made. A GGUF model
    (:mod:`lib.models.gguf_file`): its file (installed, GGUF, an architecture transformers reads)."""
    if gguf_file.is_gguf_name(name):
        try:
            gguf_file.gguf_path(name)
        except (OSError, ValueError) as err:
            return str(err)
        return None
    if name == "suite" or Path(os.fspath(name)).expanduser().is_dir() or not hub_offline():
        return None
    from huggingface_hub import constants

    refs = Path(constants.HF_HUB_CACHE, "models--" + name.replace("/", "--"), "refs")
    if refs.is_dir() and any(refs.iterdir()):
        return None
    return (f"the hub is offline (HF_HUB_OFFLINE) and the local Hugging Face cache {constants.HF_HUB_CACHE} holds no "
            f"revision of {name!r}; what works offline: a cached snapshot (scripts/hub_standins.py writes stand-ins "
            "of every model the paper presets name), a local directory with one save_pretrained folder per "
            "revision, or 'suite'")


class ModelSeries:
    """One model at several revisions (training checkpoints, first = step 0, last = final) with the
    tokenizer saved with its last revision: the models of the chapter "Logit rank" when they
    come from the hub (e.g. ``EleutherAI/pythia-70m`` at ``step0`` … ``step143000``) or from a
    local directory holding one ``save_pretrained`` folder per revision.

    Every revision is resolved when the series is made (:func:`resolve_model_source`), so an
    offline machine without one of them fails at once, naming it, before any matrix is
    computed. ``encode`` maps text to token ids (no special tokens), ``decode`` back;
    ``load(revision)`` gives a :class:`lib.models.causal_lm.CausalLM`; ``model_id(revision)``
    names it uniquely for the book's cache. A GGUF model (:mod:`lib.models.gguf_file`) has the
    revisions ``init`` (its untrained twin, drawn with ``init_seed``) and ``final``."""

    def __init__(self, name_or_path, revisions: Sequence[str], device="cpu", cache_dir=None,
                 local_files_only: bool | None = None, init_seed: int = 0):
        revisions = list(revisions) if revisions is not None else []
        if len(revisions) < 2 or len(set(revisions)) != len(revisions):
            raise ModelSourceError(f"parameter 'hub_revisions' must list at least two distinct revisions, step 0 "
                                   f"first and the final one last; got {revisions!r}")
        self.name, self.revisions, self.device = os.fspath(name_or_path), revisions, device
        self.init_seed = init_seed
        self.sources = {r: resolve_model_source(self.name, r, cache_dir, local_files_only) for r in revisions}
        self.tokenizer = tokenizer_from(*self.sources[revisions[-1]])

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids))

    def load(self, revision: str) -> CausalLM:
        if revision not in self.sources:
            raise ModelSourceError(f"revision {revision!r} is not one of this series' {self.revisions}")
        source, kwargs = self.sources[revision]
        if gguf_file.is_gguf_name(source):
            kwargs = kwargs | {"init_seed": self.init_seed}
        return CausalLM.from_pretrained(source, device=self.device, **kwargs)

    def model_id(self, revision: str) -> str:
        if gguf_file.is_gguf_name(self.name):  # the file's content, and the twin's seed
            rev = gguf_file.check_revision(revision)
            sha = gguf_file.file_sha256(gguf_file.gguf_path(self.name))[:16]
            return f"gguf-{sha}@{rev}" + (f"-seed{self.init_seed}" if rev == "init" else "")
        path = Path(self.name).expanduser()
        return f"{path.resolve() if path.exists() else self.name}@{revision}"


__all__ = ["ModelSourceError", "resolve_model_source", "model_config", "hub_model_problem", "KNOWN_SHAPES", "load_model", "load_tokenizer", "tokenizer_from",
           "ModelSeries"]
