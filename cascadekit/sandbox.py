"""Run untrusted Python (model-written code, patched modules) in a contained subprocess.

Every reward that executes model output goes through :func:`run_python`. The
program runs in a fresh interpreter with:

* a wall-clock deadline (the caller's clock) and a CPU-time limit (``RLIMIT_CPU``),
* an address-space limit (``RLIMIT_AS``), a process-count limit (``RLIMIT_NPROC``),
  a file-size limit (``RLIMIT_FSIZE``), few file descriptors and no core dumps,
* a scratch folder as working directory, deleted afterwards,
* an environment built from scratch (no inherited secrets),
* a new session; at the end the whole process group is killed (``os.killpg``),
* stdout and stderr read in bounded chunks with a size cap: a program that prints
  without end is killed once it passes the cap ("output limit").

How strong the box is depends on the machine; :func:`isolation` probes it once:

* **As root (CI here)** the program runs under a throwaway uid/gid of its own
  (one per run, so ``RLIMIT_NPROC``, which root ignores, now binds, and runs
  cannot signal each other), inside ``unshare -n -m -p``: no network; ``/tmp``,
  ``/var/tmp`` and ``/dev/shm`` are bind-mounted to the scratch folder, so writes
  "outside" land in the scratch folder and vanish; and the supervisor is pid 1 of
  a new pid namespace, so when it dies the kernel kills everything the program
  started, even processes that called ``setsid``. The uid cannot write root-owned
  files (the repository) nor signal the caller. Where the interpreter sits in a
  directory other uids cannot enter (pyenv under ``/root``), an empty tmpfs hides
  that directory and the interpreter's prefix is bound back into it.
  Root without namespaces (a container lacking CAP_SYS_ADMIN) still gets the uid;
  leftover processes of that uid are then killed with ``kill(-1)`` run as that uid.
* **As an ordinary user** (a laptop) none of that is allowed: the limits, the
  scratch folder, the clean environment and the process-group kill still apply,
  but the program can use the network, write wherever the user can, and
  ``RLIMIT_NPROC`` counts all of the user's processes. A warning says so once.
  This is a course kit's box, not a security boundary: do not run it on code you
  would not run yourself.

The program is started by a small supervisor (``_SUPERVISOR`` below): it forks,
and the fork applies the limits, drops the uid and runs ``main.py``. The
supervisor waits, then reports exit status and CPU time on a private pipe. So the
program's parent is the supervisor, not the caller: ``os.kill(os.getppid(), 9)``
kills the supervisor at worst (as root it fails: the uid differs).

Departure from "python -I": the program runs with ``-S -s -B`` (standard library
only, no user site, no .pyc) but not ``-E``, because the environment is ours
entirely and ``PYTHONHASHSEED`` must reach the program for reproducible runs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

__all__ = ["Limits", "SandboxResult", "Isolation", "isolation", "run_python"]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    nproc: int = 32
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


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What this machine lets the sandbox do (see the module docstring)."""

    drop_uid: bool
    namespaces: bool  # unshare -n -m -p: no network, private /tmp, own pids

    def describe(self) -> str:
        parts = ["rlimits", "scratch dir", "clean env", "process group"]
        if self.drop_uid:
            parts.append("own uid")
        if self.namespaces:
            parts += ["no network", "private /tmp", "own pids"]
        return "+".join(parts)


_PRIVATE_DIRS = ("/var/tmp", "/dev/shm", "/tmp")  # /tmp last: the scratch folder lives there
_PYTHON_FLAGS = ["-S", "-s", "-B"]
# New network, mount and pid namespaces; the supervisor is pid 1 of its own pid
# namespace, so when it dies the kernel kills (and reaps) everything the program
# started, even processes that left the process group.
_UNSHARE = ["-n", "-m", "-p", "--fork", "--kill-child", "--mount-proc", "--"]

# Runs as the sandbox's first process (root when the caller is). argv[1] is a JSON config.
_SUPERVISOR = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
def mount(source, target, fstype, flags, data):
    if libc.mount(source.encode(), target.encode(), fstype, flags, data) != 0:
        sys.stderr.write("sandbox: cannot mount " + target + "\n")
        os._exit(120)
