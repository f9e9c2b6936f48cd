"""Multi-GPU and multi-node launch of a Part II stage: accelerate (ZeRO-3 or FSDP), torchrun, Slurm, vLLM server.

:func:`plan` turns a profile's ``engine`` section (:class:`cascadekit.profiles.EngineConfig`)
and a stage into a :class:`Plan`: the accelerate config (``zero3.yaml`` or
``fsdp.yaml`` beside this file), the ``accelerate launch`` command each training
node runs, the ``vllm serve`` command of the rollout server when the profile
puts vLLM on GPUs of its own and the stage generates rollouts (an RL stage), and
a Slurm batch script that starts both.

The server is vLLM's own OpenAI-compatible server, started the way TRL 1.16's
``VLLMClient`` (GRPO's ``vllm_mode="server"``) expects it: the command TRL's
deprecated ``trl vllm-serve`` would run (``trl.scripts.vllm_serve.build_command``:
the NCCL weight-transfer engine, processed logprobs, no logprob cap) with
``VLLM_SERVER_DEV_MODE=1`` in its environment (the weight-sync endpoints), and
``GET /health`` as its readiness check, the path the client polls. The kit's
models are dense, so the server is one tensor-parallel engine
(``--tensor-parallel-size`` = the server's GPUs, on one node; TRL: data
parallel above 1 errors out for dense models), and its ``--max-model-len`` is
``model.max_positions``, refused past the released model's own context
(``engine.native_positions``) unless ``engine.rope_scaling: yarn`` asks vLLM to
stretch RoPE (``--hf-overrides`` with YaRN ``rope_parameters`` and the stretched
``max_position_embeddings``, :func:`yarn_overrides`). The Slurm script waits for the
server's ``/health`` only while the server process lives.

``--accumulation N`` becomes ``engine.accumulation`` of the stage's profile
(``--set=engine.accumulation=N`` on the experiment's command line), which every
trainer's arguments read; the DeepSpeed config says ``auto`` and takes the
Trainer's value, so the two never disagree; for an RL stage it replaces the profile's
``engine.rl_micro_batch`` (set to 0 on the experiment's command line too), which would
otherwise fix GRPO's split itself. A stage that generates no rollouts
(SFT) gets no server (``engine.vllm`` server becomes ``colocate`` for it): no
extra node in the Slurm script, every GPU trains.
``cascadekit launch STAGE --dry-run`` prints them; without ``--dry-run`` it runs
the command of one node (``--machine-rank``), or writes the Slurm script to submit.

Everything is validated before anything starts, without a GPU: the accelerate
config through accelerate's own ``ClusterConfig`` (unknown keys and bad enum
values are errors) and its DeepSpeed/FSDP keys against ``accelerate launch``'s
arguments (accelerate would ignore a misspelt one); the vLLM server's options
through TRL's ``vllm-serve`` arguments (whose translation to ``vllm serve`` flags
the command is), then every flag of the finished command against vLLM's own
``vllm serve`` parser where vllm is installed, else against the recorded flags of
vLLM 0.31.0 (``vllm_serve_flags.json`` beside this file, :func:`server_flags`);
and the stage's batch against the training processes and
accumulation steps (strict on-policy GRPO needs ``prompts_per_step x group_size``
completions to split evenly over them).

Layout: with ``engine.vllm: server`` on one node the server takes the first
``vllm_gpus`` GPUs and training the rest; across nodes the server runs on
one whole node of its own (``vllm_gpus = gpus_per_node``), after the ``nodes``
that train (the Slurm script asks for both). The trainer finds the server through
``CASCADEKIT_VLLM_SERVER`` (``host:port``, read by
:func:`cascadekit.training.grpo.build_grpo_config`).

Each stage runs the chapter experiment that builds it (``cascadekit experiment NN``);
the cascade's later RL stages (Math, Code, SWE RL) have no chapter runner yet and
are refused by name. Whether every chapter's code is safe to run as many processes
was not checked on GPUs here.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cascadekit.chapters.cascade import TABLE
from cascadekit.engine.batching import split_step
from cascadekit.profiles import Profile, load_profile
from cascadekit.engine.generation import VLLM_SERVER_ENV as SERVER_ENV
from cascadekit.training.grpo import micro_batches

__all__ = ["CONFIGS", "LaunchError", "Plan", "RL_STAGES", "SERVER_ENVIRONMENT", "SERVER_FLAGS_FILE", "STAGES",
           "VLLM_PORT", "accelerate_config", "check_server", "launch_profile", "plan", "server_flags", "shell",
           "validate_config", "yarn_overrides"]

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
#: The server's environment: vLLM's dev-mode endpoints (weight transfer, world size), which TRL's client calls.
SERVER_ENVIRONMENT = {"VLLM_SERVER_DEV_MODE": "1"}
#: ``accelerate launch --mixed_precision`` of a profile's ``dtype`` (:data:`cascadekit.profiles.DTYPES`): the launch
#: and the vLLM server (``--dtype``) take the profile's, since the cards behind a launch are not this machine's; each
#: node's trainer decides by its own card (:func:`cascadekit.engine.runtime.choose_device`), and its fp16 on a
#: pre-Ampere card replaces accelerate's value.
MIXED_PRECISION = {"bfloat16": "bf16", "float32": "no"}
#: The server's readiness check, the path TRL's ``VLLMClient.check_server`` polls.
HEALTH_PATH = "/health"


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
    server: list[str] | None  # run with SERVER_ENVIRONMENT
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
            lines.append("vLLM server: " + _environment(SERVER_ENVIRONMENT) + shell(self.server))
        env = _environment(self.env)
        for rank, command in enumerate(self.node_commands):
            lines.append(f"node {rank}: {env}" + shell(command))
        return "\n".join(lines + ["", "# Slurm batch script", self.slurm])


def _environment(env: dict[str, str]) -> str:
    return "".join(f"{k}={shell([v])} " for k, v in env.items())


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
    against those arguments, and against what the kit's trainers set themselves
    (DeepSpeed's accumulation ``auto``, FSDP's activation checkpointing off).
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
    deepspeed = data.get("deepspeed_config") or {}
    if kind.endswith("DEEPSPEED") and deepspeed.get("zero_stage") != 3:
        raise LaunchError(f"accelerate config {path}: the kit's DeepSpeed config is ZeRO-3 (zero_stage: 3)")
    if kind.endswith("DEEPSPEED") and deepspeed.get("gradient_accumulation_steps", "auto") != "auto":
        raise LaunchError(f"accelerate config {path}: gradient_accumulation_steps must be auto (the Trainer's "
                          f"value, engine.accumulation); a fixed one disagrees with it and transformers refuses")
    if kind.endswith("FSDP") and str((data.get("fsdp_config") or {}).get("fsdp_activation_checkpointing")).lower() == "true":
        raise LaunchError(f"accelerate config {path}: fsdp_activation_checkpointing must be false: the kit's "
                          f"trainers checkpoint activations themselves (gradient_checkpointing) and transformers "
                          f"refuses both")
    if not (kind.endswith("DEEPSPEED") or kind.endswith("FSDP")):
        raise LaunchError(f"accelerate config {path}: distributed_type {kind} shards nothing; use DEEPSPEED or FSDP")
    return data


def yarn_overrides(length: int, native: int, rope_theta: float) -> dict[str, Any]:
    """The model-config overrides that serve ``length`` positions of a model trained on ``native`` through YaRN.

    ``max_position_embeddings`` is stretched with the RoPE: vLLM (0.31 and 0.33) derives the
    longest context it accepts from ``max_position_embeddings`` alone, no longer scaled
    by the YaRN factor, and refuses a ``--max-model-len`` above it ("User-specified
    max_model_len ... is greater than the derived max_model_len"); transformers checks
    the same ratio (``max_position_embeddings / original_max_position_embeddings`` is
    YaRN's ``factor``). Qwen's model card edits only ``rope_scaling``, which older vLLMs
    multiplied in themselves.
    """
    rope = {"rope_type": "yarn", "factor": length / native, "original_max_position_embeddings": native,
            "rope_theta": rope_theta}
    return {"max_position_embeddings": length, "rope_parameters": rope}


def _server_command(profile: Profile, gpus: int) -> list[str]:
    """``vllm serve`` of the profile's base model on ``gpus`` GPUs of one node, as TRL's client needs it.

    The options pass through TRL's ``vllm-serve`` arguments (a renamed one is an
    error here, not on the cluster) and TRL's own translation to vLLM's flags;
    only the YaRN override, which TRL does not model, is added after them.
    """
    from trl.scripts.vllm_serve import ScriptArguments, build_command, make_parser

    engine, model = profile.engine, profile.model
    if not model.pretrained:
        raise LaunchError("a vLLM server needs released weights to start from: set model.pretrained")
    if gpus > engine.gpus_per_node:
        raise LaunchError(f"the vLLM server is one tensor-parallel engine on one node (the kit's models are dense: "
                          f"TRL refuses data parallel above 1 for them): engine.vllm_gpus={gpus} is more than "
                          f"gpus_per_node ({engine.gpus_per_node})")
    if model.heads % gpus or (model.kv_heads % gpus and gpus % model.kv_heads):
        raise LaunchError(f"tensor parallel over {gpus} GPUs does not split {model.pretrained}'s {model.heads} "
                          f"attention / {model.kv_heads} key-value heads: choose engine.vllm_gpus dividing them")
    length = model.max_positions
    extra = []
    if engine.native_positions and length > engine.native_positions:
        if engine.rope_scaling != "yarn":
            raise LaunchError(f"model.max_positions={length} exceeds {model.pretrained}'s own context "
                              f"({engine.native_positions}, engine.native_positions) and vLLM refuses a longer "
                              f"--max-model-len: set engine.rope_scaling=yarn or a shorter model.max_positions")
        extra = ["--hf-overrides", json.dumps(yarn_overrides(length, engine.native_positions, model.rope_theta))]
    options = {"model": model.pretrained, "tensor_parallel_size": gpus, "data_parallel_size": 1,
               "host": "0.0.0.0", "port": VLLM_PORT, "dtype": profile.dtype, "max_model_len": length}
    try:  # TRL's own parser: a field it lacks or a value of the wrong type is an error here
        (arguments,) = make_parser().parse_dict(options)
    except (ValueError, TypeError) as err:
        raise LaunchError(f"trl vllm-serve refuses the server's options {options}: {err}") from None
    assert isinstance(arguments, ScriptArguments)
    command = build_command(arguments, extra)
    return ["vllm", *command[command.index("serve"):]]  # the command TRL itself prints as the direct equivalent


#: The recorded option strings of vLLM 0.31.0's ``vllm serve`` (the ``gpu`` extra's vLLM), for machines without vllm.
SERVER_FLAGS_FILE = "vllm_serve_flags.json"


def server_flags() -> tuple[str, set[str]]:
    """Where the known ``vllm serve`` flags come from, and the flags: vLLM's own parser where vllm is installed,
    else the flags recorded from vLLM 0.31.0's parser (:data:`SERVER_FLAGS_FILE`)."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # vLLM 0.31's place (0.33: common)
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        recorded = json.loads(resources.files("cascadekit.launch").joinpath(SERVER_FLAGS_FILE).read_text())
        return f"vLLM {recorded['vllm']}'s recorded flags", set(recorded["flags"])
    import vllm

    parser = make_arg_parser(FlexibleArgumentParser())
    return f"vLLM {vllm.__version__}'s parser", {o for action in parser._actions for o in action.option_strings}


def check_server(command: list[str]) -> None:
    """One :class:`LaunchError` naming any flag of the ``vllm serve`` command that vLLM does not know."""
    source, known = server_flags()
    unknown = sorted({token.split("=", 1)[0] for token in command if token.startswith("--")} - known)
    if unknown:
        raise LaunchError(f"the vLLM server's command has flag(s) {', '.join(unknown)} that {source} does not know")


def _check_batch(profile: Profile, stage: str, processes: int, accumulation: int) -> None:
    if stage not in RL_STAGES:  # the step's rows over the processes, then --accumulation (the card sizes the rest)
        try:
            split_step(profile.sft.batch_size, processes, profile.engine, "sft.batch_size", row=1, state=0, card=None)
        except ValueError as err:
            raise LaunchError(f"{err}: change the node count or --accumulation") from None
        return
    try:  # the trainer's own split (engine.rl_micro_batch or the accumulation), refused here rather than on the nodes
        micro_batches(profile.rl, profile.engine, processes, accumulation)
    except ValueError as err:
        raise LaunchError(f"{err}: change the node count, rl.prompts_per_step, engine.rl_micro_batch or "
                          f"--accumulation") from None


def launch_profile(scale: str, stage: str, overrides: dict[str, Any]) -> tuple[Profile, dict[str, Any]]:
    """The profile ``stage`` runs with at ``scale`` under ``overrides``, and the overrides that give it.

    Only an RL stage generates with a vLLM server. Any other stage (SFT) runs
    ``engine.vllm: server`` as ``colocate`` with no server GPUs: no server node is
    asked for, every GPU trains, and the one-node server rule (a server shares the
    node's GPUs) cannot refuse a server the stage never starts. The returned
    overrides go to the stage's experiment, so it loads the same profile.
    """
    mode = overrides.get("engine.vllm", load_profile(scale).engine.vllm)
    if stage not in RL_STAGES and mode == "server":
        overrides = {**overrides, "engine.vllm": "colocate", "engine.vllm_gpus": 0}
    if stage in RL_STAGES and overrides.get("engine.accumulation", 1) != 1 and "engine.rl_micro_batch" not in overrides:
        overrides = {**overrides, "engine.rl_micro_batch": 0}  # --accumulation gives GRPO's split instead
    return load_profile(scale, overrides), overrides


def plan(profile: Profile, stage: str, *, main_address: str = "$MAIN_ADDR", server_address: str = "$VLLM_ADDR",
         extra: list[str] | None = None) -> Plan:
    """The launch of ``stage`` at ``profile``'s scale, validated; nothing runs.

    ``profile`` is the stage's (:func:`launch_profile`); its ``engine.accumulation``
    reaches the trainer through the profile the experiment loads, ``extra`` (e.g.
    ``["--set=engine.accumulation=4"]``), which goes to the experiment's command line.
    ``main_address`` and ``server_address`` are the first training node's and the
    server's host names (the Slurm script fills the shell variables).
    """
    if stage not in STAGES:
        raise LaunchError(f"unknown stage {stage!r}; the cascade's stages are {', '.join(STAGES)}")
    chapter = STAGES[stage]
    if chapter is None:
        raise LaunchError(f"stage {stage} has no chapter runner yet (the cascade's experiments cover "
                          f"{', '.join(s for s, c in STAGES.items() if c)}); nothing to launch")
    engine = profile.engine
    if engine.vllm == "server" and stage not in RL_STAGES:
        raise LaunchError(f"stage {stage} generates no rollouts, so it starts no vLLM server: load its profile "
                          f"with launch_profile (engine.vllm=colocate for it)")
    processes = engine.training_processes
    _check_batch(profile, stage, processes, engine.accumulation)
    config_file = None
    if engine.distributed != "none":
        config_file = accelerate_config(engine.distributed)
        validate_config(config_file)
    server = None
    if engine.vllm == "server":
        server = _server_command(profile, engine.vllm_gpus)
        check_server(server)
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
                   "--main_process_port", str(MAIN_PORT), "--mixed_precision", MIXED_PRECISION[profile.dtype]]
        if server and engine.nodes == 1:  # training on the GPUs the server leaves
            launch += ["--gpu_ids", ",".join(str(g) for g in range(engine.vllm_gpus, engine.gpus_per_node))]
        commands.append(launch + experiment)
    env = {SERVER_ENV: f"{server_address}:{VLLM_PORT}"} if server else {}
    return Plan(stage, config_file, engine.nodes, processes, engine.server_nodes, server, commands, env,
                _slurm(profile, stage, server, commands[0]))


