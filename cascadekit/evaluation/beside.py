"""Stage tables built in a second process while the next stage trains (``cascadekit cascade --jobs 2``, one seed).

Why: a toy cascade evaluates a stage table (1,536 greedy prompts, about 80 s of one
core in the second world) after each of its six stages, and no later stage reads
it; the next stage's training needs only the checkpoint. GRPO gains little from a
second thread (1.12x at 1.75x the CPU, issue 36), so one seed uses both cores best
as one training thread and one evaluating process beside it. Each table is still
:func:`cascadekit.evaluation.stage_table.cached_stage_table`'s cached stage (same key,
same lock), so the results are the ones an inline evaluation writes, and a table
another process already built is read, not built again.

:class:`StageTables` hands tables back in the order the stages were submitted,
inline when ``beside`` is off; an error in the evaluating process is raised here,
in the caller, by :meth:`StageTables.ready`.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Mapping, Sequence

from cascadekit.evaluation.stage_table import cached_stage_table
from cascadekit.profiles import Profile, set_threads
from cascadekit.stages import StageOutput

#: A stage's tables: each suite's name -> ``cached_stage_table``'s dict (rows, samples, wall_s).
Tables = dict[str, dict[str, Any]]


def stage_tables(stage: StageOutput, profile: Profile, name: str,
                 suites: Mapping[str, Sequence[dict[str, Any]]]) -> Tables:
    """Every suite's cached stage table of ``stage``, labelled ``name``."""
    return {suite: cached_stage_table(stage, profile, name, records) for suite, records in suites.items()}


class StageTables:
    """Stage tables of the stages submitted, in submission order, built inline or in one spawned process."""

    def __init__(self, profile: Profile, suites: Mapping[str, Sequence[dict[str, Any]]], beside: bool = False) -> None:
        self.profile, self.suites = profile, {name: list(records) for name, records in suites.items()}
        self.pending: list[tuple[str, Future | Tables]] = []
        # spawn, not fork: the parent holds torch's thread pools and the trainer's state
        self.pool = (ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=set_threads,
                                         initargs=(1,)) if beside else None)

    def submit(self, stage: StageOutput, name: str) -> None:
        """Evaluate ``stage`` (labelled ``name``) on every suite: now, or in the evaluating process."""
        if self.pool is None:
            self.pending.append((name, stage_tables(stage, self.profile, name, self.suites)))
        else:
            self.pending.append((name, self.pool.submit(stage_tables, stage, self.profile, name, self.suites)))

    def ready(self, wait: bool = False) -> list[tuple[str, Tables]]:
        """The tables finished since the last call, oldest first (all of them, waiting, with ``wait``)."""
        out = []
        while self.pending:
            name, tables = self.pending[0]
            if isinstance(tables, Future):
                if not (wait or tables.done()):
                    break
                tables = tables.result()
            out.append((name, tables))
            self.pending.pop(0)
        return out

    def close(self) -> None:
        """Stop the evaluating process (after the tables already submitted, unless they failed)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "StageTables":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
