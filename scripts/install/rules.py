"""The pure rules of installing: versions, requirement strings, where torch comes from, the one
line relaxed in an sdist, which wheel fits which Python. No IO."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

SUPPORTED = ((3, 12), (3, 13))
# sdists whose metadata asks for Python 3.13; their code builds and runs on 3.12
RELAXED = {"nes-py": "9.0.1", "gym-super-mario-bros": "9.1.0"}
NEEDS_COMPILER = {"nes-py"}


class InstallError(Exception):
    """A problem the user fixes; its message says how."""


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.14.1+cu130' -> (2, 14, 1); the leading numeric release only."""
    m = re.match(r"\d+(\.\d+)*", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in m.group().split("."))


def norm(name: str) -> str:
    """PEP 503 name: 'Gym_Super.Mario-bros' -> 'gym-super-mario-bros'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return parse_requirement(req)[0]


def parse_requirement(req: str) -> tuple[str, set[str], str]:
    """'cuda-toolkit[cublas,cudart]==13.0.*; extra == "x"' -> (name, extras, marker)."""
    spec, _, marker = req.partition(";")
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
    if not m:
        raise ValueError(f"not a requirement: {req!r}")
    extras = {norm(e) for e in (m.group(2) or "").split(",") if e.strip()}
    return norm(m.group(1)), extras, marker


def wanted(marker: str, extras: set[str]) -> bool:
    """Whether a requirement applies, as far as extras go: one under `extra == "x"` only when x
    was asked for. Other markers (platform, Python) are left to what is installed."""
    asked = {norm(x) for x in re.findall(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)}
    return not asked or bool(asked & extras)


def minimum_torch(dependencies: list[str]) -> tuple[int, ...]:
    """The lowest torch the project accepts, from its `torch>=X` requirement."""
    for req in dependencies:
        if requirement_name(req) == "torch":
            m = re.search(r">=\s*([0-9][0-9.]*)", req)
            return version_tuple(m.group(1)) if m else (0,)
    raise ValueError("the project does not require torch")


@dataclass(frozen=True)
class Torch:
    """What `import torch` gives in an interpreter."""

    version: str
    cuda: str | None  # the CUDA version of the build; None for a CPU build
    cuda_available: bool
    path: str  # torch/__init__.py


def torch_plan(
    mode: str, found: Torch | None, minimum: tuple[int, ...], problem: str = ""
) -> tuple[bool, str]:
    """(reuse the interpreter's torch?, why) for TORCH=mode; a refusal raises InstallError."""
    need = ".".join(map(str, minimum))
    if mode == "venv":
        return False, "TORCH=venv"
    if mode not in ("auto", "box"):
        raise InstallError(f"TORCH={mode}: use auto, box or venv")
    if found is None:
        if mode == "box":
            raise InstallError(
                f"TORCH=box, but {sys.executable} cannot import torch ({problem or 'not installed'})"
                ": install torch there, or use TORCH=venv (or auto) to install it into the venv"
            )
        return False, "the interpreter has no torch"
    if version_tuple(found.version) < minimum:
        if mode == "box":
            raise InstallError(
                f"TORCH=box, but the interpreter's torch {found.version} is older than the "
                f"{need} the project needs: upgrade it there, or use TORCH=venv"
            )
        return False, f"the interpreter's torch {found.version} is older than {need}"
    if mode == "auto" and found.cuda is None:
        return False, f"the interpreter's torch {found.version} is a CPU build (TORCH=box takes it)"
    return True, f"the interpreter's torch {found.version}"


def relax_requires_python(pyproject: str, floor: str = ">=3.12") -> str:
    """The sdist's pyproject.toml with `requires-python` set to `floor`; nothing else changes."""
    text, n = re.subn(
        r'^(requires-python\s*=\s*)"[^"]*"', rf'\g<1>"{floor}"', pyproject, flags=re.M
    )
    if n != 1:
        raise InstallError(
            "the sdist's pyproject.toml has no single requires-python line to relax: "
            "its layout changed; install on Python 3.13 instead"
        )
    return text


def wheel_matches(filename: str, name: str, version: str, python: tuple[int, int]) -> bool:
    """A wheel file of `name==version` that installs on CPython `python` (pure or cpXY)."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return False
    dist, ver, py_tag, abi = norm(parts[0]), parts[1], parts[-3], parts[-2]
    cp = f"cp{python[0]}{python[1]}"
    tag_ok = cp in py_tag.split(".") or (py_tag.startswith("py3") and abi == "none")
    return dist == norm(name) and ver == version and tag_ok
