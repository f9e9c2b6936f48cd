"""Hostile programs for the security suite, shared by the root run and the unprivileged run.

Each case runs one attack through the kit's sandbox or verifiers and returns
``(contained, detail)``. Only the standard library, ``cascadekit.sandbox`` and
``cascadekit.verify.code`` are imported here: the unprivileged run executes this
file with the system Python as uid 65534, outside the test environment.

``MODE`` names who runs the case: ``"root"`` (CI: own uid, namespaces, cgroup)
or ``"user"`` (an ordinary account). A few guarantees exist only as root; the
cases that test them say so in ``ROOT_ONLY``.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import uuid
from typing import Callable

from cascadekit.sandbox import Limits, run_python
from cascadekit.verify.code import FunctionTests, verify_code
from cascadekit.verify.patch import make_diff, verify_patch

Case = Callable[[], "tuple[bool, str]"]
CASES: dict[str, Case] = {}
TAMPERING: dict[str, str] = {}  # name -> a wrong solution of add(a, b) that tries to collect the reward
ROOT_ONLY = {"stdlib_shadowing_as_root", "stdlib_shadowing_through_a_patch"}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def _marker_dir() -> str:
    """A host folder outside /tmp that only the test's own user can write."""
    base = os.environ.get("CASCADEKIT_SECURITY_DIR") or os.path.join(os.getcwd(), ".security-markers")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return tempfile.mkdtemp(dir=base)


# ---------------------------------------------------------------- resource abuse

@case
def infinite_loop() -> tuple[bool, str]:
    # the wall limit far above the CPU limit: on a loaded machine a near one fires first (no test depends on load)
    r = run_python("while True:\n    pass", limits=Limits(cpu_s=1, wall_s=120))
    return (not r.ok and r.killed_reason == "cpu time"), f"{r.killed_reason} after {r.wall_s:.1f}s"


@case
def sleeper() -> tuple[bool, str]:
    r = run_python("import time\ntime.sleep(60)", limits=Limits(wall_s=1))
    return (r.timed_out and r.wall_s < 30), f"{r.killed_reason} after {r.wall_s:.1f}s"  # long before the sleep ends


