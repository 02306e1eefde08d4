"""Artefact cache: expensive results stored by a hash of what produced them.

An entry lives in ``<root>/<name>/<params-hash>-<source-hash>/`` and holds the payload
files plus ``meta.json`` with the parameters, the producing source's hash and a SHA-256
of every payload file. The rules:

* **Key.** ``params-hash`` is the SHA-256 of the canonical JSON of the parameters;
  ``source-hash`` the SHA-256 of the source files of the producing modules. Editing the
  code that made an artefact therefore changes its key.
* **Atomic writes.** A payload is produced in ``<key>.partial/`` and the directory is
  renamed into place only after ``meta.json`` (with checksums) is written: a crash leaves
  a partial directory, never a half-written entry.
* **Resume.** The partial directory survives a crash, so a long producer (training loop)
  given ``fmt="dir"`` can checkpoint into it and pick up where it stopped.
* **One producer at a time.** A lock file per entry makes a second process wait for the
  first and then use its result.
* **Corrupt or stale entries** (bad checksum, missing file, unreadable metadata; or an
  entry with the same parameters made by older source) are reported and recomputed,
  never silently used.

The root is ``$BOOK_CACHE_DIR`` if set, else ``<repo>/_cache``.
"""
from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import pickle
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .. import REPO_ROOT
from .progress import log_stream

CACHE_ENV = "BOOK_CACHE_DIR"
FORMATS = ("pickle", "npz", "dir")


class CacheError(RuntimeError):
    """Raised when a cache entry cannot be written or a request is malformed."""


def cache_root() -> Path:
    """The cache directory: ``$BOOK_CACHE_DIR`` or ``<repo>/_cache``."""
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / "_cache")


