"""scripts/reference.py: the reference curves and random floors say what env setting they were
measured on, the committed floors are measured as training plays, and a run's setting and seed
come from its RUN/config.json."""

from __future__ import annotations

import json
from pathlib import Path

from common.rundir import RunDir
from scripts import reference
from scripts.reference import PERTURBED, UNPERTURBED, Floor


def test_a_floor_is_merged_into_its_file_level_by_level_and_setting_by_setting(tmp_path):
    path = tmp_path / "floors.json"
    assert reference.floor("1-1", PERTURBED, path) is None  # no file: nothing measured
    one = Floor("1-1", PERTURBED, 200, 612.5, 0.1938, 0.0, "python -m a")
    reference.save_floor(path, one)
    reference.save_floor(path, Floor("1-2", PERTURBED, 50, 400.0, 0.1265, 0.0, "python -m b"))
    reference.save_floor(path, Floor("1-1", UNPERTURBED, 200, 637.0, 0.2015, 0.0, "python -m c"))
    assert reference.floor("1-1", PERTURBED, path) == one
    assert reference.floor("1-1", UNPERTURBED, path).command == "python -m c"
    assert reference.floor("1-3", PERTURBED, path) is None
    assert [f.level for f in reference.floors(["1-2", "1-1"], [PERTURBED], path)] == ["1-2", "1-1"]
    assert one.label == "random policy, perturbed"
    again = Floor("1-1", PERTURBED, 20, 600.0, 0.19, 0.0, "python -m d")
    reference.save_floor(path, again)  # measured again: replaced, the other setting kept
    assert reference.floor("1-1", PERTURBED, path) == again
    assert reference.floor("1-1", UNPERTURBED, path).episodes == 200


def test_the_sample_factory_curves_say_they_were_measured_unperturbed():
    for curve in (reference.SAMPLE_FACTORY_1_1, reference.SAMPLE_FACTORY_1_1_BY_FRAMES):
        assert curve.setting == UNPERTURBED and curve.name.endswith(", unperturbed")


def write_config(run: Path, **fields) -> Path:
    run.mkdir(parents=True)
    RunDir(run).config.write_text(json.dumps({"level": "1-1"} | fields))
    return run


def test_a_runs_setting_and_seed_come_from_its_config(tmp_path):
    perturbed = write_config(tmp_path / "p", sticky_actions=0.25, noop_max=30, seed=3)
    plain = write_config(tmp_path / "u", sticky_actions=0.0, noop_max=0, seed=0)
    before = write_config(tmp_path / "old", seed=1)  # from before the perturbation's flags
    other = write_config(tmp_path / "o", sticky_actions=0.1, noop_max=30, seed=True)
    assert reference.setting_of_run(perturbed) == PERTURBED
    assert reference.setting_of_run(plain) == reference.setting_of_run(before) == UNPERTURBED
    assert reference.setting_of_run(other) is None  # neither: no floor was measured there
    assert reference.setting_of_run(tmp_path / "none") is None
    assert [reference.seed_of_run(r) for r in (perturbed, plain, before)] == [3, 0, 1]
    assert reference.seed_of_run(other) is None and reference.seed_of_run(tmp_path) is None


def test_floors_are_drawn_in_the_runs_settings_or_both_where_one_is_unknown():
    assert reference.settings_drawn([PERTURBED, PERTURBED]) == (PERTURBED,)
    assert reference.settings_drawn([UNPERTURBED, PERTURBED]) == (UNPERTURBED, PERTURBED)
    assert reference.settings_drawn([PERTURBED, None]) == (UNPERTURBED, PERTURBED)
    refs = reference.references({"1-1"}, [PERTURBED])
    assert refs.sample_factory and refs.settings == (PERTURBED,)
    assert not reference.references({"1-2"}, [PERTURBED]).sample_factory
    several = reference.references({"1-1", "1-2"}, [PERTURBED])
    assert several.level is None and several.floors() == [] and not several.sample_factory
    assert reference.describe(PERTURBED) == "perturbed (sticky actions 0.25, no-op starts 0..30)"