@case
def fork_bomb() -> tuple[bool, str]:
    tag = f"ckbomb{uuid.uuid4().hex[:8]}"
    code = (f"import ctypes, os\nctypes.CDLL(None).prctl(15, b'{tag}', 0, 0, 0)\n"
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    r = run_python(code, limits=Limits(wall_s=1.5, nproc=16))
    time.sleep(0.2)
    left = _processes_named(tag)
    return (not r.ok and not left), f"{r.killed_reason}; {len(left)} left behind"


@case
def memory_bomb() -> tuple[bool, str]:
    r = run_python("x = []\nwhile True:\n    x.append(' ' * 10**7)", limits=Limits(memory_mb=128))
    return (not r.ok and r.killed_reason == "memory"), f"{r.killed_reason}"


@case
def memory_across_children() -> tuple[bool, str]:
    """Eight children of 150 MB each: at no moment may the run hold more than its 512 MB budget.

    Each child reports once it has touched its whole block and then holds it; the
    program waits until every live child has reported (a loaded machine touches
    memory slowly) and counts those alive and holding at the same time.
    """
    code = ("import os, select, time\nkids = {}\ndone_r, done_w = os.pipe()\nhold_r, hold_w = os.pipe()\n"
            "for k in range(8):\n    pid = os.fork()\n    if pid == 0:\n        try:\n"
            "            block = bytearray(150 * 2**20)\n            for i in range(0, len(block), 4096):\n"
            "                block[i] = 1\n            os.write(done_w, bytes([k]))\n            os.read(hold_r, 1)\n"
            "        finally:\n            os._exit(0)\n    kids[pid] = k\n"
            "alive, held, deadline = set(kids), set(), time.monotonic() + 6\n"
            "while time.monotonic() < deadline and not alive <= held:\n"
            "    alive = {pid for pid in alive if os.waitpid(pid, os.WNOHANG) == (0, 0)}\n"
            "    if select.select([done_r], [], [], 0.05)[0]:\n        ready = os.read(done_r, 64)\n"
            "        held |= {pid for pid, k in kids.items() if k in ready}\n"
            "print('holding', len(alive & held), flush=True)\n")
    r = run_python(code, limits=Limits(memory_mb=512, wall_s=10))
    holding = int(r.stdout.split()[1]) if r.stdout.startswith("holding ") else 0
    return holding * 150 <= 512, f"{holding} children of 150 MB held together ({r.killed_reason}; {r.budget})"


@case
def huge_output() -> tuple[bool, str]:
    r = run_python("while True:\n    print('x' * 1000)", limits=Limits(output_bytes=4096))
    return (r.killed_reason == "output limit" and len(r.stdout) <= 4096), f"{len(r.stdout)} bytes"


@case
def disk_filler() -> tuple[bool, str]:
    code = ("i = 0\nwhile True:\n    open(f'f{i}', 'w').write('x' * 2**20)\n    i += 1\n")
    r = run_python(code, limits=Limits(disk_mb=8, fsize_mb=4, wall_s=5))
    return (not r.ok and r.killed_reason in ("disk quota", "file size", "wall timeout")), f"{r.killed_reason}"


@case
def fd_exhaustion() -> tuple[bool, str]:
    code = "fs = []\nwhile True:\n    fs.append(open('main.py'))\n"
    r = run_python(code, limits=Limits(nofile=32))
    after = run_python("print('still fine')")
    return (not r.ok and "Too many open files" in r.stderr and after.ok), r.stderr.strip()[-80:]


# ---------------------------------------------------------------- escapes

@case
def writes_outside_scratch() -> tuple[bool, str]:
    """Every world-writable folder of the host, a folder of the caller's and /root: nothing lands."""
    marker = f"escape_{uuid.uuid4().hex}"
    targets = sorted(set(_world_writable_dirs()) | {"/tmp", "/var/tmp", "/dev/shm", "/run/lock", _marker_dir(), "/root"})
    code = ("import json, sys\nfor d in json.loads(input()):\n    try:\n"
            f"        open(d + '/{marker}', 'w').write('escaped')\n    except OSError:\n        pass\n")
    run_python(code, stdin=json.dumps(targets) + "\n")
    landed = [d for d in targets if os.path.exists(os.path.join(d, marker))]
    if MODE == "user":  # no separate uid: the caller's own folder is writable by design
        landed = [d for d in landed if not d.startswith(os.path.dirname(_marker_dir()))]
    for d in landed:
        os.unlink(os.path.join(d, marker))
    return not landed, f"landed in {landed}" if landed else f"{len(targets)} folders untouched"


@case
def stdlib_shadowing_as_root() -> tuple[bool, str]:
    """Modules named like the supervisor's imports, beside the program: none may run as root."""
    out = _marker_dir()
    body = f"import os\nopen({out!r} + '/' + __name__ + '-' + str(os.getuid()), 'w').close()\n"
    files = {"json.py": body, "resource.py": body, "os.py": body, "runpy.py": body, "ctypes/__init__.py": body,
             "sitecustomize.py": body, "usercustomize.py": body, "encodings/__init__.py": body}
    r = run_python("print('ran')", files=files)
    hits = os.listdir(out)
    as_root = [h for h in hits if h.endswith("-0")]
    return (not as_root and r.ok), f"ran: {hits}"


@case
def run_lock_and_host_socket() -> tuple[bool, str]:
    """A world-writable Unix socket in /run/lock and an abstract one: both out of reach."""
    path = f"/run/lock/ck-{uuid.uuid4().hex[:8]}.sock"
    abstract = f"\0ck-{uuid.uuid4().hex[:8]}"
    listeners = []
    for address in ([path] if os.access("/run/lock", os.W_OK) else []) + [abstract]:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)
        s.listen(1)
        listeners.append(s)
    code = ("import json, socket\nfor a in json.loads(input()):\n    s = socket.socket(socket.AF_UNIX)\n"
            "    try:\n        s.connect(a)\n        print('connected', repr(a))\n    except OSError as e:\n"
            "        print('refused', type(e).__name__)\n")
    try:
        r = run_python(code, stdin=json.dumps([path, abstract]) + "\n")
    finally:
        for s in listeners:
            s.close()
        if os.path.exists(path):
            os.unlink(path)
    return (r.ok and "connected" not in r.stdout), r.stdout.strip()


