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


def name_this_process(tag: str) -> None:
    """Set this process's name (``/proc/<pid>/comm``), which the notebook side can find from outside any
    namespace the checker made: pids and files the job writes need not mean anything there."""
    ctypes.CDLL(None).prctl(15, tag.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def named(tag: str) -> list[int]:
    """The live processes named ``tag``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if entry.isdigit() and f.read().strip() == tag[:15] and alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_named(tag: str) -> int:
    """SIGKILL what a failing checker left running; how many there were."""
    left = named(tag)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return len(left)


def _errno_of(call: Any) -> str:
    """"allowed" when ``call`` succeeds (returns None or 0), else why not."""
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


def leave_behind(tag: str, count: int = 7) -> dict[str, Any]:
    """Fork ``count`` spinning processes named ``tag`` that leave the session (``setsid``)."""
    for forked in range(count):
        try:
            pid = os.fork()
        except OSError as error:
            return {"forked": forked, "refused": error.strerror}
        if pid == 0:
            os.setsid()
            name_this_process(tag)
            while True:
                pass
    time.sleep(1.0)  # every one has named itself
    return {"forked": count}


def fill_memory(tag: str, processes: int = 4, mib: int = 400) -> dict[str, Any]:
    """Touch ``mib`` MiB in this process and in ``processes - 1`` forks (named ``tag``) at once.

    The forks report through a pipe of the job's own, so the count needs no file.
    """
    read, write = os.pipe()
    forked = 0
    for _ in range(processes - 1):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                name_this_process(tag)
                block = b"\x01" * (mib * MIB)  # written, so resident
                os.write(write, f"{len(block) // MIB} ".encode())
                time.sleep(60)
            finally:
                os._exit(0)
        forked += 1
    os.close(write)
    touched = len(b"\x01" * (mib * MIB)) // MIB
    reports = b""
    while chunk := os.read(read, 1024):  # until every fork has reported (or died)
        reports += chunk
        if len(reports.split()) == forked:
            break
    return {"forked": forked, "touched_mib": touched + sum(int(r) for r in reports.split())}


def tamper(path: str) -> dict[str, str]:
    """Rewrite a file the notebook side reads (committed results, the kit's own source)."""
    return {"write": _errno_of(lambda: open(path, "w").write("tampered") and None)}


def hog() -> dict[str, int]:
    """Raise the address-space limit (if it could) and touch 3 GiB."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    return {"touched": len(b"\x01" * (3 << 30))}


def reimport(name: str, path: str, *call: Any) -> dict[str, Any]:
    """Reach an exercise module's reference again: delete the refused ``sys.modules`` entries and import it,
    then run its file as a fresh module. Each is the reference's value on ``call`` or the error it met;
    ``source_chars`` is how much of the module's source the job could read."""
    import importlib
    import importlib.util

    for module in [module for module, value in sys.modules.items() if value is None]:
        del sys.modules[module]
    with open(path) as f:
        got: dict[str, Any] = {"source_chars": len(f.read())}
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


def attack(name: str, arg: str) -> dict[str, Any]:
    """Run one attack through ``run_contained`` from this process (the notebook); what both sides saw.

    ``arg`` is the name the attack's processes take, or the file it tampers with.
    """
    notebook = os.getpid()
    if name == "trace":
        return {"job": run_contained(lambda: trace(notebook, attach=True), 20), "stopped": stopped(notebook)}
    if name == "kill":
        return {"job": run_contained(lambda: signal_notebook(notebook, signal.SIGKILL), 20)}
    if name in ("leave_behind", "fill_memory"):
        job = run_contained(lambda: (leave_behind if name == "leave_behind" else fill_memory)(arg), 20)
        time.sleep(1.5)
        return {"job": job, "left": kill_named(arg)}
    if name == "tamper":
        job = run_contained(lambda: tamper(arg), 20)
        with open(arg) as f:
            return {"job": job, "content": f.read()}
    if name == "hog":
        return {"job": run_contained(hog, 20)}
    if name == "reference":
        import fake_chapter

        return {"job": run_contained(lambda: reimport("fake_chapter", fake_chapter.__file__, 1), 20)}
    raise KeyError(name)


if __name__ == "__main__":
    print(json.dumps(attack(sys.argv[1], sys.argv[2])))
