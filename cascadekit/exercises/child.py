"""Run a job on a student's answer in a contained child process; only plain JSON comes back.

Everything that touches the student's object (calling their function, ``float()``,
``strip()``, ``==``, ``repr``) happens in a forked child, so nothing they type can
hang or crash the notebook: the parent only waits on a pipe with a deadline,
decodes at most :data:`MAX_RESULT_BYTES` of JSON (plain builtins by construction),
and compares there. A fork, not a fresh interpreter, because the answer is often a
function defined in the notebook.

The check forks twice. The first child (the supervisor) leaves the notebook's
session and enters new pid, mount, network and IPC namespaces (root makes them;
an ordinary user makes them inside a new user namespace that maps only its own
uid and gid, as :mod:`cascadekit.sandbox` does). It forks the job process, pid 1
of the new pid namespace, kills its process group once the parent closes a pipe
(the check is over, or the notebook is gone) and exits with its status. Being
pid 1, the job ignores signals it sends itself that it has no handler for, and
the CPU limit ends it with the hard limit's ``SIGKILL`` (reported as the CPU
limit). Before the student's code runs, the job process

* mounts a ``/proc`` of its own: it cannot name the notebook or any process
  outside, so it can neither signal nor ``ptrace`` them nor open their
  ``/proc/<pid>/mem``, and it has no network (a kernel's TCP ports are out of
  reach). It reads files as the notebook does but writes none: every mount is
  read-only there but a private ``/tmp`` (:data:`CHILD_TMP_BYTES`), so it cannot
  change the committed results that expected values are computed from;
* finds the files of the exercise modules empty (``/dev/null`` is bound over each
  chapter module's source and bytecode in its mount namespace) and their loaded
  functions disarmed: every reference function, expected value and test-case
  maker (and every function of the chapter modules) raises
  :class:`PermissionError`, and those modules and the exercise package can be
  neither found in ``sys.modules`` nor imported again (a meta-path finder refuses
  them). The expected values are computed in the parent only after the child is gone;
* gets hard limits (soft = hard, so the function cannot raise them): address
  space :data:`CHILD_MEMORY_BYTES` above what the fork inherited, CPU seconds, no
  core files, and :data:`CHILD_PROCESSES` threads;
* keeps no capability. As root it becomes a throwaway uid that keeps only the
  right to read files (``CAP_DAC_READ_SEARCH``, so the standard library under
  ``/root`` still imports): root could raise any hard limit, a throwaway uid cannot;
* stays one process: a seccomp filter refuses every fork (``clone`` only starts
  threads), so the address-space limit is one memory ceiling for the whole check,
  and nothing the function starts can outlive it. When pid 1 exits the kernel
  kills whatever is left in its namespace anyway.

What the child sends is treated as the student's answer and nothing more, so a
function that writes its own message into the pipe gains nothing over returning
it. Where the machine allows less the box is weaker, silently: without
namespaces (a container without ``CAP_SYS_ADMIN``, user namespaces switched off)
an ordinary user's function can signal and trace the notebook and write the
user's files, the exercise files stay readable (only the import is refused), and
a process that calls ``setsid`` escapes the group kill (root kills every process
of the throwaway uid after each check); without seccomp (other CPUs than x86-64 and arm64) the function may fork up to
:data:`CHILD_PROCESSES` processes, each with its share of the memory. This is a
course kit's box, not a security boundary: a student can always read the kit's
source and its worked solutions, and the library the kit teaches with (e.g.
``cascadekit.passk``) stays importable.
"""
from __future__ import annotations

import ctypes
import errno
import glob
import json
import math
import os
import random
import select
import signal
import struct
import sys
import threading
import time
import types
from typing import Any, Callable, NoReturn

