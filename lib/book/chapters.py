"""The book's chapters, each declared beside its own source.

A chapter is three things, and nothing else has to be edited to add one:

* its notebook, ``chapters/<id>.md`` (MyST Markdown read by jupytext), whose code cell
  tagged ``parameters`` assigns every parameter its default;
* its declaration, ``chapters/<id>.yml`` next to it: the budget of the ``ci`` profile, the
  type, bounds and help of each parameter, the presets of each profile, and the claims
  the chapter decides;
* one line in ``_toc.yml``, which sets the reading order.

:func:`discover` reads ``_toc.yml``, pairs every notebook with its declaration, and
refuses a book whose parts disagree: a declaration whose chapter is not in the table of
contents, a listed chapter without a declaration, a parameters cell that assigns names
the declaration does not know (or misses some), a preset outside its parameter's
allowed values, a claim whose record the chapter never writes. The runner, the report
and the tests all read the chapters from here.

Profiles: ``ci`` runs in minutes on 2 CPU cores and still decides every claim; ``paper``
is the papers' scale (Hugging Face models and data, a GPU). A declaration's ``smoke`` presets
say which sizes of the ``paper`` profile a smoke run (``run --profile paper --smoke``) cuts and to
what: the paper path's own code, sources and claims, at a size a CPU runs in minutes. A parameter whose default
is ``None`` takes the profile's preset; a value given by the reader overrides it.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .. import REPO_ROOT
from .claims import Check, Claim
from .pages import is_notebook, source_path, toc_files
from .parameters import (Constraint, Param, ParameterError, ParamSpec, Shape, named_function, named_validator,
                         parameters_cell_values, suggest)
from .tolerance import Tolerance

# The check of a local corpus is the text pipeline's (lib.text.corpus, which applies the same rule when it
# loads one), named as a declaration names a validator: imported when first called, never by reading the
# declarations.
_local_corpus_problem = named_function("lib.text.corpus:path_corpus_problem", "requires")

PROFILES = ("ci", "paper")
SMOKE = "smoke"  # a presets entry beside ci and paper: the sizes a `--profile paper --smoke` run cuts, and to what
DECLARATION_SUFFIX = ".yml"
CHAPTERS_DIR = "chapters"


class ChapterDeclarationError(ValueError):
    """The book's parts disagree: toc, notebooks, declarations and claims."""


def torch_builds_cuda() -> bool:
    """Whether the installed PyTorch is built for CUDA (or ROCm), read from ``torch/version.py``
    without importing torch (seconds); True when that cannot be read."""
    spec = importlib.util.find_spec("torch")
    try:
        source = Path(spec.origin).with_name("version.py").read_text()
        values = {}
        for node in ast.parse(source).body:
            target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
            if isinstance(target, ast.Name) and target.id in ("cuda", "hip"):
                values[target.id] = ast.literal_eval(node.value)
    except (AttributeError, OSError, SyntaxError, TypeError, ValueError):
        return True
    return bool(values.get("cuda") or values.get("hip"))


def _cuda_present(device: str) -> str | None:
    """Why ``device`` cannot run here (no CUDA GPU for 'cuda'), or None."""
    if not device.startswith("cuda"):
        return None
    if not torch_builds_cuda():
        return "the installed PyTorch is a CPU-only build, so it sees no CUDA GPU; use 'auto' or 'cpu'"
    import torch

    return None if torch.cuda.is_available() else "PyTorch sees no CUDA GPU on this machine; use 'auto' or 'cpu'"


def common_params() -> tuple[Param, ...]:
    """The parameters every chapter has, first in its parameters cell (their defaults are fixed)."""
    return (
        Param("profile", str, "ci", "ci: minutes on 2 CPU cores; paper: the papers' scale on a GPU",
              allowed=PROFILES),
        Param("seed", int, 0, "seed of every random choice", minimum=0, maximum=2 ** 32 - 1),  # NumPy's legacy range
        Param("device", str, "auto", "auto takes CUDA when present", allowed=("auto", "cpu", "cuda"),
              requires=_cuda_present),
    )


PATH_PARAMETERS = ("corpus", "tokenizer", "records_dir", "hub_model")  # may name a local path (made absolute by
#                                                                         the runner)
CORPUS_NAMES = ("default", "pydocs")  # lib.text.corpus's built-in offline sources
NAMES_NOT_PATHS = CORPUS_NAMES + ("byte", "suite")  # values of PATH_PARAMETERS that name a source, never a path
BPE_VOCAB = (257, 2 ** 18)            # lib.text.tokenization's MIN_BPE_VOCAB, MAX_BPE_VOCAB


def _hub_name(spec: str) -> str | None:
    if not spec.strip():
        return "an empty name"
    return "a hub name must follow 'hf:'" if spec == "hf:" else None


