"""Turn a process's config dataclass into its command line, a TOML loader and one validator.

Each process has one flat `@dataclass(frozen=True)`; every field is typed, defaulted and
documented in one line, e.g. `lr: Positive = option(3e-4, "Adam step size")`. A number's bounds
are part of its type, `Annotated[float, Gt(0), Le(1)]` (Ge: >=, Gt: >, Le: <=, Lt: <); the named
types below (Positive, PositiveInt, ...) spell the common ones.
The class may define `problems(self) -> list[str]`, every cross-field violation, each saying what
to change, and `RETIRED: ClassVar[dict[str, str]]`, former fields with the message that a flag or
key still naming one gets. Field types: bool, int, float, str, Literal[...] of str or int, `X |
None` of those (not bool), and tuple[E, ...] / list[E] with E one of int, float, str.

Field defaults, then the `--config` TOML file's `[prog]` table, then flags (`--no-X` for a bool,
`none` for an optional, sequences comma-separated), as docs/reference/ says. Every problem is
collected before failing; the command line, TOML files and `from_dict` share one path, `_build`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import json
import operator
import sys
import tomllib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from common.rundir import atomic_write

_NOUN = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}

_HOLDS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


class Bound(NamedTuple):
    """A number's bound, in its type: `Annotated[int, Ge(1)]`."""

    sign: str  # a key of _HOLDS, as errors and --help write it
    limit: float


Ge = functools.partial(Bound, ">=")
Gt = functools.partial(Bound, ">")
Le = functools.partial(Bound, "<=")
Lt = functools.partial(Bound, "<")

Positive = Annotated[float, Gt(0)]
NonNegative = Annotated[float, Ge(0)]
UnitInterval = Annotated[float, Ge(0), Le(1)]
Share = Annotated[float, Ge(0), Lt(1)]  # a probability or share below 1 (0 = off)
PositiveInt = Annotated[int, Ge(1)]
Count = Annotated[int, Ge(0)]  # a number of things, an id or a seed
Port = Annotated[int, Ge(0), Le(65535)]  # 0: off
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class ConfigError(ValueError):
    """An invalid configuration; `.problems` lists every violation, each saying what to change."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class _Spec(NamedTuple):
    """What one field accepts."""

    name: str
    help: str
    default: Any
    base: type  # bool, int, float or str: the type of the value, or of each item
    choices: tuple[Any, ...] | None  # the Literal's values
    optional: bool  # None is allowed
    container: type | None  # tuple or list for sequence fields
    bounds: tuple[Bound, ...]  # the value must meet each


class _Layer(NamedTuple):
    """One source of values; later layers override earlier ones."""

    values: Mapping[str, Any]
    where: Callable[[str], str]  # how a problem names a key of this layer
    text: bool = False  # command-line strings: parsed rather than type-checked


def is_host_port(value: str, below: int = 65536) -> bool:
    """Whether `value` is HOST:PORT with 0 < PORT < `below` (65535 where PORT+1 is used too)."""
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < below)


def option(default: Any, help: str) -> Any:
    """A field: its default and one line of help."""
    return dataclasses.field(default=default, metadata={"help": help})


def load[T](cls: type[T], argv: Sequence[str] | None, *, prog: str, description: str) -> T:
    """Parse `argv` (None: sys.argv[1:]) and its `--config` file into a validated `cls`; print
    every problem to stderr and raise SystemExit(2) if there is any."""
    parser = _parser(cls, prog, description)
    namespace, extra = parser.parse_known_args(argv)
    flags = vars(namespace)
    config = flags.pop("config", None)  # the only option that is not a field
    problems = [_unknown_args(extra, cls)] if extra else []
    layers = []
    if config is not None:
        file_layers, file_problems = _read_toml(Path(config), prog)
        layers += file_layers
        problems += file_problems
    layers.append(_Layer(flags, lambda key: "--" + key.replace("_", "-"), text=True))
    try:
        return _build(cls, layers, problems)
    except ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def from_dict[T](cls: type[T], data: Mapping[str, Any]) -> T:
    """Build a validated `cls` from field values (e.g. a resolved config read back); missing keys
    keep their defaults. Raises ConfigError listing every problem."""
    return _build(cls, [_Layer(data, str)])


def to_dict(cfg: Any) -> dict[str, Any]:
    """The config's fields as a JSON-safe dict (tuples become lists)."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def write_resolved(cfg: Any, path: Path) -> None:
    """Write the config to `path` as pretty JSON, whole or not at all (common/rundir.py)."""
    atomic_write(Path(path), (json.dumps(to_dict(cfg), indent=2) + "\n").encode())


