"""`python -m scripts.install wheelhouse`: every wheel a box with no package index needs, less
what its Python already has in a version the project accepts (HAVE, SKIP, TORCH), with a
manifest that `make install WHEELS=` reads."""

from __future__ import annotations

import email.parser
import json
import os
import platform
import shutil
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from scripts.install import lacks
from scripts.install.box import probe_torch
from scripts.install.rules import InstallError, minimum_torch, norm, torch_plan
from scripts.install.steps import (
    MANIFEST,
    build_relaxed,
    check_compiler,
    check_python,
    project,
    pyproject,
    requirements,
    run,
    venv_python,
)


def marker_env() -> dict[str, str]:
    """PEP 508's marker variables for this interpreter (the target's Python and platform)."""
    v = sys.version_info
    return {
        "python_version": f"{v[0]}.{v[1]}",
        "python_full_version": platform.python_version(),
        "implementation_name": sys.implementation.name,
        "implementation_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "platform_machine": platform.machine(),
        "platform_system": platform.system(),
        "platform_release": platform.release(),
        "sys_platform": sys.platform,
        "os_name": os.name,
    }


def wheel_dist(path: Path) -> tuple[str, lacks.Dist]:
    """(name, version and Requires-Dist) from a wheel's METADATA."""
    with zipfile.ZipFile(path) as z:
        meta = next(
            n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        )
        msg = email.parser.Parser().parsestr(z.read(meta).decode())
    return norm(msg["Name"]), lacks.Dist(msg["Version"], tuple(msg.get_all("Requires-Dist") or ()))


def the_box(have: Path | None, skip: str, torch_mode: str, spec: dict) -> tuple[dict, str]:
    """What the target Python has (name -> version; None: named, version unknown) and where its
    torch is known from. HAVE (its `pip list`) and SKIP say; TORCH=box adds torch, TORCH=venv
    takes it away, and TORCH=auto with neither HAVE nor SKIP takes this interpreter's."""
    box: dict[str, str | None] = {}
    if have is not None:
        if not have.is_file():
            raise InstallError(
                f"HAVE={have}: no such file (write it on the box: python -m pip list > {have.name})"
            )
        box.update(lacks.parse_pip_list(have.read_text(), f"HAVE={have}"))
    box.update(lacks.parse_skip(skip))
    if torch_mode == "venv":
        box.pop("torch", None)
        return box, "TORCH=venv"
    if "torch" in box:
        return box, "SKIP" if "torch" in lacks.parse_skip(skip) else f"HAVE={have}"
    if torch_mode == "box":
        box["torch"] = None
        return box, "TORCH=box"
    if have is None and not skip:
        found, problem = probe_torch(sys.executable)
        take, why = torch_plan("auto", found, minimum_torch(spec["dependencies"]), problem)
        if take:
            box["torch"] = found.version
        return box, f"{why} stands for the box's" if take else why
    return box, "the box has none"


def wheelhouse(out: Path, torch_mode: str, extras: str, have: Path | None, skip: str) -> None:
    version = check_python()
    spec = project()
    box, torch_source = the_box(have, skip, torch_mode, spec)
    roots = requirements(spec, extras)
    env = marker_env()
    # what to fetch: the project's requirements the box does not meet (their own requirements
    # come along; those the box meets are dropped below, once their versions are known)
    first = lacks.select(roots, {}, box, env)
    fetch = [r for r in roots if lacks.parse(r).name in first.keep]
    # the project's build backend: pip's isolated build of the checkout needs it on the box
    build = pyproject().get("build-system", {}).get("requires", [])
    check_compiler()
    with tempfile.TemporaryDirectory() as tmp:
        every = Path(tmp) / "wheels"
        every.mkdir()
        venv = Path(tmp) / "venv"
        run([sys.executable, "-m", "venv", venv], "making a build venv")
        py = venv_python(venv)
        run([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip")
        build_relaxed(py, every, version, force=True, names=first.keep)
        run(
            [py, "-m", "pip", "wheel", "--quiet", "--wheel-dir", every, "--find-links", every,
             *fetch, *build],
            "pip wheel",
        )  # fmt: skip
        files = {wheel_dist(f)[0]: f for f in every.glob("*.whl")}
        dists = {name: wheel_dist(f)[1] for name, f in files.items()}
        chosen = lacks.select(roots, dists, box, env)
        missing = sorted(chosen.keep - set(files))
        if missing:
            raise InstallError(f"pip made no wheel of {', '.join(missing)}: its output is above")
        keep = chosen.keep | {lacks.parse(r).name for r in build}
        out.mkdir(parents=True, exist_ok=True)
        out = out.resolve()
        for old in out.glob("*.whl"):
            old.unlink()
        for name in sorted(keep):
            shutil.copy2(files[name], out)
    write_manifest(out, version, extras, chosen, torch_source)


def write_manifest(
    out: Path, version: tuple[int, int], extras: str, chosen: lacks.Selection, torch_source: str
) -> None:
    from_box = {
        name: {"box": m.box_name, "version": m.box_version, "needs": list(m.needs)}
        for name, m in sorted(chosen.from_box.items())
    }
    torch = from_box.get("torch")
    torch_line = f"left out ({torch_source})" if torch else f"included ({torch_source})"
    manifest = {
        "python": f"{version[0]}.{version[1]}",
        "platform": sysconfig.get_platform(),
        "torch": torch_line,
        "extras": extras,
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wheels": sorted(f.name for f in out.glob("*.whl")),
        "from_box": from_box,
        "kept_although_the_box_has_it": dict(sorted(chosen.why_kept.items())),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    archive = out.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for f in sorted(out.iterdir()):
            tar.add(f, arcname=f.name)
    for name, m in from_box.items():
        has = (
            f"{m['box']} {m['version']}"
            if m["version"]
            else f"{m['box']} (SKIP: checked at install)"
        )
        print(f"left out: {name}, the box has {has}")
    for name, why in chosen.why_kept.items():
        print(f"included: {name}, as {why}")
    mb = archive.stat().st_size / 2**20
    print(
        f"{len(manifest['wheels'])} wheels for Python {manifest['python']} in {out}, torch "
        f"{manifest['torch']}, extras: {extras or 'none'}; one file to copy: {archive} "
        f"({mb:.0f} MB). On the box: make install PYTHON=python{manifest['python']} "
        f"WHEELS={archive.name}"
    )
