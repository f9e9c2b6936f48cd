"""The papers' released data sets, streamed with ``datasets`` and mapped into the kit's chat records.

Each released set is described here as data (:class:`ReleasedSet`): the hub
repository, its data files by kit domain, its kind, and for each field the kit
needs the column names that may hold it (the first present wins). A row becomes
the record every Part II stage already reads (:func:`cascadekit.domains.chat_record`'s
shape): ``domain``, ``think``, ``messages`` (the user turn ending in ``/think`` or
``/no_think``; an SFT record also has its assistant turns), ``tools`` (one JSON
string or None), ``gold`` (what the domain's reward needs) and ``source``.

* **SFT** (Nemotron-Cascade-SFT-Stage-1, -Stage-2, -SWE): ``messages`` as
  released. The mode comes from the row's thinking flag when it has one
  (``thinking`` true/false, or ``thinking_mode`` ``thinking``/``instruct``), else
  from the last user turn's ``/think`` ``/no_think``, else from whether the
  answer carries reasoning (a non-empty ``<think>`` block or ``reasoning_content``).
* **RL** (Nemotron-Cascade-RL-RLHF, -Instruction-Following, -Math, -SWE, and a
  competitive-coding set for Code RL): a prompt and its gold: the preference
  prompt (RLHF), the IFEval-style ``instruction_id_list`` and ``kwargs`` (IF-RL),
  the short answer (Math RL), the unit tests as ``[stdin, stdout]`` pairs (Code
  RL), the issue, the relevant files' contents and the reference patch (SWE RL).
  An SWE prompt is the issue followed by each relevant file in a fenced block
  (the model cannot write a patch to files it never saw), and its gold's
  ``context`` maps each path to its content (released as a list of
  ``{file_path, content}``).
* **Interplay** (``Interplay-LM-Reasoning/composition`` and ``/context``): a math
  record; the prompt is ``problem`` then ``question``, the reasoning the
  ``solution`` up to its last ``Answer:``, the answer ``\\boxed{...}`` of what
  follows it, and the gold keeps ``op``, ``depth``, ``template`` and ``mode``.

Where the columns come from: the Interplay fields are the ones its repository's
README lists; the SFT sets' ``messages`` (and SFT-SWE's ``category``,
``generator``, ``thinking``) the ones public processing code reads. The RL sets'
column names could not be read here from their data cards, so each kit field
lists the usual names (``problem``/``question``/``prompt``, ``answer``/``expected_answer``, ...),
and a row with none of them is one :class:`MissingField` error naming the set, the
field, the names tried and the columns the row has: the first row of a real file
tells whether a name is missing here. The fixtures under ``tests/fixtures/released/``
copy these schemas by hand; no test downloads anything.

A hub repository is streamed (never fully downloaded) and only when downloads
are allowed (:func:`cascadekit.engine.runtime.download_allowed`); a local file or folder
never touches the network.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from cascadekit.chat import thinking_mode, with_flag
from cascadekit.domains import check_record
from cascadekit.engine.runtime import DownloadNotAllowed, download_allowed, hub_cache_dir

__all__ = ["KINDS", "MissingField", "ReleasedSet", "available_pools", "released_sets", "stream_records",
           "to_record"]

KINDS = ("sft", "rlhf", "if", "math", "code", "swe", "interplay")


class MissingField(ValueError):
    """A released row without a field the kit needs (names the set, the field, the names tried, the row's columns)."""


@dataclass(frozen=True)
class ReleasedSet:
    """One released data set: where it is, which kit domain each file is, and which columns hold what.

    ``files`` maps a kit domain to the repository's data files of it (globs as
    ``datasets`` takes them); ``columns`` maps each kit field to the column names
    that may hold it, tried in order.
    """

    name: str
    repo: str
    kind: str
    files: Mapping[str, Sequence[str]]
    columns: Mapping[str, Sequence[str]] = field(default_factory=dict)
    paper: str = ""


_SFT_COLUMNS = {"messages": ("messages", "conversations"), "thinking": ("thinking", "thinking_mode", "reasoning"),
                "tools": ("tools",)}


def released_sets() -> dict[str, ReleasedSet]:
    """Every released set the kit can read, by name."""
    sets = [
        ReleasedSet("cascade-sft-stage1", "nvidia/Nemotron-Cascade-SFT-Stage-1", "sft",
                    {"general": ["general.jsonl", "science.jsonl"], "math": ["math/*.jsonl"], "code": ["code/*.jsonl"]},
                    _SFT_COLUMNS, "Nemotron-Cascade SFT stage 1 (16K): general, science, math, code"),
        ReleasedSet("cascade-sft-stage2", "nvidia/Nemotron-Cascade-SFT-Stage-2", "sft",
                    {"general": ["general/*.jsonl", "science.jsonl"], "math": ["math/*.jsonl"],
                     "code": ["code/*.jsonl"], "instructions": ["instruction-following.jsonl"],
                     "tools": ["tool_calling.jsonl"], "swe": ["swe_*.jsonl"]},
                    _SFT_COLUMNS, "Nemotron-Cascade SFT stage 2 (32K): adds tool calling, SWE, instruction following"),
        ReleasedSet("cascade-sft-swe", "nvidia/Nemotron-Cascade-SFT-SWE", "sft", {"swe": ["*.jsonl"]},
                    _SFT_COLUMNS, "Nemotron-Cascade SWE SFT: localization, repair, test generation"),
        ReleasedSet("cascade-rl-rlhf", "nvidia/Nemotron-Cascade-RL-RLHF", "rlhf", {"general": ["*.jsonl"]},
                    {"prompt": ("prompt", "question", "messages")}, "RLHF prompts (the reward model scores answers)"),
        ReleasedSet("cascade-rl-if", "nvidia/Nemotron-Cascade-RL-Instruction-Following", "if",
                    {"instructions": ["*.jsonl"]},
                    {"prompt": ("prompt", "question"), "instruction_id_list": ("instruction_id_list",),
                     "kwargs": ("kwargs",)}, "IF-RL prompts with IFEval-style verifiable instructions"),
        ReleasedSet("cascade-rl-math", "nvidia/Nemotron-Cascade-RL-Math", "math", {"math": ["*.json", "*.jsonl"]},
                    {"prompt": ("problem", "question", "prompt"), "answer": ("answer", "expected_answer")},
                    "Math RL: 14,476 problems with short answers"),
        ReleasedSet("cascade-rl-code", "nvidia/Nemotron-RL-coding-competitive_coding", "code",
                    {"code": ["*.jsonl", "*.parquet"]},
                    {"prompt": ("question", "problem", "prompt"), "tests": ("tests", "test_cases", "input_output")},
                    "Code RL: competitive-programming problems with stdin/stdout unit tests"),
        ReleasedSet("cascade-rl-swe", "nvidia/Nemotron-Cascade-RL-SWE", "swe", {"swe": ["*.jsonl", "*.parquet"]},
                    {"prompt": ("problem_statement", "prompt", "issue"), "patch": ("patch", "golden_patch", "gold_patch"),
                     "context": ("relevant_file_contents",)},
                    "SWE RL: issues, the relevant files' contents, reference patches"),
        ReleasedSet("interplay-composition", "Interplay-LM-Reasoning/composition", "interplay", {"math": []},
                    {"problem": ("problem",), "question": ("question",), "solution": ("solution",), "op": ("op",)},
                    "Interplay: extrapolative generalization (operation count)"),
        ReleasedSet("interplay-context", "Interplay-LM-Reasoning/context", "interplay", {"math": []},
                    {"problem": ("problem",), "question": ("question",), "solution": ("solution",), "op": ("op",)},
                    "Interplay: contextual generalization (templates and narratives)"),
    ]
    return {s.name: s for s in sets}


# ---------------------------------------------------------------------------
# One row -> one record
# ---------------------------------------------------------------------------


def _field(spec: ReleasedSet, row: Mapping[str, Any], name: str, where: str, required: bool = True) -> Any:
    names = spec.columns.get(name, (name,))
    for column in names:
        if column in row and row[column] is not None:
            return row[column]
    if required:
        raise MissingField(f"{spec.name} ({where}): no field for {name!r}; tried {list(names)}, "
                           f"the row has {sorted(row)}")
    return None


def _flag_of(value: Any) -> bool | None:
    """A row's thinking flag as a bool (``true``/``false``, ``"thinking"``/``"instruct"``, ``"on"``/``"off"``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("thinking", "think", "on", "true", "yes", "reasoning"):
            return True
        if text in ("instruct", "no_think", "non-thinking", "off", "false", "no"):
            return False
    return None


_THINK_BLOCK = re.compile(r"^\s*<think>(.*?)</think>", re.S)


def _messages(spec: ReleasedSet, row: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    raw = _field(spec, row, "messages", where)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise MissingField(f"{spec.name} ({where}): field 'messages' is not a JSON list: {err}") from None
    if not isinstance(raw, list) or not raw:
        raise MissingField(f"{spec.name} ({where}): field 'messages' must be a non-empty list of turns")
    messages = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, Mapping):
            raise MissingField(f"{spec.name} ({where}): messages[{i}] is not an object")
        role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        if role is None or not isinstance(content, str):
            raise MissingField(f"{spec.name} ({where}): messages[{i}] needs 'role' and string 'content', "
                               f"has {sorted(turn)}")
        message = {"role": {"human": "user", "gpt": "assistant"}.get(role, role), "content": content}
        for extra in ("reasoning_content", "tool_calls"):
            if turn.get(extra):
                message[extra] = turn[extra]
        messages.append(message)
    return messages


def _sft_think(spec: ReleasedSet, row: Mapping[str, Any], messages: list[dict[str, Any]], where: str) -> bool:
    flag = _flag_of(_field(spec, row, "thinking", where, required=False))
    if flag is not None:
        return flag
    users = [m for m in messages if m["role"] == "user"]
    if not users:
        raise MissingField(f"{spec.name} ({where}): 'messages' has no user turn")
    text = users[-1]["content"].rstrip()
    if text.endswith(("/think", "/no_think")):
        return thinking_mode(text)
    answers = [m for m in messages if m["role"] == "assistant"]
    block = _THINK_BLOCK.match(answers[-1]["content"]) if answers else None
    return bool((block and block.group(1).strip()) or any(m.get("reasoning_content") for m in answers))


def _flagged(messages: list[dict[str, Any]], think: bool) -> list[dict[str, Any]]:
    """``messages`` with the last user turn ending in the mode's flag (the kit's template reads it there)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return [{**m, "content": with_flag(m["content"], think)} if i == last else m for i, m in enumerate(messages)]


