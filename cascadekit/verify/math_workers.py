"""math-verify in bounded worker processes: every verdict within a deadline and a memory limit, on any thread.

Why processes: math-verify's own timeouts are signals, which work only on the
main thread, and even there a signal cannot stop a long big-integer computation
inside sympy. Measured: ``\\boxed{2^{2^{64}}}`` (10 characters) gave no verdict in
300 s on a worker thread and held 3.7 GB; ``9^{9^{9^{9^{9}}}}`` and
``10^{10^{10}}-10^{10^{10}}+1`` none within 60 s. A verdict from another process can
be bounded from outside, whatever thread asks for it:

* each worker runs under ``RLIMIT_AS`` (its address space, so a runaway
  allocation is a ``MemoryError`` in the worker, never the trainer's memory);
* the parent waits for each answer at most ``deadline_s``; a worker that
  overruns is killed and a fresh one takes the rest of its batch.

A worker is a plain interpreter running :func:`serve`: it imports math-verify
once, says it is ready, then reads one JSON line per batch (a list of
``[predicted, gold]``) and writes one JSON line per pair, ``[verdict, note]``
with the verdict true, false or null (math-verify raised: the note says what).
It calls math-verify without its signal timeouts (the deadline is the parent's).
A batch is split across the workers, so IPC is paid once per chunk, not per
verdict; ``cascadekit bench math-verify`` measures the bounded path's verdicts per
second against calling math-verify directly, in the same run.

Where the kit departs from calling math-verify directly: the gold is parsed as
``$gold$`` and the prediction as ``$\\boxed{predicted}$`` (as the released math
reward always did), and no verdict (deadline, memory, a crash) is None with a
reason, for the caller to decide (:func:`cascadekit.verify.released.verify_math`
falls back to the kit's own check).
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

__all__ = ["MathVerifyPool", "serve", "shared_pool"]

#: Seconds a fresh worker may take to import math-verify and judge one warm-up pair (not a verdict's deadline).
START_TIMEOUT_S = 120.0
_READY = "ready"
Answer = tuple[bool | None, str]


def serve(memory_bytes: int, parent: int) -> None:
    """A worker's loop (run in its own interpreter): judge each batch read from stdin, one answer line per pair.

    It dies with the thread that started it (Linux's parent-death signal: a pool's
    own threads start its workers and live as long as it), so a killed trainer
    leaves no worker computing a power tower; elsewhere it ends when its stdin
    closes, between verdicts.
    """
    import ctypes
    import logging
    import resource
    import signal

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass
    if os.getppid() != parent:  # the parent died before the signal was asked for
        return
    import math_verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns on every call made without its timeouts
    answers = os.fdopen(os.dup(1), "w")  # the answers' own channel: whatever else prints goes to stderr
    os.dup2(2, 1)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _judge(math_verify, "1", "1")  # sympy's lazy imports now, not inside the first verdict's deadline
    print(_READY, file=answers, flush=True)
    for line in sys.stdin:
        for predicted, gold in json.loads(line):
            print(json.dumps(_judge(math_verify, predicted, gold)), file=answers, flush=True)


def _judge(module, predicted: str, gold: str) -> Answer:  # noqa: ANN001 - the math_verify module
    try:
        return bool(module.verify(module.parse(f"${gold}$", parsing_timeout=None),
                                  module.parse(f"$\\boxed{{{predicted}}}$", parsing_timeout=None),
                                  timeout_seconds=None)), ""
    except MemoryError:
        return None, "it ran out of memory"
    except Exception as err:  # noqa: BLE001 - a checker's failure on hostile text is no verdict, never a crash
        return None, f"it raised {type(err).__name__}"


def _answer(line: str) -> Answer:
    """A worker's answer line as ``(verdict, note)``; anything else is no verdict."""
    try:
        verdict, note = json.loads(line)
    except (ValueError, TypeError):
        return None, "its worker's answer was unreadable"
    return (verdict if isinstance(verdict, bool) else None), str(note)


