"""Text corpora behind one interface: ``load_corpus(source) -> Corpus``.

A :class:`Corpus` is a list of documents (strings) with a name, a description and a
JSON-able provenance record. Documents are the unit of the train/held-out split, so
that no held-out text ever shares a document with the training text.

Sources, all reached through :func:`load_corpus`:

* ``"default"`` (alias ``"pydocs"``) -- **offline, the book's default.** About 14 MB of
  human-written English technical prose that ships with the pinned environment: the
  Python Language Reference topics (``pydoc_data``) and the docstrings of the standard
  library and of numpy, scipy, matplotlib and torch, read from their ``.py`` files with
  :mod:`ast` (nothing is imported). Doctest examples are dropped so that the text is
  mostly prose. Same environment, same bytes: the corpus is reproducible byte for byte.
* a local path -- a ``.txt``/``.md`` file (one document per blank-line-separated block)
  or a folder (one document per ``.txt``/``.md`` file under it). Every such file must be UTF-8
  text: a binary file (a NUL byte) or one in another encoding (Latin-1, say) is *refused*, naming
  the file, not skipped with a warning. A skipped file would silently change the corpus and every
  number computed from it, and a warning would be lost in the kernel's log, which the runner keeps
  quiet; a refusal says which file to convert or move out. Empty files of a folder add nothing and
  are passed over; an empty file, and a folder with no non-empty ``.txt``/``.md`` file, are refused.
  :func:`path_corpus_problem` is that rule as the check before a run (it reads at most
  :data:`CHECK_PREFIX_BYTES` of each file, so it stays cheap; a chapter's ``corpus`` parameter is
  checked with it before any kernel starts), and :func:`load_path_corpus` applies it to every
  byte it reads, so a bad file past the checked prefix still stops the load, by name.
* ``"hf:<dataset>"`` -- a Hugging Face hub dataset, streamed (needs a network).
* names registered with :func:`register_source` by later chapters (synthetic corpora).

Expensive results (the default corpus, hub downloads) go through :func:`lib.book.cache.cached`.
"""
from __future__ import annotations

import ast
import codecs
import hashlib
import importlib.metadata
import os
import re
import sys
import sysconfig
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ..book.cache import cached

# Bump when the default corpus's construction changes in a way that should not rely on
# the source hash alone (the cache key also covers this file's source).
BUILDER_VERSION = 1

#: Scientific packages whose docstrings join the default corpus, in this order.
DEFAULT_PACKAGES = ("numpy", "scipy", "matplotlib", "torch")

#: Standard-library directories left out of the default corpus (tests, GUI demos, vendored tools).
STDLIB_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3",
                              "tkinter", "turtledemo", "ensurepip", "__pycache__"})
#: Directories left out of the scientific packages.
PACKAGE_SKIP_DIRS = frozenset({"test", "tests", "__pycache__"})

#: Default byte limit of a streamed hub corpus (pass ``max_bytes=None`` for no limit).
HF_DEFAULT_MAX_BYTES = 50_000_000

_TEXT_SUFFIXES = (".txt", ".md")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


class CorpusUnavailable(RuntimeError):
    """A corpus source cannot be reached from here (e.g. a hub dataset while offline)."""


# --------------------------------------------------------------------------- Corpus


