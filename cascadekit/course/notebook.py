"""Helpers for the first cells of every chapter notebook.

Each chapter starts with a papermill ``parameters`` cell (scale, seed, out_dir,
overrides) and then opens its one chapter object, ``ch = chapter("11", scale,
seed, out_dir, overrides)`` (:func:`chapter`): the resolved config, the chapter's
module, its committed or fresh results and its claims; no chapter id or results
folder is typed after that (chapters 01 and 02, with no experiment of their own,
use only its profile). :func:`chapter` starts with :func:`start_chapter`, which
resolves the profile, prints it with the stack versions and device, makes the
output folder, and silences the library messages the kit knows to be noise
(:func:`quiet_known_noise`).
A bad setting (``papermill -p overrides '{"model.hidden": "big"}'``) is one line
naming the field and the type it needs, the same line ``cascadekit run --set`` gives.
:func:`show_source` displays a library function's source, so the notebook
teaches the code that actually runs instead of a pasted copy.
:func:`quote` and :func:`render` put committed measurements into prose, so a
number is never typed twice (``tests/test_notebook_numbers.py`` checks the rest).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import logging
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

from cascadekit import chapters
from cascadekit.chapters import ChapterConfig
from cascadekit.engine.envinfo import describe_environment
from cascadekit.formatting import fill, lookup, quote  # noqa: F401 - the notebooks' helpers, kept here by name
from cascadekit.profiles import CHAPTER_PREFIX, Profile, ProfileError, load_profile, overrides_mapping
from cascadekit.results import RESULTS_DIR, load_metrics


class ChapterSettingsError(ProfileError):
    """A bad parameter of a chapter, shown in the notebook as its one-line message, without a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of the traceback
        return [f"{type(self).__name__}: {self}"]


def start_chapter(scale: str, seed: int, out_dir: str | Path, overrides: Any = None) -> Profile:
    """Resolve and print the profile, the environment's short form, and create ``out_dir``."""
    return _opened(_scale_profile(scale, seed, overrides), out_dir)


def _scale_profile(scale: str, seed: int, overrides: Any) -> Profile:
    """The scale profile under ``overrides``; a bad override is one :class:`ChapterSettingsError` line."""
    try:
        settings = {k: v for k, v in overrides_mapping(overrides).items() if not k.startswith(CHAPTER_PREFIX)}
        return load_profile(scale, {"seed": seed, **settings})
    except ProfileError as err:
        raise ChapterSettingsError(str(err)) from None


