"""The RL widgets in a real browser: JupyterLab driven by Playwright with the system's Chromium.

A small notebook shows the group inspector and the token view; the browser runs
it, checks both render as live widgets, steps the inspector forward, changes the
token view's teacher, and finds no error on the page. Skipped, with the reason,
where Chromium (Debian's ``chromium``) or the ``playwright`` package is missing
(CI installs both: .ci/run). Playwright never downloads a browser here: it drives
``/usr/bin/chromium``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from cascadekit.course import inspect_rl
from cascadekit.course.widgets import HEADLESS_ENV

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
TOKEN = "cascadekit-browser-test"
#: Generous: the kernel loads four checkpoints and re-runs a step on a shared CPU.
WAIT_MS = 240_000

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook(folder: Path) -> Path:
    path = folder / "widgets.ipynb"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from cascadekit.course.inspect_rl import group_inspector, teacher_token_view"),
        nbformat.v4.new_code_cell("inspector = group_inspector('IF-RL', seed=0, step=1, prompts=1)"),
        nbformat.v4.new_code_cell("tokens = teacher_token_view('math', number=0, seed=0)"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free port, its settings in ``tmp_path``, the kernel not headless."""
    _notebook(tmp_path)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != HEADLESS_ENV}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp_path}",
         "--allow-root", "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "server.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def test_the_rl_widgets_render_respond_and_show_no_errors_in_jupyterlab(lab):
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda err: errors.append(f"page error: {err}"))
            page.goto(f"{lab}/lab/tree/widgets.ipynb?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=WAIT_MS)
            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=WAIT_MS)
            page.get_by_text("Run", exact=True).first.click()
            page.get_by_text("Run All Cells", exact=True).click()

            # The inspector: its live panel, step 1's table, then one step forward.
            forward = page.get_by_role("button", name="step ▶")
            forward.wait_for(timeout=WAIT_MS)
            table = page.locator(".widget-html-content", has_text="IF-RL").first
            sync_api.expect(table).to_contain_text("step 1.", timeout=WAIT_MS)
            forward.click()
            sync_api.expect(table).to_contain_text("step 2.", timeout=WAIT_MS)

            # The token view: coloured tokens under the domain's teacher, then another teacher.
            sync_api.expect(page.locator(".cascadekit-token").first).to_be_visible(timeout=WAIT_MS)
            own = inspect_rl.chapter_teachers(0)["math"]
            other = "SFT" if own != "SFT" else "RLHF"
            view = page.locator(".widget-html-content", has_text="log p").first
            sync_api.expect(view).to_contain_text(f"teacher {own}", timeout=WAIT_MS)
            teacher = page.locator(".widget-dropdown", has_text="teacher").locator("select")
            teacher.select_option(other)
            sync_api.expect(view).to_contain_text(f"teacher {other}", timeout=WAIT_MS)

            page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=WAIT_MS)
            for shown in page.locator(".jp-OutputArea-output").all_inner_texts():
                if "Traceback" in shown or "Error displaying widget" in shown or "Error:" in shown:
                    errors.append(f"cell output: {shown[:500]}")
        finally:
            browser.close()
    assert errors == []
