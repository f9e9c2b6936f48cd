"""Two processes under ``torchrun`` on the CPU (gloo) run an SFT stage, a GRPO stage and a stage table of a tiny
released-format Qwen3, one launch for the three.

Before the stages were made distributed-safe, this deadlocked: one rank took the
cache entry's lock and entered the Trainer, which waited at the rendezvous for
the other rank, which waited for the lock. The launch has a timeout, so a hang
fails the test. The stages go through the ``small`` profile's code path
(released weights, the kit's chat tokenizer on them, LoRA merged at the save),
with 4-bit loading switched off, which needs a GPU: SFT on the kit's world, then
Math RL's GRPO on the released set's rows (the fixtures under
``tests/fixtures/released/``, rewarded by the released answer checker) from the
SFT checkpoint, then the stage table of the GRPO checkpoint.

Run as a script, this file is the worker each rank runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from test_pretrained import released  # noqa: F401 - the tiny Qwen3 checkpoint, a fixture used below

from cascadekit.artifacts import write_manifest
from cascadekit.engine.models import start_model
from cascadekit.stages import StageOutput
from cascadekit.profiles import load_profile
from cascadekit.engine.runtime import CPU, MissingExtra, load_chat_tokenizer, load_model, save_checkpoint, with_lora

LAUNCH_TIMEOUT_S = 300  # one process finishes the stage in seconds; a deadlock never does
OVERRIDES = {"device": "cpu", "dtype": "float32", "engine.quantization": "none", "engine.unsloth": False,
             "engine.data": "world", "sft.stage1_tasks": 2, "sft.stage1_seq_len": 1024, "sft.batch_size": 2}
#: GRPO's and the stage table's settings on top: two released math rows, 2 x 2 rollouts of 8 tokens a step.
RL_OVERRIDES = {"engine.data": "released", "engine.data_dir": str(Path(__file__).parent / "fixtures" / "released"),
                "engine.vllm": "none", "math_rl.pool": 2, "rl.prompts_per_step": 2, "rl.group_size": 2,
                "rl.max_completion_length": 8, "sft.max_new_tokens": 8, "evaluation.batch_size": 4}
START_KEY = "tiny-qwen3-chat"


def profile(base: Path, **overrides):
    return load_profile("small", {"model.pretrained": str(base), **OVERRIDES, **overrides})


def run_grpo(sft: StageOutput, base: Path, work_dir: Path) -> StageOutput:
    """Math RL's GRPO on the released rows from ``sft``, with Math RL's reward (the released answer checker)."""
    from cascadekit.chapters.cascade import math_records
    from cascadekit.training.math_rl import math_reward
    from cascadekit.training.pipeline import chat_grpo

    rl_profile = profile(base, **RL_OVERRIDES)
    return chat_grpo(sft, math_records(rl_profile), rl_profile, work_dir, reward=math_reward(rl_profile))


def run_table(checkpoint: Path, base: Path) -> dict:
    """The stage table of ``checkpoint`` on two math records (8 greedy tokens each)."""
    from cascadekit.evaluation.stage_table import stage_table, suite_records

    rl_profile = profile(base, **RL_OVERRIDES)
    return stage_table(checkpoint, rl_profile, "GRPO", suite_records(rl_profile, ["math"])[:2])


def run_sft(base: Path) -> StageOutput:
    """The first SFT stage from ``base`` (imported here so the worker's process group comes up first, in the stage)."""
    from cascadekit.training.sft import sft_stage

    return sft_stage(StageOutput(base, START_KEY), profile(base), 1)


@pytest.fixture(scope="module")
def chat_start(released, tmp_path_factory):  # noqa: F811 - the imported fixture
    """The released checkpoint with the kit's chat tokenizer (markers added, embeddings grown): SFT's start."""
    folder = released[0]
    tokenizer = load_chat_tokenizer(folder)
    model = start_model(profile(folder), tokenizer, placement=CPU)
    start = save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("start") / "chat-base")
    write_manifest(start, "chat-base", START_KEY)  # an entry: its content goes into SFT's key
    return start