def offline() -> str | None:
    """The variable that switches the Hugging Face hub off (``HF_HUB_OFFLINE=1`` …), or None."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


WORKS_OFFLINE = ("what works offline: a snapshot in the local Hugging Face cache (HF_HUB_CACHE; "
                 "scripts/hub_standins.py writes small stand-ins of everything the paper presets name), a local "
                 "path, or the book's offline defaults")


def hub_snapshot(repo: str, revision: str | None = None, repo_type: str = "model") -> str | None:
    """The local snapshot folder of a hub repo at ``revision`` (offline lookup through ``refs/``), or None."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo, revision=revision, repo_type=repo_type, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, or no cache at all
        return None


def _corpus_exists(spec: str) -> str | None:
    """Why the corpus ``spec`` cannot be read here (a local path that does not exist; a hub dataset while
    offline with no snapshot of it in the local cache), or None."""
    if spec.startswith("hf:"):
        var = offline()
        if var and hub_snapshot(spec[3:], repo_type="dataset") is None:
            return f"{var} is set and the local Hugging Face cache holds no snapshot of dataset {spec[3:]!r}; " \
                   + WORKS_OFFLINE
        return None
    if spec in CORPUS_NAMES:
        return None
    return _local_corpus_problem(spec)  # no such path; an empty folder, a binary or non-UTF-8 file (by name)


def _tokenizer_syntax(spec: str) -> str | None:
    """Why the tokenizer ``spec`` is malformed (empty; 'bpe:' without an integer vocabulary in range), or None."""
    if spec.startswith("bpe:"):
        size = spec[4:].strip()
        if not size.isdigit():
            return f"the part after 'bpe:' must be an integer vocabulary size, not {size!r}"
        if not BPE_VOCAB[0] <= int(size) <= BPE_VOCAB[1]:
            return f"the vocabulary size must be in [{BPE_VOCAB[0]}, {BPE_VOCAB[1]}]"
    return _hub_name(spec)


# What a tokenizer folder written by save_pretrained holds (one of them at least): transformers' AutoTokenizer
# reads its class and vocabulary from these.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")


def looks_like_path(name: str) -> bool:
    """Whether ``name`` can only be a local path (absolute, or starting with ``.``, ``..`` or ``~``), not a
    hub name ``org/name``."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or os.sep != "/" and os.sep in name


def tokenizer_folder_problem(name: str) -> str | None:
    """Why the local folder ``name`` is not a tokenizer folder (missing; a file; none of
    :data:`TOKENIZER_FILES` in it), or None."""
    path = Path(name).expanduser()
    if not path.exists():
        return f"no such folder: {str(path.resolve())!r}"
    if not path.is_dir():
        return f"{str(path)!r} is a file; a tokenizer is a folder written by save_pretrained"
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        return (f"the folder {str(path)!r} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                "a tokenizer folder is written by tokenizer.save_pretrained(folder)")
    return None


def _tokenizer_exists(spec: str) -> str | None:
    """Why the tokenizer ``spec`` cannot be had here (a local folder that does not exist or holds no tokenizer;
    a hub tokenizer while offline and not in the local cache), or None."""
    if spec.startswith("hf:"):
        name, var = spec[3:], offline()
        if Path(name).expanduser().is_dir() or looks_like_path(name):
            return tokenizer_folder_problem(name)
        if var and hub_snapshot(name) is None:
            return f"{var} is set and the local Hugging Face cache holds no snapshot of {name!r}; " + WORKS_OFFLINE
        return None
    if spec == "byte" or spec.startswith("bpe:"):
        return None
    if Path(spec).expanduser().exists():
        return tokenizer_folder_problem(spec)
    return f"not 'byte', 'bpe:...' or 'hf:...', and no such folder: {str(Path(spec).expanduser().resolve())!r}"


# A hub repository's name, 'name' or 'org/name' (lib.models.causal_lm.HUB_NAME, which this layer cannot import)
HUB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)?$")


def hub_model_source_problem(name: str) -> str | None:
    """Why ``name`` cannot name a chapter's ``hub_model`` ('suite', a hub name 'org/name', or a local folder
    with one save_pretrained folder per revision, each with its config.json), or None: the form, and for a
    local folder what it holds (a declaration's ``validate:``, before any kernel starts). Whether a hub
    name's revisions can be had here is the chapter's ``requires``."""
    if not name.strip():
        return "an empty name"
    path = Path(name).expanduser()
    if name == "suite" or (HUB_NAME.match(name) and not looks_like_path(name) and not path.exists()):
        return None
    if not path.exists():
        return f"not 'suite' or a hub name 'org/name', and no such folder: {str(path.resolve())!r}"
    if not path.is_dir():
        return f"{str(path)!r} is a file; a local model is a folder with one save_pretrained folder per revision"
    revisions = sorted(p.name for p in path.iterdir() if p.is_dir() and (p / "config.json").is_file())
    if not revisions:
        return (f"the folder {str(path)!r} holds no revision of a model: a local model is one save_pretrained "
                "folder per revision (<folder>/<revision>/config.json), named by hub_revisions")
    return None


def corpus_params() -> tuple[Param, ...]:
    """The parameter group ``corpus``: the corpus a chapter reads and its size cap.

    The spec syntax is checked with each value; whether a local corpus exists is checked
    before a run (:meth:`Param.preflight`), never the network."""
    return (
        Param("corpus", str, None, "'default' (offline Python documentation), a local path, or 'hf:<dataset>'",
              allow_none=True, forms="'default', a local .txt/.md file or folder, or 'hf:<dataset>'",
              validate=_hub_name, requires=_corpus_exists),
        Param("max_corpus_mb", float, None, "read at most this many MB of a streamed corpus",
              minimum=0.01, allow_none=True),
    )


def text_params() -> tuple[Param, ...]:
    """The parameter group ``text``: the group ``corpus`` and the tokenizer that reads it.

    As for the corpus, the tokenizer's spec syntax is checked with each value and a local
    tokenizer folder's existence before a run."""
    return corpus_params() + (
        Param("tokenizer", str, None, "'bpe:<vocab size>', 'byte', or 'hf:<name or path>'", allow_none=True,
              forms=f"'byte', 'bpe:<vocab size {BPE_VOCAB[0]}..{BPE_VOCAB[1]}>', 'hf:<hub name or path>' "
                    "or a local tokenizer folder",
              validate=_tokenizer_syntax, requires=_tokenizer_exists),
    )


# Groups of parameters that several chapters share; a declaration lists the ones it uses.
PARAMETER_GROUPS = {"corpus": corpus_params, "text": text_params}

_TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list}
_PARAM_KEYS = {"type", "help", "allowed", "min", "max", "items", "length", "min_length", "max_length", "unique",
               "increasing", "validate", "requires"}
