"""The layer rules, read from the source (``ast``, nothing imported): who may import whom in ``cascadekit/``.

Each rule is one test over the whole kit, with no exception listed but the
GPU-only modules' function-level imports (:data:`LATE_ALLOWED`, each with its reason).
"""
from __future__ import annotations

import re
from typing import Callable

import pytest

from cascadekit.course.structure import Import, import_cycles, module_imports

IMPORTS = module_imports()
RUN = [i for i in IMPORTS if not i.type_only]  # what executes (``if TYPE_CHECKING`` imports never do)


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


CHAPTER = re.compile(r"cascadekit\.chapters\.ch\d\d_\w+$")
CORE_SIDE = ("cascadekit.engine", "cascadekit.training", "cascadekit.evaluation")

#: Function-level imports of ``cascadekit.*`` allowed beside cli.py and the course wing, each with its reason.
LATE_ALLOWED = {
    "cascadekit/launch/gpucheck.py": "GPU only: each check imports its stack (TRL, the trainable paths) when it runs",
    "cascadekit/launch/__init__.py": "GPU only: the launch plan of a multi-GPU stage",
}


def _is_core(module: str) -> bool:
    return not _in(module, "cascadekit.cli", "cascadekit.__main__", "cascadekit.bench", "cascadekit.launch", "cascadekit.chapters",
                   "cascadekit.course", *CORE_SIDE)


def rule_chapters_import_no_chapter(i: Import) -> bool:
    """(a) A chapter module imports the core and its wing, never another chapter module."""
    return not (CHAPTER.match(i.module) and CHAPTER.match(i.target) and i.target != i.module)


def rule_stages_at_the_bottom(i: Import) -> bool:
    """(b) stages.py imports only the cache, atomic writes and the distributed helpers."""
    return i.module != "cascadekit.stages" or i.target in ("cascadekit.artifacts", "cascadekit.atomic",
                                                             "cascadekit.distributed")


def rule_training_imports_no_chapter_or_evaluation(i: Import) -> bool:
    """(c) The trainers never import a chapter or the evaluation."""
    return not (_in(i.module, "cascadekit.training") and _in(i.target, "cascadekit.chapters", "cascadekit.evaluation"))


def rule_evaluation_imports_no_training(i: Import) -> bool:
    """(d) The evaluation never imports the trainers."""
    return not (_in(i.module, "cascadekit.evaluation") and _in(i.target, "cascadekit.training"))


def rule_course_is_imported_by_cli_only(i: Import) -> bool:
    """(e) Only the course wing itself and the command line import the course wing."""
    return not _in(i.target, "cascadekit.course") or _in(i.module, "cascadekit.course", "cascadekit.cli")


def rule_core_imports_no_chapter(i: Import) -> bool:
    """(e) Nothing in the core, the engine, the trainers or the evaluation imports a chapter."""
    return not ((_is_core(i.module) or _in(i.module, *CORE_SIDE)) and _in(i.target, "cascadekit.chapters"))


def rule_no_late_imports(i: Import) -> bool:
    """(f) No function-level import of cascadekit.* outside cli.py, the course wing and the GPU-only modules."""
    return (not i.function_level or _in(i.module, "cascadekit.cli", "cascadekit.course")
            or i.path in LATE_ALLOWED)


RULES: dict[str, Callable[[Import], bool]] = {
    name.removeprefix("rule_"): rule for name, rule in globals().items() if name.startswith("rule_")}

def _broken(rule: str) -> list[str]:
    return [f"{i.path}:{i.line} imports {i.target}" for i in RUN if not RULES[rule](i)]


def test_the_import_list_sees_the_kit() -> None:
    assert {"cascadekit.cli", "cascadekit.stages", "cascadekit.chapters.ch04_edge_of_competence"} <= {
        i.module for i in IMPORTS}
    assert any(i.function_level for i in IMPORTS) and any(not i.function_level for i in IMPORTS)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layer_rule(rule: str) -> None:
    assert _broken(rule) == [], RULES[rule].__doc__


def test_no_import_cycle() -> None:
    """(g) The top-level imports between cascadekit modules form no cycle."""
    assert import_cycles(RUN) == []
