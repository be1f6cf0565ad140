"""common.config: defaults < the TOML file's [prog] table < flags; every problem is reported in
one error; bounds and retired fields are checked wherever a value comes from; --help documents
every field; the resolved config round-trips."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import pytest

from common.config import (
    ConfigError,
    Ge,
    Gt,
    Le,
    Positive,
    PositiveInt,
    from_dict,
    load,
    option,
    to_dict,
    write_resolved,
)


@dataclass(frozen=True)
class Example:
    batch_size: int = field(default=32, metadata={"help": "sequences per learner step"})
    learning_rate: Annotated[float, Gt(0), Le(1)] = option(3e-4, "Adam step size")
    run_name: str = field(default="dev", metadata={"help": "name of the run directory"})
    cuda: bool = field(default=True, metadata={"help": "train on the GPU"})
    precision: Literal["fp32", "bf16"] = field(
        default="fp32", metadata={"help": "floating-point format of the forward pass"}
    )
    max_steps: PositiveInt | None = option(None, "stop after this many learner steps; none: never")
    levels: tuple[str, ...] = field(default=("1-1",), metadata={"help": "levels to train on"})

    RETIRED: ClassVar[dict[str, str]] = {"arch": "set it elsewhere", "fused": "gone for good"}

    def problems(self) -> list[str]:
        out = []
        if self.batch_size < 1:
            out.append(f"batch_size is {self.batch_size}; set it to at least 1")
        if self.precision == "bf16" and not self.cuda:
            out.append("precision 'bf16' needs cuda; use fp32 on the CPU")
        return out


def run(argv: list[str], prog: str = "learner") -> Example:
    return load(Example, argv, prog=prog, description="Train Mario.")


def fail(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The problems `load` reports; asserts it exits with status 2 and the documented header."""
    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    header, *lines = err.rstrip("\n").split("\n")
    assert header == "learner: invalid configuration:"
    assert all(line.startswith("  - ") for line in lines), err
    return [line.removeprefix("  - ") for line in lines]


def toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    assert run([]) == Example()


def test_flags_override_defaults() -> None:
    cfg = run(
        ["--batch-size", "64", "--learning-rate", "1e-3", "--run-name", "a", "--precision", "bf16"]
        + ["--max-steps", "100", "--levels", "1-1, 4-2"]
    )
    assert cfg == Example(64, 1e-3, "a", True, "bf16", 100, ("1-1", "4-2"))
    assert run(["--max-steps", "none", "--levels", ""]) == Example(max_steps=None, levels=())


def test_bool_flags() -> None:
    assert run(["--no-cuda"]).cuda is False
    assert run(["--no-cuda", "--cuda"]).cuda is True


def test_toml_overrides_defaults_and_flags_override_toml(tmp_path: Path) -> None:
    path = toml(
        tmp_path,
        '[learner]\nbatch-size = 8\nlearning_rate = 1\ncuda = false\nlevels = ["2-1", "3-1"]\n'
        "max_steps = 5\n",
    )
    cfg = run(["--config", path])
    assert cfg == Example(8, 1.0, "dev", False, "fp32", 5, ("2-1", "3-1"))
    assert isinstance(cfg.learning_rate, float)
    cfg = run(["--batch-size", "16", "--config", path, "--cuda", "--max-steps", "none"])
    assert (cfg.batch_size, cfg.cuda, cfg.max_steps, cfg.levels) == (16, True, None, ("2-1", "3-1"))


def test_each_process_reads_its_own_table(tmp_path: Path) -> None:
    path = toml(tmp_path, "[learner]\nbatch_size = 16\n[actor]\nbatch_size = 4\n")
    assert run(["--config", path]) == Example(batch_size=16)
    assert run(["--config", path], prog="actor") == Example(batch_size=4)
    assert run(["--config", path], prog="eval") == Example()


def test_a_dotted_table_is_the_program_of_that_name_quoted_or_not(tmp_path: Path) -> None:
    """`[actor.eval]` nests a table `eval` in `[actor]`: the eval actor's, not an actor setting."""
    for header in ("[actor.eval]", '["actor.eval"]'):
        path = toml(tmp_path, f"[actor]\nbatch_size = 4\n{header}\nbatch_size = 2\n")
        assert run(["--config", path], prog="actor") == Example(batch_size=4)
        assert run(["--config", path], prog="actor.eval") == Example(batch_size=2)


