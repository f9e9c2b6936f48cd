"""The artifact cache and checkpoint resume survive hostile and damaged state.

Each case is one from the issue: a manifest of the wrong shape, a plain file or
link where a folder is expected, unsafe stage/key names, concurrent rebuilds of a
corrupt entry (threads and processes), temporaries left by a killed build, and a
Trainer checkpoint cut mid-save.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cascadekit.artifacts import CorruptArtifact, artifact_path, get_or_build, verify
from cascadekit.training.pretrain import checkpoint_problem, resume_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _builder(calls: list, delay: float = 0.0):
    def build(folder):
        calls.append(folder)
        if delay:
            time.sleep(delay)
        (folder / "model.safetensors").write_bytes(b"\x01" * 1000)
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")
    return build


def _built(tmp_path, key="k"):
    calls = []
    path = get_or_build("pretrain", key, _builder(calls), root=tmp_path)
    return path, calls


GOOD_SHA = "0" * 64


@pytest.mark.parametrize("manifest", [
    [],
    "just a string",
    None,
    17,
    {},
    {"stage": "pretrain", "key": "k"},
    {"stage": "pretrain", "key": "k", "files": ["model.safetensors"]},
    {"stage": "pretrain", "key": "k", "files": None},
    {"stage": "pretrain", "key": "k", "files": {"model.safetensors": 5}},
    {"stage": "pretrain", "key": "k", "files": {"model.safetensors": {"sha": GOOD_SHA}}},
    {"stage": "pretrain", "key": "k", "files": {"model.safetensors": "abc"}},
    {"stage": "pretrain", "key": "k", "files": {"model.safetensors": "G" * 64}},
    {"stage": "pretrain", "key": "k", "files": {"../outside.bin": GOOD_SHA}},
    {"stage": "pretrain", "key": "k", "files": {"/etc/hostname": GOOD_SHA}},
    {"stage": "pretrain", "key": "k", "files": {"": GOOD_SHA}},
    {"stage": "sft", "key": "k", "files": {}},
    {"stage": "pretrain", "key": "other", "files": {}},
    {"stage": ["pretrain"], "key": "k", "files": {}},
    {"stage": "pretrain", "key": None, "files": {}},
], ids=lambda m: json.dumps(m)[:60])
def test_a_manifest_of_the_wrong_shape_is_corrupt_and_rebuilt(tmp_path, manifest):
    path, calls = _built(tmp_path)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptArtifact):
        verify(path, "pretrain", "k")
    with pytest.warns(UserWarning, match="rebuilding corrupt cache entry"):
        again = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    assert again == path and len(calls) == 2
    verify(again, "pretrain", "k")
    assert get_or_build("pretrain", "k", _builder(calls), root=tmp_path) == path and len(calls) == 2  # not stuck


def test_a_manifest_naming_a_file_outside_the_entry_is_not_trusted(tmp_path):
    """``..`` in a listed name is corrupt even when the outside file matches its sha256."""
    import hashlib

    path, calls = _built(tmp_path)
    outside = tmp_path / "pretrain" / "outside.bin"
    outside.write_bytes(b"secret")
    files = {"../outside.bin": hashlib.sha256(b"secret").hexdigest()}
    (path / "manifest.json").write_text(json.dumps({"stage": "pretrain", "key": "k", "files": files}))
    with pytest.raises(CorruptArtifact, match="not a relative path inside"):
        verify(path)
    (path / "manifest.json").write_text(json.dumps({"stage": "pretrain", "key": "k",
                                                     "files": {"link": hashlib.sha256(b"secret").hexdigest()}}))
    (path / "link").symlink_to(outside)
    with pytest.raises(CorruptArtifact, match="links outside"):
        verify(path)
    assert outside.read_bytes() == b"secret"


@pytest.mark.parametrize("content", [b"", b"\xff\xfe binary", b"x" * 10])
def test_an_unreadable_manifest_is_corrupt(tmp_path, content):
    path, _ = _built(tmp_path)
    (path / "manifest.json").write_bytes(content)
    with pytest.raises(CorruptArtifact, match="unreadable manifest"):
        verify(path)


def test_a_plain_file_where_the_entry_should_be_is_replaced(tmp_path):
    target = artifact_path("pretrain", "k", tmp_path)
    target.parent.mkdir(parents=True)
    target.write_text("not a folder")
    calls = []
    with pytest.warns(UserWarning, match="not a folder"):
        path = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    assert path == target and path.is_dir() and len(calls) == 1
    verify(path, "pretrain", "k")


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_where_the_entry_should_be_is_removed_not_followed(tmp_path, dangling):
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        _builder([])(elsewhere.mkdir() or elsewhere)
        (elsewhere / "keep.txt").write_text("mine")
    target = artifact_path("pretrain", "k", tmp_path)
    target.parent.mkdir(parents=True)
    target.symlink_to(elsewhere, target_is_directory=True)
    with pytest.warns(UserWarning, match="not a folder"):
        path = get_or_build("pretrain", "k", _builder([]), root=tmp_path)
    assert not path.is_symlink() and path.is_dir()
    verify(path, "pretrain", "k")
    if not dangling:
        assert (elsewhere / "keep.txt").read_text() == "mine"  # the link's target is untouched


def test_a_plain_file_where_the_stage_folder_should_be_is_replaced(tmp_path):
    (tmp_path / "pretrain").write_text("oops")
    with pytest.warns(UserWarning, match="plain file"):
        path = get_or_build("pretrain", "k", _builder([]), root=tmp_path)
    verify(path, "pretrain", "k")


def test_a_cache_root_that_is_a_file_is_one_clear_error(tmp_path):
    root = tmp_path / "cache"
    root.write_text("")
    with pytest.raises(NotADirectoryError, match="cache root .* is not a folder"):
        get_or_build("pretrain", "k", _builder([]), root=root)
    assert root.read_text() == ""


@pytest.mark.parametrize("stage,key", [
    ("pretrain", ""), ("pretrain", ".."), ("pretrain", "."), ("pretrain", "a/b"), ("pretrain", "../../etc"),
    ("pretrain", "/abs"), ("pretrain", ".hidden"), ("pretrain", "a\\b"), ("pretrain", "a\x00b"),
    ("pretrain", "x" * 201), ("pretrain", None), ("pretrain", 3), ("", "k"), ("..", "k"), ("a/b", "k"),
])
def test_unsafe_stage_or_key_is_a_clear_error_before_touching_disk(tmp_path, stage, key):
    calls = []
    with pytest.raises(ValueError, match="cache (stage|key)"):
        get_or_build(stage, key, _builder(calls), root=tmp_path / "root")
    assert not calls and not (tmp_path / "root").exists()


def _corrupt_entry(tmp_path) -> list:
    path, calls = _built(tmp_path)
    (path / "model.safetensors").write_bytes(b"\x01" * 10)  # truncated
    return calls


def test_concurrent_threads_rebuilding_a_corrupt_entry_build_it_once(tmp_path):
    calls = _corrupt_entry(tmp_path)
    results, errors = [], []

    def worker():
        try:
            results.append(get_or_build("pretrain", "k", _builder(calls, delay=0.2), root=tmp_path))
        except BaseException as err:  # noqa: BLE001 - any exception is the failure under test
            errors.append(err)

    with pytest.warns(UserWarning, match="rebuilding corrupt"):
        threads = [threading.Thread(target=worker) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    assert len(results) == 16 and set(results) == {artifact_path("pretrain", "k", tmp_path)}
    assert len(calls) == 2  # the first build, then exactly one rebuild
    verify(results[0], "pretrain", "k")


_WORKER = textwrap.dedent("""
    import os, sys, time, warnings
    from pathlib import Path
    from cascadekit.artifacts import get_or_build, verify
    root, log = Path(sys.argv[1]), Path(sys.argv[2])
    def build(folder):
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        if len(sys.argv) > 3:  # the build to be killed: say so, then hang
            Path(sys.argv[3]).write_text("building")
            time.sleep(60)
        time.sleep(0.3)
        (folder / "model.safetensors").write_bytes(b"\\x02" * 4096)
    warnings.simplefilter("ignore")
    path = get_or_build("pretrain", "k", build, root=root)
    verify(path, "pretrain", "k")
    print("OK", path)
