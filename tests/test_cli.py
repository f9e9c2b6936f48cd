"""The command line: data -> verify round trip, and bad input as one clear error line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cascadekit.cli import main


def test_data_then_verify_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problems = tmp_path / "problems.jsonl"
    assert main(["data", "--ops", "2-4", "--contexts", "A,B", "--split", "eval", "--count", "12",
                 "--style", "compact", "--out", str(problems)]) == 0
    records = [json.loads(line) for line in problems.read_text().splitlines()]
    assert len(records) == 12 and {r["op"] for r in records} == {2, 3, 4}
    outputs = tmp_path / "outputs.jsonl"
    with outputs.open("w") as fh:
        for i, r in enumerate(records):
            text = r["solution_text"] if i % 2 == 0 else f"Answer: {r['answer']}."
            fh.write(json.dumps({"gold": r, "output": text}) + "\n")
    verdicts = tmp_path / "verdicts.jsonl"
    assert main(["verify", str(outputs), "--out", str(verdicts)]) == 0
    judged = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert [v["correct"] for v in judged] == [i % 2 == 0 for i in range(12)]
    assert "process-verified correct: 6/12" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["data", "--contexts", "Z", "--out", "x.jsonl"], "'Z'"),
        (["data", "--ops", "1-3", "--out", "x.jsonl"], "op range '1-3' out of bounds: need 2 <= lo <= hi <= 30"),
        (["data", "--ops", "5-3", "--out", "x.jsonl"], "op range '5-3' out of bounds"),
        (["data", "--ops", "2-31", "--out", "x.jsonl"], "op range '2-31' out of bounds"),
        (["data", "--ops", "2-x", "--out", "x.jsonl"], "bad op list '2-x'"),
        (["data", "--count", "10000001", "--out", "x.jsonl"], "--count: '10000001' is not an integer from 0 to 10,000,000"),
        (["data", "--count", "2.5", "--out", "x.jsonl"], "--count: '2.5' is not an integer"),
        (["data", "--seed", "-1", "--out", "x.jsonl"], "--seed: '-1' is not an integer from 0"),
        (["data", "--seed", "1" * 5000, "--out", "x.jsonl"], "--seed: '1111"),
        (["data", "--split", "holdout", "--out", "x.jsonl"], "holdout"),
        (["data", "--style", "fancy", "--out", "x.jsonl"], "fancy"),
        (["run", "--scale", "enormous"], "enormous"),
        (["run", "--only", "99"], "99"),
        (["run", "--set", "model.widht=3"], "widht"),
        (["run", "--set", "model.hidden=inf"], "model.hidden='inf': expected an integer"),
        (["run", "--set", "model.hidden=1.5"], "model.hidden=1.5: expected an integer"),
        (["run", "--set", 'world.contexts="AB"'], "world.contexts='AB': expected a list of strings"),
        (["run", "--set", "evaluation.backend=vllm"], "evaluation.backend: vLLM generation is engine.vllm's alone"),
        (["run", "--set", "engine.vllm=magic"], "engine.vllm='magic': must be one of none, colocate, server"),
        (["run", "--set", "device=tpu"], "device='tpu': must be one of cpu, cuda"),
        (["run", "--only", "01,42"], "unknown chapter(s) ['42']"),
        (["run", "--seed", "x"], "--seed: 'x' is not an integer"),
        (["verify", "missing.jsonl"], "missing.jsonl"),
        (["experiment", "08", "--world", "third"], "--world: invalid choice: 'third'"),
    ],
)
def test_bad_input_is_one_clear_error(argv: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cascadekit {argv[0]}: error: ") and needle in err and "Traceback" not in err
    assert err.count("\n") == 1 and not list(tmp_path.iterdir())  # one line, and nothing written


def test_verify_rejects_malformed_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"gold": {"op": 2}, "output": "x"}\n')
    assert main(["verify", str(bad), "--out", str(tmp_path / "v.jsonl")]) == 2
    assert "record 1: malformed gold problem" in capsys.readouterr().err
    bad.write_text("not json\n")
    assert main(["verify", str(bad), "--out", str(tmp_path / "v.jsonl")]) == 2
    assert "bad.jsonl:1: not JSON" in capsys.readouterr().err
    assert not (tmp_path / "v.jsonl").exists()


def test_data_streams_every_op_in_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.jsonl"
    assert main(["data", "--ops", "2-3,5", "--contexts", "A,teachers-school", "--count", "6", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["op"] for r in records} == {2, 3, 5} and {r["context"] for r in records} == {"A", "B"}
    assert "wrote 6 pretrain problems" in capsys.readouterr().out


def test_env_short(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "--short"]) == 0
    assert "device=" in capsys.readouterr().out


def test_rebuild_base_is_refused_where_no_base_is_built(capsys):
    assert main(["experiment", "04", "--scale", "smoke", "--rebuild-base", "--out", "unused"]) == 2
    assert "--rebuild-base applies to" in capsys.readouterr().err


def test_ship_refuses_a_missing_or_damaged_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    assert main(["ship", "chat-base", "nosuchkey", "--what", "x", "--built-by", "y"]) == 2
    assert "no cache entry chat-base/nosuchkey" in capsys.readouterr().err
    (tmp_path / "chat-base" / "k").mkdir(parents=True)
    assert main(["ship", "chat-base", "k", "--what", "x", "--built-by", "y"]) == 2
    assert "damaged" in capsys.readouterr().err
    assert main(["ship", "../etc", "k", "--what", "x", "--built-by", "y"]) == 2


def test_verify_prints_counts_for_one_record_as_for_many(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cascadekit.world import generate_problem

    problem = generate_problem(3, "A", seed=0).to_dict()
    outputs = tmp_path / "one.jsonl"
    outputs.write_text(json.dumps({"gold": problem, "output": problem["solution_text"]}) + "\n")
    assert main(["verify", str(outputs), "--out", str(tmp_path / "v.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "process-verified correct: 1/1 (100.0%)" in out and "answer correct:           1/1" in out
    assert "missing node 0, dependency mismatch 0, value mismatch 0, answer mismatch 0" in out
    assert "True" not in out and "False" not in out


@pytest.mark.parametrize("joint", ["", " ", ",", " , "])
def test_an_empty_joint_is_an_error_not_the_default_cascade(joint: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cascade", "--scale", "smoke", "--joint", joint, "--out", str(tmp_path / "o"),
                 "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err == "cascadekit cascade: error: joint RL needs at least one DOMAIN=PROMPTS\n"
    assert not list(tmp_path.iterdir())  # nothing trained, nothing written


def test_launch_slurm_keeps_an_existing_file_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.sh"
    job.write_text("my own batch script\n")
    assert main(["launch", "sft", "--scale", "paper", "--slurm", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascadekit launch: error: --slurm ") and "exists" in err and "--force" in err
    assert err.count("\n") == 1 and job.read_text() == "my own batch script\n"
    assert main(["launch", "sft", "--scale", "paper", "--slurm", str(job), "--force"]) == 0
    assert job.read_text().startswith("#!/bin/bash") and [p.name for p in tmp_path.iterdir()] == ["job.sh"]
    fresh = tmp_path / "fresh.sh"
    assert main(["launch", "sft", "--scale", "paper", "--slurm", str(fresh)]) == 0 and fresh.read_text() == job.read_text()


def _placeholder_metrics(records: list, arms: tuple = ("cascade", "joint")) -> dict:
    """Chapter 14's metrics for the prompts ``records``: every arm's last stage scored 0 on each."""
    samples = [{"domain": r["domain"], "think": r["think"], "score": 0.0} for r in records]
    return {"per_sample": {arm: {"SFT": samples, "last": samples} for arm in arms}}


@pytest.mark.parametrize("metrics, needle", [
    ([], "not chapter 14's metrics"),
    ({"per_sample": {}}, "not chapter 14's metrics: no arm on suite 'per_sample'"),
    ({"per_sample": {"cascade": {}}}, "not chapter 14's metrics"),
    ({"per_sample": {"cascade": {"SFT": [{"think": True}]}}}, "not chapter 14's metrics: a sample of arm 'cascade' lacks"),
    ({"per_sample": {"cascade": {"SFT": [1, 2]}}}, "not chapter 14's metrics"),
    ({"per_sample": {"cascade": {"SFT": [{"domain": "math", "think": True, "score": 1}]}}},
     "cascade on suite 'per_sample': the two stage tables did not ask the same prompts"),
    ("toy", "the two stage tables did not ask the same prompts in the same order (another scale or seed?)"),
])
def test_cascade_against_a_metrics_file_of_the_wrong_shape_fails_before_anything_trains(
        metrics, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from cascadekit.chapters import ch14_whole_cascade, resolve
    from cascadekit.evaluation.stage_table import suite_records

    def trains(*args, **kwargs):
        raise AssertionError("the cascade trained before the metrics file was checked")

    monkeypatch.setattr(ch14_whole_cascade, "run_cascade", trains)
    if metrics == "toy":  # the right shape, for another scale's prompts
        metrics = _placeholder_metrics(suite_records(resolve("14", "toy").profile))
    against = tmp_path / "metrics.json"
    against.write_text(json.dumps(metrics))
    assert main(["cascade", "--scale", "smoke", "--against", str(against), "--out", str(tmp_path / "o"),
                 "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascadekit cascade: error: ") and needle in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_metrics_file_of_the_same_prompts_passes_the_check_and_the_shipped_one_is_chapter_14s() -> None:
    from cascadekit.chapters import resolve
    from cascadekit.evaluation.stage_table import suite_records
    from cascadekit.chapters.ch14_whole_cascade import check_against, harder_suite

    smoke = resolve("14", "smoke").profile
    check_against(_placeholder_metrics(suite_records(smoke)), {"per_sample": suite_records(smoke)})
    toy = resolve("14", "toy").profile
    shipped = json.loads((Path(__file__).resolve().parents[1] / "data/results/14_whole_cascade/metrics.json").read_text())
    check_against(shipped, {"per_sample": suite_records(toy), "harder": harder_suite(toy)})


@pytest.mark.parametrize("module", ["cascadekit", "cascadekit.cli"])
def test_python_dash_m_runs_the_command(module: str) -> None:
    """``python -m cascadekit.cli experiment ...`` once did nothing and exited 0 (issue 56)."""
    import subprocess
    import sys

    bad = subprocess.run([sys.executable, "-m", module, "experiment", "99"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "error" in bad.stderr.lower(), (bad.returncode, bad.stderr[-500:])
    listed = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0 and "experiment" in listed.stdout


@pytest.mark.parametrize("verb", [["run", "--out", "unused"], ["experiment", "11"], ["cascade"]])
def test_a_gpu_scale_on_a_cpu_machine_is_one_line_before_any_work(verb: list[str], capsys, monkeypatch) -> None:
    """``--scale small`` on a CPU once failed deep inside the run with two tracebacks (issue 58)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main([*verb, "--scale", "small"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "CUDA GPU" in err and "--scale toy" in err, err
