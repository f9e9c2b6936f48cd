"""The stage table: every Part II domain in both modes, after any stage (the paper's Table 1 shape).

A suite is the ``eval`` split of each domain, every prompt asked twice, once with
``/think`` and once with ``/no_think``. For every (domain, mode) cell the table reports

* **score** with a 95% interval: the mean verifier score, the toy stand-in for the
  paper's benchmark (exact binomial interval for 0/1 scores, a bootstrap over
  prompts for graded ones such as the general domain's hidden quality);
* **mode following**: the share of answers that obey the flag (a non-empty think
  block after ``/think``, an empty one after ``/no_think``), measured with the
  generation prompt left bare: the model must write the empty think block itself,
  so a template that pre-fills it cannot make a model look obedient;
* **mean tokens** of the whole response (every tool-calling round) and the
  **think/no_think length ratio** per domain, the quantities RLHF's verbosity
  effect and the length schedules are about;
* **repetition**: the share of repeated word 3-grams in a response, averaged.

Tool-using prompts are rolled out turn by turn: each call the model writes is
answered by the domain's tool (:attr:`cascadekit.domains.Domain.respond`) in a
tool turn, and the model goes on, up to :data:`MAX_ROUNDS` turns.

Every Part II chapter calls :func:`stage_table` after each stage. Decoding is
greedy so a table is reproducible; the paper samples (temperature 0.6, top-p
0.95) and averages several runs.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from cascadekit.chat import parse_assistant, render, stop_token_ids, turn_ids
from cascadekit.claims import binomial_interval, bootstrap_interval
from cascadekit.domains import check_record, chat_records, configured, domains, draw_tasks, prompt_of, records_digest
from cascadekit.domains.tools import transcript
from cascadekit.evaluation.sampler import folder_digest
from cascadekit.atomic import atomic_write_json
from cascadekit.stages import Stage, StageOutput, content_id, run_stage
from cascadekit.profiles import Profile
from cascadekit.engine.decode import Sampling, decode
from cascadekit.engine.generation import GreedyGenerator, greedy_generator, uses_kit_decoder, uses_vllm
from cascadekit.engine.runtime import choose_device, load_model, load_tokenizer

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: The most assistant turns a tool-calling rollout may take (the toy DAGs need at most 5).
MAX_ROUNDS = 6
#: Repetition is measured on word n-grams of this length.
REPETITION_N = 3
#: A cached stage table's per-sample results, in its folder.
SAMPLES_FILE = "samples.json"

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
class StageRow:
    """One cell of the stage table: a domain in one mode after one stage."""

    stage: str
    domain: str
    mode: str
    n: int
    score: float
    score_low: float
    score_high: float
    mode_following: float
    mean_tokens: float
    repetition: float
    length_ratio: float | None = None  # think / no_think mean tokens, on the think row
    loose_score: float | None = None  # instruction following's loose score


def suite_records(profile: Profile, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """``sft.eval_tasks`` eval-split prompts per domain, each as a /think and a /no_think record."""
    ops = range(profile.sft.ops[0], profile.sft.ops[1] + 1)
    records = []
    for name in names or domains():
        for task in draw_tasks(configured(name, profile.domains), profile.sft.eval_tasks, profile.seeds.eval, "eval", ops):
            records.extend(chat_records(task))
    return records


def follows_mode(completion: str, think: bool) -> bool:
    """Did the first turn obey the flag: a reasoned think block after ``/think``, an empty one after ``/no_think``?"""
    text = completion.lstrip()
    if not text.startswith("<think>") or "</think>" not in text:
        return False
    return bool(parse_assistant(text).thinking) == think


def repetition_rate(text: str, n: int = REPETITION_N) -> float:
    """The share of word ``n``-grams in ``text`` that repeat an earlier one (0 for fewer than ``n`` words)."""
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


@torch.inference_mode()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             max_new_tokens: int, batch_size: int, temperature: float = 0.0,
             top_p: float = 1.0, kit: bool = False) -> list[tuple[str, int]]:
    """Completions (text up to ``<|im_end|>``, and its token count) in prompt order.

    Greedy at ``temperature`` 0 (the stage table); above it, sampled at that
    temperature and ``top_p`` (no top-k) from torch's current random state.
    Prompts go in batches of ``batch_size``, shortest first; each batch is decoded by
    ``model.generate``, or with ``kit`` by the kit's loop (:func:`cascadekit.engine.decode.decode`:
    the same greedy tokens, the same sampling distribution).
    """
    tokenizer.padding_side = "left"
    model.eval()
    stop = stop_token_ids(tokenizer)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: dict[int, tuple[str, int]] = {}
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        texts = [prompts[i] for i in idx]
        rows = (_kit_rows(model, tokenizer, texts, max_new_tokens, temperature, top_p) if kit
                else _generate_rows(model, tokenizer, texts, max_new_tokens, temperature, top_p))
        for i, row in zip(idx, rows):
            ids = turn_ids(row, stop)
            out[i] = (tokenizer.decode(ids, skip_special_tokens=False), len(ids))
    return [out[i] for i in range(len(prompts))]


def _generate_rows(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                   max_new_tokens: int, temperature: float, top_p: float) -> list[list[int]]:
    """One batch's new token ids by ``model.generate`` (rows that stopped are padded to the longest)."""
    batch = tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0} if temperature > 0 \
        else {"do_sample": False}
    generated = model.generate(**batch, **sampling, max_new_tokens=max_new_tokens,
                               eos_token_id=stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id)
    return generated[:, batch["input_ids"].shape[1]:].tolist()


