"""What a box lacks: the pure rules behind `make wheelhouse HAVE=... SKIP=...`. A box's `pip list`
read, versions compared with requirement specifiers (PEP 440, the parts requirements use),
environment markers evaluated, and the wheelhouse's distributions split into those the box must
receive and those it already has in a version the project accepts. No IO."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from scripts.install.rules import InstallError, norm

# a requirement on the first is met by any of the others: they install the same module (cv2)
ALTERNATIVES = {
    "opencv-python-headless": (
        "opencv-python",
        "opencv-contrib-python",
        "opencv-contrib-python-headless",
    ),
}

# ---- versions and specifiers --------------------------------------------------------------------

_VERSION = re.compile(
    r"""^\s*v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|a|b|c|rc)[-_.]?(?P<pre_n>\d*))?
    (?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d*))?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d*))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$""",
    re.I | re.X,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


@dataclass(frozen=True, order=True)
class Version:
    """A PEP 440 version, ordered as pip orders them (local labels last)."""

    key: tuple
    release: tuple[int, ...] = field(compare=False)
    local: str | None = field(compare=False)
    text: str = field(compare=False)


def parse_version(text: str) -> Version:
    m = _VERSION.match(text)
    if not m:
        raise ValueError(f"not a version: {text!r}")
    release = tuple(int(p) for p in m["release"].split("."))
    trimmed = release
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed = trimmed[:-1]
    post = m["post_n1"] or (m["post_n2"] or "0" if m["post_l"] else None)
    dev = (m["dev_n"] or "0") if m["dev_l"] else None
    if m["pre_l"]:
        pre = (_PRE[m["pre_l"].lower()], int(m["pre_n"] or 0))
    elif post is None and dev is not None:
        pre = (-1, 0)  # 1.0.dev1 comes before 1.0a1
    else:
        pre = (3, 0)
    local = m["local"]
    key = (
        int(m["epoch"] or 0),
        trimmed,
        pre,
        -1 if post is None else int(post),
        (1, 0) if dev is None else (0, int(dev)),
        () if local is None else tuple((1, int(p), "") if p.isdigit() else (0, 0, p.lower())
                                       for p in re.split(r"[-_.]", local)),
    )  # fmt: skip
    return Version(key, release, local, text.strip())


def _public(v: Version) -> Version:
    return v if v.local is None else parse_version(v.text.split("+")[0])


def _prefix_match(v: Version, prefix: str) -> bool:
    want = parse_version(prefix)
    n = len(want.release)
    have = v.release + (0,) * max(0, n - len(v.release))
    return want.key[0] == v.key[0] and have[:n] == want.release


def satisfies(version: str, specifier: str) -> bool:
    """Whether `version` meets every clause of `specifier` ('>=2,<3', '~=4.10', '==2.*', '');
    local labels (+cu130) are ignored unless an == clause names one."""
    v = parse_version(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = re.match(r"(===|~=|==|!=|<=|>=|<|>)\s*(\S+)$", clause)
        if not m:
            raise ValueError(f"not a version specifier: {clause!r}")
        op, target = m.groups()
        if op == "===":
            ok = v.text == target
        elif op in ("==", "!=") and target.endswith(".*"):
            ok = _prefix_match(v, target[:-2]) is (op == "==")
        elif op in ("==", "!="):
            t = parse_version(target)
            same = (v if t.local else _public(v)).key == t.key
            ok = same is (op == "==")
        elif op == "~=":
            t = parse_version(target)
            if len(t.release) < 2:
                raise ValueError(f"~= needs two release numbers: {clause!r}")
            prefix = ".".join(map(str, t.release[:-1]))
            ok = _public(v) >= t and _prefix_match(v, prefix)
        else:
            t, pv = parse_version(target), _public(v)
            ok = {"<": pv < t, "<=": pv <= t, ">": pv > t, ">=": pv >= t}[op]
        if not ok:
            return False
    return True


# ---- requirements and markers -------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    name: str  # normalised
    extras: frozenset[str]
    specifier: str  # '>=2,<3'; '' for any
    marker: str  # '' for always

    def __str__(self) -> str:
        return f"{self.name}{self.specifier}" if self.specifier else self.name


def parse(req: str) -> Requirement:
    """'Foo[bar] (>=1.0, <2); python_version < "3.13"' -> its parts; `name @ url` has no
    specifier."""
    spec, _, marker = req.partition(";")
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)$", spec)
    if not m:
        raise ValueError(f"not a requirement: {req!r}")
    rest = m.group(3).strip()
    rest = "" if rest.startswith("@") else rest.strip("()").replace(" ", "")
    extras = frozenset(norm(e) for e in (m.group(2) or "").split(",") if e.strip())
    return Requirement(norm(m.group(1)), extras, rest, marker.strip())


_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'[^']*'|"[^"]*")|(?P<op>===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b)
    |(?P<paren>[()])|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))""",
    re.X,
)


