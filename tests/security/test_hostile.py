"""Every hostile program, run as whoever runs the tests (root in CI): each must be contained, each reward 0."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import hostile_programs as hostile

MARKERS = Path(__file__).resolve().parent / ".markers"


@pytest.fixture(autouse=True)
def _marker_folder(monkeypatch: pytest.MonkeyPatch):
    """Markers live outside /tmp (which the sandbox covers), so an escape would show."""
    MARKERS.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("CASCADEKIT_SECURITY_DIR", str(MARKERS))
    yield
    shutil.rmtree(MARKERS, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(hostile.CASES))
def test_hostile_program_is_contained(name: str) -> None:
    if hostile.MODE == "user" and name in hostile.ROOT_ONLY:
        pytest.skip("a guarantee only root can give (separate uid)")
    contained, detail = hostile.CASES[name]()
    assert contained, detail


def test_there_are_enough_tampering_programs() -> None:
    assert len(hostile.TAMPERING) + len(hostile.SWE_TAMPERING) >= 15
    assert len(hostile.TAMPERING) >= 15 and len(hostile.SWE_TAMPERING) >= 8


def test_the_suite_ran_as_root_in_ci() -> None:
    """CI runs as root: the strong box must be what the suite above exercised."""
    if os.environ.get("CI") != "true":
        pytest.skip("only CI promises root")
    from cascadekit.sandbox import isolation

    iso = isolation()
    assert hostile.MODE == "root" and iso.drop_uid and iso.namespaces, iso
