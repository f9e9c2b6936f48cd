"""Multi-GPU and multi-node launch of a Part II stage: accelerate (ZeRO-3 or FSDP), torchrun, Slurm, vLLM server.

:func:`plan` turns a profile's ``engine`` section (:class:`cascadekit.profiles.EngineConfig`)
and a stage into a :class:`Plan`: the accelerate config (``zero3.yaml`` or
``fsdp.yaml`` beside this file), the ``accelerate launch`` command each training
node runs, the ``trl vllm-serve`` command of the rollout server when the profile
puts vLLM on GPUs of its own, and a Slurm batch script that starts both.
``cascadekit launch STAGE --dry-run`` prints them; without ``--dry-run`` it runs
the command of one node (``--machine-rank``), or writes the Slurm script to submit.

Everything is validated before anything starts, without a GPU: the accelerate
config through accelerate's own ``ClusterConfig`` (unknown keys and bad enum
values are errors) and its DeepSpeed/FSDP keys against ``accelerate launch``'s
arguments (accelerate would ignore a misspelt one); the vLLM server's options
against TRL's ``vllm-serve`` arguments; and the stage's rollout batch against the
training processes (strict on-policy GRPO needs ``prompts_per_step x group_size``
completions to split evenly over them).

Layout: with ``engine.vllm: server`` on one node the server takes the first
``vllm_gpus`` GPUs and training the rest; across nodes the server runs on
``vllm_gpus / gpus_per_node`` whole nodes of its own, after the ``nodes`` that
train (the Slurm script asks for both). The trainer finds the server through
``CASCADEKIT_VLLM_SERVER`` (``host:port``, read by
:func:`cascadekit.training.grpo.build_grpo_config`).

Each stage runs the chapter experiment that builds it (``cascadekit experiment NN``);
the cascade's later RL stages (Math, Code, SWE RL) have no chapter runner yet and
are refused by name. Whether every chapter's code is safe to run as many processes
was not checked on GPUs here.
"""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cascadekit.chapters.cascade import TABLE
from cascadekit.profiles import Profile
from cascadekit.training.grpo import VLLM_SERVER_ENV as SERVER_ENV

__all__ = ["CONFIGS", "LaunchError", "Plan", "STAGES", "VLLM_PORT", "accelerate_config", "plan", "shell",
           "validate_config"]

#: The accelerate config of each ``engine.distributed`` mode that shards (``none`` launches plain DDP).
CONFIGS = {"zero3": "zero3.yaml", "fsdp": "fsdp.yaml"}
#: The chapters whose experiment a launch runs (the later RL stages' chapters are not launched yet).
LAUNCHED = ("08", "09", "10")
#: The Part II stages by their command-line name (``if-rl``), and the chapter experiment that builds each
#: (None: no runner yet).
STAGES: dict[str, str | None] = {spec.slug: spec.chapter if spec.chapter in LAUNCHED else None for spec in TABLE}
#: Stages that train with GRPO and so need rollouts (vLLM) and an evenly split rollout batch.
RL_STAGES = tuple(spec.slug for spec in TABLE if spec.after)
VLLM_PORT = 8000
MAIN_PORT = 29500


class LaunchError(ValueError):
    """A launch that cannot run as asked: unknown stage, bad config, a batch that does not split."""


@dataclass(frozen=True)
class Plan:
    """What a launch runs: per training node the ``accelerate launch`` command, the vLLM server's, Slurm's script."""

    stage: str
    config_file: Path | None
    train_nodes: int
    processes: int
    server_nodes: int
    server: list[str] | None
    node_commands: list[list[str]]
    env: dict[str, str]
    slurm: str

    def describe(self) -> str:
        """The plan as a reader checks it: layout, then every command, then the Slurm script."""
        lines = [f"stage {self.stage}: {self.train_nodes} training node(s), {self.processes} training process(es)"
                 + (f", vLLM server on {self.server_nodes} node(s) of its own" if self.server_nodes else "")]
        if self.config_file:
            lines.append(f"accelerate config: {self.config_file} (validated)")
        if self.server:
            lines.append("vLLM server: " + shell(self.server))
        env = "".join(f"{k}={shell([v])} " for k, v in self.env.items())
        for rank, command in enumerate(self.node_commands):
            lines.append(f"node {rank}: {env}" + shell(command))
        return "\n".join(lines + ["", "# Slurm batch script", self.slurm])


