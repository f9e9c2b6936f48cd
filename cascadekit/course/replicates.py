"""Training-seed replicates: the same command once per training seed, each in a process of its own.

``cascadekit experiment NN --train-seed 0,1,2 --jobs 2`` (and ``cascadekit cascade``) runs one child
per seed: the same command line with that one seed and ``--threads 1``, at most ``jobs`` at once, each
writing its own log. Two single-thread processes side by side did 1.15-1.36x the work of one two-thread
run on these 2-core machines (issue 36), so replicates keep both cores busy this way rather than with
threads. The children share the artifact cache: its per-entry file locks (:mod:`cascadekit.artifacts`)
let the first child that asks for a stage every seed shares (the chat base, a tokenizer, a pretrained
base: none of them reads the training seed) build it while the others wait, then use it.
"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

#: The flags a child gets anew: its one seed, one thread, no jobs of its own.
CHILD_FLAGS = ("--train-seed", "--jobs", "--threads")


def seed_folder(root: Path, seed: int) -> Path:
    """Where one training seed's outputs go: ``root/train-seed-N``."""
    return Path(root) / f"train-seed-{seed}"


def child_argv(command: str, argv: Sequence[str], seed: int) -> list[str]:
    """``command``'s arguments ``argv`` for the child of ``seed``: :data:`CHILD_FLAGS` dropped, then set anew.

    The flags are appended last, where argparse's last value wins, so even an abbreviation
    of one left in ``argv`` cannot give a child two seeds or two threads.
    """
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in CHILD_FLAGS:
            skip = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in CHILD_FLAGS)):
            kept.append(arg)
    return [command, *kept, "--train-seed", str(seed), "--threads", "1"]


def _run_child(command: str, argv: Sequence[str], seed: int, log: Path) -> int:
    """One seed's child, its output streamed to ``log``; its exit status."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with log.open("w") as out:  # a log, streamed as the child runs (see tests/security/test_atomic_writes.py)
        done = subprocess.run([sys.executable, "-m", "cascadekit", *child_argv(command, argv, seed)],
                              stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    print(f"train seed {seed}: exit {done.returncode} (log {log})", flush=True)
    return done.returncode


def run_replicates(command: str, argv: Sequence[str], seeds: Sequence[int], jobs: int, logs: Path) -> dict[int, int]:
    """Each seed's child (:func:`child_argv`), at most ``jobs`` at once, logs in ``logs/train-seed-N.log``.

    Returns each seed's exit status, in the order of ``seeds``.
    """
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    logs = Path(logs)
    logs.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        print(f"train seed {seed}: log {seed_folder(logs, seed)}.log", flush=True)
    with ThreadPoolExecutor(max_workers=min(jobs, len(seeds))) as pool:
        codes = pool.map(lambda seed: _run_child(command, argv, seed, Path(f"{seed_folder(logs, seed)}.log")), seeds)
        return dict(zip(seeds, codes))


def failed_seeds(codes: dict[int, int]) -> list[int]:
    """The seeds whose child did not exit 0."""
    return [seed for seed, code in codes.items() if code != 0]
