"""No shipped checkpoint is orphaned, the stage keys of the chapters' graph are pinned, and so are the aliases.

**Toy** (:func:`test_toy_reaches_every_shipped_checkpoint`): the code paths the chapters use are walked at the
``toy`` profile, in a fresh artifact cache, without training: every ``get_or_build`` that would build (the
entry is neither cached nor shipped under ``data/checkpoints/``, under its own key or through
``data/checkpoints/aliases.json``) raises :class:`Unshipped`, naming the kind, the key and the stage's inputs.
Only :data:`ALLOWED_BUILDS` are built for real (tokenizers: seconds). Then the set of
folders reached must equal the set of folders ``data/checkpoints/*/*``: a folder nobody reaches is an orphan
(its key is no longer what the code computes, and no alias names it), and every alias must be used.

**Aliases**: the entries shipped before stage keys hashed their upstream's content (:mod:`cascadekit.stages`)
stay in the folders of their old keys (moving a committed file costs the repository a deletion and an
addition). The toy walk finds the old folder of each stage it reaches by :func:`cascadekit.stages.legacy_key`
(the stage's inputs with each upstream content id written back as the old key of the folder it came from) and,
when regenerating, writes ``aliases.json`` with :func:`cascadekit.artifacts.write_aliases`.

**Chapter 14 at toy** (:data:`UNSHIPPED_ARMS`): its stage tables, joint RL and RLHF-last arm are not shipped
(the toy notebook reads the committed run), so the toy walk only checks that the chapter's cascade ends where
chapter 13's does (the second world's first training seed); the smoke walk goes through all of them. The first Part II
world's chain is not shipped either: its runs under ``data/results/first_world/`` are evidence, read, not rerun.

**Smoke** (:func:`test_smoke_keys_are_pinned`): the same walk at ``smoke``, where nothing is shipped. Every
build is faked (:func:`_fake_build`): it writes the ``stage.json`` metrics and the files the walk reads
afterwards (a GRPO stage's step count, a screen's kept prompts, a stage table's samples, policy samples,
a reward model's calibration, and a stand-in checkpoint file naming the stage's inputs), and loading a reward
model or the SWE judge is stubbed. Every downstream key holds its upstream's *content*: the stand-in file (the
content id of a checkpoint), a ``dynamic-filter`` screen's kept prompts (the next GRPO stage's prompts) and
``policy-samples``' texts (the reward model's pairs). The fake keeps every prompt and answers with fixed texts,
so the smoke keys are the keys *under the fake's content*: they pin how the inputs are assembled, not the keys
of a real smoke run. (The toy test checks real content: the keys are those of the shipped entries.)

Both walks compare ``{readable stage name: "kind/key"}`` with ``tests/fixtures/stage_keys.json``
(``{"smoke": {...}, "toy": {...}}``). A name is the walk step that first reached the entry and its kind.
Regenerate the fixture after a deliberate key change with::

    CASCADEKIT_WRITE_KEYS=1 python -m pytest -q tests/test_shipped_keys.py

(each test rewrites its scale's section, and the toy test rewrites ``data/checkpoints/aliases.json``; review the
diff: every changed key is a stage that will be rebuilt unless an alias finds its shipped folder, and at toy an
entry neither found nor aliased is a shipped checkpoint orphaned, which the toy test reports).

The restructure only has to keep :func:`entry_points` (and :func:`walk`'s use of it) working.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "stage_keys.json"
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
#: Kinds built for real during the walk, with why they are not shipped.
ALLOWED_BUILDS = {
    "tokenizer": "Part I's BPE tokenizer, trained in seconds at first use and never shipped: cached_pretrained "
                 "and cached_variant train it before they look up the shipped base or variant",
    "chat-tokenizer": "Part II's BPE tokenizer, whose content the chat base's key names: shipped at toy, trained "
                      "at smoke (seconds), so the smoke base's key is a real run's",
}
#: The second world's training seeds (offsets from the profile's) whose SFT and whole chain, RLHF's reward model to
#: SWE RL, are shipped: what its chapters over seeds start from (chapter 09's smaller reward model is its own to train).
SECOND_SEEDS = (0, 1, 2)
#: Scales whose chapter-14 arms (stage tables, joint RL, RLHF last) are not shipped: the walk stops at the cascade.
UNSHIPPED_ARMS = {"toy": "chapter 14's stage tables, joint RL and RLHF-last arm are not shipped: its toy notebook "
                         "reads the committed run"}
#: The smoke fake answers this many policy-sample prompts (zip stops at the real number of prompts).
FAKE_PROMPTS = 1000


def entry_points() -> SimpleNamespace:
    """Everything this test calls in the library (the one place to change when modules move)."""
    from cascadekit import artifacts, stages
    from cascadekit.stages import content_id, legacy_key
    from cascadekit.training import pipeline
    from cascadekit.training.chat_base import chat_base
    from cascadekit.chapters import resolve
    from cascadekit.evaluation.stage_table import cached_stage_table
    from cascadekit.chapters.ch05_context_transfer import B_SHARES, cached_variant
    from cascadekit.chapters.ch14_whole_cascade import RLHF_LAST_ORDER, harder_suite
    from cascadekit.training import reward_model, swe_judge
    from cascadekit.chapters.cascade import (
        ORDER, TARGETS, joint_rl, judge, largest_reward_model, reward_models, run_cascade, swe_rl_start,
        unified_if_rl, unified_math_rl, unified_rlhf, unified_swe_rl,
    )
    from cascadekit.training.sft import sft_stages

    return SimpleNamespace(
        artifacts=artifacts,  # artifacts._get_or_build_locked(stage, key, builder, target, folder, use_shipped, needs)
        Stage=stages.Stage, STAGE_FILE=stages.STAGE_FILE, resolve=resolve, content_id=content_id,
        legacy_key=legacy_key,
        pretrained=pipeline.pretrained, cached_variant=cached_variant, B_SHARES=B_SHARES,
        chat_base=chat_base, sft_stages=sft_stages, reward_models=reward_models,
        largest_reward_model=largest_reward_model, judge=judge,
        unified_rlhf=unified_rlhf, unified_if_rl=unified_if_rl, unified_math_rl=unified_math_rl,
        swe_rl_start=swe_rl_start, unified_swe_rl=unified_swe_rl, run_cascade=run_cascade, ORDER=ORDER,
        RLHF_LAST_ORDER=RLHF_LAST_ORDER, TARGETS=TARGETS, joint_rl=joint_rl, cached_stage_table=cached_stage_table,
        harder_suite=harder_suite,
        StageOutput=stages.StageOutput,
        # loaded by RewardModelScore / SemanticJudge; stubbed at smoke, where the fake reward model has no weights
        model_loaders=[(reward_model, "load_classifier"), (reward_model, "load_tokenizer"),
                       (swe_judge, "load_classifier"), (swe_judge, "load_tokenizer")],
        # a pure function the walk calls 5 times per profile (every reward model key recomputes every pair)
        preference_records=(reward_model, "preference_records"),
        calibration_file=reward_model.CALIBRATION_FILE, policy_samples_file=reward_model.SAMPLES_FILE,
        stage_table_samples_file="samples.json",
    )


class Unshipped(AssertionError):
    """A stage the walk asked for is neither cached nor shipped: it would be trained."""

    def __init__(self, kind: str, key: str, stage: Any):
        self.kind, self.key, self.stage = kind, key, stage
        inputs = stage.inputs if stage else "(a raw get_or_build: no Stage)"
        shown = json.dumps(inputs, sort_keys=True, default=str)
        super().__init__(f"stage {kind}/{key} is not shipped under data/checkpoints/ and would be built; "
                         f"its inputs: {shown[:3000]}")


def _stage_of(builder: Any) -> Any:
    """The :class:`Stage` whose builder this is (``run_stage`` wraps ``stage.build``), or None (raw get_or_build)."""
    Stage = entry_points().Stage
    for cell in getattr(builder, "__closure__", None) or ():
        with contextlib.suppress(ValueError):
            if isinstance(cell.cell_contents, Stage):
                return cell.cell_contents
    return None


class Recorder:
    """Names each cache entry the walk reaches after the step that first reached it; handles every build."""

    def __init__(self, fake: bool, write_aliases: bool = False):
        self.fake, self.step, self.names, self.reached, self.built = fake, "start", {}, set(), []
        self.log: list[str] = []
        self.write_aliases = write_aliases
        self.aliases: dict[tuple[str, str], str] = {}  # (kind, key) -> the old key of its shipped folder, used
        self.old: dict[str, str] = {}  # content id -> the entry's key before keys hashed content (for legacy_key)

    @contextlib.contextmanager
    def at(self, step: str) -> Iterator[None]:
        outer, self.step, started = self.step, step, time.perf_counter()
        try:
            yield
        finally:
            self.log.append(f"{time.perf_counter() - started:6.1f} s  {step}")
            self.step = outer

    def request(self, kind: str, key: str) -> None:
        if (kind, key) in self.reached:
            return
        self.reached.add((kind, key))
        base = f"{self.step} / {kind}"
        name, n = base, 1
        while name in self.names:
            n += 1
            name = f"{base} #{n}"
        self.names[name] = f"{kind}/{key}"

    def old_key(self, key: str, builder: Any) -> str:
        """The key the stage being asked for had before keys hashed content (a raw get_or_build's own)."""
        stage = _stage_of(builder)
        return entry_points().legacy_key(stage, self.old) if stage else key

    def find_alias(self, kind: str, key: str, old: str) -> None:
        """When regenerating: alias ``kind/key`` to the shipped folder of its ``old`` key, if the lookup misses it."""
        ep = entry_points()
        if self.write_aliases and old != key and not ep.artifacts.shipped_folder(kind, key) and (
                SHIPPED / kind / old).is_dir():
            self.aliases[(kind, key)] = old
            ep.artifacts.write_aliases(self.aliases)

    def resolved(self, kind: str, key: str, old: str, path: Path) -> None:
        """Note the alias the walk used, and the content id of what it got under its ``old`` key."""
        ep = entry_points()
        found = ep.artifacts.shipped_folder(kind, key)
        if found and found[1] != key:
            self.aliases[(kind, key)] = found[1]
        with contextlib.suppress(ValueError):  # an entry of records only (a screen) names no content
            self.old.setdefault(ep.content_id(ep.StageOutput(path, key)), old)

    def build(self, kind: str, key: str, builder: Any, folder: Path) -> None:
        stage = _stage_of(builder)
        self.built.append((kind, key))
        if kind in ALLOWED_BUILDS:
            builder(folder)
        elif self.fake:
            _fake_build(kind, stage, folder)
        else:
            raise Unshipped(kind, key, stage)


def _fake_build(kind: str, stage: Any, folder: Path) -> None:
    """What the walk reads of a stage afterwards, without training (smoke only)."""
    ep = entry_points()
    if stage is None:  # a raw get_or_build: nothing downstream reads its folder during the walk
        return
    inputs = stage.inputs
    (folder / "fake-checkpoint.json").write_text(json.dumps(inputs, sort_keys=True, default=str))  # its content
    metrics: dict[str, Any] = {"train_s": 0.0, "wall_s": 0.0}
    if kind == "grpo":
        metrics.update(steps=inputs["steps"], curves=[], prompts=inputs["n_prompts"])
    elif kind == "dynamic-filter":  # keeps every prompt: content that enters the next GRPO key
        metrics.update(kept=list(range(inputs["n_prompts"])), verdicts={}, readmitted=0, rollouts=0, screen_s=0.0)
    elif kind == "stage-table":
        (folder / ep.stage_table_samples_file).write_text("[]")
    elif kind == "policy-samples":  # fixed texts: content that enters the reward model's key
        answers = [f"fake answer {j}" for j in range(inputs["n"])]
        (folder / ep.policy_samples_file).write_text(json.dumps([answers] * FAKE_PROMPTS))
    elif kind == "reward-model":
        (folder / ep.calibration_file).write_text(json.dumps({"a": 0.0, "b": 1.0}))
    (folder / ep.STAGE_FILE).write_text(json.dumps({"kind": kind, "inputs": inputs, "metrics": metrics}, default=str))


@contextlib.contextmanager
def guarded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: bool,
            write_aliases: bool = False) -> Iterator[Recorder]:
    """A fresh cache whose every build goes through a :class:`Recorder` (raises at toy, fakes at smoke)."""
    ep = entry_points()
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    recorder = Recorder(fake, write_aliases)
    original = ep.artifacts._get_or_build_locked

    def locked(stage, key, builder, target, folder, use_shipped=True, needs=()):
        recorder.request(stage, key)
        old = recorder.old_key(key, builder)
        recorder.find_alias(stage, key, old)
        path = original(stage, key, lambda tmp: recorder.build(stage, key, builder, tmp), target, folder,
                        use_shipped, () if fake else needs)  # a fake build holds no checkpoint files
        recorder.resolved(stage, key, old, path)
        return path

    monkeypatch.setattr(ep.artifacts, "_get_or_build_locked", locked)
    module, name = ep.preference_records
    compute, memo = getattr(module, name), {}

    def remembered(profile, split, tasks, seed, policy=None):  # the first call runs (and reaches the stages)
        key = (json.dumps(profile.to_dict(), sort_keys=True, default=str), split, tasks, seed,
               policy.key if policy is not None else None)
        if key not in memo:
            memo[key] = compute(profile, split, tasks, seed, policy)
        return memo[key]

    monkeypatch.setattr(module, name, remembered)
    if fake:
        for module, name in ep.model_loaders:
            monkeypatch.setattr(module, name, lambda *a, **k: None)
    yield recorder


