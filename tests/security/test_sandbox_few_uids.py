"""Where few uids are mapped (rootless containers, LXC, CI runners), runs must not kill each other.

Such a user namespace maps 65,536 uids or fewer, so the kit (root inside it)
cannot give each run a uid far above every account. The test makes that
namespace itself, with a pid namespace and its own /proc: it writes the uid map
as real root (no newuidmap needed), runs the kit there under the system Python,
starts an unrelated process of uid 65534 (the uid such a kit once fell back to
for every run, then reaped with ``kill(-1)``), and runs a hostile program (a
setsid daemon and a busy loop, killed at its wall limit) beside correct ones.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
OUTSIDE = 100000  # host uid of the namespace's root
MAPS = {"65536 uids": f"0 {OUTSIDE} 65536\n", "root and nobody only": f"0 {OUTSIDE} 1\n65534 {OUTSIDE + 65534} 1\n"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists(SYSTEM_PYTHON),
                                reason="writing a many-uid map without newuidmap needs root, unshare and /usr/bin/python3")

# Runs inside the namespace as its root (pid 1 of its own pid namespace).
SCRIPT = r'''
import json, subprocess, sys, threading, time, warnings
warnings.simplefilter("ignore")
from cascadekit import sandbox
from cascadekit.sandbox import Limits, isolation, run_python
if sys.argv[1] == "no namespaces":
    view = sandbox._view()
    sandbox._view = lambda: {**view, "pivot_root": None}  # an architecture without namespaces for the kit
iso = isolation()
victim = subprocess.Popen(["sleep", "60"], user=65534, group=65534, extra_groups=[])
HOSTILE = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nwhile True:\n    pass\n"
GOOD = "import time\ntime.sleep(1.0)\nprint(sum(range(10)))\n"
results = {}
def hostile():
    results["hostile"] = run_python(HOSTILE, limits=Limits(wall_s=1.5, cpu_s=5))
def good(i):
    r = run_python(GOOD)
    results[i] = r.ok and r.stdout == "45\n"
threads = [threading.Thread(target=hostile)] + [threading.Thread(target=good, args=(i,)) for i in range(3)]
for t in threads:  # the last correct run overlaps the hostile run's clean-up
    t.start()
    time.sleep(0.9)
for t in threads:
    t.join()
time.sleep(0.3)
print(json.dumps({"missing": iso.missing(), "victim_alive": victim.poll() is None, "good": [results[i] for i in range(3)],
                  "hostile": results["hostile"].killed_reason, "isolation": results["hostile"].isolation}))
victim.kill()
'''

# Enters a new user namespace itself (an exec before the map exists would drop its
# capabilities there), waits for the map, becomes the namespace's root and starts SCRIPT.
BOOT = r'''
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # CLONE_NEWUSER
    print("refused", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(0)
print("ready", flush=True)
sys.stdin.readline()
os.setgroups([])
os.setresgid(0, 0, 0)
os.setresuid(0, 0, 0)
unshare = sys.argv[1]
os.execv(unshare, [unshare, "--pid", "--fork", "--mount", "--mount-proc", sys.executable] + sys.argv[2:])
'''


def _in_small_namespace(home: Path, uid_map: str, mode: str) -> dict:
    (home / "script.py").write_text(SCRIPT)
    os.chmod(home / "script.py", 0o644)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(home)}
    proc = subprocess.Popen([SYSTEM_PYTHON, "-c", BOOT, shutil.which("unshare"), "script.py", mode],
                            cwd=home, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if (line := proc.stdout.readline().strip()) != "ready":
            pytest.skip(f"the kernel refuses a user namespace: {line}")
        try:
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{proc.pid}/{name}").write_text(uid_map)
        except OSError as err:
            pytest.skip(f"the kernel refuses a {len(uid_map.splitlines())}-range uid map: {err}")
        out, err = proc.communicate("go\n", timeout=180)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and out.strip(), err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("uids, mode", [("65536 uids", "namespaces"), ("root and nobody only", "namespaces"),
                                        ("root and nobody only", "no namespaces")])
def test_an_unrelated_process_and_a_concurrent_run_survive_a_hostile_run(kit_copy, uids: str, mode: str) -> None:
    seen = _in_small_namespace(kit_copy(None), MAPS[uids], mode)
    assert seen["victim_alive"], seen
    assert seen["good"] == [True, True, True], seen
    assert seen["hostile"] == "wall timeout", seen
    if uids == "65536 uids":
        assert "own uid" in seen["isolation"], seen
    else:  # the one spare uid is shared: the runs take turns, and the result and `cascadekit env` say so
        assert "shared uid, runs take turns" in seen["isolation"], seen
        assert any("take turns" in line for line in seen["missing"]), seen