def _tools(value: Any) -> str | None:
    if value in (None, "", []):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _prompt_text(spec: ReleasedSet, row: Mapping[str, Any], where: str) -> str:
    prompt = _field(spec, row, "prompt", where)
    if isinstance(prompt, list):  # a conversation: its last user turn
        users = [t.get("content") for t in prompt if isinstance(t, Mapping) and t.get("role") == "user"]
        prompt = users[-1] if users else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise MissingField(f"{spec.name} ({where}): field 'prompt' must be non-empty text")
    return prompt


def _io_tests(spec: ReleasedSet, value: Any, where: str) -> list[list[str]]:
    """A Code RL row's unit tests as ``[stdin, stdout]`` pairs: a list of ``{input, output}``, or ``{inputs, outputs}``
    (either may be JSON text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise MissingField(f"{spec.name} ({where}): field 'tests' is not JSON: {err}") from None
    if isinstance(value, Mapping) and isinstance(value.get("inputs"), list) and isinstance(value.get("outputs"), list):
        value = [{"input": i, "output": o} for i, o in zip(value["inputs"], value["outputs"])]
    if not isinstance(value, list) or not value:
        raise MissingField(f"{spec.name} ({where}): field 'tests' must be a non-empty list of {{input, output}}")
    pairs = []
    for i, case in enumerate(value):
        if not (isinstance(case, Mapping) and all(isinstance(case.get(k), str) for k in ("input", "output"))):
            raise MissingField(f"{spec.name} ({where}): tests[{i}] needs string 'input' and 'output'")
        pairs.append([case["input"], case["output"]])
    return pairs


def _files(spec: ReleasedSet, value: Any, where: str) -> dict[str, str]:
    """The SWE row's relevant files as ``{path: content}``: released as a list of ``{file_path, content}``."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = [{"file_path": k, "content": v} for k, v in value.items()]
    elif isinstance(value, list):
        items = value
    else:
        raise MissingField(f"{spec.name} ({where}): field 'context' must be a list of {{file_path, content}}")
    files = {}
    for i, item in enumerate(items):
        if not (isinstance(item, Mapping) and isinstance(item.get("file_path"), str)
                and isinstance(item.get("content"), str)):
            raise MissingField(f"{spec.name} ({where}): relevant_file_contents[{i}] needs string 'file_path' "
                               f"and 'content'")
        files[item["file_path"]] = item["content"]
    return files


