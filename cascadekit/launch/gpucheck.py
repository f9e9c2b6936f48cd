"""``cascadekit gpucheck``: every GPU path of the kit, run once on random weights of a real shape.

The model is Qwen3-0.6B's shape (28 layers, hidden 1024, 16 query and 8 key-value
heads of 128, vocabulary 151,936, tied embeddings) with random weights, so
nothing is downloaded. Each row ends ``ok``, ``skipped (why)`` or ``failed (why)``:

* **matmul peak**: the best bf16 throughput of large square matmuls, measured in
  this run, beside the GPU's datasheet bf16 dense peak when it is a known one
  (:data:`DATASHEET_PEAKS`).
* **bf16 train step**: full fine-tuning steps (AdamW, gradient checkpointing off),
  achieved TFLOP/s and MFU against the datasheet peak (a known GPU only) and
  against the measured matmul peak (what this GPU reaches here). FLOPs per token are
  ``6 N + 12 L s d`` (N: every matmul weight, the tied LM head included; L layers,
  s sequence length, d = heads x head dim; causal masking not discounted).
* **LoRA step**, **4-bit QLoRA step**, **Unsloth LoRA step**: the paths of
  :func:`cascadekit.engine.trainable.load_trainable`, each a few optimizer steps.
* **small SFT stage**: the ``small`` profile's first SFT stage through the kit's
  stages (:func:`check_sft_stage`: QLoRA, a cache entry keyed and verified), on the
  kit's world data instead of the released set, so nothing is downloaded.
* **GRPO step**: one step of the kit's strict on-policy GRPO trainer (TRL),
  generation by transformers; **GRPO + colocated vLLM**: the same step with the
  rollouts from vLLM inside the training process (the ``small`` profile's memory
  share, context and sleep mode).
* **vLLM generation**: throughput of vLLM sampling the saved checkpoint.
* **two-process step**: two ranks under ``torchrun`` (NCCL, one GPU each, each its
  own batch) take optimizer steps and must end with equal weights; skipped with
  fewer than two GPUs.
* **ZeRO-3 save + reload**: a DeepSpeed ZeRO-3 step, the kit's checkpoint save
  (gathered, written by the main process), and a reload equal to the trained weights.

The last two run in processes of their own (:mod:`cascadekit.launch.gpucheck_workers`):
each joins a process group, which the other rows must not inherit.

The GRPO and vLLM rows decode what they sample, so their copy of the model has
its embedding cut to the check's small tokenizer (everything else is the 0.6B shape).

Without a CUDA device every row is skipped and the exit status is 0 (CI runs it so);
with one, the exit status is 1 when any row failed. The whole check is sized to
finish in a few minutes on one H100 or H200.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["DATASHEET_PEAKS", "Row", "datasheet_peak", "main", "mfu_text", "qwen3_0_6b_config", "run_checks",
           "train_flops_per_token"]

SEQ_LEN = 2048
BATCH = 8
DEVICE = "cuda"  # every check runs here (a module constant, so the checks' code can be dry-run on a CPU)
WORKER_TIMEOUT_S = 300  # a row in a process of its own that runs longer has hung (each takes well under a minute)

#: bf16 dense tensor-core peaks from NVIDIA's datasheets, in TFLOP/s (without sparsity), by a pattern of the
#: name torch reports (``torch.cuda.get_device_name``) and the GPU's label; the first match wins.
DATASHEET_PEAKS: tuple[tuple[str, str, float], ...] = (
    (r"H200", "H200", 989.0),
    (r"H100.*PCIe", "H100 PCIe", 756.0),
    (r"H100.*(SXM|HBM3)", "H100 SXM", 989.0),
    (r"A100", "A100", 312.0),
    (r"L40S", "L40S", 362.0),
)


@dataclass(frozen=True)
class Row:
    """One check: ``status`` is ``ok``, ``skipped`` or ``failed``; ``detail`` the numbers or the reason."""

    name: str
    status: str
    detail: str

    def __str__(self) -> str:
        status = self.status if self.status == "ok" else f"{self.status} ({self.detail})"
        detail = self.detail if self.status == "ok" else ""
        return f"{self.name:<22} {status:<10} {detail}".rstrip()


def qwen3_0_6b_config() -> Any:
    """Qwen3-0.6B-Base's architecture as a transformers config (its published shape, random weights)."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
                       rope_theta=1000000.0, tie_word_embeddings=True, use_cache=False)


