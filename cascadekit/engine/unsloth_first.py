"""Unsloth imported before trl, transformers and peft, where a profile asks for it on a GPU.

Unsloth patches those three libraries as it is imported; imported after them its patches
miss (Unsloth warns so itself) and :mod:`cascadekit.engine.trainable`'s Unsloth path
trains unpatched. So the one place that may import it is the start of a run, before
anything has imported them: ``cascadekit experiment`` calls :func:`import_unsloth_first`
as soon as its profile is resolved (resolving a profile imports none of them). This
module imports none of them either, only torch (which Unsloth does not patch) to ask for CUDA.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

from cascadekit.profiles import EngineConfig

__all__ = ["PATCHED", "import_unsloth_first"]

#: The libraries Unsloth patches when it is imported.
PATCHED = ("trl", "transformers", "peft")


def import_unsloth_first(engine: EngineConfig) -> bool:
    """Import Unsloth now when ``engine.unsloth`` asks, a GPU is there and it is installed; whether it was imported.

    If one of :data:`PATCHED` is already imported, Unsloth is not imported (its patches
    would miss) and a warning says which, so the run goes on PEFT's path instead of an
    unpatched Unsloth.
    """
    if not engine.unsloth or importlib.util.find_spec("unsloth") is None:
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    early = [name for name in PATCHED if name in sys.modules]
    if early and "unsloth" not in sys.modules:
        warnings.warn(f"engine.unsloth: {', '.join(early)} already imported, so Unsloth's patches would not apply; "
                      f"not importing it (start the run with 'cascadekit experiment', which imports it first)",
                      stacklevel=2)
        return False
    importlib.import_module("unsloth")
    return True
