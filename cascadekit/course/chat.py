"""Talk to the model at every stage: one prompt, every shipped Part II checkpoint's answer side by side.

``cascadekit chat`` and :func:`chat_widget` ask the chat base, every stage of the cascade's
table (:data:`cascadekit.chapters.cascade.TABLE`) and MOPD of one training seed the same prompt, in the
mode the chat format's flag asks (:func:`cascadekit.chat.with_flag`), and show each
answer with the verifier's verdict and reward when the prompt was drawn from a
domain (the toy world's own generators, the evaluation split). Typed text has no
gold to check, and words the toy world never uses get a one-line note: the model
only knows its world.

Where the checkpoints come from: :data:`INDEX` (``data/checkpoints/stages.json``)
names every shipped Part II checkpoint by stage and training seed. It is written by
:func:`write_index`, which resolves each stage through the chapters' own stage graph
(:func:`cascadekit.chapters.cascade.checkpoint`, chapter 14's profile at toy, as
``cascadekit cascade`` runs it) with building forbidden (:func:`shipped_only`), so
the index holds exactly what the cascade would start from without training. Chat
reads the index rather than the graph because resolving a seed's stages takes tens
of seconds (the reward model and judge are loaded to key RLHF and SWE RL); the
index's test checks it against the graph and against the shipped ``stage.json``
chain. A stage the index lacks for a seed (MOPD, which chapter 15 builds and the kit
does not ship) is named as not shipped, never trained.

Sampling: greedy at temperature 0, else seeded sampling at that temperature with
top-p 0.95 (the paper's evaluation top-p), on one CPU thread: the toy models are
~1M parameters, and a second thread costs more in hand-offs than it gains (measured
0.23 s against 7 s for one 66-token answer on a loaded two-core machine). The reward
shown is the domain verifier's score, which IF-RL and Code RL train on. Where it departs
from what the other stages trained on: RLHF's reward model predicts the general
domain's hidden quality (shown here is the quality itself), Math RL subtracts a
format-switch penalty the verdict leaves out, and SWE RL trained on the execution-free
reward (a learned judge) where the verdict here runs the hidden tests.
"""
from __future__ import annotations

import contextlib
import html
import itertools
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from transformers.utils import logging as hf_logging

from cascadekit.artifacts import shipped_folder, shipped_root, verify
from cascadekit.atomic import atomic_write_json
from cascadekit.chat import strip_flag, with_flag
from cascadekit.chapters.cascade import TABLE
from cascadekit.domains import chat_record, configured, domains, draw_tasks, prompt_of
from cascadekit.engine.runtime import load_model, load_tokenizer
from cascadekit.evaluation.stage_table import follows_mode, generate, rollout
from cascadekit.profiles import Profile
from cascadekit.stages import StageOutput, one_cpu_thread

#: The index of shipped Part II checkpoints by stage and training seed (written by :func:`write_index`).
INDEX = shipped_root() / "stages.json"
#: The stages chat asks, in the cascade's order: the chat base, SFT, the RL stages, then MOPD (chapter 15).
CHAT_STAGES = ("base", *(spec.name for spec in TABLE), "MOPD")
#: The chapter whose profile resolves the stages (the whole cascade's, as ``cascadekit cascade`` uses).
CHAPTER = "14"
#: The top-p of sampled answers (the paper's evaluation setting).
TOP_P = 0.95
#: The longest prompt chat takes (a drawn toy prompt is a few hundred characters).
MAX_PROMPT_CHARS = 2000
#: The highest temperature chat samples at.
MAX_TEMPERATURE = 2.0
#: Tasks per domain and split read to learn the toy world's words (for the note on typed text).
VOCABULARY_TASKS = 40


@dataclass(frozen=True)
class Shipped:
    """One shipped checkpoint: its stage's name, its training seed (None: every seed's), its folder."""

    stage: str
    seed: int | None
    folder: str  # ``kind/key`` under data/checkpoints

    @property
    def path(self) -> Path:
        return shipped_root() / self.folder


# ---------------------------------------------------------------------------
# The index: every shipped checkpoint by stage and seed
# ---------------------------------------------------------------------------


class NotShipped(LookupError):
    """A stage resolved under :func:`shipped_only` that would have to be built."""


