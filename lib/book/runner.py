"""Run chapters with parameters: check them first, execute with papermill, keep the record.

For each chapter the runner

1. finds it among the chapters of ``_toc.yml`` (:mod:`lib.book.chapters`, which checks
   each notebook against its declaration) and reads the notebook with jupytext;
2. checks every given parameter against the chapter's declaration: an unknown name, a
   wrong type, a value outside the allowed set or bounds, a malformed spec, a broken
   constraint between parameters, or what this machine lacks (a GPU for ``device='cuda'``,
   a local corpus or tokenizer path) stops the run with a one-line message naming the
   parameter, what is allowed and what was given, before any kernel starts;
3. executes the notebook with papermill (working directory: the chapter's folder; a
   per-cell timeout; the kernel over IPC where the platform has it, and not interrupted on
   a normal shutdown, so that its log carries no transport warning or spurious
   ``KeyboardInterrupt``) into ``_build/src/<chapter>.ipynb`` (or an output folder);
4. completes the chapter's record (``_build/records/<chapter>.json``: every recorded value
   plus profile, parameters, seed, device, package versions, wall time) and decides the
   chapter's claims.

The command line (:mod:`lib.book.cli`) is the reader's way in.
"""
from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import threading
import time
import uuid
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import REPO_ROOT
from .chapters import (NAMES_NOT_PATHS, PATH_PARAMETERS, Chapter, chapter_sources, chapters, get_chapter,
                       read_notebook as read_source, record_section)
from .claims import Result, evaluate
from .costs import DoesNotFit, check_fits, heavy_steps, this_device
from .pages import executed_path
from .progress import TERMINAL_ENV
from .parameters import ParameterError, parameters_cell_values, suggest
from .records import RECORDS_ENV, RUNNER_ENV, load_records, records_dir


class ChapterInterrupted(Exception):
    """The reader interrupted a chapter (Ctrl-C). Its record is marked incomplete; the message says where
    it stopped."""


@dataclass
class ChapterRun:
    chapter: Chapter
    notebook: Path
    records: dict[str, Any]
    results: list[Result]
    wall_s: float

    @property
    def failed_claims(self) -> list[Result]:
        return [r for r in self.results if not r.ok]


def find_chapter(ref: str) -> Chapter:
    """A chapter by id (``intro``) or by source path (``chapters/intro.md``), reading its declaration alone."""
    sources = chapter_sources()
    if ref not in sources:
        path = Path(ref).resolve()
        ref = next((chapter_id for chapter_id, source in sources.items() if source.resolve() == path), ref)
    return get_chapter(ref)  # raises for an unknown chapter, with the closest id and the list


def book_chapters() -> list[Chapter]:
    """The executable chapters in the reading order of ``_toc.yml``."""
    return list(chapters().values())


def read_notebook(chapter: Chapter):
    """The chapter as an nbformat notebook (its parameters cell was checked by discovery)."""
    path = REPO_ROOT / chapter.path
    if not path.is_file():
        raise FileNotFoundError(f"chapter source {path} does not exist")
    return read_source(path)


def check_parameters(chapter: Chapter, given: dict[str, Any]) -> dict[str, Any]:
    """Check given values (names, types, allowed sets, bounds, spec syntax, constraints, and
    what this machine must provide); return them, resolved."""
    values = chapter.resolve(given)
    chapter.preflight(values)
    return values