MAX_RESULT_BYTES = 1_000_000  # largest JSON a child may send back
CHILD_MEMORY_BYTES = 1 << 30  # address space the whole check may take beyond what the fork inherited
CHILD_PROCESSES = 16  # threads the job may run at once (processes too, where it may fork: see the docstring)
CHILD_TMP_BYTES = 64 << 20  # the job's private /tmp (held in memory, beside the address-space ceiling)
REFUSED = "the exercise's own answers cannot be used inside a check"
_EXERCISE_PACKAGE = "cascadekit.exercises"
_EXERCISE_PACKAGES = (_EXERCISE_PACKAGE, "cascadekit.course.exercises")
_THROWAWAY_UIDS = range(2_000_000_000, 2_000_100_000)  # beside the sandbox's pool, never overlapping it
_CAP_DAC_READ_SEARCH = 2
_LAST_CAP = 63
_CLONE_THREAD, _CLONE_NEWNS, _CLONE_NEWIPC = 0x10000, 0x20000, 0x8000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 4096, 16384, 1 << 18
# seccomp, per CPU: (audit arch, clone, clone3, syscalls refused outright: fork, vfork, open_by_handle_at)
_SECCOMP = {"x86_64": (0xC000003E, 56, 435, (57, 58, 304)), "aarch64": (0xC00000B7, 220, 435, (265,))}
_X32_SYSCALLS = 0x40000000  # x86-64's x32 ABI: the same calls under other numbers
_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1  # one number on every CPU


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _ulong(*values: int) -> list[ctypes.c_ulong]:
    return [ctypes.c_ulong(v) for v in values]


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


class _RefuseExercises:
    """A meta-path finder for the child: the exercise modules and package are not imported again,
    even once their ``sys.modules`` entries are deleted."""

    def __init__(self, names: list[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name in self.names or name.startswith(_EXERCISE_PACKAGE + "."):
            raise ImportError(REFUSED)


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
    names += [*_EXERCISE_PACKAGES, *(name for name in sys.modules if name.startswith(_EXERCISE_PACKAGE + "."))]
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]  # "import" now raises ImportError
    sys.meta_path.insert(0, _RefuseExercises(names))  # type: ignore[arg-type]


def _exercise_files() -> list[str]:
    """The source and cached bytecode files of the loaded exercise modules (hidden in the job's mount namespace)."""
    files = []
    for name in _exercise_modules():
        source = vars(sys.modules[name]).get("__file__")
        if isinstance(source, str) and os.path.isfile(source):
            stem = os.path.splitext(os.path.basename(source))[0]
            files += [source, *glob.glob(os.path.join(os.path.dirname(source), "__pycache__", glob.escape(stem) + ".*"))]
    return files


def _unshare() -> str | None:
    """In the supervisor, before it forks the job: new pid, mount, network and IPC namespaces for the job.

    "root" when root made them, "user" when they sit in a new user namespace mapping
    only this uid and gid (an ordinary user), None where the kernel refuses.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc, uid, gid = _libc(), os.getuid(), os.getgid()
    namespaces = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC
    if os.geteuid() == 0:  # never through a user namespace: the throwaway uid is not mapped there
        return "root" if libc.unshare(namespaces) == 0 else None
    if libc.unshare(namespaces | _CLONE_NEWUSER) != 0:
        return None
    try:
        for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(line)
    except OSError:  # unmapped, the job reads its uid as 65534; the namespaces hold all the same
        pass
    return "user"


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _private_view(hidden: list[str]) -> None:
    """In the job process, pid 1 of its namespaces, while it still holds its capabilities there.

    A ``/proc`` of its own pid namespace replaces the notebook's, which lists the
    notebook's pid and opens its memory (a read-only empty folder where the kernel
    refuses a new ``/proc``); ``/dev/null`` is bound over every file in ``hidden``;
    every mount becomes read-only (``mount_setattr``, Linux 5.12; older kernels keep
    the files writable), so the job cannot change the committed results the parent
    computes expected values from, nor the kit; and ``/tmp`` is a private tmpfs of
    :data:`CHILD_TMP_BYTES`, unless the kit, the interpreter or the working folder
    lies under ``/tmp`` (a checkout there, as a CI clone may be), which the tmpfs
    would hide from the job: there ``/tmp`` stays the read-only one. The mount
    namespace is made private first, or nothing is mounted: a mount must never
    reach the notebook's own view.
    """
    libc = _libc()
    if libc.mount(None, b"/", None, *_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        return
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    if libc.mount(b"proc", b"/proc", b"proc", *_ulong(flags), None) != 0:
        libc.mount(b"tmpfs", b"/proc", b"tmpfs", *_ulong(flags | _MS_RDONLY), b"size=4k,mode=555")
    for path in hidden:
        libc.mount(b"/dev/null", os.fsencode(path), None, *_ulong(_MS_BIND), None)
    read_only = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    libc.syscall(ctypes.c_long(_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), b"/", ctypes.c_uint(_AT_RECURSIVE),
                 ctypes.byref(read_only), ctypes.c_size_t(ctypes.sizeof(read_only)))
    if not _needed_under_tmp():
        libc.mount(b"tmpfs", b"/tmp", b"tmpfs", *_ulong(_MS_NOSUID | _MS_NODEV),
                   f"size={CHILD_TMP_BYTES},mode=1777".encode())


def _needed_under_tmp() -> bool:
    """Whether the kit, the interpreter's prefix or the working folder lies under ``/tmp``."""
    tmp = os.path.realpath("/tmp")
    places = (os.path.dirname(os.path.realpath(__file__)), os.path.realpath(sys.prefix), os.path.realpath(os.getcwd()))
    return any(os.path.commonpath([tmp, place]) == tmp for place in places)


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


