"""Evaluation suites: every domain in both modes, scored by its verifier.

A suite is the ``eval`` split of a domain, each prompt asked twice, once with
``/think`` and once with ``/no_think``. For every (domain, mode) cell the table
reports

* **score**: the mean verifier score (the toy stand-in for the paper's benchmark),
* **mode following**: the share of answers that obey the flag: a non-empty think
  block after ``/think``, none (or an empty one) after ``/no_think``,
* **mean tokens**: the mean completion length, the quantity the paper's length
  schedules and RLHF's verbosity effect are about.

Decoding is greedy so a table is reproducible; the paper samples (temperature
0.6, top-p 0.95) and averages several runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.chat import parse_assistant, render
from cascadekit.domains import chat_records, domains, draw_tasks, prompt_of
from cascadekit.profiles import Profile

# The paper's numbers for Nemotron-Cascade-8B (unified), from the summary in
# shared/seeds: after multi-stage SFT where the summary gives them (the start of
# the RLHF comparison) and for the final cascade model.
PAPER = {
    "general": {"benchmark": "ArenaHard", "after_sft": 70.0, "final": 87.9},
    "instructions": {"benchmark": "IFEval", "after_sft": None, "final": 90.2},
    "math": {"benchmark": "AIME 2025", "after_sft": 72.8, "final": 80.1},
    "code": {"benchmark": "LiveCodeBench v6", "after_sft": 56.7, "final": 71.1},
    "tools": {"benchmark": "BFCL v3", "after_sft": None, "final": 64.4},
    "swe": {"benchmark": "SWE-bench Verified", "after_sft": None, "final": 37.2},
}


@dataclass(frozen=True)
class SuiteRow:
    """One cell of the evaluation table: a domain in one mode after one stage."""

    stage: str
    domain: str
    mode: str
    n: int
    score: float
    mode_following: float
    mean_tokens: float
    loose_score: float | None = None


def suite_records(profile: Profile, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` eval-split prompts per domain, each as a /think and a /no_think record."""
    ops = profile.world.ops("in_distribution")
    records = []
    for name in names or domains():
        for task in draw_tasks(domains()[name], profile.sft.eval_tasks, profile.seed, "eval", ops):
            records.extend(chat_records(task))
    return records


def generation_prompt(record: dict[str, Any]) -> str:
    """The chat up to the assistant turn, as the model sees it (empty think block pre-filled for /no_think)."""
    messages, tools = prompt_of(record)
    return render(messages, tools, add_generation_prompt=True)


def follows_mode(completion: str, think: bool) -> bool:
    """Did the answer obey the flag: reasoning after ``/think``, none after ``/no_think``?"""
    turn = parse_assistant(completion)
    if think:
        return completion.lstrip().startswith("<think>") and "</think>" in completion and bool(turn.thinking)
    return not turn.thinking and "<think>" not in completion.replace("<think>\n\n</think>", "")


@torch.inference_mode()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             max_new_tokens: int, batch_size: int) -> list[tuple[str, int]]:
    """Greedy completions (text up to ``<|im_end|>``, and its token count) in prompt order."""
    tokenizer.padding_side = "left"
    model.eval()
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: dict[int, tuple[str, int]] = {}
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True,
                          add_special_tokens=False).to(model.device)
        generated = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens,
                                   eos_token_id=stop, pad_token_id=tokenizer.pad_token_id)
        for i, row in zip(idx, generated[:, batch["input_ids"].shape[1]:].tolist()):
            ids = row[:next((k for k, t in enumerate(row) if t in stop), len(row))]
            out[i] = (tokenizer.decode(ids, skip_special_tokens=False), len(ids))
    return [out[i] for i in range(len(prompts))]


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, records: Sequence[dict[str, Any]],
             profile: Profile, stage: str) -> tuple[list[SuiteRow], list[dict[str, Any]]]:
    """Generate for every record, judge, and aggregate per (domain, mode); also return per-sample results."""
    completions = generate(model, tokenizer, [generation_prompt(r) for r in records],
                           profile.sft.max_new_tokens, profile.evaluation.batch_size)
    samples = []
    for record, (text, n_tokens) in zip(records, completions):
        judgement = domains()[record["domain"]].judge(record["gold"], text)
        samples.append({"stage": stage, "domain": record["domain"], "think": record["think"],
                        "completion": text, "tokens": n_tokens, "score": judgement.score,
                        "reason": judgement.reason, "loose": judgement.details.get("loose"),
                        "follows_mode": follows_mode(text, record["think"])})
    return aggregate(samples, stage), samples


def aggregate(samples: Sequence[dict[str, Any]], stage: str) -> list[SuiteRow]:
    """Per (domain, mode) means of score, mode following and length."""
    rows = []
    for name in dict.fromkeys(s["domain"] for s in samples):
        for think in (True, False):
            cell = [s for s in samples if s["domain"] == name and s["think"] == think]
            if not cell:
                continue
            loose = [s["loose"] for s in cell if s["loose"] is not None]
            rows.append(SuiteRow(
                stage=stage, domain=name, mode="think" if think else "no_think", n=len(cell),
                score=sum(s["score"] for s in cell) / len(cell),
                mode_following=sum(s["follows_mode"] for s in cell) / len(cell),
                mean_tokens=sum(s["tokens"] for s in cell) / len(cell),
                loose_score=sum(loose) / len(loose) if loose else None,
            ))
    return rows


def rows_to_dicts(rows: Iterable[SuiteRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


def markdown_table(rows: Iterable[SuiteRow | dict[str, Any]]) -> str:
    """The stage table: one line per (stage, domain, mode)."""
    lines = ["| stage | domain (stands in for) | mode | n | score | mode following | mean tokens |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        r = asdict(r) if isinstance(r, SuiteRow) else r
        score = f"{r['score']:.2f}" + (f" (loose {r['loose_score']:.2f})" if r.get("loose_score") is not None else "")
        lines.append(f"| {r['stage']} | {r['domain']} ({PAPER[r['domain']]['benchmark']}) | {r['mode']} | {r['n']} "
                     f"| {score} | {r['mode_following']:.2f} | {r['mean_tokens']:.0f} |")
    return "\n".join(lines)


def paper_vs_run(rows: Iterable[SuiteRow | dict[str, Any]], stage: str) -> str:
    """Paper (8B unified, percent) vs this run after ``stage`` (best of the two modes, as the paper
    reports IFEval; percent of the toy suite)."""
    rows = [asdict(r) if isinstance(r, SuiteRow) else r for r in rows]
    lines = ["| domain | paper benchmark | paper after SFT | paper final (cascade) | this run: think | "
             "this run: no_think | mode following (think / no_think) |", "|---|---|---|---|---|---|---|"]
    for name, paper in PAPER.items():
        cells = {r["mode"]: r for r in rows if r["stage"] == stage and r["domain"] == name}
        if not cells:
            continue
        after = "n/a" if paper["after_sft"] is None else f"{paper['after_sft']:.1f}"
        think, no_think = cells.get("think"), cells.get("no_think")
        fmt = (lambda r: "–" if r is None else f"{100 * r['score']:.1f}")
        follow = " / ".join("–" if r is None else f"{r['mode_following']:.2f}" for r in (think, no_think))
        lines.append(f"| {name} | {paper['benchmark']} | {after} | {paper['final']:.1f} | {fmt(think)} "
                     f"| {fmt(no_think)} | {follow} |")
    return "\n".join(lines)