@case
def tcp_to_host_listener() -> tuple[bool, str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\nexcept OSError as e:\n    print('blocked', type(e).__name__)\n")
    try:
        r = run_python(code)
    finally:
        server.close()
    return (r.ok and r.stdout.startswith("blocked")), r.stdout.strip()


@case
def dns_and_internet() -> tuple[bool, str]:
    code = ("import socket\nfor host in ['pypi.org', 'localhost']:\n    try:\n"
            "        socket.create_connection((host, 443), timeout=2)\n        print('connected', host)\n"
            "    except OSError as e:\n        print('blocked', host, type(e).__name__)\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('connected ip')\n"
            "except OSError:\n    print('blocked ip')\n")
    r = run_python(code)
    return (r.ok and "connected" not in r.stdout), r.stdout.strip().replace("\n", "; ")


@case
def sysv_shared_memory_does_not_outlive_the_run() -> tuple[bool, str]:
    before = _shm_ids()
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.shmget.restype = ctypes.c_int\nlibc.shmat.restype = ctypes.c_void_p\n"
            "shm = libc.shmget(0, 64 * 2**20, 0o1000 | 0o666)\nprint('segment', shm)\n"
            "addr = libc.shmat(shm, None, 0)\nctypes.memset(addr, 1, 64 * 2**20)\n")
    r = run_python(code)
    time.sleep(0.2)
    leaked = _shm_ids() - before
    return not leaked, f"{r.stdout.strip()}; leaked {sorted(leaked)}"


@case
def secrets_in_environment() -> tuple[bool, str]:
    os.environ["CASCADEKIT_TEST_SECRET"] = "hunter2"
    try:
        code = ("import os\nprint(sorted(os.environ.items()))\n"
                "try:\n    print(open('/proc/1/environ', 'rb').read())\nexcept OSError as e:\n    print('no', e)\n"
                "try:\n    print(open(f'/proc/{os.getppid()}/environ', 'rb').read())\nexcept OSError as e:\n"
                "    print('no', e)\n")
        r = run_python(code)
    finally:
        del os.environ["CASCADEKIT_TEST_SECRET"]
    return (r.ok and "hunter2" not in r.stdout), "no secret in what the program saw"


@case
def secret_file_in_home() -> tuple[bool, str]:
    home = os.path.expanduser("~")
    secret = os.path.join(home, f".cascadekit-secret-{uuid.uuid4().hex[:8]}")
    with open(secret, "w") as f:
        f.write("hunter2")
    os.chmod(secret, 0o600)
    try:
        r = run_python(f"try:\n    print(open({secret!r}).read())\nexcept OSError as e:\n    print('no', type(e).__name__)\n")
    finally:
        os.unlink(secret)
    return (r.ok and "hunter2" not in r.stdout), r.stdout.strip()


@case
def signals_to_the_caller_and_others() -> tuple[bool, str]:
    victim = _spawn_sleeper()
    code = (f"import os, signal\nfor pid in [os.getppid(), {os.getpid()}, {victim.pid}, 1]:\n    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n        print('refused', pid, type(e).__name__)\n"
            "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('done')\n")
    r = run_python(code)
    alive = victim.poll() is None
    victim.kill()
    victim.wait()
    return alive, f"caller alive, other process alive={alive} ({r.killed_reason or 'ok'})"