_SHAPE_KEYS = _PARAM_KEYS - {"help", "validate", "requires"}
_DECLARATION_KEYS = {"budget_ci_s", "parameter_groups", "parameters", "constraints", "presets", "claims", "reference",
                     "costs"}
_TOLERANCE_KEYS = {"rtol", "roundoff", "se_k", "timing", "compare", "reason"}
_CONSTRAINT_KEYS = {"parameter", "check", "help"}
_CLAIM_KEYS = {"id", "statement", "source", "record", "check", "paper", "kind"}


@dataclass(frozen=True)
class Chapter:
    """One chapter: id (file stem), source and declaration paths (relative to the book's
    root), title (its first heading), ci budget, parameters (in the order of its
    parameters cell, defaults from that cell), presets per profile, claims, and the
    constraints over several parameters."""

    id: str
    path: str
    declaration: str
    title: str
    budget_ci_s: int
    params: tuple[Param, ...]
    presets: dict[str, dict[str, Any]]
    claims: tuple[Claim, ...]
    constraints: tuple[Constraint, ...] = ()
    reference_values: tuple = ()   # ((record pattern, lib.book.tolerance.Tolerance), ...): the declaration's overrides
    reference_figures: tuple = ()  # ((figure pattern, RMS tolerance), ...)
    costs: Any = None  # values -> [lib.book.costs.HeavyStep]: the declaration's `costs: lib.module:function`

    @property
    def spec(self) -> ParamSpec:
        return ParamSpec(self.params)

    @property
    def page(self) -> str:
        """The chapter's entry in ``_toc.yml`` (its path without suffix)."""
        return self.path.rsplit(".", 1)[0]

    def with_smoke(self, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` on top of the chapter's ``smoke`` presets (the sizes a ``--profile paper --smoke`` run cuts;
        the reader's own values win); refused for a chapter that declares none."""
        if SMOKE not in self.presets:
            raise ParameterError(f"{self.id}: --smoke needs the chapter's 'smoke' presets (which paper sizes to "
                                 f"cut, and to what), and {self.declaration} declares none")
        return {**self.presets[SMOKE], **given}

    def settings(self, profile: str = "ci", seed: int = 0, device="auto", smoke: bool = False) -> dict[str, Any]:
        """The chapter's parameters at ``profile`` (its presets), as a later chapter replays them; ``smoke``
        (profile ``paper`` only): its ``smoke`` presets on top (:meth:`with_smoke`)."""
        given = {"profile": profile, "seed": seed, "device": device}
        if smoke:
            if profile != "paper":
                raise ValueError(f"the smoke sizes of the chapter {self.id!r} cut its paper profile: profile must be "
                                 f"'paper' (profile {profile!r})")
            given = self.with_smoke(given)
        return self.resolve(given)

    def resolve(self, given: dict[str, Any], *, library: bool = True) -> dict[str, Any]:
        """Check ``given`` and fill every ``None`` with the profile's preset.

        ``given`` is checked in full (``library=False``: without the validators a declaration names in the
        library, see :meth:`Param.check`). The presets are the declaration's own, held to those validators
        when the book is checked (:func:`discover`, ``lowrank-book check``, the tests), so filling them in
        imports none of them."""
        values = {**self.spec.defaults(), **self.spec.check(given, library=library)}
        preset = self.presets.get(values["profile"], {})
        for name, value in values.items():
            if value is None:
                if name not in preset:
                    raise ParameterError(f"parameter {name!r} is None and profile {values['profile']!r} "
                                         "has no preset for it")
                values[name] = self.spec[name].check(preset[name], library=False)
        for constraint in self.constraints:
            constraint.enforce(values)
        return values

    def preflight(self, values: dict[str, Any]) -> None:
        """Check that this machine can run the resolved ``values`` (a GPU, local files), before any work."""
        self.spec.preflight(values)


# --- reading a declaration --------------------------------------------------------------

class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML with YAML 1.2 floats: ``1e-10`` is a number (PyYAML's YAML 1.1 reads it as a string). LibYAML's
    parser where PyYAML is built with it (ten times faster than the pure-Python one: every command reads
    the declarations), the same resolver and constructor either way."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*\.[\d_]*(?:[eE][-+]?\d+)?|\.\d[\d_]*(?:[eE][-+]?\d+)?|\d[\d_]*[eE][-+]?\d+"
               r"|\.(?:inf|Inf|INF)|[-+]\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def read_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)


def _param_from_declaration(name: str, spec: Any, default: Any, where: str, library: bool = True) -> Param:
    if not isinstance(spec, dict) or "type" not in spec:
        raise ChapterDeclarationError(f"{where}: parameter {name!r} needs a mapping with at least 'type'")
    unknown = set(spec) - _PARAM_KEYS
    if unknown:
        raise ChapterDeclarationError(f"{where}: parameter {name!r} has unknown key(s) {sorted(unknown)}; "
                                      f"allowed: {sorted(_PARAM_KEYS)}")
    if spec["type"] not in _TYPES:
        raise ChapterDeclarationError(f"{where}: parameter {name!r} has type {spec['type']!r}; "
                                      f"allowed: {', '.join(_TYPES)}")
    items = spec.get("items")
    list_keys = {"length", "min_length", "max_length", "unique", "increasing"} & set(spec)
    if (list_keys or isinstance(items, dict)) and spec["type"] != "list":
        raise ChapterDeclarationError(f"{where}: parameter {name!r}: {sorted(list_keys) or ['items']} apply to a list")
    try:
        shape = _shape_from_declaration({k: v for k, v in spec.items() if k in _SHAPE_KEYS}, f"parameter {name!r}") \
            if (list_keys or isinstance(items, dict)) else None
        validate = named_validator(spec["validate"]) if "validate" in spec else None
        requires = named_validator(spec["requires"]) if "requires" in spec else None
    except ValueError as err:
        raise ChapterDeclarationError(f"{where}: {err}") from None
    param = Param(name, _TYPES[spec["type"]], default, spec.get("help", ""),
                  allowed=tuple(spec["allowed"]) if "allowed" in spec else None,
                  minimum=spec.get("min"), maximum=spec.get("max"), allow_none=default is None,
                  item_allowed=tuple(items) if isinstance(items, list) else None, shape=shape, validate=validate,
                  requires=requires)
    if default is not None:
        _checked(param, default, f"{where}: the parameters cell's default of", library)
    return param


def _shape_from_declaration(spec: Any, where: str) -> Shape:
    """A :class:`~lib.book.parameters.Shape` from a declaration's mapping (``items`` may nest one)."""
    if not isinstance(spec, dict) or "type" not in spec or set(spec) - _SHAPE_KEYS or spec["type"] not in _TYPES:
        raise ValueError(f"{where}: a shape is a mapping with 'type' ({', '.join(_TYPES)}) and keys from "
                         f"{sorted(_SHAPE_KEYS)}; got {spec!r}")
    items = spec.get("items")
    for key in ("length", "min_length", "max_length"):
        if key in spec and (isinstance(spec[key], bool) or not isinstance(spec[key], int) or spec[key] < 0):
            raise ValueError(f"{where}: {key} is an integer >= 0; got {spec[key]!r}")
    return Shape(_TYPES[spec["type"]], minimum=spec.get("min"), maximum=spec.get("max"),
                 allowed=tuple(spec["allowed"]) if "allowed" in spec else None,
                 length=spec.get("length"), min_length=spec.get("min_length"), max_length=spec.get("max_length"),
                 unique=bool(spec.get("unique", False)), increasing=bool(spec.get("increasing", False)),
                 items=(_shape_from_declaration(items, where + " items") if isinstance(items, dict) else
                        Shape(str, allowed=tuple(items)) if isinstance(items, list) else None))


def _checked(param: Param, value: Any, context: str, library: bool = True) -> Any:
    try:
        return param.check(value, library=library)
    except ParameterError as err:
        raise ChapterDeclarationError(f"{context} {err}") from None


def _constraint_from_declaration(spec: Any, params: dict[str, Param], where: str) -> Constraint:
    if not isinstance(spec, dict) or {"parameter", "check"} - set(spec) or set(spec) - _CONSTRAINT_KEYS:
        raise ChapterDeclarationError(f"{where}: each constraint is a mapping with 'parameter' and 'check' (and "
                                      f"optionally 'help'); got {spec!r}")
    constraint = Constraint(spec["parameter"], str(spec["check"]), spec.get("help", ""))
    try:
        unknown = (constraint.names() | {constraint.parameter}) - set(params)
    except (SyntaxError, ValueError) as err:
        raise ChapterDeclarationError(f"{where}: constraint {constraint.check!r}: {err}") from None
    if unknown:
        raise ChapterDeclarationError(f"{where}: constraint {constraint.check!r} names no parameter "
                                      f"{', '.join(sorted(unknown))}; parameters: {', '.join(params)}")
    return constraint


def _claim_from_declaration(chapter_id: str, spec: Any, where: str) -> Claim:
    if not isinstance(spec, dict):
        raise ChapterDeclarationError(f"{where}: each claim is a mapping; got {spec!r}")
    missing = {"id", "statement", "source", "record", "check"} - set(spec)
    unknown = set(spec) - _CLAIM_KEYS
    if missing or unknown:
        raise ChapterDeclarationError(f"{where}: claim {spec.get('id')!r} lacks {sorted(missing)} or has unknown "
                                      f"key(s) {sorted(unknown)}; keys: {sorted(_CLAIM_KEYS)}")
    if not str(spec["id"]).startswith(chapter_id + "."):
        raise ChapterDeclarationError(f"{where}: claim id {spec['id']!r} must start with {chapter_id + '.'!r}")
    try:
        check = Check.from_declaration(spec["check"])
        return Claim(spec["id"], chapter_id, spec["statement"], spec["source"], spec["record"], check,
                     spec.get("paper"), spec.get("kind", "must_hold"))
    except ValueError as err:
        raise ChapterDeclarationError(f"{where}: claim {spec['id']!r}: {err}") from None


def _reference_from_declaration(spec: Any, where: str) -> tuple[tuple, tuple]:
    """The declaration's ``reference:`` overrides of :mod:`lib.book.reference`'s tolerances
    (:class:`lib.book.tolerance.Tolerance`), each with its reason."""
    if spec is None:
        return (), ()
    if not isinstance(spec, dict) or set(spec) - {"values", "figures"}:
        raise ChapterDeclarationError(f"{where}: reference: takes 'values' and 'figures' mappings; got {spec!r}")
    values, figures = [], []
    for pattern, tol in (spec.get("values") or {}).items():
        if not isinstance(tol, dict) or set(tol) - _TOLERANCE_KEYS or not str(tol.get("reason", "")).strip():
            raise ChapterDeclarationError(f"{where}: reference.values.{pattern}: a mapping of {sorted(_TOLERANCE_KEYS)} "
                                          f"with a 'reason'; got {tol!r}")
        numbers = {k: tol[k] for k in ("rtol", "roundoff", "se_k") if k in tol}
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 for v in numbers.values()):
            raise ChapterDeclarationError(f"{where}: reference.values.{pattern}: tolerances are numbers >= 0; got {tol!r}")
        values.append((str(pattern), Tolerance(**{k: float(v) for k, v in numbers.items()},
                                               timing=bool(tol.get("timing", False)),
                                               compare=bool(tol.get("compare", True)), reason=str(tol["reason"]))))
    for pattern, tol in (spec.get("figures") or {}).items():
        rms = tol.get("rms") if isinstance(tol, dict) else None
        timing = isinstance(tol, dict) and tol.get("timing") is True and "rms" not in tol
        if not isinstance(tol, dict) or set(tol) - {"rms", "timing", "reason"} or not str(tol.get("reason", "")).strip() \
                or ("timing" in tol and "rms" in tol) \
                or not (timing or (not isinstance(rms, bool) and isinstance(rms, (int, float)) and rms >= 0)):
            raise ChapterDeclarationError(f"{where}: reference.figures.{pattern}: a mapping with 'rms' (>= 0), or "
                                          f"'timing: true' (a figure of wall times: never compared), and a 'reason'; "
                                          f"got {tol!r}")
        figures.append((str(pattern), None if timing else float(rms)))
    return tuple(values), tuple(figures)


def read_notebook(notebook_path: Path):
    """The chapter's notebook as read by jupytext (read once per version of the file)."""
    return _read_notebook(str(notebook_path), Path(notebook_path).stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _read_notebook(path: str, mtime_ns: int):
    import jupytext

    return jupytext.read(path)


def parameters_cell(notebook_path: Path) -> dict[str, Any]:
    """The literal values assigned in the notebook's one code cell tagged ``parameters``."""
    nb = read_notebook(notebook_path)
    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ChapterDeclarationError(f"{notebook_path}: a chapter has exactly one code cell tagged 'parameters'; "
                                      f"found {len(cells)}")
    return parameters_cell_values(cells[0].source)


def _title(notebook_path: Path) -> str:
    """The notebook's first level-1 heading (its file stem if it has none)."""
    for cell in read_notebook(notebook_path).cells:
        match = re.search(r"^# (.+)$", cell.source, re.M) if cell.cell_type == "markdown" else None
        if match:
            return match.group(1).strip()
    return notebook_path.stem


def load_chapter(notebook_path: Path, root: Path = REPO_ROOT, *, library: bool = True) -> Chapter:
    """The chapter of ``notebook_path`` read from its declaration and its parameters cell, every default and
    preset checked against its parameter; ``library=False`` leaves out the validators the declaration names
    in the library (importing them takes seconds: :func:`discover` explains when)."""
    chapter_id = notebook_path.stem
    decl_path = notebook_path.with_suffix(DECLARATION_SUFFIX)
    where = str(decl_path.relative_to(root))
    if not decl_path.is_file():
        raise ChapterDeclarationError(f"{notebook_path.relative_to(root)} has no declaration: write {where} "
                                      "(budget_ci_s, parameters, presets, claims) beside it")
    decl = read_yaml(decl_path) or {}
    unknown = set(decl) - _DECLARATION_KEYS
    if unknown:
        raise ChapterDeclarationError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_DECLARATION_KEYS)}")
    budget = decl.get("budget_ci_s")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise ChapterDeclarationError(f"{where}: budget_ci_s (seconds on 2 CPU cores) must be a positive integer; "
                                      f"got {budget!r}")

    declared: dict[str, Param | dict] = {p.name: p for p in common_params()}
    for group in decl.get("parameter_groups") or []:
        if group not in PARAMETER_GROUPS:
            raise ChapterDeclarationError(f"{where}: unknown parameter group {group!r}; groups: "
                                          f"{', '.join(PARAMETER_GROUPS)}")
        declared.update({p.name: p for p in PARAMETER_GROUPS[group]()})
    for name, spec in (decl.get("parameters") or {}).items():
        if name in declared:
            raise ChapterDeclarationError(f"{where}: parameter {name!r} is already declared (common or group)")
        declared[name] = spec

    cell = parameters_cell(notebook_path)
    missing, extra = [n for n in declared if n not in cell], [n for n in cell if n not in declared]
    if missing or extra:
        raise ChapterDeclarationError(
            f"{notebook_path.relative_to(root)}: the parameters cell and {where} disagree: "
            + "; ".join(filter(None, [missing and f"not assigned in the cell: {', '.join(missing)}",
                                      extra and f"not declared: {', '.join(extra)}"])))
    params = []
    for name, default in cell.items():
        spec = declared[name]
        if isinstance(spec, Param):
            if spec.default != default:
                raise ChapterDeclarationError(f"{notebook_path.relative_to(root)}: {name!r} must default to "
                                              f"{spec.default!r} in the parameters cell; found {default!r}")
            params.append(spec)
        else:
            params.append(_param_from_declaration(name, spec, default, where, library))
    by_name = {p.name: p for p in params}

    presets = decl.get("presets") or {}
    for profile, preset in presets.items():
        if profile not in PROFILES + (SMOKE,):
            raise ChapterDeclarationError(f"{where}: unknown profile {profile!r} in presets; profiles: "
                                          f"{', '.join(PROFILES)}, and {SMOKE!r} (the paper profile cut to CPU size)")
        for name, value in (preset or {}).items():
            if name not in by_name:
                raise ChapterDeclarationError(f"{where}: preset {profile}.{name} names no parameter; parameters: "
                                              f"{', '.join(by_name)}")
            _checked(by_name[name], value, f"{where}: preset {profile}.{name}:", library)
    for profile in PROFILES:
        lacking = [p.name for p in params if p.default is None and p.name not in (presets.get(profile) or {})]
        if lacking:
            raise ChapterDeclarationError(f"{where}: profile {profile!r} has no preset for {', '.join(lacking)} "
                                          "(their default is None)")

    constraints = tuple(_constraint_from_declaration(spec, by_name, where) for spec in decl.get("constraints") or [])
    claims = tuple(_claim_from_declaration(chapter_id, spec, where) for spec in decl.get("claims") or [])
    reference_values, reference_figures = _reference_from_declaration(decl.get("reference"), where)
    try:
        costs = named_function(decl["costs"], "costs") if "costs" in decl else None
    except ValueError as err:
        raise ChapterDeclarationError(f"{where}: {err}") from None
    chapter = Chapter(chapter_id, str(notebook_path.relative_to(root)), where, _title(notebook_path), budget,
                      tuple(params), {k: dict(v or {}) for k, v in presets.items()}, claims, constraints,
                      reference_values, reference_figures, costs)
    for profile in PROFILES:  # every profile's presets must satisfy the constraints
        try:
            chapter.resolve({"profile": profile}, library=library)
        except ParameterError as err:
            raise ChapterDeclarationError(f"{where}: the {profile!r} presets break a constraint: {err}") from None
    if SMOKE in chapter.presets:
        try:
            chapter.resolve({"profile": "paper", **chapter.presets[SMOKE]}, library=library)
        except ParameterError as err:
            raise ChapterDeclarationError(f"{where}: the paper presets with the {SMOKE!r} cuts break a constraint: "
                                          f"{err}") from None
    return chapter


# --- records a chapter writes -------------------------------------------------------------

def written_records(notebook_path: Path) -> tuple[set[str], list[re.Pattern], list[tuple[str, str]]]:
    """What the chapter's code cells pass to ``record(name, value, claim=...)``.

    Returns the literal record names, patterns for names built with f-strings, and the
    (record name, claim id) pairs of calls that name a claim.
    """
    names: set[str] = set()
    patterns: list[re.Pattern] = []
    decided: list[tuple[str, str]] = []
    for cell in read_notebook(notebook_path).cells:
        if cell.cell_type != "code":
            continue
        for node, name, pattern in _record_calls(cell.source):
            if pattern is not None:
                patterns.append(pattern)
                continue
            names.add(name)
            claim = next((k.value for k in node.keywords if k.arg == "claim"), None)
            if isinstance(claim, ast.Constant) and isinstance(claim.value, str):
                decided.append((name, claim.value))
    return names, patterns, decided


HEADING = re.compile(r"^(#{1,3})\s+(.+?)\s*$")


@lru_cache(maxsize=1)
def _heading_parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions={"amsmath", "dollarmath", "colon_fence", "deflist",
                                                              "substitution"}), RendererHTML)


def heading_slug(title: str, taken=()) -> str:
    """The anchor MyST gives a heading (``myst_heading_anchors``): computed by MyST's own
    function from the heading's text (maths left out), made unique against the anchors
    ``taken`` by the headings above it in the same page (``-1``, ``-2``, ...)."""
    from markdown_it.tree import SyntaxTreeNode
    from myst_parser.mdit_to_docutils.base import compute_unique_slug

    heading = SyntaxTreeNode(_heading_parser().parse("# " + title)).children[0]
    return compute_unique_slug(heading, set(taken))


def claim_sections(chapter: Chapter) -> dict[str, tuple[str, str]]:
    """Where each claim of ``chapter`` is measured: ``{claim id: (section title, anchor)}``.

    The section is the heading (levels 1-3) above the first code cell that records the
    claim's value (a literal record name, or an f-string name whose pattern matches it).
    Claims whose record is written nowhere in the notebook are left out.
    """
    wanted = {c.id: c.record for c in chapter.claims}
    found: dict[str, tuple[str, str]] = {}
    section, slug, taken = chapter.title, heading_slug(chapter.title), []
    for cell in read_notebook(REPO_ROOT / chapter.path).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = HEADING.match(line)
                if match:
                    section, slug = match.group(2), heading_slug(match.group(2), taken)
                    taken.append(slug)
            continue
        if cell.cell_type != "code":
            continue
        for _node, literal, pattern in _record_calls(cell.source):
            for claim_id, name in wanted.items():
                if claim_id not in found and (name == literal if pattern is None else pattern.fullmatch(name)):
                    found[claim_id] = (section, slug)
    return found


def record_section(chapter: Chapter, record_name: str) -> str | None:
    """The title of the section (heading levels 1-3) whose code records ``record_name`` first, or None."""
    section = chapter.title
    for cell in read_notebook(REPO_ROOT / chapter.path).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = HEADING.match(line)
                if match:
                    section = match.group(2)
        elif cell.cell_type == "code":
            for _node, literal, pattern in _record_calls(cell.source):
                if (literal == record_name) if pattern is None else pattern.fullmatch(record_name):
                    return section
    return None


def _record_calls(cell_source: str):
    """Each ``record(name, ...)`` call of a code cell: (call, literal name, None) for a string
    name, (call, None, pattern) for an f-string name (its formatted parts match anything)."""
    source = "\n".join(line for line in cell_source.splitlines() if not line.lstrip().startswith(("%", "!")))
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args and _callee(node) == "record"):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            yield node, first.value, None
        elif isinstance(first, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in first.values]
            yield node, None, re.compile("".join(parts))


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def claim_problems(chapter: Chapter, root: Path = REPO_ROOT) -> list[str]:
    """Claims the chapter cannot decide: a claim whose record no ``record(...)`` call writes, a
    ``record(..., claim=...)`` naming a claim the declaration lacks or one decided by another record."""
    names, patterns, decided = written_records(root / chapter.path)
    problems = []
    for claim in chapter.claims:
        if claim.record not in names and not any(p.fullmatch(claim.record) for p in patterns):
            problems.append(f"claim {claim.id!r} is decided by the record {claim.record!r}, which "
                            f"{chapter.path} never writes")
    by_id = {c.id: c for c in chapter.claims}
    for name, claim_id in decided:
        if claim_id not in by_id:
            problems.append(f"{chapter.path} records {name!r} for claim {claim_id!r}, which {chapter.declaration} "
                            "does not declare")
        elif by_id[claim_id].record != name:
            problems.append(f"{chapter.path} records {name!r} for claim {claim_id!r}, which is decided by the "
                            f"record {by_id[claim_id].record!r}")
    return problems


# --- the whole book -------------------------------------------------------------------------

def discover(root: Path = REPO_ROOT, *, library: bool = True,
             loaded: dict[str, Chapter] | None = None) -> dict[str, Chapter]:
    """Every executable chapter of ``_toc.yml`` in reading order, checked against its declaration.

    Raises :class:`ChapterDeclarationError` listing every disagreement found. ``library=False`` checks
    every default and preset without the validators a declaration names in the library (``validate:
    lib.module:function``), whose modules take seconds to import: what the command line reads for
    ``list`` or a run, where a reader's own values are still checked in full; ``lowrank-book check``
    and the tests check the book with them. ``loaded``: chapters already read, by notebook path (used
    and filled in).
    """
    root = Path(root)
    problems: list[str] = []
    book: dict[str, Chapter] = {}
    listed: set[Path] = set()
    for entry in toc_files(root):
        try:
            path = source_path(entry, root)
        except FileNotFoundError as err:
            problems.append(str(err))
            continue
        if not is_notebook(path):
            continue
        listed.add(path.with_suffix(DECLARATION_SUFFIX).resolve())
        try:
            chapter = loaded[str(path)] if loaded is not None and str(path) in loaded else \
                load_chapter(path, root, library=library)
        except (ChapterDeclarationError, ParameterError, yaml.YAMLError) as err:
            problems.append(str(err))
            continue
        if loaded is not None:
            loaded[str(path)] = chapter
        if chapter.id in book:
            problems.append(f"two chapters have the id {chapter.id!r}: {book[chapter.id].path} and {chapter.path}")
            continue
        problems.extend(claim_problems(chapter, root))
        book[chapter.id] = chapter
    for decl in sorted((root / CHAPTERS_DIR).rglob(f"*{DECLARATION_SUFFIX}")):
        if decl.resolve() not in listed:
            page = decl.relative_to(root).with_suffix("")
            problems.append(f"{decl.relative_to(root)} declares a chapter that _toc.yml does not list: add "
                            f"'- file: {page.as_posix()}' to _toc.yml (or remove the declaration)")
    seen: dict[str, str] = {}
    for chapter in book.values():
        for claim in chapter.claims:
            if claim.id in seen:
                problems.append(f"claim id {claim.id!r} is declared twice ({seen[claim.id]}, {chapter.declaration})")
            seen[claim.id] = chapter.declaration
    if problems:
        raise ChapterDeclarationError("the book's chapters do not agree with their declarations:\n  - "
                                      + "\n  - ".join(problems))
    return book


# The book's own chapters, read once per process and only when asked for: a command that needs one chapter
# reads one declaration (get_chapter), one that needs the book reads them all (chapters), the same objects.
_LOADED: dict[str, Chapter] = {}      # notebook path -> chapter (library validators left to `check`)
_CLAIMS_CHECKED: set[str] = set()     # chapters whose claims were checked against their notebook
_BOOK: dict[str, dict[str, Chapter]] = {}


def chapters() -> dict[str, Chapter]:
    """Every chapter of the book, by id, in reading order (read once per process; :func:`discover`, without the
    library's validators of the declarations' presets)."""
    if "book" not in _BOOK:
        _BOOK["book"] = discover(REPO_ROOT, library=False, loaded=_LOADED)
        _CLAIMS_CHECKED.update(_BOOK["book"])
    return _BOOK["book"]


def chapter_sources(root: Path = REPO_ROOT) -> dict[str, Path]:
    """The notebook of every executable chapter of ``_toc.yml``, by id, in reading order, without reading any
    declaration (the table of contents and each listed file's first lines only; once per process)."""
    return dict(_chapter_sources(str(root)))


@lru_cache(maxsize=None)
def _chapter_sources(root: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for entry in toc_files(Path(root)):
        try:
            path = source_path(entry, Path(root))
        except FileNotFoundError:
            continue
        if is_notebook(path):
            found.setdefault(path.stem, path)
    return found


def get_chapter(chapter_id: str) -> Chapter:
    """One chapter of the book by id, reading its declaration alone (unless the whole book was read);
    ParameterError for an id the table of contents does not list, with the closest one."""
    if "book" in _BOOK:
        book = _BOOK["book"]
        if chapter_id not in book:
            raise ParameterError(f"unknown chapter {chapter_id!r}{suggest(chapter_id, book)}; chapters: "
                                 f"{', '.join(book)}")
        return book[chapter_id]
    sources = chapter_sources()
    if chapter_id not in sources:
        raise ParameterError(f"unknown chapter {chapter_id!r}{suggest(chapter_id, sources)}; chapters: "
                             f"{', '.join(sources)}")
    path = sources[chapter_id]
    if str(path) not in _LOADED:
        _LOADED[str(path)] = load_chapter(path, REPO_ROOT, library=False)
    chapter = _LOADED[str(path)]
    if chapter.id not in _CLAIMS_CHECKED:
        problems = claim_problems(chapter)
        if problems:
            raise ChapterDeclarationError(f"{chapter.path} and {chapter.declaration} do not agree:\n  - "
                                          + "\n  - ".join(problems))
        _CLAIMS_CHECKED.add(chapter.id)
    return chapter


def all_claims() -> list[Claim]:
    """Every claim of the book, chapter by chapter in reading order."""
    return [claim for chapter in chapters().values() for claim in chapter.claims]


def get_claim(claim_id: str) -> Claim:
    """A claim by id, read from its chapter's declaration (a claim's id starts with its chapter's)."""
    chapter_id = claim_id.partition(".")[0]
    if chapter_id in chapter_sources():
        for claim in get_chapter(chapter_id).claims:
            if claim.id == claim_id:
                return claim
    claims = {c.id: c for c in all_claims()}
    if claim_id not in claims:
        raise KeyError(f"unknown claim {claim_id!r}{suggest(claim_id, claims)}; claims: {', '.join(sorted(claims))}")
    return claims[claim_id]