@dataclass(repr=False)
class Corpus:
    """A named list of documents, with where it came from.

    ``documents`` are plain strings; ``provenance`` is JSON-able (versions, paths,
    counts) so it can be printed in a chapter or stored beside a result. ``titles``
    optionally names each document (module name, file name), for tables and debugging.
    """

    name: str
    documents: list[str]
    description: str = ""
    provenance: dict = field(default_factory=dict)
    titles: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.documents = list(self.documents)
        bad = next((i for i, d in enumerate(self.documents) if not isinstance(d, str)), None)
        if bad is not None:
            raise TypeError(f"Corpus {self.name!r}: document {bad} is a {type(self.documents[bad]).__name__}, not a str")
        self.titles = list(self.titles)
        if self.titles and len(self.titles) != len(self.documents):
            raise ValueError(f"Corpus {self.name!r}: {len(self.titles)} titles for {len(self.documents)} documents")

    @property
    def n_documents(self) -> int:
        return len(self.documents)

    @property
    def n_bytes(self) -> int:
        """Size of all documents in UTF-8 bytes."""
        return sum(len(d.encode("utf-8")) for d in self.documents)

    def sha256(self) -> str:
        """SHA-256 of the documents, deterministic and unambiguous.

        Each document is hashed as its UTF-8 length (8 bytes, little-endian) followed by
        its bytes -- a separator that cannot occur inside a document -- so two corpora
        have the same hash exactly when they have the same documents in the same order.
        """
        digest = hashlib.sha256(b"corpus-v1")
        for doc in self.documents:
            data = doc.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        return digest.hexdigest()

    def text(self, separator: str = "\n\n") -> str:
        """All documents joined into one string (for a quick look or a character count)."""
        return separator.join(self.documents)

    def __iter__(self) -> Iterator[str]:
        return iter(self.documents)

    def subset(self, indices) -> "Corpus":
        """The corpus restricted to the documents ``indices`` (in that order)."""
        idx = [int(i) for i in np.asarray(indices, dtype=np.int64).ravel()]
        n = self.n_documents
        if any(i < 0 or i >= n for i in idx):
            raise IndexError(f"document indices must lie in [0, {n}); got min {min(idx)}, max {max(idx)}")
        return Corpus(
            name=f"{self.name}[subset]",
            documents=[self.documents[i] for i in idx],
            description=self.description,
            provenance={**self.provenance, "subset_of": self.sha256(), "n_subset": len(idx)},
            titles=[self.titles[i] for i in idx] if self.titles else [],
        )

    def split(self, heldout_fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Split the documents into (train, held-out) index arrays, by document.

        A seeded permutation picks ``round(heldout_fraction * n_documents)`` held-out
        documents (at least one, and at least one left for training). Same corpus size,
        fraction and seed give the same split. Both arrays are sorted int64 indices and
        every document is in exactly one of them.
        """
        if isinstance(heldout_fraction, bool) or not isinstance(heldout_fraction, (int, float, np.floating)) \
                or not 0.0 < float(heldout_fraction) < 1.0:
            raise ValueError(f"parameter 'heldout_fraction' must be a number strictly between 0 and 1; got {heldout_fraction!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"parameter 'seed' must be a non-negative integer; got {seed!r}")
        n = self.n_documents
        if n < 2:
            raise ValueError(f"corpus {self.name!r} has {n} document(s); a split by document needs at least 2 "
                             "(for a single-file source, separate documents by blank lines)")
        n_held = min(max(1, int(round(float(heldout_fraction) * n))), n - 1)
        perm = np.random.default_rng(int(seed)).permutation(n)
        return np.sort(perm[n_held:]).astype(np.int64), np.sort(perm[:n_held]).astype(np.int64)

    def __repr__(self) -> str:
        return (f"Corpus(name={self.name!r}, n_documents={self.n_documents}, "
                f"n_bytes={self.n_bytes:,}, description={self.description!r})")

    def _to_payload(self) -> dict:
        return {"name": self.name, "documents": self.documents, "description": self.description,
                "provenance": self.provenance, "titles": self.titles}


# --------------------------------------------------------------------------- the default corpus


def drop_doctest_lines(text: str) -> str:
    """Remove interactive examples from a docstring, keeping the prose.

    Drops lines that start (after stripping) with ``>>>`` or ``...`` and the output lines
    that follow an example up to the next blank line; runs of blank lines are collapsed.
    """
    kept: list[str] = []
    in_example = False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
            continue
        if in_example:
            if stripped:
                continue  # continuation ("...") or printed output of the example
            in_example = False
        elif stripped.startswith("..."):
            continue
        if not stripped and kept and not kept[-1].strip():
            continue  # collapse blank runs
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def module_docstrings(source: bytes | str) -> list[str]:
    """Docstrings of a module in source order: the module's, then every class and function's.

    Parsed with :mod:`ast` (the module is never imported); each docstring is cleaned with
    ``ast.get_docstring(clean=True)``. Raises ``SyntaxError``/``ValueError`` if it does not parse.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in old code
        tree = ast.parse(source)
    found: list[str] = []
    doc = ast.get_docstring(tree, clean=True)
    if doc:
        found.append(doc)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(child, clean=True)
                if d:
                    found.append(d)
            visit(child)

    visit(tree)
    return found


def _docstring_documents(root: Path, skip_dirs: frozenset, prefix: str) -> tuple[list[str], list[str], dict]:
    """One document per module under ``root``: its docstrings, doctests dropped, blank-line separated."""
    docs, titles = [], []
    n_files = n_failed = 0
    failed: list[str] = []
    paths = sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix())
    for path in paths:
        rel = path.relative_to(root)
        if any(part in skip_dirs for part in rel.parts[:-1]):
            continue
        n_files += 1
        try:
            pieces = module_docstrings(path.read_bytes())
        except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, OSError):
            n_failed += 1
            failed.append(rel.as_posix())
            continue
        pieces = [p for p in (drop_doctest_lines(p) for p in pieces) if p]
        if not pieces:
            continue
        docs.append("\n\n".join(pieces))
        module = ".".join(rel.with_suffix("").parts)
        titles.append(f"{prefix}{module}".removesuffix(".__init__"))
    info = {"root": str(root), "n_files": n_files, "n_documents": len(docs), "n_failed_to_parse": n_failed,
            "failed_to_parse": failed, "n_bytes": sum(len(d.encode()) for d in docs)}
    return docs, titles, info