#: Seconds between two polls of the server's readiness check.
HEALTH_POLL_S = 10


def _health_wait() -> list[str]:
    """Shell lines that wait for the server started just before (``$!``) to answer, or end the job once it has died.

    A server that fails at start-up (a flag its vLLM refuses, no memory) would
    otherwise leave the job polling ``/health`` until Slurm's time limit.
    """
    dead = "cascadekit: the vLLM server exited before it answered; its error is above"
    return ["SERVER_PID=$!",
            f'until curl -sf "http://$VLLM_ADDR:{VLLM_PORT}{HEALTH_PATH}" >/dev/null; do',
            f'  kill -0 "$SERVER_PID" 2>/dev/null || {{ echo {shlex.quote(dead)} >&2; exit 1; }}',
            f"  sleep {HEALTH_POLL_S}", "done"]


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
                         f'env {_environment(SERVER_ENVIRONMENT)}CUDA_VISIBLE_DEVICES={gpus} {shell(server)} &')
        else:
            lines.append(f'srun --nodes={engine.server_nodes} --ntasks=1 --nodelist="$VLLM_ADDR" '
                         f'env {_environment(SERVER_ENVIRONMENT)}{shell(server)} &')
        lines += _health_wait()
        lines.append(f'export {SERVER_ENV}="$VLLM_ADDR:{VLLM_PORT}"')
    rank = command.index("--machine_rank") + 1
    command = [*command[:rank], "$SLURM_NODEID", *command[rank + 1:]]
    overlap = " --overlap" if server and engine.server_nodes == 0 else ""  # the shared node's step is running
    lines += [f"train() {{ exec {shell(command)}; }}", "export -f train",
              f'srun --nodes={engine.nodes} --ntasks={engine.nodes}{overlap} '
              f'--nodelist="$(IFS=,; echo "${{HOSTS[*]:0:{engine.nodes}}}")" bash -c train']
    return "\n".join(lines) + "\n"
