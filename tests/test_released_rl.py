"""The RL stages on released data: each stage's prompts from its released set, and the rewards for real answers.

Everything reads the hand-written fixtures of the released layouts under
``tests/fixtures/released/``; no test downloads anything.
"""
from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cascadekit.chapters import cascade
from cascadekit.profiles import load_profile
from cascadekit.training import math_rl, released_rl, sft
from cascadekit.training.pipeline import chat_rl_dataset
from cascadekit.training.released_data import released_sets
from cascadekit.training.released_rl import (
    RL_SETS, ReleasedDataMissing, released_math_reward, released_records, released_reward, verdict,
)
from cascadekit.verify import released as checks
from cascadekit.verify.released import verify_gold_patch, verify_ifeval, verify_math, verify_stdio
from test_released_data import offline  # noqa: F401 - autouse: no test here reaches for the network

FIXTURES = Path(__file__).parent / "fixtures" / "released"
SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
GOLD_PATCH = json.loads((FIXTURES / "cascade-rl-swe" / "train.jsonl").read_text())["patch"]


@pytest.fixture
def no_math_verify(monkeypatch):
    monkeypatch.setattr(checks, "_installed", lambda: False)


def released_profile(data_dir: Path = FIXTURES, **overrides):
    return load_profile("small", {"engine.data": "released", "engine.data_dir": str(data_dir), **overrides})


def user(record: dict) -> str:
    (turn,) = record["messages"]
    assert turn["role"] == "user"
    return turn["content"]


# ---------------------------------------------------------------------------
# Each stage's prompts
# ---------------------------------------------------------------------------


def test_every_rl_stage_reads_its_released_set():
    profile = released_profile()
    rlhf = cascade.rlhf_records(profile, "half-half")
    assert [r["think"] for r in rlhf] == [True, False]  # half-half, fed in order
    assert user(rlhf[1]) == "Give me three tips for a first job interview. /no_think"
    ifrl = cascade.if_rl_records(profile, False)
    assert [r["domain"] for r in ifrl] == ["instructions"] * 2 and not any(r["think"] for r in ifrl)
    math = cascade.math_records(profile)
    assert [r["gold"]["answer"] for r in math] == ["2", "\\frac{5}{6}"] and all(r["think"] for r in math)
    code = cascade.code_rl_records(profile)
    assert [r["gold"]["tests"] for r in code] == [[["1 2\n", "3\n"], ["10 -4\n", "6\n"]],
                                                  [["abc\n", "cba\n"], ["x\n", "x\n"]]]
    (swe,) = released_records(profile, "swe", profile.swe_rl.prompts, True)
    assert swe["gold"]["context"] == {"utils.py": "def last(xs):\n    return xs[len(xs)]\n"}
    assert "utils.py\n```\ndef last(xs):" in user(swe) and user(swe).endswith("``` /think")
    for records in (rlhf, ifrl, math, code, [swe]):  # the toy stages' chat-record shape, ready for GRPO
        assert len(chat_rl_dataset(records)) == len(records)


def test_the_stage_sizes_take_the_first_rows():
    profile = released_profile(**{"rl.samples": 1})
    assert len(cascade.rlhf_records(profile, "think only")) == 1


def test_a_missing_domain_file_is_one_error_naming_the_set_and_the_file(tmp_path):
    profile = released_profile(tmp_path)
    with pytest.raises(ReleasedDataMissing) as info:
        cascade.math_records(profile)
    message = str(info.value)
    assert "cascade-rl-math (nvidia/Nemotron-Cascade-RL-Math)" in message
    assert f"no data files matching ['*.json', '*.jsonl'] under {tmp_path / 'cascade-rl-math'}" in message


