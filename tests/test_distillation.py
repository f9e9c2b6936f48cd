"""Chapter 15's stage: the reverse-KL loss against a hand computation and TRL's kernel, the teacher router,
the forward/reverse switch, the validation-based teacher choice, and one MOPD stage at smoke."""
from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from test_grpo import tiny_model, tiny_tokenizer

from cascadekit.profiles import load_profile
from cascadekit.training.distillation import (
    DIVERGENCES, RoutedDistillationTrainer, build_distillation_config, distillation_dataset, select_teachers,
    token_divergence,
)


def test_reverse_kl_is_the_hand_computation_on_a_tiny_batch():
    # one sequence, two completion tokens, a vocabulary of two; the second token is masked out
    student = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1]]]))
    teacher = torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]]]))
    mask = torch.tensor([[1, 0]])
    by_hand = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert token_divergence(student, teacher, mask, "reverse").item() == pytest.approx(by_hand)
    forward = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert token_divergence(student, teacher, mask, "forward").item() == pytest.approx(forward)
    both = torch.tensor([[1, 1]])
    second = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    assert token_divergence(student, teacher, both).item() == pytest.approx((by_hand + second) / 2)
    assert token_divergence(teacher, teacher, both).item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="unknown divergence 'jsd'"):
        token_divergence(student, teacher, mask, "jsd")


def test_a_teacher_is_the_best_candidate_on_validation_and_a_tie_goes_to_the_later():
    scores = {"SFT": {"math": 0.5, "code": 0.9}, "RLHF": {"math": 0.7, "code": 0.9}, "SWE RL": {"math": 0.6, "code": 0.8}}
    assert select_teachers(scores, ["math", "code"]) == {"math": "RLHF", "code": "RLHF"}
    assert select_teachers({"A": {"x": 0.2}, "B": {"x": 0.2}}, ["x"]) == {"x": "B"}
    with pytest.raises(ValueError, match="domain 'swe'"):
        select_teachers(scores, ["swe"])
    with pytest.raises(ValueError, match="no candidate"):
        select_teachers({}, ["math"])


def sharp_model(seed: int, scale: float) -> torch.nn.Module:
    """A tiny model whose logits are ``scale`` times a random one's: teachers that disagree clearly."""
    model = tiny_model(seed)
    with torch.no_grad():
        model.model.norm.weight.mul_(scale)
    return model


def _trainer(tmp_path, teachers, route, divergence="reverse", domains=("a", "b")):
    tokenizer = tiny_tokenizer()
    prompts = [f"{i}+{i}=" for i in range(4)]
    dataset = Dataset.from_dict({"prompt": prompts, "domain": [domains[i % len(domains)] for i in range(4)]})
    profile = load_profile("smoke", {"rl.max_completion_length": 6, "rl.prompts_per_step": 2, "rl.group_size": 2})
    config = build_distillation_config(profile, str(tmp_path), profile.rl, divergence, steps=1, disable_tqdm=True)
    return RoutedDistillationTrainer(tiny_model(0), teachers, route, args=config, train_dataset=dataset,
                                     processing_class=tokenizer)


def _batch(trainer):
    return trainer._generate_and_score_completions([{"prompt": "1+1=", "domain": "a"}, {"prompt": "2+2=", "domain": "b"},
                                                   {"prompt": "3+3=", "domain": "a"}, {"prompt": "4+4=", "domain": "b"}])


def _by_hand(student, teachers, route, batch, divergence):
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    n = batch["completion_ids"].size(1)
    student_logits = student(input_ids=ids, attention_mask=attention).logits[:, -n - 1:-1]
    teacher_logits = torch.stack([teachers[route[d]](input_ids=ids[i:i + 1], attention_mask=attention[i:i + 1])
                                  .logits[0, -n - 1:-1] for i, d in enumerate(batch["domain"])])
    return token_divergence(student_logits, teacher_logits, batch["completion_mask"], divergence)


@pytest.mark.parametrize("divergence", list(DIVERGENCES))
def test_the_router_scores_each_example_with_its_domains_teacher(tmp_path, divergence):
    teachers = [sharp_model(1, 20.0), sharp_model(2, 1.0)]
    route = {"a": 0, "b": 1}
    trainer = _trainer(tmp_path, teachers, route, divergence)
    torch.manual_seed(0)
    batch = _batch(trainer)
    assert batch["domain"] == ["a", "b", "a", "b"]
    with torch.no_grad():
        loss, _, valid = trainer._compute_loss(trainer.model, batch, batch["num_items_in_batch"])
        expected = _by_hand(trainer.model, teachers, route, batch, divergence)
        swapped = _by_hand(trainer.model, teachers, {"a": 1, "b": 0}, batch, divergence)
        other = _by_hand(trainer.model, teachers, route, batch, "forward" if divergence == "reverse" else "reverse")
    assert int(valid) == int(batch["completion_mask"].sum())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    assert abs(loss.item() - swapped.item()) > 1e-3  # the route matters: the other teacher gives another loss
    assert abs(loss.item() - other.item()) > 1e-3  # and so does the divergence
    assert set(trainer._metrics["train"]) >= {"kl/a", "kl/b"}


