"""Run a job on a student's answer in a contained child process; only plain JSON comes back.

Everything that touches the student's object (calling their function, ``float()``,
``strip()``, ``==``, ``repr``) happens in a forked child, so nothing they type can
hang or crash the notebook: the parent only waits on a pipe with a deadline,
decodes at most :data:`MAX_RESULT_BYTES` of JSON (plain builtins by construction),
and compares there. Before the student's code runs, the child

* leaves the notebook's session and process group (``setsid``): after the check
  the parent kills the whole group, so processes the function forked die with it;
* gets hard limits (soft = hard, so the function cannot raise them): address
  space :data:`CHILD_MEMORY_BYTES` above what the fork inherited, CPU seconds,
  no core files, and a process budget (:data:`CHILD_PROCESSES`). As root the
  child also becomes a throwaway uid that keeps only the right to read files
  (``CAP_DAC_READ_SEARCH``, so the standard library under ``/root`` still
  imports): root could raise any hard limit and ignores ``RLIMIT_NPROC``, a
  throwaway uid can do neither, and afterwards every process of that uid is
  killed (even one that left the process group with ``setsid``);
* disarms the exercises' own answers: every reference function, expected value
  and test-case maker of the registry (and every function of the chapter
  modules) raises :class:`PermissionError` in the child, and the exercise
  modules cannot be imported again there. The expected values are computed in
  the parent only after the child is gone.

What the child sends is treated as the student's answer and nothing more, so a
function that writes its own message into the pipe gains nothing over returning
it. This is a course kit's box, not a security boundary: a student can always
read the kit's source, and as an ordinary user a process that calls ``setsid``
escapes the group kill (the sandbox's namespaces would catch it; a check must
run notebook functions, which a fresh sandboxed interpreter cannot import).
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import random
import select
import signal
import sys
import threading
import time
import types
from typing import Any, Callable

MAX_RESULT_BYTES = 1_000_000  # largest JSON a child may send back
CHILD_MEMORY_BYTES = 1 << 30  # address space a child may take beyond what it inherited
CHILD_PROCESSES = 16  # processes and threads the child may run at once (root or an ordinary user)
REFUSED = "the exercise's own answers cannot be used inside a check"
_EXERCISE_PACKAGE = "cascadekit.exercises"
_EXERCISE_PACKAGES = (_EXERCISE_PACKAGE, "cascadekit.course.exercises")
_THROWAWAY_UIDS = range(2_000_000_000, 2_000_100_000)  # beside the sandbox's pool, never overlapping it
_CAP_DAC_READ_SEARCH = 2
_LAST_CAP = 63


def _refusing_code(free: int) -> types.CodeType:
    """The body of a function that raises PermissionError(REFUSED), with ``free`` closure cells.

    A function's ``__code__`` may only be swapped for code with as many free
    variables as the function has closure cells, hence the generated closure.
    """
    cells = [f"cell{i}" for i in range(free)]
    source = "\n".join(["def outer():", *[f"    {c} = None" for c in cells],
                        "    def refuse(*args, **kwargs):", f"        {', '.join(cells) or 'pass'}",
                        f"        raise PermissionError({REFUSED!r})", "    return refuse"])
    namespace: dict[str, Any] = {}
    exec(compile(source, "<refused>", "exec"), namespace)
    return namespace["outer"]().__code__


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise PermissionError(REFUSED)


def _disarm(value: Any) -> None:
    """A chapter function refuses to run: its code is swapped, so every path to the object (the registry,
    the module, a caller's frame, ``gc``) reaches the refusing body."""
    if isinstance(value, types.FunctionType):
        value.__code__ = _refusing_code(len(value.__code__.co_freevars))


def _disarm_answer(answer: Any) -> None:
    """The callables of one answer spec (reference, expected, cases) refuse to run."""
    from dataclasses import fields

    for field in fields(answer):
        value = getattr(answer, field.name)
        if field.name == "describe_case" or not callable(value):
            continue
        if isinstance(value, types.FunctionType):
            _disarm(value)
        else:  # a wrapper or a builtin: the field answers nothing instead
            object.__setattr__(answer, field.name, _refuse)


def _exercise_modules() -> list[str]:
    """The loaded modules that define exercises: each chapter's, with ``EXERCISES``."""
    names = []
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)  # vars(), never getattr: a lazy module would import
        if isinstance(namespace, dict) and "EXERCISES" in namespace:
            names.append(name)
    return names


