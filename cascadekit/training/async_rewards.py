"""Asynchronous rewards: verify each rollout as soon as it is written, while the others are still generating.

The paper's Code RL computes rewards asynchronously (VeRL), cutting the average
verification time per step from 1172.4 s to 416.2 s (8 nodes, batch 128,
rollout 8). TRL 1.16 accepts ``async`` reward functions, but it awaits them
inside the step, after generation has finished: they overlap each other, never
the generation. :class:`StreamingRewards` overlaps verification with generation
itself, inside TRL's own HF generation path:

* Attached to a ``GRPOTrainer`` (:meth:`StreamingRewards.attach`), it notes each
  generation batch's dataset rows (``domain``, ``gold``, ...) and hands the
  model's ``generate`` a stopping criterion that never stops anything. After each
  decoding step the criterion looks for rows that have just emitted an end token;
  each such rollout is decoded (chat markers kept, as
  :func:`cascadekit.rewards.reading_markup` decodes it) and sent to a pool of
  ``workers`` threads that verify it (the sandbox runs in a subprocess, so the
  threads wait on it without holding the GIL). Rows cut at the length limit are
  sent when ``generate`` returns.
* When TRL calls the reward, it collects the finished verdicts in the batch's
  order and waits only for the ones still running: the exposed verification
  time. A rollout whose text differs from what was sent (it cannot in TRL 1.16,
  but the check is cheap) is verified again on the spot, so the rewards are the
  synchronous rewards, always.
* Each distinct rollout of a batch is verified once: a rollout equal to one
  already sent (same prompt, text and dataset row,
  :func:`cascadekit.rewards.row_key`) shares its verdict (``stats["repeats"]``).

Sampling is untouched (same batch, same random draws): a run with streaming
gives the same rollouts and rewards as one without, only the time differs.
``stream=False`` keeps the same pool but sends everything when the reward is
called: the blocking baseline of :mod:`cascadekit.bench.async_rewards` (``cascadekit bench async-rewards``).

What is hidden depends on how spread the rollouts' end times are: verification
can only start when a rollout ends, and at toy scale most rollouts of a batch end
in the second half of its generation, so only that window is there to hide
verification in (the rollout that ends last can never be hidden). The paper's
setup also overlaps the next batch's work; strict on-policy GRPO here needs this
batch's rewards before the update, so only generation is there to hide behind.
On a CPU, sandboxed verification is itself CPU work (one interpreter per run):
workers on the same cores as generation slow generation down, so streaming pays
most when verification runs elsewhere (other cores, other machines) or waits on
something other than this CPU.

The kit's own decode loop (``engine.rollouts: kit``, a ``rollout_func`` that takes
``on_finished``) reports each row the step it ends, so it streams the same way.
Under vLLM (``use_vllm``, colocated or a server) or another ``rollout_func`` there is
no decoding loop to watch: the engine hands the whole batch back at once. Then the
trainer's ``_generate`` is wrapped instead, and every rollout of the finished batch
goes to the pool as soon as it returns, so verification runs on the ``workers``
threads while TRL builds its tensors and computes the old (and reference)
log-probabilities, which it does before it scores (``stats["sent_after_generation"]``).
The rewards are the same either way.

Scope: TRL 1.16's GRPO on one process per batch (each process verifies its own
rollouts); it wraps the trainer's private ``_generate_and_score_completions`` and
``_generate`` (and, for HF generation, the model's ``generate``), and
:meth:`~StreamingRewards.attach` fails loudly if they move. The reward must score
each completion on its own (the domain verifiers do).
"""
from __future__ import annotations

import inspect
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import wraps
from typing import Any, Callable, Mapping, Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList, TrainerCallback

from cascadekit.chat import END_OF_TURN, stop_token_ids
from cascadekit.rewards import RewardFn, row_key

__all__ = ["StreamingRewards"]

