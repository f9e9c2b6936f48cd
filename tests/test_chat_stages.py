"""Talking to every stage (issue 58, part 1): ``cascadekit chat``, its widget, and the index of shipped checkpoints.

Everything here reads the shipped toy checkpoints (``data/checkpoints/``) and
trains nothing: the index is checked against the stage graph with building
forbidden, and against the ``stage.json`` chain the shipped folders record.
"""
from __future__ import annotations

import json
import re

import pytest

from cascadekit.artifacts import shipped_root, verify
from cascadekit.chat import NO_THINK, THINK
from cascadekit.cli import main
from cascadekit.course import chat as talk
from cascadekit.course.widgets import HEADLESS_ENV
from cascadekit.domains import domains
from cascadekit.stages import STAGE_FILE, StageOutput, content_id

#: What chat asks for a seed whose whole cascade is shipped (MOPD is chapter 15's and not shipped).
SHIPPED_STAGES = [s for s in talk.CHAT_STAGES if s != "MOPD"]
#: The cache kinds of Part II's shipped models (the index must name every folder of these).
MODEL_KINDS = ("chat-base", "sft", "reward-model", "swe-judge", "grpo")


@pytest.fixture(scope="module")
def index() -> list[talk.Shipped]:
    return talk.read_index()


# ---------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------


def test_the_index_names_every_shipped_part2_model_once(index):
    named = [s.folder for s in index]
    assert len(named) == len(set(named))
    on_disk = {f"{kind}/{p.name}" for kind in MODEL_KINDS for p in (shipped_root() / kind).iterdir()
               if p.is_dir() and not p.name.startswith(".")}
    assert set(named) == on_disk
    for shipped in index:
        verify(shipped.path, *shipped.folder.split("/"))


def _start(shipped: talk.Shipped) -> str:
    return json.loads((shipped.path / STAGE_FILE).read_text())["inputs"]["start"]


def _content(shipped: talk.Shipped) -> str:
    return content_id(StageOutput(shipped.path, shipped.folder.split("/")[1]))


def test_each_seeds_cascade_is_a_chain_its_stage_files_record(index):
    """Each checkpoint's ``stage.json`` starts from the content of the one the index puts before it."""
    base = next(s for s in index if s.stage == "base")
    seeds = talk.shipped_seeds(index)
    assert seeds == [0, 1, 2]
    for seed in seeds:
        own = [s for s in index if s.seed == seed]
        sft = next(s for s in own if s.stage == "SFT")
        chain = [base] + [s for s in own if s.stage not in ("reward model", "SWE judge")]
        for before, after in zip(chain, chain[1:]):
            assert _start(after) == _content(before), (seed, before.stage, after.stage)
        for side in ("reward model", "SWE judge"):
            assert _start(next(s for s in own if s.stage == side)) == _content(sft)
        assert [s.stage for s in chain if " run " not in s.stage and s.stage != "SFT stage 1"] == SHIPPED_STAGES


def test_each_checkpoints_records_name_its_training_seed(index):
    for shipped in (s for s in index if s.seed is not None):
        inputs = json.loads((shipped.path / STAGE_FILE).read_text())["inputs"]
        assert int(inputs.get("train_seed", inputs["seed"])) == shipped.seed, shipped  # a role's seed where it differs
        provenance = shipped.path / "provenance.json"
        if provenance.is_file():  # two SFT folders were shipped without one
            said = re.findall(r"training seed (\d+)", json.loads(provenance.read_text())["what"])
            assert said in ([], [str(shipped.seed)]), shipped


def test_the_index_is_what_the_stage_graph_resolves_without_building(index, tmp_path, monkeypatch):
    """Seed 0's stages through chapter 14's profile, every build refused (:func:`talk.shipped_only`)."""
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    assert talk.graph_index([0]) == [s for s in index if s.seed in (None, 0)]


