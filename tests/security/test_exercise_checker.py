"""The exercise checker against a hostile student: hard limits, one process, no reference, no hang.

Each test is an attack on ``check``: it must end with a "not yet" verdict (or, for
a correct function, "right" with nothing left running), never with the notebook
hung, stopped, traced or killed, a limit raised, a forked process alive, or the
kit's own answer scored. The attacks of issue 56 (``checker_attacks.py``) run
here as the suite's user and again as uid 65534 in a subprocess.
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

import checker_attacks as attacks
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


def tag(test: str) -> str:
    """A process name of at most 15 characters, unique to this test run (what a forked process is found by)."""
    return f"ck{os.getpid() % 100_000}{test}"[:15]


@pytest.fixture
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "FUNCTION_TIMEOUT_S", 2.0)


# 1 · hard limits and one process ---------------------------------------------------------------

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


def test_a_function_that_forks_is_refused_and_leaves_nothing() -> None:
    name = tag("forks")

    def forks(n, c, k):
        if (n, c, k) == (1, 0, 1):
            for _ in range(10):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    attacks.name_this_process(name)
                    while True:
                        pass
            time.sleep(1.0)  # every child forked has named itself
        return pass_at_k(n, c, k)

    assert finishes(lambda: check("02.1", forks)).correct is True
    time.sleep(0.2)
    assert attacks.kill_named(name) == 0


def test_a_function_may_use_threads() -> None:
    def threaded(n, c, k):
        box = []
        workers = [threading.Thread(target=lambda: box.append(pass_at_k(n, c, k))) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return box[0]

    assert finishes(lambda: check("02.1", threaded)).correct is True


def test_the_process_budget_stops_a_fork_bomb() -> None:
    name = tag("bomb")

    def bomb() -> dict:
        for forked in range(200):
            try:
                pid = os.fork()
            except OSError:
                return {"forked": forked}
            if pid == 0:
                attacks.name_this_process(name)
                time.sleep(60)
                os._exit(0)
        return {"forked": 200}

    got = finishes(lambda: child.run_contained(bomb, 20))
    time.sleep(0.2)
    assert attacks.kill_named(name) == 0 and got["forked"] <= child.CHILD_PROCESSES, got


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


CHAPTER = "cascadekit.chapters.ch02_judging_a_solution"
CHAPTER_FILE = sys.modules[get("02.1").answer.reference.__module__].__file__


def registry_again(n, c, k):
    """Issue 56 (e): delete the refused ``sys.modules`` entries and import the registry again."""
    for name in [name for name, module in sys.modules.items() if module is None]:
        del sys.modules[name]
    from cascadekit.course.exercises import get as get_again

    return get_again("02.1").answer.reference(n, c, k)


def from_the_chapter_file(n, c, k):
    """The chapter's source run as a fresh module, past every import hook and refused entry."""
    import importlib.util

    for name in [name for name, module in sys.modules.items() if module is None]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location("fresh_ch02", CHAPTER_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._passk(n, c, k)


@pytest.mark.parametrize("cheat", [through_the_registry, by_import, through_gc, through_the_callers_frames,
                                   by_reloading, registry_again, from_the_chapter_file], ids=lambda f: f.__name__)
def test_the_kits_own_reference_does_not_score(cheat) -> None:
    verdict = finishes(lambda: check("02.1", cheat))
    assert verdict.correct is False and "Hint:" in verdict.message
    assert check("02.1", pass_at_k).correct is True  # the parent's registry still works afterwards
    with open(CHAPTER_FILE) as f:  # and nothing the child hid is hidden here
        assert "def _passk" in f.read()


def test_the_chapter_files_read_empty_in_the_child() -> None:
    import importlib.util

    cached = importlib.util.cache_from_source(CHAPTER_FILE)
    files = [CHAPTER_FILE] + ([cached] if os.path.exists(cached) else [])

    def sizes() -> dict:
        found = {}
        for path in files:
            with open(path, "rb") as f:
                found[path] = len(f.read())
        return found

    got = finishes(lambda: child.run_contained(sizes, 20))
    assert got == {path: 0 for path in files}, got


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


# 4 · issue 56: the notebook out of the function's reach, as this suite's user and as uid 65534 ---------

def test_the_function_cannot_trace_the_notebook() -> None:
    notebook = os.getpid()
    got = finishes(lambda: child.run_contained(lambda: attacks.trace(notebook, attach=False), 20))
    assert set(got) == {"ptrace", "mem"} and "allowed" not in got.values(), got


def test_the_function_cannot_signal_the_notebook() -> None:
    notebook, received = os.getpid(), []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        got = finishes(lambda: child.run_contained(lambda: attacks.signal_notebook(notebook, signal.SIGUSR1), 20))
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == [] and "kill" in got and got["kill"] != "allowed", got


def test_nothing_the_function_starts_outlives_the_check() -> None:
    got = finishes(lambda: attacks.attack("leave_behind", tag("left")))
    assert got["left"] == 0, got


def test_one_memory_ceiling_for_the_whole_check() -> None:
    got = finishes(lambda: attacks.attack("fill_memory", tag("mem")))
    assert within_one_ceiling(got["job"]) and got["left"] == 0, got


def within_one_ceiling(job: dict) -> bool:
    return job == {"stopped": "memory"} or job["touched_mib"] <= child.CHILD_MEMORY_BYTES // attacks.MIB


#: Outside /tmp, which the job sees as a private folder of its own: the files here are the ones it shares.
SHARED = "/var/tmp" if os.path.isdir("/var/tmp") else None


def test_the_function_cannot_change_the_files_the_check_reads() -> None:
    folder = tempfile.mkdtemp(prefix="checker-results-", dir=SHARED)
    try:
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "metrics.json")
        with open(path, "w") as f:
            f.write("{}")
        os.chmod(path, 0o666)  # the throwaway uid of a root check could write it
        got = finishes(lambda: attacks.attack("tamper", path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert got["content"] == "{}" and got["job"]["write"] != "allowed", got


NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
#: What the notebook side must see after each attack run as uid 65534.
AS_NOBODY = {
    "trace": lambda out: "allowed" not in out["job"].values() and not out["stopped"],
    "kill": lambda out: "kill" in out["job"] and out["job"]["kill"] != "allowed",
    "leave_behind": lambda out: out["left"] == 0,
    "fill_memory": lambda out: within_one_ceiling(out["job"]) and out["left"] == 0,
    "tamper": lambda out: out["content"] == "{}" and out["job"]["write"] != "allowed",
    "reference": lambda out: attacks.SECRET not in out["job"].values() and out["job"]["source_chars"] == 0,
    "hog": lambda out: out["job"] == {"stopped": "memory"},
}


@pytest.fixture(scope="module")
def nobody_home():
    """The kit, the attacks and a module defining an exercise, owned by uid 65534, outside /tmp (see SHARED)."""
    from pathlib import Path

    if os.geteuid() != 0 or not (shutil.which("setpriv") and os.path.exists(SYSTEM_PYTHON)):
        pytest.skip("as an ordinary user the tests above are this run; as root it needs setpriv and a system Python")
    home = Path(tempfile.mkdtemp(prefix="checker-nobody-", dir=SHARED))
    shutil.copytree(Path(child.__file__).parents[1], home / "cascadekit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(attacks.__file__, home / "checker_attacks.py")
    (home / "fake_chapter.py").write_text(attacks.FAKE_CHAPTER)
    for path in [home, *home.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(AS_NOBODY))
def test_the_attacks_fail_as_an_ordinary_user(nobody_home, name: str) -> None:
    """Run as uid 65534 with the system Python (the kit's interpreter may sit where that uid cannot read)."""
    import json
    import subprocess

    arg = tag(name[:4])
    if name == "tamper":  # a file of the user's own, as the committed results are
        arg = str(nobody_home / "metrics.json")
        with open(arg, "w") as f:
            f.write("{}")
        os.chown(arg, NOBODY, NOBODY)
    try:
        proc = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
             SYSTEM_PYTHON, "checker_attacks.py", name, arg],
            cwd=nobody_home, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(nobody_home), "HOME": str(nobody_home)},
            capture_output=True, text=True, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the notebook side never returned from the check (stopped or hung)")
    finally:
        attacks.kill_named(arg)
    assert proc.returncode == 0, f"{name}: the notebook side ended with {proc.returncode}: {proc.stderr[-2000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert AS_NOBODY[name](out), out
