"""``cascadekit structure``: the layout report, on the kit and on a small planted tree."""
from __future__ import annotations

from pathlib import Path

from cascadekit.cli import main
from cascadekit.course.structure import cache_calls, entry_points, import_cycles, module_imports, structure_report


def _tree(root: Path) -> Path:
    files = {
        "cascadekit/__init__.py": "",
        "cascadekit/stages.py": "from cascadekit.artifacts import get_or_build\n",
        "cascadekit/artifacts.py": "from . import stages\n\ndef get_or_build():\n    pass\n",
        "cascadekit/training/__init__.py": "",
        "cascadekit/training/sft.py": ("from cascadekit.artifacts import get_or_build\nfrom cascadekit.stages import run_stage\n"
                                       "\ndef f():\n    from cascadekit.evaluation import table\n    get_or_build()\n"
                                       "    run_stage()\n\nif __name__ == '__main__':\n    f()\n"),
        "cascadekit/evaluation/__init__.py": "from cascadekit.evaluation import table\n",
        "cascadekit/evaluation/table.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_imports_cycles_entry_points_and_cache_calls_of_a_planted_tree(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    imports = {(i.module, i.target, i.function_level) for i in module_imports(root)}
    assert ("cascadekit.artifacts", "cascadekit.stages", False) in imports  # a relative import, resolved
    assert ("cascadekit.training.sft", "cascadekit.evaluation.table", True) in imports  # a submodule, inside a def
    assert import_cycles(module_imports(root)) == [["cascadekit.artifacts", "cascadekit.stages"]]
    assert entry_points(root) == ["cascadekit.training.sft"]
    assert cache_calls(root) == (["cascadekit/training/sft.py:6"], ["cascadekit/training/sft.py:7"])
    report = structure_report(root)
    assert "upward imports between wings: 1" in report and "training -> evaluation: 1" in report
    assert "cascadekit.artifacts <-> cascadekit.stages" in report


def test_the_kit_has_one_command_and_the_verb_prints_the_report(capsys) -> None:
    """One command, reached as ``cascadekit``, ``python -m cascadekit`` or ``python -m cascadekit.cli`` (the last
    once did nothing and exited 0: a silent success for scripts that call it so)."""
    assert main(["structure"]) == 0
    out = capsys.readouterr().out
    assert "entry points (python -m): 2\n  cascadekit.__main__\n  cascadekit.cli\n" in out
    assert "import cycles (top-level imports): 0" in out
    for wing in ("core", "engine", "training", "evaluation", "chapters", "course", "bench", "cli"):
        assert f"  {wing} " in out
