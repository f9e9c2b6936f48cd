import json

import pytest

from cascadekit.artifacts import CorruptArtifact, artifact_path, cache_root, get_or_build, verify


def _builder(calls: list):
    def build(folder):
        calls.append(folder)
        (folder / "model.safetensors").write_bytes(b"\x00" * 1000)
        (folder / "sub").mkdir()
        (folder / "sub" / "config.json").write_text("{}")
    return build


def test_builds_once_then_reuses(tmp_path):
    calls = []
    first = get_or_build("pretrain", "abc", _builder(calls), root=tmp_path)
    second = get_or_build("pretrain", "abc", _builder(calls), root=tmp_path)
    assert first == second == artifact_path("pretrain", "abc", tmp_path)
    assert len(calls) == 1
    manifest = json.loads((first / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.safetensors", "sub/config.json"}
    # no temp folders left; the entry's lock file stays (deleting it on release would race with a waiter)
    assert sorted(p.name for p in tmp_path.joinpath("pretrain").iterdir()) == [".abc.lock", "abc"]


@pytest.mark.parametrize("damage", ["truncate", "delete_manifest", "delete_file", "bad_manifest", "wrong_shape"])
def test_corrupt_entries_are_rebuilt_with_a_warning(tmp_path, damage):
    calls = []
    path = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    if damage == "truncate":
        (path / "model.safetensors").write_bytes(b"\x00" * 10)
    elif damage == "delete_manifest":
        (path / "manifest.json").unlink()
    elif damage == "delete_file":
        (path / "sub" / "config.json").unlink()
    elif damage == "bad_manifest":
        (path / "manifest.json").write_text("{")
    else:
        (path / "manifest.json").write_text('{"stage": "pretrain", "key": "k", "files": ["model.safetensors"]}')
    with pytest.raises(CorruptArtifact):
        verify(path)
    with pytest.warns(UserWarning, match="corrupt"):
        again = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    assert len(calls) == 2
    verify(again)
    assert (again / "model.safetensors").stat().st_size == 1000


def test_a_failed_build_leaves_nothing(tmp_path):
    def broken(folder):
        (folder / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        get_or_build("tokenizer", "k", broken, root=tmp_path)
    assert [p.name for p in (tmp_path / "tokenizer").iterdir()] == [".k.lock"]


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("CASCADEKIT_CACHE")
    assert cache_root().parts[-2:] == (".cache", "cascadekit")


def test_old_manifests_stay_valid(tmp_path):
    """A manifest written before the schema check (same fields, indent 1, no newline) still verifies."""
    import hashlib

    folder = tmp_path / "pretrain" / "k"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    files = {"model.safetensors": hashlib.sha256(b"w").hexdigest()}
    (folder / "manifest.json").write_text(json.dumps({"stage": "pretrain", "key": "k", "files": files}, indent=1))
    verify(folder, "pretrain", "k")
    assert get_or_build("pretrain", "k", lambda d: pytest.fail("rebuilt a valid entry"), root=tmp_path) == folder


def test_the_manifest_is_written_through_a_temporary_name(tmp_path, monkeypatch):
    import cascadekit.artifacts as artifacts

    written = []
    real = artifacts.atomic_write_json
    monkeypatch.setattr(artifacts, "atomic_write_json", lambda path, data: (written.append(path), real(path, data)))
    path = get_or_build("pretrain", "k", _builder([]), root=tmp_path)
    assert [p.name for p in written] == ["manifest.json"]
    verify(path, "pretrain", "k")


def test_a_shipped_entry_seeds_the_cache_instead_of_a_build(tmp_path, monkeypatch):
    from cascadekit import artifacts

    shipped = tmp_path / "shipped"
    entry = shipped / "pretrain" / "k1"
    entry.mkdir(parents=True)
    (entry / "model.bin").write_bytes(b"weights")
    artifacts.write_manifest(entry, "pretrain", "k1")
    monkeypatch.setattr(artifacts, "shipped_root", lambda: shipped)

    def never(folder):
        raise AssertionError("a shipped stage was built again")

    got = artifacts.get_or_build("pretrain", "k1", never, root=tmp_path / "cache")
    assert (got / "model.bin").read_bytes() == b"weights"
    (entry / "model.bin").write_bytes(b"tampered")  # a damaged shipped entry is ignored, with a warning
    built = []
    with pytest.warns(UserWarning, match="damaged shipped checkpoint"):
        artifacts.get_or_build("pretrain", "k1", lambda f: built.append((f / "model.bin").write_bytes(b"w")),
                               root=tmp_path / "other-cache")
    assert built


def test_the_shipped_toy_base_is_the_toy_profiles_base():
    """The committed checkpoint verifies against its manifest, under the key the toy profile asks for."""
    from cascadekit.artifacts import shipped_root, verify
    from cascadekit.profiles import load_profile
    from cascadekit.training.pretrain import pretrain_key

    key = pretrain_key(load_profile("toy"))
    verify(shipped_root() / "pretrain" / key, "pretrain", key)


def test_ship_copies_a_verified_entry_with_its_provenance(tmp_path, monkeypatch):
    from cascadekit import artifacts

    monkeypatch.setattr(artifacts, "shipped_root", lambda: tmp_path / "shipped")
    get_or_build("sft", "k2", _builder([]), root=tmp_path / "cache")
    dest = artifacts.ship("sft", "k2", {"what": "a test entry", "command": "x"}, root=tmp_path / "cache")
    verify(dest, "sft", "k2")
    assert json.loads((dest / artifacts.PROVENANCE).read_text())["what"] == "a test entry"

    def never(folder):
        raise AssertionError("a shipped stage was built again")

    assert (get_or_build("sft", "k2", never, root=tmp_path / "fresh") / "model.safetensors").exists()
    monkeypatch.setattr(artifacts, "MAX_SHIPPED_BYTES", 100)
    with pytest.raises(ValueError, match="MiB"):
        artifacts.ship("sft", "k2", {}, root=tmp_path / "cache")
    (artifact_path("sft", "k2", tmp_path / "cache") / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CorruptArtifact):
        artifacts.ship("sft", "k2", {}, root=tmp_path / "cache")


def test_rebuild_ignores_the_cached_and_the_shipped_entry(tmp_path, monkeypatch):
    from cascadekit import artifacts

    monkeypatch.setattr(artifacts, "shipped_root", lambda: tmp_path / "shipped")
    calls: list = []
    get_or_build("sft", "k3", _builder(calls), root=tmp_path / "cache")
    artifacts.ship("sft", "k3", {}, root=tmp_path / "cache")
    get_or_build("sft", "k3", _builder(calls), root=tmp_path / "cache", rebuild=True)
    get_or_build("sft", "k3", _builder(calls), root=tmp_path / "other", rebuild=True)
    assert len(calls) == 3


def test_the_shipped_part2_base_is_the_toy_profiles_base():
    """The committed Part II base verifies under the key the toy profile asks for, without training anything."""
    from cascadekit.artifacts import shipped_folder
    from cascadekit.training.chat_base import chat_base_key
    from cascadekit.chapters import resolve

    folder, named = shipped_folder("chat-base", chat_base_key(resolve("08", "toy").profile))
    verify(folder, "chat-base", named)


def test_toy_and_smoke_cache_keys_and_world_data_are_pinned():
    """Toy bases are 30+ CPU minutes each and shipped: nothing may move their keys or the problems behind them.

    The values were recorded before the ``paper`` rendering and the official op
    count were added (issue 21); a change here must come with rebuilt, re-shipped bases.
    """
    import hashlib

    from cascadekit.chapters import resolve
    from cascadekit.chapters.ch05_context_transfer import B_SHARES, variant_key
    from cascadekit.training.pretrain import pretrain_key
    from cascadekit.world import generate_problem
    from cascadekit.world.corpus import rendering_fingerprint

    for chapter in ("03", "04", "05", "06", "07"):
        assert pretrain_key(resolve(chapter, "toy").profile) == "c3f961507249"
        assert pretrain_key(resolve(chapter, "smoke").profile) == "6de4be210453"
    toy = resolve("05", "toy").profile
    assert [variant_key(toy, s) for s in B_SHARES] == ["25c4eb38ae44", "cffcf35f5300", "01a0db59e8ae", "0508a3199b10"]
    assert rendering_fingerprint("minimal") == "1951b723c56dab62"
    assert rendering_fingerprint("compact") == "de183542266e42f6"
    pinned = {"minimal": "0370a71efd976292ec8c5112394a0c893934553c908dad74389880061a26aec6",
              "compact": "04b2184dafc154066936f643028604cdd711f0f979b76419f60fcbe59971809f"}
    for style, digest in pinned.items():
        records = [generate_problem(op, c, s, style).to_dict() for op in range(2, 31) for c in "ABC" for s in range(4)]
        assert hashlib.sha256(json.dumps(records).encode()).hexdigest() == digest, style


def test_the_shipped_cascade_reaches_math_rl_without_building(tmp_path, monkeypatch):
    """Chapter 12 starts from Math RL's last checkpoint: every stage on the way is shipped (or aliased) at toy."""
    from cascadekit import stages as pipeline
    from cascadekit.chapters import resolve
    from cascadekit.chapters.cascade import unified_math_rl

    real = pipeline.get_or_build

    def shipped_only(kind, key, build, **kwargs):
        def never(folder):
            raise AssertionError(f"{kind}/{key} is not shipped and would be built")
        return real(kind, key, never, **kwargs)

    monkeypatch.setattr(pipeline, "get_or_build", shipped_only)
    assert unified_math_rl(resolve("11", "toy").profile, tmp_path).key == "8fac51d21012"


def test_an_entry_whose_manifest_lists_no_files_is_not_served(tmp_path):
    """Issue 56: a manifest checks only what it lists, so an emptied one once served an entry without its weights."""
    calls = []
    path = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    (path / "manifest.json").write_text(json.dumps({"stage": "pretrain", "key": "k", "files": {}}))
    (path / "model.safetensors").unlink()
    with pytest.raises(CorruptArtifact, match="lists no files"):
        verify(path)
    with pytest.warns(UserWarning, match="lists no files"):
        again = get_or_build("pretrain", "k", _builder(calls), root=tmp_path)
    assert len(calls) == 2 and (again / "model.safetensors").stat().st_size == 1000


def test_an_entry_must_list_what_its_stage_needs(tmp_path):
    calls = []
    needs = ("sub/config.json", "model.safetensors|adapter_model.safetensors")
    path = get_or_build("pretrain", "k", _builder(calls), root=tmp_path, needs=needs)
    verify(path, "pretrain", "k", needs)
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"]["model.safetensors"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "model.safetensors").unlink()
    verify(path)  # the manifest alone is consistent ...
    with pytest.raises(CorruptArtifact, match="does not list model.safetensors or adapter_model.safetensors"):
        verify(path, "pretrain", "k", needs)  # ... but not with what the stage needs
    with pytest.warns(UserWarning, match="does not list"):
        get_or_build("pretrain", "k", _builder(calls), root=tmp_path, needs=needs)
    assert len(calls) == 2


@pytest.mark.parametrize("writes", [{}, {"config.json": "{}"}])
def test_a_build_that_leaves_out_what_its_stage_needs_fails_and_leaves_nothing(tmp_path, writes):
    def build(folder):
        for name, text in writes.items():
            (folder / name).write_text(text)

    with pytest.raises(CorruptArtifact, match="lists no files|does not list model.safetensors"):
        get_or_build("sft", "k", build, root=tmp_path, needs=("config.json", "model.safetensors"))
    assert [p.name for p in (tmp_path / "sft").iterdir()] == [".k.lock"]


def test_a_training_stage_needs_its_weights_and_its_record(tmp_path, monkeypatch):
    from cascadekit.stages import CHECKPOINT, STAGE_FILE, Stage, run_stage

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    calls = []

    def build(folder):
        calls.append(folder)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"w")
        return {}

    stage = Stage("sft", {"a": 1}, build, recipe=1, holds=CHECKPOINT)
    assert stage.needs == (*CHECKPOINT, STAGE_FILE)
    out = run_stage(stage)
    manifest = json.loads((out.checkpoint / "manifest.json").read_text())
    manifest["files"] = {STAGE_FILE: manifest["files"][STAGE_FILE]}
    (out.checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match="does not list config.json or adapter_config.json"):
        run_stage(stage)
    assert len(calls) == 2


class _SerializeError(Exception):
    """Stands in for safetensors' SafetensorError, which wraps the OS error as text."""


def test_a_disk_that_fills_during_a_save_is_one_line_and_leaves_no_half_written_files(tmp_path, monkeypatch):
    """Issue 56: a full disk during a save ended in a 30-line SafetensorError traceback."""
    from cascadekit.stages import DiskFull, Stage, run_stage, storage_full

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path))
    stage = Stage("sft", {"a": 1}, lambda folder: {}, recipe=1)
    runs = tmp_path / "runs" / f"sft-{stage.key}"

    def build(folder):
        (folder / "config.json").write_text("{}")
        (runs / "checkpoint-1").mkdir(parents=True)
        (runs / "checkpoint-1" / "trainer_state.json").write_text("{}")  # a finished checkpoint: kept to resume
        (runs / "checkpoint-2").mkdir()
        (runs / "checkpoint-2" / "model.safetensors").write_bytes(b"\0" * 3_000_000)  # the save that filled it
        raise _SerializeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                              '"No space left on device" })')

    full = Stage("sft", {"a": 1}, build, recipe=1)
    with pytest.raises(DiskFull) as caught:
        run_stage(full)
    line = str(caught.value)
    assert "\n" not in line and str(tmp_path / "sft") in line and "3.0 MB" in line, line
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert not (runs / "checkpoint-2").exists() and (runs / "checkpoint-1").is_dir()
    assert [p.name for p in (tmp_path / "sft").iterdir()] == [f".{stage.key}.lock"]
    assert storage_full(OSError(28, "No space left on device")) and not storage_full(ValueError("bad value"))
    with pytest.raises(ValueError, match="bad value"):  # any other failure passes through as it was
        run_stage(Stage("sft", {"a": 2}, lambda folder: (_ for _ in ()).throw(ValueError("bad value")), recipe=1))
    assert isinstance(caught.value, OSError)  # so the command line prints it as its one error line (main's handler)
