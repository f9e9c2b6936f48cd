"""The launcher's dry run for 1 and 4 nodes, and its validation, without a GPU."""
from __future__ import annotations

import importlib.machinery
import subprocess
import sys
import types

import pytest
import transformers.training_args as training_args

from cascadekit.engine import runtime
from cascadekit.cli import main
from cascadekit.launch import CONFIGS, LaunchError, accelerate_config, launch_profile, plan, validate_config
from cascadekit.profiles import load_profile
from cascadekit.training import grpo


def dry_run(capsys, *args: str) -> str:
    assert main(["launch", *args, "--dry-run"]) == 0
    return capsys.readouterr().out


def slurm_script(text: str) -> str:
    return text.split("# Slurm batch script\n", 1)[1]


def test_one_node_shares_its_gpus_with_the_vllm_server(capsys, tmp_path):
    out = dry_run(capsys, "rlhf", "--scale", "full", "--nodes", "1", "--vllm-gpus", "4")
    assert "1 training node(s), 4 training process(es)" in out and "zero3.yaml (validated)" in out
    assert "VLLM_SERVER_DEV_MODE=1 vllm serve Qwen/Qwen3-8B-Base" in out
    assert "--tensor-parallel-size 4 --data-parallel-size 1" in out
    node = next(line for line in out.splitlines() if line.startswith("node 0:"))
    assert "--num_machines 1 --num_processes 4 --machine_rank 0" in node and "--gpu_ids 4,5,6,7" in node
    assert 'CASCADEKIT_VLLM_SERVER="$VLLM_ADDR:8000"' in node
    assert node.endswith("-m cascadekit experiment 09 --scale full --set=engine.nodes=1 --set=engine.vllm_gpus=4")
    script = slurm_script(out)
    assert "#SBATCH --nodes=1" in script and "CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve" in script
    assert "--overlap" in script.strip().splitlines()[-1]
    (tmp_path / "job.sh").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)  # the script parses


def test_four_nodes_and_a_server_node(capsys, tmp_path):
    out = dry_run(capsys, "rlhf", "--scale", "full", "--nodes", "4")
    assert "4 training node(s), 32 training process(es), vLLM server on 1 node(s) of its own" in out
    nodes = [line for line in out.splitlines() if line.startswith("node ")]
    assert [f"--machine_rank {rank} " in line for rank, line in enumerate(nodes)] == [True] * 4
    assert all("--num_machines 4 --num_processes 32" in line and "--gpu_ids" not in line for line in nodes)
    script = slurm_script(out)
    assert "#SBATCH --nodes=5" in script and 'export VLLM_ADDR="${HOSTS[4]}"' in script
    assert '--machine_rank "$SLURM_NODEID"' in script and "srun --nodes=4 --ntasks=4 " in script
    (tmp_path / "job.sh").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)


def test_fsdp_and_the_single_gpu_profile(capsys):
    assert "fsdp.yaml (validated)" in dry_run(capsys, "sft", "--nodes", "2", "--set", "engine.distributed=fsdp")
    out = dry_run(capsys, "sft", "--scale", "small")
    assert "1 training process(es)" in out and "--config_file" not in out and "vllm serve" not in out


@pytest.mark.parametrize("args, needle", [
    (["math-rl"], "stage math-rl has no chapter runner yet"),
    (["grpo"], "unknown stage 'grpo'"),
    (["rlhf", "--nodes", "3"], "2048 completions per step do not split over 24 training processes"),
    (["rlhf", "--nodes", "1"], "engine.vllm=server on one node shares it"),
    (["sft", "--scale", "small", "--gpus-per-node", "2"], "engine.quantization=4bit is the single-GPU QLoRA path"),
])
def test_a_launch_that_cannot_run_is_one_error(capsys, args, needle):
    assert main(["launch", *args, "--dry-run"]) == 2
    assert needle in capsys.readouterr().err


def test_the_shipped_configs_validate_and_broken_ones_do_not(tmp_path):
    for mode in CONFIGS:
        assert validate_config(accelerate_config(mode))["distributed_type"] in ("DEEPSPEED", "FSDP")
    zero3 = accelerate_config("zero3").read_text()
    cases = {
        "typo.yaml": (zero3.replace("zero3_init_flag", "zero3_init_flgs"), "unknown deepspeed_config key(s) ['zero3_init_flgs']"),
        "stage2.yaml": (zero3.replace("zero_stage: 3", "zero_stage: 2"), "ZeRO-3"),
        "top.yaml": (zero3 + "nodes: 4\n", "unknown keys (['nodes'])"),
        "enum.yaml": (zero3.replace("distributed_type: DEEPSPEED", "distributed_type: MAGIC"), "MAGIC"),
        "ddp.yaml": (zero3.replace("distributed_type: DEEPSPEED", "distributed_type: MULTI_GPU"), "shards nothing"),
        "bad.yaml": ("[1, 2", "accelerate config"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(LaunchError, match=None) as info:
            validate_config(tmp_path / name)
        assert needle in str(info.value), name
    with pytest.raises(LaunchError, match="no accelerate config for distributed='ddp'"):
        accelerate_config("ddp")


def test_the_plan_takes_real_addresses():
    the_plan = plan(launch_profile("full", "if-rl", {"engine.nodes": 2, "engine.accumulation": 2})[0], "if-rl",
                    main_address="gpu-001", server_address="gpu-009")
    assert the_plan.env == {"CASCADEKIT_VLLM_SERVER": "gpu-009:8000"}
    assert "--main_process_ip gpu-001" in " ".join(the_plan.node_commands[1])
    # accumulation reaches the trainer through engine.accumulation, not accelerate's DeepSpeed-only flag
    assert "--gradient_accumulation_steps" not in " ".join(the_plan.node_commands[0])


def test_grpo_reads_the_launched_job(tmp_path, monkeypatch):
    """Under the launcher, GRPO splits the rollout batch over the job's processes and finds the vLLM server."""
    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    monkeypatch.setenv("WORLD_SIZE", "32")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("CASCADEKIT_VLLM_SERVER", "gpu-009:8000")
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)  # installed, as on the cluster (never started)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    cfg = grpo.build_grpo_config(load_profile("full", {"engine.nodes": 4}), str(tmp_path))
    assert cfg.per_device_train_batch_size == 1 and cfg.vllm_mode == "server"  # engine.rl_micro_batch
    assert cfg.gradient_accumulation_steps == 128 * 16 // 32
    assert cfg.vllm_server_base_url == "http://gpu-009:8000"


def test_the_slurm_script_is_written(tmp_path, capsys):
    job = tmp_path / "job.sh"
    assert main(["launch", "rlhf", "--nodes", "4", "--slurm", str(job)]) == 0
    assert job.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=cascadekit-rlhf") and "sbatch" in capsys.readouterr().out
