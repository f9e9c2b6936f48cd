"""The explorers print their default output, and create no live widget in a headless kernel."""
from __future__ import annotations

import IPython.display

from cascadekit.course import widgets


def test_headless_explorer_prints_and_displays_no_widget(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monkeypatch.setenv(widgets.HEADLESS_ENV, "1")
    widgets.world_explorer(op=3, context="B", style="minimal")
    assert "[op=3 context=B style=minimal" in capsys.readouterr().out
    assert shown == []


def test_live_explorer_offers_every_style(monkeypatch, capsys):
    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    monkeypatch.delenv(widgets.HEADLESS_ENV, raising=False)
    widgets.world_explorer(op=3)
    (panel,) = shown
    style = next(c for c in panel.children if getattr(c, "description", "") == "style")
    assert list(style.options) == ["full", "compact", "minimal", "paper", "paper-official-bug"]
