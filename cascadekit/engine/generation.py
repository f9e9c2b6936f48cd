"""Who generates text: vLLM or transformers, decided by the profile's ``engine.vllm`` alone.

Every place that generates asks here: GRPO's rollouts (:func:`grpo_arguments`, TRL's
``use_vllm``/``vllm_mode`` and the colocated engine's memory knobs), Part I's sampling
(:func:`backend`), the stage tables and ``evaluate-checkpoints`` (:func:`greedy_generator`).
On the CPU, ``engine.evaluation_decoder: kit`` has the stage tables and Part I's sampling
decode with the kit's own loop (:mod:`cascadekit.engine.decode`, :func:`uses_kit_decoder`)
instead of transformers' ``generate``; on a GPU it is never used.
``engine.vllm`` is ``none`` (transformers' ``generate``), ``colocate`` (vLLM inside the
training processes; the evaluation's offline engines are these too) or ``server`` (GRPO's
rollouts from a ``vllm serve`` process, :mod:`cascadekit.launch`; evaluation, which trains
nothing, runs its own offline engine on the process's GPU).

vLLM needs a CUDA device and the ``vllm`` package (the ``gpu`` extra). A profile that asks
for it where either is missing generates with transformers instead and says so once per
process (a warning naming the reason), so a GPU profile tried on a laptop runs, slowly,
rather than failing in the middle of a chapter.

The colocated engine's memory comes from the profile: ``engine.vllm_memory`` (the GPU
memory share vLLM takes, TRL's ``vllm_gpu_memory_utilization``), ``engine.vllm_max_length``
(its context; 0: the model's config, which for a released model is its full native context
and can leave no room for one sequence's KV cache) and ``engine.vllm_sleep`` (TRL's sleep
mode: the engine's weights and cache leave the GPU during the optimizer step). Each
offline engine is freed when its generation is done (:func:`offline_engine`), so
``evaluate-checkpoints`` holds one engine at a time.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from cascadekit import distributed
from cascadekit.chat import stop_token_ids
from cascadekit.profiles import EngineConfig, Profile
from cascadekit.engine.runtime import choose_device, require

__all__ = ["VLLM_SERVER_ENV", "GreedyGenerator", "backend", "engine_arguments", "grpo_arguments", "greedy_generator", "offline_engine",
           "uses_kit_decoder", "uses_vllm"]

#: ``host:port`` of a running ``vllm serve`` (set by :mod:`cascadekit.launch` for server mode).
VLLM_SERVER_ENV = "CASCADEKIT_VLLM_SERVER"
#: A batch generator: ``(prompts, max_new_tokens, batch_size) -> [(text up to the stop, token count)]``.
GreedyGenerator = Callable[[Sequence[str], int, int], list[tuple[str, int]]]


@functools.lru_cache(maxsize=None)
def _fall_back(reason: str) -> None:
    """One warning per reason and process: the profile asked for vLLM, transformers generates."""
    warnings.warn(f"{reason}: generating with transformers instead", stacklevel=3)


def uses_vllm(profile: Profile) -> bool:
    """Whether vLLM generates for ``profile``: ``engine.vllm`` is not ``none``, CUDA is there and so is vllm."""
    asked = profile.engine.vllm
    if asked == "none":
        return False
    if not choose_device(profile).on_gpu:
        _fall_back(f"engine.vllm={asked} but this profile runs on the CPU (no CUDA device)")
        return False
    if importlib.util.find_spec("vllm") is None:
        _fall_back(f"engine.vllm={asked} but the vllm package is not installed (pip install 'cascadekit[gpu]')")
        return False
    return True


def uses_kit_decoder(profile: Profile) -> bool:
    """Whether evaluation decodes with the kit's loop: ``engine.evaluation_decoder`` is ``kit`` and the profile runs on the CPU.

    On a GPU generation stays vLLM's or transformers', whatever the field says.
    """
    return profile.engine.evaluation_decoder == "kit" and not choose_device(profile).on_gpu


def backend(profile: Profile) -> str:
    """``vllm``, ``kit`` or ``hf``: the sampler's backend for ``profile`` (:func:`uses_vllm`, :func:`uses_kit_decoder`)."""
    if uses_vllm(profile):
        return "vllm"
    return "kit" if uses_kit_decoder(profile) else "hf"


