"""The kit's decode loop against ``model.generate``: the same greedy tokens, the same sampling distribution."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from cascadekit.bench.decode import suite_prompts
from cascadekit.chat import render, stop_token_ids
from cascadekit.engine.decode import PREFILL_ROWS, Sampling, decode, supports
from cascadekit.engine.runtime import load_model, load_tokenizer
from cascadekit.chapters import resolve
from cascadekit.training.chat_base import chat_base

PAD, STOP = 0, 1
#: The 0.999 quantile of the chi-square distribution for 1..20 degrees of freedom (so no scipy is needed).
CHI2_999 = [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
            31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82, 45.31]


def tiny(architecture: str = "qwen3", vocab: int = 24, seed: int = 0, init: float = 0.5) -> torch.nn.Module:
    """A random two-layer model; the default large weights separate its logits (no argmax near-ties)."""
    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture]
    config = config_cls(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                        initializer_range=init, tie_word_embeddings=True, pad_token_id=PAD, eos_token_id=STOP,
                        bos_token_id=STOP)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    if architecture == "qwen2":  # Qwen2's q/k/v biases start at zero: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, init)
    return model


def with_generate(model: torch.nn.Module, prompts: list[list[int]], max_new_tokens: int, stop: list[int],
                  pad: int = PAD, **options: object) -> list[list[int]]:
    """``generate`` on the left-padded prompts, each row cut after its first stop token."""
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, eos_token_id=stop,
                             pad_token_id=pad, **options)
    rows = out[:, width:].tolist()
    return [row[:next((k + 1 for k, t in enumerate(row) if t in stop), len(row))] for row in rows]


def random_prompts(n: int, vocab: int, seed: int) -> list[list[int]]:
    rng = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (n,), generator=rng).tolist()
    return [torch.randint(2, vocab, (k,), generator=rng).tolist() for k in lengths]


@pytest.mark.parametrize("architecture", ["qwen3", "qwen2"])
def test_greedy_tokens_are_generates_token_for_token(architecture):
    model = tiny(architecture)
    prompts = random_prompts(40, 24, seed=1)
    expected = with_generate(model, prompts, 30, [STOP], do_sample=False)
    assert decode(model, prompts, 30, [STOP], pad_id=PAD) == expected
    assert any(row[-1] == STOP for row in expected) and any(row[-1] != STOP for row in expected)  # both endings ran


def test_greedy_tokens_of_the_toy_chat_base_are_generates():
    """Part II's toy model (the shipped chat base of chapter 08's world) on its tokenizer's prompts, distinct and as
    groups."""
    folder = chat_base(resolve("08", "toy").profile).checkpoint
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    stop, pad = stop_token_ids(tokenizer), tokenizer.pad_token_id
    texts = [render([{"role": "user", "content": content}], add_generation_prompt=True, prefill_empty_think=False)
             for content in ("What is 3 plus 4? /think", "Name a city. /no_think", "Write a function adding two numbers.")]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    expected = with_generate(model, prompts, 40, stop, pad, do_sample=False)
    assert decode(model, prompts, 40, stop, pad_id=pad) == expected
    grouped = decode(model, prompts, 40, stop, pad_id=pad, group=3)
    assert grouped == [row for row in expected for _ in range(3)]


def test_the_stage_table_shape_is_generates_token_for_token():
    """64 distinct stage-table prompts of different lengths, greedy, rows ending apart: ``generate``'s tokens.

    More prompts than one prefill run holds, so the runs' keys are put back at the common width;
    rows stop at many different steps (finished rows leave the batch) and some reach the budget.
    """
    profile = resolve("08", "toy").profile
    folder = chat_base(profile).checkpoint
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    stop, pad = stop_token_ids(tokenizer), tokenizer.pad_token_id
    prompts = suite_prompts(profile, tokenizer, 64)
    expected = with_generate(model, prompts, 40, stop, pad, do_sample=False)  # a few of its answers run longer
    assert decode(model, prompts, 40, stop, pad_id=pad) == expected
    assert len(prompts) > 2 * PREFILL_ROWS and len(set(map(len, prompts))) > 10
    ended = [len(row) for row in expected if row[-1] in stop]
    assert len(set(ended)) > 10 and len(ended) < len(expected)


def test_a_group_is_its_prompt_repeated_greedy_and_sampled():
    """``group=G`` (one prefill per prompt) gives what the repeated prompts give, draw for draw."""
    model = tiny()
    prompts = random_prompts(5, 24, seed=3)
    repeated = [p for p in prompts for _ in range(4)]
    assert decode(model, prompts, 20, [STOP], group=4) == decode(model, repeated, 20, [STOP])
    sampling = Sampling(temperature=1.0)
    grouped = decode(model, prompts, 30, [STOP], sampling, generator=torch.Generator().manual_seed(5), group=4)
    assert grouped == decode(model, repeated, 30, [STOP], sampling, generator=torch.Generator().manual_seed(5))
    assert len({len(row) for row in grouped}) > 3  # rows of one group stopped apart: the grid lost rows


def test_greedy_tokens_alone_are_the_tokens_inside_a_large_batch():
    """A GRPO step at 64 prompts x 8 decodes each prompt beside 511 other rows: greedy, that changes no token."""
    model = tiny(seed=1)  # its rows stop at many lengths
    crowd = random_prompts(64, 24, seed=11)
    alone = [decode(model, [prompt], 40, [STOP]) for prompt in crowd[::9]]
    assert decode(model, crowd, 40, [STOP])[::9] == [rows[0] for rows in alone]
    grouped = decode(model, crowd, 40, [STOP], group=8)
    assert [grouped[8 * p:8 * p + 8] for p in range(0, 64, 9)] == [rows * 8 for rows in alone]
    assert len({len(rows[0]) for rows in alone}) > 2  # rows stopped apart, so the batch compacted around them


def test_a_trainers_policy_stays_in_training_mode():
    model = tiny().train()
    decode(model, [[2, 3]], 4, [STOP])
    assert model.training


def test_rows_stop_at_their_stop_token_and_at_the_budget():
    model = tiny()
    for row in decode(model, random_prompts(16, 24, seed=2), 7, [STOP], pad_id=PAD):
        assert len(row) <= 7 and STOP not in row[:-1]


def test_each_row_is_heard_the_step_it_stops_and_a_row_cut_at_the_budget_is_not():
    """``on_finished`` hears a stopped row once, at its stop step (so in order of length), with the result's ids."""
    heard: list[tuple[int, list[int]]] = []
    stops = [STOP, 5, 7, 9]  # several stop ids: rows stop at many different steps, two at the budget
    out = decode(tiny(), random_prompts(6, 24, seed=4), 12, stops, Sampling(temperature=1.0),
                 generator=torch.Generator().manual_seed(5), group=3, on_finished=lambda r, ids: heard.append((r, ids)))
    stopped = {r for r, row in enumerate(out) if row[-1] in stops}
    assert [r for r, _ in heard if r in stopped] == [r for r, _ in heard] and {r for r, _ in heard} == stopped
    assert all(ids == out[r] for r, ids in heard)
    lengths = [len(ids) for _, ids in heard]
    assert lengths == sorted(lengths) and len(set(lengths)) > 1 and len(stopped) < len(out)


