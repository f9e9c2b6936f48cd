"""The kit's layout in numbers: ``cascadekit structure`` (the course wing's view of its own code).

Read from the source alone (``ast``, nothing imported), for any checkout (``root``):
files and lines per wing, function-level imports of ``cascadekit.*``, import
cycles among top-level imports, imports from a lower wing into a higher one,
``python -m`` entry points, and the caching idiom (who calls
:func:`cascadekit.artifacts.get_or_build` directly instead of through
:func:`cascadekit.stages.run_stage`). ``tests/test_layers.py`` asserts the layer
rules over the same import list (:func:`module_imports`).
"""
from __future__ import annotations

import ast
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cascadekit.codeversion import REPO_DIR

#: The wings from the bottom up: a module may import its own wing and the wings before it.
#: Wings of one rank are siblings and import each other neither (training and evaluation).
WING_RANK = {"core": 0, "engine": 1, "training": 2, "evaluation": 2, "chapters": 3, "course": 4, "bench": 4, "launch": 4,
             "cli": 5}


def wing_of(module: str) -> str:
    """The wing of a ``cascadekit`` module: its subpackage for the named wings, ``cli`` for the command, else ``core``."""
    parts = module.split(".")
    if module == "cascadekit.__main__":
        return "cli"
    return parts[1] if len(parts) > 1 and parts[1] in WING_RANK else "core"


@dataclass(frozen=True)
class Import:
    """One import of a ``cascadekit`` module by a ``cascadekit`` module."""

    module: str  # the importer, e.g. cascadekit.chapters.ch04_edge_of_competence
    target: str  # the imported module (a submodule when ``from PACKAGE import SUBMODULE``)
    path: str  # the importer's file, relative to the root
    line: int
    function_level: bool  # inside a def (run only when called), not at the module's top level
    type_only: bool  # under ``if TYPE_CHECKING:`` (never run)


def modules(root: Path) -> dict[str, Path]:
    """Module name -> its file, for every ``.py`` under ``root/cascadekit``."""
    found = {}
    for path in sorted((root / "cascadekit").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every import node with (inside a function, under ``if TYPE_CHECKING``)."""
    def visit(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[tuple[ast.AST, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function, type_only
            checking = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            yield from visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)),
                             type_only or checking)

    yield from visit(tree, False, False)


def module_imports(root: str | Path | None = None) -> list[Import]:
    """Every import of a ``cascadekit`` module in ``root/cascadekit`` (default: this kit)."""
    root = Path(root or REPO_DIR)
    known = modules(root)
    found = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, in_function, type_only in _walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in dict.fromkeys(targets):
                if target == "cascadekit" or target.startswith("cascadekit."):
                    found.append(Import(module, target, str(path.relative_to(root)), node.lineno, in_function,
                                        type_only))
    return found


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """The cycles among top-level imports: each strongly connected set of modules (more than one), sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in imports:
        if not (i.function_level or i.type_only) and i.target != i.module:
            graph[i.module].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(cycles)


def upward_imports(imports: list[Import], wing: Callable[[str], str] = wing_of) -> list[Import]:
    """Imports from a wing into a higher one, or between sibling wings (training and evaluation)."""
    def rank(module: str) -> int:
        return WING_RANK[wing(module)]

    return [i for i in imports if wing(i.module) != wing(i.target)
            and rank(i.module) <= rank(i.target)]


def entry_points(root: Path) -> list[str]:
    """Modules runnable as ``python -m``: an ``if __name__ == "__main__"`` block, or a package's ``__main__.py``."""
    found = []
    for module, path in modules(root).items():
        tree = ast.parse(path.read_text())
        main_block = any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
                         and "__main__" in ast.unparse(node.test) for node in tree.body)
        if main_block or path.name == "__main__.py":
            found.append(module)
    return found


def cache_calls(root: Path) -> tuple[list[str], list[str]]:
    """``(direct, staged)``: the places (``path:line``) that call ``get_or_build`` outside the cache and
    :mod:`cascadekit.stages`, and those that call ``stages.run_stage``."""
    direct, staged = [], []
    for module, path in modules(root).items():
        tree = ast.parse(path.read_text())
        from_stages = any(isinstance(n, ast.ImportFrom) and n.module == "cascadekit.stages"
                          and any(a.name == "run_stage" for a in n.names) for n in ast.walk(tree))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            where = f"{path.relative_to(root)}:{node.lineno}"
            if name == "get_or_build" and module not in ("cascadekit.artifacts", "cascadekit.stages"):
                direct.append(where)
            elif name == "run_stage" and (from_stages or (isinstance(func, ast.Attribute)
                                                          and ast.unparse(func.value).endswith("stages"))):
                staged.append(where)
    return direct, staged


def structure_report(root: str | Path | None = None, wing: Callable[[str], str] = wing_of) -> str:
    """The report ``cascadekit structure`` prints, for the checkout at ``root`` (default: this kit)."""
    root = Path(root or REPO_DIR)
    files: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for module, path in modules(root).items():
        files[wing(module)] += 1
        lines[wing(module)] += len(path.read_text().splitlines())
    imports = module_imports(root)
    late = [i for i in imports if i.function_level]
    late_by_module = Counter(i.path for i in late)
    cycles = import_cycles(imports)
    upward = upward_imports([i for i in imports if not i.type_only], wing)
    mains = entry_points(root)
    direct, staged = cache_calls(root)
    out = [f"structure of {root}", "", "files and lines per wing:"]
    out += [f"  {name:<11} {files[name]:4} files {lines[name]:7,} lines"
            for name in sorted(files, key=lambda n: (WING_RANK.get(n, 9), n))]
    out += [f"  {'all':<11} {sum(files.values()):4} files {sum(lines.values()):7,} lines", "",
            f"function-level imports of cascadekit.*: {len(late)} in {len(late_by_module)} files"]
    out += [f"  {path}: {count}" for path, count in sorted(late_by_module.items())]
    out += ["", f"import cycles (top-level imports): {len(cycles)}"]
    out += ["  " + " <-> ".join(cycle) for cycle in cycles]
    pairs = Counter(f"{wing(i.module)} -> {wing(i.target)}" for i in upward)
    out += ["", f"upward imports between wings: {len(upward)}"]
    out += [f"  {pair}: {count}" for pair, count in sorted(pairs.items())]
    out += [f"    {i.path}:{i.line} {i.target}" for i in sorted(upward, key=lambda i: (i.path, i.line))]
    out += ["", f"entry points (python -m): {len(mains)}"] + [f"  {m}" for m in mains]
    out += ["", f"caching: {len(staged)} calls through stages.run_stage, {len(direct)} direct get_or_build calls"]
    out += [f"  direct: {where}" for where in direct]
    return "\n".join(out)
