"""Install the project into a venv, or build a wheelhouse for a box with no package index.

Runs under the interpreter the venv is made from (the Makefile's PYTHON), with the standard
library only, from the project root (docs/DEPLOY.md, "GPU boxes"):

    python -m scripts.install venv --venv .venv [--torch auto|box|venv] [--wheels DIR|FILE.tar]
    python -m scripts.install wheelhouse --out DIR [--torch auto|box|venv]

Python 3.12 and 3.13. nes-py 9.0.1 and gym-super-mario-bros 9.1.0 publish metadata that asks for
3.13; on 3.12 they are built from their published sdists with only `requires-python` relaxed
(their code is untouched). Where torch comes from (`--torch`):
  auto  the interpreter's own torch when it is a CUDA build of a supported version, else the venv's
  box   the interpreter's own torch (refused when it has none, or one too old)
  venv  pip installs torch into the venv
and for a wheelhouse, whether the target box has its own torch (box: left out; venv: included;
auto: left out when the interpreter building it has a CUDA torch, as the box it stands for will).
The interpreter's torch reaches the venv as symlinks to its files and to those of the packages it
requires (not the rest of the interpreter's packages), so nothing of it is downloaded or copied.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORTED = ((3, 12), (3, 13))
# sdists whose metadata asks for Python 3.13; their code builds and runs on 3.12
RELAXED = {"nes-py": "9.0.1", "gym-super-mario-bros": "9.1.0"}
NEEDS_COMPILER = {"nes-py"}
BOX_DIR = "box-torch"  # in the venv: symlinks to the interpreter's torch and its requirements
BOX_PTH = "mario_box_torch.pth"


class InstallError(Exception):
    """A problem the user fixes; its message says how."""


# ---- pure rules ---------------------------------------------------------------------------------


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
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not m:
        raise ValueError(f"not a requirement: {req!r}")
    return norm(m.group(1))


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


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


# ---- the interpreter and its torch -------------------------------------------------------------


def check_python() -> tuple[int, int]:
    v = sys.version_info[:2]
    if v not in SUPPORTED:
        raise InstallError(
            f"{sys.executable} is Python {v[0]}.{v[1]}; the project runs on 3.12 and 3.13: "
            "pass PYTHON=/path/to/python3.13 (or python3.12)"
        )
    return v


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


def torch_closure() -> list[importlib.metadata.Distribution]:
    """torch and every installed distribution it requires (with the extras it asks for), in
    this interpreter."""
    out: dict[str, importlib.metadata.Distribution] = {}
    asked: dict[str, set[str]] = {}
    todo = [("torch", set())]
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


def link_box_torch(venv: Path, site: Path) -> int:
    """Mirror the interpreter's torch and the distributions it requires into VENV/box-torch,
    every file a symlink to the interpreter's (folders are real, so that pip, uninstalling one
    in the venv, removes links and never the interpreter's files), and put that folder on the
    venv's path after the venv's own packages. Returns the number of files linked."""
    box = venv / BOX_DIR
    shutil.rmtree(box, ignore_errors=True)
    box.mkdir()
    dists = torch_closure()
    if not dists or norm(dists[0].metadata["Name"]) != "torch" or dists[0].files is None:
        raise InstallError(
            f"{sys.executable} imports torch but has no record of its files (installed without "
            "pip?): use TORCH=venv"
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
    (site / BOX_PTH).write_text(f"{box}\n")
    return n


def unlink_box_torch(venv: Path, site: Path) -> None:
    (site / BOX_PTH).unlink(missing_ok=True)
    shutil.rmtree(venv / BOX_DIR, ignore_errors=True)


# ---- pip ----------------------------------------------------------------------------------------


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


def describe(t: Torch, venv: Path) -> str:
    build = f"CUDA {t.cuda} build" if t.cuda else "CPU build"
    seen = "CUDA visible" if t.cuda_available else "no CUDA device visible"
    if is_box(t):
        where = f"the interpreter's own, linked from {Path(t.path).resolve().parent.parent}"
    else:
        where = f"installed in {venv}"
    return f"torch {t.version} ({build}, {seen}): {where}"


def is_box(t: Torch) -> bool:
    """The venv's torch is the interpreter's (through VENV/box-torch)."""
    return Path(t.path).parent.parent.name == BOX_DIR


# ---- commands -----------------------------------------------------------------------------------


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
    reqs += project_build_requires()
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


def project_build_requires() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(data.get("build-system", {}).get("requires", []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m scripts.install", description=__doc__.split("\n")[0]
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