def shell(tokens: list[str]) -> str:
    """``tokens`` as one shell line: each quoted, except ``$VARIABLE`` references, kept expandable in double quotes."""
    return " ".join(f'"{t}"' if t.startswith("$") and t[1:].replace("_", "").isalnum()
                    else shell_quote(t) for t in tokens)


def shell_quote(token: str) -> str:
    if ":" in token and token.split(":", 1)[0].startswith("$"):  # "$HOST:port"
        return f'"{token}"'
    return shlex.quote(token)


def accelerate_config(distributed: str) -> Path:
    """The shipped accelerate config file of ``distributed`` (``zero3`` or ``fsdp``)."""
    if distributed not in CONFIGS:
        raise LaunchError(f"no accelerate config for distributed={distributed!r}; choose one of {', '.join(CONFIGS)}")
    return Path(str(resources.files("cascadekit.launch").joinpath(CONFIGS[distributed])))


def _launch_arguments() -> set[str]:
    from accelerate.commands.launch import launch_command_parser

    return {action.dest for action in launch_command_parser()._actions}


def validate_config(path: str | Path) -> dict[str, Any]:
    """The accelerate config at ``path`` as a dict, or one :class:`LaunchError` saying what is wrong with it.

    accelerate's ``ClusterConfig`` refuses unknown top-level keys and bad enum
    values; the nested DeepSpeed and FSDP sections, which accelerate merges into
    its launch arguments and would silently drop when misspelt, are checked here
    against those arguments.
    """
    from accelerate.commands.config.config_args import ClusterConfig

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
        config = ClusterConfig.from_yaml_file(str(path))
    except (OSError, yaml.YAMLError, ValueError, TypeError) as err:
        raise LaunchError(f"accelerate config {path}: {err}") from None
    if not isinstance(data, dict):
        raise LaunchError(f"accelerate config {path}: not a mapping")
    known = _launch_arguments()
    for section in ("deepspeed_config", "fsdp_config"):
        unknown = sorted(set(data.get(section) or {}) - known)
        if unknown:
            raise LaunchError(f"accelerate config {path}: unknown {section} key(s) {unknown}")
    kind = str(config.distributed_type)
    if kind.endswith("DEEPSPEED") and (data.get("deepspeed_config") or {}).get("zero_stage") != 3:
        raise LaunchError(f"accelerate config {path}: the kit's DeepSpeed config is ZeRO-3 (zero_stage: 3)")
    if not (kind.endswith("DEEPSPEED") or kind.endswith("FSDP")):
        raise LaunchError(f"accelerate config {path}: distributed_type {kind} shards nothing; use DEEPSPEED or FSDP")
    return data


def _server_command(profile: Profile, gpus: int) -> list[str]:
    """TRL's ``vllm-serve`` on ``gpus`` GPUs: data parallel (one engine per GPU), the profile's base model."""
    from trl.scripts.vllm_serve import ScriptArguments

    options = {"model": profile.model.pretrained, "data_parallel_size": gpus, "tensor_parallel_size": 1,
               "host": "0.0.0.0", "port": VLLM_PORT, "dtype": "bfloat16",
               "max_model_len": profile.model.max_positions}
    fields = {f.name for f in dataclasses.fields(ScriptArguments)}
    unknown = sorted(set(options) - fields)
    if unknown:  # a TRL release that renamed an option
        raise LaunchError(f"trl vllm-serve has no option(s) {unknown}")
    if not options["model"]:
        raise LaunchError("a vLLM server needs released weights to start from: set model.pretrained")
    command = ["trl", "vllm-serve"]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return command


def _check_batch(profile: Profile, stage: str, processes: int, accumulation: int) -> None:
    if stage not in RL_STAGES:
        return
    completions = profile.rl.prompts_per_step * profile.rl.group_size
    if completions % (processes * accumulation):
        raise LaunchError(f"{profile.rl.prompts_per_step} prompts x {profile.rl.group_size} rollouts = {completions} "
                          f"completions per step do not split over {processes} training processes x {accumulation} "
                          f"accumulation steps: change the node count, rl.prompts_per_step or --accumulation")