@contextlib.contextmanager
def shipped_only() -> Iterator[None]:
    """Inside, a stage that is neither cached nor shipped raises :class:`NotShipped` instead of building.

    Every build goes through :func:`cascadekit.stages.run_stage`'s call of the cache
    (:func:`cascadekit.artifacts.get_or_build`), so its builder is swapped for one that
    raises (as ``test_the_shipped_cascade_reaches_math_rl_without_building`` does).
    """
    from cascadekit import stages

    real = stages.get_or_build

    def refuse(kind: str, key: str, build: Any, **kwargs: Any) -> Path:
        def never(folder: Path) -> None:
            raise NotShipped(f"{kind}/{key}")
        return real(kind, key, never, **kwargs)

    stages.get_or_build = refuse
    try:
        yield
    finally:
        stages.get_or_build = real


def profile_for(seed: int) -> Profile:
    """Chapter 14's toy profile (the second world) under training seed ``seed``."""
    from cascadekit.chapters import resolve

    return resolve(CHAPTER, "toy", {"train_seed": seed}).profile


def _folder(output: StageOutput) -> str:
    """A resolved stage's shipped folder, ``kind/key`` (through the aliases when its key moved)."""
    kind, key = Path(output.checkpoint).parent.name, output.key
    found = shipped_folder(kind, key)
    if found is None:
        raise NotShipped(f"{kind}/{key} is cached here but not shipped under {shipped_root()}")
    return f"{kind}/{found[1]}"


def seed_index(seed: int) -> list[Shipped]:
    """Every shipped checkpoint of training seed ``seed``'s cascade, resolved through the stage graph.

    In the cascade's order: SFT's stage 1, SFT, the reward model RLHF scores with (the
    largest of ``reward_model.layers``) and SWE RL's judge, then each RL stage, its
    earlier runs first (Math RL's length stages, SWE RL's context stages) named
    ``<stage> run i of n``. Stops at the first stage that is not shipped (the ones
    after it start from it); MOPD is resolved too.
    """
    from cascadekit.chapters import cascade
    from cascadekit.training.chat_base import chat_base
    from cascadekit.training.sft import sft_stages

    profile, found = profile_for(seed), []
    with shipped_only():
        try:
            first, _ = sft_stages(chat_base(profile), profile)
            found.append(Shipped("SFT stage 1", seed, _folder(first)))
            for spec in (*cascade.TABLE, cascade.PLACEABLE["MOPD"]):
                stage = (cascade.cascade_stage(spec.name, profile) if spec.name in cascade.STAGES
                         else cascade.CascadeStage(spec.name, *spec.build(cascade.checkpoint(spec.after, profile),
                                                                           profile, cascade.default_work_dir())))
                runs = [run for run in stage.runs if run.checkpoint != stage.checkpoint.checkpoint]
                found += [Shipped(f"{spec.name} run {i} of {len(runs) + 1}", seed, _folder(run))
                          for i, run in enumerate(runs, 1)]
                found.append(Shipped(spec.name, seed, _folder(stage.checkpoint)))
                if spec.name == "SFT":
                    found.append(Shipped("reward model", seed, _folder(cascade.largest_reward_model(profile))))
                    found.append(Shipped("SWE judge", seed, _folder(cascade.judge(profile))))
        except NotShipped:
            pass
    return found


def graph_index(seeds: Sequence[int] | None = None) -> list[Shipped]:
    """The chat base, then :func:`seed_index` of each seed (default: 0, 1, ... up to the first without SFT)."""
    from cascadekit.training.chat_base import chat_base

    with shipped_only():
        index = [Shipped("base", None, _folder(chat_base(profile_for(0))))]
    for seed in itertools.count() if seeds is None else seeds:
        found = seed_index(seed)
        if seeds is None and not found:
            break
        index += found
    return index


def write_index(seeds: Sequence[int] | None = None) -> Path:
    """Write :data:`INDEX` from the stage graph (:func:`graph_index`); the file's path."""
    atomic_write_json(INDEX, {"written_by": "cascadekit chat --write-index (cascadekit.course.chat.write_index)",
                              "profile": f"chapter {CHAPTER}'s at toy, by training seed",
                              "checkpoints": [asdict(s) for s in graph_index(seeds)]})
    return INDEX


def read_index(path: Path = INDEX) -> list[Shipped]:
    """The shipped checkpoints :data:`INDEX` names; a missing or malformed file is one ValueError."""
    try:
        rows = json.loads(path.read_text())["checkpoints"]
        return [Shipped(str(r["stage"]), None if r["seed"] is None else int(r["seed"]), str(r["folder"]))
                for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable checkpoint index ({type(err).__name__}: {err}); "
                         f"rewrite it with `cascadekit chat --write-index`") from None


