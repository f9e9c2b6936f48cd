from __future__ import annotations

from pathlib import Path

import pytest

from cascadekit.engine import runtime
from packaging.requirements import Requirement

from cascadekit.engine.envinfo import (GPU_STACK, KNOWN_GOOD, STACK, choose_device, describe_environment,
                                       installed_requirements, known_good_sets, known_problems, package_version,
                                       window_problems)


def test_describes_this_machine_even_before_the_cache_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASCADEKIT_CACHE", str(tmp_path / "not" / "yet"))
    env = describe_environment()
    assert env.device in {"cpu", "cuda"} and env.versions["torch"]
    assert "device" in env.long() and "torch=" in env.short()


#: Windows as the libraries state them (the shape of their Requires-Dist), for fake version maps.
FAKE_WINDOWS = {
    "trl": ['accelerate>=1.10.1', 'vllm<=0.31.0,>=0.22.0; extra == "vllm"', 'deepspeed>=0.18.6; extra == "dev"'],
    "vllm": ["transformers<5.18.0,>=5.10.4", "torch==2.13.0"],
    "unsloth": ["trl!=0.19.0,<=1.15.0,>=0.18.2", "transformers<=5.17.0,>=4.52.4", 'datasets<5.0.0,>=3.4.1'],
}


def test_warns_on_known_bad_combinations() -> None:
    warnings = known_problems({"vllm": "0.33.0", "transformers": "5.22.0", "trl": "1.16.0", "unsloth": "2026.10.9"},
                              "cpu", FAKE_WINDOWS)
    assert any("no GPU" in w for w in warnings)
    assert "trl 1.16.0 supports vllm<=0.31.0,>=0.22.0, but vllm 0.33.0 is installed" in warnings
    assert "vllm 0.33.0 supports transformers<5.18.0,>=5.10.4, but transformers 5.22.0 is installed" in warnings
    assert "unsloth 2026.10.9 supports trl!=0.19.0,<=1.15.0,>=0.18.2, but trl 1.16.0 is installed" in warnings
    assert warnings[-1].startswith("known-good GPU sets: small: pip install -c cascadekit/constraints/small.txt")
    assert not [w for w in known_problems({"transformers": "5.20.2", "trl": "1.16.0"}, "cpu", FAKE_WINDOWS)
                if "vllm" in w or "unsloth" in w or "known-good" in w]


def test_a_window_binds_only_where_its_extra_is_the_installed_package() -> None:
    """TRL's vllm window binds beside vllm; its dev extra's deepspeed floor does not bind an older DeepSpeed."""
    assert window_problems({"trl": "1.16.0", "vllm": "0.31.0+cu130", "torch": "2.13.0+cu130",
                            "transformers": "5.17.0", "accelerate": "1.15.0", "deepspeed": "0.17.0"},
                           FAKE_WINDOWS) == []
    assert window_problems({"trl": "1.16.0", "accelerate": "1.9.0"}, FAKE_WINDOWS) == [
        "trl 1.16.0 supports accelerate>=1.10.1, but accelerate 1.9.0 is installed"]


@pytest.mark.parametrize("profile", sorted(KNOWN_GOOD))
def test_each_known_good_set_is_inside_the_kits_ranges_and_the_installed_libraries_windows(profile) -> None:
    """Issue 59.2: every pin satisfies pyproject's ranges for its extras, and the windows of the libraries
    installed here (TRL 1.16's own metadata: the full set's vLLM is inside its vllm extra)."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = KNOWN_GOOD[profile][1].split(",")
    ranges = [Requirement(line) for line in project["dependencies"]]
    ranges += [Requirement(line) for extra in extras for line in project["optional-dependencies"][extra]]
    pins = known_good_sets()[profile]
    for requirement in ranges:
        pinned = pins.get(requirement.name) or pins.get(requirement.name.replace("-", "_"))
        if pinned is not None:
            assert requirement.specifier.contains(pinned), (profile, requirement, pinned)
    assert {"torch", "transformers", "trl", "vllm", "bitsandbytes"} <= set(pins)
    installed = {name: package_version(name) for name in ("trl", "vllm", "transformers", "unsloth")}
    same = {name: version for name, version in installed.items() if version and pins.get(name) == version}
    assert window_problems(pins, installed_requirements(tuple(same))) == []


def test_the_cpu_set_installed_here_is_inside_every_window() -> None:
    versions = {name: package_version(name) for name in STACK + GPU_STACK}
    assert window_problems(versions, installed_requirements(STACK + GPU_STACK)) == []


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