def _build[T](cls: type[T], layers: Sequence[_Layer], problems: Sequence[str] = ()) -> T:
    """Merge `layers` over the defaults, checking every value, then build `cls` and ask its
    `problems()`. A bad value is reported and the lower layer's value kept, so one pass finds
    every problem. Raises ConfigError listing them all."""
    specs, retired = _specs(cls), getattr(cls, "RETIRED", {})
    problems = list(problems)
    merged = {name: spec.default for name, spec in specs.items()}
    for layer in layers:
        seen: dict[str, str] = {}
        for key, raw in layer.values.items():
            name, where = str(key).replace("-", "_"), layer.where(key)
            if name in retired:
                problems.append(f"{where}: {retired[name]}")
            elif name not in specs:
                problems.append(f"{where}: unknown key; {_suggest(name, specs)}")
            elif name in seen:
                problems.append(f"{where}: also given as {seen[name]!r}; keep one")
            else:
                seen[name] = key
                try:
                    text = layer.text and isinstance(raw, str)  # bool flags arrive parsed
                    merged[name] = _value(specs[name], raw, text)
                except ValueError as e:
                    problems.append(f"{where}: {e}")
    try:
        cfg = cls(**merged)
    except (TypeError, ValueError) as e:  # a __post_init__ that validates
        raise ConfigError([*problems, str(e)]) from e
    if callable(check := getattr(cfg, "problems", None)):
        problems += check()
    if problems:
        raise ConfigError(problems)
    return cfg


def _value(spec: _Spec, raw: Any, text: bool) -> Any:
    """`raw` as a value of `spec`: a command-line string is parsed if `text`, else a TOML or
    JSON value is type-checked (bool is not an int; an int is a float)."""
    if spec.optional and (raw == "none" if text else raw is None):
        return None
    if spec.container is None:
        return _one(spec, raw, text)
    if text:
        raw = [item.strip() for item in raw.split(",")] if raw.strip() else []
    elif not isinstance(raw, list | tuple):
        raise ValueError(f"expected an array, got {_show(raw)}")
    items = []
    for i, item in enumerate(raw):
        try:
            items.append(_one(spec, item, text))
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from None
    return spec.container(items)


def _one(spec: _Spec, raw: Any, text: bool) -> Any:
    got = repr(raw) if text else _show(raw)
    if spec.choices is not None:
        for choice in spec.choices:
            if str(choice) == raw if text else type(raw) is type(choice) and raw == choice:
                return choice
        raise ValueError(f"expected one of {', '.join(map(repr, spec.choices))}, got {got}")
    value = None
    if text:
        with contextlib.suppress(ValueError):
            value = spec.base(raw)
    elif isinstance(raw, bool) is (spec.base is bool) and (
        isinstance(raw, spec.base) or (spec.base is float and isinstance(raw, int))
    ):
        value = spec.base(raw)
    if value is None:
        raise ValueError(f"expected {_NOUN[spec.base]}, got {got}")
    for bound in spec.bounds:
        if not _HOLDS[bound.sign](value, bound.limit):
            raise ValueError(f"must be {bound.sign} {bound.limit}, got {value}")
    return value


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _suggest(name: str, known: Sequence[str] | Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]!r}?" if close else "remove it, or see --help for the names"


