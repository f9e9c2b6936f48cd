"""Sampling n completions per prompt, with Hugging Face ``generate`` or the kit's loop on CPU, or vLLM on GPUs.

The caller names the backend, from the profile's ``engine.vllm`` and
``engine.evaluation_decoder`` (:func:`cascadekit.engine.generation.backend`: ``vllm``
only with CUDA and the vllm package, ``kit`` only on the CPU): ``hf`` batches prompts
with left padding and a KV cache through ``model.generate`` (several prompts x
``num_return_sequences`` per call); ``kit`` decodes the same batches with the kit's
loop (:func:`cascadekit.engine.decode.decode`, each prompt prefilled once for its
``n`` samples: the same distribution, other draws); ``vllm`` hands the whole list to
a vLLM engine (sized by the profile's ``engine`` knobs, freed when it is done). Each
stops at ``</answer>`` (a single token here) or EOS and returns the completion text
after the prompt, ``</answer>`` included.

Every backend takes a loaded model or a checkpoint (a folder or a hub name,
loaded through :mod:`cascadekit.engine.runtime`). vLLM loads weights itself, so an
in-memory model is first saved to a temporary checkpoint folder
(:func:`cascadekit.engine.runtime.save_checkpoint`, a LoRA adapter merged in) and that
folder is handed to it. vLLM is imported only when the ``vllm`` backend runs.

Nothing is sampled twice: :func:`cached_sample_completions` is a cached stage
(kind ``samples``) keyed by the model's content (:func:`model_digest` of its
weights and tokenizer, or :func:`folder_digest` of a checkpoint folder), the
prompts, the sampling settings, ``n`` and the seed; the same weights asked the
same questions read the completions back instead of generating them again.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.artifacts import MANIFEST, PROVENANCE
from cascadekit.atomic import atomic_write_json
from cascadekit.profiles import EngineConfig, EvaluationConfig
from cascadekit.stages import STAGE_FILE, Stage, run_stage
from cascadekit.engine.decode import Sampling, decode
from cascadekit.engine.generation import offline_engine
from cascadekit.engine.runtime import Placement, checkpoint_folder, load_model, require, save_checkpoint
from cascadekit.engine.tokenizer import tag_id

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

STOP = "</answer>"
#: A cached sampling stage's completions, in its folder.
COMPLETIONS_FILE = "completions.json"
#: A checkpoint folder's bookkeeping, left out of its content digest (the cache's manifest, a stage's
#: inputs and metrics, a shipped entry's provenance): the same weights from another chain are the same model.
BOOKKEEPING = frozenset({MANIFEST, STAGE_FILE, PROVENANCE})


def folder_digest(folder: str | Path) -> str | None:
    """16 hex digits of the sha256 of a checkpoint folder's files (names and bytes); None for a hub name.

    The cache's bookkeeping files (:data:`BOOKKEEPING`) are left out, so the digest is
    the weights', tokenizer's and template's content, whoever built them.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in BOOKKEEPING):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def model_digest(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> str:
    """16 hex digits of the sha256 of a loaded model's weights (names, dtypes, shapes, bytes) and its tokenizer."""
    digest = hashlib.sha256(type(model).__name__.encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    digest.update(vocab.encode() + str(tokenizer.chat_template).encode())
    return digest.hexdigest()[:16]


def cached_sample_completions(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase,
                              prompts: Sequence[str], cfg: EvaluationConfig, seed: int = 0,
                              n: int | None = None, *, placement: Placement | None = None,
                              allow_download: bool | None = None, backend: str = "hf",
                              engine: EngineConfig | None = None) -> list[list[str]]:
    """:func:`sample_completions`, itself a cached stage (kind ``samples``) keyed by the model's content.

    The key holds the model's digest (:func:`model_digest`, or :func:`folder_digest`
    of a checkpoint folder), the prompts, every sampling setting, ``n`` and ``seed``,
    the backend, and the device and precision the model runs in (sampling can differ between
    them). A hub name is not content and is sampled every time.
    """
    n = n or cfg.samples
    content = folder_digest(model) if isinstance(model, (str, Path)) else model_digest(model, tokenizer)
    if content is None:
        return sample_completions(model, tokenizer, prompts, cfg, seed, n, placement=placement,
                                  allow_download=allow_download, backend=backend, engine=engine)
    device = str(model.device) if isinstance(model, PreTrainedModel) else (placement.device if placement else "cpu")
    dtype = str(model.dtype) if isinstance(model, PreTrainedModel) else (placement.dtype if placement else "float32")
    prompts_digest = hashlib.sha256(json.dumps(list(prompts)).encode()).hexdigest()[:16]
    inputs = {"model": content, "prompts": prompts_digest, "n_prompts": len(prompts), "samples": n, "seed": seed,
              "temperature": cfg.temperature, "top_p": cfg.top_p, "max_new_tokens": cfg.max_new_tokens,
              "batch_size": cfg.batch_size, "backend": backend, "device": device, "dtype": dtype}

    def build(folder: Path) -> dict[str, int]:
        completions = sample_completions(model, tokenizer, prompts, cfg, seed, n, placement=placement,
                                         allow_download=allow_download, backend=backend, engine=engine)
        atomic_write_json(folder / COMPLETIONS_FILE, completions)
        return {"completions": sum(map(len, completions))}

    out = run_stage(Stage("samples", inputs, build, recipe=RECIPE))
    return json.loads((out.checkpoint / COMPLETIONS_FILE).read_text())


def sample_completions(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase,
                       prompts: Sequence[str], cfg: EvaluationConfig, seed: int = 0,
                       n: int | None = None, *, placement: Placement | None = None,
                       allow_download: bool | None = None, backend: str = "hf",
                       engine: EngineConfig | None = None) -> list[list[str]]:
    """``n`` (default ``cfg.samples``) sampled completions for each prompt, in prompt order.

    ``model`` is a loaded model or a checkpoint (a folder or a hub name), for
    any ``backend`` (``hf``, ``kit`` or ``vllm``; ``engine`` sizes the vLLM engine). A checkpoint for ``hf`` or ``kit`` is loaded by
    :func:`cascadekit.engine.runtime.load_model` on ``placement`` (default: the CPU in
    float32); ``allow_download`` follows :func:`cascadekit.engine.runtime.download_allowed`.
    """
    n = n or cfg.samples
    if backend == "vllm":
        return _sample_vllm(model, tokenizer, prompts, cfg, n, seed, allow_download, engine)
    if backend not in ("hf", "kit"):
        raise ValueError(f"unknown sampling backend {backend!r}; choose 'hf', 'kit' or 'vllm'")
    if isinstance(model, (str, Path)):
        model = load_model(model, placement, allow_download=allow_download)
    return (_sample_kit if backend == "kit" else _sample_hf)(model, tokenizer, prompts, cfg, n, seed)


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


def _sample_kit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                cfg: EvaluationConfig, n: int, seed: int) -> list[list[str]]:
    """:func:`_sample_hf`'s batches by the kit's decode loop: each prompt prefilled once, decoded ``n`` times."""
    sampling = Sampling(temperature=cfg.temperature, top_p=cfg.top_p)
    generator = torch.Generator().manual_seed(seed)
    per_call = max(1, cfg.batch_size // n)
    stop_ids = [tokenizer.eos_token_id, tag_id(tokenizer, STOP)]
    out: list[list[str]] = []
    for start in tqdm(range(0, len(prompts), per_call), desc="sampling", unit="batch", leave=False):
        ids = [tokenizer(p)["input_ids"] for p in prompts[start:start + per_call]]
        rows = decode(model, ids, cfg.max_new_tokens, stop_ids, sampling, pad_id=tokenizer.pad_token_id,
                      generator=generator, group=n)
        texts = [_decode(tokenizer, torch.tensor(row, dtype=torch.long)) for row in rows]
        out.extend(texts[i * n:(i + 1) * n] for i in range(len(texts) // n))
    return out


def _sample_vllm(model: PreTrainedModel | str | Path, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                 cfg: EvaluationConfig, n: int, seed: int, allow_download: bool | None,
                 engine: EngineConfig | None) -> list[list[str]]:
    """vLLM sampling from a checkpoint folder; an in-memory model is saved to a temporary one first."""
    vllm = require("vllm", "gpu", "the vllm sampling backend")
    params = vllm.SamplingParams(n=n, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_new_tokens,
                                 stop=[STOP], include_stop_str_in_output=True, skip_special_tokens=False, seed=seed)
    if isinstance(model, (str, Path)):
        return _generate_vllm(checkpoint_folder(model, allow_download=allow_download), prompts, params, seed, engine)
    with tempfile.TemporaryDirectory(prefix="cascadekit-vllm-") as tmp:
        folder = save_checkpoint(model, tokenizer, Path(tmp) / "checkpoint", merge_lora=True)
        return _generate_vllm(folder, prompts, params, seed, engine)


def _generate_vllm(folder: Path, prompts: Sequence[str], params: object, seed: int,
                   engine: EngineConfig | None) -> list[list[str]]:
    with offline_engine(folder, engine, seed=seed) as generate:  # freed before training resumes
        return [[_cut(c.text) for c in result.outputs] for result in generate(list(prompts), params)]