def train_flops_per_token(config: Any, seq_len: int) -> int:
    """``6 N + 12 L s d``: matmul weights (LM head included) forward and backward, plus attention scores."""
    h, heads, kv, hd, layers = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                                config.head_dim, config.num_hidden_layers)
    attention = h * heads * hd * 2 + h * kv * hd * 2  # q and o, k and v projections
    mlp = 3 * h * config.intermediate_size
    weights = layers * (attention + mlp) + h * config.vocab_size
    return 6 * weights + 12 * layers * seq_len * heads * hd


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def matmul_peak(size: int = 8192, repeats: int = 20) -> float:
    """The best measured bf16 matmul throughput in TFLOP/s (square ``size`` matrices)."""
    a = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = math.inf
    for _ in range(repeats):
        _sync()
        start = time.perf_counter()
        a @ b
        _sync()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e12


def _model(dtype: torch.dtype = torch.bfloat16) -> Any:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(qwen3_0_6b_config()).to(device=DEVICE, dtype=dtype)


def _steps(model: Any, steps: int, batch: int = BATCH, seq_len: int = SEQ_LEN) -> float:
    """Seconds per optimizer step (after one warm-up step) on random tokens."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq_len), device=DEVICE)
    times = []
    for _ in range(steps + 1):
        _sync()
        start = time.perf_counter()
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync()
        times.append(time.perf_counter() - start)
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"loss is {loss.item()}")
    return sum(times[1:]) / steps


def datasheet_peak(device_name: str) -> tuple[str, float] | None:
    """The GPU's label and datasheet bf16 dense peak (TFLOP/s), or None for a GPU not in :data:`DATASHEET_PEAKS`."""
    for pattern, label, peak in DATASHEET_PEAKS:
        if re.search(pattern, device_name):
            return label, peak
    return None


def mfu_text(achieved: float, measured: float | None, device_name: str) -> str:
    """MFU of ``achieved`` TFLOP/s against the datasheet peak (a known GPU) and the ``measured`` matmul peak."""
    parts = []
    if (known := datasheet_peak(device_name)) is not None:
        label, peak = known
        parts.append(f"MFU {achieved / peak:.0%} of the datasheet peak ({label}, {peak:.0f} TFLOP/s)")
    else:
        parts.append(f"no datasheet peak for {device_name!r}")
    parts.append(f"{achieved / measured:.0%} of the measured matmul peak" if measured else
                 "no measured MFU: the matmul peak failed")
    return ", ".join(parts)


def check_train(peak: float | None, device_name: str) -> str:
    """Full bf16 fine-tuning steps; MFU against the datasheet peak and the measured ``peak`` (None: it failed)."""
    model = _model()
    seconds = _steps(model, steps=5)
    tokens = BATCH * SEQ_LEN
    achieved = train_flops_per_token(model.config, SEQ_LEN) * tokens / seconds / 1e12
    return (f"{tokens / seconds:,.0f} tokens/s, {achieved:.0f} TFLOP/s, {mfu_text(achieved, peak, device_name)} "
            f"({BATCH}x{SEQ_LEN} tokens, {seconds:.2f} s/step)")


def _saved_model(folder: Path, full_vocabulary: bool = True) -> Path:
    """The random 0.6B-shaped model and a small byte-level tokenizer, saved as a checkpoint folder.

    Rows that decode what they generate (GRPO, vLLM) take ``full_vocabulary=False``:
    the embedding cut to the small tokenizer's vocabulary, so no sampled id lies
    outside it; the training rows keep the real 151,936-entry embedding and head.
    """
    from transformers import Qwen3ForCausalLM

    from cascadekit.chat import install_chat_template
    from cascadekit.engine.runtime import save_checkpoint
    from cascadekit.engine.tokenizer import train_tokenizer

    if not (folder / "config.json").exists():
        tokenizer = install_chat_template(train_tokenizer(["what is 12 plus 30 ? the answer is 42 ."] * 50, 300))
        if full_vocabulary:
            model = _model()
        else:
            config = qwen3_0_6b_config()
            config.vocab_size = len(tokenizer)
            torch.manual_seed(0)
            model = Qwen3ForCausalLM(config).to(device=DEVICE, dtype=torch.bfloat16)
        save_checkpoint(model, tokenizer, folder)  # a kill mid-save leaves no half model for --work to reuse
    return folder


def check_adapter(folder: Path, quantization: str, unsloth: bool) -> str:
    from types import SimpleNamespace

    from cascadekit.engine.trainable import load_trainable

    engine = SimpleNamespace(quantization=quantization, unsloth=unsloth)
    model, note = load_trainable(_saved_model(folder), _placement(), engine, lora=True, max_seq_length=SEQ_LEN)
    if unsloth and note.path != "unsloth":
        raise RuntimeError(f"Unsloth is installed but the loader took the {note}")
    seconds = _steps(model, steps=3)
    memory = torch.cuda.max_memory_allocated() / 2**30
    return f"{note.path}: {BATCH * SEQ_LEN / seconds:,.0f} tokens/s, peak memory {memory:.1f} GiB"


