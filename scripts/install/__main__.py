"""`python -m scripts.install venv|wheelhouse` (the package's docstring says what they do)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from scripts.checkout import ROOT
from scripts.install import lacks
from scripts.install.box import BOX_DIR, describe, is_box, link_box, probe_torch, unlink_box
from scripts.install.rules import RELAXED, InstallError, minimum_torch, torch_plan, wheel_matches
from scripts.install.steps import (
    MANIFEST,
    build_relaxed,
    check_compiler,
    check_python,
    project,
    requirements,
    run,
    venv_python,
)
from scripts.install.wheelhouse import wheelhouse


def pip_sources(wheels: Path | None, find_links: list[Path]) -> list[str]:
    """--no-index with only the wheelhouse when offline; extra --find-links otherwise."""
    args = ["--no-index", "--find-links", str(wheels)] if wheels else []
    for d in find_links:
        args += ["--find-links", str(d)]
    return args


def offline_relaxed(wheels: Path, version: tuple[int, int], skip=()) -> None:
    missing = [
        f"{name} {ver}"
        for name, ver in RELAXED.items()
        if name not in skip
        and not any(wheel_matches(f.name, name, ver, version) for f in wheels.glob("*.whl"))
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


def read_manifest(wheels: Path, version: tuple[int, int]) -> dict:
    """The wheelhouse's wheelhouse.json ({} for a folder of wheels without one)."""
    path = wheels / MANIFEST
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    made_for = manifest.get("python", f"{version[0]}.{version[1]}")
    if made_for != f"{version[0]}.{version[1]}":
        raise InstallError(
            f"the wheelhouse is for Python {made_for}, this is {version[0]}.{version[1]}: pass "
            f"PYTHON=python{made_for}, or build it with make wheelhouse PYTHON=python"
            f"{version[0]}.{version[1]}"
        )
    return manifest


def check_box(from_box: dict) -> None:
    """Each distribution the wheelhouse left to the box is in this interpreter, in a version
    that meets what was asked of it."""
    for name, m in from_box.items():
        rebuild = f"(make wheelhouse HAVE=box-pip-list.txt, from `{sys.executable} -m pip list`)"
        try:
            have = importlib.metadata.version(m["box"])
        except importlib.metadata.PackageNotFoundError:
            raise InstallError(
                f"the wheelhouse left {name} out for the box's own {m['box']}, but "
                f"{sys.executable} has none: install it here, or build the wheelhouse from this "
                f"Python's list {rebuild}"
            ) from None
        unmet = [f"{req} ({who})" for req, who in m["needs"]
                 if not lacks.satisfies(have, lacks.parse(req).specifier)]  # fmt: skip
        if unmet:
            raise InstallError(
                f"the wheelhouse left {name} out for the box's own, but {sys.executable} has "
                f"{m['box']} {have}, which does not meet {', '.join(unmet)}: upgrade it here, or "
                f"build the wheelhouse from this Python's list {rebuild}"
            )


def install(venv: Path, torch_mode: str, wheels_arg: Path | None, extras: str | None) -> None:
    version = check_python()
    print(f"Python {sys.version.split()[0]}: {sys.executable} (PYTHON=... picks another)")
    spec = project()
    if version < (3, 13) and wheels_arg is None:
        check_compiler()  # before anything is made: nes-py's build needs one
    with tempfile.TemporaryDirectory() as tmp:
        wheels = unpack(wheels_arg, Path(tmp)) if wheels_arg else None
        manifest = read_manifest(wheels, version) if wheels else {}
        from_box = manifest.get("from_box", {})
        extras = manifest.get("extras", "dev") if extras is None else extras
        if "torch" in from_box:
            if torch_mode == "venv":
                raise InstallError(
                    f"WHEELS={wheels_arg} has no torch (it was made for a box with its own): "
                    "leave TORCH at auto, or build one with make wheelhouse TORCH=venv"
                )
            torch_mode = "box"
        check_box({n: m for n, m in from_box.items() if n != "torch"})
        found, problem = probe_torch(sys.executable)
        reuse, why = torch_plan(torch_mode, found, minimum_torch(spec["dependencies"]), problem)
        if wheels and version < (3, 13):
            offline_relaxed(wheels, version, skip=from_box)
        py = make_venv(venv, version)
        site = site_packages(py)
        if not wheels:
            run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
        borrowed = [m["box"] for n, m in from_box.items() if n != "torch"]
        if reuse or borrowed:
            n = link_box(venv, site, ["torch"] * reuse + borrowed)
            print(f"linked into {venv / BOX_DIR} from the interpreter ({n} files; nothing "
                  f"downloaded): {', '.join(['torch'] * reuse + borrowed)} and what they require")  # fmt: skip
        else:
            unlink_box(venv, site)
        print(f"torch: {why}" if reuse else f"torch: installed into the venv ({why})")
        find_links = []
        if version < (3, 13) and not wheels:
            built = venv / "relaxed-wheels"
            built.mkdir(exist_ok=True)
            build_relaxed(py, built, version, force=False)
            find_links.append(built)
        sources = pip_sources(wheels, find_links)
        target = f"{ROOT}[{extras}]" if extras else str(ROOT)
        # a requirement the box meets under another name (its opencv-python for the project's
        # opencv-python-headless) is not one pip can see met: the rest first, then the project
        other_names = {n for n, m in from_box.items() if m["box"] != n}
        if other_names:
            reqs = [r for r in requirements(spec, extras) if lacks.parse(r).name not in other_names]
            run([py, "-m", "pip", "install", "--quiet", *sources, *reqs], "pip install")
            run([py, "-m", "pip", "install", "--quiet", "--no-deps", *sources, "-e", target],
                "pip install")  # fmt: skip
        else:
            run([py, "-m", "pip", "install", "--quiet", *sources, "-e", target], "pip install")
    now, problem = probe_torch(str(py))
    if now is None:
        raise InstallError(f"the venv cannot import torch: {problem}")
    if reuse and not is_box(now):
        print(f"warning: {venv}'s own torch shadows the interpreter's: pip uninstall it there")
    print(describe(now, venv))


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
    w.add_argument("--have", type=Path, help="the box's `pip list` (or --format=freeze) output")
    w.add_argument("--skip", default="", help="what the box has: names or name==version, a,b")
    for s in (v, w):
        s.add_argument("--torch", default="auto", choices=["auto", "box", "venv"])
        s.add_argument(
            "--extras",
            help="optional extras to include (comma list; '' for none): dev unless the "
            "wheelhouse says which it was built with",
        )
    args = p.parse_args(argv)
    try:
        if args.command == "venv":
            install(args.venv, args.torch, args.wheels, args.extras)
        else:
            extras = "dev" if args.extras is None else args.extras
            wheelhouse(args.out, args.torch, extras, args.have, args.skip)
    except InstallError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
