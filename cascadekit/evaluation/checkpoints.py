"""Evaluating a list of checkpoints, released or the kit's, into one stage table, with vLLM when it is there.

``cascadekit evaluate-checkpoints SFT=nvidia/... RLHF=... --scale full`` gives a
reader with a GPU the paper's stage-by-stage view without training: each
``STAGE=SOURCE`` (a checkpoint folder or a hub name, downloaded only when allowed)
is loaded with its own tokenizer and the kit's chat template
(:func:`cascadekit.engine.runtime.load_chat_tokenizer`), asked every prompt of the kit's
suites (or of ``--records``, chat records in the kit's format) in both modes, and
judged by the domains' verifiers; the rows go into one table
(:func:`cascadekit.evaluation.stage_table.stage_markdown`) and the paper-vs-run
table of the last stage.

Generation is vLLM's when the profile's ``engine.vllm`` asks for it, vLLM
is installed and a GPU is there (:func:`cascadekit.engine.generation.uses_vllm`;
greedy, like the transformers path, one engine at a time: each is freed before the
next checkpoint loads), else transformers'; the summary says which. The kit's suites are the toy DAG
surfaces: a released 8B model answers them, but the paper's benchmarks (AIME,
LiveCodeBench, SWE-bench...) are not loaded here.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from cascadekit.atomic import atomic_write_text
from cascadekit.domains import check_record
from cascadekit.evaluation.stage_table import (
    aggregate, judge_records, paper_vs_run, rollout, stage_markdown, suite_records,
)
from cascadekit.profiles import Profile
from cascadekit.results import write_result
from cascadekit.engine.generation import greedy_generator, uses_vllm
from cascadekit.engine.runtime import (
    DownloadNotAllowed, checkpoint_folder, choose_device, load_chat_tokenizer, load_model,
)

__all__ = ["check_sources", "evaluate_checkpoints", "parse_checkpoints"]

#: What makes a folder a checkpoint: a model's config, or a LoRA adapter's (loaded onto its base).
CONFIG_FILES = ("config.json", "adapter_config.json")
#: A model's config.json is a few kB; a larger one is not read.
MAX_CONFIG_BYTES = 1 << 20


def parse_checkpoints(pairs: Sequence[str]) -> list[tuple[str, str]]:
    """``["SFT=path", ...]`` as ``[(stage, source)]``; one ValueError for a malformed or repeated stage."""
    out: list[tuple[str, str]] = []
    for pair in pairs:
        stage, sep, source = pair.partition("=")
        stage, source = stage.strip(), source.strip()
        if not sep or not stage or not source:
            raise ValueError(f"checkpoint {pair!r} is not of the form STAGE=FOLDER_OR_HUB_NAME")
        if any(stage == s for s, _ in out):
            raise ValueError(f"stage {stage!r} is named twice")
        out.append((stage, source))
    if not out:
        raise ValueError("name at least one checkpoint as STAGE=FOLDER_OR_HUB_NAME")
    return out


def check_sources(checkpoints: Sequence[tuple[str, str]], allow_download: bool | None = None) -> list[Path]:
    """Each source's local folder (a hub name's cached or downloaded snapshot), before any model loads.

    A missing folder, a hub name that is not cached with downloading off, a
    folder with no readable ``config.json`` (or a LoRA adapter's ``adapter_config.json``:
    an empty folder, a tokenizer alone) and
    a config that asks to run the folder's own code (``auto_map``: the kit never
    trusts remote code, and never asks) are one ValueError naming the stage, so
    the last checkpoint of a list cannot fail after the first one was evaluated
    for an hour.
    """
    folders = []
    for stage, source in checkpoints:
        try:
            folder = checkpoint_folder(source, allow_download=allow_download)
        except DownloadNotAllowed as err:
            raise ValueError(f"{stage}: {err}") from None
        if "auto_map" in _config(folder, stage):
            raise ValueError(f"{stage}: {folder}'s config asks to run code shipped with the checkpoint (auto_map); "
                             f"the kit never runs a checkpoint's own code")
        folders.append(folder)
    return folders


def _config(folder: Path, stage: str) -> dict[str, Any]:
    """``folder``'s model (or adapter) config as a JSON object, or a ValueError saying why it is not a checkpoint's."""
    path = next((folder / name for name in CONFIG_FILES if (folder / name).is_file()), None)
    if path is None:
        raise ValueError(f"{stage}: {folder} is not a checkpoint folder (it has no {' or '.join(CONFIG_FILES)})")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{stage}: {path} is larger than {MAX_CONFIG_BYTES:,} bytes: not a model config")
    try:
        config = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{stage}: {path} is not JSON ({type(err).__name__})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{stage}: {path} is a JSON {type(config).__name__}, not an object")
    return config


def evaluate_checkpoints(checkpoints: Sequence[tuple[str, str]], profile: Profile, out: Path,
                         records: Sequence[dict[str, Any]] | None = None,
                         allow_download: bool | None = None,
                         command: str = "cascadekit evaluate-checkpoints") -> list[dict[str, Any]]:
    """Every checkpoint on the same records; writes ``stage_table.md``, ``rows.json`` and ``samples.jsonl`` to ``out``.

    ``rows.json`` is ``{"produced_by": ..., "checkpoints": ..., "rows": ...}`` (:func:`cascadekit.results.write_result`),
    ``command`` the one recorded there.

    Records and sources (:func:`check_sources`) are checked before any model loads, so a malformed one
    costs no GPU time.
    """
    records = list(suite_records(profile) if records is None else records)
    for record in records:
        check_record(record)
    folders = check_sources(checkpoints, allow_download)
    use_vllm = uses_vllm(profile)
    rows: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for (stage, source), folder in zip(checkpoints, folders):
        tokenizer = load_chat_tokenizer(source, allow_download=allow_download)
        if use_vllm:
            with greedy_generator(folder, tokenizer, profile) as generate_fn:
                answers = rollout(None, None, records, profile.sft.max_new_tokens, profile.evaluation.batch_size,
                                  generate_fn)
        else:
            model = load_model(source, choose_device(profile), allow_download=allow_download)
            answers = rollout(model, tokenizer, records, profile.sft.max_new_tokens, profile.evaluation.batch_size)
        judged = judge_records(records, answers, stage)
        rows += [asdict(row) for row in aggregate(judged, stage)]
        samples += [{**s, "source": source} for s in judged]
    out.mkdir(parents=True, exist_ok=True)
    backend = "vLLM" if use_vllm else "transformers"
    table = "\n\n".join([f"Checkpoints: {', '.join(f'{s} = {src}' for s, src in checkpoints)}; "
                         f"{len(records)} records; generation: {backend} (greedy).", stage_markdown(rows),
                         paper_vs_run(rows, checkpoints[-1][0])])
    atomic_write_text(out / "stage_table.md", table + "\n")
    write_result(out / "rows.json", {"checkpoints": [{"stage": s, "source": src} for s, src in checkpoints], "rows": rows}, command)
    atomic_write_text(out / "samples.jsonl", "".join(json.dumps(s) + "\n" for s in samples))
    return rows
