"""The ``cascadekit`` command line: data, verify, run, book and env.

Every subcommand turns bad input (an unknown scale, context or chapter, an op
out of range, an unreadable JSONL line) into one clear error line and exit
status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def _ops(text: str) -> list[int]:
    """"2-5" -> [2, 3, 4, 5]; "2,4,7" -> [2, 4, 7]."""
    ops: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.partition("-")
            ops += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"bad op list {text!r}: use forms like 2-5 or 2,4,7") from err
    return ops


def cmd_data(args: argparse.Namespace) -> int:
    from cascadekit.world import generate_problems, write_jsonl

    problems = generate_problems(ops=args.ops, contexts=tuple(args.contexts.split(",")), n=args.count,
                                 seed=args.seed, split=args.split, style=args.style)
    write_jsonl(problems, args.out)
    by_op = Counter(p.op for p in problems)
    print(f"wrote {len(problems)} {args.split} problems to {args.out} (ops {dict(sorted(by_op.items()))})")
    return 0


def _read_outputs(path: Path) -> list[dict]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from err
        if not isinstance(record, dict) or "gold" not in record or "output" not in record:
            raise ValueError(f"{path}:{number}: each line needs 'gold' (a problem record) and 'output' (model text)")
        records.append(record)
    return records


def cmd_verify(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from cascadekit.verify.process import judge
    from cascadekit.world import Problem

    records = _read_outputs(Path(args.outputs))
    verdicts = []
    for number, record in enumerate(records, 1):
        try:
            problem = Problem.from_dict(record["gold"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{args.outputs}: record {number}: malformed gold problem ({err})") from err
        verdicts.append(judge(str(record["output"]), problem))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for verdict in verdicts:
            fh.write(json.dumps(asdict(verdict)) + "\n")
    n = max(len(verdicts), 1)
    correct = sum(v.correct for v in verdicts)
    print(f"judged {len(verdicts)} outputs -> {out}")
    print(f"  process-verified correct: {correct}/{len(verdicts)} ({correct / n:.1%})")
    print(f"  answer correct:           {sum(v.answer_correct for v in verdicts)}/{len(verdicts)}")
    print(f"  mean process accuracy:    {sum(v.process_accuracy for v in verdicts) / n:.3f}")
    print(f"  solutions with missing node {sum(v.n_missing > 0 for v in verdicts)}, dependency mismatch "
          f"{sum(v.n_dependency > 0 for v in verdicts)}, value mismatch {sum(v.n_value > 0 for v in verdicts)}, "
          f"answer mismatch {sum(v.answer_mismatch for v in verdicts)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from cascadekit.profiles import parse_overrides
    from cascadekit.runner import ChapterFailed, run_course

    try:
        results = run_course(args.scale, Path(args.out), only=args.only.split(",") if args.only else None,
                             seed=args.seed, overrides=parse_overrides(args.set))
    except ChapterFailed as err:
        print(err, file=sys.stderr)
        return 1
    for r in results:
        print(f"{r.chapter:<40} {r.status:<8} {r.wall_s:7.1f} s")
    print(f"summary: {Path(args.out) / 'summary.md'}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from cascadekit.envinfo import describe_environment

    env = describe_environment()
    print(env.short() if args.short else env.long())
    return 0


def cmd_book(args: argparse.Namespace) -> int:
    from cascadekit.book import BookBuildError, broken_internal_links, build_book

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cascadekit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="write generated DAG problems to JSONL")
    data.add_argument("--ops", type=_ops, default=_ops("2-10"), help="op counts, e.g. 2-10 or 2,5,9")
    data.add_argument("--contexts", default="A", help="comma-separated contexts: A (zoo), B (school), C (festival)")
    data.add_argument("--split", default="pretrain", help="pretrain, midtrain, rl or eval")
    data.add_argument("--count", type=int, default=100)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--style", default="full", help="rendering: full, compact or minimal")
    data.add_argument("--out", required=True)
    data.set_defaults(func=cmd_data)

    verify = sub.add_parser("verify", help="judge model outputs against gold with the process verifier")
    verify.add_argument("outputs", help="JSONL with one {'gold': problem, 'output': text} per line")
    verify.add_argument("--out", default="verdicts.jsonl", help="where to write per-item verdicts")
    verify.set_defaults(func=cmd_verify)

    run = sub.add_parser("run", help="execute the notebooks headlessly with papermill")
    run.add_argument("--scale", default="smoke", help="smoke, toy, paper or full")
    run.add_argument("--out", default="runs/smoke")
    run.add_argument("--only", default="", help="comma-separated chapters, e.g. 01,02")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="profile override, repeatable")
    run.set_defaults(func=cmd_run)

    book = sub.add_parser("book", help="build the HTML book from notebooks executed by `cascadekit run`")
    book.add_argument("--executed", default="runs/smoke", help="folder of executed notebooks")
    book.add_argument("--out", default="book/_build/html")
    book.set_defaults(func=cmd_book)

    env = sub.add_parser("env", help="stack versions, device, dtype, memory and known problems")
    env.add_argument("--short", action="store_true")
    env.set_defaults(func=cmd_env)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # ProfileError is a ValueError
        print(f"cascadekit {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
