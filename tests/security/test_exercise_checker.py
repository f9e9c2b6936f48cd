"""The exercise checker against a hostile student: hard limits, a group kill, no reference, no hang.

Each test is an attack on ``check``: it must end with a "not yet" verdict (or, for
a correct function, "right" with nothing left running), never with the notebook
hung, a limit raised, a forked process alive, or the kit's own answer scored.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import types
from typing import Any, Callable

import pytest

from cascadekit.course.exercises import check, get
from cascadekit.exercises import answers, child

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child's limits use Linux")


def pass_at_k(n: int, c: int, k: int) -> float:
    """A correct answer to 02.1, so that only the attack decides the verdict."""
    return 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)


def finishes(call: Callable[[], Any], within: float = 60.0) -> Any:
    """``call()``'s value; fails the test (instead of hanging the suite) if it does not return in time."""
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(call()), daemon=True)
    worker.start()
    worker.join(within)
    assert not worker.is_alive(), f"check() still running after {within:g} s: it hangs the notebook"
    return box[0]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture
def pid_file():
    """A file the student's processes append their pids to; every pid read is killed afterwards.

    A file, not an inherited pipe: the checker's child closes every descriptor it
    inherits but its result pipe. The throwaway uid a root check runs as may write it.
    """
    folder = tempfile.mkdtemp(prefix="checker-pids-", dir="/tmp")
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "pids")
    with open(path, "w"):
        pass
    os.chmod(path, 0o666)
    pids: list[int] = []

    def collected() -> list[int]:
        with open(path) as f:
            pids[:] = [int(p) for p in f.read().split()]
        return list(pids)

    yield path, collected
    for pid in pids:  # on a checker that leaks them, this test's own processes must not outlive it
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def note_pid(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"{os.getpid()} ")


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "FUNCTION_TIMEOUT_S", 2.0)


# 1 · hard limits and the group kill ------------------------------------------------------------

def test_a_function_cannot_raise_its_memory_ceiling_and_touch_3_gb() -> None:
    def hog(n, c, k):
        import resource

        for limits in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), resource.getrlimit(resource.RLIMIT_AS)[::-1]):
            try:
                resource.setrlimit(resource.RLIMIT_AS, (limits[-1], limits[-1]))
            except (ValueError, OSError):
                pass
        block = bytearray(3 << 30)  # touched: bytearray zero-fills it
        return pass_at_k(n, c, k) + 0 * len(block)

    verdict = finishes(lambda: check("02.1", hog))
    assert verdict.correct is False and "memory" in verdict.message


def test_the_limits_are_hard_in_the_child() -> None:
    def limits() -> dict:
        import resource

        return {name: resource.getrlimit(getattr(resource, name)) for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NPROC")}

    got = child.run_contained(limits, 10)
    assert got["RLIMIT_AS"][0] == got["RLIMIT_AS"][1] != -1
    assert -1 not in got["RLIMIT_CPU"] and -1 not in got["RLIMIT_NPROC"]
    assert got["RLIMIT_NPROC"][0] == got["RLIMIT_NPROC"][1]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root changes uid or drops capabilities")
@pytest.mark.parametrize("throwaway", [True, False], ids=["throwaway uid", "few uids mapped"])
def test_root_keeps_only_the_right_to_read(monkeypatch: pytest.MonkeyPatch, throwaway: bool) -> None:
    if not throwaway:  # a user namespace mapping 65,536 uids: no throwaway uid to take
        monkeypatch.setattr(child, "_throwaway_uid", lambda: None)

    def identity() -> dict:
        with open("/proc/self/status") as f:
            status = dict(line.split(":", 1) for line in f)
        return {"uid": os.getuid(), "effective": int(status["CapEff"], 16), "bounding": int(status["CapBnd"], 16)}

    got = child.run_contained(identity, 10)
    assert (got["uid"] != 0) is throwaway
    assert got["effective"] == got["bounding"] == 1 << 2  # CAP_DAC_READ_SEARCH only


def test_forked_spinning_children_die_with_the_check(pid_file) -> None:
    path, collected = pid_file

    def forks(n, c, k):
        if (n, c, k) == (1, 0, 1):
            for _ in range(10):
                if os.fork() == 0:
                    note_pid(path)
                    while True:
                        pass
            time.sleep(1.0)  # every child has written its pid
        return pass_at_k(n, c, k)

    assert finishes(lambda: check("02.1", forks)).correct is True
    pids = collected()
    assert len(pids) == 10
    time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="as an ordinary user a process that calls setsid leaves the group")
def test_a_child_that_leaves_the_group_dies_too(pid_file) -> None:
    path, collected = pid_file

    def escapes(n, c, k):
        if (n, c, k) == (1, 0, 1) and os.fork() == 0:
            os.setsid()
            note_pid(path)
            while True:
                pass
        if (n, c, k) == (1, 0, 1):
            time.sleep(1.0)  # the child has left the group and written its pid
        return pass_at_k(n, c, k)

    assert finishes(lambda: check("02.1", escapes)).correct is True
    pids = collected()
    time.sleep(0.2)
    assert len(pids) == 1 and not alive(pids[0])


def test_the_process_budget_stops_a_fork_bomb(pid_file) -> None:
    path, collected = pid_file

    def bomb(n, c, k):
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                note_pid(path)
                time.sleep(60)
                os._exit(0)
        return pass_at_k(n, c, k)

    finishes(lambda: check("02.1", bomb))
    pids = collected()
    assert len(pids) <= child.CHILD_PROCESSES
    time.sleep(0.2)
    assert [pid for pid in pids if alive(pid)] == []