def check_grpo(folder: Path, work: Path, vllm: str = "none") -> str:
    """One GRPO step; ``vllm`` ``colocate`` samples the rollouts with vLLM in this process (the ``small`` knobs)."""
    from datasets import Dataset

    from cascadekit.profiles import load_profile
    from cascadekit.engine.runtime import load_model, load_tokenizer
    from cascadekit.training.grpo import build_grpo_config, make_grpo_trainer

    profile = load_profile("small", {"engine.vllm": vllm, "engine.vllm_max_length": 1024, "engine.rl_micro_batch": 0,
                                     "rl.prompts_per_step": 4, "rl.group_size": 8, "rl.max_completion_length": 128,
                                     "rl.use_lora": False})
    tokenizer = load_tokenizer(_saved_model(folder, full_vocabulary=False))
    model = load_model(folder, _placement())
    prompts = Dataset.from_dict({"prompt": [f"what is {i} plus {i} ?" for i in range(4)]})

    def length_reward(completions: list[str], **_: Any) -> list[float]:
        return [len(c) / 100 for c in completions]

    config = build_grpo_config(profile, str(work), max_steps=1, disable_tqdm=True, num_processes=1)
    if vllm != "none" and not config.use_vllm:
        raise RuntimeError(f"engine.vllm={vllm} fell back to transformers' generation")
    trainer = make_grpo_trainer(model, tokenizer, prompts, length_reward, config)
    start = time.perf_counter()
    trainer.train()
    by = f", rollouts by {vllm} vLLM" if config.use_vllm else ""
    return f"1 step of 4 prompts x 8 completions (128 tokens) in {time.perf_counter() - start:.1f} s{by}"


#: The ``small`` profile's first SFT stage as the check runs it: the kit's world data (nothing to download), a
#: short stage, Unsloth off (it patches transformers when imported, so only the last row may import it).
SMALL_SFT = {"engine.data": "world", "engine.unsloth": False, "sft.stage1_tasks": 16, "sft.stage1_seq_len": 512,
             "sft.batch_size": 8}


def check_sft_stage(folder: Path, work: Path, overrides: dict[str, Any] | None = None) -> str:
    """The ``small`` profile's first SFT stage through the kit's stages on the random weights (``model.pretrained``).

    What a one-GPU user's first stage runs: the base resolved from the pretrained
    folder, 4-bit QLoRA, the stage's cache entry written, keyed and verified, in a
    cache of the check's own (``work``). ``overrides`` go on top of :data:`SMALL_SFT`.
    """
    from cascadekit import artifacts
    from cascadekit.profiles import load_profile
    from cascadekit.training.chat_base import chat_base
    from cascadekit.training.sft import sft_stage

    profile = load_profile("small", {**SMALL_SFT, "model.pretrained": str(_saved_model(folder, full_vocabulary=False)),
                                     **(overrides or {})})
    previous = os.environ.get("CASCADEKIT_CACHE")
    os.environ["CASCADEKIT_CACHE"] = str(work / "cache")
    try:
        start = time.perf_counter()
        out = sft_stage(chat_base(profile), profile, 1)
        artifacts.verify(out.checkpoint, "sft", out.key)
    finally:
        if previous is None:
            del os.environ["CASCADEKIT_CACHE"]
        else:
            os.environ["CASCADEKIT_CACHE"] = previous
    path = out.metrics.get("trainable", "full fine-tuning")
    return (f"sft/{out.key}: {out.metrics['steps']} steps of {out.metrics['records']} records in "
            f"{time.perf_counter() - start:.1f} s ({path})")