if cfg["bind"]:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for target in cfg["bind"]:
        mount(cfg["scratch"], target, None, 4096, None)  # MS_BIND
    if cfg["expose"]:  # hide e.g. /root behind a tmpfs, then bind the interpreter back
        hidden, prefix = cfg["expose"]
        keep = os.open(prefix, os.O_PATH)
        mount("tmpfs", hidden, b"tmpfs", 0, b"mode=755,size=1m")
        os.makedirs(prefix)
        mount("/proc/self/fd/%d" % keep, prefix, None, 4096 | 16384, None)  # MS_BIND|MS_REC
        os.close(keep)
    os.chdir("/tmp")  # the scratch folder, seen from inside
pid = os.fork()
if pid == 0:
    os.close(cfg["status_fd"])
    for name, value in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (value, value + (name == "RLIMIT_CPU")))
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    del json, resource, cfg, pid
    import runpy
    sys.argv = ["main.py"]
    sys.path[0] = os.getcwd()
    runpy.run_path("main.py", run_name="__main__")
    sys.exit(0)
_, status, usage = os.wait4(pid, 0)
report = {
    "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
    "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
    "cpu_s": usage.ru_utime + usage.ru_stime,
    "max_rss_kb": usage.ru_maxrss,
}
os.write(cfg["status_fd"], json.dumps(report).encode())
os._exit(0)
"""

# Run as the sandbox uid: kill(-1) signals every process of that uid but the caller.
_KILL_ALL_OF_MY_UID = "for i in 1 2 3 4 5 6 7 8; do kill -9 -1 2>/dev/null || exit 0; done"


@functools.cache
def isolation() -> Isolation:
    """Probe once what this machine allows; warn once if the box is weak."""
    drop_uid = os.geteuid() == 0
    unshare = shutil.which("unshare")
    namespaces = False
    if unshare:
        try:
            namespaces = subprocess.run(
                [unshare, *_UNSHARE, "true"], capture_output=True, timeout=10
            ).returncode == 0
        except (OSError, subprocess.SubprocessError):
            namespaces = False
    iso = Isolation(drop_uid=drop_uid, namespaces=namespaces)
    # Can the dropped uid import the standard library? (fractions: not preloaded by the supervisor)
    if drop_uid and not _execute("import fractions", "", None, Limits(), iso).ok:
        iso = Isolation(drop_uid=False, namespaces=namespaces)
    if not (iso.drop_uid and iso.namespaces):
        warnings.warn(
            "cascadekit.sandbox: weak isolation on this machine ("
            + iso.describe()
            + "). Without root there is no separate uid, no network namespace and no "
            "private /tmp: sandboxed programs can reach the network and write where "
            "you can. Run model code in a container or VM if that matters.",
            RuntimeWarning,
            stacklevel=2,
        )
    return iso


@functools.cache
def _unreachable_prefix() -> tuple[str, str] | None:
    """(hidden ancestor, interpreter prefix) when another uid cannot reach the stdlib.

    Here the interpreter lives under /root (mode 700): a dropped uid could start
    Python but not import the standard library. The supervisor then mounts an empty
    tmpfs over that ancestor and binds the prefix back, read-only in effect.
    """
    prefix = os.path.realpath(sys.base_prefix)
    path = "/"
    for part in prefix.strip("/").split("/"):
        path = os.path.join(path, part)
        if not os.stat(path).st_mode & 0o001:
            return (path, prefix) if path != prefix else None
    return None


class _UidPool:
    """Throwaway uids, one per concurrent run, so runs cannot touch each other."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set[int] = set()
        self._rng = random.Random()  # private: never disturb the caller's seeded random
        self._candidates = self._range()

    @staticmethod
    def _range() -> range:
        top = 0
        try:
            with open("/proc/self/uid_map") as f:
                for line in f:
                    inside, _, count = (int(x) for x in line.split())
                    top = max(top, inside + count)
        except (OSError, ValueError):
            pass
        if top > 2_000_000_000:
            return range(1_900_000_000, 1_900_100_000)
        return range(65534, 65535)  # only "nobody": concurrent runs share a uid

    def take(self) -> int:
        with self._lock:
            for _ in range(1000):
                uid = self._rng.choice(self._candidates)
                if uid not in self._busy:
                    break
            self._busy.add(uid)
            return uid

    def give(self, uid: int) -> None:
        with self._lock:
            self._busy.discard(uid)