def _environment_params() -> dict:
    versions = {}
    for pkg in DEFAULT_PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"builder_version": BUILDER_VERSION, "python": sys.version.split()[0],
            "implementation": sys.implementation.name, "packages": versions}


def _site_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[k]) for k in ("purelib", "platlib")))


def build_pydocs_corpus() -> Corpus:
    """Build the default corpus from the installed Python documentation (no cache; ~15 s).

    Documents, in this order: each Language Reference topic of ``pydoc_data.topics``
    (sorted by key), then one document per standard-library module, then one per module
    of numpy, scipy, matplotlib and torch (files in sorted path order within each).
    """
    start = time.perf_counter()
    from pydoc_data.topics import topics

    env = _environment_params()
    documents: list[str] = []
    titles: list[str] = []
    parts: dict[str, Any] = {}

    topic_docs = [(k, drop_doctest_lines(topics[k])) for k in sorted(topics)]
    topic_docs = [(k, d) for k, d in topic_docs if d]
    documents += [d for _, d in topic_docs]
    titles += [f"topic:{k}" for k, _ in topic_docs]
    parts["pydoc_topics"] = {"n_documents": len(topic_docs), "n_bytes": sum(len(d.encode()) for _, d in topic_docs)}

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs, tit, info = _docstring_documents(stdlib, STDLIB_SKIP_DIRS, "")
    documents += docs
    titles += tit
    parts["stdlib"] = info

    for pkg in DEFAULT_PACKAGES:
        root = next((r / pkg for r in _site_roots() if (r / pkg / "__init__.py").is_file()), None)
        if root is None:
            raise CorpusUnavailable(f"package {pkg!r} is not installed under {_site_roots()}; "
                                    "the default corpus needs the pinned environment (requirements.txt)")
        docs, tit, info = _docstring_documents(root, PACKAGE_SKIP_DIRS, f"{pkg}.")
        documents += docs
        titles += tit
        info["version"] = env["packages"][pkg]
        parts[pkg] = info

    corpus = Corpus(
        name="pydocs",
        documents=documents,
        description=("Python documentation shipped with the pinned environment: Language Reference topics "
                     "and docstrings of the standard library, numpy, scipy, matplotlib and torch "
                     "(doctest examples removed)"),
        provenance={**env, "parts": parts, "n_documents": len(documents)},
        titles=titles,
    )
    corpus.provenance["n_bytes"] = corpus.n_bytes
    corpus.provenance["sha256"] = corpus.sha256()
    corpus.provenance["build_seconds"] = round(time.perf_counter() - start, 2)
    return corpus