def check_in_process(command: list[str]) -> str:
    """Run a worker command (:mod:`cascadekit.launch.gpucheck_workers`): its last line of stdout, or the error."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"did not finish in {WORKER_TIMEOUT_S} s (hung?)") from None
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        errors = [line for line in done.stderr.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(f"exit {done.returncode}: {(errors or ['no error line'])[-1][:160]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else "finished, but printed no result"


def worker_command(what: str, work: Path, processes: int = 1) -> list[str]:
    """The command of one worker row: ``torchrun`` of ``processes`` ranks, or one plain process."""
    module = ["-m", "cascadekit", "gpucheck", "--worker", what, str(work)]
    if processes == 1:
        return [sys.executable, *module]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc_per_node", str(processes), *module]


def needs_gpus(n: int) -> str:
    """Why a row that needs ``n`` GPUs is skipped here ("" when there are enough)."""
    found = torch.cuda.device_count()
    return f"needs {n} GPUs, found {found}" if found < n else ""


def check_vllm(folder: Path) -> str:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(_saved_model(folder, full_vocabulary=False)), dtype=_placement().dtype, gpu_memory_utilization=0.4, seed=0,
              max_model_len=1024, enforce_eager=True)
    params = SamplingParams(temperature=1.0, max_tokens=256, ignore_eos=True)
    start = time.perf_counter()
    outputs = llm.generate([f"what is {i} plus {i} ?" for i in range(128)], params)
    seconds = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return f"{tokens:,} tokens in {seconds:.1f} s ({tokens / seconds:,.0f} tokens/s, 128 prompts)"


def _placement() -> Any:
    """The card's own dtype (:func:`cascadekit.engine.runtime.choose_device`: fp16 below compute capability 8.0), as
    the kit's runs take it, so a T4's rows run what a run on it would."""
    from cascadekit.engine.runtime import choose_device

    return choose_device()


def _missing(*modules: str) -> str:
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed" if absent else ""


def _row(name: str, check: Callable[[], str], needs: tuple[str, ...] = (), gpus: int = 1) -> Row:
    if why := _missing(*needs) or needs_gpus(gpus):
        return Row(name, "skipped", why)
    try:
        return Row(name, "ok", check())
    except Exception as err:  # a failed check is a row, not the end of the run
        traceback.print_exc(file=sys.stderr)
        return Row(name, "failed", f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}")
    finally:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


NAMES = ("matmul peak", "bf16 train step", "LoRA step", "4-bit QLoRA step", "small SFT stage", "GRPO step",
         "vLLM generation", "GRPO + colocated vLLM", "two-process step", "ZeRO-3 save + reload", "Unsloth LoRA step")


def run_checks(work: Path) -> list[Row]:
    """Every row; without a CUDA device, every row skipped with that reason.

    Unsloth patches transformers when imported, so its row runs last.
    """
    if not torch.cuda.is_available():
        return [Row(name, "skipped", "no CUDA device") for name in NAMES]
    folder = work / "qwen3-0.6b-random"
    peak: list[float] = []

    device_name = torch.cuda.get_device_name(0)

    def measure_peak() -> str:
        peak.append(matmul_peak())
        known = datasheet_peak(device_name)
        sheet = f", datasheet {known[1]:.0f} ({known[0]})" if known else ", no datasheet peak known"
        return f"{peak[0]:.0f} TFLOP/s bf16 measured{sheet} ({device_name})"

    rows = [_row("matmul peak", measure_peak)]
    rows.append(_row("bf16 train step", lambda: check_train(peak[0] if peak else None, device_name)))
    rows.append(_row("LoRA step", lambda: check_adapter(folder, "none", False)))
    rows.append(_row("4-bit QLoRA step", lambda: check_adapter(folder, "4bit", False), ("bitsandbytes",)))
    small_vocabulary = work / "qwen3-0.6b-random-small-vocabulary"
    rows.append(_row("small SFT stage", lambda: check_sft_stage(small_vocabulary, work / "sft"), ("bitsandbytes", "trl")))
    rows.append(_row("GRPO step", lambda: check_grpo(small_vocabulary, work / "grpo"), ("trl",)))
    rows.append(_row("vLLM generation", lambda: check_vllm(small_vocabulary), ("vllm",)))
    rows.append(_row("GRPO + colocated vLLM", lambda: check_grpo(small_vocabulary, work / "grpo-vllm", "colocate"),
                     ("trl", "vllm")))
    rows.append(_row("two-process step", lambda: check_in_process(worker_command("ddp", work, processes=2)), gpus=2))
    rows.append(_row("ZeRO-3 save + reload", lambda: check_in_process(worker_command("zero3", work)), ("deepspeed",)))
    rows.append(_row("Unsloth LoRA step", lambda: check_adapter(folder, "none", True), ("unsloth",)))
    return rows


def main(argv: list[str] | None = None,
         parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser) -> int:
    """Run every check; ``parser_class`` is the command line's own (one-line errors) under ``cascadekit gpucheck``."""
    parser = parser_class(prog="cascadekit gpucheck", description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="", help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cascadekit-gpucheck-") as scratch:
        rows = run_checks(Path(args.work) if args.work else Path(scratch))
    for row in rows:
        print(row)
    print(f"{'total':<22} {time.perf_counter() - started:.0f} s")
    return 1 if any(r.status == "failed" for r in rows) else 0
