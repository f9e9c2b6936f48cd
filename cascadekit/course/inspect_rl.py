"""Look inside RL: one GRPO step's groups (chapter 12) and a student's tokens under each teacher (chapter 15).

**The group inspector** (:func:`group_inspector`). The shipped GRPO stages record
per-step curves (``stage.json``: reward, its std, the share of zero-variance groups,
loss, gradient norm) but not their rollouts, so one step is re-run here at toy scale:
the step's prompts (the stage's prompt pool, rebuilt and checked against the digest
its ``stage.json`` records, in the order TRL's ``RepeatSampler`` fed them), ``G``
rollouts each from the stage's *start* checkpoint (the policy step 1 sampled from;
the policies between steps are not shipped), the stage's verifier reward, and the
advantages as the kit's GRPO config has TRL compute them (``scale_rewards="group"``:
``(r - group mean) / (group std + 1e-4)``, :func:`cascadekit.training.grpo.grpo_advantages`).
Then the step's loss and its gradient, on-policy (ratio 1): each group's advantages
sum to zero, so the loss, ``-sum_i A_i n_i / sum_i n_i`` over completions of ``n_i``
tokens, is about zero whatever the policy learns, while its gradient,
``-sum_i A_i sum_t grad log p(y_it) / N``, is not. Where it departs from a training
step: rollouts of a later step still come from the start policy, the completion ids
are the decoded text re-tokenised, and only the verifier-rewarded stages are
re-run (:data:`INSPECTED`: RLHF and SWE RL score with learned models; Math RL's pool
is the screen's survivors).

**The token view** (:func:`token_view`). MOPD (:mod:`cascadekit.training.distillation`)
trains the student on every token of its own sample against its domain's teacher.
Here the student (the seed's last shipped stage, SWE RL: MOPD starts from it) samples
an answer, and each token is coloured by ``log p_teacher - log p_student`` of that
token: red where the teacher would not have written it. This single-sample log-ratio
is the per-token estimate whose student-expectation, negated, is the reverse KL that
MOPD minimises (the kit's loss sums the full distributions, :func:`token_divergence`).
The teachers are chapter 15's committed choice per domain (best validation score,
``data/results/15_on_policy_distillation``).

Headless (papermill, the book: :data:`cascadekit.course.widgets.HEADLESS_ENV`) or
without ipywidgets, each shows its static HTML table only.
"""
from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import torch

from cascadekit.artifacts import shipped_root
from cascadekit.chat import render
from cascadekit.course.chat import Shipped, drawn_record, load_shipped, profile_for, stages_of
from cascadekit.domains import domains, prompt_of, records_digest
from cascadekit.formatting import fixed
from cascadekit.evaluation.stage_table import generate, rollout
from cascadekit.stages import one_cpu_thread
from cascadekit.training.grpo import completion_logprobs, grpo_advantages, token_level_loss

#: The stages the inspector re-runs: each one's prompt pool (from chapter 14's profile) and the stage it starts from.
INSPECTED: dict[str, tuple[str, Callable[[Any], list[dict[str, Any]]]]] = {
    "IF-RL": ("RLHF", lambda profile: _cascade().if_rl_records(profile, False)),
    "Code RL": ("Math RL", lambda profile: _cascade().code_rl_records(profile)),
}
#: Chapter 15's committed run, which records each domain's MOPD teacher.
CHAPTER_15 = shipped_root().parent / "results" / "15_on_policy_distillation"
#: The student of the token view: the stage MOPD starts from.
STUDENT = "SWE RL"


def _cascade() -> Any:
    from cascadekit.chapters import cascade

    return cascade


# ---------------------------------------------------------------------------
# The group inspector
# ---------------------------------------------------------------------------


def _shipped(stage: str, seed: int) -> Shipped:
    found, missing = stages_of(seed)
    by_stage = {s.stage: s for s in found}
    if stage not in by_stage:
        raise ValueError(f"{stage} is not shipped for training seed {seed} (missing: {', '.join(missing)})")
    return by_stage[stage]


def stage_json(stage: str, seed: int) -> dict[str, Any]:
    """A shipped GRPO stage's ``stage.json`` (its inputs and recorded metrics)."""
    return json.loads((_shipped(stage, seed).path / "stage.json").read_text())


def recorded_steps(stage: str, seed: int) -> list[dict[str, Any]]:
    """The per-step curves the stage recorded while training (TRL's logged metrics, one row per step)."""
    return stage_json(stage, seed)["metrics"]["curves"]