def chain(ep: SimpleNamespace, rec: Recorder, scale: str, overrides: dict[str, Any], label: str,
          work: Path, every_reward_model: bool = True) -> Any:
    """Each chapter's start under ``overrides``: the cascade so far, every earlier stage a hit (chapter 13's chain
    runs them all), after chapter 09's reward models (or only RLHF's, the largest, without
    ``every_reward_model``). Returns the SWE RL stage, the chain's end."""
    profile09 = ep.resolve("09", scale, overrides).profile
    with rec.at(f"{label}09 reward models"):
        (ep.reward_models if every_reward_model else ep.largest_reward_model)(profile09)
    with rec.at(f"{label}09 RLHF half-half"):
        ep.unified_rlhf(profile09, work / "09")
    with rec.at(f"{label}10 IF-RL"):
        ep.unified_if_rl(ep.resolve("10", scale, overrides).profile, work / "10")
    with rec.at(f"{label}11 Math RL"):
        ep.unified_math_rl(ep.resolve("11", scale, overrides).profile, work / "11")
    with rec.at(f"{label}12 Code RL"):
        ep.swe_rl_start(ep.resolve("12", scale, overrides).profile, work / "12")
    with rec.at(f"{label}13 judge"):
        ep.judge(ep.resolve("13", scale, overrides).profile)
    with rec.at(f"{label}13 SWE RL"):
        return ep.unified_swe_rl(ep.resolve("13", scale, overrides).profile, work / "13")


