"""Chapter specs: one resolve function, the chapter's settings between the profile and the caller's."""
from __future__ import annotations

import pytest

from cascadekit.chapters import chapter_module, resolve, spec, specs
from cascadekit.profiles import ProfileError, load_profile


def test_every_chapter_with_an_experiment_has_a_module_that_follows_the_protocol():
    for chapter in specs().values():
        module = chapter_module(chapter.id)
        if chapter.experiment:
            for slot in ("run", "claims", "figures", "notes"):
                assert callable(getattr(module, slot, None)), f"{module.__name__} lacks {slot}"
            assert isinstance(module.RESULTS_TITLE, str)


def test_settings_come_between_the_profile_and_the_callers_overrides():
    toy = resolve("04", "toy", {"rl.lr": 3e-4})
    assert toy.profile.rl.samples == toy.settings["rl.samples"] == 384
    assert toy.profile.rl.lr == 3e-4 and toy.overrides == {"rl.lr": 3e-4}
    assert resolve("04", "paper").profile == load_profile("paper")
    assert resolve("07", "toy").profile == resolve("04", "toy").profile  # chapters 04 and 07 share their runs


def test_band_source_is_data_and_never_touches_the_profile():
    toy = resolve("06", "toy")
    assert toy.range_source == "measured" and resolve("06", "paper").range_source == "profile"
    assert toy.profile.world == load_profile("toy").world  # measured bands never enter the profile


def test_a_chapter_keeps_the_base_it_shares():
    """RL and evaluation settings do not change the pretraining key: every Part I chapter shares one base."""
    from cascadekit.training.pretrain import pretrain_key

    keys = {pretrain_key(resolve(c, "toy").profile) for c in ("03", "04", "06", "07")}
    assert keys == {pretrain_key(load_profile("toy"))}


@pytest.mark.parametrize("name", ["4", "04", "04_edge_of_competence"])
def test_chapter_names(name):
    assert spec(name).folder == "04_edge_of_competence"


def test_unknown_chapter_or_bad_setting_is_one_clear_error():
    with pytest.raises(ProfileError, match="unknown chapter '99'"):
        resolve("99", "toy")
    with pytest.raises(ProfileError, match="rl.lr"):
        resolve("04", "toy", {"rl.lr": float("nan")})


def test_a_chapters_own_settings_go_to_its_options_and_never_to_the_profile(monkeypatch):
    from dataclasses import dataclass
    from types import SimpleNamespace

    import cascadekit.chapters as chapters

    @dataclass(frozen=True)
    class Options:
        steps: int = 30
        teachers: tuple[str, ...] = ("last",)

    monkeypatch.setattr(chapters, "chapter_module", lambda chapter: SimpleNamespace(Options=Options))
    config = resolve("04", "toy", {"chapter.steps": 40, "chapter.teachers": ["a", "b"], "rl.lr": 3e-4})
    assert config.options == Options(40, ("a", "b")) and config.profile.rl.lr == 3e-4
    assert config.record()["options"] == {"steps": 40, "teachers": ("a", "b")}
    assert resolve("04", "toy").options == Options()
    with pytest.raises(ProfileError, match="chapter.steps=1.5: expected an integer"):
        resolve("04", "toy", {"chapter.steps": 1.5})
    with pytest.raises(ProfileError, match="unknown chapter 04 setting chapter.beta; known: chapter.steps"):
        resolve("04", "toy", {"chapter.beta": 1})


def test_a_chapter_without_options_rejects_a_chapter_setting():
    with pytest.raises(ProfileError, match="chapter 04 has no settings of its own; chapter.steps is unknown"):
        resolve("04", "toy", {"chapter.steps": 40})
    assert resolve("04", "toy").options is None


def test_a_chapter_setting_parses_from_the_command_line():
    from cascadekit.profiles import parse_overrides

    assert parse_overrides(["chapter.steps=40", "chapter.name=mopd"]) == {"chapter.steps": 40, "chapter.name": "mopd"}