@functools.cache
def _specs(cls: type) -> dict[str, _Spec]:
    """Every init field of `cls`; a TypeError for anything a developer must fix."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = {}
    for f in (f for f in dataclasses.fields(cls) if f.init):
        here = f"{cls.__name__}.{f.name}"
        if f.name == "config":
            raise TypeError(f"{here}: 'config' is reserved for --config; rename the field")
        if not isinstance(help := f.metadata.get("help"), str) or not help.strip():
            raise TypeError(f'{here} has no help; use field(default=..., metadata={{"help": ...}})')
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{here} has no default; give it one")
        if unknown := sorted(set(f.metadata) - {"help"}):
            raise TypeError(f"{here}: unknown metadata {unknown}; bound a number in its type")
        spec = _spec(f.name, help, default, hints[f.name])
        if spec is None:
            raise TypeError(f"{here}: unsupported type {hints[f.name]!r}; see common/config.py")
        try:
            _value(spec, default, text=False)
        except ValueError as e:
            raise TypeError(f"{here}: bad default: {e}") from None
        specs[f.name] = spec
    return specs


def _spec(name: str, help: str, default: Any, hint: Any) -> _Spec | None:
    args, optional, container, choices = typing.get_args(hint), False, None, None
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        hint, optional = (rest[0] if len(rest) == 1 else hint), True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if (origin is tuple and len(args) == 2 and args[1] is Ellipsis) or (
        origin is list and len(args) == 1
    ):
        container, hint = origin, args[0]
    hint, *bounds = typing.get_args(hint) if typing.get_origin(hint) is Annotated else (hint,)
    if any(not isinstance(b, Bound) or b.sign not in _HOLDS for b in bounds):
        return None
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        hint = type(choices[0])
        if hint not in (int, str) or any(type(c) is not hint for c in choices):
            return None
    if hint not in _NOUN or (hint is bool and optional) or (container and (optional or choices)):
        return None
    if bounds and (hint not in (int, float) or choices):
        return None
    return _Spec(name, help, default, hint, choices, optional, container, tuple(bounds))


class Flag(NamedTuple):
    """One field as the command line spells it: what --help prints, and docs/reference lists."""

    name: str  # the field; its key in a --config file
    flag: str  # --learning-rate; a bool field also takes --no-<name>
    metavar: str  # FLOAT, {a,b}, INT|none, STR,...; "" for a bool
    default: str  # as it would be typed on the command line
    bounds: str  # ">= 0, <= 1"; "" for none
    help: str


def flags(cls: type) -> list[Flag]:
    """Every option of `cls` in declaration order (--config aside), as --help shows it."""
    return [
        Flag(
            name=spec.name,
            flag="--" + spec.name.replace("_", "-"),
            metavar="" if spec.base is bool else _metavar(spec),
            default=_default_text(spec.default),
            bounds=", ".join(f"{b.sign} {b.limit}" for b in spec.bounds),
            help=spec.help,
        )
        for spec in _specs(cls).values()
    ]


def _parser(cls: type, prog: str, description: str) -> argparse.ArgumentParser:
    """Every option is a raw string (bools aside) so `_build` can parse them all and report every
    bad value at once, rather than argparse stopping at the first."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,  # only the flags given reach the namespace
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=40),
    )
    parser.add_argument(
        "--config", metavar="FILE", help=f"TOML file: its [{prog}] table sets fields; flags win"
    )
    for name in getattr(cls, "RETIRED", {}):  # taken, to be refused by name in _build
        flag = name.replace("_", "-")
        parser.add_argument(
            f"--{flag}", f"--no-{flag}", dest=name, nargs="?", help=argparse.SUPPRESS
        )
    for f in flags(cls):
        bounds = f", {f.bounds}" if f.bounds else ""
        help = f"{f.help} (default: {f.default}{bounds})".replace("%", "%%")
        if not f.metavar:  # a bool
            parser.add_argument(f.flag, action=argparse.BooleanOptionalAction, help=help)
        else:
            parser.add_argument(f.flag, metavar=f.metavar, help=help)
    return parser


def _metavar(spec: _Spec) -> str:
    one = "{" + ",".join(map(str, spec.choices)) + "}" if spec.choices else spec.base.__name__
    one = one if spec.choices else one.upper()
    return f"{one},..." if spec.container else f"{one}|none" if spec.optional else one


def _default_text(value: Any) -> str:
    """The default as it would be typed on the command line."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "empty"
    if value is None or isinstance(value, bool):
        return str(value).lower()
    return str(value) or "''"


def _unknown_args(extra: Sequence[str], cls: type) -> str:
    flags = ["--config"]
    for spec in _specs(cls).values():
        flags.append("--" + spec.name.replace("_", "-"))
        flags += ["--no-" + spec.name.replace("_", "-")] if spec.base is bool else []
    hints = [_suggest(a.split("=")[0], flags) for a in extra if a.startswith("--")]
    return f"unrecognized arguments: {' '.join(extra)}" + "".join(f"; {h}" for h in hints)


PROGRAMS = ("learner", "actor", "actor.eval", "actor.relay")  # the tables of a --config file


def _read_toml(path: Path, prog: str) -> tuple[list[_Layer], list[str]]:
    """The file's [prog] table as a layer, or the problems reading it."""
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return [], [f"--config {path}: no such file; check the path"]
    except OSError as e:
        return [], [f"--config {path}: cannot read it ({e.strerror or e}); name a readable file"]
    except tomllib.TOMLDecodeError as e:
        return [], [f"--config {path}: invalid TOML: {e}; fix the syntax"]
    except UnicodeDecodeError:
        return [], [f"--config {path}: not UTF-8 text; save it as UTF-8"]
    tables: dict[str, dict] = {}  # `[actor.eval]` (nested) and `["actor.eval"]` (quoted) alike
    nested = [("", data)]
    for prefix, table in nested:  # a table's own tables join the list as it goes
        for key, value in ((k, v) for k, v in table.items() if isinstance(v, dict)):
            values = {k: v for k, v in value.items() if not isinstance(v, dict)}
            tables[prefix + key] = tables.get(prefix + key, {}) | values
            nested.append((f"{prefix}{key}.", value))
    problems = [
        f"{path}: {key} is a top-level key, which the learner and the actors would both read: "
        "move it into the [learner] or [actor] table"
        for key, value in data.items()
        if not isinstance(value, dict)
    ]
    problems += [
        f"{path}: [{n}] is not a program's table ({', '.join(PROGRAMS)}); " + _suggest(n, PROGRAMS)
        for n in tables
        if n not in PROGRAMS
    ]
    section = tables.get(prog)
    layers = [] if section is None else [_Layer(section, lambda k: f"{path}: [{prog}] {k}")]
    return layers, problems