def feed_order(n: int, shuffled: bool, seed: int) -> list[int]:
    """The order TRL's ``RepeatSampler`` feeds ``n`` prompts in: as given, or ``torch.randperm`` from ``seed``.

    One epoch (the shipped stages use each prompt at most once).
    """
    if not shuffled:
        return list(range(n))
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def step_records(stage: str, seed: int, step: int) -> list[dict[str, Any]]:
    """The prompts of recorded step ``step`` (1, 2, ...), rebuilt; a pool whose digest differs is a ValueError."""
    if stage not in INSPECTED:
        raise ValueError(f"the inspector re-runs {', '.join(INSPECTED)}; {stage} scores with a learned model")
    recorded = stage_json(stage, seed)
    inputs, steps = recorded["inputs"], recorded["metrics"]["steps"]
    if not 1 <= step <= steps:
        raise ValueError(f"{stage} recorded steps 1 to {steps}, not {step}")
    profile = profile_for(seed)
    records = INSPECTED[stage][1](profile)
    if records_digest(records) != inputs["prompts"]:
        raise ValueError(f"{stage}'s prompt pool rebuilt here is not the one it trained on ({inputs['prompts']})")
    per_step = inputs["rl"]["prompts_per_step"]
    order = feed_order(len(records), not inputs["chat"]["in_order"], profile.seeds.train)
    return [records[i] for i in order[(step - 1) * per_step: step * per_step]]


@dataclass(frozen=True)
class GroupStep:
    """One re-run GRPO step: per prompt, its rollouts, rewards and advantages; then the loss and gradient."""

    stage: str
    seed: int
    step: int
    policy: str  # the checkpoint the rollouts came from
    prompts: list[str]
    completions: list[list[str]]
    rewards: list[list[float]]
    advantages: list[list[float]]
    loss: float
    grad_norm: float
    curves: list[dict[str, Any]]  # every recorded step's logged metrics

    @property
    def recorded(self) -> dict[str, Any]:
        """This step's logged metrics."""
        return self.curves[self.step - 1]

    @property
    def zero_std_share(self) -> float:
        """The share of groups whose rollouts all scored the same (advantage 0: no signal)."""
        return sum(len(set(r)) == 1 for r in self.rewards) / len(self.rewards)


def _ids(tokenizer: Any, texts: Sequence[str], side: str) -> tuple[torch.Tensor, torch.Tensor]:
    tokenizer.padding_side = side
    batch = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
    return batch["input_ids"], batch["attention_mask"]


def loss_and_gradient(model: Any, tokenizer: Any, prompts: Sequence[str], completions: Sequence[str],
                      advantages: torch.Tensor) -> tuple[float, float]:
    """The on-policy GRPO loss of these completions (TRL's token-level ``dapo`` form) and its gradient's norm.

    The model's gradients are cleared again afterwards (it is the chat's cached copy).
    """
    prompt_ids, prompt_mask = _ids(tokenizer, prompts, "left")
    completion_ids, completion_mask = _ids(tokenizer, completions, "right")
    with torch.enable_grad():
        logps = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
        loss = token_level_loss(logps, logps.detach(), advantages, completion_mask.float())
        loss.backward()
    grads = [p.grad.pow(2).sum() for p in model.parameters() if p.grad is not None]
    norm = float(torch.stack(grads).sum().sqrt()) if grads else 0.0
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), norm


def group_step(stage: str = "Code RL", seed: int = 0, step: int = 1, prompts: int | None = None,
               sample_seed: int = 0) -> GroupStep:
    """Re-run the first ``prompts`` groups (default: all) of recorded step ``step`` of ``stage``.

    Seconds on a CPU at toy scale (a whole Code RL step of 8 x 8 rollouts: about 12 s on a loaded two-core machine).
    """
    if prompts is not None and prompts < 1:
        raise ValueError(f"re-run at least one group, not {prompts}")
    records = step_records(stage, seed, step)[:prompts]
    inputs = stage_json(stage, seed)["inputs"]
    rl, group = inputs["rl"], inputs["rl"]["group_size"]
    policy = _shipped(INSPECTED[stage][0], seed)
    model, tokenizer = load_shipped(policy.folder)
    repeated = [r for r in records for _ in range(group)]
    torch.manual_seed(sample_seed)
    with one_cpu_thread():
        done = rollout(None, None, repeated, rl["max_completion_length"], len(repeated),
                       lambda texts, n, batch: generate(model, tokenizer, texts, n, batch,
                                                        temperature=rl["temperature"], kit=True))
    judge = domains()
    rewards = torch.tensor([judge[r["domain"]].judge(r["gold"], d.text).score for r, d in zip(repeated, done)])
    advantages = grpo_advantages(rewards, group)
    texts = [render(*prompt_of(r), add_generation_prompt=True, prefill_empty_think=False) for r in repeated]
    with one_cpu_thread():
        loss, norm = loss_and_gradient(model, tokenizer, texts, [d.turns[0] for d in done], advantages)
    return GroupStep(stage, seed, step, policy.folder,
                     [prompt_of(r)[0][-1]["content"] for r in records],
                     [[d.text for d in done[i:i + group]] for i in range(0, len(done), group)],
                     rewards.view(-1, group).tolist(), advantages.view(-1, group).tolist(), loss, norm,
                     recorded_steps(stage, seed))