def absolute_paths(given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with relative local paths of :data:`PATH_PARAMETERS` made absolute:
    the kernel runs in the chapter's folder, the reader meant their own working directory. A name
    (``default``, ``byte``, ``suite``, ``hf:...``, ``bpe:...``) and an empty value (never ``.``) stay as
    they are, for the parameter's own check."""
    def fix(name: str, value: Any) -> Any:
        if name in PATH_PARAMETERS and isinstance(value, str) and value.strip() \
                and not value.startswith(("hf:", "bpe:")) and value not in NAMES_NOT_PATHS:
            path = Path(value).expanduser()
            if not path.is_absolute() and path.exists():
                return str(path.resolve())
        return value
    return {name: fix(name, value) for name, value in given.items()}


LIVE_KERNELS: "weakref.WeakSet" = weakref.WeakSet()  # the kernel managers this process started


def kill_kernels() -> None:
    """Kill every kernel this process started (their own sessions: a terminal's Ctrl-C reaches only the
    runner), at once, so that a kernel still running its cell never writes to the terminal afterwards."""
    for manager in list(LIVE_KERNELS):
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@contextmanager
def kernels_killed_on_interrupt():
    """While a chapter runs, Ctrl-C kills its kernel first, then raises KeyboardInterrupt in the runner."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):
        kill_kernels()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def quiet_kernel_manager():
    """The kernel manager class the runner starts kernels with.

    Over IPC (Unix sockets at a unique path in the temporary folder, removed at shutdown)
    rather than TCP where the platform has it, so the kernel does not warn that it runs
    unencrypted over TCP; and no SIGINT on shutdown (jupyter_client interrupts before every
    shutdown request, which the kernel may log as ``ERROR | KeyboardInterrupt caught in
    kernel``). The public ``interrupt_kernel`` (a timeout, the reader) still interrupts; a
    kernel that does not stop on the shutdown request is terminated and killed as usual;
    errors in cells reach the runner through papermill, untouched. The kernel's file
    descriptors are not captured into the notebook, so what the book writes to the
    process's own stderr (progress, cache messages) reaches the runner's terminal only.
    """
    from jupyter_client import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            LIVE_KERNELS.add(self)
            if os.name == "posix":  # sockets at an absolute, unique path: kernels in one folder never collide
                self.transport = "ipc"
                self.ip = os.path.join(tempfile.gettempdir(), f"lowrank-kernel-{uuid.uuid4().hex[:12]}")

        async def _async_interrupt_kernel(self) -> None:
            if not self.shutting_down:
                await super()._async_interrupt_kernel()

        def format_kernel_cmd(self, extra_arguments=None):
            # The kernel's own stderr stays the runner's terminal (ipykernel would otherwise
            # forward file descriptor 2 into the notebook): progress bars and cache messages,
            # sent there by lib.book.progress.log_stream, stay off the rendered page.
            cmd = super().format_kernel_cmd(extra_arguments)
            if any("ipykernel" in part for part in cmd):
                cmd.append("--IPKernelApp.capture_fd_output=False")
            return cmd

    return QuietKernelManager


FOLDED = "hide-input"  # myst-nb folds the cell's source behind a "Show code cell source" toggle


def show_one_parameters_cell(notebook_path: Path, source: str) -> None:
    """Keep one parameters cell on the rendered page.

    papermill inserts its ``injected-parameters`` cell after the chapter's own ``parameters``
    cell. When the injected values are the chapter's defaults the injected cell is hidden; when
    they differ, the chapter's cell (its defaults) is hidden and the injected one, headed as
    the parameters of this run, is shown. Both stay in the notebook (tag ``remove-cell``). The cell
    shown is folded (tag ``hide-input``): it is there for papermill, and a reader opens it on demand.
    """
    import nbformat

    nb = nbformat.read(notebook_path, as_version=4)
    tagged = {tag: cell for cell in nb.cells for tag in cell.get("metadata", {}).get("tags", [])
              if tag in ("parameters", "injected-parameters")}
    own, injected = tagged.get("parameters"), tagged.get("injected-parameters")
    shown = own if injected is None else injected
    if own is not None and injected is not None:
        try:
            defaults, given = parameters_cell_values(own.source), parameters_cell_values(injected.source)
        except ParameterError:
            defaults, given = None, None
        if defaults is not None and all(name in defaults and defaults[name] == value for name, value in given.items()):
            hide, shown = injected, own
        elif defaults is not None:
            hide = own
            injected.source = f"# Parameters of this run (the defaults are in {source})\n" + "\n".join(
                line for line in injected.source.splitlines() if not line.startswith("# Parameters"))
        else:
            hide, shown = None, None
        if hide is not None:
            hide.metadata.setdefault("tags", []).append("remove-cell")
    if shown is not None and FOLDED not in shown.metadata.setdefault("tags", []):
        shown.metadata["tags"].append(FOLDED)
    nbformat.write(nb, notebook_path)


def without_machine_paths(notebook_path: Path, source: str) -> None:
    """Take this machine's paths out of an executed notebook, which readers download from the book.

    papermill records where it read and wrote the notebook (``metadata.papermill.input_path`` and
    ``output_path``: a temporary folder and the build folder). They become the chapter's source in the
    repository and the notebook's name beside it, so a published notebook names no machine.
    """
    import nbformat

    nb = nbformat.read(notebook_path, as_version=4)
    papermill = nb.metadata.get("papermill")
    if papermill is None:
        return
    source_path = Path(source)
    if source_path.is_absolute():
        try:
            source_path = source_path.relative_to(REPO_ROOT)
        except ValueError:
            source_path = Path(source_path.name)
    papermill["input_path"] = source_path.as_posix()
    papermill["output_path"] = source_path.with_suffix(".ipynb").as_posix()
    nbformat.write(nb, notebook_path)


def unformat_undecided_glue(notebook_path: Path, names: set[str]) -> None:
    """Let the page show "undecided" where an undecided record is glued with a number format.

    ``{glue:text}`name:.3f``` would fail the build on the text "undecided"; the executed
    notebook's markdown keeps the role but drops the format of those names (the source is untouched).
    """
    import nbformat

    if not names:
        return
    pattern = re.compile(r"(\{glue:text\}`)(" + "|".join(map(re.escape, sorted(names))) + r"):[^`]*`")
    nb = nbformat.read(notebook_path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            new = pattern.sub(r"\1\2`", cell.source)
            changed |= new != cell.source
            cell.source = new
    if changed:
        nbformat.write(nb, notebook_path)


def default_timeout(profile: str, chapter: Chapter) -> int:
    return max(600, 3 * chapter.budget_ci_s) if profile == "ci" else 6 * 3600


def execute(chapter: Chapter, given: dict[str, Any], *, out_dir: Path | None = None,
            timeout: int | None = None, verbose: bool = False, smoke: bool = False) -> ChapterRun:
    """Check, execute and record one chapter (see the module docstring)."""
    import nbformat
    import papermill

    nb = read_notebook(chapter)
    given = absolute_paths(given)
    resolved = check_parameters(chapter, given)
    out_dir = Path(out_dir).resolve() if out_dir else None  # the kernel runs in the chapter's folder
    notebook_out = (out_dir / f"{chapter.id}.ipynb") if out_dir else executed_path(chapter.page)
    rec_dir = (out_dir / "records") if out_dir else records_dir()
    notebook_out.parent.mkdir(parents=True, exist_ok=True)
    rec_dir.mkdir(parents=True, exist_ok=True)
    env_before = {k: os.environ.get(k) for k in (RECORDS_ENV, "PYTHONPATH", TERMINAL_ENV, RUNNER_ENV)}
    os.environ[RECORDS_ENV] = str(rec_dir)
    os.environ[TERMINAL_ENV] = "1"  # progress bars and cache messages to this terminal, not the page
    os.environ[RUNNER_ENV] = "1"  # the record starts incomplete; it is finished below
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env_before["PYTHONPATH"]]))
    (rec_dir / f"{chapter.id}.json").unlink(missing_ok=True)  # an earlier run's record is not this run's
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp, kernels_killed_on_interrupt():
            source_nb = Path(tmp) / f"{chapter.id}.ipynb"
            nbformat.write(nb, source_nb)
            papermill.execute_notebook(
                str(source_nb), str(notebook_out), parameters=given, cwd=str((REPO_ROOT / chapter.path).parent),
                kernel_name="python3", execution_timeout=timeout or default_timeout(resolved["profile"], chapter),
                progress_bar=verbose, log_output=verbose, request_save_on_cell_execute=False,
                kernel_manager_class=quiet_kernel_manager())
    except BaseException as err:
        interrupted = isinstance(err, KeyboardInterrupt) or getattr(err, "ename", None) == "KeyboardInterrupt"
        where = stopped_at(chapter, rec_dir)
        mark_incomplete(rec_dir, chapter.id, f"{'interrupted' if interrupted else 'failed'} {where}",
                        time.perf_counter() - start, resolved, given)
        if interrupted:
            raise ChapterInterrupted(f"{chapter.id}: interrupted {where}; its record is marked incomplete, and a "
                                     "rerun resumes from the cache") from None
        raise
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wall = time.perf_counter() - start
    show_one_parameters_cell(notebook_out, chapter.path)
    without_machine_paths(notebook_out, chapter.path)
    records = load_records(chapter.id, rec_dir)
    if records is None:
        raise RuntimeError(f"{chapter.path} ran but wrote no record: does it call setup({chapter.id!r})?")
    unformat_undecided_glue(notebook_out, {n for n, e in records["values"].items() if e.get("undecided")})
    records["meta"].pop("incomplete", None)
    records["meta"].pop("last_record", None)
    records["meta"].update(wall_s=round(wall, 2), parameters_given=given, notebook=str(notebook_out),
                           finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **({"smoke": True} if smoke else {}))
    _write_json(rec_dir / f"{chapter.id}.json", records)
    results = [evaluate(c, records) for c in chapter.claims]
    return ChapterRun(chapter, notebook_out, records, results, wall)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(f".json.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def stopped_at(chapter: Chapter, rec_dir: Path) -> str:
    """Where a run stopped, in words: the section of the last value it recorded (or "before its first record")."""
    records = load_records(chapter.id, rec_dir)
    last = (records or {}).get("meta", {}).get("last_record")
    if not last:
        return "before its first record"
    section = record_section(chapter, last)
    return f"in § {section} (after recording {last!r})" if section else f"after recording {last!r}"


def mark_incomplete(rec_dir: Path, chapter_id: str, why: str, wall: float, values: dict[str, Any] | None = None,
                    given: dict[str, Any] | None = None) -> None:
    """Mark the chapter's record incomplete (``meta.incomplete``: why), so no report or test counts its claims.

    A run stopped before the chapter's first cell wrote its record (Ctrl-C while the kernel starts, a failure
    in ``setup``) still leaves one: no values, the run's profile, parameters (``values``, resolved) and seed
    as the runner checked them, and why it is incomplete, so that the report says "incomplete", not "not run".
    """
    records = load_records(chapter_id, rec_dir)
    if records is None:
        values = dict(values or {})
        records = {"chapter": chapter_id, "values": {}, "meta": {
            "profile": values.get("profile"), "parameters": values, "seed": values.get("seed"),
            "parameters_given": dict(given or {}), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}}
    records["meta"].update(incomplete=why, wall_s=round(wall, 2))
    _write_json(rec_dir / f"{chapter_id}.json", records)


def plan(refs: list[str], given: dict[str, Any], *, every: bool = False,
         smoke: bool = False) -> list[tuple[Chapter, dict[str, Any]]]:
    """The chapters to run and the parameters each takes, every value checked before anything runs.

    With ``every`` (the whole book), a parameter goes to the chapters that have it, and one
    that no chapter has is an error. With ``smoke``, each chapter's ``smoke`` presets are given too
    (values the reader gave win), and a chapter that declares none is refused.
    """
    if every and refs:
        raise ParameterError(f"--all runs every chapter; name chapters ({', '.join(refs)}) or give --all, not both")
    selected = book_chapters() if every else [find_chapter(ref) for ref in refs]
    twice = sorted({c.id for c in selected if sum(c is d for d in selected) > 1})
    if twice:
        raise ParameterError(f"chapters: each chapter once; {', '.join(twice)} named twice")
    if every:
        names = sorted({n for c in selected for n in c.spec.names})
        unknown = [k for k in given if k not in names]
        if unknown:
            raise ParameterError(f"no chapter has the parameter(s) {', '.join(map(repr, unknown))}"
                                 f"{suggest(unknown[0], names)}; `lowrank-book list` shows each chapter's")
    plans = []
    for chapter in selected:
        mine = absolute_paths({k: v for k, v in given.items() if k in chapter.spec.names} if every else dict(given))
        if smoke:
            mine = chapter.with_smoke(mine)
        values = check_parameters(chapter, mine)
        fits_the_device(chapter, values)
        plans.append((chapter, mine))
    return plans


def fits_the_device(chapter: Chapter, values: dict[str, Any]) -> None:
    """Refuse (ParameterError) a run whose largest heavy step cannot fit the device's memory, before any work."""
    try:
        steps = heavy_steps(chapter, values)
    except (ValueError, OSError) as err:  # a model or tokenizer that cannot be read here (its config, its files)
        raise ParameterError(f"{chapter.id}: its heavy steps cannot be sized for these parameters: {err}") from None
    if steps:
        try:
            check_fits(chapter.id, steps, this_device(values["device"], measure=False))
        except DoesNotFit as err:
            raise ParameterError(str(err)) from None


