"""Every ``launch --dry-run`` plan of the ``small`` and ``full`` profiles at 1 and 4 nodes, checked flag by flag
against the installed argument parsers (issue 34, cases 3, 5, 6 and 7), without a GPU.

The training nodes' commands are parsed by ``accelerate launch``'s own parser
(``launch_command_parser``) and merged with the accelerate config file as
``accelerate launch`` does (``_validate_launch_command``). The vLLM server's
command is checked by vLLM's ``vllm serve`` parser where vLLM is installed; where it
is not (CPU CI), against the flags recorded from vLLM 0.31.0's own parser
(``cascadekit/launch/vllm_serve_flags.json``; :func:`cascadekit.launch.server_flags`). Each node's
experiment command is parsed by the kit's own command-line parser.
"""
from __future__ import annotations

import inspect
import json
import os
import sys

import pytest
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DeepSpeedPlugin
from trl.generation.vllm_client import VLLMClient

from cascadekit import launch
from cascadekit.cli import _check_experiment, build_parser, main
from cascadekit.launch import (HEALTH_PATH, RL_STAGES, SERVER_ENVIRONMENT, STAGES, LaunchError, accelerate_config,
                               check_server as check_server_flags, launch_profile, plan, server_flags,
                               validate_config)
from cascadekit.profiles import load_profile
from cascadekit.training import grpo, reward_model, sft

LAUNCHED = [stage for stage, chapter in STAGES.items() if chapter]


def launch_overrides(scale: str, nodes: int, stage: str) -> dict:
    """The overrides a user gives to launch ``stage`` on ``nodes`` nodes: the profile's own where they can run."""
    overrides: dict = {"engine.nodes": nodes}
    if scale == "small" and nodes > 1:  # 4-bit QLoRA is the one-GPU path: across nodes the plain weights train
        overrides["engine.quantization"] = "none"
    if scale == "full" and nodes == 1 and stage in RL_STAGES:  # one node shares its GPUs with the server
        overrides["engine.vllm_gpus"] = 4
    return overrides


def check_server(profile, command: list[str]) -> None:
    assert command[:3] == ["vllm", "serve", profile.model.pretrained]
    source, known = server_flags()  # vLLM's own parser, or vLLM 0.31.0's recorded flags: never TRL's own output
    assert source.startswith("vLLM ")
    unknown = sorted({t for t in command if t.startswith("--")} - known)
    assert not unknown, unknown
    value = {t: command[i + 1] for i, t in enumerate(command) if t.startswith("--") and i + 1 < len(command)}
    tensor = int(value["--tensor-parallel-size"])
    assert value["--data-parallel-size"] == "1"  # dense models: TRL's help says data parallel above 1 errors out
    assert profile.model.heads % tensor == 0 and (profile.model.kv_heads % tensor == 0
                                                  or tensor % profile.model.kv_heads == 0)
    assert tensor <= profile.engine.gpus_per_node
    length, native = int(value["--max-model-len"]), profile.engine.native_positions
    if length > native:  # only with YaRN, stretching the native context to the length asked
        rope = json.loads(value["--hf-overrides"])["rope_parameters"]
        assert rope["rope_type"] == "yarn" and rope["original_max_position_embeddings"] == native
        assert rope["factor"] * native >= length
    assert '"backend": "nccl"' in value["--weight-transfer-config"]  # TRL's client pushes weights through it


def check_node(command: list[str], config_file) -> None:
    assert command[:2] == ["accelerate", "launch"]
    args = launch_command_parser().parse_args(command[2:])  # an unknown flag is SystemExit here
    assert args.module and args.training_script == "cascadekit" and args.training_script_args[0] == "experiment"
    experiment = build_parser().parse_args(args.training_script_args)  # the kit's own parser, as the node runs it
    assert experiment.command == "experiment" and experiment.chapter in STAGES.values()
    if config_file is not None:
        assert args.config_file == str(config_file)
        merged, _, _ = _validate_launch_command(args)  # the config file's values, as accelerate launch merges them
        if merged.use_deepspeed:
            assert merged.gradient_accumulation_steps == "auto"
        if merged.use_fsdp:
            assert str(merged.fsdp_activation_checkpointing).lower() == "false"