def walk(scale: str, rec: Recorder, work: Path) -> None:
    """The chapters' code paths at ``scale``, every stage a cache hit (toy) or a fake build (smoke)."""
    ep = entry_points()
    for chapter in ("03", "04", "06", "07"):
        with rec.at(f"{chapter} base"):
            ep.pretrained(ep.resolve(chapter, scale).profile)
    profile05 = ep.resolve("05", scale).profile
    for share in ep.B_SHARES:
        with rec.at(f"05 variant b={share:g}"):
            ep.cached_variant(profile05, share)

    world = {"world": "second"}
    for offset in SECOND_SEEDS:
        overrides = {**world, "train_seed": ep.resolve("08", scale, world).profile.seeds.train + offset}
        with rec.at(f"second world: SFT, training seed +{offset}"):
            second = ep.resolve("08", scale, overrides).profile
            ep.sft_stages(ep.chat_base(second), second)
        chain(ep, rec, scale, overrides, f"second world, training seed +{offset}: ", work / f"second-{offset}",
              every_reward_model=False)

    with rec.at("08 SFT"):  # the chapter's own world: the second at toy (reached above), the first at smoke
        profile08 = ep.resolve("08", scale).profile
        ep.sft_stages(ep.chat_base(profile08), profile08)
    profile = ep.resolve("14", scale).profile
    with rec.at("13 SWE RL"):
        final = ep.unified_swe_rl(ep.resolve("13", scale).profile, work / "13")
    if scale in UNSHIPPED_ARMS:
        with rec.at("14 cascade"):
            cascade = ep.run_cascade(profile, work / "14-cascade", ep.ORDER)
        assert cascade[-1].checkpoint.key == final.key, "chapter 14's cascade does not end where chapter 13's does"
        return
    suite = ep.harder_suite(profile)

    def tables(arm: str):
        def after(stage: Any) -> None:
            with rec.at(f"14 {arm}: table after {stage.name}"):
                ep.cached_stage_table(stage.checkpoint, profile, stage.name)
            with rec.at(f"14 {arm}: harder table after {stage.name}"):
                ep.cached_stage_table(stage.checkpoint, profile, stage.name, suite)
        return after

    with rec.at("14 cascade"):
        cascade = ep.run_cascade(profile, work / "14-cascade", ep.ORDER, tables("cascade"))
    assert cascade[-1].checkpoint.key == final.key, "chapter 14's cascade does not end where chapter 13's does"
    with rec.at("14 joint RL"):
        prompts = {ep.TARGETS[s.name][0]: s.prompts(profile) for s in cascade[1:]}
        joint = ep.joint_rl(profile, prompts, work / "14-joint")
        tables("joint")(SimpleNamespace(name="joint RL", checkpoint=joint))
    with rec.at("14 RLHF last"):
        ep.run_cascade(profile, work / "14-rlhf-last", ep.RLHF_LAST_ORDER, tables("RLHF last"))


