"""The second world's knobs (``domains.*``): each changes what SFT, RL and evaluation ask, none the pretraining
text, and at their defaults nothing at all."""
from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter

import pytest

from cascadekit.domains import Task, configured, domains, draw_tasks, general, instructions, swe
from cascadekit.domains.dag import draw_dag
from cascadekit.domains.swe import equivalent_forms, patch_text, wrong_expressions
from cascadekit.profiles import (
    DomainsConfig, ProfileError, WORLDS, check_value, domains_inputs, load_profile, world_overrides,
)
from cascadekit.training.chat_base import chat_base_key, domain_texts, surface_ops
from cascadekit.training.sft import stage_records
from cascadekit.verify.instructions import constraints_from_json
from cascadekit.verify.patch import patch_similarity

ON = {"domains.instruction_constraints": [2, 3], "domains.swe_rewrites": True, "domains.general_teacher": 0.5}
#: The second world's base: every surface over ops 2-5.
SECOND_BASE = {"sft.ops": [2, 5], "sft.base_tokens": 24_000_000}


def test_the_defaults_are_todays_world_and_add_nothing_to_a_key() -> None:
    toy = load_profile("toy")
    assert toy.domains == DomainsConfig() and domains_inputs(toy) == {}
    assert all(configured(name, toy.domains) is domains()[name] for name in domains())
    assert domains_inputs(load_profile("toy", ON)) == {"domains": {
        "instruction_constraints": (2, 3), "swe_rewrites": True, "general_teacher": 0.5}}


def test_the_pretraining_text_is_byte_identical_with_the_knobs_on() -> None:
    for overrides in ({}, SECOND_BASE):
        off, on = load_profile("toy", overrides), load_profile("toy", {**overrides, **ON})
        assert chat_base_key(on) == chat_base_key(off)  # the surfaces fingerprint, the tokenizer and the base
        for name in domains():
            assert domain_texts(on, name, 30) == domain_texts(off, name, 30)
    assert chat_base_key(load_profile("toy", ON)) == "02e19bb6d991"  # the shipped base (through its alias)


def test_sft_data_changes_only_in_the_domains_a_knob_names() -> None:
    small = {"sft.stage2_tasks": 40}
    off, on = (stage_records(load_profile("toy", {**small, **extra}), 2) for extra in ({}, ON))
    by_domain = lambda records, name: [r for r in records if r["domain"] == name]  # noqa: E731
    for name in ("math", "code", "tools"):
        assert by_domain(on, name) == by_domain(off, name)
    for name in ("instructions", "swe", "general"):
        assert by_domain(on, name) != by_domain(off, name)


def test_instruction_tasks_carry_the_asked_constraint_counts() -> None:
    for lo, hi in ((2, 3), (3, 3), (5, 5)):
        domain = configured("instructions", DomainsConfig(instruction_constraints=(lo, hi)))
        counts = Counter(len(constraints_from_json(t.gold["constraints"]))
                         for t in draw_tasks(domain, 60, 0, "sft", [2, 3]))
        assert set(counts) == set(range(lo, hi + 1)), counts
    default = draw_tasks(domains()["instructions"], 60, 0, "sft", [2, 3])
    assert {len(constraints_from_json(t.gold["constraints"])) for t in default} == {1, 2, 3}
    assert check_value("domains.instruction_constraints", [1, instructions.MAX_CONSTRAINTS])
    with pytest.raises(ProfileError, match="1 <= lo <= hi <= 5"):
        check_value("domains.instruction_constraints", [1, instructions.MAX_CONSTRAINTS + 1])
    with pytest.raises(ValueError, match="constraints per prompt"):
        instructions.make_task(random.Random(0), [2], constraints=(3, 2))


def _fixed_line(patch: str) -> tuple[str, str]:
    """The (buggy, fixed) lines of a one-block SEARCH/REPLACE patch."""
    search, replace = re.search(r"<<<<<<< SEARCH\n(.*)\n=======\n(.*)\n>>>>>>> REPLACE", patch).groups()
    return search, replace


