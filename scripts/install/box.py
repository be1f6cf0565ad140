"""The interpreter's torch: what it is (probed in a child process) and how a venv borrows it, and
the interpreter's other distributions that a wheelhouse left out (a mirror of symlinks to their
files and to those of the distributions they require)."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

from scripts.install.rules import InstallError, Torch, norm, parse_requirement, wanted

# in the venv: symlinks to the interpreter's torch (and the distributions a wheelhouse left out
# for the box's own) and to their requirements
BOX_DIR = "box-torch"
BOX_PTH = "mario_box_torch.pth"


def probe_torch(python: str) -> tuple[Torch | None, str]:
    """torch as `python` imports it, or (None, why not)."""
    code = (
        "import json, torch; print(json.dumps({'version': torch.__version__, "
        "'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(), "
        "'path': torch.__file__}))"
    )
    try:
        r = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
    except subprocess.TimeoutExpired:
        return None, "import torch took over 300 s"
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit {r.returncode}"
    return Torch(**json.loads(r.stdout.strip().splitlines()[-1])), ""


def closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """`names` and every installed distribution they require (with the extras asked), in this
    interpreter."""
    out: dict[str, importlib.metadata.Distribution] = {}
    asked: dict[str, set[str]] = {}
    todo = [(norm(n), set()) for n in reversed(names)]
    while todo:
        name, extras = todo.pop()
        if name in out and extras <= asked[name]:
            continue
        asked[name] = asked.get(name, set()) | extras
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement that is not here
        out[name] = dist
        for req in dist.requires or []:
            dep, dep_extras, marker = parse_requirement(req)
            if wanted(marker, asked[name]):
                todo.append((dep, dep_extras))
    return list(out.values())


def link_box(venv: Path, site: Path, names: list[str]) -> int:
    """Mirror the interpreter's distributions `names` (torch, or what a wheelhouse left out) and
    those they require into VENV/box-torch, every file a symlink to the interpreter's (folders
    are real, so that pip, uninstalling one in the venv, removes links and never the
    interpreter's files), and put that folder on the venv's path after the venv's own packages.
    Returns the number of files linked."""
    box = venv / BOX_DIR
    shutil.rmtree(box, ignore_errors=True)
    box.mkdir()
    dists = closure(names)
    found = {norm(d.metadata["Name"]): d for d in dists}
    for name in names:
        if name not in found or found[name].files is None:
            fix = (
                "use TORCH=venv"
                if name == "torch"
                else "build the wheelhouse with it (not in HAVE or SKIP) to install it in the venv"
            )
            raise InstallError(
                f"{sys.executable} has no record of {name}'s files (installed without pip?): {fix}"
            )
    n = 0
    for dist in dists:
        for f in dist.files or ():
            if not f.parts or f.parts[0] == ".." or "__pycache__" in f.parts:
                continue  # scripts in bin/, compiled caches
            source, link = Path(dist.locate_file(f)), box / f
            if source.is_file() and not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(source)
                n += 1
    (site / BOX_PTH).write_text(f"{box.resolve()}\n")  # a relative line would be read from site
    return n


def unlink_box(venv: Path, site: Path) -> None:
    (site / BOX_PTH).unlink(missing_ok=True)
    shutil.rmtree(venv / BOX_DIR, ignore_errors=True)


def is_box(t: Torch) -> bool:
    """The venv's torch is the interpreter's (through VENV/box-torch)."""
    return Path(t.path).parent.parent.name == BOX_DIR


def describe(t: Torch, venv: Path) -> str:
    build = f"CUDA {t.cuda} build" if t.cuda else "CPU build"
    seen = "CUDA visible" if t.cuda_available else "no CUDA device visible"
    if is_box(t):
        where = f"the interpreter's own, linked from {Path(t.path).resolve().parent.parent}"
    else:
        where = f"installed in {venv}"
    return f"torch {t.version} ({build}, {seen}): {where}"
