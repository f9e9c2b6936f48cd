"""Chapter 14's pieces: the cascade in any order, joint RL's per-domain rewards and prompts, cached stage
tables, several rewards in one GRPO stage, and the forgetting matrix and order statistics."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from cascadekit.artifacts import write_manifest
from cascadekit.evaluation import stage_table
from cascadekit.chapters.ch14_whole_cascade import (
    CASCADE, JOINT, RLHF_LAST, against_arms, forgetting, gain_difference, lever_rows,
)
from cascadekit.stages import StageOutput
from cascadekit.training.pipeline import _grpo_stage, chat_rl_dataset, records_digest
from cascadekit.profiles import load_profile
from cascadekit.rewards import verifier_reward
from cascadekit.chapters.cascade import (
    ORDER, DomainReward, joint_rl_settings, check_order, domain_pools, joint_records, parse_joint, run_cascade,
)


def test_an_order_names_known_stages_once():
    assert check_order(list(reversed(ORDER))) == tuple(reversed(ORDER))
    with pytest.raises(ValueError, match="unknown cascade stage 'DPO'"):
        check_order(["RLHF", "DPO"])
    with pytest.raises(ValueError, match="each stage once"):
        check_order(["RLHF", "Math RL", "RLHF"])


def test_a_domain_reward_scores_only_its_own_rollouts_with_their_own_columns():
    seen = {}

    def reward(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions, gold=kwargs["gold"], step=kwargs["trainer_state"])
        return [len(c) for c in completions]

    reward.__name__ = "length"
    scored = DomainReward("math", reward)
    out = scored(["p0", "p1", "p2"], ["a", "bb", "ccc"], domain=["math", "code", "math"], gold=["g0", "g1", "g2"],
                 trainer_state="state")
    assert out == [1.0, None, 3.0]
    assert seen == {"prompts": ["p0", "p2"], "completions": ["a", "ccc"], "gold": ["g0", "g2"], "step": "state"}
    assert scored.__name__ == "math:length" and scored.seconds > 0
    assert scored(["p"], ["x"], domain=["code"], gold=["g"]) == [None]
    with pytest.raises(ValueError, match="'domain' dataset column"):
        scored(["p"], ["x"], gold=["g"])


def test_joint_prompts_come_from_each_stages_pool_in_the_counts_asked():
    profile = load_profile("smoke")
    pools = domain_pools(profile)
    counts = {"general": 5, "instructions": 2, "math": 3, "code": 1, "swe": 2 * len(pools["swe"]) + 1}
    records = joint_records(profile, counts)
    assert Counter(r["domain"] for r in records) == counts
    assert records == joint_records(profile, counts)  # seeded
    digests = {d: {records_digest([r]) for r in pool} for d, pool in pools.items()}
    assert all(records_digest([r]) in digests[r["domain"]] for r in records)
    assert [r["domain"] for r in records] != sorted(r["domain"] for r in records)  # mixed, not in blocks
    assert all(not r["think"] for r in records if r["domain"] == "instructions")
    with pytest.raises(ValueError, match="no domain 'tools'"):
        joint_records(profile, {"tools": 1})


def test_joint_rl_takes_the_longest_length_limit():
    profile = load_profile("toy")
    longest = max(profile.rl.max_completion_length, profile.swe_rl.length, *profile.math_rl.lengths)
    assert joint_rl_settings(profile).max_completion_length == longest


def test_the_cascade_resumes_from_the_shipped_stages_without_training():
    """Chapter 14's own profile (the second world, its first training seed) finds every stage shipped."""
    from cascadekit.chapters import resolve

    profile = resolve("14", "toy").profile
    stages = run_cascade(profile, Path("unused"))
    assert [s.name for s in stages] == ["SFT", *ORDER]
    assert [s.checkpoint.key for s in stages] == ["c1b9df82d3c5", "c3dbe1a66cf3", "3a1540e9ee8e", "8fac51d21012",
                                                  "0be23bddb27c", "674c9bbf8be5"]
    assert [len(s.runs) for s in stages] == [0, 1, 1, 3, 1, 2]
    assert [s.prompts(profile) for s in stages[1:]] == [512, 512, 408, 256, 192]


def _entry(folder: Path, key: str) -> StageOutput:
    """A finished entry of one stand-in file at ``folder``: its content goes into a downstream key."""
    folder.mkdir()
    (folder / "model.safetensors").write_text(key)
    write_manifest(folder, "grpo", key)
    return StageOutput(folder, key)


