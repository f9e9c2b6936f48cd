"""Issue 34 case 8: Unsloth is imported before trl, transformers and peft, or not at all.

Unsloth is not installed here (it needs a GPU): a stand-in ``unsloth`` module records which of the libraries
it patches were already imported when it was, and CUDA is faked by replacing ``torch.cuda.is_available``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

from cascadekit.engine import unsloth_first
from cascadekit.profiles import load_profile

REPO = Path(__file__).resolve().parent.parent


def test_cascadekit_experiment_imports_unsloth_before_anything_it_patches(tmp_path):
    (tmp_path / "unsloth.py").write_text(
        "import sys\nBEFORE = [m for m in ('trl', 'transformers', 'peft') if m in sys.modules]\n")
    script = textwrap.dedent("""
        import torch
        torch.cuda.is_available = lambda: True
        from cascadekit import chapters, cli

        def stop(*args, **kwargs):  # resolving the chapter imports its module, and trl with it: stop first
            import sys
            print("unsloth imported before the chapter:", "unsloth" in sys.modules)
            print("unsloth imported after:", sys.modules["unsloth"].BEFORE)
            raise SystemExit(0)

        chapters.resolve = stop
        cli.main(["experiment", "12", "--scale", "small"])
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unsloth imported before the chapter: True" in done.stdout, done.stderr[-2000:]
    assert "unsloth imported after: []" in done.stdout


def test_unsloth_is_not_imported_after_the_libraries_it_patches(monkeypatch):
    import torch
    import transformers  # noqa: F401 - already imported in this process, as after any trainer import

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(unsloth_first.importlib.util, "find_spec", lambda name: object())  # "installed"
    monkeypatch.delitem(sys.modules, "unsloth", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert unsloth_first.import_unsloth_first(load_profile("small").engine) is False
    assert "unsloth" not in sys.modules
    assert len(caught) == 1 and "transformers" in str(caught[0].message) and "would not apply" in str(caught[0].message)
    assert unsloth_first.import_unsloth_first(load_profile("toy").engine) is False  # not asked: nothing said


def test_cascadekit_cascade_imports_unsloth_before_anything_it_patches(tmp_path):
    """Issue 59 item 7: ``cascadekit cascade`` (chapter 14's chain) imports Unsloth first, as ``experiment`` does."""
    (tmp_path / "unsloth.py").write_text(
        "import sys\nBEFORE = [m for m in ('trl', 'transformers', 'peft') if m in sys.modules]\n")
    script = textwrap.dedent("""
        import sys, types
        import torch
        torch.cuda.is_available = lambda: True
        from cascadekit import cli

        def stop(name):  # the cascade's arms import trl: stop where they are imported
            print("unsloth imported before the arms:", "unsloth" in sys.modules)
            print("unsloth imported after:", sys.modules["unsloth"].BEFORE if "unsloth" in sys.modules else None)
            raise SystemExit(0)

        arms = types.ModuleType("cascadekit.chapters.cascade_arms")
        arms.__getattr__ = stop
        sys.modules["cascadekit.chapters.cascade_arms"] = arms
        cli.main(["cascade", "--scale", "small"])
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unsloth imported before the arms: True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "unsloth imported after: []" in done.stdout