def test_a_table_no_program_reads_is_refused(tmp_path: Path, capsys) -> None:
    """A misspelt table would otherwise be ignored, its settings lost without a word."""
    path = toml(tmp_path, "[lerner]\nbatch_size = 8\n[actor.evl]\nbatch_size = 2\n")
    programs = "(learner, actor, actor.eval, actor.relay)"
    assert fail(["--config", path], capsys) == [
        f"{path}: [lerner] is not a program's table {programs}; did you mean 'learner'?",
        f"{path}: [actor.evl] is not a program's table {programs}; did you mean 'actor.eval'?",
    ]


def test_a_top_level_key_is_refused(tmp_path: Path, capsys) -> None:
    """Both processes would read it, and the two tables name different settings."""
    path = toml(tmp_path, "batch_size = 8\n[learner]\nrun_name = 'x'\n")
    assert fail(["--config", path], capsys) == [
        f"{path}: batch_size is a top-level key, which the learner and the actors would both "
        "read: move it into the [learner] or [actor] table"
    ]


def test_every_problem_is_reported_at_once(tmp_path: Path, capsys) -> None:
    path = toml(
        tmp_path,
        '[learner]\nlerning_rate = 0.1\nbatch_size = "64"\ncuda = false\nprecision = "bf16"\n'
        "run_name = 3\nlevels = ['1-1', 2]\n",
    )
    problems = fail(["--config", path, "--max-steps", "ten", "--precision", "fp16"], capsys)
    assert problems == [
        f"{path}: [learner] lerning_rate: unknown key; did you mean 'learning_rate'?",
        f"{path}: [learner] batch_size: expected an integer, got '64' (str)",
        f"{path}: [learner] run_name: expected a string, got 3 (int)",
        f"{path}: [learner] levels: item 1: expected a string, got 2 (int)",
        "--max-steps: expected an integer, got 'ten'",
        "--precision: expected one of 'fp32', 'bf16', got 'fp16'",
        # the bad --precision is skipped, so the file's bf16 stands and problems() sees it
        "precision 'bf16' needs cuda; use fp32 on the CPU",
    ]


def test_bool_is_not_an_int_and_problems_runs_on_good_values(tmp_path: Path, capsys) -> None:
    path = toml(tmp_path, "[learner]\nbatch_size = true\nlevels = '1-1'\n")
    assert fail(["--config", path, "--batch-size", "0"], capsys) == [
        f"{path}: [learner] batch_size: expected an integer, got True (bool)",
        f"{path}: [learner] levels: expected an array, got '1-1' (str)",
        "batch_size is 0; set it to at least 1",
    ]


def test_bounds_are_checked_wherever_the_value_comes_from(tmp_path: Path, capsys) -> None:
    path = toml(tmp_path, "[learner]\nlearning_rate = 0\n")
    assert fail(["--config", path], capsys) == [
        f"{path}: [learner] learning_rate: must be > 0, got 0.0"
    ]
    assert fail(["--learning-rate", "2"], capsys) == ["--learning-rate: must be <= 1, got 2.0"]
    assert fail(["--learning-rate", "nan"], capsys) == ["--learning-rate: must be > 0, got nan"]
    assert run(["--learning-rate", "1"]).learning_rate == 1.0
    # a named type (PositiveInt) inside an optional field
    assert fail(["--max-steps", "0"], capsys) == ["--max-steps: must be >= 1, got 0"]
    assert run(["--max-steps", "1"]).max_steps == 1


def test_retired_fields_are_refused_by_name_as_flags_and_keys(tmp_path: Path, capsys) -> None:
    path = toml(tmp_path, "[learner]\narch = 'small'\n")
    assert fail(["--config", path, "--arch", "small", "--no-fused"], capsys) == [
        f"{path}: [learner] arch: set it elsewhere",
        "--arch: set it elsewhere",
        "--fused: gone for good",
    ]
    assert fail(["--arch=nature", "--fused"], capsys) == [
        "--arch: set it elsewhere",
        "--fused: gone for good",
    ]