def _load_default(refresh: bool = False) -> Corpus:
    payload = cached("corpus-pydocs", _environment_params(), lambda: build_pydocs_corpus()._to_payload(),
                     fmt="pickle", refresh=refresh)
    return Corpus(**payload)


# --------------------------------------------------------------------------- local files


def _split_blocks(text: str) -> list[str]:
    """Blocks of text separated by one or more blank (whitespace-only) lines."""
    blocks = re.split(r"\n[ \t\r\f\v]*\n(?:[ \t\r\f\v]*\n)*", text)
    return [b.strip("\n") for b in blocks if b.strip()]


#: The check before a run (:func:`path_corpus_problem`) reads a file up to this size whole, and of a larger
#: file only its first this many bytes, so that it stays cheap on a folder of many or large files; the
#: loader reads every file whole and applies the same rule to all of it.
CHECK_PREFIX_BYTES = 16_384

_UTF8 = "save it as UTF-8 (e.g. iconv -f latin1 -t utf-8) or move it out of the corpus"


def text_problem(data: bytes, complete: bool = True) -> str | None:
    """Why ``data`` (a file's bytes; with ``complete=False`` only its first bytes) is not UTF-8 text, in words
    that follow the file's name, or None. A NUL byte marks a binary file (text never holds one); a byte
    sequence that is not UTF-8 an encoding such as Latin-1. A multi-byte character cut by the end of an
    incomplete prefix is not a problem."""
    nul = data.find(b"\0")
    if nul >= 0:
        return f"is binary, not text (a NUL byte at offset {nul})"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=complete)
    except UnicodeDecodeError as err:
        return f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); {_UTF8}"
    return None


def text_files(folder: Path) -> list[Path]:
    """The ``.txt``/``.md`` files under ``folder`` (any depth), in the order of their relative paths."""
    folder = Path(folder)
    return sorted((p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in _TEXT_SUFFIXES),
                  key=lambda p: p.relative_to(folder).as_posix())


def _prefix(path: Path) -> tuple[bytes, bool]:
    """The first :data:`CHECK_PREFIX_BYTES` of a file, and whether that is all of it."""
    with open(path, "rb") as f:
        data = f.read(CHECK_PREFIX_BYTES + 1)
    return data[:CHECK_PREFIX_BYTES], len(data) <= CHECK_PREFIX_BYTES


def path_corpus_problem(spec: str | os.PathLike) -> str | None:
    """Why the local corpus ``spec`` (a ``.txt``/``.md`` file or a folder of them) cannot be read, or None:
    the check a run makes before any work (a chapter's ``corpus`` parameter, through
    :mod:`lib.book.chapters`), under the rule :func:`load_path_corpus` applies when it reads the files.

    The rule: every ``.txt``/``.md`` file is UTF-8 text. A binary file (a NUL byte) or a file in
    another encoding is refused, naming the file, rather than skipped: a skipped file would change the
    corpus, and so every number computed from it, with nothing but a warning in the kernel's log (which
    the runner keeps quiet) to say so. Empty files of a folder add nothing and are passed over; a folder
    without a ``.txt``/``.md`` file, or with only empty ones, and an empty file are refused. Each file is
    read up to :data:`CHECK_PREFIX_BYTES` here; the loader reads it whole and refuses what lies beyond.
    """
    path = Path(spec).expanduser()
    if not path.exists():
        return f"no such file or folder: {str(path.resolve())!r}"
    if path.is_file():
        data, complete = _prefix(path)
        why = text_problem(data, complete)
        if why is None and complete and not data.strip():
            why = "is empty (no non-blank text)"
        return None if why is None else f"the file {str(path)!r} {why}"
    if not path.is_dir():
        return f"{str(path)!r} is neither a file nor a folder"
    files = text_files(path)
    if not files:
        return f"the folder {str(path)!r} holds no {' or '.join(_TEXT_SUFFIXES)} files"
    bad, usable = [], 0
    for f in files:
        data, complete = _prefix(f)
        why = text_problem(data, complete)
        if why is not None:
            bad.append(f"{str(f)!r} {why}")
        elif not complete or data.strip():
            usable += 1
    if bad:
        more = f" (and {len(bad) - 1} more of its {len(files)} files)" if len(bad) > 1 else ""
        return f"in the folder {str(path)!r}, {bad[0]}{more}"
    if not usable:
        return f"the folder {str(path)!r} holds {len(files)} {'/'.join(_TEXT_SUFFIXES)} files, all empty"
    return None