def _torchrun(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc_per_node 2`` of this file, killed as a whole (every rank) after the timeout."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc_per_node", "2", __file__, *args]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as launch:
        try:
            out, _ = launch.communicate(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_tree(launch.pid)
            out, _ = launch.communicate()
            pytest.fail(f"torchrun of two ranks did not finish in {LAUNCH_TIMEOUT_S} s (a deadlock?):\n{out[-4000:]}")
    return subprocess.CompletedProcess(command, launch.returncode, out, "")


def _kill_tree(pid: int) -> None:
    """Kill the launcher and every rank it started (torchrun starts each rank in a session of its own)."""
    launcher = psutil.Process(pid)
    for process in [*launcher.children(recursive=True), launcher]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _reports(folder: Path) -> dict[int, dict]:
    """Each rank's report, from its own file: the ranks share one output pipe, where their lines can interleave."""
    return {int(p.stem): json.loads(p.read_text()) for p in folder.glob("*.json")}


@pytest.fixture(scope="module")
def two_ranks(chat_start, tmp_path_factory):
    """One ``torchrun`` of two ranks through SFT, GRPO and the stage table: (its folder, each rank's report)."""
    folder = tmp_path_factory.mktemp("two-ranks")
    cache, scratch, reports = folder / "two", folder / "tmp", folder / "reports"
    scratch.mkdir()
    reports.mkdir()
    env = {**os.environ, "CASCADEKIT_CACHE": str(cache), "TMPDIR": str(scratch), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "RANK_REPORTS": str(reports),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = _torchrun([str(chat_start), str(folder / "work")], env)
    assert done.returncode == 0, done.stdout[-4000:]
    ranks = _reports(reports)
    assert sorted(ranks) == [0, 1], done.stdout[-4000:]  # both ranks finished
    return folder, ranks


def _written_once(cache: Path, kind: str, key: str) -> None:
    """The cache holds one entry of ``kind`` (and its lock), with one manifest, written by the main process."""
    assert sorted(p.name for p in (cache / kind).iterdir()) == sorted([key, f".{key}.lock"])
    assert len(list((cache / kind).rglob("manifest.json"))) == 1


def test_two_ranks_train_one_stage_and_write_it_once(two_ranks, chat_start, tmp_path, monkeypatch):
    folder, ranks = two_ranks
    cache, scratch = folder / "two", folder / "tmp"
    reports = {rank: report["sft"] for rank, report in ranks.items()}
    assert reports[0]["checkpoint"] == reports[1]["checkpoint"] and reports[0]["key"] == reports[1]["key"]
    assert reports[0]["metrics"] == reports[1]["metrics"] and reports[0]["metrics"]["steps"] > 0

    entries = cache / "sft"
    assert sorted(p.name for p in entries.iterdir()) == sorted([reports[0]["key"], f".{reports[0]['key']}.lock"])
    assert len(list(entries.rglob("manifest.json"))) == 1  # written once, by the main process
    assert not list(scratch.glob("cascadekit-*"))  # the other rank's scratch folder is gone

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "one"))
    one = run_sft(chat_start)  # the same stage in one process: its own key (another global batch), the same architecture
    assert one.key != reports[0]["key"]
    two = load_model(reports[0]["checkpoint"]).state_dict()
    alone = load_model(one.checkpoint).state_dict()
    assert {k: v.shape for k, v in two.items()} == {k: v.shape for k, v in alone.items()}
    start = load_model(chat_start).state_dict()
    assert any(not (two[k] == start[k]).all() for k in start)  # the two ranks trained it


def test_one_process_helpers_are_no_ops(monkeypatch):
    from cascadekit import distributed  # here, so the torchrun test also runs on code from before this module

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert (distributed.world_size(), distributed.rank(), distributed.is_main()) == (1, 0, True)
    distributed.barrier()
    value = {"plan": "build"}
    assert distributed.broadcast(value) is value
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not a whole number"):
        distributed.world_size()


