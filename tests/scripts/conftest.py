"""Fixtures of the script tests."""

from __future__ import annotations

import pytest

from scripts import reference


@pytest.fixture
def floors(tmp_path, monkeypatch):
    """A floors file of 1-1 and 1-2 in both settings, for the curves to read."""
    path = tmp_path / "floors.json"
    for level, x in (("1-1", 600.0), ("1-2", 400.0)):
        for setting, dx in ((reference.UNPERTURBED, 37.0), (reference.PERTURBED, 0.0)):
            progress = round((x + dx) / 3161, 4)
            f = reference.Floor(level, setting, 200, x + dx, progress, 0.0, f"measure {level}")
            reference.save_floor(path, f)
    monkeypatch.setattr(reference, "FLOORS_FILE", path)
    return path
