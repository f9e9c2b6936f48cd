"""The course runner: execute the numbered notebooks headlessly with papermill.

``cascadekit run --scale smoke --out runs/smoke`` executes every chapter in
order into ``--out``, with a progress bar, and stops at the first failure with
the failing cell's traceback. It writes ``summary.json`` and ``summary.md``
(status and wall time per chapter) and, on a second call, skips chapters that
were already executed at the same scale by the same code version.

Two runs into one ``--out`` share the work: each chapter is claimed with a file
lock, a run passes over a chapter another run is executing and comes back to it
at the end (by then it is usually done), and the summary is merged under a lock.
That is how the test suite's workers execute the chapters once between them.

A kernel runs in the run folder and writes under ``artifacts/NN_name/`` there;
the parameters papermill injects name that relative path, so an executed
notebook (and the book made of it) shows no path of the machine that ran it.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from filelock import FileLock, Timeout

from cascadekit.atomic import atomic_write_text, same_file
from cascadekit.codeversion import REPO_DIR, code_version, git_commit
from cascadekit.profiles import load_profile
from cascadekit.course.widgets import HEADLESS_ENV
from cascadekit.results import write_result

NOTEBOOK_DIR = REPO_DIR / "notebooks"


class ChapterFailed(RuntimeError):
    """A chapter raised; the message carries the failing cell's traceback."""


@dataclass
class ChapterResult:
    chapter: str
    status: str  # "ok", "failed", "skipped"
    wall_s: float
    scale: str
    code_version: str
    output: str
    error: str = ""


def chapters(notebook_dir: Path = NOTEBOOK_DIR) -> list[Path]:
    """Numbered chapter notebooks (``NN_name.ipynb``) in order."""
    return sorted(p for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))


def select(all_chapters: list[Path], only: Iterable[str] | None) -> list[Path]:
    """Keep chapters whose number or name matches one of ``only`` ("01", "3", "02_judging").

    A number names one chapter ("1" is chapter 01, not 01 and 10-15); other text is
    a chapter's name or the start of it.
    """
    if not only:
        return all_chapters
    wanted = [w.strip() for w in only if w.strip()]
    unknown = [w for w in wanted if not any(_names(w, p) for p in all_chapters)]
    if unknown:
        raise ValueError(f"unknown chapter(s) {unknown}; available: {[p.stem for p in all_chapters]}")
    return [p for p in all_chapters if any(_names(w, p) for w in wanted)]


def _names(wanted: str, chapter: Path) -> bool:
    if wanted.isdigit():
        return int(wanted) == int(chapter.name[:2])
    return chapter.stem.startswith(wanted)


def _load_summary(out: Path) -> dict[str, dict]:
    path = out / "summary.json"
    if not path.exists():
        return {}
    try:
        return {r["chapter"]: r for r in json.loads(path.read_text())["chapters"]}
    except (ValueError, KeyError, TypeError):
        return {}  # an unreadable summary only costs a re-run


def _write_summary(out: Path, results: dict[str, dict], scale: str, command: str | None = None) -> None:
    """``summary.json`` (its provenance under ``produced_by``: ``command``, by default the plain ``cascadekit run``
    into ``out``) and ``summary.md``, each written atomically."""
    ordered = [results[k] for k in sorted(results)]
    command = command or shlex.join(["cascadekit", "run", "--scale", scale, "--out", str(out)])
    write_result(out / "summary.json", {"scale": scale, "chapters": ordered}, command)
    rows = ["| chapter | status | wall time (s) |", "|---|---|---|"]
    rows += [f"| {r['chapter']} | {r['status']} | {r['wall_s']:.1f} |" for r in ordered]
    rows.append(f"| **total** | {len(ordered)} chapters | {sum(r['wall_s'] for r in ordered):.1f} |")
    head = f"# Course run at scale `{scale}` (code {code_version()}, git commit {git_commit()})"
    atomic_write_text(out / "summary.md", head + "\n\n" + "\n".join(rows) + "\n")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _traceback_of(err: Exception) -> str:
    """The failing cell's traceback, without terminal colour codes."""
    lines = getattr(err, "traceback", None)
    text = "\n".join(lines) if lines else f"{type(err).__name__}: {err}"
    return _ANSI.sub("", text)