@pytest.mark.parametrize("scale", ["small", "full"])
@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize("stage", LAUNCHED)
def test_every_dry_run_flag_is_known_to_its_parser(scale, nodes, stage, capsys):
    overrides = launch_overrides(scale, nodes, stage)
    profile, _ = launch_profile(scale, stage, overrides)
    the_plan = plan(profile, stage)
    for command in the_plan.node_commands:
        check_node(command, the_plan.config_file)
    if the_plan.server:
        check_server(profile, the_plan.server)
        assert profile.engine.vllm == "server" and stage in RL_STAGES
    else:  # no server, no server node
        assert the_plan.server_nodes == 0 and "VLLM_ADDR" not in the_plan.slurm
    asked = f"#SBATCH --nodes={the_plan.train_nodes + the_plan.server_nodes}\n"
    assert asked in the_plan.slurm
    flags = [f"--set={k}={v}" for k, v in overrides.items()]
    assert main(["launch", stage, "--scale", scale, *flags, "--dry-run"]) == 0  # the command line agrees
    capsys.readouterr()


def test_the_health_check_is_the_path_trl_polls():
    assert f'f"{{self.base_url}}{HEALTH_PATH}"' in inspect.getsource(VLLMClient.check_server)
    the_plan = plan(launch_profile("full", "rlhf", {"engine.nodes": 4})[0], "rlhf")
    assert f':8000{HEALTH_PATH}"' in the_plan.slurm and "/health/" not in the_plan.slurm
    assert SERVER_ENVIRONMENT == {"VLLM_SERVER_DEV_MODE": "1"} and "VLLM_SERVER_DEV_MODE=1 vllm serve" in the_plan.slurm


def test_the_server_is_vllms_own_with_a_context_the_model_has():
    """Case 3: vllm serve, tensor parallel for the dense model, 32K native context, 40K only through YaRN."""
    the_plan = plan(load_profile("full", {"engine.nodes": 4}), "if-rl")
    command = " ".join(the_plan.server)
    assert command.startswith("vllm serve Qwen/Qwen3-8B-Base ") and "trl" not in the_plan.server
    assert "--tensor-parallel-size 8 --data-parallel-size 1" in command and "--max-model-len 40960" in command
    assert '"factor": 1.25, "original_max_position_embeddings": 32768' in command
    small = plan(load_profile("small", {"engine.quantization": "none", "engine.gpus_per_node": 2,
                                        "engine.vllm": "server", "engine.vllm_gpus": 1}), "rlhf")
    assert "--max-model-len 32768" in " ".join(small.server) and "--hf-overrides" not in small.server
    refused = {
        "native": ({"engine.nodes": 4, "engine.rope_scaling": "none"}, "exceeds Qwen/Qwen3-8B-Base's own context"),
        "heads": ({"engine.nodes": 1, "engine.vllm_gpus": 6}, "does not split Qwen/Qwen3-8B-Base's 32 attention"),
        "nodes": ({"engine.nodes": 4, "engine.vllm_gpus": 16}, "one tensor-parallel engine on one node"),
    }
    for name, (overrides, needle) in refused.items():
        with pytest.raises(LaunchError) as info:
            plan(load_profile("full", overrides), "rlhf")
        assert needle in str(info.value), name