def marker_applies(marker: str, env: dict[str, str], extras: frozenset[str] = frozenset()) -> bool:
    """Evaluate a PEP 508 environment marker in `env` (python_version, sys_platform, ...), with
    `extra` true for each of `extras`."""
    if not marker.strip():
        return True
    tokens, pos = [], 0
    while pos < len(marker.rstrip()):
        m = _TOKEN.match(marker, pos)
        if not m or m.end() == pos:
            raise ValueError(f"not a marker: {marker!r}")
        kind = m.lastgroup
        tokens.append((kind, re.sub(r"\s+", " ", m.group(kind))))
        pos = m.end()
    tokens.append(("end", ""))
    at = 0

    def peek() -> tuple[str, str]:
        return tokens[at]

    def take() -> tuple[str, str]:
        nonlocal at
        at += 1
        return tokens[at - 1]

    def value() -> tuple[str, str]:  # (kind: 'var' or 'str', text)
        kind, text = take()
        if kind == "str":
            return "str", text[1:-1]
        if kind == "word" and text not in ("and", "or"):
            return "var", text
        raise ValueError(f"not a marker: {marker!r}")

    def compare() -> bool:
        if peek() == ("paren", "("):
            take()
            out = disjunction()
            if take() != ("paren", ")"):
                raise ValueError(f"not a marker: {marker!r}")
            return out
        left, (kind, op), right = value(), take(), value()
        if kind != "op":
            raise ValueError(f"not a marker: {marker!r}")
        if "extra" in (left[1], right[1]) and "var" in (left[0], right[0]):
            other = right if left == ("var", "extra") else left
            hit = norm(other[1]) in extras
            return hit if op == "==" else not hit
        lhs = env.get(left[1], "") if left[0] == "var" else left[1]
        rhs = env.get(right[1], "") if right[0] == "var" else right[1]
        if op in ("in", "not in"):
            return (lhs in rhs) is (op == "in")
        try:
            return satisfies(lhs, f"{op}{rhs}")
        except ValueError:  # not versions: plain strings
            return {"==": lhs == rhs, "!=": lhs != rhs}.get(op, False)

    def conjunction() -> bool:
        out = compare()
        while peek() == ("word", "and"):
            take()
            out = compare() and out
        return out

    def disjunction() -> bool:
        out = conjunction()
        while peek() == ("word", "or"):
            take()
            out = conjunction() or out
        return out

    result = disjunction()
    if peek()[0] != "end":
        raise ValueError(f"not a marker: {marker!r}")
    return result


# ---- what the box has ---------------------------------------------------------------------------

_NOISE = ("[notice]", "WARNING", "DEPRECATION", "Package ", "-e ", "#")


def parse_pip_list(text: str, source: str = "HAVE") -> dict[str, str | None]:
    """The box's distributions and versions from `pip list` (columns, or --format=freeze or
    --format=json); `name @ url` lines (pip freeze) have no version (None)."""
    if text.lstrip().startswith("["):
        return {norm(d["name"]): d["version"] for d in json.loads(text)}
    have: dict[str, str | None] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(_NOISE) or set(line) <= {"-", " "}:
            continue
        if "==" in line:
            name, _, version = line.partition("==")
        elif " @ " in line:
            name, version = line.split(" @ ")[0], None
        else:
            parts = line.split()
            if len(parts) < 2:
                raise InstallError(_bad_line(source, n, line))
            name, version = parts[0], parts[1]
        name = name.strip()
        try:
            if version is not None:
                parse_version(version)
            parse(name)
        except ValueError:
            raise InstallError(_bad_line(source, n, line)) from None
        have[norm(name)] = version.strip() if version else None
    return have


