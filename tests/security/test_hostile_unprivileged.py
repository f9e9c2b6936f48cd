"""The hostile suite again as an ordinary user (uid 65534), as a laptop would run it.

Without root there is no separate uid and no cgroup; where the kernel allows user
namespaces the sandbox still gets its own network, mount, pid and IPC namespaces,
a private read-only root, and a program without capabilities (so the escapes of
issue 30, undoing the sandbox's mounts or ptracing its supervisor, are cases here).
This test (as root) copies the kit and the hostile programs where uid 65534 can
read them, runs them under the system Python with ``setpriv``, and checks the
user-mode expectations case by case. Run as an ordinary user, ``test_hostile.py``
already is this run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import hostile_programs as hostile

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the suite already runs unprivileged (test_hostile.py)")


@pytest.fixture(scope="module")
def unprivileged_results(kit_copy) -> dict:
    if not (os.path.exists(SYSTEM_PYTHON) and shutil.which("setpriv")):
        pytest.fail(f"the unprivileged run needs {SYSTEM_PYTHON} and setpriv (util-linux)")
    home = kit_copy(NOBODY)
    (home / "markers").mkdir()
    os.chown(home / "markers", NOBODY, NOBODY)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": str(home), "CASCADEKIT_SECURITY_DIR": str(home / "markers")}
    proc = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
         SYSTEM_PYTHON, "-W", "always", "hostile_programs.py"],
        cwd=home, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {"cases": json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@pytest.mark.parametrize("name", sorted(set(hostile.CASES) - hostile.ROOT_ONLY))
def test_contained_as_an_ordinary_user(unprivileged_results: dict, name: str) -> None:
    contained, detail = unprivileged_results["cases"][name]
    assert contained, detail


def test_the_warning_names_what_is_missing(unprivileged_results: dict) -> None:
    warning = unprivileged_results["stderr"]
    assert "weak isolation" in warning and "no separate uid" in warning and "no cgroup" in warning