def test_a_stage_that_is_not_shipped_is_never_built(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    assert talk.seed_index(7) == []  # no SFT shipped for training seed 7: nothing after it resolves either


def test_a_malformed_index_is_one_clear_error(tmp_path):
    bad = tmp_path / "stages.json"
    bad.write_text('{"checkpoints": [{"stage": "SFT"}]}')
    with pytest.raises(ValueError, match="not a readable checkpoint index.*--write-index"):
        talk.read_index(bad)


def test_list_prints_stage_seed_and_folder(index, capsys):
    assert main(["chat", "--list"]) == 0
    out = capsys.readouterr().out
    for shipped in index:
        assert re.search(rf"^{re.escape(shipped.stage)} +{shipped.seed if shipped.seed is not None else 'any'} +"
                         rf"{re.escape(shipped.folder)}$", out, re.M), shipped


# ---------------------------------------------------------------------------
# Asking every stage
# ---------------------------------------------------------------------------


def test_the_cli_answers_a_drawn_prompt_at_every_shipped_stage_with_verdicts(index, capsys):
    assert main(["chat", "--domain", "math", "--draw", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    gold = talk.drawn_record("math", 0, True)["gold"]
    assert talk.user_text(talk.drawn_record("math", 0, True)) in out
    for stage in SHIPPED_STAGES:
        folder = next(s.folder for s in index if s.stage == stage and s.seed in (None, 0))
        assert f"== {stage} ({folder}) ==" in out
        row = re.search(rf"^{re.escape(stage)} +(\d\.\d\d) +(yes|no)  (.+)$", out, re.M)
        assert row and row.group(3) != "no gold (typed prompt)", stage
        assert (row.group(1) == "1.00") == (row.group(3) == "correct"), row.group(0)
    assert "not shipped for training seed 0: MOPD" in out
    assert str(gold["answer"]) in out


@pytest.mark.parametrize("domain", list(domains()))
def test_every_domains_drawn_prompt_is_judged_by_its_verifier(domain, index):
    record = talk.drawn_record(domain, 1, False)
    chat = talk.ask(record, seed=1, index=index)
    assert [a.stage for a in chat.answers] == SHIPPED_STAGES and chat.not_shipped == ["MOPD"]
    assert chat.prompt.endswith(NO_THINK) and chat.domain == domain and chat.note is None
    for answer in chat.answers:
        judged = domains()[domain].judge(record["gold"], answer.text)
        assert (answer.verdict, answer.reward) == (judged.reason, judged.score)
        assert answer.folder == next(s.folder for s in index if s.stage == answer.stage and s.seed in (None, 1))


def test_the_think_flag_reaches_the_model_through_the_chat_format(index):
    """SFT taught the switch: its greedy answer opens a reasoned think block after /think, an empty one after
    /no_think."""
    think = talk.ask(talk.drawn_record("math", 0, True), index=index)
    bare = talk.ask(talk.drawn_record("math", 0, False), index=index)
    assert think.prompt.endswith(THINK) and bare.prompt.endswith(NO_THINK)
    sft = {chat.think: next(a for a in chat.answers if a.stage == "SFT") for chat in (think, bare)}
    assert sft[True].follows_mode and sft[False].follows_mode
    assert sft[False].text.startswith("<think>\n\n</think>") and not sft[True].text.startswith("<think>\n\n</think>")


def test_sampling_is_seeded_and_greedy_at_zero(index):
    record = talk.drawn_record("code", 0, True)
    texts = lambda **kw: [a.text for a in talk.ask(record, index=index, **kw).answers]  # noqa: E731
    sampled = texts(temperature=1.5, sample_seed=3)
    assert sampled == texts(temperature=1.5, sample_seed=3)
    assert any(texts(temperature=1.5, sample_seed=s) != sampled for s in (4, 5))
    assert texts(temperature=0.0, sample_seed=3) == texts(temperature=0.0, sample_seed=4)


def test_free_text_outside_the_toy_world_gets_one_note(index):
    chat = talk.ask(talk.typed_record("What is the capital of France?", True), index=index)
    assert chat.note and "only knows its world" in chat.note and "capital, france" in chat.note
    assert all(a.verdict is None and a.reward is None for a in chat.answers)
    toy = talk.user_text(talk.drawn_record("general", 0, True))
    assert talk.ask(talk.typed_record(toy, True), index=index).note is None


def test_a_seed_without_shipped_stages_says_which_are_missing(index, capsys):
    assert main(["chat", "--domain", "code", "--draw", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "not shipped for training seed 5: SFT, RLHF, IF-RL, Math RL, Code RL, SWE RL, MOPD" in out
    assert "shipped training seeds: 0, 1, 2" in out and "== base (" in out


@pytest.mark.parametrize("argv, message", [
    (["chat"], "give a PROMPT, or draw one"),
    (["chat", "--domain", "math"], "--domain D and --draw"),
    (["chat", "--draw"], "--domain D and --draw"),
    (["chat", "hi", "--domain", "math", "--draw"], "not both"),
    (["chat", "--domain", "chess", "--draw"], "unknown domain 'chess'"),
    (["chat", "--domain", "math", "--draw", "10000"], "not an integer from 0 to 9,999"),
    (["chat", "hi", "--temperature", "-1"], "not a temperature"),
    (["chat", "hi", "--temperature", "nan"], "not a temperature"),
    (["chat", "   /think"], "the prompt is empty"),
    (["chat", "x" * 3000], "at most 2,000"),
])
def test_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("cascadekit chat: error: ") and message in captured.err


# ---------------------------------------------------------------------------
# The widget
# ---------------------------------------------------------------------------


def test_the_widgets_callbacks_update_the_table(index):
    panel = talk.ChatPanel(domain="swe", seed=2)
    panel.draw()
    assert panel.prompt.value == talk.strip_flag(talk.user_text(talk.drawn_record("swe", 0, True)))
    panel.draw()
    assert panel.prompt.value == talk.strip_flag(talk.user_text(talk.drawn_record("swe", 1, True)))
    panel.think.value = False
    chat = panel.ask()
    assert chat.prompt.endswith(NO_THINK) and chat.domain == "swe" and chat.seed == 2
    for answer in chat.answers:
        assert f"<td>{answer.stage}</td>" in panel.table.value and answer.verdict is not None
    panel.prompt.value = "Tell me a joke"
    typed = panel.ask()
    assert typed.domain is None and "only knows its world" in panel.table.value and "no gold" in panel.table.value
    panel.prompt.value = "  "
    assert panel.ask() is None and panel.table.value.count("error:") == 1 and "the prompt is empty" in panel.table.value
    unshipped = talk.ChatPanel(domain="math", seed=5)  # a seed with only the base shipped still builds and answers
    unshipped.draw()
    assert [a.stage for a in unshipped.ask().answers] == ["base"] and "not shipped for training seed 5" in \
        unshipped.table.value


def test_the_widget_is_a_static_table_when_headless(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monkeypatch.setenv(HEADLESS_ENV, "1")
    assert talk.chat_widget("tools", 0, seed=0) is None
    (table,) = shown
    assert isinstance(table, IPython.display.HTML) and table.data.count("<tr>") == len(SHIPPED_STAGES) + 1
    monkeypatch.delenv(HEADLESS_ENV)
    shown.clear()
    panel = talk.chat_widget("tools", 0, seed=0)
    assert shown == [panel.box] and panel.table.value == table.data


def test_loading_a_stage_shows_no_progress_bar(index, capsys):
    """In a notebook each of transformers' "Loading weights" bars is a widget output above the table."""
    from transformers.utils import logging as hf_logging

    talk.load_shipped.__wrapped__(index[0].folder)
    assert "Loading weights" not in capsys.readouterr().err and hf_logging.is_progress_bar_enabled()