def _bad_line(source: str, n: int, line: str) -> str:
    return (
        f"{source} line {n}: {line!r} is not a line of `pip list` or `pip list --format=freeze`"
        " output: write the file with `python -m pip list > box-pip-list.txt` on the box"
    )


def parse_skip(text: str) -> dict[str, str | None]:
    """SKIP=torch,numpy==2.1.3: names (version unknown: None) or name==version."""
    out: dict[str, str | None] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, _, version = item.partition("==")
        try:
            parse(name)
            if version:
                parse_version(version)
        except ValueError:
            raise InstallError(
                f"SKIP: {item!r} is not a name or name==version (e.g. SKIP=torch,numpy==2.1.3)"
            ) from None
        out[norm(name)] = version or None
    return out


# ---- the selection ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dist:
    """A distribution the wheelhouse could hold: its version and its Requires-Dist lines."""

    version: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class FromBox:
    """A requirement the box meets itself: with which of its distributions, at which version
    (None: named in SKIP, not known here) and against which specifiers (each with who asks)."""

    box_name: str
    box_version: str | None
    needs: tuple[tuple[str, str], ...]  # ('numpy>=2', 'the project')


@dataclass(frozen=True)
class Selection:
    keep: frozenset[str]  # the distributions the box must receive
    from_box: dict[str, FromBox]  # requirement name -> what meets it on the box
    why_kept: dict[str, str]  # for a distribution the box has but in a version that will not do


def select(
    roots: list[str], dists: dict[str, Dist], box: dict[str, str | None], env: dict[str, str]
) -> Selection:
    """Split what `roots` (the project's requirements) need, directly and through the
    Requires-Dist of `dists`, into what the box must receive and what `box` (name -> version)
    already meets. A distribution the box has is left out only when its version meets every
    requirement on it from the project and from the distributions the box receives; the box's
    own distributions bring their own requirements, so those are not followed. A name given with
    no version (SKIP=name) is trusted here and checked on the box at install."""
    dists = {norm(k): v for k, v in dists.items()}
    keep: set[str] = set()
    while True:
        asks = _requirements(roots, dists, keep, env)
        decided = {name: _meet(name, reqs, box) for name, reqs in asks.items()}
        more = {name for name, (met, _) in decided.items() if met is None} - keep
        if not more:
            break
        keep |= more
    from_box = {name: met for name, (met, _) in decided.items() if met is not None}
    why = {name: reason for name, (met, reason) in decided.items() if met is None and reason}
    return Selection(frozenset(keep), from_box, why)


def _requirements(
    roots: list[str], dists: dict[str, Dist], keep: set[str], env: dict[str, str]
) -> dict[str, list[tuple[Requirement, str]]]:
    """Every applicable requirement from the project and from the kept distributions, with who
    asks for it; the extras asked of a distribution select its own extra requirements."""
    asks: dict[str, list[tuple[Requirement, str]]] = {}
    extras: dict[str, set[str]] = {}
    todo = [(parse(r), "the project") for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, who = todo.pop(0)
        if not marker_applies(req.marker, env):
            continue
        asks.setdefault(req.name, []).append((req, who))
        extras.setdefault(req.name, set()).update(req.extras)
        state = (req.name, frozenset(extras[req.name]))
        if req.name not in keep or req.name not in dists or state in seen:
            continue
        seen.add(state)
        dist = dists[req.name]
        for line in dist.requires:
            sub = parse(line)
            if marker_applies(sub.marker, env, frozenset(extras[req.name])):  # judged here, once
                todo.append((replace(sub, marker=""), f"{req.name} {dist.version}"))
    return asks


def _meet(
    name: str, reqs: list[tuple[Requirement, str]], box: dict[str, str | None]
) -> tuple[FromBox | None, str]:
    """(what on the box meets every requirement on `name`, or None; why not, when it has one)."""
    needs = tuple((str(r), who) for r, who in reqs)
    for box_name in (name, *ALTERNATIVES.get(name, ())):
        if box_name not in box:
            continue
        version = box[box_name]
        if version is None:
            return FromBox(box_name, None, needs), ""
        unmet = [f"{r} ({who})" for r, who in reqs if not satisfies(version, r.specifier)]
        if not unmet:
            return FromBox(box_name, version, needs), ""
        return None, f"the box's {box_name} {version} does not meet {', '.join(unmet)}"
    return None, ""