""")


def _spawn(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _WORKER, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_concurrent_processes_rebuilding_a_corrupt_entry_build_it_once(tmp_path):
    _corrupt_entry(tmp_path)
    log = tmp_path / "builds.log"
    procs = [_spawn(str(tmp_path), str(log)) for _ in range(10)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in err, err
        assert out.startswith("OK ")
    assert len(log.read_text().split()) == 1  # one process rebuilt; the nine others waited and used its entry
    verify(artifact_path("pretrain", "k", tmp_path), "pretrain", "k")


def test_a_killed_build_leaves_no_stuck_lock_and_its_temporary_is_cleaned(tmp_path):
    log, started = tmp_path / "builds.log", tmp_path / "started"
    proc = _spawn(str(tmp_path), str(log), str(started))
    deadline = time.monotonic() + 30
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    stale = [p for p in (tmp_path / "pretrain").iterdir() if p.name.startswith(".k.") and p.is_dir()]
    assert len(stale) == 1  # the killed build's temporary folder
    other = tmp_path / "pretrain" / ".k.x.abcd1234"  # a live temporary of another entry, key "k.x"
    other.mkdir()
    calls = []
    with pytest.warns(UserWarning, match="interrupted"):
        path = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)  # does not wait on the dead lock
    assert len(calls) == 1 and not stale[0].exists() and other.exists()
    verify(path, "pretrain", "k")
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == [".k.lock", ".k.x.abcd1234", "k"]


def test_stale_temporaries_are_cleaned_even_when_the_entry_is_valid(tmp_path):
    path, calls = _built(tmp_path)
    stale = tmp_path / "pretrain" / ".k.zz_9abcd"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"x")
    stale_file = tmp_path / "pretrain" / ".k.qwertyui"
    stale_file.write_text("")
    with pytest.warns(UserWarning, match="interrupted"):
        assert get_or_build("pretrain", "k", _builder(calls), root=tmp_path) == path
    assert len(calls) == 1 and not stale.exists() and not stale_file.exists()


# --- resume from the last good Trainer checkpoint -------------------------------------------------

def _checkpoint(run_dir: Path, step: int, *, state=True, weights=True, optimizer=True) -> Path:
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if weights:
        save_file({"w": torch.arange(64, dtype=torch.float32)}, str(folder / "model.safetensors"))
    if optimizer:
        torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return folder


def _truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


DAMAGES = {
    "no trainer_state.json": lambda f: (f / "trainer_state.json").unlink(),
    "truncated trainer_state.json": lambda f: _truncate(f / "trainer_state.json"),
    "trainer_state.json a list": lambda f: (f / "trainer_state.json").write_text("[]"),
    "no weights": lambda f: (f / "model.safetensors").unlink(),
    "weights cut in their data": lambda f: _truncate(f / "model.safetensors", -16),
    "weights cut in their header": lambda f: _truncate(f / "model.safetensors", 20),
    "weights of 3 bytes": lambda f: _truncate(f / "model.safetensors", 3),
    "weights header garbage": lambda f: (f / "model.safetensors").write_bytes(b"\x10" + b"\0" * 7 + b"not json" * 2),
    "truncated optimizer.pt": lambda f: _truncate(f / "optimizer.pt"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_last_checkpoint_is_skipped_for_the_previous_good_one(tmp_path, damage):
    good = _checkpoint(tmp_path, 2)
    bad = _checkpoint(tmp_path, 4)
    DAMAGES[damage](bad)
    assert checkpoint_problem(good) is None
    assert checkpoint_problem(bad)
    with pytest.warns(UserWarning, match="checkpoint-4"):
        assert resume_checkpoint(tmp_path) == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "damaged-checkpoint-4"]


def test_a_sharded_checkpoint_needs_every_shard(tmp_path):
    folder = _checkpoint(tmp_path, 3, weights=False)
    save_file({"a": torch.ones(4)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.ones(4)}, str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert checkpoint_problem(folder) is None
    (folder / "model-00002-of-00002.safetensors").unlink()
    assert "missing" in checkpoint_problem(folder)
    index["weight_map"]["b"] = "../../etc/passwd"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "unreadable" in checkpoint_problem(folder)


def test_with_no_good_checkpoint_training_starts_afresh(tmp_path):
    assert resume_checkpoint(tmp_path / "absent") is None
    assert resume_checkpoint(tmp_path) is None  # empty: nothing to say
    _checkpoint(tmp_path, 2, state=False)
    _checkpoint(tmp_path, 4, weights=False)
    with pytest.warns(UserWarning) as record:
        assert resume_checkpoint(tmp_path) is None
    messages = [str(w.message) for w in record]
    assert len(messages) == 3 and "checkpoint-4: no model weights" in messages[0]
    assert "checkpoint-2: no trainer_state.json" in messages[1] and "starts afresh" in messages[2]
    assert resume_checkpoint(tmp_path) is None  # moved aside: not reported again


def test_the_newest_good_checkpoint_wins_by_number_not_name(tmp_path):
    _checkpoint(tmp_path, 9)
    newest = _checkpoint(tmp_path, 10)
    (tmp_path / "checkpoint-x").mkdir()
    (tmp_path / "checkpoint-11").write_text("")
    assert resume_checkpoint(tmp_path) == newest


def test_a_link_where_the_stage_folder_should_be_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    planted = get_or_build("pretrain", "k", _builder([]), root=elsewhere)  # a valid entry behind the link
    (planted / "keep.txt").write_text("mine")
    root = tmp_path / "cache"
    root.mkdir()
    (root / "pretrain").symlink_to(elsewhere / "pretrain", target_is_directory=True)
    calls = []
    with pytest.warns(UserWarning, match="a link where the cache's 'pretrain' folder should be"):
        path = get_or_build("pretrain", "k", _builder(calls), root=root)
    assert len(calls) == 1 and not (root / "pretrain").is_symlink() and path.resolve().is_relative_to(root)
    verify(path, "pretrain", "k")
    assert (planted / "keep.txt").read_text() == "mine"  # the link's target is untouched


@pytest.mark.parametrize("member", ["model.safetensors", "sub/config.json", "manifest.json"])
def test_a_hard_linked_member_is_rejected_and_rebuilt(tmp_path, member):
    path, calls = _built(tmp_path / "cache")
    outside = tmp_path / "outside"
    outside.write_bytes((path / member).read_bytes())  # the same bytes, so its sha256 still matches
    (path / member).unlink()
    os.link(outside, path / member)
    with pytest.raises(CorruptArtifact, match=f"{member} is a hard link"):
        verify(path, "pretrain", "k")
    with pytest.warns(UserWarning, match="rebuilding corrupt cache entry"):
        get_or_build("pretrain", "k", _builder(calls), root=tmp_path / "cache")
    assert len(calls) == 2 and (path / member).stat().st_nlink == 1
    verify(path, "pretrain", "k")
    assert outside.stat().st_nlink == 1  # the rebuild deleted only the entry's name for it


def test_a_builder_that_hard_links_a_file_in_is_refused(tmp_path):
    outside = tmp_path / "weights.bin"
    outside.write_bytes(b"w")

    def links(folder):
        os.link(outside, folder / "model.bin")

    with pytest.raises(ValueError, match="hard link"):
        get_or_build("pretrain", "k", links, root=tmp_path / "cache")
    assert not artifact_path("pretrain", "k", tmp_path / "cache").exists() and outside.read_bytes() == b"w"