def _canonical(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return {"ndarray": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest(),
                "dtype": str(obj.dtype), "shape": list(obj.shape)}
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CacheError(f"cache parameters must be JSON-like (dict, list, str, number, bool, None, ndarray); got {type(obj).__name__}")


def params_hash(params: dict) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of ``params``."""
    text = json.dumps(_canonical(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _source_file(obj: Any) -> Path | None:
    if isinstance(obj, (str, Path)):
        return Path(obj)
    module = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
    path = getattr(module, "__file__", None)
    return Path(path) if path else None


def source_hash(sources: Iterable[Any]) -> str:
    """SHA-256 (first 16 hex digits) of the source files of the given modules/functions/paths."""
    digest = hashlib.sha256()
    files = sorted({str(p) for p in (_source_file(s) for s in sources) if p is not None})
    for path in files:
        digest.update(Path(path).name.encode())
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _payload_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "meta.json")


def _log(message: str) -> None:
    print(f"[cache] {message}", file=log_stream(), flush=True)


class Entry:
    """One cache entry's location and its validation."""

    def __init__(self, root: Path, name: str, params: dict, sources: Iterable[Any]):
        self.name, self.params = name, params
        self.phash, self.shash = params_hash(params), source_hash(sources)
        self.dir = root / name / f"{self.phash}-{self.shash}"
        self.partial = self.dir.with_name(self.dir.name + ".partial")

    def problem(self) -> str | None:
        """Why the stored entry cannot be used (None if it is sound)."""
        meta_path = self.dir / "meta.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as err:
            return f"unreadable meta.json ({err.__class__.__name__})"
        if meta.get("params_hash") != self.phash or meta.get("source_hash") != self.shash:
            return "metadata does not match its key"
        for rel, expected in meta.get("sha256", {}).items():
            path = self.dir / rel
            if not path.is_file():
                return f"missing payload file {rel}"
            if file_sha256(path) != expected:
                return f"checksum mismatch in {rel}"
        if not meta.get("sha256"):
            return "no payload recorded"
        return None

    def stale_siblings(self) -> list[Path]:
        """Entries with the same parameters made by a different version of the source."""
        parent = self.dir.parent
        if not parent.is_dir():
            return []
        return [p for p in parent.glob(f"{self.phash}-*")
                if p.is_dir() and p.name not in (self.dir.name, self.partial.name)]

    def commit(self, extra_meta: dict | None = None) -> None:
        """Checksum the partial directory, write meta.json, and rename it into place."""
        meta = {
            "name": self.name,
            "params": _canonical(self.params),
            "params_hash": self.phash,
            "source_hash": self.shash,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "sha256": {str(p.relative_to(self.partial)): file_sha256(p) for p in _payload_files(self.partial)},
            **(extra_meta or {}),
        }
        tmp = self.partial / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
        os.replace(tmp, self.partial / "meta.json")
        if self.dir.exists():  # written concurrently by someone else, or a corrupt entry left over
            shutil.rmtree(self.dir)
        os.replace(self.partial, self.dir)


def _save(fmt: str, value: Any, directory: Path) -> None:
    if fmt == "pickle":
        with open(directory / "payload.pkl", "wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
    elif fmt == "npz":
        if not isinstance(value, dict):
            raise CacheError(f"fmt='npz' needs the producer to return a dict of arrays; got {type(value).__name__}")
        np.savez(directory / "payload.npz", **value)


def _load(fmt: str, directory: Path) -> Any:
    if fmt == "pickle":
        with open(directory / "payload.pkl", "rb") as fh:
            return pickle.load(fh)
    if fmt == "npz":
        with np.load(directory / "payload.npz", allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    return directory


def cached(name: str, params: dict, compute: Callable[..., Any], *, fmt: str = "pickle",
           sources: Iterable[Any] = (), root: Path | None = None, refresh: bool = False) -> Any:
    """Return the artefact ``name`` for ``params``, computing and storing it if needed.

    ``fmt="pickle"``: ``compute()`` returns any picklable object.
    ``fmt="npz"``: ``compute()`` returns a dict of NumPy arrays (loaded back as a dict).
    ``fmt="dir"``: ``compute(workdir)`` writes files into ``workdir`` (kept across a crash,
    so the producer may resume from what it finds there); the entry's directory is returned.

    ``sources`` are the modules/functions whose source code the artefact depends on; the
    module of ``compute`` is always included when it is a file.
    """
    if fmt not in FORMATS:
        raise CacheError(f"parameter 'fmt' must be one of {FORMATS}; got {fmt!r}")
    if not name or "/" in name or name.startswith("."):
        raise CacheError(f"parameter 'name' must be a plain directory name; got {name!r}")
    entry = Entry(root or cache_root(), name, params, [compute, *sources])
    entry.dir.parent.mkdir(parents=True, exist_ok=True)
    # One producer per entry at a time: a second process waits here, then finds the entry made.
    with open(entry.dir.with_name(entry.dir.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if entry.dir.exists() and not refresh:
            problem = entry.problem()
            if problem is None:
                return _load(fmt, entry.dir)
            _log(f"corrupt entry {entry.dir} ({problem}); recomputing")
            shutil.rmtree(entry.dir)
        for stale in entry.stale_siblings():
            _log(f"stale entry {stale} (made by other source code); removing")
            shutil.rmtree(stale)
        entry.partial.mkdir(parents=True, exist_ok=True)
        if fmt == "dir":
            compute(entry.partial)  # on failure the partial directory stays, for the producer to resume
        else:
            try:
                value = compute()
            except BaseException:
                shutil.rmtree(entry.partial, ignore_errors=True)
                raise
            _save(fmt, value, entry.partial)
        entry.commit()
        return _load(fmt, entry.dir)


def entry_dir(name: str, params: dict, compute: Callable[..., Any], sources: Iterable[Any] = (),
              root: Path | None = None) -> Path:
    """Where ``cached(name, params, compute, sources=...)`` stores (or would store) its entry."""
    return Entry(root or cache_root(), name, params, [compute, *sources]).dir