def test_unknown_flag_is_reported_with_a_suggestion(capsys) -> None:
    problems = fail(["--batch-sise", "3", "--no-cuda", "--precision", "bf16"], capsys)
    assert problems == [
        "unrecognized arguments: --batch-sise 3; did you mean '--batch-size'?",
        "precision 'bf16' needs cuda; use fp32 on the CPU",
    ]


def test_bad_toml_syntax_is_reported_with_other_problems(tmp_path: Path, capsys) -> None:
    path = toml(tmp_path, "batch_size = = 3\n")
    problems = fail(["--config", path, "--batch-size", "x"], capsys)
    assert len(problems) == 2
    assert problems[0].startswith(f"--config {path}: invalid TOML: ") and "line 1" in problems[0]
    assert problems[1] == "--batch-size: expected an integer, got 'x'"


def test_missing_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "absent.toml"
    assert fail(["--config", str(path)], capsys) == [
        f"--config {path}: no such file; check the path"
    ]


def test_help_documents_every_field(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_info:
        run(["--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Train Mario." in text and "--config FILE" in text
    for f in fields(Example):
        assert f"--{f.name.replace('_', '-')}" in text
        assert f.metadata["help"] in text
    assert "--cuda, --no-cuda train on the GPU (default: true)" in text
    assert "Adam step size (default: 0.0003, > 0, <= 1)" in text
    assert "--arch" not in text  # retired
    assert "--precision {fp32,bf16} floating-point format" in text
    assert "--max-steps INT|none stop after" in text and "(default: none, >= 1)" in text
    assert "(default: 32)" in text and "(default: 1-1)" in text


@dataclass(frozen=True)
class NoHelp:
    batch_size: int = field(default=32, metadata={"help": "sequences per step"})
    seed: int = 0


@dataclass(frozen=True)
class BadType:
    weights: dict[str, int] = field(default_factory=dict, metadata={"help": "per-level weights"})


@dataclass(frozen=True)
class BadDefault:
    seed: int = field(default=None, metadata={"help": "random seed"})  # type: ignore[assignment]


@dataclass(frozen=True)
class BadBound:
    name: Annotated[str, Ge(1)] = option("dev", "run name")


@dataclass(frozen=True)
class UnknownMarker:
    lr: Annotated[float, "positive"] = option(0.1, "step size")


@dataclass(frozen=True)
class BoundInMetadata:  # the form bounds took before they moved into the type
    lr: float = field(default=0.1, metadata={"help": "step size", "gt": 0})


@dataclass(frozen=True)
class DefaultOutOfBounds:
    lr: Positive = option(0.0, "step size")


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NoHelp, "NoHelp.seed has no help"),
        (BadType, "BadType.weights: unsupported type"),
        (BadDefault, "BadDefault.seed: bad default: expected an integer, got None"),
        (BadBound, "BadBound.name: unsupported type"),
        (UnknownMarker, "UnknownMarker.lr: unsupported type"),
        (BoundInMetadata, r"BoundInMetadata.lr: unknown metadata \['gt'\]; bound a number in its"),
        (DefaultOutOfBounds, "DefaultOutOfBounds.lr: bad default: must be > 0, got 0.0"),
    ],
)
def test_developer_mistakes_raise_type_error_when_building_the_parser(cls, message) -> None:
    with pytest.raises(TypeError, match=message):
        load(cls, [], prog="learner", description="")


def test_from_dict_reports_every_problem() -> None:
    with pytest.raises(ConfigError) as error:
        from_dict(Example, {"batch_size": 0, "cuda": "yes", "levles": ["1-1"], "batch-size": 5})
    assert error.value.problems == [
        "cuda: expected true or false, got 'yes' (str)",
        "levles: unknown key; did you mean 'levels'?",
        "batch-size: also given as 'batch_size'; keep one",
        "batch_size is 0; set it to at least 1",
    ]
    assert "  - cuda: expected true or false" in str(error.value)


def test_write_resolved_round_trips(tmp_path: Path) -> None:
    cfg = run(["--batch-size", "64", "--max-steps", "7", "--levels", "1-1,8-4", "--no-cuda"])
    path = tmp_path / "config.json"
    write_resolved(cfg, path)
    data = json.loads(path.read_text())
    assert data == to_dict(cfg) and data["levels"] == ["1-1", "8-4"]
    assert from_dict(Example, data) == cfg
    assert os.listdir(tmp_path) == ["config.json"]