def test_only_the_main_process_writes_a_checkpoint(released, tmp_path, monkeypatch):  # noqa: F811
    from cascadekit import distributed

    model = load_model(released[0])
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    assert save_checkpoint(model, None, tmp_path / "ckpt") == tmp_path / "ckpt"
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="must be a plain file name"):  # refused on every process, before any wait
        save_checkpoint(model, None, tmp_path / "ckpt", files={"../x": "y"})


def test_a_zero3_partitioned_model_is_gathered_before_it_is_saved(released, tmp_path):  # noqa: F811
    model = with_lora(load_model(released[0]))
    next(model.parameters()).ds_id = 0  # what DeepSpeed ZeRO-3 marks each partitioned parameter with
    with pytest.raises(ValueError, match="merging a LoRA adapter into a ZeRO-3 partitioned model"):
        save_checkpoint(model, None, tmp_path / "ckpt", merge_lora=True)
    if importlib.util.find_spec("deepspeed") is None:  # the gather is DeepSpeed's: the CPU install says so
        with pytest.raises(MissingExtra, match="saving a ZeRO-3 partitioned model needs the 'deepspeed' package"):
            save_checkpoint(model, None, tmp_path / "ckpt")
    assert not list(tmp_path.iterdir())


def test_two_ranks_run_one_grpo_stage_and_write_it_once(two_ranks, chat_start):
    folder, ranks = two_ranks
    reports = {rank: report["grpo"] for rank, report in ranks.items()}
    assert reports[0] == reports[1]  # one key, one checkpoint, the same curves on both ranks
    assert reports[0]["metrics"]["steps"] == 1 and reports[0]["metrics"]["prompts"] == 2
    assert reports[0]["metrics"]["curves"][0]["reward/released_math_0.5"] <= 1.0  # the released checker scored it
    _written_once(folder / "two", "grpo", reports[0]["key"])
    # merged LoRA: a plain checkpoint that loads, of SFT's architecture (a random policy's rollouts all score 0,
    # so the update is zero: whether it moved the weights is not what two ranks can show here)
    trained = load_model(reports[0]["checkpoint"]).state_dict()
    sft = load_model(ranks[0]["sft"]["checkpoint"]).state_dict()
    assert {k: v.shape for k, v in trained.items()} == {k: v.shape for k, v in sft.items()}


def test_two_ranks_make_one_stage_table_equal_to_one_processs(two_ranks, chat_start, tmp_path, monkeypatch):
    folder, ranks = two_ranks
    tables = {rank: report["table"] for rank, report in ranks.items()}
    assert tables[0] == tables[1] and len(tables[0]["samples"]) == 2
    assert len(list((folder / "two" / "stage-table").rglob("manifest.json"))) == 1
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "one"))
    alone = run_table(Path(ranks[0]["grpo"]["checkpoint"]), chat_start)  # greedy: the same answers in one process
    assert alone["samples"] == tables[0]["samples"] and alone["rows"] == tables[0]["rows"]


def _stage(out: StageOutput) -> dict:
    return {"checkpoint": str(out.checkpoint), "key": out.key, "metrics": out.metrics}


def _worker(start: str, work_dir: str) -> None:
    """One rank: SFT, GRPO from it, the stage table of GRPO's checkpoint; then what it got, in
    ``$RANK_REPORTS/<rank>.json`` (which the tests read)."""
    base = Path(start)
    sft = run_sft(base)
    grpo = run_grpo(sft, base, Path(work_dir))
    table = run_table(grpo.checkpoint, base)
    report = {"rank": int(os.environ["RANK"]), "sft": _stage(sft), "grpo": _stage(grpo),
              "table": {"rows": table["rows"], "samples": table["samples"]}}
    (Path(os.environ["RANK_REPORTS"]) / f"{report['rank']}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    _worker(*sys.argv[1:])