def _read_text(path: Path) -> str:
    """The file's text, under :func:`path_corpus_problem`'s rule (ValueError naming the file otherwise)."""
    data = path.read_bytes()
    why = text_problem(data)
    if why is not None:
        raise ValueError(f"corpus file {str(path)!r} {why}")
    return data.decode("utf-8")


def load_path_corpus(path: str | os.PathLike) -> Corpus:
    """A corpus from a local ``.txt``/``.md`` file (blank-line-separated blocks) or a folder of them (one
    document per non-empty file). Every file must be UTF-8 text (:func:`path_corpus_problem`): one that is
    not stops the load with a ValueError naming it, so a corpus never silently loses a file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"corpus path {str(path)!r} does not exist")
    resolved = path.resolve()
    if path.is_file():
        documents = _split_blocks(_read_text(path))
        if not documents:
            raise ValueError(f"corpus file {str(path)!r} is empty (no non-blank text)")
        return Corpus(name=path.stem, documents=documents,
                      description=f"blank-line-separated blocks of {path.name}",
                      provenance={"source": "file", "path": str(resolved), "n_documents": len(documents),
                                  "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    files = text_files(path)
    documents, titles = [], []
    for f in files:
        text = _read_text(f)
        if text.strip():
            documents.append(text)
            titles.append(f.relative_to(path).as_posix())
    if not documents:
        raise ValueError(f"corpus folder {str(path)!r} holds no non-empty {'/'.join(_TEXT_SUFFIXES)} files "
                         f"({len(files)} such files found)")
    return Corpus(name=path.name or str(path), documents=documents,
                  description=f"{len(documents)} text files under {path.name or path}",
                  provenance={"source": "folder", "path": str(resolved), "n_files": len(files),
                              "n_documents": len(documents), "files": titles},
                  titles=titles)


# --------------------------------------------------------------------------- Hugging Face hub


def offline_env() -> str | None:
    """The environment variable that puts the Hugging Face libraries offline (``HF_HUB_OFFLINE``,
    ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/ON/YES/TRUE), or None."""
    for var in _OFFLINE_ENV:
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the hub endpoint answers at all (any HTTP status counts), within ``timeout`` seconds."""
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True  # the server answered
    except (urllib.error.URLError, OSError, ValueError):
        return False