def test_several_rewards_key_a_stage_by_every_name_and_one_reward_keeps_its_key(monkeypatch, tmp_path):
    built = {}
    monkeypatch.setattr("cascadekit.training.pipeline.run_stage", lambda stage: built.setdefault(stage.key, stage))
    profile = load_profile("smoke")
    records = domain_pools(profile)["math"][:2]
    dataset, digest = chat_rl_dataset(records), records_digest(records)
    start = _entry(tmp_path / "start", "s" * 12)
    single = _grpo_stage(start, dataset, digest, verifier_reward, profile, Path("w"), chat=True)
    assert single.inputs["reward"] == "verifier_reward"
    listed = _grpo_stage(start, dataset, digest, [DomainReward("math", verifier_reward)], profile, Path("w"), chat=True)
    assert listed.inputs["reward"] == ["math:verifier_reward"] and listed.key != single.key
    with pytest.raises(ValueError, match="without streamed verification"):
        _grpo_stage(start, dataset, digest, [verifier_reward, verifier_reward], profile, Path("w"), chat=True,
                    workers=2)


def test_a_stage_table_is_evaluated_once_and_relabelled(monkeypatch, tmp_path):
    calls = []

    def fake(checkpoint, profile, name, records):
        calls.append(name)
        return {"samples": [{"stage": name, "domain": "math", "think": True, "completion": "", "tokens": 3,
                             "score": 1.0, "reason": "", "loose": None, "follows_mode": True, "repetition": 0.0}],
                "wall_s": 1.5}

    monkeypatch.setattr(stage_table, "stage_table", fake)
    profile = load_profile("smoke")
    records = stage_table.suite_records(profile, ["math"])[:1]
    stage = _entry(tmp_path / "ckpt", "k" * 12)
    first = stage_table.cached_stage_table(stage, profile, "after Math RL", records)
    again = stage_table.cached_stage_table(stage, profile, "Math RL (RLHF last)", records)
    assert calls == ["after Math RL"]
    assert again["samples"][0]["stage"] == "Math RL (RLHF last)" and again["rows"][0]["score"] == 1.0
    assert again["wall_s"] == first["wall_s"] == 1.5


def _samples(scores: dict[str, list[float]]) -> list[dict]:
    return [{"domain": d, "think": i % 2 == 0, "score": s, "tokens": 10} for d, values in scores.items()
            for i, s in enumerate(values)]


def _metrics(arms: dict[str, dict[str, dict[str, list[float]]]]) -> dict:
    return {"per_sample": {arm: {stage: _samples(scores) for stage, scores in stages.items()}
                           for arm, stages in arms.items()}}


def test_the_forgetting_matrix_pairs_each_stage_with_the_one_before():
    zeros = {d: [0.0] * 4 for d in ("general", "instructions", "math", "code", "tools", "swe")}
    metrics = _metrics({CASCADE: {"SFT": zeros, "RLHF": {**zeros, "general": [1.0] * 4},
                                  "IF-RL": {**zeros, "general": [1.0] * 4, "math": [0.0, 0.0, 1.0, 1.0]}}})
    cells = {(c["stage"], c["domain"]): c for c in forgetting(metrics)}
    assert cells[("RLHF", "general")]["change"] == 1.0 and cells[("RLHF", "general")]["own"]
    assert cells[("IF-RL", "general")]["change"] == 0.0  # paired with RLHF, not SFT
    assert cells[("IF-RL", "math")]["change"] == 0.5 and not cells[("IF-RL", "math")]["own"]


def test_the_order_effect_is_the_difference_of_the_two_gains_on_the_same_prompts():
    flat = {"math": [0.0, 0.0, 0.0, 0.0]}
    metrics = _metrics({
        CASCADE: {"SFT": flat, "IF-RL": flat, "Math RL": {"math": [1.0, 1.0, 1.0, 1.0]}},
        RLHF_LAST: {"SFT": flat, "IF-RL": {"math": [1.0, 0.0, 1.0, 0.0]}, "Math RL": {"math": [1.0, 1.0, 1.0, 1.0]}},
        JOINT: {"SFT": flat},
    })
    estimate, low, high = gain_difference(metrics, "Math RL", "math", None)
    assert estimate == pytest.approx(0.5) and low <= 0.5 <= high