def test_a_mixed_stage_skips_a_missing_domain_with_a_note(tmp_path):
    for name in ("cascade-rl-rlhf", "cascade-rl-math"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    with pytest.warns(UserWarning) as notes:
        pools = cascade.domain_pools(released_profile(tmp_path))
    assert sorted(pools) == ["general", "math"]
    skipped = sorted(str(n.message) for n in notes)
    assert len(skipped) == 3 and all(m.startswith("skipping domain") for m in skipped)
    assert any("'code'" in m and "cascade-rl-code" in m for m in skipped)
    with pytest.raises(FileNotFoundError, match="no released data could be read for any of the domains general, "
                                                "instructions, math, code, swe"), pytest.warns(UserWarning):
        cascade.domain_pools(released_profile(tmp_path / "empty"))


def test_released_sft_skips_a_missing_domain_with_a_note():
    """The SFT stage mixes domains too: the fixture of stage 2's set holds only its tool-calling file."""
    with pytest.warns(UserWarning) as notes:
        records = sft.stage_records(released_profile(**{"sft.stage2_tasks": 1}), 2)
    assert [r["domain"] for r in records] == ["tools"]
    skipped = sorted(str(n.message).split(":")[0] for n in notes)
    assert skipped == [f"skipping domain {d!r}" for d in sorted(["general", "math", "code", "instructions", "swe"])]


def test_the_released_stages_use_the_released_rewards():
    profile = released_profile()
    assert cascade.domain_reward(profile) is released_reward
    assert cascade.domain_reward(load_profile("toy")) is cascade.verifier_reward
    assert math_rl.math_reward(profile).__name__ == "released_math_0.5"
    assert math_rl.math_reward(load_profile("toy")).__name__ == "math_rl_reward_0.5"
    assert math_rl.math_reward(load_profile("toy", {"math_rl.step_credit": 0.8})).__name__ == "math_rl_reward_0.5_steps0.8"
    with pytest.raises(ValueError, match="step_credit"):  # released solutions are not in the toy's step format
        math_rl.math_reward(released_profile(**{"math_rl.step_credit": 0.8}))
    assert set(RL_SETS.values()) <= set(released_sets())


# ---------------------------------------------------------------------------
# Math
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, gold, score", [
    ("<think>2^10 = 1024</think>\nThe remainder is \\boxed{2}.", "2", 1.0),
    ("\\boxed{2.0}", "2", 1.0),
    ("\\boxed{\\dfrac{5}{6}}", "\\frac{5}{6}", 1.0),
    ("\\boxed{\\frac{5}{6}}", "\\frac{5}{7}", 0.0),
    ("<think>\\boxed{2}</think> I am not sure.", "2", 0.0),
    ("<think>never closed \\boxed{2}", "2", 0.0),
])
def test_math_without_math_verify_uses_the_kits_check(no_math_verify, text, gold, score):
    verdict_ = verify_math(text, gold)
    assert verdict_.score == score
    if "\\boxed" in checks.answer_part(text):
        assert verdict_.reason.startswith("math-verify not installed (pip install 'cascadekit[released]')")


def test_math_with_the_real_math_verify_on_the_main_thread_and_a_worker():
    cases = [("\\boxed{0.5}", "\\frac{1}{2}", 1.0), ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0), ("\\boxed{3}", "2", 0.0)]
    for text, gold, score in cases:
        said = "equivalent" if score else "not equivalent"
        assert verify_math(text, gold) == checks.Verdict(score, f"math-verify: {said} to {gold!r}")
    with ThreadPoolExecutor(2) as pool:
        assert [v.score for v in pool.map(lambda c: verify_math(c[0], c[1]), cases)] == [c[2] for c in cases]


def test_the_math_reward_penalises_a_format_switch():
    reward = released_math_reward(0.5)
    gold = json.dumps({"answer": "2"})
    assert reward(["p"] * 2, ["\\boxed{2}", "\\boxed{2}\n```python\nprint(2)\n```"], gold=[gold, gold]) == [1.0, 0.5]


# ---------------------------------------------------------------------------
# Code, IF, SWE
# ---------------------------------------------------------------------------


def test_code_runs_the_released_tests_in_the_sandbox():
    tests = [["1 2\n", "3\n"], ["10 -4\n", "6\n"]]
    good = verify_stdio(SUM, tests)
    assert good.score == 1.0 and good.reason == "2/2 tests: all 2 tests passed"
    wrong = verify_stdio("```python\nprint(3)\n```", tests)
    assert wrong.score == 0.0 and wrong.reason.startswith("1/2 tests: wrong answer on test 1")
    assert verify_stdio("no code here", tests).reason == "0/2 tests: no code found"
    assert verify_stdio(SUM, [["only stdin"]]).reason == "malformed gold tests: each must be a [stdin, stdout] pair"