def _tasks_with_forms(n: int) -> list[tuple[Task, list[str]]]:
    """``n`` SWE tasks with rewrites, each with every correct form of its fixed line (the DAG redrawn from the
    generator's state, as :func:`cascadekit.domains.swe.make_task` draws it first)."""
    out, seed = [], 0
    while len(out) < n:
        rng = random.Random(seed)
        state, seed = rng.getstate(), seed + 1
        task = swe.make_task(rng, [2, 3], rewrites=True)
        if task is None:
            continue
        rng.setstate(state)
        dag = draw_dag(rng, [2, 3])
        node = rng.choice(dag.computed)
        out.append((task, [dag.expression(node, dag.identifiers), *equivalent_forms(dag, node, dag.identifiers)]))
    return out


def test_every_rewrite_has_the_value_of_the_line_it_rewrites() -> None:
    rng = random.Random(1)
    for _ in range(300):
        dag = draw_dag(rng, [2, 3, 4, 5])
        for node in dag.computed:
            for form in equivalent_forms(dag, node, dag.identifiers):
                assert form != dag.expression(node, dag.identifiers)
                namespace: dict = {}
                exec(dag.source(lines={node: form}), {}, namespace)  # the kit's own generated code
                for _ in range(3):
                    leaves = [rng.randint(0, 20) for _ in dag.leaves]
                    assert namespace[dag.function_name()](*leaves) == dag.run(leaves), (form, dag.source())


def test_every_correct_swe_patch_form_passes_and_wrong_ones_fail() -> None:
    unlike = near_misses = 0
    for task, forms in _tasks_with_forms(10):
        buggy, reference = _fixed_line(task.gold["patch"])
        name = reference.strip().split(" = ", 1)[0]
        assert len(forms) >= 2 and reference.split(" = ", 1)[1] in forms
        for form in forms:
            patch = patch_text(buggy, f"    {name} = {form}")
            assert swe.judge(task.gold, patch).score == 1.0, (form, task.gold["source"])
            unlike += patch_similarity(patch, task.gold["patch"]) < 1.0
        assert swe.judge(task.gold, patch_text(buggy, buggy)).score == 0.0  # the bug left in place
        for wrong in wrong_expressions(reference.split(" = ", 1)[1])[:2]:  # a near-miss of the reference itself
            patch = patch_text(buggy, f"    {name} = {wrong}")
            near_misses += swe.judge(task.gold, patch).score == 0.0 and patch_similarity(patch, task.gold["patch"]) > 0.9
        assert swe.judge(task.gold, task.answer).score == 1.0  # the SFT answer, in whichever form it was drawn
    assert unlike >= 10  # every task has a correct patch that reads unlike its reference
    assert near_misses >= 10  # and wrong ones that read almost like it: similarity is not correctness


def test_swe_reference_and_answer_forms_are_drawn_apart() -> None:
    tasks = draw_tasks(configured("swe", DomainsConfig(swe_rewrites=True)), 200, 0, "sft", [2, 3])
    default = draw_tasks(domains()["swe"], 200, 0, "sft", [2, 3])
    assert [t.prompt for t in tasks] == [t.prompt for t in default]
    differ = sum(t.answer != t.gold["patch"] for t in tasks)
    assert 0.2 * len(tasks) < differ < 0.8 * len(tasks)
    assert all(t.answer == t.gold["patch"] for t in default)
    assert all(_fixed_line(t.answer)[1].split(" = ", 1)[1] in t.thinking for t in tasks)