def test_a_lever_is_read_against_every_arm_on_the_same_prompts():
    domains = ("general", "instructions", "math", "code", "tools", "swe")
    low, high = {d: [0.0] * 8 for d in domains}, {d: [1.0] * 8 for d in domains}
    metrics = _metrics({CASCADE: {"SFT": low, "SWE RL": low}, JOINT: {"SFT": low, "joint": high}})
    rows = against_arms(metrics, {"per_sample": _samples({**low, "swe": [1.0] * 8})})
    cells = {(r["against"], r["domain"], r["mode"]): r for r in rows}
    assert len(rows) == 2 * 6 * 2
    assert cells[(CASCADE, "swe", "think")]["this run minus arm"] == 1.0
    assert cells[(CASCADE, "swe", "think")]["reading"] == "higher"
    assert cells[(JOINT, "math", "no_think")]["reading"] == "lower"
    assert cells[(JOINT, "swe", "think")]["reading"] == "cannot tell"  # [0, 0]: nothing moved
    with pytest.raises(ValueError, match="another scale or seed"):
        against_arms(metrics, {"per_sample": _samples({d: [1.0] * 4 for d in domains})})
    for garbage in ({}, {"per_sample": []}, {"per_sample": {CASCADE: {"SFT": [{"domain": "swe"}]}}}, [1]):
        with pytest.raises(ValueError, match="chapter 14's metrics|another scale"):
            against_arms(garbage, {"per_sample": _samples(low)})


def test_the_cascade_command_writes_the_stage_table_after_each_stage(tmp_path, capsys):
    from cascadekit.cli import main

    assert main(["cascade", "--scale", "smoke", "--order", "RLHF", "--out", str(tmp_path / "out"),
                 "--work", str(tmp_path / "work")]) == 0
    written = __import__("json").loads((tmp_path / "out" / "rows.json").read_text())
    assert [s["stage"] for s in written["stages"]] == ["SFT", "RLHF"]
    assert {r["stage"] for r in written["rows"]} == {"SFT", "RLHF"}
    assert "| RLHF | general" in (tmp_path / "out" / "stage_table.md").read_text()
    assert main(["cascade", "--scale", "smoke", "--order", "RLHF,RLHF", "--out", str(tmp_path / "bad")]) == 2
    assert "each stage once" in capsys.readouterr().err
    (tmp_path / "garbage.json").write_text("[" * 100_000)
    assert main(["cascade", "--scale", "smoke", "--against", str(tmp_path / "garbage.json"),
                 "--out", str(tmp_path / "bad")]) == 2
    assert "garbage.json" in capsys.readouterr().err


def test_tables_built_beside_training_are_the_inline_ones(tmp_path, monkeypatch):
    """``cascade --jobs 2`` with one seed: the stage tables come from a second process, and equal the inline ones."""
    import json
    import shutil

    from cascadekit.cli import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("CASCADEKIT_CACHE", str(cache))  # a fresh cache: the spawned process builds the tables
    command = ["cascade", "--scale", "smoke", "--order", "RLHF", "--work", str(tmp_path / "work")]
    assert main([*command, "--jobs", "2", "--out", str(tmp_path / "beside")]) == 0
    built = sorted(p.name for p in (cache / "stage-table").iterdir())
    shutil.rmtree(cache / "stage-table")
    assert main([*command, "--out", str(tmp_path / "inline")]) == 0
    assert sorted(p.name for p in (cache / "stage-table").iterdir()) == built
    beside, inline = (json.loads((tmp_path / run / "rows.json").read_text()) for run in ("beside", "inline"))
    assert beside["rows"] == inline["rows"] and [s["stage"] for s in beside["stages"]] == ["SFT", "RLHF"]


