"""Every writer in the package goes through :mod:`cascadekit.atomic`, or is on a commented allow-list.

The package's source is parsed (AST, not text) and every call that writes a file
is found: ``open`` with a writing mode (or an unknown one), ``os.open``,
``Path.write_text``/``write_bytes``, ``json``/``pickle``/``marshal`` ``.dump``,
``torch.save``, ``numpy.save``, ``shutil`` copies and moves, ``save_pretrained``,
``save_model``, ``savefig``, ``nbformat.write``, ``papermill.execute_notebook``...
Each one outside ``cascadekit/atomic.py`` must be on :data:`ALLOWED`, keyed by
file, enclosing function and call, with the reason it cannot leave half a file
under a real name (most write into a temporary folder that is renamed as a
whole). A new direct write fails the test until it goes through the atomic
writer or its reason is added here.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[2] / "cascadekit"

#: Called as ``anything.NAME(...)`` or ``NAME(...)``: these names always write a file.
_WRITING_METHODS = {"write_text", "write_bytes", "savefig", "save_pretrained", "save_model", "save_file",
                    "to_csv", "to_parquet", "save_to_disk", "execute_notebook", "symlink_to", "hardlink_to"}
#: Called as ``MODULE.NAME(...)``: these write a file when ``MODULE`` is one of these.
_WRITING_FUNCTIONS = {"json": {"dump"}, "pickle": {"dump"}, "marshal": {"dump"}, "yaml": {"dump", "safe_dump"},
                      "torch": {"save"}, "np": {"save", "savez", "savez_compressed", "savetxt"},
                      "numpy": {"save", "savez", "savez_compressed", "savetxt"}, "nbformat": {"write"},
                      "shutil": {"copy", "copy2", "copyfile", "copytree", "move"},
                      "os": {"open", "link", "symlink"}}
#: ``MODULE.open(path, mode)`` takes its mode second; ``path.open(mode)`` first.
_OPEN_MODULES = {"builtins", "io", "codecs", "gzip", "bz2", "lzma", "tarfile", "zipfile"}

#: (file, enclosing function, call) -> why the write cannot lose a finished file.
ALLOWED = {
    ("artifacts.py", "_copy_files", "shutil.copyfile"):
        "copies into a cache entry's or a ship's temporary folder, renamed into place as a whole",
    ("training/chat_base.py", "_tokenizer_stage.build", "tokenizer.save_pretrained"):
        "a cache builder: writes into get_or_build's temporary folder",
    ("course/book.py", "_replace_folder", "shutil.copytree"):
        "copies the built book into a fresh temporary folder beside --out, swapped in by atomic.replace_folder",
    ("course/book.py", "stage", "shutil.copy"): "stages the book's sources in a TemporaryDirectory for Sphinx",
    ("course/book.py", "stage_chapter", "nbformat.write"): "stages the book's sources in a TemporaryDirectory for Sphinx",
    ("chapters/ch05_context_transfer.py", "pretrain_variant", "model.save_pretrained"):
        "the builder of cached_variant: writes into get_or_build's temporary folder",
    ("chapters/ch05_context_transfer.py", "pretrain_variant", "tokenizer.save_pretrained"):
        "the builder of cached_variant: writes into get_or_build's temporary folder",
    ("results.py", "save_figure", "figure.savefig"): "draws into an atomic_open handle",
    ("course/runner.py", "execute_chapter", "papermill.execute_notebook"):
        "papermill writes .NAME.partial.ipynb as it goes; it is renamed over the chapter's notebook at the end",
    ("engine/runtime.py", "_merged_on_full_weights", "model.save_pretrained"):
        "saves the adapter into a TemporaryDirectory that is read back and deleted",
    ("engine/runtime.py", "save_checkpoint", "model.save_pretrained"):
        "writes a temporary folder beside the checkpoint, renamed into place as a whole",
    ("engine/runtime.py", "save_checkpoint", "tokenizer.save_pretrained"):
        "writes a temporary folder beside the checkpoint, renamed into place as a whole",
    ("engine/runtime.py", "save_checkpoint", "target.write_bytes"):
        "writes a temporary folder beside the checkpoint, renamed into place as a whole",
    ("engine/runtime.py", "save_checkpoint", "target.write_text"):
        "writes a temporary folder beside the checkpoint, renamed into place as a whole",
    ("sandbox.py", "_RunCgroup._write", "os.open"):
        "writes a number into a cgroup control file (a kernel interface, never created: no O_CREAT)",
    ("sandbox.py", "_stdin_file", "os.open"):
        "reopens the run's sealed in-memory stdin read-only (O_RDONLY): no file on disk is written",
    ("exercises/child.py", "_unshare", "open"):
        "writes the checker's user namespace maps under /proc/self (a kernel interface, not a file on disk)",
    ("training/pretrain.py", "cached_tokenizer.build", "build_tokenizer(profile).save_pretrained"):
        "a cache builder: writes into get_or_build's temporary folder",
    ("training/reward_model.py", "policy_samples.build", "(folder / SAMPLES_FILE).write_text"):
        "a cache builder: writes into get_or_build's temporary folder",
    ("course/replicates.py", "_run_child", "log.open"):
        "a training seed's log, streamed while its child runs: a log, read as it grows, never a result",
}



def _mode(call: ast.Call, position: int) -> object:
    """The ``mode`` argument of an ``open`` call: a constant, None when absent, ``...`` when not a constant."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value.value if isinstance(keyword.value, ast.Constant) else ...
    if len(call.args) > position:
        argument = call.args[position]
        return argument.value if isinstance(argument, ast.Constant) else ...
    return None


