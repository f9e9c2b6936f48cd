from __future__ import annotations

from pathlib import Path

import pytest

from cascadekit.engine import runtime
from cascadekit.engine.envinfo import choose_device, describe_environment, known_problems


def test_describes_this_machine_even_before_the_cache_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "not" / "yet"))
    env = describe_environment()
    assert env.device in {"cpu", "cuda"} and env.versions["torch"]
    assert "device" in env.long() and "torch=" in env.short()


def test_warns_on_known_bad_combinations() -> None:
    warnings = known_problems({"vllm": "0.33.0", "transformers": "5.22.0", "trl": "1.16.0", "unsloth": "2026.10.9"}, "cpu")
    assert any("no GPU" in w for w in warnings)
    assert any("transformers<5.21" in w for w in warnings)
    assert any("unsloth" in w for w in warnings)
    assert not [w for w in known_problems({"transformers": "5.20.2", "trl": "1.16.0"}, "cpu") if "vllm" in w or "unsloth" in w]


def test_env_names_the_sandbox_and_what_it_cannot_guarantee(monkeypatch: pytest.MonkeyPatch) -> None:
    from cascadekit.engine import envinfo
    from cascadekit import sandbox
    from cascadekit.engine.envinfo import sandbox_lines

    weak = sandbox.Isolation(drop_uid=False, namespaces=False)
    monkeypatch.setattr(envinfo, "isolation", lambda: weak)
    lines = sandbox_lines()
    assert lines[0].startswith("sandbox       rlimits")
    assert any("no separate uid" in line for line in lines) and any("no network" in line for line in lines)
    strong = sandbox.Isolation(drop_uid=True, namespaces=True, cgroup="v1")
    monkeypatch.setattr(envinfo, "isolation", lambda: strong)
    assert sandbox_lines()[1:] == ["  missing     nothing"] and "own uid" in sandbox_lines()[0]
    few_uids = sandbox.Isolation(drop_uid=True, namespaces=True, shared_uid=True)
    monkeypatch.setattr(envinfo, "isolation", lambda: few_uids)
    lines = sandbox_lines()
    assert "shared uid, runs take turns" in lines[0] and "own uid" not in lines[0]
    assert any("every run uses uid 65534, so runs take turns" in line for line in lines)


def test_device_choice_is_the_runtime_automatic_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "cuda_device", lambda: None)
    assert choose_device() == ("cpu", "float32", "no CUDA device; fp32 is the safe and, for small models, the fast choice on CPU")
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Fake GPU", True))
    assert choose_device() == ("cuda", "bfloat16", "Fake GPU supports bf16")
    env = describe_environment()
    assert (env.device, env.dtype, env.why) == ("cuda", "bfloat16", "Fake GPU supports bf16")
    assert "device        cuda (dtype bfloat16): Fake GPU supports bf16" in env.long()
    monkeypatch.setattr(runtime, "cuda_device", lambda: ("Old GPU", False))
    assert choose_device() == ("cuda", "float16", "Old GPU lacks bf16")