def test_if_checks_the_released_constraints_it_knows():
    ids, kwargs = ["change_case:english_lowercase"], [{}]
    assert verify_ifeval("soft rain falls down", ids, kwargs).score == 1.0
    assert verify_ifeval("Soft rain", ids, kwargs).score == 0.0
    bullets = ["detectable_format:number_bullet_lists"]
    assert verify_ifeval("* a\n* b\n* c", bullets, [{"num_bullets": 3, "end_phrase": None}]).score == 1.0
    words = ["length_constraints:number_words"]
    assert verify_ifeval("one two three", words, [{"relation": "less than", "num_words": 4}]).score == 1.0
    assert verify_ifeval("one two three four", words, [{"relation": "less than", "num_words": 4}]).score == 0.0


def test_if_names_the_constraints_it_cannot_check():
    mixed = verify_ifeval("no commas here", ["punctuation:no_comma", "detectable_content:postscript_v2"],
                          [{}, {"postscript_marker": "P.S."}])
    assert mixed.score == 1.0 and "not checked: 'detectable_content:postscript_v2' (unknown instruction id)" \
        in mixed.reason
    unknown = verify_ifeval("text", ["language:response_dialect"], [{"language": "fr"}])
    assert unknown.score == 0.0 and unknown.reason.startswith("no instruction the kit can check")
    bad = verify_ifeval("text", ["detectable_format:number_bullet_lists"], [{}])
    assert bad.score == 0.0 and "(arguments: num_bullets is not an integer from 0 (got None))" in bad.reason
    assert verify_ifeval("text", "change_case:english_lowercase", []).reason.startswith("malformed gold")


def test_swe_scores_the_patch_against_the_gold_patch():
    assert verify_gold_patch(GOLD_PATCH, GOLD_PATCH).score == 1.0
    near = GOLD_PATCH.replace("len(xs) - 1]", "-1]")
    assert 0.5 < verify_gold_patch(near, GOLD_PATCH).score < 1.0
    assert verify_gold_patch("I would rewrite it.", GOLD_PATCH).reason.startswith("no readable patch")


def test_the_released_reward_scores_a_mixed_batch_by_domain(no_math_verify):
    golds = [{"answer": "2"}, {"tests": [["1 2\n", "3\n"]]}, {"instruction_id_list": ["punctuation:no_comma"],
             "kwargs": [{}]}, {"patch": GOLD_PATCH}, {"answer": "2"}]
    completions = ["\\boxed{2}", SUM, "no commas here", GOLD_PATCH, "\\boxed{3}"]
    domains = ["math", "code", "instructions", "swe", "math"]
    scores = released_reward(["p"] * 5, completions, domain=domains, gold=[json.dumps(g) for g in golds])
    assert scores == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert released_reward(["p"], ["x"], domain=["math"], gold=["{not json"]) == [0.0]
    assert verdict("general", {}, "hi").reason.startswith("no released verifier for domain 'general'")
    with pytest.raises(ValueError, match="needs 'domain' and 'gold' dataset columns"):
        released_reward(["p"], ["x"], domain=["math"])


def test_each_rl_builder_of_the_table_trains_on_its_released_set(monkeypatch, tmp_path):
    """The TABLE's builders (Math RL's is run for real under two ranks in test_distributed) on released data."""
    runs = {}

    def fake_grpo(start, records, profile, work_dir, reward=None, **kwargs):
        runs[work_dir.name] = ({r["domain"] for r in records}, len(records), reward)
        return start

    monkeypatch.setattr(cascade, "chat_grpo", fake_grpo)
    monkeypatch.setattr(released_rl, "chat_grpo", fake_grpo)
    monkeypatch.setattr(cascade, "largest_reward_model", lambda profile: "reward model")
    monkeypatch.setattr(cascade, "RewardModelScore", lambda model: f"score by the {model}")
    monkeypatch.setattr(cascade, "judge", lambda profile: pytest.fail("the released SWE RL trains no judge"))
    profile = released_profile()
    for name in ("RLHF", "IF-RL", "Code RL", "SWE RL"):
        spec = cascade.STAGES[name]
        runs_, last, _ = spec.build("start", profile, tmp_path / spec.slug)
        assert last == "start" and len(runs_) == 1
    assert runs == {"rlhf": ({"general"}, 2, "score by the reward model"),
                    "if-rl": ({"instructions"}, 2, released_reward), "code-rl": ({"code"}, 2, released_reward),
                    "swe-rl": ({"swe"}, 1, released_reward)}


