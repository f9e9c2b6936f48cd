"""Scale profiles: smoke, toy, paper and full.

A profile is plain data (``profiles.yaml`` beside this file) loaded into frozen
dataclasses. Notebooks print the resolved profile at the top and accept
overrides as papermill parameters; the CLI accepts them as ``key=value``
pairs with dotted keys (``model.hidden=64``). An unknown profile, section or
field is an error that names the bad key, never a silent default.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, Mapping

import yaml


@dataclass(frozen=True)
class WorldConfig:
    """Which problems exist at this scale, and how they are written."""

    rendering: str
    ops_in_distribution: tuple[int, int]
    ops_edge: tuple[int, int]
    ops_hard: tuple[int, int]
    contexts: tuple[str, ...]

    def ops(self, range_name: str) -> range:
        """The inclusive op range named ``in_distribution``, ``edge`` or ``hard``."""
        lo, hi = getattr(self, f"ops_{range_name}")
        return range(lo, hi + 1)


@dataclass(frozen=True)
class TokenizerConfig:
    vocab_size: int
    corpus_problems: int


@dataclass(frozen=True)
class ModelConfig:
    """A Qwen-style decoder's shape (``pretrained`` names released weights at full scale)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    rope_theta: float
    max_positions: int
    tie_embeddings: bool
    pretrained: str = ""
    architecture: str = "qwen3"


@dataclass(frozen=True)
class PretrainConfig:
    tokens: int
    seq_len: int
    batch_size: int
    lr: float
    warmup_ratio: float
    min_lr_ratio: float
    weight_decay: float
    max_grad_norm: float
    save_steps: int
    problems: int = 0  # distinct problems to render; 0 = enough to fill the token budget once


@dataclass(frozen=True)
class EvaluationConfig:
    problems_per_op: int
    samples: int
    temperature: float
    top_p: float
    max_new_tokens: int
    batch_size: int
    backend: str


@dataclass(frozen=True)
class RLConfig:
    samples: int
    group_size: int
    temperature: float
    lr: float
    prompts_per_step: int
    max_completion_length: int
    kl_beta: float
    use_lora: bool


@dataclass(frozen=True)
class SFTConfig:
    """The unified model's base pretraining on raw domain text and its two SFT stages (chapter 08).

    Stage 1 trains on shorter sequences (general, instructions, math, code), stage 2
    on longer ones and adds tool calling and SWE, as the paper's 16K then 32K stages.
    ``*_tasks`` count prompts per domain; each prompt gives a /think and a /no_think record.
    """

    base_tokens: int
    stage1_seq_len: int
    stage2_seq_len: int
    stage1_tasks: int
    stage2_tasks: int
    epochs: float
    lr: float
    batch_size: int
    eval_tasks: int
    max_new_tokens: int


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    device: str
    dtype: str
    world: WorldConfig
    tokenizer: TokenizerConfig
    model: ModelConfig
    pretrain: PretrainConfig
    evaluation: EvaluationConfig
    rl: RLConfig
    sft: SFTConfig
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def hash(self, *sections: str) -> str:
        """A short stable hash of the named sections (all when none), for cache keys.

        With the ``world`` section it also hashes the rendered text format
        (:func:`cascadekit.world.corpus.rendering_fingerprint`), so a renderer change
        invalidates cached tokenizers and models as a setting change would.
        """
        from cascadekit.world.corpus import rendering_fingerprint

        data = self.to_dict()
        picked = {k: data[k] for k in sections} if sections else data
        if "world" in picked:
            picked["world_text"] = rendering_fingerprint(self.world.rendering)
        blob = json.dumps(picked, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def summary(self) -> str:
        """A few lines for the top of a notebook."""
        lines = [f"profile {self.name!r}: {self.description}", f"  device={self.device} dtype={self.dtype} seed={self.seed}"]
        for section in _SECTIONS:
            values = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(getattr(self, section)).items())
            lines.append(f"  {section}: {values}")
        return "\n".join(lines)


class ProfileError(ValueError):
    """A profile name, section or field that does not exist, or a value of the wrong type."""


_SECTIONS = {
    "world": WorldConfig,
    "tokenizer": TokenizerConfig,
    "model": ModelConfig,
    "pretrain": PretrainConfig,
    "evaluation": EvaluationConfig,
    "rl": RLConfig,
    "sft": SFTConfig,
}
_TOP_LEVEL = {"description", "device", "dtype", "seed"}