def index_table(index: Sequence[Shipped]) -> str:
    """The index as aligned text: stage, seed, folder (what ``cascadekit chat --list`` prints)."""
    width = max(len(s.stage) for s in index)
    lines = [f"{'stage':<{width}}  seed  folder (under data/checkpoints/)"]
    lines += [f"{s.stage:<{width}}  {'any' if s.seed is None else s.seed:>4}  {s.folder}" for s in index]
    return "\n".join(lines)


def stages_of(seed: int, index: Sequence[Shipped] | None = None) -> tuple[list[Shipped], list[str]]:
    """Training seed ``seed``'s checkpoint of each of :data:`CHAT_STAGES` that is shipped, and the names of those
    that are not."""
    by_stage = {s.stage: s for s in (read_index() if index is None else index) if s.seed in (None, seed)}
    return [by_stage[n] for n in CHAT_STAGES if n in by_stage], [n for n in CHAT_STAGES if n not in by_stage]


def shipped_seeds(index: Sequence[Shipped] | None = None) -> list[int]:
    """The training seeds with at least one shipped stage."""
    return sorted({s.seed for s in (read_index() if index is None else index) if s.seed is not None})


# ---------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------


@cache
def _profile() -> Profile:
    """The profile prompts are drawn with (the data and evaluation seeds are the same for every training seed)."""
    return profile_for(0)


def drawn_record(domain: str, number: int, think: bool) -> dict[str, Any]:
    """Prompt ``number`` (0, 1, ...) of ``domain``'s evaluation split as a chat record in one mode, with its gold.

    Drawn like the stage table's suite (the profile's ``sft.ops`` and evaluation
    seed), so prompt ``n`` is the suite's ``n``-th of that domain.
    """
    if domain not in domains():
        raise ValueError(f"unknown domain {domain!r}: use one of {', '.join(domains())}")
    if not 0 <= number < 10_000:
        raise ValueError(f"prompt number {number} out of range: draw 0 to 9999")
    profile = _profile()
    lo, hi = profile.sft.ops
    task = draw_tasks(configured(domain, profile.domains), number + 1, profile.seeds.eval, "eval",
                      range(lo, hi + 1))[number]
    return chat_record(task, think)


def typed_record(prompt: str, think: bool) -> dict[str, Any]:
    """Free text as a chat record of no domain's gold (the general domain's format, no tools)."""
    text = strip_flag(prompt).strip()
    if not text:
        raise ValueError("the prompt is empty: type one, or draw one with --domain D --draw")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt is {len(prompt):,} characters: at most {MAX_PROMPT_CHARS:,}")
    return {"domain": "general", "think": think, "messages": [{"role": "user", "content": with_flag(text, think)}],
            "tools": None, "gold": None}


def user_text(record: dict[str, Any]) -> str:
    """The record's last user turn, as the model reads it (flag included)."""
    return prompt_of(record)[0][-1]["content"]


@cache
def world_words() -> frozenset[str]:
    """Every word the toy world's prompts use (:data:`VOCABULARY_TASKS` tasks per domain and split), lowercased."""
    profile, words = _profile(), set()
    lo, hi = profile.sft.ops
    for name in domains():
        for split in ("sft", "rl", "eval"):
            for task in draw_tasks(configured(name, profile.domains), VOCABULARY_TASKS, 0, split, range(lo, hi + 1)):
                words.update(_words(" ".join([task.system, task.prompt, json.dumps(task.tools or [])])))
    return frozenset(words)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def outside_world(prompt: str) -> list[str]:
    """The words of ``prompt`` the toy world never uses, in order, once each."""
    known = world_words()
    return list(dict.fromkeys(w for w in _words(strip_flag(prompt)) if w not in known))


# ---------------------------------------------------------------------------
# Asking every stage
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One stage's answer: the text (every turn), the verdict and reward (None without gold), and its costs."""

    stage: str
    folder: str
    text: str
    verdict: str | None
    reward: float | None
    follows_mode: bool
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Chat:
    """One prompt asked of every shipped stage of a training seed."""

    prompt: str
    domain: str | None  # the domain it was drawn from (None: typed)
    seed: int
    think: bool
    temperature: float
    answers: list[Answer]
    not_shipped: list[str]
    note: str | None  # the one line on typed text outside the toy world


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' "Loading weights" bars off inside: in a notebook each is a widget of its own above the table."""
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


@lru_cache(maxsize=16)
def load_shipped(folder: str) -> tuple[Any, Any]:
    """A shipped checkpoint's model and tokenizer, checked against its manifest first (kept for the next ask)."""
    path = shipped_root() / folder
    verify(path, *folder.split("/"))
    with _no_progress_bars():
        return load_model(path), load_tokenizer(path)


