"""Where each domain's edge of competence lies: greedy, pass@1, pass@k and best-of-k per domain x mode x op.

Part I's first finding (chapter 04) is that RL teaches beyond its start only on data at the
edge of competence: solvable at pass@k, failing at pass@1. Too-easy data lifts pass@1 alone,
too-hard data gives no reward signal. So before a Part II RL stage gets its prompts and its
evaluation suite, measure where each domain's edge lies on the checkpoint RL starts from:
for every (domain, mode, op) cell, ``n`` held-out prompts (the ``eval`` split) are answered
once greedily (through the stage table's cached evaluation,
:func:`cascadekit.evaluation.stage_table.stage_table`) and ``k`` times sampled at the profile's
evaluation temperature and top-p (rolled out and judged as the stage table does, tool turns
included; a cached stage of its own, kind ``edge-samples``, keyed by the checkpoint's content).

Each cell reports

* **greedy**: the mean verifier score of the greedy answers;
* **pass@1**: the mean score of the ``k`` samples;
* **pass@k**: the unbiased estimator (:func:`cascadekit.passk.pass_at_k`) with ``n = k``,
  where a sample passes when its verifier gives full marks (1.0; for the graded general
  domain that is a right, concise and polite answer);
* **best-of-k**: the mean over prompts of the best sample's score (graded scores included);

and a band: **too easy** when greedy is above :data:`EASY_ABOVE` (RL can only lift pass@1
there), **too hard** when pass@k is below :data:`HARD_BELOW` (no group has a reward to
compare), else **edge**. Each cell also keeps its prompts' ids and greedy scores, so two
checkpoints measured on the same suite pair up prompt by prompt (:func:`paired`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from cascadekit.artifacts import artifact_path, shipped_folder, verify
from cascadekit.atomic import atomic_write_json, atomic_write_text
from cascadekit.domains import chat_record, configured, domains, draw_tasks, prompt_text, records_digest
from cascadekit.engine.runtime import choose_device, load_model, load_tokenizer
from cascadekit.evaluation.checkpoints import check_sources
from cascadekit.evaluation.sampler import folder_digest
from cascadekit.evaluation.stage_table import MAX_ROUNDS, generate, judge_records, rollout, stage_table
from cascadekit.passk import pass_at_k
from cascadekit.profiles import Profile
from cascadekit.results import markdown_table, stamped, write_result
from cascadekit.stages import Stage, digest, run_stage

#: Bumped when the same inputs would build other bytes (enters every key this module makes: stages.py).
RECIPE = 1

#: A cell whose greedy score is above this is too easy (the paper's edge: SFT greedy 0.2-0.6).
EASY_ABOVE = 0.6
#: A cell whose pass@k is below this is too hard: almost no group of k samples holds a success.
HARD_BELOW = 0.05
MODES = {"think": True, "no_think": False}
#: The sampled answers' per-sample results, in an ``edge-samples`` cache entry.
SAMPLES_FILE = "samples.json"
#: Sampling starts from this torch seed, so a rerun on the same weights reads the cache.
SAMPLE_SEED = 0


def band(greedy: float, pass_k: float) -> str:
    """``too easy`` (greedy above :data:`EASY_ABOVE`), ``too hard`` (pass@k below :data:`HARD_BELOW`), else ``edge``."""
    if greedy > EASY_ABOVE:
        return "too easy"
    return "too hard" if pass_k < HARD_BELOW else "edge"


def edge_records(profile: Profile, names: Sequence[str], modes: Sequence[str], ops: Sequence[int],
                 n: int) -> list[dict[str, Any]]:
    """``n`` eval-split prompts per (domain, op), each asked in every mode of ``modes``; each record names its ``op``."""
    unknown = [m for m in modes if m not in MODES] + [d for d in names if d not in domains()]
    if unknown:
        raise ValueError(f"unknown domain or mode {unknown[0]!r}: domains {', '.join(domains())}; "
                         f"modes {', '.join(MODES)}")
    records = []
    for name in names:
        for op in ops:
            for task in draw_tasks(configured(name, profile.domains), n, profile.seeds.eval, "eval", [op]):
                records += [{**chat_record(task, MODES[mode]), "op": op} for mode in modes]
    return records


def resolve_checkpoint(source: str) -> Path:
    """A checkpoint folder, or the cache entry ``KIND/KEY`` (cached, else shipped under ``data/checkpoints/``).

    A cache entry's files are checked against its manifest; anything else goes through
    :func:`cascadekit.evaluation.checkpoints.check_sources` (a model config, no remote code).
    """
    kind, _, key = source.partition("/")
    if not Path(source).exists() and key and "/" not in key:
        cached = artifact_path(kind, key)
        if cached.is_dir():
            verify(cached, kind, key)
            return cached
        if shipped := shipped_folder(kind, key):  # its own folder, or the one aliases.json names
            folder, named = shipped
            verify(folder, kind, named)
            return folder
        raise ValueError(f"{source}: no such cache entry, cached or shipped under data/checkpoints/")
    return check_sources([(source, source)], allow_download=False)[0]


def sampled_scores(checkpoint: Path, profile: Profile, records: Sequence[dict[str, Any]], k: int) -> list[list[float]]:
    """``k`` sampled answers per record, judged: one list of ``k`` scores per record (a cached stage)."""
    content = folder_digest(checkpoint)
    placement = choose_device(profile)
    cfg = profile.evaluation
    inputs = {"checkpoint_content": content, "suite": records_digest(records), "n": len(records), "k": k,
              "seed": SAMPLE_SEED, "temperature": cfg.temperature, "top_p": cfg.top_p,
              "max_new_tokens": profile.sft.max_new_tokens, "batch_size": cfg.batch_size, "max_rounds": MAX_ROUNDS,
              "device": placement.device, "dtype": placement.dtype}

    def build(folder: Path) -> Mapping[str, Any]:
        started = time.perf_counter()
        model, tokenizer = load_model(checkpoint, placement), load_tokenizer(checkpoint)
        torch.manual_seed(SAMPLE_SEED)
        repeated = [r for r in records for _ in range(k)]

        def sample(prompts: Sequence[str], max_new_tokens: int, batch_size: int) -> list[tuple[str, int]]:
            return generate(model, tokenizer, prompts, max_new_tokens, batch_size, cfg.temperature, cfg.top_p)

        answers = rollout(None, None, repeated, profile.sft.max_new_tokens, cfg.batch_size, sample)
        judged = judge_records(repeated, answers, "sampled")
        atomic_write_json(folder / SAMPLES_FILE, [{key: v for key, v in s.items() if key != "stage"} for s in judged])
        return {"samples": len(judged), "wall_s": round(time.perf_counter() - started, 1)}

    out = run_stage(Stage("edge-samples", inputs, build, recipe=RECIPE))
    scores = [s["score"] for s in json.loads((out.checkpoint / SAMPLES_FILE).read_text())]
    return [scores[i:i + k] for i in range(0, len(scores), k)]


def prompt_id(record: Mapping[str, Any]) -> str:
    """A prompt's identity across checkpoints: its rendered prompt and gold."""
    return digest([prompt_text(record), record["gold"]])