def _with_files(issue: str, files: Mapping[str, str]) -> str:
    """The SWE prompt: the issue, then each relevant file under its path in a fenced block."""
    shown = "".join(f"\n\n{path}\n```\n{content.rstrip()}\n```" for path, content in files.items())
    return f"{issue.strip()}{shown}"


def _split_solution(solution: str) -> tuple[str, str]:
    """Interplay's ``solution`` as (reasoning, answer): split at its last ``Answer:``, as the paper's code does."""
    if "Answer:" not in solution:
        return solution.strip(), ""
    body, answer = solution.rsplit("Answer:", 1)
    lines = answer.strip().splitlines()
    return body.strip(), (lines[0].strip().rstrip(".") if lines else "")


def to_record(spec: ReleasedSet, row: Mapping[str, Any], domain: str, *, think: bool | None = None,
              where: str = "row") -> dict[str, Any]:
    """One released row of ``spec`` as a kit chat record of ``domain``; :class:`MissingField` if a field is missing.

    ``think`` sets the mode of an RL prompt (default: the paper's, ``/no_think``
    for IF-RL on the unified model, ``/think`` otherwise); SFT rows carry their own.
    """
    if not isinstance(row, Mapping):
        raise MissingField(f"{spec.name} ({where}): a row must be an object, got {type(row).__name__}")
    source = f"{spec.repo}:{where}"
    if spec.kind == "sft":
        messages = _messages(spec, row, where)
        mode = _sft_think(spec, row, messages, where)
        record = {"domain": domain, "think": mode, "messages": _flagged(messages, mode),
                  "tools": _tools(_field(spec, row, "tools", where, required=False)), "gold": {}, "source": source}
    elif spec.kind == "interplay":
        problem, question = (str(_field(spec, row, k, where)).strip() for k in ("problem", "question"))
        reasoning, answer = _split_solution(str(_field(spec, row, "solution", where)))
        if not answer:
            raise MissingField(f"{spec.name} ({where}): field 'solution' has no 'Answer:' line")
        mode = True if think is None else think
        gold = {"answer": answer, "op": _field(spec, row, "op", where),
                **{k: row[k] for k in ("depth", "id", "template", "mode") if k in row}}
        final = f"\\boxed{{{answer}}}"
        messages = [{"role": "user", "content": with_flag(f"{problem} {question}".strip(), mode)},
                    {"role": "assistant", "content": final, "reasoning_content": reasoning if mode else ""}]
        record = {"domain": domain, "think": mode, "messages": messages, "tools": None, "gold": gold, "source": source}
    else:
        mode = (spec.kind != "if") if think is None else think
        prompt = _prompt_text(spec, row, where)
        gold: dict[str, Any] = {}
        if spec.kind == "if":
            gold = {"instruction_id_list": list(_field(spec, row, "instruction_id_list", where)),
                    "kwargs": _field(spec, row, "kwargs", where)}
        elif spec.kind == "math":
            gold = {"answer": str(_field(spec, row, "answer", where))}
        elif spec.kind == "code":
            gold = {"tests": _io_tests(spec, _field(spec, row, "tests", where), where)}
        elif spec.kind == "swe":
            files = _files(spec, _field(spec, row, "context", where, required=False), where)
            gold = {"patch": _field(spec, row, "patch", where), "context": files}
            prompt = _with_files(prompt, files)
        messages = [{"role": "user", "content": with_flag(prompt, mode)}]
        record = {"domain": domain, "think": mode, "messages": messages, "tools": None, "gold": gold, "source": source}
    try:
        return check_record(record, check_gold=False)
    except ValueError as err:
        raise MissingField(f"{spec.name} ({where}): {err}") from None


