"""Look inside RL (issue 58 part 2): the group inspector and the token view, their callbacks called directly.

A browser drives the same widgets in tests/test_widgets_browser.py.
"""
from __future__ import annotations

import IPython.display
import pytest
import torch
from trl.trainer.utils import RepeatSampler

from cascadekit.course import inspect_rl, widgets
from cascadekit.course.chat import load_shipped
from cascadekit.domains import records_digest


@pytest.mark.parametrize("shuffled", [False, True])
def test_feed_order_is_trls_sampler_order(shuffled):
    # TRL's own sampler, one prompt per slot: the order the trainer fed the prompts in.
    reference = list(RepeatSampler(list(range(40)), mini_repeat_count=1, batch_size=8, shuffle=shuffled, seed=3))
    assert inspect_rl.feed_order(40, shuffled, 3) == reference


def test_step_records_rebuild_the_pool_the_stage_trained_on():
    first, second = inspect_rl.step_records("Code RL", 0, 1), inspect_rl.step_records("Code RL", 0, 2)
    assert len(first) == len(second) == inspect_rl.stage_json("Code RL", 0)["inputs"]["rl"]["prompts_per_step"]
    assert {r["domain"] for r in first} == {"code"}
    assert not {records_digest([r]) for r in first} & {records_digest([r]) for r in second}


def test_history_line_reads_the_quarters_and_the_loss_size():
    curves = [{"reward": r, "loss": l, "grad_norm": 0.5} for r, l in [(0.1, 0.01), (0.3, -0.03), (0.5, 0.0),
                                                                      (0.7, 0.02)]]
    line = inspect_rl.history_line(curves)
    assert "from 0.100 (first quarter) to 0.700 (last quarter)" in line
    assert "mean |loss| 0.0150" in line and "mean norm 0.500" in line


def test_a_mean_advantage_of_rounding_noise_prints_without_a_sign():
    curves = [{"reward": 0.5, "frac_reward_zero_std": 0.0, "loss": 0.0, "grad_norm": 0.1}]
    step = inspect_rl.GroupStep("Code RL", 0, 1, "grpo/x", ["p"], [["a", "b"]], [[0.0, 1.0]],
                                [[-0.7071068, 0.7071067]], 0.0, 0.1, curves)
    shown = inspect_rl.group_html(step)
    assert "mean advantage 0.0000 " in shown and "-0.0000" not in shown


def test_group_step_refuses_no_groups():
    with pytest.raises(ValueError, match="at least one group"):
        inspect_rl.group_step("IF-RL", 0, 1, prompts=0)


@pytest.mark.parametrize("stage, step, error", [("Code RL", 0, "recorded steps 1 to 32"),
                                                ("Code RL", 33, "recorded steps 1 to 32"),
                                                ("RLHF", 1, "learned model")])
def test_step_records_refuse_what_cannot_be_rerun(stage, step, error):
    with pytest.raises(ValueError, match=error):
        inspect_rl.step_records(stage, 0, step)


def test_the_loss_is_the_length_weighted_mean_advantage_and_its_gradient_is_not_zero():
    model, tokenizer = load_shipped(inspect_rl._shipped("SFT", 0).folder)
    prompts = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"] * 2
    completions = ["<think>\n</think>\n\nfour", "<think>\n</think>\n\nfour apples and two pears"]
    lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions]
    advantages = torch.tensor([1.0, -1.0])  # one group of two: the mean advantage is zero
    loss, norm = inspect_rl.loss_and_gradient(model, tokenizer, prompts, completions, advantages)
    assert loss == pytest.approx(-(lengths[0] - lengths[1]) / sum(lengths), abs=1e-6)
    assert norm > 1e-3
    assert all(p.grad is None for p in model.parameters())


def test_a_rerun_step_has_zero_mean_advantages_and_names_the_silent_groups():
    step = inspect_rl.group_step("IF-RL", 0, 1, prompts=2)
    assert len(step.rewards) == len(step.advantages) == 2 and all(len(r) == 8 for r in step.rewards)
    for rewards, advantages in zip(step.rewards, step.advantages):
        assert sum(advantages) == pytest.approx(0.0, abs=1e-4)
        if len(set(rewards)) == 1:
            assert set(advantages) == {0.0}
        else:
            assert advantages.index(max(advantages)) == rewards.index(max(rewards))
    silent = sum(len(set(r)) == 1 for r in step.rewards)
    assert step.zero_std_share == silent / 2
    assert step.recorded["step"] == 1
    shown = inspect_rl.group_html(step)
    assert f"zero-variance groups <b>{step.zero_std_share:.0%}</b>" in shown
    assert shown.count("no signal") == silent


def test_inspector_steps_forward_and_stays_within_the_recorded_steps(monkeypatch):
    monkeypatch.delenv(widgets.HEADLESS_ENV, raising=False)
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    panel = inspect_rl.group_inspector("IF-RL", 0, 1, prompts=1)
    assert shown == [panel.box] and "step 1." in panel.table.value
    panel.move(1)
    assert panel.step.value == 2 and "step 2." in panel.table.value
    panel.move(-5)
    assert panel.step.value == 1 and "step 1." in panel.table.value
    panel.step.value = 40  # within IF-RL's 64 steps, past Code RL's 32
    panel.stage.value = "Code RL"  # re-runs the step, clamped to the new stage's recorded steps
    assert panel.step.value == 32 and "Code RL</b>, training seed 0, step 32." in panel.table.value
    panel.seed.value = 7
    assert panel.table.value.startswith("<p><b>error:</b> Code RL is not shipped for training seed 7")


def test_headless_inspector_and_token_view_show_html_and_no_widget(monkeypatch):
    monkeypatch.setenv(widgets.HEADLESS_ENV, "1")
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    assert inspect_rl.group_inspector("IF-RL", 0, 1, prompts=1) is None
    assert inspect_rl.teacher_token_view("math", 0, 0) is None
    assert [type(s).__name__ for s in shown] == ["HTML", "HTML"]
    assert "IF-RL" in shown[0].data and "cascadekit-token" in shown[1].data


def test_token_view_gap_is_teacher_minus_student_and_vanishes_for_the_student_itself():
    view = inspect_rl.token_view("math", 0, 0)
    assert view.teacher == inspect_rl.chapter_teachers(0)["math"] and view.student == inspect_rl.STUDENT
    assert len(view.tokens) == len(view.student_logp) == len(view.teacher_logp) > 0
    assert view.gaps == [t - s for t, s in zip(view.teacher_logp, view.student_logp)]
    assert any(abs(g) > 1e-3 for g in view.gaps)
    itself = inspect_rl.token_view("math", 0, 0, teacher=inspect_rl.STUDENT)
    assert itself.tokens == view.tokens and itself.student_logp == view.student_logp
    assert all(g == 0 for g in itself.gaps)


def test_token_panel_follows_the_teacher_and_the_domain(monkeypatch):
    monkeypatch.delenv(widgets.HEADLESS_ENV, raising=False)
    monkeypatch.setattr(IPython.display, "display", lambda _: None)
    panel = inspect_rl.teacher_token_view("math", 0, 0)
    other = next(name for name in panel.teacher.options if name != panel.teacher.value)
    panel.teacher.value = other
    assert f"teacher <b>{other}</b>" in panel.view.value
    panel.domain.value = "instructions"
    own = inspect_rl.chapter_teachers(0)["instructions"]
    assert panel.teacher.value == own and f"teacher <b>{own}</b>" in panel.view.value
    assert "<b>instructions</b>" in panel.view.value