@case
def daemons_left_behind() -> tuple[bool, str]:
    tag = f"ckdaemon{uuid.uuid4().hex[:6]}"
    code = (f"import ctypes, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        ctypes.CDLL(None).prctl(15, b'{tag}', 0, 0, 0)\n        time.sleep(60)\n    os._exit(0)\n"
            "print('done')\n")
    r = run_python(code)
    time.sleep(0.3)
    left = _processes_named(tag)
    for pid in left:
        os.kill(pid, 9)
    return (r.ok and not left), f"{len(left)} daemons left"


@case
def ptrace_the_caller() -> tuple[bool, str]:
    code = (f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"print('attach', libc.ptrace(16, {os.getpid()}, 0, 0), ctypes.get_errno())\n")
    r = run_python(code)
    attached = r.stdout.startswith("attach 0")
    return (r.ok and not attached), r.stdout.strip()


@case
def own_session_and_process_group() -> tuple[bool, str]:
    """Issue 56.1: the program leads a session and a process group of its own, not the supervisor's."""
    r = run_python("import os\nprint(os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid())\n")
    return (r.ok and r.stdout.split() == ["True", "True"]), f"own session, own group: {r.stdout.strip()}"


@case
def stop_the_supervisor_through_the_process_group() -> tuple[bool, str]:
    """``killpg(0, SIGSTOP)``: a helper in another group resumes the program, so only a stopped supervisor hangs the run.

    The helper waits until the program is stopped and sends it SIGCONT; the
    program then exits at once. Had the signal reached the supervisor or the
    namespace's init (same uid in user mode), nobody would report the exit and the
    run would end only at its wall limit.
    """
    code = ("import os, signal, time\nme = os.getpid()\nhelper = os.fork()\nif helper == 0:\n"
            "    os.setpgid(0, 0)\n    while True:\n"
            "        with open('/proc/%d/stat' % me) as f:\n"
            "            if f.read().rpartition(')')[2].split()[0] == 'T':\n                break\n"
            "        time.sleep(0.01)\n    os.kill(me, signal.SIGCONT)\n    os._exit(0)\n"
            "while os.getpgid(helper) != helper:\n    time.sleep(0.01)\n"
            "os.killpg(0, signal.SIGSTOP)\nos.waitpid(helper, 0)\nprint('resumed')\n")
    r = run_python(code, limits=Limits(wall_s=5))
    return (r.ok and r.stdout.strip() == "resumed"), f"{r.killed_reason or 'ok'}: {r.stdout.strip()!r}"


@case
def kill_the_supervisor_through_the_process_group() -> tuple[bool, str]:
    """``killpg(0, SIGKILL)`` kills the program alone: the supervisor lives to report the signal."""
    r = run_python("import os, signal\nos.killpg(0, signal.SIGKILL)\n")
    return (r.returncode == -9 and r.killed_reason == "signal SIGKILL"), f"{r.returncode}: {r.killed_reason}"


@case
def the_next_run_is_unharmed() -> tuple[bool, str]:
    """Runs share one zygote (issue 57): a program that signals all it can, to the last, harms no later run."""
    code = ("import os, signal\nfor target in (-1, 0, 1, os.getppid()):\n    for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
            "        try:\n            os.kill(target, sig) if target > 0 else os.killpg(0, sig) if target == 0 "
            "else os.kill(-1, sig)\n        except OSError:\n            pass\n")
    hostile = run_python(code, limits=Limits(wall_s=3))
    after = [run_python(f"print({i})", limits=Limits(wall_s=5)) for i in range(3)]
    good = [r.ok and r.stdout == f"{i}\n" and not r.timed_out for i, r in enumerate(after)]
    return all(good), f"hostile run: {hostile.killed_reason}; later runs ok: {good}"


