import types
from pathlib import Path

import pytest
import torch

from cascadekit import cli
from cascadekit.evaluation.sampler import _cut, _decode, sample_completions
from cascadekit.engine.models import build_model
from cascadekit.profiles import load_profile
from cascadekit.engine.tokenizer import train_tokenizer
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


@pytest.mark.parametrize("backend", ["hf", "kit"])
def test_sampling_stops_at_the_answer_tag(model, tokenizer, problems, backend):
    """A model forced to emit ``</answer>`` stops after one token."""
    stop = tokenizer.convert_tokens_to_ids("</answer>")

    def force_stop(module, inputs, logits):
        logits = logits.clone()
        logits[..., stop] += 1e4
        return logits

    hook = model.lm_head.register_forward_hook(force_stop)
    try:
        out = sample_completions(model, tokenizer, [problems[0].rl_prompt], PROFILE.evaluation, n=2, backend=backend)
    finally:
        hook.remove()
    assert out == [["</answer>", "</answer>"]]


def test_the_kit_backend_answers_as_generate_when_sampling_is_sharp(model, tokenizer, problems, monkeypatch):
    """At a vanishing temperature both samplers take the argmax: the kit's tokenisation, stops and cut are ``hf``'s.

    (That the kit's draws follow ``generate``'s distribution is tests/test_decode.py's.)
    """
    cfg = load_profile("smoke", {"evaluation.max_new_tokens": 24, "evaluation.temperature": 1e-4,
                                 "evaluation.batch_size": 4}).evaluation
    prompts = [p.rl_prompt for p in problems]
    expected = sample_completions(model, tokenizer, prompts, cfg, n=2)
    monkeypatch.setattr(model, "generate", lambda *a, **k: pytest.fail("model.generate sampled"))
    assert sample_completions(model, tokenizer, prompts, cfg, n=2, backend="kit") == expected


def test_decode_keeps_tags_drops_padding_and_cuts_after_the_answer(tokenizer):
    ids = tokenizer(" x = 1. </solution> <answer> 1 </answer> junk")["input_ids"]
    padded = torch.tensor([tokenizer.pad_token_id, *ids, tokenizer.eos_token_id])
    assert _decode(tokenizer, padded) == " x = 1. </solution> <answer> 1 </answer>"
    assert _cut("no tag here") == "no tag here"


def test_vllm_backend_without_vllm_is_a_clear_error(tokenizer, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match="the vllm sampling backend needs the 'vllm' package"):
        sample_completions("some/checkpoint", tokenizer, ["<question>"], PROFILE.evaluation, backend="vllm")


def test_unknown_backend(model, tokenizer):
    with pytest.raises(ValueError, match="unknown sampling backend 'magic'"):
        sample_completions(model, tokenizer, ["<question>"], PROFILE.evaluation, backend="magic")


def test_generation_benchmark_runs_at_smoke_scale(capsys):
    assert cli.main(["bench", "sampler", "--scale", "smoke", "--prompts", "2", "evaluation.max_new_tokens=4"]) == 0
    assert "tokens/s" in capsys.readouterr().out


def test_a_checkpoint_path_samples_like_the_loaded_model(model, tokenizer, problems, tmp_path):
    from cascadekit.engine.runtime import save_checkpoint

    folder = save_checkpoint(model, tokenizer, tmp_path / "ck")
    prompts = [p.rl_prompt for p in problems]
    loaded = sample_completions(model, tokenizer, prompts, PROFILE.evaluation, seed=7, n=2)
    assert sample_completions(folder, tokenizer, prompts, PROFILE.evaluation, seed=7, n=2) == loaded
    assert sample_completions(str(folder), tokenizer, prompts, PROFILE.evaluation, seed=7, n=2) == loaded


class FakeVLLM:
    """Stands in for the ``vllm`` module (not installed here): records what the engine was given."""

    def __init__(self):
        self.module = types.ModuleType("vllm")
        self.seen: dict = {}
        self.engines = 0  # engines alive now
        fake = self

        class LLM:
            def __init__(self, model, seed, **engine):
                folder = Path(model)
                fake.seen.update(folder=folder, files=sorted(p.name for p in folder.iterdir()), seed=seed,
                                 engine=engine)
                fake.engines += 1

            def __del__(self):
                fake.engines -= 1

            def generate(self, prompts, params):
                fake.seen["prompts"] = prompts
                out = types.SimpleNamespace(text=" 1 </answer> more")
                return [types.SimpleNamespace(outputs=[out] * params.n) for _ in prompts]

        class SamplingParams:
            def __init__(self, **kwargs):
                self.__dict__.update(kwargs)

        self.module.LLM, self.module.SamplingParams = LLM, SamplingParams


