"""GRPO's training forward, each prompt once, completions in trimmed chunks: TRL's log-probs, entropies, gradients."""
from __future__ import annotations

import torch
from datasets import Dataset
from trl import GRPOTrainer

from cascadekit.profiles import load_profile
from cascadekit.training import grpo
from cascadekit.training.trimmed import length_chunks, trim_padding
from test_grpo import tiny_model, tiny_tokenizer  # one character per token, a one-layer Qwen3


def count_ones(completions, **kwargs):
    return [float(c.count("1")) for c in completions]


def trainer(tmp_path, rollouts: str, forward: str = "kit") -> GRPOTrainer:
    profile = load_profile("smoke", {"rl.max_completion_length": 12, "rl.temperature": 0.7,
                                     "engine.rollouts": rollouts, "engine.training_forward": forward})
    config = grpo.build_grpo_config(profile, str(tmp_path), max_steps=1, disable_tqdm=True)
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i}=" for i in range(8)]})
    return grpo.make_grpo_trainer(tiny_model(), tiny_tokenizer(), dataset, count_ones, config,
                                  rollout_func=grpo.choose_rollouts(profile, profile.rl),
                                  kit_forward=profile.engine.training_forward == "kit")


def padded_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """TRL's layout: 4 prompts of 1-6 tokens left-padded, 3 rollouts each of 1-10 tokens right-padded."""
    rng = torch.Generator().manual_seed(seed)
    prompt, completion = 6, 10
    prompt_lengths = torch.randint(1, prompt + 1, (4,), generator=rng).repeat_interleave(3)
    completion_lengths = torch.randint(1, completion + 1, (12,), generator=rng)
    completion_lengths[0], completion_lengths[1] = 1, completion  # the shortest and the longest
    columns = torch.arange(prompt + completion)
    mask = ((columns >= prompt - prompt_lengths[:, None]) & (columns < prompt + completion_lengths[:, None])).long()
    ids = torch.randint(3, 19, (12, prompt + completion), generator=rng)
    ids[:, :prompt] = ids[::3, :prompt].repeat_interleave(3, 0)  # a group's rollouts share its prompt
    return ids * mask, mask, completion


def test_the_kit_forward_is_chosen_by_its_setting_and_trls_own_is_the_default(tmp_path):
    assert "_get_per_token_logps_and_entropies" in vars(trainer(tmp_path, "kit"))  # the instance's own: wrapped
    assert "_get_per_token_logps_and_entropies" in vars(trainer(tmp_path, "generate"))
    assert "_get_per_token_logps_and_entropies" not in vars(trainer(tmp_path, "kit", "trl"))


def test_the_kit_forward_enters_a_grpo_key_only_when_set():
    """The shipped stages were trained by TRL's padded forward: at the default their keys (and bytes) stay."""
    from cascadekit.training.rollouts import forward_inputs

    assert load_profile("toy").engine.training_forward == "trl" and forward_inputs(load_profile("toy")) == {}
    assert forward_inputs(load_profile("toy", {"engine.training_forward": "kit"})) == {"training_forward": "kit"}


def test_chunks_hold_every_row_once_in_length_order_within_the_token_budget():
    start = torch.tensor([0, 3, 1, 0, 5, 2, 0])
    end = torch.tensor([9, 6, 9, 4, 9, 9, 9])
    chunks = length_chunks(start, end, tokens=14)
    rows = torch.cat(chunks).tolist()
    assert sorted(rows) == list(range(7)) and len(chunks) > 2
    spans = (end - start)[torch.tensor(rows)].tolist()
    assert spans == sorted(spans)
    for chunk in chunks:
        assert len(chunk) == 1 or len(chunk) * int(end[chunk].max() - start[chunk].min()) <= 14


def test_trimmed_chunks_give_trls_log_probs_entropies_and_gradients(tmp_path):
    kit = trainer(tmp_path, "generate")
    model = kit.model
    ids, mask, completion = padded_batch()
    full = GRPOTrainer._get_per_token_logps_and_entropies.__get__(kit)
    trim_padding(kit, tokens=40)  # several chunks
    results = []
    for method in (full, kit._get_per_token_logps_and_entropies):
        model.zero_grad()
        logps, entropies, aux = method(model, ids, mask, completion, compute_entropy=True)
        (logps.sum() + entropies.sum()).backward()
        results.append((logps.detach(), entropies.detach(), aux,
                        [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (want_logps, want_entropies, _, want_grads), (logps, entropies, aux, grads) = results
    assert aux is None and logps.shape == want_logps.shape == (12, completion)
    completion_mask = mask[:, -completion:].bool()
    assert (logps[~completion_mask] == 0).all() and (entropies[~completion_mask] == 0).all()
    torch.testing.assert_close(logps, want_logps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropies, want_entropies, atol=1e-5, rtol=1e-5)
    assert len(grads) == len(want_grads)
    for got, want in zip(grads, want_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
