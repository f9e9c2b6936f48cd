"""Each distinct rollout of a batch is verified once: the rewards equal verifying every rollout, for every adapter."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cascadekit import rewards as rewards_module
from cascadekit.artifacts import write_manifest
from cascadekit.chat import END_OF_TURN
from cascadekit.domains import chat_record, domains, draw_tasks, gold_answer, prompt_text
from cascadekit.rewards import (
    math_rl_reward, mixed_reward, once_per_completion, outcome_reward, process_reward, reading_markup, strict_reward,
    verifier_reward,
)
from cascadekit.training.async_rewards import StreamingRewards
from cascadekit.training.swe_judge import SemanticJudge
from cascadekit.training.swe_rl import execution_free_reward, execution_reward, lexical_reward
from cascadekit.world import generate_problem

PART_II = ["general", "instructions", "math", "code", "swe"]  # the single-turn domains GRPO trains on


class CharTokenizer:
    """Ids are code points: enough for :func:`reading_markup` and :class:`StreamingRewards` to decode."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text + END_OF_TURN]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))


def _batch(name: str) -> tuple[list[str], list[str], dict[str, list]]:
    """Eight rollouts over two prompts, four distinct: each prompt's gold answer and a wrong one, each twice."""
    tasks = draw_tasks(domains()[name], 2, 0, "rl", [2, 3])
    records = [chat_record(task, True) for task in tasks]
    prompts, texts, golds = [], [], []
    for record in records:
        for text in (gold_answer(record), "<think>\n</think>\n\nno idea") * 2:
            prompts.append(prompt_text(record))
            texts.append(text)
            golds.append(json.dumps(record["gold"]))
    return prompts, texts, {"domain": [name] * len(texts), "gold": golds}


def _counting(inner, calls: list[int]):
    def counted(*args, **kwargs):
        calls[0] += 1
        return inner(*args, **kwargs)

    return counted


def _counted(monkeypatch, domain: str) -> list[int]:
    """Count the calls of ``domain``'s verifier, leaving what it returns alone."""
    calls = [0]
    monkeypatch.setitem(domains(), domain, dataclasses.replace(domains()[domain],
                                                              judge=_counting(domains()[domain].judge, calls)))
    return calls


def _one_by_one(reward, prompts, texts, columns) -> list[float]:
    return [reward([p], [t], **{k: [v[i]] for k, v in columns.items()})[0] for i, (p, t) in enumerate(zip(prompts, texts))]


@pytest.mark.parametrize("name", PART_II)
def test_the_chat_reward_equals_verifying_every_rollout_and_verifies_each_distinct_one_once(name, monkeypatch):
    prompts, texts, columns = _batch(name)
    expected = _one_by_one(verifier_reward, prompts, texts, columns)
    assert expected[0] == 1.0 and len(set(expected)) > 1  # the batch holds right and wrong answers
    calls = _counted(monkeypatch, name)
    tokenizer = CharTokenizer()
    read = reading_markup(verifier_reward, tokenizer)
    got = read(prompts, texts, completion_ids=[tokenizer.encode(t) for t in texts], **columns)
    assert got == expected and calls[0] == 4 and read.__name__ == "verifier_reward"


def test_math_rl_reward_is_memoised_by_the_chat_path(monkeypatch):
    prompts, texts, columns = _batch("math")
    texts[2] = texts[3] = texts[0] + "\n```python\nprint(1)\n```"  # a right answer that switches format
    reward = math_rl_reward(0.5)
    expected = _one_by_one(reward, prompts, texts, columns)
    calls = _counted(monkeypatch, "math")
    tokenizer = CharTokenizer()
    got = reading_markup(reward, tokenizer)(prompts, texts, completion_ids=[tokenizer.encode(t) for t in texts],
                                            **columns)
    assert got == expected and got[2:4] == [0.5, 0.5] and calls[0] == 5  # 3 distinct for prompt 1, 2 for prompt 2


def test_different_ids_or_rows_are_never_merged():
    seen = []

    def reward(prompts, completions, **kwargs):
        seen.append(len(completions))
        return [float(len(c) + sum(kwargs["completion_ids"][i]) + kwargs["gold"][i]) for i, c in enumerate(completions)]

    memo = once_per_completion(reward)
    got = memo(["p", "p", "p", "q"], ["a", "a", "a", "a"], completion_ids=[[1], [2], [1], [1]], gold=[0, 0, 0, 0])
    assert got == [2.0, 3.0, 2.0, 2.0] and seen == [3]  # the third repeats the first; the prompt tells q apart