def test_one_teacher_for_every_domain_is_plain_trl_distillation(tmp_path):
    teacher = sharp_model(1, 20.0)
    trainer = _trainer(tmp_path, [teacher], {"a": 0, "b": 0})
    torch.manual_seed(0)
    batch = _batch(trainer)
    with torch.no_grad():
        routed, _, _ = trainer._compute_loss(trainer.model, batch, batch["num_items_in_batch"])
        plain, _, _ = super(RoutedDistillationTrainer, trainer)._compute_loss(trainer.model, batch,
                                                                                batch["num_items_in_batch"])
    assert routed.item() == pytest.approx(plain.item(), rel=1e-5)


def test_a_domain_without_a_teacher_is_one_clear_error(tmp_path):
    trainer = _trainer(tmp_path, [tiny_model(1)], {"a": 0})
    with pytest.raises(ValueError, match="no teacher for domain 'b'"):
        _batch(trainer)
    with pytest.raises(ValueError, match="every teacher needs a domain"):
        _trainer(tmp_path, [tiny_model(1), tiny_model(2)], {"a": 0, "b": 0})


def test_each_prompt_is_sampled_group_size_times_in_order():
    from cascadekit.chapters.cascade import rl_records

    profile = load_profile("smoke")
    records = rl_records(profile, "math", True, 3, 2) + rl_records(profile, "code", True, 4, 1)
    data = distillation_dataset(records, 3)
    assert data["domain"] == ["math"] * 6 + ["code"] * 3
    assert data["prompt"][0] == data["prompt"][2] != data["prompt"][3]


def test_one_mopd_stage_runs_at_smoke_is_cached_and_keyed_by_its_divergence(tmp_path):
    from cascadekit.chapters.cascade import rl_records, sft_checkpoint
    from cascadekit.training.chat_base import chat_base
    from cascadekit.training.distillation import mopd_stage

    profile = load_profile("smoke")
    student, other = sft_checkpoint(profile), chat_base(profile)
    records = rl_records(profile, "math", True, 3, 2) + rl_records(profile, "code", True, 4, 2)
    teachers = {"math": student, "code": other}
    out = mopd_stage(student, records, teachers, profile, tmp_path)
    assert out.metrics["steps"] == len(records) // profile.rl.prompts_per_step
    curves = out.metrics["curves"]
    assert all(c["kl"] >= 0 for c in curves)
    assert curves[0]["kl/math"] == pytest.approx(0.0, abs=1e-5)  # the student is its own math teacher at step 1
    assert curves[1]["kl/code"] > 0  # the chat base is not
    assert out.metrics["completion_tokens"] > 0 and (out.checkpoint / "config.json").exists()
    assert mopd_stage(student, records, teachers, profile, tmp_path).key == out.key
    with pytest.raises(ValueError, match="no teacher for domain 'code'"):
        mopd_stage(student, records, {"math": student}, profile, tmp_path)


def test_mopd_runs_as_a_stage_of_a_cascade_order(tmp_path):
    from cascadekit.chapters import resolve
    from cascadekit.chapters.cascade import ORDER, mopd_prompts, run_cascade

    profile = resolve("14", "smoke").profile
    stages = run_cascade(profile, tmp_path, (*ORDER[:2], "MOPD"))
    assert [s.name for s in stages] == ["SFT", *ORDER[:2], "MOPD"]
    mopd = stages[-1]
    assert mopd.runs[0].metrics["steps"] == sum(mopd_prompts(profile).values()) // profile.rl.prompts_per_step
    assert mopd.checkpoint.key != stages[-2].checkpoint.key and mopd.prompts(profile) > 0


def test_the_routing_control_is_the_best_stage_overall_but_never_the_student():
    from cascadekit.training.distillation import select_single_teacher

    scores = {"SFT": {"math": 0.6, "code": 0.2}, "Math RL": {"math": 0.7, "code": 0.3},
              "SWE RL": {"math": 0.9, "code": 0.9}}
    assert select_single_teacher(scores, ["math", "code"], exclude="SWE RL") == "Math RL"
    assert select_single_teacher(scores, ["math", "code"]) == "SWE RL"
    tie = {"SFT": {"math": 0.5}, "RLHF": {"math": 0.5}}
    assert select_single_teacher(tie, ["math"]) == "RLHF"  # a tie goes to the later stage, as select_teachers
    with pytest.raises(ValueError, match="other than 'SWE RL'"):
        select_single_teacher({"SWE RL": {"math": 1.0}}, ["math"], exclude="SWE RL")