# 2 · the expected values and the reference are out of reach ----------------------------------

def through_the_registry(n, c, k):
    return get("02.1").answer.reference(n, c, k)


def by_import(n, c, k):
    from cascadekit.chapters.ch02_judging_a_solution import _passk

    return _passk(n, c, k)


def through_gc(n, c, k):
    import gc

    found = next(f for f in gc.get_objects() if isinstance(f, types.FunctionType) and f.__name__ == "_passk")
    return found(n, c, k)


def through_the_callers_frames(n, c, k):
    frame = sys._getframe(1)
    while frame is not None:
        spec = frame.f_locals.get("self")
        if hasattr(spec, "reference"):
            return spec.reference(n, c, k)
        frame = frame.f_back
    raise LookupError("no reference in the frames")


def by_reloading(n, c, k):
    import importlib

    name = "cascadekit.chapters.ch02_judging_a_solution"
    module = sys.modules.get(name) or importlib.import_module(name)
    return importlib.reload(module)._passk(n, c, k)


@pytest.mark.parametrize("cheat", [through_the_registry, by_import, through_gc, through_the_callers_frames,
                                   by_reloading], ids=lambda f: f.__name__)
def test_the_kits_own_reference_does_not_score(cheat) -> None:
    verdict = finishes(lambda: check("02.1", cheat))
    assert verdict.correct is False and "Hint:" in verdict.message
    assert check("02.1", pass_at_k).correct is True  # the parent's registry still works afterwards


def forged_through_a_pipe(n, c, k):
    """Sends an empty result list through any pipe it finds (caller frames, then every open fd), and exits."""
    forged = b'{"results": []}'
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if hasattr(value, "send_bytes"):
                value.send_bytes(forged)
        frame = frame.f_back
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and stat.S_ISFIFO(os.fstat(int(name)).st_mode):  # not the test's own output
                os.write(int(name), len(forged).to_bytes(8, "big") + forged)
        except OSError:
            pass
    os._exit(0)


def test_a_message_forged_into_the_pipe_does_not_score() -> None:
    verdict = finishes(lambda: check("02.1", forged_through_a_pipe))
    assert verdict.correct is False


# 3 · nothing the student returns can hang the notebook -------------------------------------------

class EndlessFloat(float):
    def __float__(self) -> float:
        while True:
            pass


class EndlessStrip(str):
    def strip(self, chars: Any = None) -> str:
        while True:
            pass


class EndlessEquality(str):
    def __hash__(self) -> int:
        while True:
            pass

    def __eq__(self, other: object) -> bool:
        while True:
            pass


@pytest.mark.parametrize("exercise_id, answer", [
    ("04.2", EndlessFloat(1.0)), ("06.2", EndlessStrip("light_rl")),
], ids=["float", "strip"])
def test_an_answer_whose_coercion_loops_gets_a_verdict_in_time(short_timeout, exercise_id, answer) -> None:
    start = time.monotonic()
    verdict = finishes(lambda: check(exercise_id, answer))
    assert verdict.correct is False and "longer than 2 s" in verdict.message
    assert time.monotonic() - start < 30


def test_an_exercise_id_that_hashes_forever_is_not_an_exercise() -> None:
    verdict = finishes(lambda: check(EndlessEquality("02.1"), pass_at_k), within=10)
    assert verdict.correct is None and "no exercise" in verdict.message


# the same containment as an ordinary user (uid 65534), as on a student's laptop -------------------

AS_NOBODY = r"""
import json, os, resource, time
from cascadekit.exercises.child import CHILD_PROCESSES, run_contained

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False

def hog():
    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    return {"touched": len(bytearray(3 << 30))}

import tempfile
fd, path = tempfile.mkstemp()
os.close(fd)
def forks():
    for _ in range(10):
        if os.fork() == 0:
            with open(path, "a") as f:
                f.write(f"{os.getpid()} ")
            while True:
                pass
    time.sleep(1.0)
    return {"forked": 10}

out = {"memory": run_contained(hog, 20), "forks": run_contained(forks, 20)}
with open(path) as f:
    pids = [int(p) for p in f.read().split()]
os.unlink(path)
time.sleep(0.2)
out["left"] = [pid for pid in pids if alive(pid)]
out["pids"] = len(pids)
for pid in out["left"]:
    os.kill(pid, 9)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not (os.path.exists("/usr/bin/setpriv") and os.path.exists("/usr/bin/python3")),
                    reason="as an ordinary user the tests above are this run; as root it needs setpriv and a system Python")
def test_the_limits_and_the_group_kill_hold_as_an_ordinary_user() -> None:
    import json
    import subprocess
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="checker-nobody-", dir="/tmp"))
    try:
        os.chmod(home, 0o755)
        shutil.copytree(Path(child.__file__).parents[1], home / "cascadekit",
                        ignore=shutil.ignore_patterns("__pycache__"))
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
             "/usr/bin/python3", "-c", AS_NOBODY],  # the kit's interpreter may sit where uid 65534 cannot read
            cwd=home, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(home), "HOME": str(home)},
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["memory"] == {"stopped": "memory"}
    assert out["forks"] == {"forked": 10} and out["pids"] == 10 and out["left"] == []