def _writes(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        name, module = func.id, "builtins"
    elif isinstance(func, ast.Attribute):
        name = func.attr
        module = func.value.id if isinstance(func.value, ast.Name) else ""
    else:
        return False
    if name in _WRITING_METHODS or name in _WRITING_FUNCTIONS.get(module, ()):
        return True
    if name != "open":
        return False
    mode = _mode(call, 1 if module in _OPEN_MODULES else 0)
    return mode is ... or (isinstance(mode, str) and any(flag in mode for flag in "wax+"))


def writes_in(source: str) -> list[tuple[str, str]]:
    """(enclosing function, call) for every call in ``source`` that writes a file."""
    found: list[tuple[str, str]] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.scope: list[str] = []

        def _scoped(self, node: ast.AST) -> None:
            self.scope.append(node.name)  # type: ignore[attr-defined]
            self.generic_visit(node)
            self.scope.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

        def visit_Call(self, node: ast.Call) -> None:
            if _writes(node):
                found.append((".".join(self.scope) or "<module>", ast.unparse(node.func)))
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


@functools.cache
def package_writes() -> list[tuple[str, str, str]]:
    """(file, function, call) for every write in the package outside cascadekit/atomic.py."""
    return [(path.relative_to(PACKAGE).as_posix(), *write)
            for path in sorted(PACKAGE.rglob("*.py")) if path.name != "atomic.py" or path.parent != PACKAGE
            for write in writes_in(path.read_text())]


def test_every_direct_write_in_the_package_is_allowed_for_a_reason() -> None:
    unlisted = [write for write in package_writes() if write not in ALLOWED]
    assert not unlisted, f"writes that bypass cascadekit.atomic (use it, or add the reason to ALLOWED): {unlisted}"


def test_the_allow_list_names_only_writes_that_exist() -> None:
    writes = set(package_writes())
    assert not [entry for entry in ALLOWED if entry not in writes], "a stale entry: remove it"


def test_the_scan_finds_every_kind_of_write() -> None:
    source = '''
import json, os, shutil, gzip, torch, numpy as np
def f(path, mode):
    open(path, "w"); open(path, "ab"); open(path, mode=mode); open(path, "x"); open(path, "r+")
    path.open("w"); gzip.open(path, "wt"); os.open(path, os.O_WRONLY)
    path.write_text("x"); path.write_bytes(b"x"); json.dump({}, fh); torch.save({}, path); np.save(path, a)
    shutil.copy(a, b); shutil.copyfile(a, b); shutil.copytree(a, b); shutil.move(a, b)
    model.save_pretrained(path); trainer.save_model(path); figure.savefig(path)
def g(path):
    open(path); open(path, "rb"); path.open(); gzip.open(path); json.dumps({}); json.load(fh); d.copy()
'''
    found = writes_in(source)
    assert {scope for scope, _ in found} == {"f"} and len(found) == 20, found