@case
def stdin_is_a_sealed_file() -> tuple[bool, str]:
    """Issue 55.5: stdin is a regular file read whole in the judges' idiom, and the program cannot change it."""
    data = "7 " * 400_000  # 800 kB: more than a pipe holds
    code = ("import os\ntotal = sum(map(int, os.read(0, os.fstat(0).st_size).split()))\nfor how in ('fd', 'reopen'):\n"
            "    try:\n        fd = 0 if how == 'fd' else os.open('/proc/self/fd/0', os.O_RDWR)\n"
            "        os.write(fd, b'9')\n        print('wrote', how)\n    except OSError:\n        pass\n"
            "try:\n    os.truncate(0, 1)\n    print('truncated')\nexcept OSError:\n    pass\nprint(total)\n")
    r = run_python(code, stdin=data)
    return (r.ok and r.stdout.split() == [str(7 * 400_000)]), r.stdout.strip()[:200] or r.stderr[-200:]


def _undo_mounts_code(marker: str, token: str) -> str:
    """The unprivileged escape of issue 30: unmount what the sandbox mounted, then reach the host."""
    return ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for t in (b'/run', b'/dev/shm', b'/var/tmp', b'/tmp', b'/proc', b'/usr', b'/'):\n"
            "    libc.umount2(t, 2)\n"
            "for d in ('/tmp', '/var/tmp', '/dev/shm'):\n    try:\n"
            f"        open(d + '/{marker}', 'w').write('escaped')\n    except OSError:\n        pass\n"
            "seen = 0\nfor p in os.listdir('/proc'):\n    try:\n"
            f"        seen += {token.encode()!r} in open('/proc/%s/cmdline' % p, 'rb').read()\n"
            "    except OSError:\n        pass\nprint('host processes seen', seen)\n")


def _landed(marker: str) -> list[str]:
    landed = [d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.exists(os.path.join(d, marker))]
    for d in landed:
        os.unlink(os.path.join(d, marker))
    return landed


@case
def undo_the_sandbox_mounts() -> tuple[bool, str]:
    """Unmounting /run, /dev/shm, /var/tmp, /tmp and /proc must fail: nothing lands, no host process shows."""
    marker, token = f"ck-escaped-{uuid.uuid4().hex[:8]}", f"ck-witness-{uuid.uuid4().hex[:8]}"
    witness = _spawn_sleeper(token)
    try:
        r = run_python(_undo_mounts_code(marker, token))
    finally:
        witness.kill()
        witness.wait()
    landed = _landed(marker)
    return (not landed and "host processes seen 0" in r.stdout), f"landed in {landed}; {r.stdout.strip()}"


@case
def undo_the_sandbox_mounts_from_a_patch() -> tuple[bool, str]:
    """The same attack from a module the harness imports (an SWE patch)."""
    marker = f"ck-escaped-{uuid.uuid4().hex[:8]}"
    calc = _undo_mounts_code(marker, "unused") + "def add(a, b):\n    return a - b\n"
    v = verify_patch(f"```diff\n{make_diff(REPO, {**REPO, 'calc.py': calc})}```", REPO, SWE_TESTS)
    landed = _landed(marker)
    return not landed and not v.all_passed, f"landed in {landed}; {v.reason}"


@case
def unmount_from_a_nested_user_namespace() -> tuple[bool, str]:
    """A new user namespace gives capabilities back, but over a copy whose mounts are locked."""
    marker = f"ck-escaped-{uuid.uuid4().hex[:8]}"
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print('unshare', libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())\n"
            "for t in (b'/tmp', b'/proc', b'/dev/shm'):\n    print('umount', t, libc.umount2(t, 2))\n"
            f"try:\n    open('/tmp/{marker}', 'w').write('x')\nexcept OSError:\n    pass\n")
    r = run_python(code)
    landed = _landed(marker)
    undone = [line for line in r.stdout.splitlines() if line.startswith("umount") and line.endswith(" 0")]
    return not landed and not undone, f"landed in {landed}; {r.stdout.strip()}"