def test_claims_over_a_levers_seeds_read_each_seeds_samples(tmp_path, capsys):
    """Two seeds' runs, then ``--claims``: every row of the lever's claims, with per-seed estimates; garbage refused."""
    from cascadekit.cli import main

    command = ["cascade", "--scale", "smoke", "--order", "RLHF", "--out", str(tmp_path / "out")]
    for seed in ("5", "6"):
        assert main([*command, "--train-seed", seed, "--work", str(tmp_path / "work")]) == 0
    assert main([*command, "--train-seed", "5,6", "--claims"]) == 0
    claims = (tmp_path / "out" / "claims.md").read_text()
    for row in ("RLHF lifts its own domain (general, both modes; per_sample)", "RLHF cuts general's tokens",
                "RLHF keeps the other domains", "the last stage (RLHF) minus SFT (per_sample",
                "| RLHF | swe | no_think |"):
        assert row in claims, row
    assert "train-seed-5, train-seed-6" in claims and "primary" in claims
    assert main([*command, "--train-seed", "5,6", "--claims", "--versus", str(tmp_path / "out")]) == 0
    versus = (tmp_path / "out" / "versus.md").read_text()
    assert "| RLHF minus RLHF (per_sample, every domain, both modes) | the paper's order" in versus
    assert "| RLHF minus RLHF (per_sample, swe, both modes) |" in versus and "| 0.000 | [0.000, 0.000]" in versus
    (tmp_path / "out" / "train-seed-6" / "samples.json").write_text("{" * 10)
    assert main([*command, "--train-seed", "5,6", "--claims"]) == 2
    assert "no readable samples.json" in capsys.readouterr().err
    (tmp_path / "out" / "train-seed-6" / "samples.json").write_text('{"per_sample": {"SFT": []}}')
    assert main([*command, "--train-seed", "5,6", "--claims"]) == 2
    assert "did not evaluate the same stages" in capsys.readouterr().err


def test_fresh_prompts_reask_each_primary_claim_of_the_cascades_checkpoints(tmp_path, monkeypatch):
    """``cascade --fresh``: five primary rows on another evaluation seed's prompts (every stage stood in for by SFT)."""
    from types import SimpleNamespace

    from cascadekit.chapters import cascade_arms
    from cascadekit.chapters import resolve
    from cascadekit.chapters.cascade import sft_checkpoint
    from cascadekit.cli import main

    profile = resolve("14", "smoke").profile
    sft = sft_checkpoint(profile)
    asked = []
    monkeypatch.setattr(cascade_arms, "cascade_stage", lambda name, p, work: SimpleNamespace(checkpoint=sft))
    real_table = cascade_arms.cached_stage_table
    monkeypatch.setattr(cascade_arms, "cached_stage_table",
                        lambda stage, p, name, records: asked.append(records) or real_table(stage, p, name, records))
    assert main(["cascade", "--scale", "smoke", "--fresh", "--out", str(tmp_path / "out"),
                 "--work", str(tmp_path / "work")]) == 0
    text = (tmp_path / "out" / "fresh_prompts.md").read_text()
    for stage in ("RLHF", "IF-RL", "Math RL", "Code RL", "SWE RL"):
        assert f"| {stage} lifts its own domain (" in text and "evaluation seed +1" in text
    assert text.count("| primary |") == 5 and "| 0.000 |" in text  # SFT against itself: no change
    own = {json.dumps(r["messages"]) for r in stage_table.suite_records(profile, ["general"])}
    assert not own & {json.dumps(r["messages"]) for r in asked[0]}  # RLHF's rows: other general prompts