#: Dataset columns TRL hands a reward that are no per-row data.
_NOT_ROW_DATA = ("prompt", "completion", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments")


class _FinishedRows(StoppingCriteria):
    """A stopping criterion that stops nothing: it reports each row the first time it holds an end token."""

    def __init__(self, prompt_length: int, stop_ids: Sequence[int], on_finished: Callable[[int, list[int]], None]):
        self.prompt_length = prompt_length
        self.stop_ids = torch.tensor(list(stop_ids))
        self.on_finished = on_finished
        self.sent: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids[:, self.prompt_length:]
        if self.sent is None:
            self.sent = torch.zeros(generated.size(0), dtype=torch.bool)
        is_end = torch.isin(generated.cpu(), self.stop_ids)
        for row in torch.nonzero(is_end.any(dim=1) & ~self.sent).flatten().tolist():
            end = int(is_end[row].int().argmax())
            self.sent[row] = True
            self.on_finished(row, generated[row, : end + 1].tolist())
        return torch.zeros(input_ids.size(0), dtype=torch.bool, device=input_ids.device)

    def unsent(self, rows: int) -> list[int]:
        return [r for r in range(rows) if self.sent is None or not bool(self.sent[r])]


class StreamingRewards(TrainerCallback):
    """A per-completion ``reward`` verified on ``workers`` threads as rollouts finish (see the module docstring).

    Use as a TRL reward function after :meth:`attach`; it keeps ``reward``'s
    ``__name__`` (a GRPO stage's key names its reward by it: streaming changes no
    reward). :attr:`stats` counts what was sent early, what was waited for, and
    the summed verification seconds.
    """

    def __init__(self, reward: RewardFn, tokenizer: Any, workers: int, stream: bool = True,
                 end: str = END_OF_TURN) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        self.reward, self.tokenizer, self.workers, self.stream, self.end = reward, tokenizer, workers, stream, end
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._rows: list[Mapping[str, Any]] = []
        self._sent: dict[int, tuple[str, Future]] = {}
        self._verdicts: dict[str, Future] = {}  # this batch's verifications, by rollout (row_key)
        self._hooked: Any = None  # the model whose generate is wrapped
        self.stats = {"completions": 0, "sent_while_generating": 0, "sent_after_generation": 0, "reverified": 0,
                      "repeats": 0, "verify_s": 0.0, "wait_s": 0.0}

    # -- the pool ----------------------------------------------------------
    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="reward")
        return self._pool

    @property
    def running(self) -> bool:
        """Whether worker threads are up (false again after :meth:`close`)."""
        return self._pool is not None

    def close(self) -> None:
        """Wait for running verifications and stop the workers (a later call starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "StreamingRewards":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001 - Trainer callback signature
        """Stop the workers and give the model back its own ``generate``."""
        self.close()
        if self._hooked is not None:
            self._hooked.__dict__.pop("generate", None)
            self._hooked = None

    def summary(self) -> dict[str, float]:
        """:attr:`stats` rounded, and the estimated share of verification hidden behind generation.

        A blocking pool of the same ``workers`` would hold the step for at least
        ``verify_s / workers`` (perfect sharing); the step here waited ``wait_s``.
        The estimate ``1 - wait_s / (verify_s / workers)`` is what the benchmark
        measures directly, against a blocking run.
        """
        blocking = self.stats["verify_s"] / self.workers
        hidden = 1 - self.stats["wait_s"] / blocking if blocking > 0 else 0.0
        return {**{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()},
                "hidden_share_estimate": round(max(0.0, hidden), 3)}

    # -- one completion ----------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        """A rollout's text with its chat markers, cut at the end-of-turn marker (as ``reading_markup`` reads it)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False).split(self.end, 1)[0]

    def _score_one(self, prompt: Any, text: str, row: Mapping[str, Any]) -> float:
        started = time.perf_counter()
        try:
            return float(self.reward([prompt], [text], **{k: [v] for k, v in row.items()})[0])
        finally:
            with self._lock:
                self.stats["verify_s"] += time.perf_counter() - started

    def submit(self, index: int, text: str) -> None:
        """Start verifying row ``index`` of the current batch as ``text`` (or share the verdict of its repeat)."""
        row = self._rows[index]
        prompt, data = row.get("prompt"), _row_data(row)
        key = row_key(prompt, text, data)
        if key in self._verdicts:
            self.stats["repeats"] += 1
        else:
            self._verdicts[key] = self.pool.submit(self._score_one, prompt, text, data)
        self._sent[index] = (text, self._verdicts[key])

    def begin(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """A new generation batch: ``rows`` are its dataset rows, one per rollout, in TRL's order."""
        self._rows, self._sent, self._verdicts = list(rows), {}, {}

    # -- the reward TRL calls ------------------------------------------------
    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        ids = kwargs.get("completion_ids")
        if ids is None or len(ids) != len(completions):
            raise ValueError("StreamingRewards needs TRL's completion_ids, one per completion")
        texts = [self.decode(row) for row in ids]
        row_data = {k: v for k, v in kwargs.items() if k not in _NOT_ROW_DATA}
        if len(self._rows) != len(texts):  # called outside an attached trainer's batch: verify them all now
            self.begin([{"prompt": p, **{k: v[i] for k, v in row_data.items()}} for i, p in enumerate(prompts)])
        started = time.perf_counter()
        for i, text in enumerate(texts):
            sent = self._sent.get(i)
            if sent is None:
                self.submit(i, text)
            elif sent[0] != text:
                self.stats["reverified"] += 1
                self.submit(i, text)
        rewards = [self._sent[i][1].result() for i in range(len(texts))]
        self.stats["wait_s"] += time.perf_counter() - started
        self.stats["completions"] += len(texts)
        self._rows, self._sent, self._verdicts = [], {}, {}
        return rewards

    # -- inside TRL ----------------------------------------------------------
    def attach(self, trainer: Any) -> None:
        """Hook ``trainer`` (a TRL 1.16 ``GRPOTrainer``) so rollouts are verified as they finish.

        HF generation, or a ``rollout_func`` that takes ``on_finished`` (the kit's
        decode loop, :func:`cascadekit.training.rollouts.kit_rollouts`): each rollout
        as it emits its end token. vLLM or another ``rollout_func``: the whole batch
        as soon as the engine returns it.
        """
        for name in ("_generate_and_score_completions", "_generate"):
            if not callable(getattr(trainer, name, None)):
                raise RuntimeError(f"TRL moved GRPOTrainer.{name}: StreamingRewards needs updating")
        rollout_func, use_vllm = getattr(trainer, "rollout_func", None), getattr(trainer.args, "use_vllm", False)
        if rollout_func is not None and not use_vllm and "on_finished" in inspect.signature(rollout_func).parameters:
            self._attach_to_rollouts(trainer)
            return
        if use_vllm or rollout_func is not None:
            self._attach_after_generation(trainer)
            return
        model = trainer.model
        if not callable(getattr(model, "generate", None)):
            raise RuntimeError("the trainer's model has no generate method")
        inner_generate = model.generate
        stop_ids = stop_token_ids(self.tokenizer)

        @wraps(inner_generate)
        def generate(*args: Any, **kwargs: Any) -> Any:
            if not self.stream or len(self._rows) == 0:
                return inner_generate(*args, **kwargs)
            prompt_length = kwargs["input_ids"].size(1)
            watch = _FinishedRows(prompt_length, stop_ids, self._sent_early)
            kwargs["stopping_criteria"] = StoppingCriteriaList([*kwargs.get("stopping_criteria", []), watch])
            out = inner_generate(*args, **kwargs)
            for row in watch.unsent(out.size(0)):  # cut at the length limit: no end token, send it all now
                self.submit(row, self.decode(out[row, prompt_length:].tolist()))
            return out

        self._begin_each_step(trainer)
        model.generate = generate
        self._hooked = model
        trainer.add_callback(self)

    def _begin_each_step(self, trainer: Any) -> None:
        """Have every GRPO step announce its batch's rows (:meth:`begin`) before it generates."""
        inner_step = trainer._generate_and_score_completions

        @wraps(inner_step)
        def step(inputs: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
            self.begin(inputs)
            return inner_step(inputs, *args, **kwargs)

        trainer._generate_and_score_completions = step

    def _attach_to_rollouts(self, trainer: Any) -> None:
        """Hand the trainer's ``rollout_func`` :meth:`_sent_early` as its ``on_finished`` (rows cut at the length
        limit are verified when the reward is called)."""
        inner_rollouts = trainer.rollout_func

        @wraps(inner_rollouts)
        def rollouts(prompts: list, trainer_: Any) -> Any:
            if not self.stream or len(self._rows) == 0:
                return inner_rollouts(prompts, trainer_)
            return inner_rollouts(prompts, trainer_, on_finished=self._sent_early)

        self._begin_each_step(trainer)
        trainer.rollout_func = rollouts
        trainer.add_callback(self)

    def _attach_after_generation(self, trainer: Any) -> None:
        """Send every rollout of a batch to the pool when ``_generate`` returns it (vLLM: no decoding loop to watch)."""
        inner_generate = trainer._generate

        @wraps(inner_generate)
        def generate(*args: Any, **kwargs: Any) -> Any:
            out = inner_generate(*args, **kwargs)
            completion_ids = out[1]  # TRL 1.16: (prompt_ids, completion_ids, ...), this process's rows
            if self.stream and len(completion_ids) == len(self._rows):
                for row, ids in enumerate(completion_ids):
                    self.stats["sent_after_generation"] += 1
                    self.submit(row, self.decode(ids))
            return out

        self._begin_each_step(trainer)
        trainer._generate = generate
        trainer.add_callback(self)

    def _sent_early(self, row: int, ids: list[int]) -> None:
        if row < len(self._rows):
            self.stats["sent_while_generating"] += 1
            self.submit(row, self.decode(ids))


def _row_data(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _NOT_ROW_DATA}