def reads_other_records(chapter: Chapter) -> bool:
    """Whether the chapter reads the records of the others (a ``records_dir`` parameter, like the
    reproduction report): it runs after them."""
    return "records_dir" in chapter.spec.names


def schedule(plans: list[tuple[Chapter, dict[str, Any]]]) -> list[list[tuple[Chapter, dict[str, Any]]]]:
    """The waves of a parallel run: first every chapter that reads no other's records, the longest ci
    budget first (so that the longest chapter never starts last), then the chapters that read the
    others' records, in reading order. Chapters that need the same cached artefact (the book's models)
    wait for its one producer (:mod:`lib.book.cache`)."""
    first = sorted((p for p in plans if not reads_other_records(p[0])), key=lambda p: -p[0].budget_ci_s)
    return [wave for wave in (first, [p for p in plans if reads_other_records(p[0])]) if wave]


def child_command(chapter: Chapter, given: dict[str, Any], *, out_dir: Path | None, timeout: int | None,
                  smoke: bool) -> list[str]:
    """The ``python -m lib run`` command line that executes one chapter as :func:`execute` would here:
    each parameter as ``-p NAME <Python literal>`` (the form the command line reads back exactly)."""
    import sys

    cmd = [sys.executable, "-m", "lib", "run", chapter.id]
    for name, value in absolute_paths(given).items():
        cmd += ["-p", name, repr(value)]
    if out_dir is not None:
        cmd += ["--out", str(Path(out_dir).resolve())]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    if smoke:
        cmd.append("--smoke")
    return cmd


def execute_in_parallel(plans: list[tuple[Chapter, dict[str, Any]]], jobs: int, *, out_dir: Path | None = None,
                        timeout: int | None = None, smoke: bool = False) -> list[tuple[Chapter, int]]:
    """Run the chapters of ``plans`` as up to ``jobs`` ``python -m lib run`` processes at once, in the waves of
    :func:`schedule`; each writes its notebook and record where :func:`execute` would. A chapter's numbers do
    not depend on what runs beside it (each kernel keeps its own thread counts), only its wall time does.
    Returns (chapter, exit status) in the order of ``plans``; a wave starts only when the previous one ended."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ParameterError(f"--jobs: allowed values are an integer >= 1; got {jobs!r}")
    status: dict[str, int] = {}

    def one(plan):
        chapter, given = plan
        cmd = child_command(chapter, given, out_dir=out_dir, timeout=timeout, smoke=smoke)
        status[chapter.id] = subprocess.run(cmd, cwd=REPO_ROOT).returncode

    for wave in schedule(plans):
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, wave))
    return [(chapter, status[chapter.id]) for chapter, _ in plans]