def is_network_error(err: BaseException) -> bool:
    """Whether ``err`` (or anything in its cause chain) looks like a failure to reach the network."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (ConnectionError, TimeoutError)):
            return True
        name = type(err).__name__
        if any(word in name for word in ("Connect", "Timeout", "Offline", "NameResolution", "NetworkError")):
            return True
        err = err.__cause__ or err.__context__
    return False


def _unavailable(dataset: str, reason: str) -> CorpusUnavailable:
    offline = ", ".join(repr(s) for s in available_sources())
    return CorpusUnavailable(
        f"cannot load hub dataset {dataset!r}: the Hugging Face hub is unreachable ({reason}). "
        f"Source 'hf:<dataset>' needs a network connection or a snapshot of the dataset in the local Hugging Face "
        f"cache. Offline sources available: {offline}, or a local path to a .txt/.md file or a folder of them.")


_UNLIMITED = object()


def load_hf_corpus(dataset: str, *, split: str = "train", text_field: str = "text", max_documents: int | None = None,
                   max_bytes: int | None | object = _UNLIMITED, config: str | None = None,
                   refresh: bool = False) -> Corpus:
    """Stream a Hugging Face hub dataset into a corpus (a network, or offline a snapshot of the dataset in the
    local Hugging Face cache, read by :func:`local_hub_dataset`; cached afterwards).

    Documents are the ``text_field`` of successive rows of ``split``, taken until
    ``max_documents`` documents or until the next document would push the total past
    ``max_bytes`` UTF-8 bytes (default ``HF_DEFAULT_MAX_BYTES``; ``None`` for no limit).
    Empty texts are skipped. The result is cached, so a later call works offline.
    """
    if max_bytes is _UNLIMITED:
        max_bytes = HF_DEFAULT_MAX_BYTES
    for pname, value in (("max_documents", max_documents), ("max_bytes", max_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
            raise ValueError(f"parameter {pname!r} must be a positive integer or None; got {value!r}")
    if not dataset:
        raise ValueError("source 'hf:<dataset>' needs a dataset name after 'hf:', e.g. 'hf:monology/pile-uncopyrighted'")
    try:
        datasets_version = importlib.metadata.version("datasets")
    except importlib.metadata.PackageNotFoundError:
        datasets_version = None
    local = local_hub_dataset(dataset, split, config) if offline_env() else None
    params = {"dataset": dataset, "config": config, "split": split, "text_field": text_field,
              "max_documents": max_documents, "max_bytes": max_bytes, "datasets": datasets_version,
              # offline, the snapshot read (a stand-in is not the hub's data): its commit and files are the key
              "snapshot": None if local is None else [local[1], [f.name for f in local[0]]]}

    def fetch() -> dict:
        return _fetch_hf(dataset, config, split, text_field, max_documents, max_bytes)._to_payload()

    return Corpus(**cached("corpus-hf", params, fetch, fmt="pickle", refresh=refresh))


DATA_SUFFIXES = (".jsonl", ".jsonl.zst", ".jsonl.gz", ".json", ".json.gz", ".parquet")


def local_hub_dataset(dataset: str, split: str = "train", config: str | None = None) -> tuple[list[Path], str] | None:
    """The data files of ``split`` in a snapshot of the hub dataset ``dataset`` that is already in the local
    Hugging Face cache (``datasets--<org>--<name>/refs/main`` → ``snapshots/<commit>/``), with the commit;
    None if there is none. A file belongs to the split when a folder or its name starts with the split's
    name (``train/00.jsonl.zst``, ``data/train-00000-of-00001.parquet``), under ``config/`` if given."""
    try:
        from huggingface_hub import snapshot_download

        root = Path(snapshot_download(dataset, repo_type="dataset", local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the cache (or no cache at all): the caller says what works offline
        return None
    if config:
        root = root / config
    files = []
    for path in sorted(root.rglob("*")):
        if not (path.is_file() and path.name.endswith(DATA_SUFFIXES)):
            continue
        parts = path.relative_to(root).parts
        if any(part == split or part.startswith(split + "-") or part.startswith(split + ".") for part in parts):
            files.append(path)
    return (files, root.name if not config else root.parent.name) if files else None


def _hub_stream(dataset: str, config: str | None, split: str):
    """Rows of the hub dataset: streamed from the hub when online; offline, from a snapshot of it in the
    local Hugging Face cache (so that ``hf:<dataset>`` reads the same files either way)."""
    import datasets

    var = offline_env()
    if var:
        local = local_hub_dataset(dataset, split, config)
        if local is None:
            raise _unavailable(dataset, f"offline mode is on ({var}={os.environ[var]}) and the local Hugging Face "
                                        f"cache ({_hub_cache()}) holds no snapshot of it with a {split!r} split")
        files, _commit = local
        builder = "parquet" if files[0].name.endswith(".parquet") else "json"
        return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", streaming=True), local
    if not hub_reachable():
        raise _unavailable(dataset, f"no answer from {os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}")
    # Short network timeouts (read when huggingface_hub is first imported).
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    return datasets.load_dataset(dataset, config, split=split, streaming=True), None


def _hub_cache() -> str:
    try:
        from huggingface_hub import constants

        return str(constants.HF_HUB_CACHE)
    except Exception:  # noqa: BLE001
        return "~/.cache/huggingface/hub"


def _fetch_hf(dataset: str, config: str | None, split: str, text_field: str,
              max_documents: int | None, max_bytes: int | None) -> Corpus:
    import datasets

    try:
        stream, local = _hub_stream(dataset, config, split)
        columns = getattr(stream, "column_names", None)
        if columns and text_field not in columns:
            raise ValueError(f"parameter 'text_field' is {text_field!r}, but dataset {dataset!r} has fields {list(columns)}")
        documents: list[str] = []
        total = n_rows = 0
        truncated = False
        for row in stream:
            n_rows += 1
            if text_field not in row:
                raise ValueError(f"parameter 'text_field' is {text_field!r}, but rows of dataset {dataset!r} "
                                 f"have fields {sorted(row)}")
            text = row[text_field]
            if not isinstance(text, str):
                raise ValueError(f"field {text_field!r} of dataset {dataset!r} holds {type(text).__name__}, not text")
            if not text.strip():
                continue
            size = len(text.encode("utf-8"))
            if max_bytes is not None and total + size > max_bytes:
                truncated = True
                break
            documents.append(text)
            total += size
            if max_documents is not None and len(documents) >= max_documents:
                truncated = True
                break
    except (ValueError, CorpusUnavailable):
        raise
    except Exception as err:  # noqa: BLE001 - classify, then re-raise
        if is_network_error(err):
            raise _unavailable(dataset, f"{type(err).__name__}: {err}") from err
        raise
    if not documents:
        raise ValueError(f"hub dataset {dataset!r} (split {split!r}) gave no non-empty documents within the limits "
                         f"(max_documents={max_documents}, max_bytes={max_bytes})")
    return Corpus(
        name=f"hf:{dataset}",
        documents=documents,
        description=f"first {len(documents)} documents of hub dataset {dataset!r}"
                    + (f" ({config})" if config else "") + f", split {split!r}",
        provenance={"source": "hf", "dataset": dataset, "config": config, "split": split, "text_field": text_field,
                    "local_snapshot": None if local is None else local[1],
                    "max_documents": max_documents, "max_bytes": max_bytes, "rows_read": n_rows,
                    "n_documents": len(documents), "n_bytes": total, "truncated": truncated,
                    "datasets_version": getattr(datasets, "__version__", None),
                    "fetched": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
    )


# --------------------------------------------------------------------------- registry and dispatch

_BUILTIN_SOURCES = {
    "default": "offline default: ~14 MB of Python documentation prose shipped with the pinned environment",
    "pydocs": "alias of 'default'",
}
_REGISTRY: dict[str, tuple[Callable[..., Corpus], str]] = {}


def register_source(name: str, builder: Callable[..., Corpus], description: str) -> None:
    """Make ``load_corpus(name, **options)`` call ``builder(**options)`` (which returns a Corpus).

    Later chapters register their synthetic corpora here. Registering a name again
    replaces the earlier builder (so a notebook cell can be re-run). A registered name
    takes precedence over a local file or folder of the same name.
    """
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise ValueError(f"parameter 'name' must be a non-empty string without surrounding spaces; got {name!r}")
    if name in _BUILTIN_SOURCES or name.startswith("hf:"):
        raise ValueError(f"parameter 'name' {name!r} is reserved (built-in sources: {sorted(_BUILTIN_SOURCES)}, 'hf:<dataset>')")
    if not callable(builder):
        raise TypeError(f"parameter 'builder' must be callable; got {type(builder).__name__}")
    _REGISTRY[name] = (builder, " ".join(str(description).split()))


def unregister_source(name: str) -> None:
    """Remove a registered source (no error if absent)."""
    _REGISTRY.pop(name, None)


def available_sources() -> dict[str, str]:
    """Names ``load_corpus`` accepts without a network, each with a one-line description.

    Built-in names first, then registered ones. (Local paths and ``"hf:<dataset>"`` are
    accepted too; they are forms, not names.)
    """
    return {**_BUILTIN_SOURCES, **{k: v[1] for k, v in _REGISTRY.items()}}


def _sources_help() -> str:
    names = "; ".join(f"{k!r} ({v})" for k, v in available_sources().items())
    return (f"offline sources: {names}; or a path to a local .txt/.md file or folder; "
            "or 'hf:<dataset name>' (needs a network)")


class SourceNotFound(FileNotFoundError, ValueError):
    """``source`` looks like a path, but nothing is there (both a FileNotFoundError and a ValueError)."""


def _looks_like_path(source: str) -> bool:
    return (os.sep in source or "/" in source or source.startswith((".", "~"))
            or source.lower().endswith(_TEXT_SUFFIXES))


def _no_options(source: str, options: dict, allowed: tuple = ()) -> None:
    extra = sorted(set(options) - set(allowed))
    if extra:
        raise ValueError(f"source {source!r} takes no option(s) {extra}" + (f"; it accepts {list(allowed)}" if allowed else ""))


def load_corpus(source: str | os.PathLike = "default", **options) -> Corpus:
    """Load a corpus: ``"default"``/``"pydocs"``, a local path, ``"hf:<dataset>"`` or a registered name.

    ``options`` go to the source: ``refresh=True`` rebuilds a cached corpus; ``hf:``
    takes ``split``, ``text_field``, ``max_documents``, ``max_bytes``, ``config``;
    a registered builder gets them all. See :func:`available_sources`.
    """
    if isinstance(source, os.PathLike):
        path = Path(source)
        if not path.exists():
            raise SourceNotFound(f"parameter 'source' (a chapter's 'corpus') is the path {str(path)!r}, "
                                 f"which does not exist. {_sources_help()}")
        _no_options(str(path), options)
        return load_path_corpus(path)
    if not isinstance(source, str):
        raise ValueError(f"parameter 'source' (a chapter's 'corpus') must be a string or a path; "
                         f"got {type(source).__name__}. {_sources_help()}")
    if source in _REGISTRY:
        corpus = _REGISTRY[source][0](**options)
        if not isinstance(corpus, Corpus):
            raise TypeError(f"builder of source {source!r} returned {type(corpus).__name__}, not a Corpus")
        return corpus
    if source in ("default", "pydocs"):
        _no_options(source, options, ("refresh",))
        return _load_default(**options)
    if source.startswith("hf:"):
        _no_options(source, options, ("split", "text_field", "max_documents", "max_bytes", "config", "refresh"))
        return load_hf_corpus(source[3:], **options)
    path = Path(source).expanduser()
    if path.exists():
        _no_options(source, options)
        return load_path_corpus(path)
    if _looks_like_path(source):
        raise SourceNotFound(f"parameter 'source' (a chapter's 'corpus') {source!r} looks like a path but "
                             f"does not exist (resolved: {str(path.resolve())!r}). {_sources_help()}")
    raise ValueError(f"parameter 'source' (a chapter's 'corpus') {source!r} is not a known source name, "
                     f"an existing path, or 'hf:<dataset>'. {_sources_help()}")


__all__ = ["Corpus", "CorpusUnavailable", "SourceNotFound", "load_corpus", "load_path_corpus", "load_hf_corpus",
           "path_corpus_problem", "text_problem", "text_files", "CHECK_PREFIX_BYTES",
           "build_pydocs_corpus", "register_source", "unregister_source", "available_sources",
           "drop_doctest_lines", "module_docstrings", "DEFAULT_PACKAGES", "HF_DEFAULT_MAX_BYTES", "offline_env",
           "hub_reachable", "is_network_error"]