def chi2_two_sample(a: Counter, b: Counter) -> tuple[float, int]:
    """The chi-square statistic of two samples of equal size over the cells either saw, and its degrees of freedom."""
    cells = sorted(set(a) | set(b))
    stat = sum((a[c] - b[c]) ** 2 / (a[c] + b[c]) for c in cells)
    return stat, len(cells) - 1


def sampled_pair(sampling: Sampling, generate_temperature: float, group: int) -> tuple[float, int]:
    """The chi-square statistic of 4000 two-token sequences: ``generate`` at one temperature, the loop at ``sampling``."""
    model = tiny(vocab=5, init=0.3)  # peaked: a wrong temperature shows (see the test below)
    torch.manual_seed(0)
    expected = with_generate(model, [[2, 3, 4]] * 4000, 2, [STOP], do_sample=True, temperature=generate_temperature,
                             top_p=sampling.top_p, top_k=sampling.top_k)
    ours = decode(model, [[2, 3, 4]] * (4000 // group), 2, [STOP], sampling, pad_id=PAD,
                  generator=torch.Generator().manual_seed(1), group=group)
    return chi2_two_sample(Counter(map(tuple, ours)), Counter(map(tuple, expected)))


@pytest.mark.parametrize("sampling", [Sampling(temperature=1.0), Sampling(temperature=0.7, top_p=0.9),
                                      Sampling(temperature=1.3, top_k=3)])
@pytest.mark.parametrize("group", [1, 8])
def test_sampled_sequences_follow_generates_distribution(sampling, group):
    stat, df = sampled_pair(sampling, sampling.temperature, group)
    assert df >= 3 and stat < CHI2_999[df - 1], (stat, df)


def test_the_distribution_test_rejects_a_wrong_temperature():
    """The loop at 1.3 against ``generate`` at 1.0, at the same sample size: told apart."""
    stat, df = sampled_pair(Sampling(temperature=1.3), 1.0, group=8)
    assert stat > CHI2_999[df - 1], (stat, df)


def test_what_the_loop_does_not_run_is_one_clear_error():
    model = tiny()
    with pytest.raises(ValueError, match="empty prompt"):
        decode(model, [[2], []], 4, [STOP])
    with pytest.raises(ValueError, match="vocabulary"):
        decode(model, [[2, 99]], 4, [STOP])
    with pytest.raises(ValueError, match="group"):
        decode(model, [[2]], 4, [STOP], group=0)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="Qwen2/Qwen3"):
        decode(torch.nn.Linear(2, 2), [[2]], 4, [STOP])
    assert not supports(torch.nn.Linear(2, 2))
    assert decode(model, [[2, 3]], 0, [STOP], group=2) == [[], []]