def cells(records: Sequence[dict[str, Any]], greedy: Sequence[float], samples: Sequence[Sequence[float]],
          k: int) -> list[dict[str, Any]]:
    """One cell per (domain, mode, op), in the records' order: the four scores, the band and the per-prompt greedy."""
    groups: dict[tuple[str, str, int], list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault((r["domain"], "think" if r["think"] else "no_think", r["op"]), []).append(i)
    out = []
    for (name, mode, op), idx in groups.items():
        passed = np.array([sum(s >= 1.0 for s in samples[i]) for i in idx])
        g = float(np.mean([greedy[i] for i in idx]))
        pk = float(np.mean(pass_at_k(np.full(len(idx), k), passed, k)))
        out.append({"domain": name, "mode": mode, "op": op, "n": len(idx), "greedy": g,
                    "pass@1": float(np.mean([np.mean(samples[i]) for i in idx])), f"pass@{k}": pk,
                    f"best-of-{k}": float(np.mean([max(samples[i]) for i in idx])), "band": band(g, pk),
                    "prompts": [{"id": prompt_id(records[i]), "greedy": greedy[i]} for i in idx]})
    return out


def paired(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per cell of both, ``b``'s greedy minus ``a``'s on the prompts they share (``n``), prompt by prompt."""
    before = {(c["domain"], c["mode"], c["op"]): {p["id"]: p["greedy"] for p in c["prompts"]} for c in a}
    out = []
    for cell in b:
        old = before.get((cell["domain"], cell["mode"], cell["op"]), {})
        diffs = [p["greedy"] - old[p["id"]] for p in cell["prompts"] if p["id"] in old]
        if diffs:
            out.append({"domain": cell["domain"], "mode": cell["mode"], "op": cell["op"], "n": len(diffs),
                        "difference": float(np.mean(diffs))})
    return out


def edges(source: str, profile: Profile, ops: Sequence[int], names: Sequence[str] | None = None,
          modes: Sequence[str] = tuple(MODES), n: int = 24, k: int = 8) -> dict[str, Any]:
    """The edge table of one checkpoint (``source``: a folder or ``KIND/KEY``): ``checkpoint``, ``k`` and ``cells``."""
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 prompts and k >= 1 samples, got n={n}, k={k}")
    checkpoint = resolve_checkpoint(source)
    records = edge_records(profile, list(names or domains()), modes, ops, n)
    greedy = [s["score"] for s in stage_table(checkpoint, profile, source, records)["samples"]]
    return {"checkpoint": source, "content": folder_digest(checkpoint), "k": k, "n": n, "ops": list(ops),
            "temperature": profile.evaluation.temperature, "top_p": profile.evaluation.top_p,
            "cells": cells(records, greedy, sampled_scores(checkpoint, profile, records, k), k)}


def edges_markdown(result: Mapping[str, Any]) -> str:
    """The cells as one Markdown table (without the per-prompt scores)."""
    rows = [{k: v for k, v in c.items() if k != "prompts"} for c in result["cells"]]
    return (f"Edges of `{result['checkpoint']}`: {result['n']} prompts per cell, greedy and {result['k']} samples "
            f"(temperature {result['temperature']}, top-p {result['top_p']}); too easy: greedy > {EASY_ABOVE}, "
            f"too hard: pass@{result['k']} < {HARD_BELOW}.\n\n" + markdown_table(rows, digits=2))


def write_edges(result: Mapping[str, Any], out: Path, command: str) -> Path:
    """``edges.md`` and ``edges.json`` in ``out``, both naming one provenance (:func:`cascadekit.results.stamped`)."""
    out.mkdir(parents=True, exist_ok=True)
    record = stamped(result, command)
    made = record["produced_by"]
    atomic_write_text(out / "edges.md", f"{edges_markdown(result)}\n\n*Produced by `{made['command']}` (code "
                      f"{made['code_version']}, commit {made['git_commit']}, {made['date']}).*\n")
    return write_result(out / "edges.json", record, command, keep_provenance=True)
