"""`python -m scripts.install venv|wheelhouse` (the package's docstring says what they do)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

from scripts.checkout import ROOT
from scripts.install.box import (
    BOX_DIR,
    describe,
    is_box,
    link_box_torch,
    probe_torch,
    unlink_box_torch,
)
from scripts.install.rules import (
    NEEDS_COMPILER,
    RELAXED,
    SUPPORTED,
    InstallError,
    minimum_torch,
    relax_requires_python,
    requirement_name,
    torch_plan,
    wheel_matches,
)


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project() -> dict:
    return pyproject()["project"]


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


def pip_sources(wheels: Path | None, find_links: list[Path]) -> list[str]:
    """--no-index with only the wheelhouse when offline; extra --find-links otherwise."""
    args = ["--no-index", "--find-links", str(wheels)] if wheels else []
    for d in find_links:
        args += ["--find-links", str(d)]
    return args


def check_compiler() -> None:
    cxx = os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"
    exe = cxx.split()[0]
    if not shutil.which(exe):
        raise InstallError(
            f"no C++ compiler ({exe} not found): on Python 3.12 nes-py is built from its source. "
            "Install one (Debian/Ubuntu: apt-get install g++) or point CXX at it; or build a "
            "wheelhouse on a machine that has one (make wheelhouse) and install with WHEELS=..."
        )


def build_relaxed(python: Path, dest: Path, version: tuple[int, int], force: bool) -> None:
    """Wheels of RELAXED's sdists for `python` in `dest` (kept when already there)."""
    for name, ver in RELAXED.items():
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


def offline_relaxed(wheels: Path, version: tuple[int, int]) -> None:
    missing = [
        f"{name} {ver}"
        for name, ver in RELAXED.items()
        if not any(wheel_matches(f.name, name, ver, version) for f in wheels.glob("*.whl"))
    ]
    if missing:
        raise InstallError(
            f"the wheelhouse {wheels} has no wheel of {', '.join(missing)} for Python "
            f"{version[0]}.{version[1]}: build it with make wheelhouse PYTHON=python"
            f"{version[0]}.{version[1]} OUT=dir"
        )


def unpack(wheels: Path, into: Path) -> Path:
    """WHEELS is a folder or a .tar of one (as make wheelhouse writes both)."""
    if wheels.is_dir():
        return wheels.resolve()
    if wheels.is_file() and tarfile.is_tarfile(wheels):
        with tarfile.open(wheels) as tar:
            tar.extractall(into, filter="data")
        return into
    raise InstallError(f"WHEELS={wheels}: not a folder or a .tar of wheels")


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_venv(venv: Path, version: tuple[int, int]) -> Path:
    py = venv_python(venv)
    if py.exists():
        r = subprocess.run(
            [py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        have = r.stdout.strip()
        if have != f"{version[0]}.{version[1]}":
            raise InstallError(
                f"{venv} holds Python {have or '(broken)'}, not {version[0]}.{version[1]}: "
                f"remove it (rm -rf {venv}) or pass VENV=another/dir"
            )
        return py
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], check=False)
    if r.returncode != 0:
        raise InstallError(
            f"{sys.executable} could not make a venv (on Debian/Ubuntu: apt-get install "
            f"python{version[0]}.{version[1]}-venv)"
        )
    return py


