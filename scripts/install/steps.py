"""The steps that making a venv and building a wheelhouse share: the project's requirements, the
Python it runs on, a command run and checked, nes-py's wheel built from its relaxed sdist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from pathlib import Path

from scripts.checkout import ROOT
from scripts.install.rules import (
    NEEDS_COMPILER,
    RELAXED,
    SUPPORTED,
    InstallError,
    relax_requires_python,
    wheel_matches,
)

MANIFEST = "wheelhouse.json"


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project() -> dict:
    return pyproject()["project"]


def requirements(spec: dict, extras: str) -> list[str]:
    """The project's requirements and those of its `extras` (comma list)."""
    reqs = list(spec["dependencies"])
    for extra in filter(None, extras.split(",")):
        if extra not in spec.get("optional-dependencies", {}):
            raise InstallError(f"EXTRAS={extras}: the project has no extra {extra!r}")
        reqs += spec["optional-dependencies"][extra]
    return reqs


def check_python() -> tuple[int, int]:
    v = sys.version_info[:2]
    if v not in SUPPORTED:
        raise InstallError(
            f"{sys.executable} is Python {v[0]}.{v[1]}; the project runs on 3.12 and 3.13: "
            "pass PYTHON=/path/to/python3.13 (or python3.12)"
        )
    return v


def run(argv: list[str | Path], what: str, **kwargs) -> None:
    print(f"+ {' '.join(map(str, argv))}", flush=True)
    r = subprocess.run([str(a) for a in argv], check=False, **kwargs)
    if r.returncode != 0:
        raise InstallError(f"{what} failed (exit {r.returncode}); its output is above")


def check_compiler() -> None:
    cxx = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    exe = cxx.split()[0]
    if not shutil.which(exe):
        raise InstallError(
            f"no C++ compiler ({exe} not found): on Python 3.12 nes-py is built from its source. "
            "Install one (Debian/Ubuntu: apt-get install g++) or point CXX at it; or build a "
            "wheelhouse on a machine that has one (make wheelhouse) and install with WHEELS=..."
        )


def build_relaxed(
    python: Path, dest: Path, version: tuple[int, int], force: bool, names=RELAXED
) -> None:
    """Wheels of RELAXED's sdists (those among `names`) for `python` in `dest` (kept when already
    there)."""
    for name, ver in RELAXED.items():
        if name not in names:
            continue
        have = [f.name for f in dest.glob("*.whl") if wheel_matches(f.name, name, ver, version)]
        if have and not force:
            continue
        if name in NEEDS_COMPILER:
            check_compiler()
        for old in have:
            (dest / old).unlink()
        with tempfile.TemporaryDirectory() as tmp:
            run(
                [python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", name,
                 "--ignore-requires-python",
                 "--dest", tmp, f"{name}=={ver}"],
                f"downloading the {name} {ver} sdist",
            )  # fmt: skip
            sdist = next(Path(tmp).glob("*.tar.gz"))
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
            src = next(p for p in Path(tmp).iterdir() if p.is_dir())
            pyproject = src / "pyproject.toml"
            pyproject.write_text(relax_requires_python(pyproject.read_text()))
            run(
                [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dest, src],
                f"building {name} {ver} from its sdist",
            )


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"
