"""No data loss: every file the kit writes appears whole or not at all, and ``--out`` is never an input."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cascadekit.cli import main

REPO = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_kill_9_during_data_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "problems.jsonl"
    out.write_text('{"previous": "corpus"}\n')
    before = out.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "cascadekit.cli", "data", "--ops", "2-20", "--count", "1000000",
                              "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the temporary file holds a good part of a corpus
            partial = [p for p in tmp_path.iterdir() if p.name.startswith(".problems.jsonl.")]
            if partial and partial[0].stat().st_size > 256 * 1024:
                break
            assert child.poll() is None, "the writer finished before it could be killed"
            time.sleep(0.05)
        else:
            pytest.fail("the writer never got going")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert out.read_bytes() == before  # not 3.5 MB of an 84 MB file
    assert all(re.fullmatch(r"\.problems\.jsonl\.\w+\.tmp", name) for name in _leftovers(tmp_path, {out.name}))


def test_a_failure_midway_through_data_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import cascadekit.world as world

    real = world.iter_problems

    def dies_after_three(**kwargs):
        def stream():
            for index, problem in enumerate(real(**kwargs)):
                if index == 3:
                    raise ValueError("disk full (simulated)")
                yield problem
        return stream()

    out = tmp_path / "p.jsonl"
    out.write_text("old\n")
    monkeypatch.setattr(world, "iter_problems", dies_after_three)
    assert main(["data", "--count", "10", "--out", str(out)]) == 2
    assert "disk full (simulated)" in capsys.readouterr().err
    assert out.read_text() == "old\n" and _leftovers(tmp_path, {"p.jsonl"}) == []


@pytest.mark.parametrize("spelling", ["{d}/in.jsonl", "{d}/./in.jsonl", "{d}/sub/../in.jsonl", "{d}/link.jsonl"])
def test_verify_refuses_to_overwrite_its_input(spelling: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from cascadekit.world import generate_problem

    (tmp_path / "sub").mkdir()
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"gold": generate_problem(2, "A", 0).to_dict(), "output": "Answer: 3"}) + "\n")
    (tmp_path / "link.jsonl").symlink_to(source)
    before = source.read_bytes()
    assert main(["verify", str(source), "--out", spelling.format(d=tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cascadekit verify: error: --out ") and "is the input" in err and "refusing" in err
    assert source.read_bytes() == before


def test_run_refuses_to_write_over_the_notebooks(capsys: pytest.CaptureFixture[str]) -> None:
    from cascadekit.runner import NOTEBOOK_DIR

    before = {p.name: p.stat().st_mtime_ns for p in NOTEBOOK_DIR.iterdir()}
    assert main(["run", "--scale", "smoke", "--out", str(NOTEBOOK_DIR / ".")]) == 2
    assert "is the notebooks folder" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in NOTEBOOK_DIR.iterdir()} == before


def test_book_refuses_to_build_over_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "01_x.ipynb").write_text("{}")
    assert main(["book", "--executed", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "refusing to build over it" in capsys.readouterr().err
    assert (tmp_path / "01_x.ipynb").read_text() == "{}"


def _power_cut(fd: int) -> None:
    raise OSError("power cut (simulated)")


def test_results_writers_keep_the_old_file_when_a_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    from cascadekit import atomic

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cascadekit.results import save_figure, save_metrics, save_paper_vs_run

    save_metrics("99_x", {"a": 1}, "cmd", root=tmp_path)
    save_paper_vs_run("99_x", "T", [{"a": 1}], "cmd", root=tmp_path)
    figure = plt.figure()
    save_figure("99_x", "fig", figure, root=tmp_path)
    folder = tmp_path / "99_x"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"metrics.json", "paper_vs_run.md", "fig.png"}

    def half_then_fail(fh, **kwargs):
        fh.write(b"\x89PNG half a figure")
        raise OSError("killed mid-write (simulated)")

    figure.savefig = half_then_fail
    with pytest.raises(OSError, match="simulated"):
        save_figure("99_x", "fig", figure, root=tmp_path)
    monkeypatch.setattr(atomic.os, "fsync", _power_cut)
    with pytest.raises(OSError, match="power cut"):
        save_metrics("99_x", {"a": 2}, "cmd", root=tmp_path)
    with pytest.raises(OSError, match="power cut"):
        save_paper_vs_run("99_x", "T", [{"a": 2}], "cmd", root=tmp_path)
    plt.close(figure)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_runner_summary_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadekit import atomic, runner

    runner._write_summary(tmp_path, {"01_a": {"chapter": "01_a", "status": "ok", "wall_s": 1.0}}, "smoke")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    monkeypatch.setattr(atomic.os, "fsync", _power_cut)
    with pytest.raises(OSError, match="power cut"):
        runner._write_summary(tmp_path, {"01_a": {"chapter": "01_a", "status": "failed", "wall_s": 2.0}}, "smoke")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


_MY_WRITERS = ["cli.py", "results.py", "runner.py", "book.py", "evaluation/report.py", "world/corpus.py",
               "pipeline.py", "training/sft.py", "experiments/pretraining.py", "experiments/edge_of_competence.py",
               "experiments/context_transfer.py", "experiments/budget.py", "experiments/process_rewards.py",
               "experiments/unified_thinking.py"]
_DIRECT_WRITE = re.compile(r"\.write_text\(|\.write_bytes\(|\.open\(\s*[\"']w|[^_]open\([^)]*[\"']w[b+]?[\"']"
                           r"|savefig\(\s*(?!fh)|gzip\.open\(")


@pytest.mark.parametrize("name", _MY_WRITERS)
def test_no_direct_writes_remain(name: str) -> None:
    source = (REPO / "cascadekit" / name).read_text()
    assert not _DIRECT_WRITE.findall(source), f"{name} writes a file in place: use cascadekit.atomic"