def site_packages(py: Path) -> Path:
    out = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def install(venv: Path, torch_mode: str, wheels_arg: Path | None, extras: str) -> None:
    version = check_python()
    print(f"Python {sys.version.split()[0]}: {sys.executable} (PYTHON=... picks another)")
    spec = project()
    if version < (3, 13) and wheels_arg is None:
        check_compiler()  # before anything is made: nes-py's build needs one
    found, problem = probe_torch(sys.executable)
    reuse, why = torch_plan(torch_mode, found, minimum_torch(spec["dependencies"]), problem)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = unpack(wheels_arg, Path(tmp)) if wheels_arg else None
        if wheels and version < (3, 13):
            offline_relaxed(wheels, version)
        py = make_venv(venv, version)
        site = site_packages(py)
        if not wheels:
            run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
        if reuse:
            n = link_box_torch(venv, site)
            print(f"torch: {why}, linked into {venv / BOX_DIR} ({n} files; nothing downloaded)")
        else:
            unlink_box_torch(venv, site)
            print(f"torch: installed into the venv ({why})")
        find_links = []
        if version < (3, 13) and not wheels:
            built = venv / "relaxed-wheels"
            built.mkdir(exist_ok=True)
            build_relaxed(py, built, version, force=False)
            find_links.append(built)
        sources = pip_sources(wheels, find_links)
        target = f"{ROOT}[{extras}]" if extras else str(ROOT)
        run([py, "-m", "pip", "install", "--quiet", *sources, "-e", target], "pip install")
    now, problem = probe_torch(str(py))
    if now is None:
        raise InstallError(f"the venv cannot import torch: {problem}")
    if reuse and not is_box(now):
        print(f"warning: {venv}'s own torch shadows the interpreter's: pip uninstall it there")
    print(describe(now, venv))


def wheelhouse(out: Path, torch_mode: str, extras: str) -> None:
    version = check_python()
    spec = project()
    if torch_mode == "auto":
        found, problem = probe_torch(sys.executable)
        leave_out, why = torch_plan("auto", found, minimum_torch(spec["dependencies"]), problem)
        why = f"{why} is the target's" if leave_out else why
    else:  # box: the target has its own torch; venv: it needs one from here
        leave_out, why = torch_mode == "box", f"TORCH={torch_mode}"
    check_compiler()
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    reqs = list(spec["dependencies"])
    for extra in filter(None, extras.split(",")):
        reqs += spec.get("optional-dependencies", {}).get(extra, [])
    if leave_out:
        reqs = [r for r in reqs if requirement_name(r) != "torch"]
    # the project's build backend, which pip's isolated build of the checkout needs offline
    reqs += pyproject().get("build-system", {}).get("requires", [])
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        run([sys.executable, "-m", "venv", venv], "making a build venv")
        py = venv_python(venv)
        run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
        build_relaxed(py, out, version, force=True)
        run(
            [py, "-m", "pip", "wheel", "--quiet", "--wheel-dir", out, "--find-links", out, *reqs],
            "pip wheel",
        )
    manifest = {
        "python": f"{version[0]}.{version[1]}",
        "platform": sysconfig.get_platform(),
        "torch": f"left out ({why})" if leave_out else "included",
        "extras": extras,
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wheels": sorted(f.name for f in out.glob("*.whl")),
    }
    (out / "wheelhouse.json").write_text(json.dumps(manifest, indent=1) + "\n")
    archive = out.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for f in sorted(out.iterdir()):
            tar.add(f, arcname=f.name)
    mb = archive.stat().st_size / 2**20
    print(
        f"{len(manifest['wheels'])} wheels for Python {manifest['python']} in {out}, torch "
        f"{manifest['torch']}; one file to copy: {archive} ({mb:.0f} MB). On the box: "
        f"make install PYTHON=python{manifest['python']} WHEELS={archive.name}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.install",
        description=sys.modules["scripts.install"].__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("venv", help="make (or update) the venv and install the project into it")
    v.add_argument("--venv", type=Path, required=True)
    v.add_argument("--wheels", type=Path, help="install only from this wheelhouse (folder or .tar)")
    w = sub.add_parser("wheelhouse", help="every wheel the project needs for this Python")
    w.add_argument("--out", type=Path, required=True, help="folder; OUT.tar is written beside it")
    for s in (v, w):
        s.add_argument("--torch", default="auto", choices=["auto", "box", "venv"])
        s.add_argument("--extras", default="dev", help="optional extras to include (comma list)")
    args = p.parse_args(argv)
    try:
        if args.command == "venv":
            install(args.venv, args.torch, args.wheels, args.extras)
        else:
            wheelhouse(args.out, args.torch, args.extras)
    except InstallError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