def _answer(shipped: Shipped, record: dict[str, Any], temperature: float, sample_seed: int,
            max_new_tokens: int) -> Answer:
    started = time.perf_counter()
    model, tokenizer = load_shipped(shipped.folder)
    torch.manual_seed(sample_seed)
    with one_cpu_thread():
        (done,) = rollout(None, None, [record], max_new_tokens, 1, lambda prompts, n, batch: generate(
            model, tokenizer, prompts, n, batch, temperature=temperature, top_p=TOP_P if temperature else 1.0,
            kit=True))
    judgement = domains()[record["domain"]].judge(record["gold"], done.text) if record["gold"] is not None else None
    return Answer(shipped.stage, shipped.folder, done.text, judgement and judgement.reason,
                  judgement and judgement.score, follows_mode(done.turns[0], record["think"]), done.tokens,
                  time.perf_counter() - started)


def ask(record: dict[str, Any], seed: int = 0, temperature: float = 0.0, sample_seed: int = 0,
        index: Sequence[Shipped] | None = None) -> Chat:
    """``record``'s prompt asked of every shipped stage of training seed ``seed``, each from the same sampling seed.

    ``record`` is :func:`drawn_record`'s (judged by its domain's verifier) or
    :func:`typed_record`'s (no verdict; a note when it leaves the toy world).
    """
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise ValueError(f"temperature {temperature!r} out of range: 0 (greedy) to {MAX_TEMPERATURE}")
    shipped, missing = stages_of(seed, index)
    typed = record["gold"] is None
    unknown = outside_world(user_text(record)) if typed else []
    note = (f"the toy model only knows its world (never saw: {', '.join(unknown[:6])}); "
            "draw a prompt with --domain D --draw for answers a verifier can judge") if unknown else None
    answers = [_answer(s, record, temperature, sample_seed, _profile().sft.max_new_tokens) for s in shipped]
    return Chat(user_text(record), None if typed else record["domain"], seed, record["think"], temperature,
                answers, missing, note)


def not_shipped_line(chat: Chat, index: Sequence[Shipped] | None = None) -> str | None:
    """One line naming the stages not shipped for the chat's seed (and the seeds that have them), or None."""
    if not chat.not_shipped:
        return None
    seeds = shipped_seeds(index)
    where = f"shipped training seeds: {', '.join(map(str, seeds))}" if seeds else "no RL stage is shipped"
    return (f"not shipped for training seed {chat.seed}: {', '.join(chat.not_shipped)} ({where}; "
            "MOPD is chapter 15's: cascadekit experiment 15 builds it)")


def _verdict(answer: Answer) -> str:
    return "no gold (typed prompt)" if answer.verdict is None else answer.verdict


def _reward(answer: Answer) -> str:
    return "–" if answer.reward is None else f"{answer.reward:.2f}"


def chat_text(chat: Chat) -> str:
    """The chat as the command line prints it: the prompt, each stage's answer in full, then a summary table."""
    mode = "/think" if chat.think else "/no_think"
    sampling = "greedy" if not chat.temperature else f"temperature {chat.temperature:g}, top-p {TOP_P}"
    lines = [f"prompt ({chat.domain or 'typed'}, {mode}, training seed {chat.seed}, {sampling}):", chat.prompt]
    lines += [f"note: {line}" for line in (chat.note, not_shipped_line(chat)) if line]
    for a in chat.answers:
        lines += ["", f"== {a.stage} ({a.folder}) ==", a.text.rstrip(),
                  f"-> {_verdict(a)} | reward {_reward(a)} | {a.tokens} tokens | {a.seconds:.1f} s"]
    width = max(len(a.stage) for a in chat.answers)
    lines += ["", f"{'stage':<{width}}  reward  mode kept  verdict"]
    lines += [f"{a.stage:<{width}}  {_reward(a):>6}  {'yes' if a.follows_mode else 'no':>9}  {_verdict(a)}"
              for a in chat.answers]
    return "\n".join(lines)