def _cell(text: str) -> str:
    """The whole text, in a box that scrolls past a dozen lines (a code rollout's verdict is in its last lines)."""
    return f"<pre style='white-space:pre-wrap;max-height:12em;overflow:auto;margin:0'>{html.escape(text)}</pre>"


def _mean(rows: Sequence[dict[str, Any]], key: str, absolute: bool = False) -> float:
    return sum(abs(r[key]) if absolute else r[key] for r in rows) / len(rows)


def history_line(curves: Sequence[dict[str, Any]]) -> str:
    """The whole run in one line: the reward's first and last quarter, beside the mean |loss| and gradient norm."""
    quarter = max(1, len(curves) // 4)
    return (f"Over its {len(curves)} recorded steps the reward went from {_mean(curves[:quarter], 'reward'):.3f} "
            f"(first quarter) to {_mean(curves[-quarter:], 'reward'):.3f} (last quarter), while the logged loss "
            f"stayed near zero (mean |loss| {_mean(curves, 'loss', True):.4f}) and the gradient did not "
            f"(mean norm {_mean(curves, 'grad_norm'):.3f}).")


def group_html(step: GroupStep) -> str:
    """The step as HTML: the run's history, the step's recorded metrics, the re-run, then one table per group."""
    r = step.recorded
    head = (f"<p>{html.escape(history_line(step.curves))}</p>"
            f"<p><b>{html.escape(step.stage)}</b>, training seed {step.seed}, step {step.step}. "
            f"Recorded while training: reward {r['reward']:.3f}, zero-variance groups "
            f"{r['frac_reward_zero_std']:.0%}, loss {r['loss']:+.4f}, grad norm {r['grad_norm']:.3f}.</p>"
            f"<p>Re-run here ({len(step.rewards)} groups of {len(step.rewards[0])} from "
            f"<code>{html.escape(step.policy)}</code>, the stage's start): zero-variance groups "
            f"<b>{step.zero_std_share:.0%}</b>; mean advantage "
            f"{fixed(sum(map(sum, step.advantages)) / sum(map(len, step.advantages)), 4)} "
            "(zero by construction); "
            f"loss <b>{step.loss:+.4f}</b>; gradient norm <b>{step.grad_norm:.3f}</b> "
            f"(not zero: the loss is about zero, the gradient is not).</p>")
    groups = []
    for i, (prompt, outs, rewards, advs) in enumerate(zip(step.prompts, step.completions, step.rewards,
                                                            step.advantages)):
        flat = " <b>no signal: every rollout scored the same</b>" if len(set(rewards)) == 1 else ""
        rows = "".join(f"<tr style='vertical-align:top'><td>{j}</td><td>{_cell(o)}</td><td>{rw:.2f}</td>"
                       f"<td>{a:+.2f}</td></tr>"
                       for j, (o, rw, a) in enumerate(zip(outs, rewards, advs)))
        groups.append(f"<p>group {i}: {_cell(prompt)}{flat}</p><table class='cascadekit-group'>"
                      f"<tr><th>#</th><th>rollout</th><th>reward</th><th>advantage</th></tr>{rows}</table>")
    return head + "".join(groups)


class GroupInspector:
    """The controls: stage, seed, step (with previous/next buttons), groups; :meth:`show` is every callback."""

    def __init__(self, stage: str = "Code RL", seed: int = 0, step: int = 1, prompts: int | None = None) -> None:
        import ipywidgets as w

        per_step = stage_json(stage, seed)["inputs"]["rl"]["prompts_per_step"]

        self.stage = w.Dropdown(options=list(INSPECTED), value=stage, description="stage")
        self.seed = w.IntText(value=seed, description="train seed")
        self.step = w.BoundedIntText(value=step, min=1, max=len(recorded_steps(stage, seed)), description="step")
        self.prompts = w.IntSlider(value=prompts or per_step, min=1, max=per_step, description="groups")
        self.previous, self.next = w.Button(description="◀ step"), w.Button(description="step ▶")
        self.run = w.Button(description="re-run step", button_style="primary")
        self.table = w.HTML()
        self.previous.on_click(lambda _: self.move(-1))
        self.next.on_click(lambda _: self.move(1))
        self.run.on_click(lambda _: self.show())
        self.stage.observe(lambda _: self.move(0), names="value")
        self.seed.observe(lambda _: self.move(0), names="value")
        self.box = w.VBox([w.HBox([self.stage, self.seed]), w.HBox([self.previous, self.step, self.next]),
                           w.HBox([self.prompts, self.run]), self.table])

    def move(self, by: int) -> None:
        """Step forward or back (within the recorded steps) and re-run."""
        self.step.value = max(1, self.step.value + by)
        self.show()

    def show(self) -> GroupStep | None:
        """Re-run the chosen step (kept within the stage's recorded steps) into the table; a bad choice is one
        line in the table instead."""
        try:
            self.step.max = len(recorded_steps(self.stage.value, self.seed.value))
            step = group_step(self.stage.value, self.seed.value, self.step.value, self.prompts.value)
        except ValueError as err:
            self.table.value = f"<p><b>error:</b> {html.escape(str(err))}</p>"
            return None
        self.table.value = group_html(step)
        return step


def _live() -> bool:
    from cascadekit.course.widgets import HEADLESS_ENV

    if os.environ.get(HEADLESS_ENV):
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def group_inspector(stage: str = "Code RL", seed: int = 0, step: int = 1,
                    prompts: int | None = None) -> GroupInspector | None:
    """Show step ``step`` of ``stage`` re-run; live, the panel to step through the recorded steps (headless: None)."""
    return _shown(group_html(group_step(stage, seed, step, prompts)),
                  lambda: GroupInspector(stage, seed, step, prompts), "table")


def _shown(text: str, panel: Any, slot: str) -> Any:
    """``text`` as static HTML when headless (None), else ``panel()`` live with ``text`` in its ``slot`` widget."""
    from IPython.display import HTML, display

    if not _live():
        display(HTML(text))
        return None
    live = panel()
    getattr(live, slot).value = text
    display(live.box)
    return live


# ---------------------------------------------------------------------------
# The token view
# ---------------------------------------------------------------------------


def chapter_teachers(seed: int) -> dict[str, str]:
    """Each RL domain's MOPD teacher (a stage name) in chapter 15's committed run of training seed ``seed``."""
    for path in (CHAPTER_15 / f"train-seed-{seed}" / "metrics.json", CHAPTER_15 / "metrics.json"):
        if path.exists():
            teachers = json.loads(path.read_text()).get("teachers")
            if teachers:
                return dict(teachers)
    raise ValueError(f"no committed chapter 15 run names the teachers for training seed {seed}")


@dataclass(frozen=True)
class TokenView:
    """A student's sample with each token's log-probability under the student and under one teacher."""

    domain: str
    prompt: str
    student: str
    teacher: str
    tokens: list[str]
    student_logp: list[float]
    teacher_logp: list[float]

    @property
    def gaps(self) -> list[float]:
        """``log p_teacher - log p_student`` per token (negative: the teacher would not have written it)."""
        return [t - s for t, s in zip(self.teacher_logp, self.student_logp)]


@lru_cache(maxsize=32)
def _sample(domain: str, number: int, seed: int, sample_seed: int) -> tuple[dict[str, Any], str]:
    record = drawn_record(domain, number, True)
    model, tokenizer = load_shipped(_shipped(STUDENT, seed).folder)
    text = render(*prompt_of(record), add_generation_prompt=True, prefill_empty_think=False)
    torch.manual_seed(sample_seed)
    with one_cpu_thread():
        ((answer, _),) = generate(model, tokenizer, [text], profile_for(seed).rl.max_completion_length, 1,
                                  temperature=1.0, kit=True)
    return record, answer


def _logps(folder: str, prompt: str, completion_ids: torch.Tensor) -> list[float]:
    model, tokenizer = load_shipped(folder)
    prompt_ids, prompt_mask = _ids(tokenizer, [prompt], "left")
    with torch.inference_mode(), one_cpu_thread():
        return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids,
                                   torch.ones_like(completion_ids))[0].tolist()