def _opened(profile: Profile, out_dir: str | Path) -> Profile:
    """Print ``profile`` and the environment's short form, create ``out_dir``."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    quiet_known_noise()
    print(profile.summary())
    print(describe_environment().short())
    return profile


@dataclass(frozen=True)
class Chapter:
    """One chapter as its notebook sees it: config, module, results and claims."""

    config: ChapterConfig
    out_dir: Path

    @property
    def profile(self) -> Profile:
        return self.config.profile

    @property
    def module(self) -> ModuleType:
        """The chapter's library module (``cascadekit.chapters.chNN_<name>``)."""
        return chapters.chapter_module(self.config.spec.id)

    def committed(self, arm: str = "") -> dict[str, Any] | None:
        """The committed toy run's metrics (what the book shows), or an ``arm`` kept beside it
        (``data/results/<folder>/<arm>``); None when there are none."""
        return load_metrics(f"{self.config.spec.folder}/{arm}" if arm else self.config.spec.folder)

    def at_a_glance(self) -> Any:
        """The committed toy run's claims table with its provenance (Markdown), for the top of the chapter.

        The chapter's sections build and explain each row further down; a reader
        (and the book) sees the trained run's verdicts first, whatever scale the
        notebook itself runs at.
        """
        from IPython.display import Markdown

        path = RESULTS_DIR / self.config.spec.folder / "paper_vs_run.md"
        if not path.exists():
            return Markdown(f"*No committed toy run of chapter {self.config.spec.id} yet.*")
        return Markdown(claims_summary(path.read_text()))

    def results(self, retrain: bool = False) -> dict[str, Any]:
        """The committed toy run, or the chapter's experiment run here (:func:`committed_or_run`)."""
        return committed_or_run(chapters.run, self.config, self.out_dir, retrain)

    def claims(self, metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The paper's claims beside ``metrics``' run, each with its interval and verdict."""
        return self.module.claims(metrics)


def claims_summary(paper_vs_run: str) -> str:
    """The first table of a ``paper_vs_run.md`` (the claims) and its provenance line, without the notes between."""
    lines = paper_vs_run.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        return "*The committed run has no claims table.*"
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    made = lines[-1] if lines[-1].startswith("*Produced by") else ""
    return "\n".join(["**The committed toy run at a glance**", "", *lines[start:end], "", made]).strip() + "\n"


def chapter(number: str, scale: str, seed: int, out_dir: str | Path, overrides: Any = None) -> Chapter:
    """Open chapter ``number`` at ``scale``: print the profile it runs and the environment, make ``out_dir``.

    The config is the scale profile, then the chapter's settings for that scale
    (``chapters.yaml``, with its world), then ``overrides``: the same as ``cascadekit
    experiment``. The profile printed is that one, the one the chapter runs (the plain
    scale profile said ``math_rl lengths=(36, 48, 64)`` above a chapter running 48-80).
    """
    _scale_profile(scale, seed, overrides)  # the overrides' own checks first, one line each
    try:
        config = chapters.resolve(number, scale, overrides, seed)
    except ProfileError as err:
        raise ChapterSettingsError(str(err)) from None
    _opened(config.profile, out_dir)
    if config.settings:
        print(f"chapter {config.spec.id} settings at {scale}: {dict(config.settings)}")
    return Chapter(config, Path(out_dir))


class _KnownNoise(logging.Filter):
    """Drops the library messages the kit knows to be false alarms here; lets everything else through.

    * transformers' LOAD REPORT when a causal LM is loaded as a one-output scorer (the reward model, the
      SWE judge): its ``lm_head`` is unused and its ``score`` head new, by design, and nothing else.
    * TRL's "the model may not learn to stop": the kit's chat template puts ``<|im_end|>`` inside its
      ``{% generation %}`` markers (:mod:`cascadekit.chat.format`), so the stop token is trained.
    """

    _ROW = re.compile(r"^(\S+)\s*\|\s*([A-Z]+)\s*\|", re.M)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "LOAD REPORT" in message:
            rows = self._ROW.findall(message.split("\n", 1)[-1])
            expected = {("lm_head.", "UNEXPECTED"), ("score.", "MISSING")}
            return not rows or not all((key.split(".")[0] + ".", status) in expected for key, status in rows)
        return "the model may not learn to stop" not in message


_NOISY_LOGGERS = ("transformers.modeling_utils", "transformers.modeling_layers", "trl.trainer.sft_trainer")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` right after ``name`` is first imported, so the kit never imports it itself."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _no_loss_table(module: ModuleType) -> None:
    """The Trainer's notebook progress keeps its bar but shows no "Training Loss" table.

    With GRPO as the kit runs it (one update per rollout batch, no KL) the logged loss is about 0 by
    design, so a loss table says nothing; the chapters plot reward and ``frac_reward_zero_std`` instead,
    and every stage keeps its full log history in its metrics.
    """
    callback = module.NotebookProgressCallback
    if getattr(callback, "_cascadekit_bar_only", False):
        return
    start = callback.on_train_begin

    def on_train_begin(self: Any, *args: Any, **kwargs: Any) -> None:
        start(self, *args, **kwargs)
        self.training_tracker.inner_table = None  # the tracker draws its table only when it has one

    callback.on_train_begin = on_train_begin
    callback.on_log = lambda self, *args, **kwargs: None  # the table's rows
    callback._cascadekit_bar_only = True


def quiet_known_noise() -> None:
    """Filter the known false alarms (see :class:`_KnownNoise`) and the Trainer's loss table; idempotent."""
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownNoise) for f in logger.filters):
            logger.addFilter(_KnownNoise())
    table = "transformers.utils.notebook"
    if table in sys.modules:
        _no_loss_table(sys.modules[table])
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(table, _no_loss_table))


def committed_or_run(run: Callable[[Any, Path], dict[str, Any]], config: Any, out_dir: str | Path,
                     retrain: bool = False) -> dict[str, Any]:
    """The chapter's committed toy run, or ``run(config, out_dir)``.

    A toy chapter trains for minutes to an hour on a laptop, so a course reads
    the committed run by default (the book shows the same one), and says so with
    the command and commit that made it. It runs afresh at any other scale, with
    overrides or another seed, when nothing is committed, or with ``retrain``.
    """
    default = config.scale == "toy" and not config.overrides and config.profile.seed == load_profile("toy").seed
    committed = load_metrics(config.spec.folder) if default and not retrain else None
    if committed is None:
        return run(config, Path(out_dir))
    made = committed.get("produced_by", {})
    print(f"the committed toy run: {without_scratch(made.get('command', '?'))} (commit {made.get('git_commit', '?')}); "
          f"set retrain = True in the parameters cell to run it again")
    return committed


_SCRATCH = re.compile(r"--work[= ](/\S+)")


def without_scratch(text: str) -> str:
    """``text`` with the absolute scratch folder of a recorded command (``--work /tmp/work05c``) shown as ``DIR``.

    The committed runs' commands record the trainer scratch folder of the machine that made them; a
    reader has no such folder, and the results do not depend on it.
    """
    return _SCRATCH.sub(lambda m: m.group(0).replace(m.group(1), "DIR"), text)


def show_source(obj: Callable | type) -> None:
    """Display the source of a library function or class as a highlighted code block.

    It displays the block itself, wherever it stands in a cell: returned as a value,
    it showed only as a cell's last expression, and three chapters' calls showed nothing.
    """
    from IPython.display import Markdown, display

    module = inspect.getmodule(obj)
    where = f"{module.__name__}.{obj.__qualname__}" if module else obj.__qualname__
    display(Markdown(f"`{where}`\n\n```python\n{inspect.getsource(obj)}```"))


def render(template: str, data: Mapping[str, Any]) -> Any:
    """Markdown with every ``{path:spec}`` field filled from ``data`` (``{{`` and ``}}`` are literal braces).

    ``data`` is usually a chapter's committed metrics, merged with any values the
    cell computed (``{**toy, "verdict": ...}``). Returns an ``IPython.display.Markdown``,
    shown when it ends a cell, also under papermill; ``.data`` is the text.
    """
    from IPython.display import Markdown

    return Markdown(fill(template, data))
