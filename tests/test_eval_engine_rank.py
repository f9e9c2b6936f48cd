"""Issue 59 item 7: under a multi-process launch only the main process opens a vLLM evaluation engine; the other
ranks get its completions. No GPU, no vLLM, no process group here: ranks and the broadcast are faked."""
from __future__ import annotations

import sys
import types

from cascadekit import distributed
from cascadekit.engine import generation, runtime
from cascadekit.profiles import load_profile


def fake_vllm(monkeypatch) -> list[dict]:
    engines: list[dict] = []

    class LLM:
        def __init__(self, model: str, **kwargs):
            engines.append(kwargs)

        def generate(self, prompts, params):
            out = types.SimpleNamespace(text="4", token_ids=[5, 0])
            return [types.SimpleNamespace(outputs=[out]) for _ in prompts]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=lambda **kwargs: kwargs))
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    monkeypatch.setattr(generation, "stop_token_ids", lambda tokenizer: [0])
    return engines


def test_only_the_main_process_opens_an_evaluation_engine(monkeypatch, tmp_path):
    engines = fake_vllm(monkeypatch)
    sent: list = []
    monkeypatch.setattr(distributed, "broadcast", lambda value: sent.append(value) or value)
    with generation.greedy_generator(tmp_path, None, load_profile("small")) as generate:  # rank 0
        assert generate(["a", "b"], 8, 2) == [("4", 1), ("4", 1)]
    assert len(engines) == 1 and sent == [[("4", 1), ("4", 1)]]
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    monkeypatch.setattr(distributed, "broadcast", lambda value: [("from rank 0", 3)] if value is None else None)
    with generation.greedy_generator(tmp_path, None, load_profile("small")) as generate:  # any other rank
        assert generate(["a"], 8, 2) == [("from rank 0", 3)]
    assert len(engines) == 1  # no second engine