_uids = _UidPool()


def _clean_env(scratch: str, private_tmp: bool) -> dict[str, str]:
    tmp = "/tmp" if private_tmp else scratch
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": tmp,
        "TMPDIR": tmp,
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _rlimits(limits: Limits) -> list[tuple[str, int]]:
    mb = 1024 * 1024
    return [
        ("RLIMIT_CPU", max(1, int(limits.cpu_s))),
        ("RLIMIT_AS", limits.memory_mb * mb),
        ("RLIMIT_NPROC", limits.nproc),
        ("RLIMIT_FSIZE", limits.fsize_mb * mb),
        ("RLIMIT_NOFILE", limits.nofile),
        ("RLIMIT_CORE", 0),
    ]


def _write_files(scratch: str, code: str, files: dict[str, str] | None) -> None:
    all_files = dict(files or {})
    all_files["main.py"] = code
    root = os.path.realpath(scratch)
    for name, text in all_files.items():
        path = os.path.realpath(os.path.join(root, name))
        if not path.startswith(root + os.sep):
            raise ValueError(f"file name escapes the scratch folder: {name!r}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def _chown_tree(scratch: str, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(scratch):
        os.chown(dirpath, uid, uid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, uid)


class _Streams:
    """Bounded readers for stdout/stderr plus a non-blocking stdin writer."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes, cap: int) -> None:
        self.cap = cap
        self.out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
        self.names = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
        self.sel = selectors.DefaultSelector()
        for fd in self.out:
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ)
        self.stdin_fd = proc.stdin.fileno()
        self.pending = memoryview(stdin)
        os.set_blocking(self.stdin_fd, False)
        if self.pending:
            self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        self.proc = proc
        self.overflow = False

    @property
    def open(self) -> bool:
        return any(fd in self.out for fd in self._registered())

    def _registered(self) -> list[int]:
        return [key.fd for key in self.sel.get_map().values()]

    def pump(self, timeout: float) -> None:
        for key, _ in self.sel.select(max(0.0, timeout)):
            fd = key.fd
            if fd == self.stdin_fd:
                self._write_stdin()
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                self.sel.unregister(fd)
                continue
            buf = self.out[fd]
            room = self.cap - len(buf)
            buf += chunk[: max(0, room)]
            if len(chunk) > room:
                self.overflow = True

    def _write_stdin(self) -> None:
        try:
            n = os.write(self.stdin_fd, self.pending[:65536])
            self.pending = self.pending[n:]
        except BlockingIOError:
            return
        except OSError:  # the program closed its stdin
            self.pending = self.pending[:0]
        if not self.pending:
            self.sel.unregister(self.stdin_fd)
            self.proc.stdin.close()

    def close(self) -> None:
        self.sel.close()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def text(self, which: str) -> str:
        fd = next(fd for fd, name in self.names.items() if name == which)
        return bytes(self.out[fd]).decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _is_zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def _alive(uid: int) -> bool:
    """Whether any live (non-zombie) process runs under ``uid``."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and not _is_zombie(entry):
                    return True
            except OSError:
                continue
    return False


def _reap_uid(uid: int, in_pid_namespace: bool) -> None:
    """Make sure no process of the run's uid outlives the run.

    With a pid namespace the kernel is already killing them (it takes a few ms);
    without one, processes that left the process group (setsid) are killed with
    ``kill(-1)`` run as that uid.
    """
    deadline = time.monotonic() + (1.0 if in_pid_namespace else 0.0)
    while _alive(uid):
        if time.monotonic() > deadline:
            subprocess.run(["/bin/sh", "-c", _KILL_ALL_OF_MY_UID], user=uid, group=uid,
                           extra_groups=[], env={}, capture_output=True, timeout=10)
            return
        time.sleep(0.01)


def _read_status(fd: int) -> dict | None:
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return json.loads(data.decode()) if data else None
    except ValueError:
        return None


def _verdict(status: dict | None, stderr: str, timed_out: bool, overflow: bool,
             limits: Limits) -> tuple[int | None, str | None]:
    """(returncode, killed_reason) from the supervisor's report and our observations."""
    returncode = None
    if status is not None:
        returncode = status["exit"] if status["exit"] is not None else -status["signal"]
    if timed_out:
        return returncode, "wall timeout"
    if overflow:
        return returncode, "output limit"
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
    if returncode != 0 and "File too large" in tail:
        return returncode, "file size"
    return returncode, None


def run_python(code: str, *, stdin: str = "", files: dict[str, str] | None = None,
               limits: Limits = Limits()) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox; never raises on hostile code.

    ``files`` are written beside ``main.py`` (relative paths, e.g. a module under
    test); ``stdin`` is fed to the program.
    """
    return _execute(code, stdin, files, limits, isolation())


def _execute(code: str, stdin: str, files: dict[str, str] | None, limits: Limits,
             iso: Isolation) -> SandboxResult:
    uid = _uids.take() if iso.drop_uid else None
    scratch = tempfile.mkdtemp(prefix="cascadekit-sbx-")
    start = time.monotonic()
    try:
        try:
            _write_files(scratch, code, files)
        except (OSError, ValueError) as e:  # file names can come from a model's patch
            return SandboxResult(False, None, "", str(e), False, f"could not write files: {e}",
                                 time.monotonic() - start, None, None, iso.describe())
        if uid is not None:
            _chown_tree(scratch, uid)
        return _run(scratch, stdin, limits, iso, uid, start)
    finally:
        if uid is not None:
            _reap_uid(uid, iso.namespaces)
            _uids.give(uid)
        shutil.rmtree(scratch, ignore_errors=True)


def _run(scratch: str, stdin: str, limits: Limits, iso: Isolation, uid: int | None,
         start: float) -> SandboxResult:
    status_r, status_w = os.pipe()
    os.set_blocking(status_r, False)
    config = {
        "scratch": scratch,
        "bind": [d for d in _PRIVATE_DIRS if os.path.isdir(d)] if iso.namespaces else [],
        "status_fd": status_w,
        "rlimits": _rlimits(limits),
        "uid": uid,
        "expose": _unreachable_prefix() if iso.namespaces and uid is not None else None,
    }
    argv = [sys.executable, *_PYTHON_FLAGS, "-c", _SUPERVISOR, json.dumps(config)]
    if iso.namespaces:
        argv = ["unshare", *_UNSHARE, *argv]
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=scratch, env=_clean_env(scratch, iso.namespaces), pass_fds=(status_w,),
            start_new_session=True,
        )
    finally:
        os.close(status_w)
    streams = _Streams(proc, stdin.encode("utf-8", errors="replace"), limits.output_bytes)
    deadline = start + limits.wall_s
    drain_until: float | None = None
    timed_out = False
    try:
        while not streams.overflow:
            now = time.monotonic()
            exited = proc.poll() is not None
            if exited and drain_until is None:
                # The supervisor is done: kill leftovers, then drain what is buffered.
                _kill_group(proc.pid)
                drain_until = now + 0.5
            if exited and not streams.open or drain_until is not None and now >= drain_until:
                break
            if now >= deadline:
                timed_out = not exited
                break
            streams.pump(min(0.05, deadline - now))
    finally:
        _kill_group(proc.pid)
        proc.wait()
        streams.close()
    stderr = streams.text("stderr")
    status = _read_status(status_r)
    returncode, reason = _verdict(status, stderr, timed_out, streams.overflow, limits)
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
    )
