"""Sampling n completions per prompt, with Hugging Face ``generate`` on CPU or vLLM on GPUs.

The backend comes from the profile (``evaluation.backend``): ``hf`` batches
prompts with left padding and a KV cache through ``model.generate`` (several
prompts x ``num_return_sequences`` per call); ``vllm`` hands the whole list to
a vLLM engine. Both stop at ``</answer>`` (a single token here) or EOS and
return the completion text after the prompt, ``</answer>`` included.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.profiles import EvaluationConfig
from cascadekit.tokenizer import tag_id

STOP = "</answer>"


def sample_completions(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase,
                       prompts: Sequence[str], cfg: EvaluationConfig, seed: int = 0,
                       n: int | None = None) -> list[list[str]]:
    """``n`` (default ``cfg.samples``) sampled completions for each prompt, in prompt order.

    ``model`` is a loaded model for the ``hf`` backend, or a checkpoint folder
    (either backend; vLLM needs a folder).
    """
    n = n or cfg.samples
    if cfg.backend == "vllm":
        return _sample_vllm(model, prompts, cfg, n, seed)
    if cfg.backend != "hf":
        raise ValueError(f"unknown sampling backend {cfg.backend!r}; choose 'hf' or 'vllm'")
    if isinstance(model, (str, Path)):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(model))
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


def _sample_vllm(model: PreTrainedModel | str | Path, prompts: Sequence[str], cfg: EvaluationConfig,
                 n: int, seed: int) -> list[list[str]]:
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise RuntimeError(
            "the profile asks for the vllm sampling backend but vllm is not installed; "
            "install the gpu extra (pip install 'cascadekit[gpu]') or set evaluation.backend=hf"
        ) from err
    if not isinstance(model, (str, Path)):
        raise TypeError("the vllm backend loads the model itself: pass a checkpoint folder, not a model object")
    llm = LLM(model=str(model), seed=seed)
    params = SamplingParams(n=n, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens,
                            stop=[STOP], include_stop_str_in_output=True, skip_special_tokens=False, seed=seed)
    return [[_cut(c.text) for c in result.outputs] for result in llm.generate(list(prompts), params)]