def engine_arguments(engine: EngineConfig) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments from the profile's memory knobs (the context only when it names one)."""
    out: dict[str, Any] = {"gpu_memory_utilization": engine.vllm_memory}
    if engine.vllm_max_length:
        out["max_model_len"] = engine.vllm_max_length
    return out


def grpo_arguments(profile: Profile) -> dict[str, Any]:
    """TRL ``GRPOConfig`` fields for the rollouts: ``use_vllm`` and, when it is on, its mode and knobs.

    ``colocate`` gets the profile's memory share, context and sleep mode; ``server``
    gets the server's address from ``CASCADEKIT_VLLM_SERVER`` when :mod:`cascadekit.launch`
    set it (the server's own flags hold its memory and context).
    """
    if not uses_vllm(profile):
        return {"use_vllm": False}
    engine = profile.engine
    out: dict[str, Any] = {"use_vllm": True, "vllm_mode": engine.vllm}
    if engine.vllm == "colocate":
        out.update(vllm_gpu_memory_utilization=engine.vllm_memory, vllm_enable_sleep_mode=engine.vllm_sleep)
        if engine.vllm_max_length:
            out["vllm_max_model_length"] = engine.vllm_max_length
    elif os.environ.get(VLLM_SERVER_ENV):
        out["vllm_server_base_url"] = f"http://{os.environ[VLLM_SERVER_ENV]}"
    return out


@contextlib.contextmanager
def offline_engine(folder: str | Path, engine: EngineConfig | None = None,
                   **kwargs: Any) -> Iterator[Callable[[list[str], Any], list[Any]]]:
    """``generate(prompts, sampling_params)`` of a ``vllm.LLM`` on checkpoint ``folder``, the engine freed on exit.

    ``engine`` gives the memory knobs (:func:`engine_arguments`). Only this context
    holds the engine (the function yielded reaches it through it), so on exit nothing
    else keeps it alive: an engine holds its memory share of the GPU until it is
    collected, and the next engine (the next checkpoint) or the training that
    resumes would find the GPU full.
    """
    vllm = require("vllm", "gpu", "vLLM generation")
    held = [vllm.LLM(model=str(folder), **(engine_arguments(engine) if engine is not None else {}), **kwargs)]

    def generate(prompts: list[str], params: Any) -> list[Any]:
        if not held:
            raise RuntimeError("this vLLM engine was freed when its offline_engine context closed")
        return held[0].generate(prompts, params)

    try:
        yield generate
    finally:
        held.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def greedy_generator(folder: str | Path, tokenizer: Any, profile: Profile) -> Iterator[GreedyGenerator]:
    """Greedy vLLM completions of rendered chat prompts, cut at the chat's stop ids, as transformers gives them.

    Under a multi-process launch only the main process opens the engine (each would
    take its memory share of the card beside training); every process gets its
    completions (:func:`cascadekit.distributed.broadcast`), call for call.
    """
    if not distributed.is_main():
        yield lambda prompts, max_new_tokens, batch_size: distributed.broadcast(None)
        return
    vllm = require("vllm", "gpu", "vLLM generation")
    stops = stop_token_ids(tokenizer)
    with offline_engine(folder, profile.engine, dtype=choose_device(profile).dtype, seed=0) as llm_generate:
        def generate(prompts: Sequence[str], max_new_tokens: int, batch_size: int) -> list[tuple[str, int]]:
            params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=stops,
                                         skip_special_tokens=False)
            out = []
            for result in llm_generate(list(prompts), params):
                ids = list(result.outputs[0].token_ids)
                n = len(ids) - (1 if ids and ids[-1] in stops else 0)
                out.append((result.outputs[0].text, n))
            return distributed.broadcast(out)

        yield generate
