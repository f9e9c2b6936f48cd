"""No data loss: every file the kit writes appears whole or not at all, and ``--out`` is never an input."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from cascadekit.cli import main

REPO = Path(__file__).resolve().parents[2]


def _leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def _kill_9_when(child: subprocess.Popen, ready: Callable[[], bool], what: str) -> None:
    """SIGKILL ``child`` as soon as ``ready()``; a failure if it finishes first or never gets there."""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if ready():
                break
            assert child.poll() is None, f"{what} finished before it could be killed"
            time.sleep(0.02)
        else:
            pytest.fail(f"{what} never got going")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()


def test_kill_9_during_data_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "problems.jsonl"
    out.write_text('{"previous": "corpus"}\n')
    before = out.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "cascadekit", "data", "--ops", "2-20", "--count", "1000000",
                              "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def a_good_part_written() -> bool:  # the temporary file holds a good part of a corpus
        partial = [p for p in tmp_path.iterdir() if p.name.startswith(".problems.jsonl.")]
        return bool(partial) and partial[0].stat().st_size > 256 * 1024

    _kill_9_when(child, a_good_part_written, "the writer")
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
    from cascadekit.course.runner import NOTEBOOK_DIR

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
    from cascadekit import atomic
    from cascadekit.course import runner

    runner._write_summary(tmp_path, {"01_a": {"chapter": "01_a", "status": "ok", "wall_s": 1.0}}, "smoke")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    monkeypatch.setattr(atomic.os, "fsync", _power_cut)
    with pytest.raises(OSError, match="power cut"):
        runner._write_summary(tmp_path, {"01_a": {"chapter": "01_a", "status": "failed", "wall_s": 2.0}}, "smoke")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# Every other writer in the package: tests/security/test_atomic_writes.py scans its source (AST) for them.


# --- ship: a shipped entry is the old one or the whole new one ------------------------------

_WEIGHTS = 1 << 20


def _cache_entry(root: Path, fill: bytes) -> None:
    """Cache entry sft/k (built again, with ``fill`` as its weights, if it exists)."""
    from cascadekit.artifacts import get_or_build

    def build(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(fill * _WEIGHTS)
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")

    get_or_build("sft", "k", build, root=root, rebuild=True)


def _entry_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("reship", [False, True])
def test_a_ship_that_fails_mid_copy_leaves_the_old_entry_or_none(reship: bool, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadekit import artifacts

    shipped = tmp_path / "shipped"
    monkeypatch.setattr(artifacts, "shipped_root", lambda: shipped)
    cache = tmp_path / "cache"
    _cache_entry(cache, b"\x01")
    if reship:
        artifacts.ship("sft", "k", {"what": "old"}, root=cache)
        _cache_entry(cache, b"\x02")
    before = _entry_bytes(shipped / "sft" / "k") if reship else None
    real = shutil.copyfile

    def half_then_die(src, dst, **kwargs):
        if Path(src).name != "model.safetensors":
            return real(src, dst, **kwargs)
        Path(dst).write_bytes(Path(src).read_bytes()[:_WEIGHTS // 2])
        raise OSError("killed mid-copy (simulated)")

    monkeypatch.setattr(shutil, "copyfile", half_then_die)
    with pytest.raises(OSError, match="simulated"):
        artifacts.ship("sft", "k", {"what": "new"}, root=cache)
    entry = shipped / "sft" / "k"
    if reship:
        assert _entry_bytes(entry) == before
        artifacts.verify(entry, "sft", "k")
    else:
        assert not entry.exists()
    assert [p.name for p in (shipped / "sft").iterdir()] == (["k"] if reship else [])  # no temporary left


_SLOW_SHIP = """
import sys, time
from pathlib import Path
from cascadekit import artifacts
artifacts.shipped_root = lambda: Path(sys.argv[1])

def slow_copy(src, dst, **kwargs):
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(64 << 10):
            fout.write(chunk)
            fout.flush()
            time.sleep(0.05)

artifacts.shutil.copyfile = slow_copy
artifacts.ship("sft", "k", {"what": "new"}, root=Path(sys.argv[2]))
"""


def test_kill_9_during_a_reship_keeps_the_shipped_entry_and_the_next_ship_cleans_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadekit import artifacts

    shipped, cache = tmp_path / "shipped", tmp_path / "cache"
    monkeypatch.setattr(artifacts, "shipped_root", lambda: shipped)
    _cache_entry(cache, b"\x01")
    artifacts.ship("sft", "k", {"what": "old"}, root=cache)
    before = _entry_bytes(shipped / "sft" / "k")
    _cache_entry(cache, b"\x02")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", _SLOW_SHIP, str(shipped), str(cache)], env=env)

    def part_of_the_weights_copied() -> bool:
        partial = list((shipped / "sft").glob(".k.*/model.safetensors"))
        return bool(partial) and partial[0].stat().st_size > 0

    _kill_9_when(child, part_of_the_weights_copied, "the ship")
    assert _entry_bytes(shipped / "sft" / "k") == before
    leftovers = [p.name for p in (shipped / "sft").iterdir() if p.name != "k"]
    assert len(leftovers) == 1 and re.fullmatch(r"\.k\.\w{8}", leftovers[0])

    def never(folder: Path) -> None:
        raise AssertionError("the shipped entry was not used")

    used = artifacts.get_or_build("sft", "k", never, root=tmp_path / "reader")  # the leftover is not looked at
    assert (used / "model.safetensors").read_bytes() == b"\x01" * _WEIGHTS
    with pytest.warns(UserWarning, match="interrupted"):
        artifacts.ship("sft", "k", {"what": "new"}, root=cache)
    assert [p.name for p in (shipped / "sft").iterdir()] == ["k"]
    assert (shipped / "sft" / "k" / "model.safetensors").read_bytes() == b"\x02" * _WEIGHTS
    artifacts.verify(shipped / "sft" / "k", "sft", "k")