@case
def ptrace_the_supervisor() -> tuple[bool, str]:
    """The sandbox's own processes keep capabilities: the program (same uid in user mode) must not attach."""
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for pid in sorted({1, os.getppid()}):\n    print('attach', pid, libc.ptrace(16, pid, 0, 0))\n"
            "for what in ('root', 'cwd', 'exe'):\n    try:\n"
            "        print('link', what, os.readlink('/proc/1/' + what))\n    except OSError as e:\n"
            "        print('no', what, type(e).__name__)\n")
    r = run_python(code)
    attached = [line for line in r.stdout.splitlines() if line.startswith("attach") and line.endswith(" 0")]
    return (r.ok and not attached and "link" not in r.stdout), r.stdout.strip().replace("\n", "; ")


@case
def host_files_are_not_readable() -> tuple[bool, str]:
    """A world-readable file beside the suite, the suite itself, the kit's source and /etc/passwd: none visible."""
    import cascadekit.sandbox
    here = os.path.dirname(os.path.abspath(__file__))
    secret = os.path.join(here, f"ck-world-readable-{uuid.uuid4().hex[:8]}")
    with open(secret, "w") as f:
        f.write("hunter2")
    os.chmod(secret, 0o644)
    paths = [secret, os.path.abspath(__file__), os.path.abspath(cascadekit.sandbox.__file__), "/etc/passwd"]
    code = ("import json\nfor p in json.loads(input()):\n    try:\n        open(p).read(1)\n"
            "        print('read', p)\n    except OSError as e:\n        print('no', type(e).__name__)\n")
    try:
        r = run_python(code, stdin=json.dumps(paths) + "\n")
    finally:
        os.unlink(secret)
    return (r.ok and "read" not in r.stdout and r.stdout.count("no ") == len(paths)), r.stdout.strip().replace("\n", "; ")


_CHILDREN = ("import os\nkids = []\nr, w = os.pipe()\nfor _ in range(10):\n    try:\n        pid = os.fork()\n"
             "    except OSError:\n        break\n    if pid == 0:\n        os.close(w)\n        os.read(r, 1)\n"
             "        os._exit(0)\n    kids.append(pid)\nprint('children', len(kids), flush=True)\nos.close(w)\n"
             "for pid in kids:\n    os.waitpid(pid, 0)\n")


@case
def process_budget_counts_only_the_program() -> tuple[bool, str]:
    """Under a budget of N processes the program may hold N - 1 children at once, and not N."""
    got = {n: run_python(_CHILDREN, limits=Limits(nproc=n, memory_mb=512)) for n in (2, 4)}
    counts = {n: r.stdout.strip() for n, r in got.items()}
    return all(r.ok and r.stdout == f"children {n - 1}\n" for n, r in got.items()), f"{counts} ({got[4].budget})"


# ---------------------------------------------------------------- reward tampering

GOOD = "def add(a, b):\n    return a + b\n"
TESTS = FunctionTests("add", [([1, 2], 3), ([7, 5], 12), ([-4, 9], 5), ([10, 20], 30)])