def token_view(domain: str = "math", number: int = 0, seed: int = 0, teacher: str | None = None,
               sample_seed: int = 0) -> TokenView:
    """Prompt ``number`` of ``domain`` sampled by the student, scored per token by ``teacher`` (default: the
    domain's chapter 15 teacher)."""
    teacher = teacher or chapter_teachers(seed)[domain]
    record, answer = _sample(domain, number, seed, sample_seed)
    student = _shipped(STUDENT, seed)
    _, tokenizer = load_shipped(student.folder)
    prompt = render(*prompt_of(record), add_generation_prompt=True, prefill_empty_think=False)
    ids = torch.tensor([tokenizer(answer, add_special_tokens=False)["input_ids"]])
    return TokenView(domain, prompt_of(record)[0][-1]["content"], STUDENT, teacher,
                     [tokenizer.decode([i]) for i in ids[0].tolist()], _logps(student.folder, prompt, ids),
                     _logps(_shipped(teacher, seed).folder, prompt, ids))


def _colour(gap: float) -> str:
    """Red for a negative gap, green for a positive one, saturating at 2 nats."""
    strength = min(abs(gap) / 2.0, 1.0)
    hue = 0 if gap < 0 else 120
    return f"hsla({hue}, 80%, 50%, {strength:.2f})"