def chat_html(chat: Chat) -> str:
    """The chat as an HTML table, stage -> answer, verdict, reward (the widget's and the book's)."""
    head = "<tr><th>stage</th><th>answer</th><th>verdict</th><th>reward</th><th>mode kept</th></tr>"
    rows = "".join(
        f"<tr><td>{html.escape(a.stage)}</td><td><pre style='white-space:pre-wrap'>{html.escape(a.text)}</pre></td>"
        f"<td>{html.escape(_verdict(a))}</td><td>{_reward(a)}</td><td>{'yes' if a.follows_mode else 'no'}</td></tr>"
        for a in chat.answers)
    notes = "".join(f"<p><i>{html.escape(line)}</i></p>" for line in (chat.note, not_shipped_line(chat)) if line)
    return (f"<p><b>{html.escape(chat.domain or 'typed')}</b>: <code>{html.escape(chat.prompt)}</code></p>{notes}"
            f"<table>{head}{rows}</table>")


# ---------------------------------------------------------------------------
# The widget
# ---------------------------------------------------------------------------


class ChatPanel:
    """The controls: prompt box, domain dropdown and draw button, /think toggle, temperature, seeds, the table.

    :meth:`draw` and :meth:`ask` are the buttons' callbacks (a test calls them
    directly); :attr:`table` holds the answers as HTML. A prompt edited after a draw
    is asked as typed text, without the drawn gold.
    """

    def __init__(self, domain: str = "math", seed: int = 0, think: bool = True, temperature: float = 0.0) -> None:
        import ipywidgets as w

        self.prompt = w.Textarea(placeholder="type a prompt, or draw one", layout=w.Layout(width="100%"))
        self.domain = w.Dropdown(options=list(domains()), value=domain, description="domain")
        self.draw_button = w.Button(description="draw a prompt")
        self.think = w.ToggleButton(value=think, description="/think")
        self.temperature = w.FloatSlider(value=temperature, min=0.0, max=MAX_TEMPERATURE, step=0.1,
                                         description="temperature")
        self.seed = w.Dropdown(options=sorted({*shipped_seeds(), seed}), value=seed, description="train seed")
        self.sample_seed = w.IntText(value=0, description="sample seed")
        self.ask_button = w.Button(description="ask every stage", button_style="primary")
        self.table = w.HTML()
        self.draws: dict[str, int] = {}
        self.drawn: tuple[str, int] | None = None  # the (domain, number) the box holds, until it is edited
        self.draw_button.on_click(lambda _: self.draw())
        self.ask_button.on_click(lambda _: self.ask())
        self.box = w.VBox([self.prompt, w.HBox([self.domain, self.draw_button]),
                           w.HBox([self.think, self.temperature]), w.HBox([self.seed, self.sample_seed]),
                           self.ask_button, self.table])

    def draw(self) -> None:
        """Put the domain's next evaluation prompt in the box (its gold kept for the verdict)."""
        number = self.draws.get(self.domain.value, -1) + 1
        self.show_drawn(self.domain.value, number)

    def show_drawn(self, domain: str, number: int) -> None:
        """Put prompt ``number`` of ``domain`` in the box."""
        self.draws[domain] = number
        self.drawn = (domain, number)
        self.prompt.value = strip_flag(user_text(drawn_record(domain, number, self.think.value)))

    def record(self) -> dict[str, Any]:
        """What :meth:`ask` sends: the drawn prompt in the toggle's mode if the box still holds it, else typed text."""
        if self.drawn is not None:
            drawn = drawn_record(*self.drawn, self.think.value)
            if self.prompt.value == strip_flag(user_text(drawn)):
                return drawn
        return typed_record(self.prompt.value, self.think.value)

    def ask(self) -> Chat | None:
        """Ask every stage and fill the table; a bad input is one line in the table instead."""
        try:
            chat = ask(self.record(), self.seed.value, self.temperature.value, self.sample_seed.value)
        except ValueError as err:
            self.table.value = f"<p><b>error:</b> {html.escape(str(err))}</p>"
            return None
        self.table.value = chat_html(chat)
        return chat


def chat_widget(domain: str = "math", number: int = 0, seed: int = 0, think: bool = True,
                temperature: float = 0.0) -> ChatPanel | None:
    """Show prompt ``number`` of ``domain`` answered by every stage; then, live, the panel to ask more.

    Headless (papermill, the book: :data:`cascadekit.course.widgets.HEADLESS_ENV`) or
    without ipywidgets it shows the static table alone and returns None.
    """
    from IPython.display import HTML, display

    from cascadekit.course.widgets import HEADLESS_ENV

    chat = ask(drawn_record(domain, number, think), seed, temperature)
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        ipywidgets = None
    if os.environ.get(HEADLESS_ENV) or ipywidgets is None:
        display(HTML(chat_html(chat)))
        return None
    panel = ChatPanel(domain, seed, think, temperature)
    panel.show_drawn(domain, number)
    panel.table.value = chat_html(chat)
    display(panel.box)
    return panel