def test_vllm_backend_saves_an_in_memory_model_to_a_temporary_checkpoint(model, tokenizer, monkeypatch):
    import sys

    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    cfg = PROFILE.evaluation
    engine = load_profile("small").engine
    out = sample_completions(model, tokenizer, ["<question> a", "<question> b"], cfg, seed=3, n=2, backend="vllm",
                             engine=engine)
    assert out == [[" 1 </answer>"] * 2] * 2
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(fake.seen["files"])
    assert fake.seen["seed"] == 3 and not fake.seen["folder"].exists()  # the temporary checkpoint is gone
    assert fake.seen["engine"] == {"gpu_memory_utilization": 0.45, "max_model_len": 10240}  # the profile's knobs
    assert fake.engines == 0  # freed before sampling returns

    from cascadekit.engine.runtime import with_lora

    sample_completions(with_lora(build_model(PROFILE.model, tokenizer), rank=2, alpha=4), tokenizer, ["<q>"], cfg, n=1,
                       backend="vllm")
    assert "model.safetensors" in fake.seen["files"] and "adapter_config.json" not in fake.seen["files"]  # merged


def test_vllm_backend_takes_folders_and_refuses_uncached_hub_names(model, tokenizer, tmp_path, monkeypatch):
    import sys

    from cascadekit.engine.runtime import DownloadNotAllowed, save_checkpoint

    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CASCADEKIT_ALLOW_DOWNLOAD", raising=False)
    cfg = PROFILE.evaluation
    folder = save_checkpoint(model, tokenizer, tmp_path / "ck")
    sample_completions(folder, tokenizer, ["<q>"], cfg, n=1, backend="vllm")
    assert fake.seen["folder"] == folder
    with pytest.raises(DownloadNotAllowed, match="cascadekit-tests/no-such-model"):
        sample_completions("cascadekit-tests/no-such-model", tokenizer, ["<q>"], cfg, n=1, backend="vllm")


def test_cached_sampling_samples_once_per_model_content(model, tokenizer, problems, monkeypatch, tmp_path):
    from cascadekit.evaluation import sampler

    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    prompts = [p.rl_prompt for p in problems]
    live = sample_completions(model, tokenizer, prompts, PROFILE.evaluation, seed=3, n=2)
    calls = []
    real = sampler.sample_completions
    monkeypatch.setattr(sampler, "sample_completions", lambda *a, **k: calls.append(1) or real(*a, **k))
    cfg = PROFILE.evaluation
    first = sampler.cached_sample_completions(model, tokenizer, prompts, cfg, seed=3, n=2)
    again = sampler.cached_sample_completions(model, tokenizer, prompts, cfg, seed=3, n=2)
    assert first == again == live and len(calls) == 1
    other = build_model(PROFILE.model, tokenizer, seed=1)  # other weights: another key, sampled again
    assert sampler.model_digest(other, tokenizer) != sampler.model_digest(model, tokenizer)
    before = len(calls)
    sampler.cached_sample_completions(other, tokenizer, prompts, cfg, seed=3, n=2)
    assert len(calls) == before + 1


def test_a_folder_digest_is_its_content_not_its_bookkeeping(tmp_path):
    from cascadekit.evaluation.sampler import folder_digest

    a, b = tmp_path / "a", tmp_path / "b"
    for folder, stage in ((a, "built by one chain"), (b, "built by another")):
        (folder / "sub").mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "sub" / "tokenizer.json").write_text("{}")
        (folder / "stage.json").write_text(stage)
    assert folder_digest(a) == folder_digest(b)
    (b / "model.safetensors").write_bytes(b"other weights")
    assert folder_digest(a) != folder_digest(b)
    assert folder_digest("Qwen/Qwen3-0.6B-Base") is None
