"""``cascadekit bench``: one verb for the benchmarks, per-phase GRPO times for the kit and bare TRL, one-line errors."""
from __future__ import annotations

import pytest

from cascadekit import cli
from cascadekit.bench.grpo import PHASES, PhaseClock, _model, _tokenizer, matmul_flops_per_token, run
from cascadekit.profiles import load_profile


def test_bad_bench_arguments_are_one_line_and_exit_2(capsys):
    for argv in (["bench"], ["bench", "nope"], ["bench", "grpo", "--bogus"], ["bench", "grpo", "--steps", "1"],
                 ["bench", "grpo", "--prompts", "8,x"], ["bench", "grpo", "--prompts", "8,0"],
                 ["bench", "rewards", "--repeats", "0"],
                 ["bench", "train", "--steps", "x"]):
        with pytest.raises(SystemExit) as exit_:
            code = cli.main(argv)
            raise SystemExit(code)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "error" in err, argv


def test_flops_per_token_count_the_matmul_weights_once():
    model = _model(load_profile("smoke"), len(_tokenizer()))
    embedding = model.get_input_embeddings().weight.numel()
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # smoke ties them
    assert matmul_flops_per_token(model) == 2 * sum(p.numel() for p in model.parameters())
    untied = _model(load_profile("smoke", {"model.tie_embeddings": False}), len(_tokenizer()))
    assert matmul_flops_per_token(untied) == 2 * (sum(p.numel() for p in untied.parameters()) - embedding)


def test_the_grpo_bench_splits_each_step_into_its_phases_for_kit_and_bare_trl():
    out = run(load_profile("smoke", {"rl.max_completion_length": 16}), steps=3, repeats=1)
    assert out["same_rewards"] and out["steps_measured"] == 2 and out["peak_gflops"] > 0
    for which in ("bare", "kit"):
        phases = out[f"{which}_phases"]
        assert set(phases) == set(PHASES) and phases["generate"] > 0 and phases["forward_backward"] > 0
        assert phases["optimizer"] > 0 and 0 < out[f"{which}_generate_peak"] < 1 and 0 < out[f"{which}_train_peak"] < 1


def test_the_grpo_bench_gives_bare_trl_the_kit_rollout_path_under_rollouts_kit(monkeypatch):
    from cascadekit.training import rollouts
    calls = []
    decode = rollouts.decode
    monkeypatch.setattr(rollouts, "decode", lambda *a, **k: calls.append(1) or decode(*a, **k))
    out = run(load_profile("smoke", {"rl.max_completion_length": 16, "engine.rollouts": "kit"}), steps=3, repeats=1)
    assert out["same_rewards"] and out["bare_phases"]["generate"] > 0 and out["kit_phases"]["generate"] > 0
    assert len(calls) == 2 * 3  # every step of both runs rolled out by the kit's loop


def test_the_batch_shape_bench_times_each_shape_with_trls_padded_forward_and_the_kits_trimmed_one(monkeypatch):
    from cascadekit.bench import grpo as bench
    padded = []
    kit = bench._kit
    monkeypatch.setattr(bench, "_kit", lambda *a, **k: padded.append(k["padded"]) or kit(*a, **k))
    out = bench.scaling(load_profile("smoke", {"rl.max_completion_length": 16, "engine.rollouts": "kit"}), [1, 3],
                        steps=2, repeats=2)
    assert list(out) == [(1, "padded"), (1, "trimmed"), (3, "padded"), (3, "trimmed")]
    assert padded == [True, False, True, False, False, True, False, True]  # alternating order, both forwards
    for row in out.values():
        assert row["rollout_s"] > 0 and 0 < row["step_peak"] < 1 and row["generate_s"] > 0
        assert row["forward_backward_s"] > 0 and row["step_s"] >= row["generate_s"] + row["forward_backward_s"]


def test_phase_clock_refuses_a_trainer_it_cannot_time():
    with pytest.raises(RuntimeError, match="moved"):
        PhaseClock().attach(object())


def test_the_reward_bench_builds_groups_with_the_asked_share_of_distinct_rollouts():
    from cascadekit.bench.reward_memo import _groups
    for share, distinct in ((0.5, 4), (0.27, 2), (0.01, 1), (1.0, 5)):
        groups = _groups([list("abcde")] * 3, 8, share, 0)
        assert all(len(g) == 8 and len(set(g)) == distinct for g in groups)


def test_the_reward_bench_scores_a_code_step_alike_both_ways():
    from cascadekit.rewards import reading_markup, verifier_reward
    from cascadekit.bench.reward_memo import _every_rollout, _Ids, code_batch, compare
    batch = code_batch(load_profile("smoke"), 0.5)
    assert len(set(zip(batch[0], batch[1]))) == 4 and len(batch[1]) == 8  # smoke: 2 prompts x 4 rollouts, 2 distinct each
    out = compare({"every rollout": [_every_rollout(verifier_reward)],
                   "distinct once": [reading_markup(verifier_reward, _Ids())]}, batch, 1)
    # times are measured, never asserted on: the programs run in the sandbox's own processes, so this process's
    # CPU time for a smoke batch can round to 0 (no test depends on the machine's speed or load)
    assert out["same"] and all(wall >= 0 and cpu >= 0 for wall, cpu in (out["every rollout"], out["distinct once"]))


def test_bench_parity_collects_each_harness_count_line() -> None:
    """Issue 55: the parity counts are in ``cascadekit bench`` output; each parity test prints its line."""
    from cascadekit.bench import parity
    from cascadekit.codeversion import REPO_DIR

    out = "x\nparity: a vs b: 3/3 agree\n.. [100%]\n  parity: c vs d: 1/2 agree  \n"
    assert parity.parity_lines(out) == ["parity: a vs b: 3/3 agree", "parity: c vs d: 1/2 agree"]
    for test in parity.PARITY_TESTS:
        assert 'print(f"\\nparity: ' in (REPO_DIR / test).read_text(), test