def token_html(view: TokenView) -> str:
    """The sample with each token's background coloured by its gap (its values on hover), then a summary."""
    spans = "".join(
        f"<span class='cascadekit-token' style='background:{_colour(g)}' "
        f"title='teacher {t:.2f} student {s:.2f} gap {g:+.2f}'>{html.escape(tok)}</span>"
        for tok, s, t, g in zip(view.tokens, view.student_logp, view.teacher_logp, view.gaps))
    gaps = view.gaps
    worst = sorted(range(len(gaps)), key=gaps.__getitem__)[:5]
    listed = ", ".join(f"<code>{html.escape(view.tokens[i])}</code> {gaps[i]:+.2f}" for i in worst)
    return (f"<p><b>{html.escape(view.domain)}</b>: <code>{html.escape(view.prompt)}</code></p>"
            f"<p>student <b>{view.student}</b>, teacher <b>{html.escape(view.teacher)}</b>: "
            f"log p<sub>teacher</sub> − log p<sub>student</sub> per token, red where the teacher disagrees; "
            f"mean {sum(gaps) / max(1, len(gaps)):+.3f} over {len(gaps)} tokens; lowest: {listed}</p>"
            f"<pre style='white-space:pre-wrap'>{spans}</pre>")


class TokenPanel:
    """The controls: domain, prompt number, teacher (defaulting to the domain's); :meth:`show` is every callback."""

    def __init__(self, domain: str = "math", number: int = 0, seed: int = 0, teacher: str | None = None) -> None:
        import ipywidgets as w

        self.teachers = chapter_teachers(seed)
        self.domain = w.Dropdown(options=list(self.teachers), value=domain, description="domain")
        self.number = w.IntText(value=number, description="prompt")
        self.teacher = w.Dropdown(options=[spec.name for spec in _cascade().TABLE], value=teacher or self.teachers[domain],
                                  description="teacher")
        self.seed = seed
        self.view = w.HTML()
        self.domain.observe(lambda _: self.pick_domain(), names="value")
        self.number.observe(lambda _: self.show(), names="value")
        self.teacher.observe(lambda _: self.show(), names="value")
        self.box = w.VBox([w.HBox([self.domain, self.number, self.teacher]), self.view])

    def pick_domain(self) -> None:
        """A new domain gets its own teacher (which re-draws through the teacher's callback, or here)."""
        own = self.teachers[self.domain.value]
        if self.teacher.value == own:
            self.show()
        else:
            self.teacher.value = own

    def show(self) -> TokenView | None:
        """Sample and colour the chosen prompt under the chosen teacher; a bad choice is one line instead."""
        try:
            view = token_view(self.domain.value, self.number.value, self.seed, self.teacher.value)
        except ValueError as err:
            self.view.value = f"<p><b>error:</b> {html.escape(str(err))}</p>"
            return None
        self.view.value = token_html(view)
        return view


def teacher_token_view(domain: str = "math", number: int = 0, seed: int = 0,
                       teacher: str | None = None) -> TokenPanel | None:
    """Show the student's sample coloured by the teacher; live, the panel to change domain, prompt and teacher."""
    return _shown(token_html(token_view(domain, number, seed, teacher)),
                  lambda: TokenPanel(domain, number, seed, teacher), "view")