#: A smoke-scale cell runs in seconds; one that takes this long is a hung kernel, reported as a failure.
#: Other scales have no limit: a toy or paper cell may legitimately train for hours.
SMOKE_CELL_TIMEOUT_S = 600
#: The kernel's own log, warnings included, is off: its one warning here is "running over TCP without
#: encryption", and the kernel and this process talk over the loopback interface only. Cell errors still
#: come back in the notebook; they are messages, not log lines.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def execute_chapter(path: Path, out: Path, scale: str, seed: int = 0, overrides: dict | None = None) -> Path:
    """Execute one notebook with papermill into ``out``; raise ChapterFailed with the traceback."""
    import papermill

    out.mkdir(parents=True, exist_ok=True)
    target = out / path.name
    # papermill writes its output as it goes; a temporary name keeps a killed run from
    # leaving half a notebook where the last complete one was
    partial = out / f".{path.stem}.partial.ipynb"
    parameters = {"scale": scale, "seed": seed, "out_dir": f"artifacts/{path.stem}"}  # the kernel runs in ``out``
    if overrides:
        parameters["overrides"] = dict(overrides)
    headless = os.environ.get(HEADLESS_ENV)
    os.environ[HEADLESS_ENV] = "1"  # the kernel inherits it: no live widgets (see cascadekit.course.widgets)
    try:
        papermill.execute_notebook(
            str(path), str(partial), parameters=parameters, cwd=str(out.resolve()),
            kernel_name="python3", language="python", progress_bar=False, log_output=False,
            extra_arguments=KERNEL_ARGUMENTS,
            request_save_on_cell_execute=False, start_timeout=300,  # a busy laptop can be slow to start a kernel
            execution_timeout=SMOKE_CELL_TIMEOUT_S if scale == "smoke" else None,
        )
    except Exception as err:  # papermill wraps every kernel error; report it whole
        raise ChapterFailed(f"{path.name} failed:\n{_traceback_of(err)}") from err
    finally:
        if partial.exists():  # the whole notebook, with the failing cell's traceback if any
            _relative_provenance(partial, path)
            os.replace(partial, target)
        if headless is None:
            os.environ.pop(HEADLESS_ENV, None)
        else:
            os.environ[HEADLESS_ENV] = headless
    return target


def _relative_provenance(executed: Path, source: Path) -> None:
    """papermill's record of where the notebook came from and went, relative to the repository and the run."""
    import nbformat

    notebook = nbformat.read(executed, as_version=4)
    record = notebook.metadata.get("papermill", {})
    record["input_path"] = os.path.relpath(source, REPO_DIR) if source.is_relative_to(REPO_DIR) else source.name
    record["output_path"] = source.name
    atomic_write_text(executed, nbformat.writes(notebook))


def run_course(
    scale: str,
    out: Path,
    only: Iterable[str] | None = None,
    seed: int = 0,
    overrides: dict | None = None,
    notebook_dir: Path = NOTEBOOK_DIR,
    log: Callable[[str], None] | None = None,
    command: str | None = None,
) -> list[ChapterResult]:
    """Run the chosen chapters in order; stop at the first failure (after recording it).

    ``log`` gets a line when a chapter starts and when it ends; ``command`` is
    what ``summary.json`` records as having produced it. A chapter another
    run into the same ``out`` is executing is taken up last, once that run lets go of it.
    """
    load_profile(scale, overrides)  # fail fast on an unknown scale or override ...
    todo = select(chapters(notebook_dir), only)  # ... or chapter
    out = Path(out)
    if same_file(out, notebook_dir):
        raise ValueError(f"--out {str(out)!r} is the notebooks folder: refusing to overwrite the chapters")
    return run_notebooks(todo, out, scale, seed, overrides, log, command)


def run_notebooks(todo: list[Path], out: Path, scale: str, seed: int = 0, overrides: dict | None = None,
                  log: Callable[[str], None] | None = None, command: str | None = None) -> list[ChapterResult]:
    """Execute ``todo`` in order into ``out`` (see :func:`run_course`), sharing the work with other runs into ``out``."""
    from tqdm.auto import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, ChapterResult] = {}
    deferred: list[Path] = []
    bar = tqdm(total=len(todo), desc=f"course ({scale})", unit="chapter")
    try:
        for path in todo:
            bar.set_postfix_str(path.stem)
            lock = FileLock(out / f".{path.stem}.lock")
            try:
                lock.acquire(timeout=0)
            except Timeout:  # another run is executing it
                deferred.append(path)
                continue
            with lock:  # already held: released on leaving
                results[path.stem] = _run_chapter(path, out, scale, seed, overrides, log, command)
            bar.update()
        for path in deferred:
            with FileLock(out / f".{path.stem}.lock"):  # waits for the other run
                results[path.stem] = _run_chapter(path, out, scale, seed, overrides, log, command)
            bar.update()
    finally:
        bar.close()
    return [results[path.stem] for path in todo]


def _run_chapter(path: Path, out: Path, scale: str, seed: int, overrides: dict | None,
                 log: Callable[[str], None] | None, command: str | None) -> ChapterResult:
    """One chapter, under its lock: skipped if this code already ran it at this scale, else executed.

    Raises ChapterFailed (after recording the failure in the summary).
    """
    version = code_version()
    prior = _load_summary(out).get(path.stem)
    if (prior and prior["status"] in {"ok", "skipped"} and prior["scale"] == scale
            and prior["code_version"] == version and (out / path.name).exists() and not overrides):
        return ChapterResult(path.stem, "skipped", prior["wall_s"], scale, version, str(out / path.name))
    if log:
        log(f"executing {path.stem} ({scale}) ...")
    start = time.perf_counter()
    try:
        execute_chapter(path, out, scale, seed, overrides)
        result = ChapterResult(path.stem, "ok", time.perf_counter() - start, scale, version, str(out / path.name))
    except ChapterFailed as err:
        result = ChapterResult(path.stem, "failed", time.perf_counter() - start, scale, version,
                               str(out / path.name), str(err))
    with FileLock(out / ".summary.lock"):  # another run may have recorded chapters meanwhile
        done = _load_summary(out)
        done[path.stem] = asdict(result)
        _write_summary(out, done, scale, command)
    if log:
        log(f"{path.stem} ({scale}): {result.status} in {result.wall_s:.0f} s")
    if result.status == "failed":
        raise ChapterFailed(result.error)
    return result