def test_a_released_math_run_refuses_to_start_without_math_verify(no_math_verify):
    """Math RL (its reward, its rows) and a joint run that mixes in math stop before anything trains, in one line."""
    line = "released math needs math-verify, which is not installed: pip install 'cascadekit[released]'"
    profile = released_profile()
    for start in (lambda: released_math_reward(0.5), lambda: math_rl.math_reward(profile),
                  lambda: cascade.math_records(profile), lambda: cascade.domain_pools(profile)):
        with pytest.raises(checks.MathVerifyMissing) as refused:
            start()
        assert str(refused.value) == line and isinstance(refused.value, ValueError)  # the CLI's one-line errors
    assert verify_math("\\boxed{7}", "7").reason.startswith("math-verify not installed")  # a lone verdict still judges


def test_the_math_reward_sends_the_batch_to_math_verify_at_once(monkeypatch):
    batches = []
    monkeypatch.setattr(released_rl, "verify_math_batch", lambda texts, answers: batches.append(len(texts)) or
                        [checks.Verdict(1.0, "stub")] * len(texts))
    reward = released_math_reward(0.0)
    assert reward(["p"] * 3, ["\\boxed{1}"] * 3, gold=[json.dumps({"answer": "1"})] * 3) == [1.0] * 3
    assert batches == [3]


def test_released_math_rl_streams_its_rewards_while_the_batch_generates(monkeypatch, tmp_path):
    """Released Math RL verifies each rollout as it ends (math-verify's workers), as Code RL does; the toy does not."""
    calls = []
    monkeypatch.setattr(math_rl, "chat_grpo", lambda start, records, profile, work_dir, **kwargs: calls.append(kwargs))
    records = cascade.math_records(released_profile())
    for profile, workers in ((released_profile(), checks.MATH_VERIFY_WORKERS), (load_profile("toy"), 0)):
        calls.clear()
        math_rl.length_extension("start", records, profile, tmp_path, filtering=False)
        assert calls and {c["workers"] for c in calls} == {workers}


def test_streamed_released_math_rewards_equal_the_batched_ones_and_a_hostile_answer_scores_0(monkeypatch):
    """Streamed rewards judge each rollout on a reward thread: math-verify's bound holds there (1 s here: the
    hostile answer never finishes; a right answer over it would still score 1 by the kit's check)."""
    from cascadekit.training.async_rewards import StreamingRewards

    class Chars:  # a tokenizer whose ids are the characters
        def decode(self, ids, skip_special_tokens=False):
            return "".join(map(chr, ids))

    monkeypatch.setattr(checks, "MATH_VERIFY_TIMEOUT_S", 1)
    reward = released_math_reward(0.5)
    texts = ["<think>half</think>\\boxed{0.5}", "\\boxed{2^{2^{64}}}", "\\boxed{3}",
             "\\boxed{\\frac{1}{2}}\n```python\nprint(1)\n```"]
    columns = {"domain": ["math"] * 4, "gold": [json.dumps({"answer": "\\frac{1}{2}"})] * 4}
    blocking = reward(["p"] * 4, texts, **columns)
    with StreamingRewards(reward, Chars(), workers=2) as streamed:
        got = streamed(["p"] * 4, texts, completion_ids=[[ord(c) for c in t + "<|im_end|>"] for t in texts], **columns)
    assert got == blocking == [1.0, 0.0, 0.0, 0.5]


def test_a_released_instruction_run_refuses_to_start_without_ifevals_checks(monkeypatch):
    """Without langdetect, NLTK and Punkt five IFEval ids would go unchecked in every verdict: refuse, in one line."""
    from cascadekit.verify import ifeval

    def missing():
        raise ImportError("No module named 'langdetect'")

    monkeypatch.setattr(ifeval, "_punkt", missing)
    with pytest.raises(ValueError) as refused:
        released_rl.released_records(released_profile(), "instructions", 2, None)
    line = str(refused.value)
    assert "\n" not in line and "pip install 'cascadekit[ifeval]'" in line and "langdetect" in line