@pytest.mark.parametrize("reward", [outcome_reward, process_reward, strict_reward, mixed_reward(0.2)])
def test_dag_rewards_judge_each_distinct_completion_once(reward, monkeypatch):
    problem = generate_problem(5, "A", seed=3, style="compact")
    right = problem.training_text.removeprefix(problem.rl_prompt)
    completions = [right, "Answer: 1", right, {"role": "assistant", "content": right}, "Answer: 1", ""]
    gold = [problem.to_dict()] * len(completions)
    prompts = [problem.rl_prompt] * len(completions)
    expected = [reward.__wrapped__([p], [c], gold=[g])[0] for p, c, g in zip(prompts, completions, gold)]
    calls = [0]
    monkeypatch.setattr(rewards_module, "judge", _counting(rewards_module.judge, calls))
    assert reward(prompts, completions, gold=gold) == expected and expected[0] == 1.0
    assert calls[0] == 3  # the conversation's text is the first completion's


def test_the_swe_rewards_and_watched_execution_verify_each_distinct_patch_once(monkeypatch):
    prompts, texts, columns = _batch("swe")
    truth = execution_reward(2)
    expected = {r.__name__: _one_by_one(r, prompts, texts, columns) for r in (truth, lexical_reward)}
    calls = _counted(monkeypatch, "swe")
    tokenizer = CharTokenizer()
    ids = [tokenizer.encode(t) for t in texts]
    for reward in (truth, lexical_reward):
        assert reading_markup(reward, tokenizer)(prompts, texts, completion_ids=ids, **columns) == expected[reward.__name__]
    assert calls[0] == 4 and expected["swe_execution"][:2] == [1.0, 0.0]


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory) -> SemanticJudge:
    """A random two-way judge over one-character tokens, saved as a judge stage's checkpoint."""
    from transformers import Qwen3Config, Qwen3ForSequenceClassification
    from cascadekit.bench.grpo import _tokenizer
    tokenizer = _tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForSequenceClassification(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=4096, num_labels=2, pad_token_id=0))
    folder = Path(tmp_path_factory.mktemp("judge"))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_manifest(folder, "swe-judge", "tiny")  # an entry: the judge's name holds its content
    return SemanticJudge(SimpleNamespace(checkpoint=folder, key="tiny"))


def test_the_judge_reads_each_distinct_text_once_a_step_though_two_rewards_ask_it(tiny_judge):
    prompts, texts, columns = _batch("swe")
    texts[1] = texts[3] = "1+1=2"  # the char vocabulary's own text, so the judge's P(YES) differs by rollout
    expected = [SemanticJudge.__call__(tiny_judge, [p], [t])[0] for p, t in zip(prompts, texts)]
    tiny_judge._last.clear()
    before = tiny_judge.judged
    free = execution_free_reward(tiny_judge, 0.5)
    tokenizer = CharTokenizer()
    ids = [tokenizer.encode(t) for t in texts]
    trained = reading_markup(free, tokenizer)(prompts, texts, completion_ids=ids, **columns)
    watched = reading_markup(tiny_judge, tokenizer)(prompts, texts, completion_ids=ids, **columns)
    assert tiny_judge.judged - before == 4  # four distinct rollouts, judged once for both rewards
    assert watched == pytest.approx(expected, abs=1e-5) and len(set(round(p, 6) for p in expected)) > 1
    lexical = _one_by_one(lexical_reward, prompts, texts, columns)
    assert trained == pytest.approx([0.5 * x + 0.5 * y for x, y in zip(lexical, expected)], abs=1e-5)
    next_step = reading_markup(tiny_judge, tokenizer)(prompts[:1], ["2+2=4"], completion_ids=[tokenizer.encode("2+2=4")],
                                                      **{k: v[:1] for k, v in columns.items()})
    assert tiny_judge.judged - before == 5 and len(next_step) == 1 and len(tiny_judge._last) == 1  # one step kept


def test_streamed_rewards_verify_each_distinct_rollout_once(monkeypatch):
    prompts, texts, columns = _batch("code")
    expected = _one_by_one(verifier_reward, prompts, texts, columns)
    calls = _counted(monkeypatch, "code")
    tokenizer = CharTokenizer()
    with StreamingRewards(verifier_reward, tokenizer, workers=2) as streamed:
        got = streamed(prompts, texts, completion_ids=[tokenizer.encode(t) for t in texts], **columns)
    assert got == expected and calls[0] == 4
    assert streamed.stats["repeats"] == 4 and streamed.stats["completions"] == 8