def test_general_teacher_answers_are_padded_at_the_asked_rate_and_score_below_concise() -> None:
    n, rate = 300, 0.5
    teacher = draw_tasks(configured("general", DomainsConfig(general_teacher=rate)), n, 0, "sft", [2, 3])
    concise = draw_tasks(domains()["general"], n, 0, "sft", [2, 3])
    assert [t.prompt for t in teacher] == [t.prompt for t in concise]
    assert [t.gold for t in teacher] == [t.gold for t in concise]
    distilled = [(t, c) for t, c in zip(teacher, concise) if t.answer != c.answer]
    assert abs(len(distilled) - rate * n) < 4 * (rate * (1 - rate) * n) ** 0.5  # within 4 standard deviations
    right = 0
    for t, c in distilled:
        assert t.answer.startswith("You asked") and any(p in t.answer for p in general.TEACHER_PADDING)
        assert general.quality(c.gold, c.answer) == 1.0
        assert general.quality(t.gold, t.answer) < general.quality(c.gold, c.answer)
        right += general.quality_parts(t.gold, t.answer)["correctness"] == 1.0
    assert right >= 0.85 * len(distilled)  # facts mostly right
    repeated = sum(general.quality_parts(t.gold, t.answer)["no_repetition"] < 1.0 for t, _ in distilled)
    assert 0 < repeated < len(distilled)  # sometimes repeated


def test_swe_rl_and_the_stage_table_draw_through_the_knobs() -> None:
    from cascadekit.evaluation.stage_table import suite_records
    from cascadekit.training.swe_rl import swe_tasks

    profile = load_profile("toy", {**ON, "sft.eval_tasks": 4})
    plain = dataclasses.replace(profile, domains=DomainsConfig())
    assert suite_records(profile, ["instructions"]) != suite_records(plain, ["instructions"])
    assert suite_records(profile, ["math"]) == suite_records(plain, ["math"])
    on, off = (swe_tasks(p, 20, "rl", 13, [0, 1]) for p in (profile, plain))
    assert [t.prompt for t in on] == [t.prompt for t in off] and [t.gold for t in on] != [t.gold for t in off]
    assert surface_ops(profile) == surface_ops(plain)


def test_the_second_world_is_its_base_and_knobs_and_the_first_is_the_toy_profile() -> None:
    assert load_profile("toy", world_overrides("first")) == load_profile("toy")
    second = load_profile("toy", world_overrides("second"))
    assert chat_base_key(second) == chat_base_key(load_profile("toy", SECOND_BASE)) == "c8646176cf83"
    assert second.domains == DomainsConfig((3, 5), True, 0.5) and second.sft.eval_tasks == 128
    assert WORLDS["first"] == {}  # the first Part II world's runs, kept under data/results/first_world/
    with pytest.raises(ProfileError, match="unknown world 'third'; choose one of"):
        world_overrides("third")


def test_part_two_chapters_name_one_world_per_scale_and_a_world_override_picks_another() -> None:
    from cascadekit.chapters import chapter_world, resolve

    part2 = ("08", "09", "10", "11", "12", "13", "14", "15")
    assert {chapter_world(c, "toy") for c in part2} == {"second"}
    assert {chapter_world(c, "smoke") for c in part2} == {"first"}
    assert chapter_world("04", "toy") == "first"
    settings = resolve("10", "toy").settings
    assert resolve("10", "toy").profile == load_profile("toy", {**world_overrides("second"), **settings})
    assert resolve("10", "toy", {"world": "first"}).profile == load_profile("toy", settings)
    assert resolve("04", "toy", {"world": "second"}).profile.sft.eval_tasks == 128
    assert resolve("10", "toy").record()["world"] == "second" and "world" not in resolve("04", "toy").record()
    for bad in ("third", 2, None):
        with pytest.raises(ProfileError, match="unknown world"):
            resolve("10", "toy", {"world": bad})


def test_world_overrides_lie_beneath_the_command_lines_set() -> None:
    import argparse

    from cascadekit.chapters import resolve
    from cascadekit.cli import _overrides, _part2_profile

    args = argparse.Namespace(world="second", set=["sft.eval_tasks=32"], scale="toy")
    assert resolve("10", "toy", _overrides(args)).profile == load_profile(
        "toy", {**world_overrides("second"), **resolve("10", "toy").settings, "sft.eval_tasks": 32})
    assert _part2_profile(args) == load_profile("toy", {**world_overrides("second"), "sft.eval_tasks": 32})
    args = argparse.Namespace(world=None, set=[], scale="toy")
    assert _part2_profile(args) == load_profile("toy", world_overrides("second"))  # chapter 08's world at toy
