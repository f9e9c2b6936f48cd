"""The GRPO engine: configuration, the notebook's math against TRL, training, dynamic sampling."""
from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from cascadekit.engine import runtime
from cascadekit.profiles import load_profile
from cascadekit.training import dynamic_sampling as ds
from cascadekit.training import grpo

CHARS = list("0123456789+-=*/ abcdefghijklmnopqrstuvwxyz.?")


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character, built locally."""
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


def tiny_model(seed: int = 0) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(CHARS) + 3, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
        tie_word_embeddings=True, eos_token_id=1, pad_token_id=0, bos_token_id=None,
    )
    return Qwen3ForCausalLM(cfg)


def prompts(n: int = 8) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(n)], "gold": [str(2 * i) for i in range(n)]})


def count_ones(completions, **kwargs):
    """A toy reward that varies within groups of a random model."""
    return [float(c.count("1")) for c in completions]


def smoke(**overrides):
    return load_profile("smoke", {"rl.max_completion_length": 12, **overrides})


# --- configuration ---------------------------------------------------------------------------


def test_config_is_strict_on_policy(tmp_path):
    profile = smoke()
    cfg = grpo.build_grpo_config(profile, str(tmp_path))
    rl = profile.rl
    assert cfg.num_iterations == 1
    assert cfg.generation_batch_size == rl.prompts_per_step * rl.group_size == cfg.per_device_train_batch_size
    assert cfg.steps_per_generation == cfg.gradient_accumulation_steps == 1
    assert cfg.num_generations == rl.group_size
    assert (cfg.loss_type, cfg.scale_rewards, cfg.beta, cfg.temperature) == ("dapo", "group", 0.0, 1.0)
    assert cfg.use_cpu and not cfg.use_vllm and not cfg.bf16
    assert cfg.max_steps == rl.samples // rl.prompts_per_step
    assert cfg.logging_steps == 1


def test_accumulation_still_generates_once_per_optimizer_step(tmp_path):
    cfg = grpo.build_grpo_config(smoke(), str(tmp_path), gradient_accumulation_steps=2, max_steps=3)
    assert cfg.per_device_train_batch_size == 4 and cfg.gradient_accumulation_steps == 2
    assert cfg.steps_per_generation == 2 and cfg.generation_batch_size == 8
    with pytest.raises(ValueError, match="do not split evenly"):
        grpo.build_grpo_config(smoke(), str(tmp_path), num_processes=3)


def test_a_micro_batch_splits_the_step_without_changing_it(tmp_path):
    """Issue 34 case 9: engine.rl_micro_batch completions per forward/backward; the accumulation follows."""
    cfg = grpo.build_grpo_config(smoke(**{"engine.rl_micro_batch": 2}), str(tmp_path), max_steps=3)
    assert cfg.per_device_train_batch_size == 2 and cfg.gradient_accumulation_steps == cfg.steps_per_generation == 4
    assert cfg.generation_batch_size == 8  # 2 prompts x 4 rollouts: the step's batch as without it
    rl, small = load_profile("small").rl, load_profile("small").engine
    assert grpo.micro_batches(rl, small, 1) == (1, rl.prompts_per_step * rl.group_size)
    with pytest.raises(ValueError, match="do not split over 1 training processes in micro-batches of engine.rl_micro_batch=3"):
        grpo.build_grpo_config(smoke(**{"engine.rl_micro_batch": 3}), str(tmp_path))
    with pytest.raises(ValueError, match="engine.rl_micro_batch=2 sets GRPO's accumulation itself"):
        grpo.build_grpo_config(smoke(**{"engine.rl_micro_batch": 2}), str(tmp_path), gradient_accumulation_steps=2)


def test_gpu_config_uses_vllm_without_a_gpu(tmp_path, monkeypatch):
    # TrainingArguments refuses bf16 without a GPU; pretend there is one, and vllm (never started).
    import importlib.machinery
    import sys
    import types

    import transformers.training_args as training_args

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    fake = types.ModuleType("vllm")
    fake.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    profile = load_profile("paper")
    one_node = grpo.build_grpo_config(profile, str(tmp_path))
    assert one_node.use_vllm and one_node.vllm_mode == "colocate"
    assert one_node.bf16 and not one_node.use_cpu and one_node.gradient_checkpointing
    assert one_node.beta == 1e-3 and one_node.num_generations == 6 and one_node.learning_rate == 1e-6
    nodes = grpo.build_grpo_config(profile, str(tmp_path), num_processes=16)
    assert nodes.vllm_mode == "colocate"  # engine.vllm alone decides, however many processes
    assert nodes.per_device_train_batch_size == profile.rl.prompts_per_step * 6 // 16
    full = grpo.build_grpo_config(load_profile("full"), str(tmp_path), num_processes=8)  # one micro-batch of 1
    assert full.use_vllm and full.beta == 0.0 and full.per_device_train_batch_size == 1
    assert full.steps_per_generation == full.gradient_accumulation_steps == 128 * 16 // 8


def test_a_gpu_profile_without_a_gpu_runs_on_the_cpu(tmp_path, monkeypatch):
    """The device comes from cascadekit.engine.runtime.choose_device: no CUDA, no vLLM and no bf16."""
    monkeypatch.setattr(runtime, "cuda_device", lambda: None)
    cfg = grpo.build_grpo_config(load_profile("paper"), str(tmp_path))
    assert cfg.use_cpu and not cfg.use_vllm and not cfg.bf16 and not cfg.gradient_checkpointing
    assert grpo.lora_config is runtime.lora_config and grpo.lora_config().target_modules == "all-linear"


# --- the notebook's math against the trainer -------------------------------------------------


def trainer_for(tmp_path, reward=count_ones, **overrides):
    cfg = grpo.build_grpo_config(smoke(**overrides), str(tmp_path), max_steps=1, disable_tqdm=True)
    return grpo.make_grpo_trainer(tiny_model(), tiny_tokenizer(), prompts(), reward, cfg)


def test_grpo_advantages_match_the_trainer(tmp_path):
    seen_rewards = []

    def reward(completions, **kwargs):
        scores = count_ones(completions)
        seen_rewards.extend(scores)
        return scores

    trainer = trainer_for(tmp_path, reward)
    captured = {}
    inner = trainer._generate_and_score_completions

    def capture(*args, **kwargs):
        captured.update(inner(*args, **kwargs))
        return captured

    trainer._generate_and_score_completions = capture
    trainer.train()
    rewards = torch.tensor(seen_rewards)
    assert rewards.std() > 0, "the toy reward should vary"
    expected = grpo.grpo_advantages(rewards, group_size=4)
    torch.testing.assert_close(captured["advantages"], expected)
    # zero-variance groups get zero advantage
    flat = grpo.grpo_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), group_size=2)
    assert flat[:2].abs().max() == 0 and flat[2] < 0 < flat[3]


def prepared_batch(with_ref: bool):
    """A fixed batch laid out as TRL lays it out: left-padded prompts, right-padded completions."""
    g = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(3, 40, (4, 5), generator=g)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :2] = 0
    prompt_ids[0, :2] = 0
    completion_ids = torch.randint(3, 40, (4, 6), generator=g)
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[1, 3:] = 0
    completion_mask[2, 5:] = 0
    batch = {
        "prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
        "completion_ids": completion_ids, "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.4, 0.7, -1.5]),
        "num_items_in_batch": completion_mask.sum(),
    }
    if with_ref:
        batch["ref_per_token_logps"] = -3.0 - torch.rand(4, 6, generator=g)
    return batch


@pytest.mark.parametrize("beta", [0.0, 0.05])
def test_token_level_loss_matches_the_trainer_loss_and_gradient(tmp_path, beta):
    trainer = trainer_for(tmp_path, **{"rl.kl_beta": beta})
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; one micro-batch per step
    model = trainer.model
    model.train()
    batch = prepared_batch(with_ref=beta > 0)

    model.zero_grad()
    trl_loss = trainer.compute_loss(model, batch)
    trl_loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    logps = grpo.completion_logprobs(model, batch["prompt_ids"], batch["prompt_mask"],
                                     batch["completion_ids"], batch["completion_mask"])
    ours = grpo.token_level_loss(logps, logps.detach(), batch["advantages"], batch["completion_mask"],
                                 ref_logprobs=batch.get("ref_per_token_logps"), beta=beta)
    ours.backward()

    torch.testing.assert_close(ours, trl_loss)
    for mine, theirs in zip((p.grad for p in model.parameters()), trl_grads):
        torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-4)
    if beta == 0:  # on-policy value: minus the token-weighted mean advantage
        tokens = batch["completion_mask"].sum(1).float()
        expected = -(batch["advantages"] * tokens).sum() / tokens.sum()
        torch.testing.assert_close(ours.detach(), expected)


def test_token_level_loss_clips_off_policy_ratios():
    logp = torch.log(torch.tensor([[0.9]]))
    old = torch.log(torch.tensor([[0.5]]))  # ratio 1.8, clipped to 1.2 for a positive advantage
    loss = grpo.token_level_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1))
    torch.testing.assert_close(loss, torch.tensor(-1.2))
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo.token_level_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 1), beta=0.1)


# --- training ---------------------------------------------------------------------------------


def test_smoke_training_logs_reward_curves_and_timings(tmp_path):
    result = grpo.train_grpo(
        tiny_model(), tiny_tokenizer(), prompts(), count_ones, smoke(), str(tmp_path), max_steps=3, disable_tqdm=True
    )
    curves = result.curves
    assert list(curves["step"]) == [1, 2, 3]
    for column in ("reward", "frac_reward_zero_std", "completion_length", "entropy", "reward/count_ones"):
        assert curves[column].notna().all(), column
    assert "kl" not in curves  # KL off by default
    timings = result.timings
    assert len(timings) == 3 and (timings["generate_s"] > 0).all() and (timings["score_s"] > 0).all()
    parts = timings[["generate_s", "score_s", "update_s", "other_s"]].sum(axis=1)
    torch.testing.assert_close(torch.tensor(parts.values), torch.tensor(timings["step_s"].values))
    shares = grpo.phase_shares(timings)
    assert set(shares) == set(grpo.PHASES) and abs(sum(shares.values()) - 1) < 1e-9


def test_progress_bar_shows_reward_instead_of_printing_logs(tmp_path):
    from transformers import ProgressCallback

    cfg = grpo.build_grpo_config(smoke(), str(tmp_path), max_steps=1)
    trainer = grpo.make_grpo_trainer(tiny_model(), tiny_tokenizer(), prompts(), count_ones, cfg)
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert grpo.RewardProgress in kinds and ProgressCallback not in kinds


def test_lora_and_kl_paths_train(tmp_path):
    from peft import PeftModel

    profile = smoke(**{"rl.use_lora": True, "rl.kl_beta": 0.01})
    result = grpo.train_grpo(
        tiny_model(), tiny_tokenizer(), prompts(), count_ones, profile, str(tmp_path), max_steps=1, disable_tqdm=True
    )
    assert isinstance(result.model, PeftModel)
    assert "kl" in result.curves and result.curves["kl"].notna().all()


def test_training_curves_skip_summary_rows():
    history = [
        {"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.25, "completions/mean_length": 9.0,
         "entropy": 3.0, "rewards/outcome_reward/mean": 0.5, "loss": 0.0},
        {"step": 1, "train_runtime": 1.0},
    ]
    table = grpo.training_curves(history)
    assert table.to_dict("records") == [
        {"step": 1, "reward": 0.5, "frac_reward_zero_std": 0.25, "completion_length": 9.0, "entropy": 3.0,
         "loss": 0.0, "reward/outcome_reward": 0.5}
    ]


# --- dynamic sampling -------------------------------------------------------------------------


def by_kind(prompts, completions, kind, **kwargs):
    """Deterministic groups: easy always 1, hard always 0, mixed alternates 0/1 within its group."""
    return [{"easy": 1.0, "hard": 0.0, "half": 0.5}.get(k, float(i % 2)) for i, k in enumerate(kind)]


def test_classify_groups():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    assert ds.classify_groups(rewards) == ["too_easy", "too_hard", "no_signal", "mixed"]


def test_screen_keeps_mixed_prompts_and_refills_from_the_pool():
    kinds = ["easy", "hard", "mixed", "easy", "half", "mixed", "hard", "mixed", "mixed", "easy"]
    pool = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(len(kinds))], "kind": kinds})
    result = ds.screen_prompts(
        tiny_model(), tiny_tokenizer(), pool, by_kind, target=3, group_size=4, max_completion_length=4, chunk_size=3
    )
    assert len(result.kept) == 3 and set(result.kept["kind"]) == {"mixed"}
    report = result.report
    assert report["kept"].sum() == 3
    assert report.iloc[:-3]["verdict"].eq("mixed").sum() < 3  # no chunk screened past the one that filled it
    assert set(report.loc[~report["kept"], "verdict"]) <= {"too_easy", "too_hard", "no_signal", "mixed"}
    assert result.counts()["mixed"] >= 3


def test_screen_can_readmit_dropped_prompts_and_stops_when_pool_runs_out():
    pool = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3="], "kind": ["easy", "hard", "mixed"]})
    strict = ds.screen_prompts(tiny_model(), tiny_tokenizer(), pool, by_kind, target=5, group_size=2,
                               max_completion_length=3)
    assert strict.kept["kind"] == ["mixed"] and len(strict.report) == 3
    everything = ds.screen_prompts(tiny_model(), tiny_tokenizer(), pool, by_kind, target=5, group_size=2,
                                   max_completion_length=3, readmit_prob=1.0)
    assert len(everything.kept) == 3


def test_sample_groups_returns_group_size_completions_per_prompt():
    completions = ds.sample_groups(tiny_model(), tiny_tokenizer(), ["1+1=", "22+3="], 3, max_completion_length=5)
    assert len(completions) == 6 and all(isinstance(c, str) for c in completions)


def test_sample_groups_by_the_kit_loop_matches_generate_at_a_vanishing_temperature():
    """At T=1e-4 both samplers are greedy in effect: the kit's loop must give generate's completions exactly."""
    model, tokenizer, prompts = tiny_model(), tiny_tokenizer(), ["1+1=", "22+3=", "7="]
    by_generate = ds.sample_groups(model, tokenizer, prompts, 2, temperature=1e-4, max_completion_length=9)
    by_kit = ds.sample_groups(model, tokenizer, prompts, 2, temperature=1e-4, max_completion_length=9, kit=True)
    assert by_kit == by_generate and len(by_kit) == 6


def test_screen_by_the_kit_loop_keeps_the_same_prompts_at_a_vanishing_temperature():
    pool = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3="], "kind": ["easy", "hard", "mixed"]})
    screens = [ds.screen_prompts(tiny_model(), tiny_tokenizer(), pool, by_kind, target=5, group_size=2,
                                 temperature=1e-4, max_completion_length=3, kit=kit) for kit in (False, True)]
    assert screens[0].kept["kind"] == screens[1].kept["kind"] == ["mixed"]


def test_sample_groups_renders_chat_prompts_with_the_template():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}= {% endif %}"
    chats = [[{"role": "user", "content": "1+1"}], [{"role": "user", "content": "2+2"}]]
    completions = ds.sample_groups(tiny_model(), tokenizer, chats, 2, max_completion_length=4)
    assert len(completions) == 4 and all(c[0]["role"] == "assistant" for c in completions)


# --- the kit's own pieces ---------------------------------------------------------------------


def test_train_grpo_on_the_dag_world_with_process_rewards(tmp_path):
    """World prompts, the kit's tokenizer and model, and the paper's mixed reward, end to end."""
    import json

    from cascadekit.engine.models import build_model
    from cascadekit.rewards import mixed_reward, outcome_reward
    from cascadekit.engine.tokenizer import train_tokenizer
    from cascadekit.world import generate_problems

    profile = smoke()
    problems = generate_problems(ops=range(2, 4), contexts=("A",), n=8, seed=0, split="rl", style="compact")
    tokenizer = train_tokenizer([p.training_text for p in problems], 300)
    # `gold` as JSON: a problem's seed is a uint64, which Arrow cannot hold as an int64
    data = Dataset.from_dict({"prompt": [p.rl_prompt for p in problems],
                              "gold": [json.dumps(p.to_dict()) for p in problems]})
    result = grpo.train_grpo(
        build_model(profile.model, tokenizer), tokenizer, data, [outcome_reward, mixed_reward(0.2)], profile,
        str(tmp_path), max_steps=2, reward_weights=[0.0, 1.0], disable_tqdm=True,
    )
    assert list(result.curves["step"]) == [1, 2]
    assert {"reward/outcome_reward", "reward/mixed_reward_0.2"} <= set(result.curves)