def test_accumulation_reaches_every_trainer_and_deepspeed_agrees(tmp_path, monkeypatch, capsys):
    """Case 5: --accumulation becomes engine.accumulation, which the training arguments read; DeepSpeed says auto."""
    assert main(["launch", "if-rl", "--nodes", "4", "--accumulation", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "--set=engine.accumulation=4" in out and "--gradient_accumulation_steps" not in out
    assert "--set=engine.rl_micro_batch=0" in out  # --accumulation gives GRPO's split instead of the micro-batch
    profile = launch_profile("full", "if-rl", {"engine.nodes": 4, "engine.accumulation": 4})[0]
    config = grpo.build_grpo_config(profile, str(tmp_path), num_processes=32)
    assert config.gradient_accumulation_steps == 4 and config.per_device_train_batch_size == 128 * 16 // (32 * 4)
    assert sft.sft_config(profile, 1, tmp_path, 10).gradient_accumulation_steps == 4
    rm = reward_model.reward_config(profile, tmp_path)
    assert (rm.gradient_accumulation_steps, rm.per_device_train_batch_size) == (4, 256 // 4)
    # what accelerate launch gives the trainer from zero3.yaml: DeepSpeed's value is auto, filled from the Trainer's
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(plan(profile, "if-rl").node_commands[0][2:]))
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", str(args.gradient_accumulation_steps))
    assert DeepSpeedPlugin(zero_stage=3).deepspeed_config["gradient_accumulation_steps"] == "auto"
    with pytest.raises(LaunchError, match="do not split into engine.accumulation=3 micro-batches"):
        plan(launch_profile("full", "sft", {"engine.nodes": 4, "engine.accumulation": 3})[0], "sft")


def test_a_fixed_deepspeed_accumulation_or_fsdp_checkpointing_is_refused(tmp_path):
    """Cases 5 and 6 at the config: DeepSpeed's accumulation is the Trainer's; FSDP leaves checkpointing to GRPO's."""
    zero3 = accelerate_config("zero3").read_text()
    fsdp = accelerate_config("fsdp").read_text()
    (tmp_path / "ga.yaml").write_text(zero3.replace("gradient_accumulation_steps: auto", "gradient_accumulation_steps: 1"))
    (tmp_path / "ac.yaml").write_text(fsdp.replace("fsdp_activation_checkpointing: false",
                                                   "fsdp_activation_checkpointing: true"))
    with pytest.raises(LaunchError, match="gradient_accumulation_steps must be auto"):
        validate_config(tmp_path / "ga.yaml")
    with pytest.raises(LaunchError, match="fsdp_activation_checkpointing must be false"):
        validate_config(tmp_path / "ac.yaml")


def test_fsdp_and_grpo_checkpoint_activations_once(tmp_path, monkeypatch):
    """Case 6: under fsdp.yaml accelerate turns FSDP's activation checkpointing off; GRPO's own is the one on a GPU."""
    import transformers.training_args as training_args
    from cascadekit.engine import runtime

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    profile = load_profile("full", {"engine.nodes": 4, "engine.distributed": "fsdp"})
    the_plan = plan(profile, "rlhf")
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(the_plan.node_commands[0][2:]))
    assert args.use_fsdp and str(args.fsdp_activation_checkpointing).lower() == "false"
    monkeypatch.setenv("WORLD_SIZE", "32")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert grpo.build_grpo_config(profile, str(tmp_path)).gradient_checkpointing


def test_only_a_stage_that_generates_asks_for_a_server(capsys):
    """Case 7: SFT at full scale starts no server, asks for no server node and trains on every GPU; 1 node is fine."""
    assert main(["launch", "sft", "--scale", "full", "--nodes", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 training node(s), 8 training process(es)" in out and "vllm" not in out.replace("engine.vllm", "")
    assert "#SBATCH --nodes=1\n" in out and "--gpu_ids" not in out
    assert main(["launch", "sft", "--scale", "full", "--nodes", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --nodes=4\n" in out and "32 training process(es)" in out and "VLLM_ADDR" not in out
    assert "--set=engine.vllm=colocate --set=engine.vllm_gpus=0" in out  # the experiment loads the same profile
    with pytest.raises(LaunchError, match="starts no vLLM server"):
        plan(load_profile("full", {"engine.nodes": 4}), "sft")
    assert os.environ.get("VLLM_SERVER_DEV_MODE") is None


def test_the_recorded_vllm_flags_refuse_what_vllm_031_does_not_know(monkeypatch):
    """Case 3/5: without vllm the server's flags meet vLLM 0.31.0's recorded parser; a flag it lacks is refused."""
    monkeypatch.setitem(sys.modules, "vllm.entrypoints.launchers.cli_args", None)  # as on a machine without vllm
    source, known = server_flags()
    assert source == "vLLM 0.31.0's recorded flags" and len(known) > 300
    assert {"--tensor-parallel-size", "--max-model-len", "--hf-overrides", "--weight-transfer-config"} <= known
    server = plan(load_profile("full", {"engine.nodes": 4}), "if-rl").server
    check_server_flags(server)
    with pytest.raises(LaunchError, match="--num-gpus that vLLM 0.31.0's recorded flags does not know"):
        check_server_flags([*server, "--num-gpus", "8"])
    monkeypatch.setattr(launch, "_server_command", lambda profile, gpus: [*server, "--max-model-length", "1"])
    with pytest.raises(LaunchError, match="--max-model-length"):
        plan(load_profile("full", {"engine.nodes": 4}), "if-rl")


def test_a_node_command_the_kit_cannot_parse_is_refused():
    node = plan(load_profile("full", {"engine.nodes": 4}), "if-rl").node_commands[0]
    _check_experiment(node)
    with pytest.raises(LaunchError, match="not one cascadekit parses"):
        _check_experiment([*node, "--accumulation", "4"])  # a launch flag is not an experiment's
    with pytest.raises(LaunchError, match="runs 'env', not a cascadekit experiment"):
        _check_experiment([*node[:node.index("experiment")], "env"])


def vllm_derived_length(config) -> int:
    """The longest context vLLM 0.31 (and 0.33) accepts for a model config: its position keys as they are, no YaRN factor.

    (``vllm.config.model._get_and_verify_max_len``: the smallest of the keys the config has; the rope's factor
    no longer multiplies it, so ``--max-model-len`` above ``max_position_embeddings`` is refused.)
    """
    keys = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
            "max_sequence_length", "max_seq_length", "seq_len")
    return min(getattr(config, key) for key in keys if getattr(config, key, None) is not None)


def test_the_yarn_override_stretches_the_positions_vllm_checks():
    """Issue 59.1: the full server's --max-model-len 40960 must fit the config its --hf-overrides leave."""
    from transformers import Qwen3Config

    profile = load_profile("full", {"engine.nodes": 4})
    command = plan(profile, "if-rl").server
    value = {t: command[i + 1] for i, t in enumerate(command) if t.startswith("--") and i + 1 < len(command)}
    model, native = profile.model, profile.engine.native_positions
    config = Qwen3Config(num_hidden_layers=model.layers, hidden_size=model.hidden, max_position_embeddings=native,
                         rope_parameters={"rope_type": "default", "rope_theta": model.rope_theta})
    config.update(json.loads(value["--hf-overrides"]))  # how vLLM applies a dict of hf_overrides
    length = int(value["--max-model-len"])
    assert length == 40960 and vllm_derived_length(config) >= length
    rope = config.rope_parameters  # transformers' own check: the stretched positions over the native are the factor
    assert config.max_position_embeddings / rope["original_max_position_embeddings"] == rope["factor"]


def fake_cluster(tmp_path, server_exit: int | None) -> dict:
    """PATH with fake ``scontrol``, ``srun``, ``curl`` and ``sleep``: a server that dies at start with exit code
    ``server_exit`` and never answers, or (None) one that lives a moment and answers; training writes ``trained``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = "exec /bin/sleep 2" if server_exit is None else f"exit {server_exit}"
    scripts = {
        "scontrol": "echo gpu-001; echo gpu-002; echo gpu-003",
        "srun": f'case "$*" in *"vllm serve"*) {server};; *) echo trained >> {tmp_path}/trained;; esac',
        "curl": "exit 0" if server_exit is None else "exit 7",  # 7: connection refused
        "sleep": "exec /bin/sleep 0.01",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[001-003]"}


@pytest.mark.parametrize("nodes", [1, 2])  # the server on the training node's first GPUs, or on a node of its own
def test_the_slurm_script_stops_waiting_when_the_server_dies(tmp_path, nodes):
    """Issue 59.1: a server that exits at start-up ends the job with a message, before any training starts."""
    import subprocess

    profile = load_profile("full", {"engine.nodes": nodes, **({"engine.vllm_gpus": 4} if nodes == 1 else {})})
    script = tmp_path / "job.sh"
    script.write_text(plan(profile, "rlhf").slurm)
    result = subprocess.run(["bash", str(script)], env=fake_cluster(tmp_path, server_exit=3), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1 and "vLLM server exited before it answered" in result.stderr
    assert not (tmp_path / "trained").exists()
    (tmp_path / "bin").rename(tmp_path / "dead")
    healthy = subprocess.run(["bash", str(script)], env=fake_cluster(tmp_path, server_exit=None), capture_output=True,
                             text=True, timeout=120)
    assert healthy.returncode == 0 and (tmp_path / "trained").read_text() == "trained\n"
