"""Attacks of issue 56 on the exercise checker's child, shared by the run as root and the run as uid 65534.

Each attack is a job for :func:`cascadekit.exercises.child.run_contained`, which
runs what a student's function would run; :func:`attack` runs one and gathers
what the notebook side sees afterwards. Only the standard library and
``cascadekit.exercises`` are imported: the unprivileged run executes this file
with the system Python as uid 65534 (``python3 checker_attacks.py NAME``),
outside the test environment, and prints the outcome as one JSON line.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from typing import Any

from cascadekit.exercises.child import run_contained

PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
MIB = 1 << 20
#: A module that defines an exercise, as a chapter does: its reference must not score in the child.
FAKE_CHAPTER = '''
from cascadekit.exercises import Exercise, Function

def _cases():
    return [(1,)]

def _reference(x):
    return 42.0 + x

EXERCISES = [Exercise("99.1", "t", "t", Function(_cases, _reference), "h", "answer = None")]
'''
SECRET = 43.0  # _reference(1)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[-1].split()[0] in ("T", "t")


def note(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + " ")


def notes(path: str) -> list[str]:
    with open(path) as f:
        return f.read().split()


def _errno_of(call: Any) -> str:
    try:
        return "allowed" if call() in (None, 0) else os.strerror(ctypes.get_errno())
    except OSError as error:
        return error.strerror or type(error).__name__


def trace(notebook: int, attach: bool) -> dict[str, str]:
    """ptrace the notebook (PTRACE_ATTACH stops it: with ``attach`` False only PTRACE_SEIZE, which does not)
    and open its memory; each is "allowed" or why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    request = PTRACE_ATTACH if attach else PTRACE_SEIZE
    got = {"ptrace": _errno_of(lambda: libc.ptrace(request, notebook, None, None))}
    got["mem"] = _errno_of(lambda: os.close(os.open(f"/proc/{notebook}/mem", os.O_RDONLY)))
    if attach and got["ptrace"] == "allowed":
        time.sleep(0.5)  # the notebook is stopped by now; the tracer's exit leaves it stopped
    return got


def signal_notebook(notebook: int, signum: int) -> dict[str, str]:
    return {"kill": _errno_of(lambda: os.kill(notebook, signum))}


def leave_behind(path: str, count: int = 7) -> dict[str, Any]:
    """Fork ``count`` spinning processes that leave the session (``setsid``) and note their pids."""
    forked = []
    for _ in range(count):
        try:
            pid = os.fork()
        except OSError as error:
            return {"forked": len(forked), "refused": error.strerror}
        if pid == 0:
            os.setsid()
            note(path, str(os.getpid()))
            while True:
                pass
        forked.append(pid)
    time.sleep(1.0)  # every one has noted its pid
    return {"forked": len(forked)}


def fill_memory(path: str, processes: int = 4, mib: int = 400) -> dict[str, Any]:
    """Touch ``mib`` MiB in this process and in ``processes - 1`` forks at once; each notes "pid:MiB"."""
    forked = 0
    for _ in range(processes - 1):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                block = b"\x01" * (mib * MIB)  # written, so resident
                note(path, f"{os.getpid()}:{len(block) // MIB}")
                time.sleep(60)
            finally:
                os._exit(0)
        forked += 1
    try:
        block = b"\x01" * (mib * MIB)
        note(path, f"{os.getpid()}:{len(block) // MIB}")
    except MemoryError:
        pass
    time.sleep(1.0)  # the forks have touched theirs
    return {"forked": forked}


def hog() -> dict[str, int]:
    """Raise the address-space limit (if it could) and touch 3 GiB."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    return {"touched": len(b"\x01" * (3 << 30))}


def touched_mib(path: str) -> int:
    return sum(int(entry.split(":")[1]) for entry in notes(path))


def reimport(name: str, path: str, *call: Any) -> dict[str, Any]:
    """Reach an exercise module's reference again: delete the refused ``sys.modules`` entries and import it,
    then run its file as a fresh module. Each is the reference's value on ``call`` or the error it met."""
    import importlib
    import importlib.util

    for module in [module for module, value in sys.modules.items() if value is None]:
        del sys.modules[module]
    got: dict[str, Any] = {}
    try:
        got["import"] = importlib.import_module(name)._reference(*call)
    except BaseException as error:
        got["import"] = f"{type(error).__name__}: {error}"[:200]
    try:
        spec = importlib.util.spec_from_file_location("fresh_copy", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        got["file"] = module._reference(*call)
    except BaseException as error:
        got["file"] = f"{type(error).__name__}: {error}"[:200]
    return got


def attack(name: str, notes_path: str) -> dict[str, Any]:
    """Run one attack through ``run_contained`` from this process (the notebook); what both sides saw."""
    notebook = os.getpid()
    if name == "trace":
        return {"job": run_contained(lambda: trace(notebook, attach=True), 20), "stopped": stopped(notebook)}
    if name == "kill":
        return {"job": run_contained(lambda: signal_notebook(notebook, signal.SIGKILL), 20)}
    if name == "leave_behind":
        job = run_contained(lambda: leave_behind(notes_path), 20)
        time.sleep(1.5)
        pids = [int(pid) for pid in notes(notes_path)]
        left = [pid for pid in pids if alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        return {"job": job, "noted": len(pids), "left": len(left)}
    if name == "fill_memory":
        return {"job": run_contained(lambda: fill_memory(notes_path), 20), "touched_mib": touched_mib(notes_path)}
    if name == "hog":
        return {"job": run_contained(hog, 20)}
    if name == "reference":
        import fake_chapter

        return {"job": run_contained(lambda: reimport("fake_chapter", fake_chapter.__file__, 1), 20)}
    raise KeyError(name)


if __name__ == "__main__":
    print(json.dumps(attack(sys.argv[1], sys.argv[2])))