class _Worker:
    """One worker process and the unread bytes of its answers."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes, self.proc, self.buffer = memory_bytes, None, b""

    def start(self) -> str | None:
        """Start the process if it is not running; None when it is ready, else why it is not."""
        if self.proc is not None and self.proc.poll() is None:
            return None
        root = str(Path(__file__).resolve().parents[2])
        code = (f"import sys; sys.path.append({root!r}); from cascadekit.verify.math_workers import serve; "
                f"serve({self.memory_bytes}, {os.getpid()})")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        except OSError as err:  # no process to be had (a process limit, no memory): no verdict, never a crash
            return f"its worker did not start ({err.strerror or type(err).__name__})"
        self.buffer = b""
        if self.read_line(START_TIMEOUT_S) != _READY:
            self.stop()
            return "its worker did not start"
        return None

    def read_line(self, timeout_s: float) -> str | None:
        """The next line the worker writes, or None when it writes none within ``timeout_s`` or exits."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                stream.close()
            self.proc = None

    def judge(self, pairs: Sequence[tuple[str, str]], deadline_s: float) -> list[Answer]:
        """Each pair's answer; a pair that overruns ``deadline_s`` (or kills the worker) is None, the rest go on
        in a fresh worker."""
        answers: list[Answer] = []
        while len(answers) < len(pairs):
            failed = self.start()
            if failed is not None:  # no worker to be had: none of the rest gets a verdict
                return answers + [(None, failed)] * (len(pairs) - len(answers))
            failed = self._send(pairs[len(answers):])
            while failed is None and len(answers) < len(pairs):
                line = self.read_line(deadline_s)
                if line is None:
                    died = self.proc.poll() is not None
                    failed = (f"its worker died (exit status {self.proc.returncode})" if died else
                              f"none within {deadline_s:g} s: its worker was stopped")
                else:
                    answers.append(_answer(line))
            if failed is not None:
                self.stop()
                answers.append((None, failed))
        return answers

    def _send(self, pairs: Sequence[tuple[str, str]]) -> str | None:
        try:
            self.proc.stdin.write(json.dumps([list(p) for p in pairs]).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return "its worker died"
        return None


class MathVerifyPool:
    """``workers`` math-verify processes under ``memory_bytes`` each; :meth:`verdicts` is safe from any thread."""

    def __init__(self, workers: int, memory_bytes: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers!r}")
        self.workers, self.memory_bytes = workers, memory_bytes
        self._all = [_Worker(memory_bytes) for _ in range(workers)]
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        for worker in self._all:
            self._idle.put(worker)
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="math-verify")

    def _on_a_worker(self, pairs: Sequence[tuple[str, str]], deadline_s: float) -> list[Answer]:
        worker = self._idle.get()
        try:
            return worker.judge(pairs, deadline_s)
        finally:
            self._idle.put(worker)

    def verdicts(self, pairs: Sequence[tuple[str, str]], deadline_s: float) -> list[Answer]:
        """math-verify's verdict on each ``(predicted, gold)``, or None with why; each within ``deadline_s``
        once a worker has it (a caller may first wait for a free worker)."""
        if not pairs:
            return []
        size = -(-len(pairs) // self.workers)
        chunks = [pairs[i:i + size] for i in range(0, len(pairs), size)]
        done = self._threads.map(lambda chunk: self._on_a_worker(chunk, deadline_s), chunks)
        return [answer for answers in done for answer in answers]

    def pids(self) -> list[int]:
        """The process ids of the workers running now (to measure their CPU time or read their limits)."""
        return [proc.pid for proc in (w.proc for w in self._all) if proc is not None]

    def close(self) -> None:
        """Stop every worker (a later call starts them again)."""
        for _ in range(self.workers):
            worker = self._idle.get()
            worker.stop()
            self._idle.put(worker)


_shared: dict[int, MathVerifyPool] = {}  # by process id: a forked child never talks to its parent's workers
_shared_lock = threading.Lock()


def shared_pool(workers: int, memory_bytes: int) -> MathVerifyPool:
    """This process's pool (made on first use, stopped at exit)."""
    with _shared_lock:
        pool = _shared.get(os.getpid())
        if pool is None:
            pool = _shared[os.getpid()] = MathVerifyPool(workers, memory_bytes)
            atexit.register(pool.close)
        return pool