def test_a_lever_run_compares_its_last_stage_with_the_committed_arms(tmp_path):
    """``--harder --against``: both suites after each stage, and the last stage against each arm."""
    from cascadekit.chapters import resolve
    from cascadekit.cli import main
    from cascadekit.chapters.ch14_whole_cascade import harder_suite

    profile = resolve("14", "smoke").profile
    last = run_cascade(profile, tmp_path / "work", ["RLHF"])[-1]
    arm = {suite: stage_table.cached_stage_table(last.checkpoint, profile, "RLHF", records)["samples"]
           for suite, records in (("per_sample", None), ("harder", harder_suite(profile)))}
    metrics = {suite: {CASCADE: {"SFT": samples, "RLHF": samples}} for suite, samples in arm.items()}
    (tmp_path / "metrics.json").write_text(__import__("json").dumps(metrics))
    assert main(["cascade", "--scale", "smoke", "--order", "RLHF", "--harder", "--against",
                 str(tmp_path / "metrics.json"), "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) == 0
    assert "| RLHF | swe" in (tmp_path / "out" / "harder_table.md").read_text()
    against = (tmp_path / "out" / "against.md").read_text()
    assert "| harder | cascade | swe | think |" in against and "| 0.000 | [0.000, 0.000] | cannot tell |" in against
    (tmp_path / "levers").mkdir()
    (tmp_path / "out").rename(tmp_path / "levers" / "same_rlhf")
    rows = lever_rows(tmp_path)
    assert [(r["lever"], r["mode"]) for r in rows] == [("same_rlhf", "think"), ("same_rlhf", "no_think")]
    assert rows[0][f"minus {CASCADE}"] == "+0.000 [0.000, 0.000]"


def test_joint_counts_are_parsed_and_checked():
    assert parse_joint("swe=192, instructions=512") == {"swe": 192, "instructions": 512}
    for bad, needle in (("dpo=4", "no domain 'dpo'"), ("swe", "positive count"), ("swe=0", "positive count"),
                        ("swe=-3", "positive count"), ("swe=2.5", "positive count"), ("swe=1,swe=2", "twice"),
                        (" , ", "at least one"), ("swe=" + "9" * 40, "at most")):
        with pytest.raises(ValueError, match=needle):
            parse_joint(bad)


def test_the_cascade_command_trains_joint_rl_over_some_domains(tmp_path, capsys):
    """``--joint``: SFT, then one joint run over the named domains, with the stage table after each."""
    import json

    from cascadekit.cli import main

    assert main(["cascade", "--scale", "smoke", "--joint", "swe=2,instructions=2", "--out", str(tmp_path / "out"),
                 "--work", str(tmp_path / "work")]) == 0
    written = json.loads((tmp_path / "out" / "rows.json").read_text())
    assert [s["stage"] for s in written["stages"]] == ["SFT", "joint RL"]
    assert written["stages"][1]["prompts"] == 4
    assert "--joint" in written["provenance"]["command"]
    assert main(["cascade", "--scale", "smoke", "--joint", "swe=2", "--order", "RLHF",
                 "--out", str(tmp_path / "bad")]) == 2
    assert main(["cascade", "--scale", "smoke", "--joint", "dpo=2", "--out", str(tmp_path / "bad")]) == 2
    assert "no domain 'dpo'" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "rows.json").exists()


def test_the_committed_paper_vs_run_regenerates_from_the_committed_metrics(tmp_path):
    """Chapter 14 on the protocol: its claims and notes of the committed metrics are the committed file, byte for
    byte, and its figures draw from them."""
    from matplotlib import pyplot as plt

    from cascadekit.chapters import ch14_whole_cascade as chapter
    from cascadekit.results import RESULTS_DIR, load_metrics, save_paper_vs_run

    metrics = load_metrics(chapter.FOLDER)
    save_paper_vs_run(chapter.FOLDER, chapter.RESULTS_TITLE, chapter.claims(metrics), "", chapter.notes(metrics),
                      tmp_path, metrics["produced_by"])
    written = (tmp_path / chapter.FOLDER / "paper_vs_run.md").read_text()
    assert written == (RESULTS_DIR / chapter.FOLDER / "paper_vs_run.md").read_text()
    figures = chapter.figures(metrics)
    assert set(figures) == {"stage_table", "forgetting", "joint_curves", "forgetting_rlhf_last"}
    for figure in figures.values():
        plt.close(figure)


@pytest.mark.slow
def test_each_primary_claim_holds_on_fresh_prompts(tmp_path):
    """The committed run's primary claims, re-asked of the same (shipped) checkpoints on another evaluation seed.

    Two 95% intervals of one change from independent prompt sets should overlap; and a
    direction the committed run calls reproduced or contradicted must not reverse.
    """
    import re

    from cascadekit.chapters import resolve
    from cascadekit.chapters.cascade_arms import fresh_prompt_rows
    from cascadekit.chapters.ch14_whole_cascade import claims
    from cascadekit.results import load_metrics

    metrics = load_metrics("14_whole_cascade")
    committed = {row["claim"].split(" (")[0]: row for row in claims(metrics) if row["family"] == "primary"}
    seeds = metrics.get("train_seeds") or [metrics["config"].get("train_seed", 0)]  # every seed the claims are over
    fresh = fresh_prompt_rows([resolve("14", "toy", {"train_seed": s}).profile for s in seeds], tmp_path)

    def interval(row):  # "[low, high]", then each seed's estimate where there are several
        return [float(x) for x in re.match(r"\[([-+\d.]+), ([-+\d.]+)\]", row["95% interval"]).groups()]

    assert len(fresh) == len(committed) == 5
    for row in fresh:
        old = committed[row["claim"].split(" (")[0]]
        (low, high), (old_low, old_high) = interval(row), interval(old)
        assert low <= old_high and old_low <= high, (row["claim"], row["95% interval"], old["95% interval"])
        reversed_verdict = {"reproduced": "contradicted", "contradicted": "reproduced"}.get(old["verdict"])
        assert row["verdict"] != reversed_verdict, (row["claim"], row["verdict"], old["verdict"])