def _other_tasks(uid: int | None, namespaces: str | None) -> int:
    """Tasks ``RLIMIT_NPROC`` counts against the job that are not the job's (read before ``/proc`` is replaced).

    A throwaway uid runs nothing else; in a new user namespace the count is per
    namespace, and the supervisor is the other task there; otherwise every task of
    the uid counts.
    """
    if uid is not None or not sys.platform.startswith("linux"):  # off Linux no process limit is set
        return 0
    return 1 if namespaces == "user" else _own_tasks()


def _drop_privileges(uid: int | None, keep: int) -> None:
    """Keep no capability but the ``keep`` mask (none other in the bounding set either), as ``uid`` if given."""
    libc = _libc()
    if libc.prctl(*_ulong(8, 1, 0, 0, 0)) != 0:  # PR_SET_KEEPCAPS: keep the permitted set across setuid
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    for cap in range(_LAST_CAP + 1):
        if not keep >> cap & 1:
            libc.prctl(*_ulong(24, cap, 0, 0, 0))  # PR_CAPBSET_DROP; EINVAL past the kernel's last capability
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable (two words each)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _seccomp_program() -> bytes | None:
    """A classic BPF program: ``clone`` only with ``CLONE_THREAD``, no fork, vfork or ``open_by_handle_at``
    (which ``CAP_DAC_READ_SEARCH`` would let read the hidden files), and nothing under another ABI."""
    machine = os.uname().machine
    if machine not in _SECCOMP:
        return None
    arch, clone, clone3, refused = _SECCOMP[machine]
    load, jump_eq, jump_ge, and_, ret = 0x20, 0x15, 0x35, 0x54, 0x06

    def op(code: int, k: int, if_true: int = 0, if_false: int = 0) -> bytes:
        return struct.pack("=HBBI", code, if_true, if_false, k)

    allow, deny = op(ret, 0x7FFF0000), op(ret, 0x50000 | errno.EPERM)  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    program = [op(load, 4), op(jump_eq, arch, 1, 0), deny, op(load, 0)]  # seccomp_data.arch, then .nr
    if machine == "x86_64":
        program += [op(jump_ge, _X32_SYSCALLS, 0, 1), deny]
    for number in refused:
        program += [op(jump_eq, number, 0, 1), deny]
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes the C library fall back to clone.
    program += [op(jump_eq, clone3, 0, 1), op(ret, 0x50000 | errno.ENOSYS)]
    program += [op(jump_eq, clone, 0, 3), op(load, 16), op(and_, _CLONE_THREAD),  # 16: the low half of args[0]
                op(jump_eq, _CLONE_THREAD, 0, 1), allow, deny]
    return b"".join(program)


