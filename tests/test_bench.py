"""``cascadekit bench``: one verb for the benchmarks, per-phase GRPO times for the kit and bare TRL, one-line errors."""
from __future__ import annotations

import pytest

from cascadekit import cli
from cascadekit.training.grpo_benchmark import PHASES, PhaseClock, _model, _tokenizer, matmul_flops_per_token, run
from cascadekit.profiles import load_profile


def test_bad_bench_arguments_are_one_line_and_exit_2(capsys):
    for argv in (["bench"], ["bench", "nope"], ["bench", "grpo", "--bogus"], ["bench", "grpo", "--steps", "1"],
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


def test_phase_clock_refuses_a_trainer_it_cannot_time():
    with pytest.raises(RuntimeError, match="moved"):
        PhaseClock().attach(object())