# ---------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------


def _local_files(source: Path, patterns: Sequence[str]) -> list[str]:
    if source.is_file():
        return [str(source)]
    found = sorted({str(p) for pattern in (patterns or ["*.jsonl", "*.json", "*.parquet"]) for p in source.glob(pattern)})
    if not found:
        raise FileNotFoundError(f"no data files matching {list(patterns) or ['*.jsonl', '*.json', '*.parquet']} "
                                f"under {source}")
    return found


def _builder(files: Sequence[str]) -> str:
    suffixes = {Path(f).suffix for f in files}
    if suffixes <= {".jsonl", ".json"}:
        return "json"
    if suffixes == {".parquet"}:
        return "parquet"
    raise ValueError(f"cannot read data files of types {sorted(suffixes)} together: {list(files)[:3]}")


def stream_records(name: str, domain: str | None = None, source: str | os.PathLike | None = None, *,
                   limit: int | None = None, think: bool | None = None,
                   allow_download: bool | None = None) -> Iterator[dict[str, Any]]:
    """Records of released set ``name`` (one ``domain`` of it, or its only one), streamed row by row.

    ``source`` is a local file or folder in the released layout (a copy, or a
    test fixture); None streams the hub repository, which needs downloads
    allowed (:class:`cascadekit.engine.runtime.DownloadNotAllowed` otherwise). Rows are
    read with ``datasets``' streaming mode, so nothing is held in memory.
    """
    from datasets import load_dataset

    sets = released_sets()
    if name not in sets:
        raise ValueError(f"unknown released set {name!r}; known: {', '.join(sets)}")
    spec = sets[name]
    if domain is None:
        if len(spec.files) != 1:
            raise ValueError(f"{name} holds several domains ({', '.join(spec.files)}): name one")
        domain = next(iter(spec.files))
    if domain not in spec.files:
        raise ValueError(f"{name} has no {domain!r} data; it has {', '.join(spec.files)}")
    patterns = list(spec.files[domain])
    if source is not None:
        files = _local_files(Path(source).expanduser(), patterns)
        stream = load_dataset(_builder(files), data_files=files, split="train", streaming=True)
        where = Path(source).name
    else:
        if not download_allowed(allow=allow_download):
            raise DownloadNotAllowed(
                f"released set {name} streams from the Hugging Face Hub ({spec.repo}) and downloading is off; "
                f"allow it with CASCADEKIT_ALLOW_DOWNLOAD=1 or allow_download=True, or pass a local copy as source "
                f"(datasets caches under {os.environ.get('HF_DATASETS_CACHE', hub_cache_dir())})")
        stream = load_dataset(spec.repo, data_files=patterns or None, split="train", streaming=True)
        where = spec.repo
    for i, row in enumerate(stream):
        if limit is not None and i >= limit:
            return
        yield to_record(spec, row, domain, think=think, where=f"{where} row {i}")


def available_pools(pools: Mapping[str, Callable[[], list[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """Each domain's pool, built; a domain whose released file is missing is skipped with a note (a warning).

    For a stage that mixes domains (SFT, joint RL): one missing file costs that
    domain, not the stage; none left is one FileNotFoundError.
    """
    built = {}
    for domain, build in pools.items():
        try:
            built[domain] = build()
        except FileNotFoundError as err:
            warnings.warn(f"skipping domain {domain!r}: {err}", stacklevel=2)
    if not built:
        raise FileNotFoundError(f"no released data could be read for any of the domains {', '.join(pools)}")
    return built