def _single_process() -> bool:
    """``no_new_privs`` (setuid programs grant nothing, and seccomp needs it), then the seccomp filter where
    this CPU has one; whether the filter holds."""
    libc = _libc()
    if libc.prctl(*_ulong(38, 1, 0, 0, 0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    program = _seccomp_program()
    if program is None:
        return False
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _Fprog(len(program) // 8, ctypes.addressof(buffer))
    return libc.prctl(ctypes.c_ulong(22), ctypes.c_ulong(2), ctypes.byref(fprog), *_ulong(0, 0)) == 0  # SET_SECCOMP


def _contain(cpu_s: int, uid: int | None, namespaces: str | None, others: int) -> None:
    """In the job process, before any student code: hard limits, no capability, one process."""
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
        _drop_privileges(uid, 1 << _CAP_DAC_READ_SEARCH)
    elif namespaces == "user":
        _drop_privileges(None, 0)
    _hard_limit(resource, resource.RLIMIT_NPROC, CHILD_PROCESSES + others)
    _libc().prctl(*_ulong(1, signal.SIGKILL, 0, 0, 0))  # PR_SET_PDEATHSIG (after the uid change, which clears it)
    if not _single_process():  # it may fork: each process gets its share of the memory
        _hard_limit(resource, resource.RLIMIT_AS, used + CHILD_MEMORY_BYTES // CHILD_PROCESSES)


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


def _job_process(job: Callable[[], dict[str, Any]], write: int, cpu_s: int, uid: int | None,
                 namespaces: str | None) -> NoReturn:
    """The job process: contain, disarm, run, send one length-prefixed message, exit."""
    try:
        os.setpgid(0, 0)  # a group of its own, which the supervisor kills with it
        _close_inherited(write)
        others = _other_tasks(uid, namespaces)
        if namespaces:
            _private_view(_exercise_files())
        _contain(cpu_s, uid, namespaces, others)
        _disarm_exercises()
        message = _encoded(job)
        os.write(write, len(message).to_bytes(8, "big"))
        view = memoryview(message)
        while view:
            view = view[os.write(write, view):]
    except BaseException:  # a failed setup or a write to a closed pipe: the parent reports no result
        pass
    os._exit(0)


def _exit_code(status: int, cpu_s: float, cpu_limit: int) -> int:
    """The supervisor's exit code for the job's ``status``: 128 + the signal that ended it, else 0.

    Pid 1 of a namespace ignores ``SIGXCPU``, so the hard CPU limit's ``SIGKILL``
    ends it: a job killed after using its CPU time counts as stopped by ``SIGXCPU``.
    """
    if not os.WIFSIGNALED(status):
        return 0
    stop = os.WTERMSIG(status)
    return 128 + (signal.SIGXCPU if stop == signal.SIGKILL and cpu_s >= cpu_limit else stop)


def _supervise(job: Callable[[], dict[str, Any]], write: int, stop: int, cpu_s: int, uid: int | None) -> NoReturn:
    """The first child: namespaces, the job process, and its end once the parent closes ``stop`` (or is gone)."""
    code = 1
    try:
        os.setsid()
        namespaces = _unshare()
        pid = os.fork()
        if pid == 0:
            _job_process(job, write, cpu_s, uid, namespaces)
        os.close(write)
        os.read(stop, 1)  # b"" once the parent has its result, gave up, or died
        for kill, target in ((os.killpg, pid), (os.kill, pid)):  # os.kill: a job that died before its setpgid
            try:  # not reaped yet, so the pid and group are still the job's
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _, status, usage = os.wait4(pid, 0)
        code = _exit_code(status, usage.ru_utime + usage.ru_stime, cpu_s)
    except BaseException:
        pass
    os._exit(code)


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

    Only a job that may fork and has no pid namespace can leave one, and few can
    exist (``RLIMIT_NPROC``), so a few passes catch one forked while the last was killed.
    """
    deadline = time.monotonic() + 1.0
    while (pids := _pids_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _stopped_by(status: int) -> str | None:
    """"cpu" or "memory" when the supervisor's exit status says a limit stopped the job, else None."""
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    if code == 128 + signal.SIGXCPU:
        return "cpu"
    if code - 128 in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
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
    """The supervisor's exit status, once it has ended the job's process group; as root, then kill every
    process of the throwaway uid (only a box without namespaces can have one left)."""
    _, status = os.waitpid(pid, 0)
    if uid is not None:
        _kill_uid(uid)
    return status


def _in_fork(job: Callable[[], dict[str, Any]], timeout: float) -> dict[str, Any]:
    uid = _throwaway_uid()
    read, write = os.pipe()
    stop_read, stop = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (read, write, stop_read, stop):
            os.close(fd)
        raise
    if pid == 0:
        os.close(read)
        os.close(stop)
        _supervise(job, write, stop_read, math.ceil(timeout) + 1, uid)
    os.close(write)
    os.close(stop_read)
    try:
        message, timed_out = _read_message(read, time.monotonic() + timeout)
    finally:
        os.close(read)
        os.close(stop)
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