TAMPERING.update({
    "always_equal_object": "class Yes:\n    def __eq__(self, other):\n        return True\n"
                           "    __hash__ = object.__hash__\ndef add(a, b):\n    return Yes()\n",
    "int_subclass_equal_to_all": "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
                                 "def add(a, b):\n    return Yes(0)\n",
    "monkeypatch_main": "import __main__, sys\nfor name in list(vars(__main__)):\n"
                        "    if callable(getattr(__main__, name)):\n        setattr(__main__, name, lambda *a, **k: True)\n"
                        "def add(a, b):\n    return 0\n",
    "expected_from_caller_frames": "import sys\ndef add(a, b):\n    f = sys._getframe(1)\n    while f:\n"
                                   "        for k in ('want', 'expected', 'cases'):\n            if k in f.f_locals:\n"
                                   "                return f.f_locals[k]\n        f = f.f_back\n    return 0\n",
    "cases_from_files": "import glob, json\ndef add(a, b):\n    for p in glob.glob('**/*', recursive=True):\n"
                        "        try:\n            data = json.load(open(p))\n        except Exception:\n            continue\n"
                        "        return data\n    return 0\n",
    "forged_result_lines": "import sys\nfor i in range(4):\n    print('@@cascadekit {\"i\": %d, \"value\": 99}' % i)\n"
                           "    print('{\"i\": %d, \"ok\": true}' % i)\n"
                           "    sys.__stdout__.write('@@cascadekit {\"i\": %d, \"ok\": true}\\n' % i)\n"
                           "def add(a, b):\n    return 0\n",
    "forged_lines_on_fd1": "import os\nfor i in range(4):\n"
                           "    os.write(1, b'@@cascadekit {\"i\": %d, \"value\": 30}\\n' % i)\n"
                           "def add(a, b):\n    return 30\n",
    "patched_json_dumps": "import json\njson.dumps = lambda *a, **k: '\"PASS\"'\n"
                          "import json.encoder\njson.encoder.JSONEncoder.encode = lambda *a, **k: 'true'\n"
                          "def add(a, b):\n    return 0\n",
    "rewrite_reporter": "import sys, io\nclass Out(io.StringIO):\n    def write(self, s):\n"
                        "        return sys.__stdout__.write(s.replace('\"error\"', '\"value\"'))\n"
                        "sys.stdout = Out()\ndef add(a, b):\n    raise ValueError(3)\n",
    "exit_before_tests": "import os\nos._exit(0)\ndef add(a, b):\n    return a + b\n",
    "system_exit_in_call": "def add(a, b):\n    raise SystemExit(0)\n",
    "nan_answer": "def add(a, b):\n    return float('nan')\n",
    "deep_nesting": "def add(a, b):\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n",
    "kill_the_verifier": "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\n"
                         "def add(a, b):\n    return 0\n",
    "scan_memory_for_expected": "import gc\ndef add(a, b):\n    for o in gc.get_objects():\n"
                                "        if isinstance(o, list) and len(o) == 4 and all(isinstance(c, list) for c in o):\n"
                                "            return o\n    return 0\n",
    "read_parent_memory": "import os\ndef add(a, b):\n    try:\n"
                          "        return open(f'/proc/{os.getppid()}/cmdline').read()\n    except OSError:\n        return 0\n",
    "stdin_peek": "import sys\nrest = sys.stdin.read()\ndef add(a, b):\n    return rest\n",
    "flood_after_forging": "print('@@cascadekit {\"i\": 0, \"value\": 4}')\nprint('x' * 10**6)\n"
                           "def add(a, b):\n    return 0\n",
})


def _tampering_case(name: str, code: str) -> Case:
    def run() -> tuple[bool, str]:
        v = verify_code(f"```python\n{code}```", TESTS)
        return (v.passed == 0 or (name == "forged_lines_on_fd1" and v.passed == 1)) and not v.all_passed, v.reason
    run.__name__ = f"tamper_code_{name}"
    return run


for _name, _code in TAMPERING.items():
    case(_tampering_case(_name, _code))


@case
def tampering_control_good_solution_passes() -> tuple[bool, str]:
    """The harness works: a right answer still scores, so the zeros above mean something."""
    v = verify_code(f"```python\n{GOOD}```", TESTS)
    return v.all_passed, v.reason