def shipped() -> set[tuple[str, str]]:
    return {(p.parent.name, p.name) for p in SHIPPED.glob("*/*") if p.is_dir() and not p.name.startswith(".")}


def _check_fixture(scale: str, names: dict[str, str]) -> None:
    data = json.loads(FIXTURE.read_text()) if FIXTURE.is_file() else {}
    if os.environ.get("CASCADEKIT_WRITE_KEYS") == "1":
        data[scale] = dict(sorted(names.items()))
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")
        return
    pinned = data.get(scale)
    assert pinned is not None, f"{FIXTURE} has no {scale!r} keys: run with CASCADEKIT_WRITE_KEYS=1"
    changed = {n: (pinned.get(n), names.get(n)) for n in set(pinned) | set(names) if pinned.get(n) != names.get(n)}
    assert not changed, (f"{scale} stage keys differ from {FIXTURE.name} (pinned, now):\n" +
                         "\n".join(f"  {n}: {a} -> {b}" for n, (a, b) in sorted(changed.items(), key=str)) +
                         "\nIf deliberate, regenerate with CASCADEKIT_WRITE_KEYS=1 (and see the toy test).")


def _say(rec: Recorder) -> None:
    sys.stderr.write("\n" + "\n".join(rec.log) + "\n")


def test_toy_reaches_every_shipped_checkpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    writing = os.environ.get("CASCADEKIT_WRITE_KEYS") == "1"
    if writing:
        entry_points().artifacts.write_aliases({})  # found afresh by the walk: no stale alias survives
    with guarded(monkeypatch, tmp_path, fake=False, write_aliases=writing) as rec:
        walk("toy", rec, tmp_path / "work")
    _say(rec)
    if writing:
        entry_points().artifacts.write_aliases(rec.aliases)
    assert {k for k, _ in rec.built} <= set(ALLOWED_BUILDS), f"built: {rec.built}"
    assert set(rec.aliases) == set(entry_points().artifacts.read_aliases()), "an alias the walk never used"
    folders = {(kind, rec.aliases.get((kind, key), key)) for kind, key in rec.reached if (kind, key) not in rec.built}
    orphans, unknown = sorted(shipped() - folders), sorted(folders - shipped())
    assert not orphans and not unknown, (
        "shipped checkpoints no code path reaches (orphans):\n" +
        "\n".join(f"  {k}/{v}: {_what(k, v)}" for k, v in orphans) +
        f"\nreached but not shipped: {unknown}")
    _check_fixture("toy", rec.names)


def _what(kind: str, key: str) -> str:
    path = SHIPPED / kind / key / "provenance.json"
    return json.loads(path.read_text()).get("what", "?") if path.is_file() else "(no provenance.json)"


def test_smoke_keys_are_pinned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    with guarded(monkeypatch, tmp_path, fake=True) as rec:
        walk("smoke", rec, tmp_path / "work")
    _say(rec)
    assert not {entry for entry in rec.reached if entry[0] not in ALLOWED_BUILDS} & shipped(), (
        "a smoke key equals a shipped (toy) key")
    _check_fixture("smoke", rec.names)
