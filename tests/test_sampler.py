import dataclasses

import pytest
import torch

from cascadekit.evaluation.sampler import _cut, _decode, sample_completions
from cascadekit.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.tokenizer import train_tokenizer
from cascadekit.world import generate_problems

PROFILE = load_profile("smoke", {"evaluation.max_new_tokens": 12})


@pytest.fixture(scope="module")
def problems():
    return generate_problems(ops=[2, 3], contexts=("A",), n=3, seed=0, split="eval", style="compact")


@pytest.fixture(scope="module")
def tokenizer(problems):
    return train_tokenizer([p.training_text for p in problems], 400)


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(PROFILE.model, tokenizer)


def test_n_completions_per_prompt_in_order(model, tokenizer, problems):
    prompts = [p.rl_prompt for p in problems]
    out = sample_completions(model, tokenizer, prompts, PROFILE.evaluation, n=3)
    assert len(out) == 3 and all(len(samples) == 3 for samples in out)
    assert all(isinstance(text, str) for samples in out for text in samples)


def test_batches_do_not_change_the_shape(model, tokenizer, problems):
    cfg = load_profile("smoke", {"evaluation.batch_size": 2, "evaluation.max_new_tokens": 4}).evaluation
    out = sample_completions(model, tokenizer, [p.rl_prompt for p in problems], cfg)
    assert [len(s) for s in out] == [cfg.samples] * 3


def test_sampling_stops_at_the_answer_tag(model, tokenizer, problems):
    """A model forced to emit ``</answer>`` stops after one token."""
    stop = tokenizer.convert_tokens_to_ids("</answer>")

    def force_stop(module, inputs, logits):
        logits = logits.clone()
        logits[..., stop] += 1e4
        return logits

    hook = model.lm_head.register_forward_hook(force_stop)
    try:
        out = sample_completions(model, tokenizer, [problems[0].rl_prompt], PROFILE.evaluation, n=2)
    finally:
        hook.remove()
    assert out == [["</answer>", "</answer>"]]


def test_decode_keeps_tags_drops_padding_and_cuts_after_the_answer(tokenizer):
    ids = tokenizer(" x = 1. </solution> <answer> 1 </answer> junk")["input_ids"]
    padded = torch.tensor([tokenizer.pad_token_id, *ids, tokenizer.eos_token_id])
    assert _decode(tokenizer, padded) == " x = 1. </solution> <answer> 1 </answer>"
    assert _cut("no tag here") == "no tag here"


def test_vllm_backend_without_vllm_is_a_clear_error(tokenizer, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    cfg = load_profile("smoke", {"evaluation.backend": "vllm"}).evaluation
    with pytest.raises(RuntimeError, match="vllm is not installed"):
        sample_completions("some/checkpoint", tokenizer, ["<question>"], cfg)


def test_unknown_backend(model, tokenizer):
    with pytest.raises(ValueError, match="backend"):  # the profile refuses it first
        load_profile("smoke", {"evaluation.backend": "magic"})
    cfg = dataclasses.replace(load_profile("smoke").evaluation, backend="magic")
    with pytest.raises(ValueError, match="backend"):  # and so does the sampler, for a config built by hand
        sample_completions(model, tokenizer, ["<question>"], cfg)


def test_generation_benchmark_runs_at_smoke_scale(capsys):
    from cascadekit.evaluation import benchmark

    benchmark.main(["--scale", "smoke", "--prompts", "2", "evaluation.max_new_tokens=4"])
    assert "tokens/s" in capsys.readouterr().out
