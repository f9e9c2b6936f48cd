"""Issue 34 case 7: ``engine.vllm`` alone decides who generates, in GRPO, Part I sampling, stage tables and
evaluate-checkpoints; without CUDA or the vllm package it falls back to transformers with one warning.

No GPU and no vLLM here: CUDA is faked through :func:`cascadekit.engine.runtime.cuda_device` and vLLM by a
module that records what its engines were given and how many are alive.
"""
from __future__ import annotations

import importlib.machinery
import sys
import types
import warnings

import pytest

from cascadekit.engine import generation, runtime
from cascadekit.engine.models import build_model
from cascadekit.evaluation import checkpoints, report, stage_table
from cascadekit.profiles import load_profile
from cascadekit.training import grpo
from cascadekit.training.chat_base import build_chat_tokenizer

SMOKE = load_profile("smoke", {"sft.max_new_tokens": 4})
ON_GPU = {"device": "cuda", "engine.vllm": "colocate", "sft.max_new_tokens": 4}


class FakeVLLM(types.ModuleType):
    """``vllm`` with ``LLM`` (counts live engines, keeps their arguments) and ``SamplingParams``."""

    def __init__(self) -> None:
        super().__init__("vllm")
        self.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
        self.alive, self.most_alive, self.engines = 0, 0, []
        fake = self

        class LLM:
            def __init__(self, model: str, **kwargs):
                fake.engines.append({"model": model, **kwargs})
                fake.alive += 1
                fake.most_alive = max(fake.most_alive, fake.alive)

            def generate(self, prompts, params):
                out = types.SimpleNamespace(text="<think>\n</think>\n4", token_ids=[5, 6, 7])
                return [types.SimpleNamespace(outputs=[out]) for _ in prompts]

            def __del__(self):
                fake.alive -= 1

        class SamplingParams:
            def __init__(self, **kwargs):
                self.__dict__.update(kwargs)

        self.LLM, self.SamplingParams = LLM, SamplingParams


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CUDA device that bf16 TrainingArguments accept (nothing runs on it)."""
    import transformers.training_args as training_args

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))


@pytest.fixture
def fake_vllm(monkeypatch, fake_gpu):
    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    return fake


@pytest.fixture(autouse=True)
def fresh_warnings():
    generation._fall_back.cache_clear()
    yield
    generation._fall_back.cache_clear()


def _fallbacks(profile, calls: int = 2) -> tuple[list[bool], list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = [generation.uses_vllm(profile) for _ in range(calls)]
    return used, [str(w.message) for w in caught]


def test_engine_vllm_none_is_transformers_without_a_word():
    assert _fallbacks(SMOKE) == ([False, False], [])
    assert generation.backend(SMOKE) == "hf" and grpo.build_grpo_config(SMOKE, "/tmp/x").use_vllm is False


def test_without_cuda_a_vllm_profile_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(runtime, "cuda_device", lambda: None)
    used, said = _fallbacks(load_profile("small"))
    assert used == [False, False] and len(said) == 1
    assert "engine.vllm=colocate" in said[0] and "no CUDA device" in said[0] and "transformers" in said[0]


def test_without_the_vllm_package_a_gpu_falls_back_with_one_warning(monkeypatch, fake_gpu):
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec -> None: not installed
    used, said = _fallbacks(load_profile("small"))
    assert used == [False, False] and len(said) == 1 and "vllm package is not installed" in said[0]


def test_grpo_colocated_vllm_takes_the_profiles_memory_knobs(fake_vllm, tmp_path):
    config = grpo.build_grpo_config(load_profile("small"), str(tmp_path))
    assert config.use_vllm and config.vllm_mode == "colocate"
    assert (config.vllm_gpu_memory_utilization, config.vllm_max_model_length, config.vllm_enable_sleep_mode) == \
        (0.45, 10240, False)
    none = grpo.build_grpo_config(load_profile("small", {"engine.vllm": "none"}), str(tmp_path))
    assert not none.use_vllm  # engine.vllm=none means none, on a GPU too


def test_grpo_server_mode_is_the_profiles_and_finds_the_server(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv(generation.VLLM_SERVER_ENV, "node9:8000")
    one_node = load_profile("full", {"engine.nodes": 1, "engine.vllm_gpus": 4})
    config = grpo.build_grpo_config(one_node, str(tmp_path), num_processes=4)
    assert config.use_vllm and config.vllm_mode == "server" and config.vllm_server_base_url == "http://node9:8000"
    colocated = load_profile("full", {"engine.vllm": "colocate", "engine.vllm_gpus": 0})
    assert grpo.build_grpo_config(colocated, str(tmp_path), num_processes=64).vllm_mode == "colocate"  # 8 nodes


def test_part_one_sampling_hands_vllm_the_checkpoint_folder(fake_vllm, monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(report, "cached_sample_completions",
                        lambda model, tokenizer, prompts, cfg, **kw: seen.update(model=model, **kw) or [])
    monkeypatch.setattr(report, "load_tokenizer", lambda folder: None)
    stage = types.SimpleNamespace(checkpoint=tmp_path)
    report.evaluate_checkpoint(stage, [], load_profile("smoke", ON_GPU))
    assert seen["model"] == tmp_path and seen["backend"] == "vllm" and seen["engine"].vllm_memory == 0.3


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    tokenizer = build_chat_tokenizer(SMOKE)
    folders = []
    for seed in (0, 1):
        folder = tmp_path_factory.mktemp("ck") / f"stage-{seed}"
        runtime.save_checkpoint(build_model(SMOKE.model, tokenizer, seed=seed), tokenizer, folder)
        folders.append(folder)
    return folders


def test_stage_tables_generate_with_vllm_and_say_so_in_their_key(fake_vllm, two_checkpoints, monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stage_table, "load_model", lambda *a, **k: pytest.fail("transformers loaded the model"))
    profile = load_profile("smoke", ON_GPU)
    records = stage_table.suite_records(profile, ["math"])[:2]
    table = stage_table.stage_table(two_checkpoints[0], profile, "SFT", records)
    assert len(table["samples"]) == 2 and fake_vllm.engines[0]["model"] == str(two_checkpoints[0])
    assert fake_vllm.alive == 0  # freed once the table is done
    assert stage_table._suite_inputs(profile, records)["generation"] == "vllm"
    assert "generation" not in stage_table._suite_inputs(load_profile("smoke", {**ON_GPU, "engine.vllm": "none"}),
                                                         records)


def test_evaluate_checkpoints_holds_one_vllm_engine_at_a_time(fake_vllm, two_checkpoints, tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "load_model", lambda *a, **k: pytest.fail("transformers loaded the model"))
    records = stage_table.suite_records(SMOKE, ["math"])[:2]
    pairs = [("SFT", str(two_checkpoints[0])), ("RLHF", str(two_checkpoints[1]))]
    checkpoints.evaluate_checkpoints(pairs, load_profile("smoke", ON_GPU), tmp_path, records)
    assert [e["model"] for e in fake_vllm.engines] == [str(f) for f in two_checkpoints]
    assert fake_vllm.most_alive == 1 and fake_vllm.alive == 0
    assert fake_vllm.engines[0]["gpu_memory_utilization"] == 0.3
    assert "generation: vLLM (greedy)" in (tmp_path / "stage_table.md").read_text()


@pytest.mark.parametrize("vllm", ["none", "colocate"])
def test_on_a_gpu_evaluation_never_decodes_with_the_kits_loop(fake_vllm, vllm):
    """``engine.evaluation_decoder: kit`` is a CPU switch: on a GPU, vLLM or transformers generate, as without it."""
    profile = load_profile("smoke", {**ON_GPU, "engine.vllm": vllm, "engine.evaluation_decoder": "kit"})
    assert not generation.uses_kit_decoder(profile)
    assert generation.backend(profile) == ("vllm" if vllm == "colocate" else "hf")
    records = stage_table.suite_records(profile, ["math"])[:2]
    assert stage_table._suite_inputs(profile, records).get("generation") == (None if vllm == "none" else "vllm")


class Keyed(Exception):
    """Raised in place of running a stage: its inputs are what a test looks at."""


def test_on_the_cpu_the_kit_decoder_is_the_evaluations_and_says_so_in_its_keys(monkeypatch):
    """Part I's samples and the stage tables take the kit's loop under the switch, keyed apart; by default nothing moves."""
    from cascadekit.evaluation import sampler

    kit = load_profile("smoke", {"sft.max_new_tokens": 4, "engine.evaluation_decoder": "kit"})
    assert generation.uses_kit_decoder(kit) and generation.backend(kit) == "kit"
    assert not generation.uses_kit_decoder(SMOKE) and generation.backend(SMOKE) == "hf"
    records = stage_table.suite_records(kit, ["math"])[:2]
    assert stage_table._suite_inputs(kit, records) == {**stage_table._suite_inputs(SMOKE, records), "generation": "kit"}
    keys = []

    def keyed(stage):
        keys.append(stage.inputs)
        raise Keyed

    monkeypatch.setattr(sampler, "run_stage", keyed)
    tokenizer = build_chat_tokenizer(SMOKE)
    model = build_model(SMOKE.model, tokenizer, seed=0)
    for profile in (SMOKE, kit):
        with pytest.raises(Keyed):
            sampler.cached_sample_completions(model, tokenizer, ["<q>"], profile.evaluation,
                                              backend=generation.backend(profile))
    assert keys[0]["backend"] == "hf" and keys[1] == {**keys[0], "backend": "kit"}