# SWE: a repository with a bug in add; each patch leaves the bug and tries to collect the reward.
REPO = {"calc.py": "def add(a, b):\n    return a - b\n", "README.md": "calc\n"}
SWE_TESTS = FunctionTests("add", [([2, 3], 5), ([10, 4], 14), ([0, 7], 7)], module="calc")
_SHADOW = "import os\nopen(os.environ.get('M', '/root') + '/shadow-' + str(os.getuid()), 'w').close()\n"
SWE_TAMPERING = {
    "hidden_tests_package": {"hidden_tests/__init__.py": "def test_add():\n    pass\n"},
    "harness_named_main": {"main.py": "print('all tests pass')\n"},
    "conftest_and_pytest_ini": {"conftest.py": "import sys\nsys.exit(0)\n", "pytest.ini": "[pytest]\n"},
    "stdlib_shadows_in_tree": {"json.py": _SHADOW, "importlib/__init__.py": _SHADOW, "io.py": _SHADOW,
                               "resource.py": _SHADOW, "ctypes/__init__.py": _SHADOW},
    "sitecustomize": {"sitecustomize.py": "import builtins\nbuiltins.print = lambda *a, **k: None\n"},
    "module_patches_harness_at_import": {"calc.py": "import __main__\n__main__.report = lambda *a: None\n"
                                         "def add(a, b):\n    return a - b\n"},
    "module_forges_reports_at_import": {"calc.py": "import os\nfor i in range(3):\n"
                                        "    os.write(1, b'@@cascadekit {\"i\": %d, \"value\": 5}\\n' % i)\n"
                                        "def add(a, b):\n    return a - b\n"},
    "module_exits_at_import": {"calc.py": "import os\nos._exit(0)\n"},
}


def _swe_case(name: str, new_files: dict) -> Case:
    def run() -> tuple[bool, str]:
        after = {**REPO, **new_files}
        diff = make_diff(REPO, after)
        v = verify_patch(f"```diff\n{diff}```", REPO, SWE_TESTS)
        return v.passed == 0 and not v.all_passed, v.reason
    run.__name__ = f"tamper_swe_{name}"
    return run


for _name, _files in SWE_TAMPERING.items():
    case(_swe_case(_name, _files))


@case
def stdlib_shadowing_through_a_patch() -> tuple[bool, str]:
    """The issue's escape: a patch adding json.py (and friends) that record the uid they run as."""
    out = _marker_dir()
    body = f"import os\nopen({out!r} + '/' + __name__ + '-' + str(os.getuid()), 'w').close()\n"
    after = {**REPO, "json.py": body, "resource.py": body, "ctypes/__init__.py": body, "selectors.py": body,
             "calc.py": "def add(a, b):\n    return a + b\n"}
    v = verify_patch(f"```diff\n{make_diff(REPO, after)}```", REPO, SWE_TESTS)
    as_root = [h for h in os.listdir(out) if h.endswith("-0")]
    return not as_root and v.all_passed, f"{v.reason}; markers {os.listdir(out)}"


@case
def swe_control_real_fix_passes() -> tuple[bool, str]:
    fixed = {**REPO, "calc.py": "def add(a, b):\n    return a + b\n"}
    v = verify_patch(f"```diff\n{make_diff(REPO, fixed)}```", REPO, SWE_TESTS)
    return v.all_passed, v.reason


# ---------------------------------------------------------------- helpers

def _world_writable_dirs() -> list[str]:
    """World-writable folders on the host's root filesystem (bounded walk)."""
    found, start = [], time.monotonic()
    skip = {"/proc", "/sys", "/dev/pts"}
    for top, dirs, _ in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip and not os.path.islink(os.path.join(top, d))]
        try:
            if os.stat(top).st_mode & 0o002:
                found.append(top)
        except OSError:
            pass
        if time.monotonic() - start > 5:
            break
    return found


def _processes_named(name: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == name[:15]:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def _shm_ids() -> set[str]:
    try:
        with open("/proc/sysvipc/shm") as f:
            return {line.split()[1] for line in f.readlines()[1:] if line.split()}
    except OSError:
        return set()


def _spawn_sleeper(*tag: str):
    import subprocess
    import sys
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *tag])


MODE = "root" if os.geteuid() == 0 else "user"


def run_all(names: list[str] | None = None) -> dict[str, tuple[bool, str]]:
    """Run the cases (all by default) and collect ``name -> (contained, detail)``; never raises."""
    results = {}
    for name in names or list(CASES):
        if MODE == "user" and name in ROOT_ONLY:
            continue
        try:
            results[name] = CASES[name]()
        except Exception as err:  # a case that crashes is a failure with its reason
            results[name] = (False, f"{type(err).__name__}: {err}")
    return results


if __name__ == "__main__":
    print(json.dumps(run_all()))