def _raw_profiles() -> dict[str, dict[str, Any]]:
    text = resources.files("cascadekit").joinpath("profiles.yaml").read_text()
    return yaml.safe_load(text)


def profile_names() -> list[str]:
    return list(_raw_profiles())


def _coerce(value: Any, like: Any, key: str) -> Any:
    """Convert an override (often a string from the CLI) to the type of the default."""
    try:
        if isinstance(like, bool):
            if isinstance(value, str):
                if value.lower() not in {"true", "false", "1", "0"}:
                    raise ValueError(value)
                return value.lower() in {"true", "1"}
            return bool(value)
        if isinstance(like, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(float(value)) if isinstance(value, str) else int(value)
        if isinstance(like, float):
            return float(value)
        if isinstance(like, tuple):
            items = json.loads(value) if isinstance(value, str) else value
            return tuple(items)
        return str(value)
    except (TypeError, ValueError) as err:
        raise ProfileError(f"{key}={value!r}: expected a value like {like!r}") from err


def _build_section(cls: type, values: Mapping[str, Any], where: str) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ProfileError(f"unknown field(s) {sorted(unknown)} in {where}; known: {sorted(names)}")
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ProfileError(f"{where}: {err}") from err


def load_profile(name: str, overrides: Mapping[str, Any] | None = None) -> Profile:
    """Load a shipped profile and apply overrides given as dotted keys.

    >>> load_profile("smoke", {"model.hidden": 64}).model.hidden
    64
    """
    raw = _raw_profiles()
    if name not in raw:
        raise ProfileError(f"unknown scale profile {name!r}; choose one of {sorted(raw)}")
    base = {"name": name, "seed": 0, **raw[name]}
    profile = Profile(
        name=name,
        description=base["description"],
        device=base["device"],
        dtype=base["dtype"],
        seed=int(base["seed"]),
        **{s: _build_section(cls, base[s], f"profile {name}.{s}") for s, cls in _SECTIONS.items()},
    )
    return apply_overrides(profile, overrides or {})


def apply_overrides(profile: Profile, overrides: Mapping[str, Any]) -> Profile:
    """Return a copy of ``profile`` with ``{"section.field": value}`` overrides applied."""
    for key, value in overrides.items():
        section, _, fname = key.partition(".")
        if not fname:
            if section not in _TOP_LEVEL:
                raise ProfileError(f"unknown profile field {key!r}; top-level fields: {sorted(_TOP_LEVEL)}")
            profile = dataclasses.replace(profile, **{section: _coerce(value, getattr(profile, section), key)})
            continue
        if section not in _SECTIONS:
            raise ProfileError(f"unknown profile section {section!r} in {key!r}; sections: {sorted(_SECTIONS)}")
        current = getattr(profile, section)
        if fname not in {f.name for f in fields(current)}:
            raise ProfileError(f"unknown field {fname!r} in section {section!r}; known: {[f.name for f in fields(current)]}")
        new_value = _coerce(value, getattr(current, fname), key)
        profile = dataclasses.replace(profile, **{section: dataclasses.replace(current, **{fname: new_value})})
    return profile


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """Turn CLI ``key=value`` strings into an overrides mapping."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ProfileError(f"override {pair!r} is not of the form section.field=value")
        out[key.strip()] = value.strip()
    return out


def add_scale_arguments(parser: argparse.ArgumentParser, default: str = "toy") -> None:
    """The arguments every command line that runs at a scale shares: ``--scale``, ``--threads``, overrides."""
    parser.add_argument("--scale", default=default, help="smoke, toy, paper or full")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (0: torch's default; 1 is much faster on a CPU shared with other jobs)")
    parser.add_argument("overrides", nargs="*", help="profile overrides, e.g. pretrain.tokens=2000000")


def set_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)``, unless ``threads`` is 0 (torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def profile_from_arguments(args: argparse.Namespace) -> Profile:
    """Apply ``--threads`` and return the ``--scale`` profile with the overrides (from :func:`add_scale_arguments`)."""
    set_threads(args.threads)
    return load_profile(args.scale, parse_overrides(args.overrides))