def plan(profile: Profile, stage: str, *, accumulation: int = 1, main_address: str = "$MAIN_ADDR",
         server_address: str = "$VLLM_ADDR", extra: list[str] | None = None) -> Plan:
    """The launch of ``stage`` at ``profile``'s scale, validated; nothing runs.

    ``main_address`` and ``server_address`` are the first training node's and the
    server's host names (the Slurm script fills the shell variables); ``extra``
    goes to the experiment's command line (e.g. ``["--set", "rl.lr=1e-6"]``).
    """
    if stage not in STAGES:
        raise LaunchError(f"unknown stage {stage!r}; the cascade's stages are {', '.join(STAGES)}")
    chapter = STAGES[stage]
    if chapter is None:
        raise LaunchError(f"stage {stage} has no chapter runner yet (the cascade's experiments cover "
                          f"{', '.join(s for s, c in STAGES.items() if c)}); nothing to launch")
    if accumulation < 1:
        raise LaunchError(f"--accumulation must be at least 1, got {accumulation}")
    engine = profile.engine
    processes = engine.training_processes
    _check_batch(profile, stage, processes, accumulation)
    config_file = None
    if engine.distributed != "none":
        config_file = accelerate_config(engine.distributed)
        validate_config(config_file)
    server = None
    if engine.vllm == "server" and stage in RL_STAGES:
        server = _server_command(profile, engine.vllm_gpus)
    experiment = ["-m", "cascadekit", "experiment", chapter, "--scale", profile.name, *(extra or [])]
    commands = []
    for rank in range(engine.nodes):
        launch = ["accelerate", "launch"]
        if config_file:
            launch += ["--config_file", str(config_file)]
        elif processes > 1:
            launch += ["--multi_gpu"]
        launch += ["--num_machines", str(engine.nodes), "--num_processes", str(processes),
                   "--machine_rank", str(rank), "--main_process_ip", main_address,
                   "--main_process_port", str(MAIN_PORT), "--mixed_precision", "bf16"]
        if accumulation > 1:
            launch += ["--gradient_accumulation_steps", str(accumulation)]
        if server and engine.nodes == 1:  # training on the GPUs the server leaves
            launch += ["--gpu_ids", ",".join(str(g) for g in range(engine.vllm_gpus, engine.gpus_per_node))]
        commands.append(launch + experiment)
    env = {SERVER_ENV: f"{server_address}:{VLLM_PORT}"} if server else {}
    return Plan(stage, config_file, engine.nodes, processes, engine.server_nodes, server, commands, env,
                _slurm(profile, stage, server, commands[0]))


def _slurm(profile: Profile, stage: str, server: list[str] | None, command: list[str]) -> str:
    """A batch script: the server first (on its own nodes, or the shared node's first GPUs), then every training node.

    Each training task runs the first node's command with its own ``$SLURM_NODEID``
    as the machine rank; the first training node is the main process.
    """
    engine = profile.engine
    total = engine.nodes + engine.server_nodes
    lines = ["#!/bin/bash", f"#SBATCH --job-name=cascadekit-{stage}", f"#SBATCH --nodes={total}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={engine.gpus_per_node}", "#SBATCH --exclusive",
             "set -euo pipefail", 'mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
             'export MAIN_ADDR="${HOSTS[0]}"']
    if server:
        shared = engine.server_nodes == 0
        lines.append('export VLLM_ADDR="${HOSTS[0]}"' if shared else f'export VLLM_ADDR="${{HOSTS[{engine.nodes}]}}"')
        if shared:
            gpus = ",".join(str(g) for g in range(engine.vllm_gpus))
            lines.append(f'srun --nodes=1 --ntasks=1 --overlap --nodelist="$VLLM_ADDR" '
                         f'env CUDA_VISIBLE_DEVICES={gpus} {shell(server)} &')
        else:
            lines.append(f'srun --nodes={engine.server_nodes} --ntasks=1 --nodelist="$VLLM_ADDR" {shell(server)} &')
        lines.append(f'until curl -sf "http://$VLLM_ADDR:{VLLM_PORT}/health/" >/dev/null; do sleep 10; done')
        lines.append(f'export {SERVER_ENV}="$VLLM_ADDR:{VLLM_PORT}"')
    rank = command.index("--machine_rank") + 1
    command = [*command[:rank], "$SLURM_NODEID", *command[rank + 1:]]
    overlap = " --overlap" if server and engine.server_nodes == 0 else ""  # the shared node's step is running
    lines += [f"train() {{ exec {shell(command)}; }}", "export -f train",
              f'srun --nodes={engine.nodes} --ntasks={engine.nodes}{overlap} '
              f'--nodelist="$(IFS=,; echo "${{HOSTS[*]:0:{engine.nodes}}}")" bash -c train']
    return "\n".join(lines) + "\n"