def _disarm_exercises() -> None:
    """In the child: the loaded chapters' references, expected values and case makers refuse to run
    (every function of a module that defines exercises), and neither such a module nor the exercise
    package can be imported (again)."""
    names = _exercise_modules()
    for name in names:
        module = sys.modules[name]
        for exercise in vars(module)["EXERCISES"]:
            _disarm_answer(exercise.answer)
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType) and value.__module__ == name:
                _disarm(value)
    names += [name for name in sys.modules if name in _EXERCISE_PACKAGES or name.startswith(_EXERCISE_PACKAGE + ".")]
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]  # "import" now raises ImportError


def _hard_limit(resource: Any, which: int, value: int) -> None:
    """Set soft and hard limit to ``value`` (or keep a lower hard limit already there)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _pids_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def _own_tasks() -> int:
    """Processes and threads of this uid now: ``RLIMIT_NPROC`` counts them all."""
    count = 0
    for pid in _pids_of(os.getuid()):
        try:
            count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return count


def _drop_root(uid: int | None) -> None:
    """Root only: keep no capability but reading files (none in the bounding set either), as ``uid`` if given."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(8, 1, 0, 0, 0) != 0:  # PR_SET_KEEPCAPS: keep the permitted set across setuid
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    for cap in range(_LAST_CAP + 1):
        if cap != _CAP_DAC_READ_SEARCH:
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; EINVAL past the kernel's last capability
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    keep = 1 << _CAP_DAC_READ_SEARCH
    data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable (two words each)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: setuid binaries grant nothing
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _contain(cpu_s: int, uid: int | None) -> None:
    """In the child, before any student code: hard limits, and as root the throwaway ``uid``."""
    import resource

    _hard_limit(resource, resource.RLIMIT_CORE, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    ceiling = cpu_s + 1 if hard == resource.RLIM_INFINITY else min(cpu_s + 1, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (min(cpu_s, ceiling), ceiling))  # SIGXCPU first, then SIGKILL
    if not sys.platform.startswith("linux"):
        return  # elsewhere (macOS) the time limits and the group kill are what holds
    with open("/proc/self/statm") as statm:
        used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _hard_limit(resource, resource.RLIMIT_AS, used + CHILD_MEMORY_BYTES)
    if os.geteuid() == 0:
        _drop_root(uid)
    # A fresh throwaway uid runs nothing else; otherwise the uid's other processes count too.
    _hard_limit(resource, resource.RLIMIT_NPROC, CHILD_PROCESSES + (0 if uid is not None else _own_tasks()))


def _encoded(job: Callable[[], dict[str, Any]]) -> bytes:
    """The job's outcome as bounded JSON; an error message when it fails or floods."""
    try:
        payload = json.dumps(job())
    except MemoryError:
        payload = json.dumps({"stopped": "memory"})
    except Exception as error:  # a student's object that breaks reading it; the kit's own bugs show their type
        payload = json.dumps({"error": f"this answer could not be checked ({type(error).__name__}: "
                                       f"{str(error)[:120]})"})
    if len(payload) > MAX_RESULT_BYTES:
        payload = json.dumps({"error": f"it gave {len(payload):,} bytes of results; far too much"})
    return payload.encode()


def _close_inherited(keep: int) -> None:
    """Close every descriptor the fork inherited but ``keep`` and stdin/out/err.

    The notebook kernel's sockets, a test runner's channel to its workers and any
    file the caller holds open are out of the student's reach: the one pipe left
    is the result pipe, whose message the parent checks.
    """
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _child(job: Callable[[], dict[str, Any]], write: int, cpu_s: int, uid: int | None) -> None:
    """The forked child: contain, disarm, run, send one length-prefixed message, exit. Never returns."""
    try:
        os.setsid()
        _close_inherited(write)
        _contain(cpu_s, uid)
        _disarm_exercises()
        message = _encoded(job)
        os.write(write, len(message).to_bytes(8, "big"))
        view = memoryview(message)
        while view:
            view = view[os.write(write, view):]
    except BaseException:  # a failed setup or a write to a closed pipe: the parent reports no result
        pass
    os._exit(0)


def _read_message(read: int, deadline: float) -> tuple[bytes | None, bool]:
    """(the message, or None; whether the deadline passed first)."""
    buffer = bytearray()
    while True:
        if len(buffer) >= 8:
            size = int.from_bytes(buffer[:8], "big")
            if size > MAX_RESULT_BYTES:
                return None, False
            if len(buffer) >= 8 + size:
                return bytes(buffer[8:8 + size]), False
        left = deadline - time.monotonic()
        if left <= 0:
            return None, True
        if not select.select([read], [], [], left)[0]:
            continue
        chunk = os.read(read, 1 << 16)
        if not chunk:
            return None, False
        buffer += chunk


def _kill_uid(uid: int) -> None:
    """Root only: SIGKILL every process of the throwaway ``uid``, also those that left the group.

    Few can exist (``RLIMIT_NPROC``), so a few passes catch one forked while the last was killed.
    """
    deadline = time.monotonic() + 1.0
    while (pids := _pids_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _stopped_by(status: int) -> str | None:
    """"cpu" or "memory" when the child's exit status says a limit stopped it, else None."""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU:
        return "cpu"
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
        return "memory"  # an allocation past the ceiling that a C extension did not check
    return None


def _decoded(message: bytes | None) -> dict[str, Any] | None:
    try:
        outcome = json.loads(message) if message is not None else None
    except (ValueError, RecursionError):
        return None
    return outcome if isinstance(outcome, dict) else None


def _throwaway_uid() -> int | None:
    """As root where the uid map reaches :data:`_THROWAWAY_UIDS`: one of them at random; else None.

    In a user namespace that maps few uids (rootless containers) the child stays
    uid 0 of that namespace without capabilities: its hard limits hold, and
    ``RLIMIT_NPROC`` binds there since it is not the host's root.
    """
    if os.geteuid() != 0:
        return None
    try:
        with open("/proc/self/uid_map") as f:
            top = max(int(first) + int(count) for first, _, count in (line.split() for line in f))
    except (OSError, ValueError):
        return None
    return random.SystemRandom().choice(_THROWAWAY_UIDS) if top >= _THROWAWAY_UIDS.stop else None


def _end(pid: int, uid: int | None) -> int:
    """Kill the child's whole group (and, as root, every process of its uid); its exit status."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):  # os.kill: a child that died before its setsid
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _, status = os.waitpid(pid, 0)
    if uid is not None:
        _kill_uid(uid)
    return status


def _in_fork(job: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    uid = _throwaway_uid()
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        os.close(read)
        _child(job, write, math.ceil(timeout) + 1, uid)
    os.close(write)
    try:
        message, timed_out = _read_message(read, time.monotonic() + timeout)
    finally:
        os.close(read)
        status = _end(pid, uid)
    if timed_out:
        return {"stopped": "time"}
    outcome = _decoded(message)
    if outcome is None:
        return {"stopped": _stopped_by(status) or "exit"}
    return outcome


def _in_thread(job: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    """Where fork is missing (Windows): a daemon thread; a hung job is reported, not stopped."""
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(_decoded(_encoded(job)) or {}), daemon=True)
    worker.start()
    worker.join(timeout)
    return box if not worker.is_alive() else {"stopped": "time"}


def run_contained(job: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    """``job()``'s JSON dict, run in a contained child (see the module docstring) within ``timeout`` seconds.

    When a limit stopped the job or the child gave no readable result the dict is
    ``{"stopped": why}``, ``why`` one of "time", "cpu", "memory" (a MemoryError or a
    crash past the ceiling), "exit" (it ended without a result). An exception in
    ``job`` becomes ``{"error": ...}``.
    """
    forkable = hasattr(os, "fork") and sys.platform != "win32"
    return (_in_fork if forkable else _in_thread)(job, timeout)
