"""Sampling n completions per prompt, with Hugging Face ``generate`` on CPU or vLLM on GPUs.

The backend comes from the profile (``evaluation.backend``): ``hf`` batches
prompts with left padding and a KV cache through ``model.generate`` (several
prompts x ``num_return_sequences`` per call); ``vllm`` hands the whole list to
a vLLM engine. Both stop at ``</answer>`` (a single token here) or EOS and
return the completion text after the prompt, ``</answer>`` included.

Either backend takes a loaded model or a checkpoint (a folder or a hub name,
loaded through :mod:`cascadekit.runtime`). vLLM loads weights itself, so an
in-memory model is first saved to a temporary checkpoint folder
(:func:`cascadekit.runtime.save_checkpoint`, a LoRA adapter merged in) and that
folder is handed to it. vLLM is imported only when the ``vllm`` backend runs.
"""
from __future__ import annotations

import gc
import tempfile
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.profiles import EvaluationConfig
from cascadekit.runtime import Placement, checkpoint_folder, load_model, save_checkpoint
from cascadekit.tokenizer import tag_id

STOP = "</answer>"


def sample_completions(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase,
                       prompts: Sequence[str], cfg: EvaluationConfig, seed: int = 0,
                       n: int | None = None, *, placement: Placement | None = None,
                       allow_download: bool | None = None) -> list[list[str]]:
    """``n`` (default ``cfg.samples``) sampled completions for each prompt, in prompt order.

    ``model`` is a loaded model or a checkpoint (a folder or a hub name), for
    either backend. A checkpoint for the ``hf`` backend is loaded by
    :func:`cascadekit.runtime.load_model` on ``placement`` (default: the CPU in
    float32); ``allow_download`` follows :func:`cascadekit.runtime.download_allowed`.
    """
    n = n or cfg.samples
    if cfg.backend == "vllm":
        return _sample_vllm(model, tokenizer, prompts, cfg, n, seed, allow_download)
    if cfg.backend != "hf":
        raise ValueError(f"unknown sampling backend {cfg.backend!r}; choose 'hf' or 'vllm'")
    if isinstance(model, (str, Path)):
        model = load_model(model, placement, allow_download=allow_download)
    return _sample_hf(model, tokenizer, prompts, cfg, n, seed)


def _cut(text: str) -> str:
    """Keep a completion up to and including the first ``</answer>``."""
    end = text.find(STOP)
    return text if end < 0 else text[: end + len(STOP)]


def _decode(tokenizer: PreTrainedTokenizerBase, ids: torch.Tensor) -> str:
    """Decode keeping the tags (they are special tokens) but dropping EOS and padding."""
    keep = [i for i in ids.tolist() if i not in (tokenizer.eos_token_id, tokenizer.pad_token_id)]
    return _cut(tokenizer.decode(keep, skip_special_tokens=False))


@torch.inference_mode()
def _sample_hf(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
               cfg: EvaluationConfig, n: int, seed: int) -> list[list[str]]:
    """Batched ``generate``: ``max(1, batch_size // n)`` prompts per call, each sampled ``n`` times."""
    tokenizer.padding_side = "left"  # generation appends on the right, so pads go left
    model.eval()
    torch.manual_seed(seed)
    per_call = max(1, cfg.batch_size // n)
    stop_ids = [tokenizer.eos_token_id, tag_id(tokenizer, STOP)]
    out: list[list[str]] = []
    for start in tqdm(range(0, len(prompts), per_call), desc="sampling", unit="batch", leave=False):
        batch = tokenizer(list(prompts[start:start + per_call]), return_tensors="pt", padding=True).to(model.device)
        generated = model.generate(
            **batch, do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0,
            max_new_tokens=cfg.max_new_tokens, num_return_sequences=n,
            eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id, use_cache=True,
        )
        new = generated[:, batch["input_ids"].shape[1]:]
        texts = [_decode(tokenizer, row) for row in new]
        out.extend(texts[i * n:(i + 1) * n] for i in range(len(texts) // n))
    return out


def _sample_vllm(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                 cfg: EvaluationConfig, n: int, seed: int, allow_download: bool | None) -> list[list[str]]:
    """vLLM sampling from a checkpoint folder; an in-memory model is saved to a temporary one first."""
    try:
        from vllm import LLM, SamplingParams  # lazy: vLLM is a GPU extra, absent from the CPU install
    except ImportError as err:
        raise RuntimeError(
            "the profile asks for the vllm sampling backend but vllm is not installed; "
            "install the gpu extra (pip install 'cascadekit[gpu]') or set evaluation.backend=hf"
        ) from err
    params = SamplingParams(n=n, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens,
                            stop=[STOP], include_stop_str_in_output=True, skip_special_tokens=False, seed=seed)
    if isinstance(model, (str, Path)):
        return _generate_vllm(LLM, checkpoint_folder(model, allow_download=allow_download), prompts, params, seed)
    with tempfile.TemporaryDirectory(prefix="cascadekit-vllm-") as tmp:
        folder = save_checkpoint(model, tokenizer, Path(tmp) / "checkpoint", merge_lora=True)
        return _generate_vllm(LLM, folder, prompts, params, seed)


def _generate_vllm(llm_class: type, folder: Path, prompts: Sequence[str], params: object,
                   seed: int) -> list[list[str]]:
    llm = llm_class(model=str(folder), seed=seed)
    try:
        return [[_cut(c.text) for c in result.outputs] for result in llm.generate(list(prompts), params)]
    finally:
        del llm  # free the engine's GPU memory before training resumes
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