def _kit_rows(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
              max_new_tokens: int, temperature: float, top_p: float) -> list[list[int]]:
    """One batch's new token ids by the kit's decode loop (each row up to and including its stop token)."""
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return decode(model, ids, max_new_tokens, stop_token_ids(tokenizer), Sampling(temperature, top_p),
                  pad_id=tokenizer.pad_token_id)


def kit_generator(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> GreedyGenerator:
    """:func:`generate` by the kit's decode loop, as a :func:`rollout`'s ``generate_fn`` (greedy)."""
    return lambda prompts, max_new_tokens, batch_size: generate(model, tokenizer, prompts, max_new_tokens,
                                                                  batch_size, kit=True)


@dataclass
class Rollout:
    """One prompt's answer: each assistant turn, the tool results after each, and the tokens spent."""

    turns: list[str]
    results: list[list[str]]
    tokens: int = 0

    @property
    def text(self) -> str:
        """What the verifier reads: the one turn, or every turn with its tool responses in between."""
        return transcript(self.turns, self.results) if self.results else self.turns[0]


def rollout(model: PreTrainedModel | None, tokenizer: PreTrainedTokenizerBase | None, records: Sequence[dict[str, Any]],
            max_new_tokens: int, batch_size: int, generate_fn: GreedyGenerator | None = None) -> list[Rollout]:
    """Answer every record, turn by turn: a turn with tool calls gets the tool's results and another turn.

    Turns come from :func:`generate` on ``model``, or from ``generate_fn`` when given (vLLM:
    :func:`cascadekit.engine.generation.greedy_generator`).
    """
    chats = [list(prompt_of(r)) for r in records]
    rollouts = [Rollout([], []) for _ in records]
    active = list(range(len(records)))
    for round_ in range(MAX_ROUNDS):
        prompts = [render(chats[i][0], chats[i][1], add_generation_prompt=True, prefill_empty_think=False)
                   for i in active]
        still = []
        answers = (generate_fn(prompts, max_new_tokens, batch_size) if generate_fn
                   else generate(model, tokenizer, prompts, max_new_tokens, batch_size))
        for i, (text, n_tokens) in zip(active, answers):
            rollouts[i].turns.append(text)
            rollouts[i].tokens += n_tokens
            respond = domains()[records[i]["domain"]].respond
            calls = parse_assistant(text).tool_calls if respond else []
            if calls and round_ < MAX_ROUNDS - 1:
                results = [respond(call) for call in calls]
                rollouts[i].results.append(results)
                chats[i][0] = [*chats[i][0], {"role": "assistant", "content": text},
                               *({"role": "tool", "content": r} for r in results)]
                still.append(i)
        active = still
        if not active:
            break
    return rollouts


def judge_records(records: Sequence[dict[str, Any]], rollouts: Sequence[Rollout], stage: str) -> list[dict[str, Any]]:
    """Per-sample results: the verifier's score and reason, mode following, tokens, repetition."""
    samples = []
    for record, answer in zip(records, rollouts):
        judgement = domains()[record["domain"]].judge(record["gold"], answer.text)
        samples.append({"stage": stage, "domain": record["domain"], "think": record["think"],
                        "completion": answer.text, "tokens": answer.tokens, "score": judgement.score,
                        "reason": judgement.reason, "loose": judgement.details.get("loose"),
                        "follows_mode": follows_mode(answer.turns[0], record["think"]),
                        "repetition": repetition_rate("\n".join(answer.turns))})
    return samples


def score_interval(scores: Sequence[float]) -> tuple[float, float]:
    """95% interval of a mean score: exact binomial for 0/1 scores, a bootstrap over prompts otherwise."""
    if all(s in (0, 1) for s in scores):
        return binomial_interval(int(sum(scores)), len(scores))
    _, low, high = bootstrap_interval(list(scores))
    return low, high


def aggregate(samples: Sequence[dict[str, Any]], stage: str) -> list[StageRow]:
    """One row per (domain, mode): means with the score's interval, and the think/no_think length ratio."""
    rows = []
    for name in dict.fromkeys(s["domain"] for s in samples):
        cells = {think: [s for s in samples if s["domain"] == name and s["think"] == think] for think in (True, False)}
        mean = {think: sum(s["tokens"] for s in cell) / len(cell) for think, cell in cells.items() if cell}
        for think, cell in cells.items():
            if not cell:
                continue
            scores = [s["score"] for s in cell]
            low, high = score_interval(scores)
            loose = [s["loose"] for s in cell if s["loose"] is not None]
            ratio = mean[True] / mean[False] if think and mean.get(False) else None
            rows.append(StageRow(
                stage=stage, domain=name, mode="think" if think else "no_think", n=len(cell),
                score=sum(scores) / len(cell), score_low=low, score_high=high,
                mode_following=sum(s["follows_mode"] for s in cell) / len(cell),
                mean_tokens=mean[think], repetition=sum(s["repetition"] for s in cell) / len(cell),
                length_ratio=ratio, loose_score=sum(loose) / len(loose) if loose else None,
            ))
    return rows


def evaluate(model: PreTrainedModel | None, tokenizer: PreTrainedTokenizerBase | None,
             records: Sequence[dict[str, Any]], profile: Profile, stage: str,
             generate_fn: GreedyGenerator | None = None) -> tuple[list[StageRow], list[dict[str, Any]]]:
    """Roll out every record, judge it, and aggregate per (domain, mode); also the per-sample results.

    Every record is checked first (:func:`cascadekit.domains.check_record`), so a
    malformed one is one clear error naming its field, before any generation.
    ``generate_fn`` (vLLM's) generates instead of ``model`` when given.
    """
    for record in records:
        check_record(record)
    rollouts = rollout(model, tokenizer, records, profile.sft.max_new_tokens, profile.evaluation.batch_size,
                       generate_fn)
    samples = judge_records(records, rollouts, stage)
    return aggregate(samples, stage), samples


def evaluate_checkpoint(checkpoint: str | Path, profile: Profile, stage: str,
                        records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:func:`evaluate` on a checkpoint: ``rows`` (dicts), ``samples``, ``wall_s``.

    The checkpoint is loaded on the profile's device and generates with transformers
    (with the kit's decode loop under ``engine.evaluation_decoder: kit`` on the CPU,
    :func:`cascadekit.engine.generation.uses_kit_decoder`), or vLLM loads it itself when
    ``engine.vllm`` asks and can (:func:`cascadekit.engine.generation.uses_vllm`; its engine
    is freed afterwards).
    """
    started = time.perf_counter()
    tokenizer = load_tokenizer(checkpoint)
    if uses_vllm(profile):
        with greedy_generator(checkpoint, tokenizer, profile) as generate_fn:
            rows, samples = evaluate(None, None, records, profile, stage, generate_fn)
    elif uses_kit_decoder(profile):
        model = load_model(checkpoint, choose_device(profile))
        rows, samples = evaluate(None, None, records, profile, stage, kit_generator(model, tokenizer))
    else:
        rows, samples = evaluate(load_model(checkpoint, choose_device(profile)), tokenizer, records, profile, stage)
    return {"rows": [asdict(r) for r in rows], "samples": samples, "wall_s": round(time.perf_counter() - started, 1)}


def stage_table(checkpoint: str | Path, profile: Profile, stage: str,
                records: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The stage table of one checkpoint: ``rows`` (dicts), per-sample ``samples`` and ``wall_s``.

    A cached stage (kind ``stage-table``) keyed by the checkpoint folder's content
    (:func:`cascadekit.evaluation.sampler.folder_digest`: its weights, tokenizer and
    template, not the key of the stage that built it) and the suite, so a checkpoint
    is evaluated once however many chapters ask; ``wall_s`` is the time the evaluation
    took when it ran. A hub name is not content: it is evaluated every time.
    """
    records = suite_records(profile) if records is None else list(records)
    content = folder_digest(checkpoint)
    if content is None:
        return evaluate_checkpoint(checkpoint, profile, stage, records)
    return _cached_table({"checkpoint_content": content, **_suite_inputs(profile, records)}, stage,
                         lambda: evaluate_checkpoint(checkpoint, profile, stage, records))


def cached_stage_table(stage: StageOutput, profile: Profile, name: str,
                       records: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """:func:`stage_table` of a stage's checkpoint, itself a cached stage (kind ``stage-table``).

    Keyed by the checkpoint's content (:func:`cascadekit.stages.content_id`), the suite and
    the decoding settings (and the device and precision: greedy decoding can differ between
    them), so a chapter that evaluates a checkpoint an earlier chapter already evaluated reads
    the per-sample results instead of generating again, and other weights under the same stage
    key are evaluated afresh. ``name`` labels the rows; ``wall_s`` is the time the evaluation
    took when it ran. (The shipped stage tables are under these keys, some through
    ``data/checkpoints/aliases.json``.)
    """
    records = suite_records(profile) if records is None else list(records)
    return _cached_table({"checkpoint": content_id(stage), **_suite_inputs(profile, records)}, name,
                         lambda: stage_table(stage.checkpoint, profile, name, records))


def _suite_inputs(profile: Profile, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a stage table depends on besides its checkpoint: the suite and the decoding settings.

    vLLM's greedy answers can differ from transformers', and the kit's loop's only by float
    rounding near exact ties, but either says so in its key; transformers' tables (every
    shipped one) keep the key they had.
    """
    placement = choose_device(profile)
    inputs = {"suite": records_digest(records), "n": len(records), "max_new_tokens": profile.sft.max_new_tokens,
              "batch_size": profile.evaluation.batch_size, "max_rounds": MAX_ROUNDS, "device": placement.device,
              "dtype": placement.dtype}
    if uses_vllm(profile):
        return {**inputs, "generation": "vllm"}
    return {**inputs, "generation": "kit"} if uses_kit_decoder(profile) else inputs


def _cached_table(inputs: dict[str, Any], name: str, build_table: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The stage table of ``inputs``: its per-sample results stored once, read back and labelled ``name``."""
    def build(folder: Path) -> dict[str, Any]:
        table = build_table()
        atomic_write_json(folder / SAMPLES_FILE, [{k: v for k, v in s.items() if k != "stage"}
                                                  for s in table["samples"]])
        return {"wall_s": table["wall_s"]}

    out = run_stage(Stage("stage-table", inputs, build, recipe=RECIPE))
    samples = [{"stage": name, **s} for s in json.loads((out.checkpoint / SAMPLES_FILE).read_text())]
    return {"rows": [asdict(r) for r in aggregate(samples, name)], "samples": samples, "wall_s": out.metrics["wall_s"]}


def _row(r: StageRow | dict[str, Any]) -> dict[str, Any]:
    return asdict(r) if isinstance(r, StageRow) else r


def stage_markdown(rows: Iterable[StageRow | dict[str, Any]]) -> str:
    """The stage table: one line per (stage, domain, mode)."""
    lines = ["| stage | domain (stands in for) | mode | n | score [95% CI] | mode following | mean tokens "
             "| think/no_think length | repetition |", "|---|---|---|---|---|---|---|---|---|"]
    for r in map(_row, rows):
        score = f"{r['score']:.2f} [{r['score_low']:.2f}, {r['score_high']:.2f}]"
        if r.get("loose_score") is not None:
            score += f" (loose {r['loose_score']:.2f})"
        ratio = "" if r.get("length_ratio") is None else f"{r['length_ratio']:.1f}x"
        lines.append(f"| {r['stage']} | {r['domain']} ({PAPER[r['domain']]['benchmark']}) | {r['mode']} | {r['n']} "
                     f"| {score} | {r['mode_following']:.2f} | {r['mean_tokens']:.0f} | {ratio} "
                     f"| {r['repetition']:.2f} |")
    return "\n".join(lines)


def paper_vs_run(rows: Iterable[StageRow | dict[str, Any]], stage: str) -> str:
    """Paper (8B unified, percent) vs this run after ``stage`` (percent of the toy suite, with its interval)."""
    rows = [_row(r) for r in rows]
    lines = ["| domain | paper benchmark | paper after SFT | paper final (cascade) | this run: think [95% CI] | "
             "this run: no_think [95% CI] | mode following (think / no_think) |", "|---|---|---|---|---|---|---|"]
    for name, paper in PAPER.items():
        cells = {r["mode"]: r for r in rows if r["stage"] == stage and r["domain"] == name}
        if not cells:
            continue
        after = "n/a" if paper["after_sft"] is None else f"{paper['after_sft']:.1f}"
        think, no_think = cells.get("think"), cells.get("no_think")
        fmt = (lambda r: "–" if r is None else
               f"{100 * r['score']:.1f} [{100 * r['score_low']:.0f}, {100 * r['score_high']:.0f}]")
        follow = " / ".join("–" if r is None else f"{r['mode_following']:.2f}" for r in (think, no_think))
        lines.append(f"| {name} | {paper['benchmark']} | {after} | {paper['final']:.1f} | {fmt(think)} "
                     f"| {fmt(no_think)} | {follow} |")
    return "\n".join(lines)
