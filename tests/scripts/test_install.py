"""Installing where GPU users are (scripts/install.py, the Makefile's interpreter search): the
rules against tables, the refusals through the real command, the interpreter's torch linked into
a real venv, and (slow) a wheelhouse built and installed from with the package index off, then
one real training step in the venv it made."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from scripts.install import box, rules
from scripts.install.__main__ import project, site_packages
from scripts.install.rules import InstallError, Torch
from tests import procs

ROOT = procs.ROOT


def python(version: str) -> str | None:
    """A python`version` on this machine (PATH or pyenv), as the Makefile searches."""
    p = shutil.which(f"python{version}")
    if p and _runs(p, version):
        return p
    for p in sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python{version}")):
        if _runs(str(p), version):
            return str(p)
    return None


def _runs(p: str, version: str) -> bool:
    r = subprocess.run([p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       capture_output=True, text=True, check=False)  # fmt: skip
    return r.returncode == 0 and r.stdout.strip() == version


def scripts_install(py: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [py, "-m", "scripts.install", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


# ---- rules --------------------------------------------------------------------------------------

CUDA = Torch("2.14.1+cu130", "13.0", True, "/box/site-packages/torch/__init__.py")
CPU = Torch("2.14.1+cpu", None, False, "/box/site-packages/torch/__init__.py")
OLD = Torch("2.3.0", "12.1", True, "/box/site-packages/torch/__init__.py")


@pytest.mark.parametrize(
    ("mode", "found", "reuse"),
    [
        ("auto", CUDA, True),
        ("auto", CPU, False),  # a CPU build on a GPU box would train on the CPU: not taken unasked
        ("auto", OLD, False),
        ("auto", None, False),
        ("box", CUDA, True),
        ("box", CPU, True),
        ("venv", CUDA, False),
        ("venv", None, False),
    ],
)
def test_torch_plan(mode, found, reuse):
    assert rules.torch_plan(mode, found, (2, 6))[0] is reuse


@pytest.mark.parametrize(("found", "words"), [(None, "cannot import torch"), (OLD, "older than")])
def test_torch_box_refuses_what_it_cannot_use(found, words):
    with pytest.raises(InstallError, match=words) as e:
        rules.torch_plan("box", found, (2, 6))
    assert "TORCH=venv" in str(e.value)


def test_minimum_torch_is_the_projects():
    assert rules.minimum_torch(project()["dependencies"]) >= (2, 6)
    assert rules.minimum_torch(["numpy>=2", "torch >= 2.7.1"]) == (2, 7, 1)
    assert rules.version_tuple("2.14.1+cu130") == (2, 14, 1)


def test_relax_changes_only_requires_python():
    text = '[project]\nname = "nes_py"\nrequires-python = ">=3.13"\nversion = "9.0.1"\n'
    relaxed = rules.relax_requires_python(text)
    assert relaxed == text.replace('">=3.13"', '">=3.12"')
    with pytest.raises(InstallError, match="requires-python"):
        rules.relax_requires_python('[project]\nname = "x"\n')


@pytest.mark.parametrize(
    ("filename", "ok"),
    [
        ("nes_py-9.0.1-cp312-cp312-linux_x86_64.whl", True),
        ("nes_py-9.0.1-cp313-cp313-linux_x86_64.whl", False),
        ("nes_py-9.0.0-cp312-cp312-linux_x86_64.whl", False),
        ("gym_super_mario_bros-9.1.0-py3-none-any.whl", False),
    ],
)
def test_wheel_matches(filename, ok):
    assert rules.wheel_matches(filename, "nes-py", "9.0.1", (3, 12)) is ok


def test_pure_wheel_matches_any_cpython():
    name = "gym_super_mario_bros-9.1.0-py3-none-any.whl"
    assert rules.wheel_matches(name, "gym-super-mario-bros", "9.1.0", (3, 12))


# ---- the Makefile's interpreter search ----------------------------------------------------------


def make_n(tmp_path: Path, *variables: str, home: Path, path: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "PATH": path}
    return subprocess.run(
        ["make", "-n", "--no-print-directory", "install", f"VENV={tmp_path / 'v'}", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def bare_path(tmp_path: Path) -> str:
    """A PATH with make and the shell's tools but no python3.12 or 3.13."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for tool in ("make", "bash", "sh", "test"):
        if (t := shutil.which(tool)) and not (bin_ / tool).exists():
            (bin_ / tool).symlink_to(t)
    return str(bin_)


@pytest.fixture
def py312():
    p = python("3.12")
    if p is None:
        pytest.skip("no python3.12 on this machine (PATH or pyenv)")
    return p


def test_search_finds_pyenv_and_uv_pythons_and_says_none(tmp_path, py312):
    path = bare_path(tmp_path)
    home = tmp_path / "home"
    uv = home / ".local/share/uv/python/cpython-3.12.9-linux-x86_64-gnu/bin"
    uv.mkdir(parents=True)
    (uv / "python3.12").symlink_to(py312)
    r = make_n(tmp_path, home=home, path=path)
    assert r.returncode == 0, r.stderr
    assert f"{uv / 'python3.12'} -m scripts.install venv" in r.stdout
    pyenv = home / ".pyenv/versions/3.12.9/bin"
    pyenv.mkdir(parents=True)
    (pyenv / "python3.12").symlink_to(py312)
    r = make_n(tmp_path, home=home, path=path)
    assert f"{pyenv / 'python3.12'} -m scripts.install venv" in r.stdout  # pyenv before uv
    r = make_n(tmp_path, "PYTHON=/opt/my/python", home=home, path=path)
    assert "/opt/my/python -m scripts.install venv" in r.stdout  # a path: taken as given
    r = make_n(tmp_path, "PYTHON=python3.12", home=home, path=path)
    assert f"{pyenv / 'python3.12'} -m scripts.install venv" in r.stdout  # a name: searched for
    r = make_n(tmp_path, "PYTHON=python3.9", home=home, path=path)
    assert "PYTHON=python3.9 not found" in r.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run(  # not -n: the refusal is what runs
        ["make", "--no-print-directory", "install", f"VENV={tmp_path / 'v'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"HOME": str(empty), "PATH": path},
        check=False,
    )
    assert r.returncode != 0
    assert "no python3.13 or python3.12 found" in r.stderr and "PYTHON=" in r.stderr


def test_old_variable_is_refused_naming_the_new(tmp_path):
    r = subprocess.run(
        ["make", "-n", "install", "PYTHON313=/usr/bin/python3.13", f"VENV={tmp_path / 'v'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "PYTHON=" in r.stderr


# ---- refusals through the real command ----------------------------------------------------------


def test_unsupported_python_is_refused(tmp_path):
    py311 = python("3.11")
    if py311 is None:
        pytest.skip("no python3.11 here to be refused")
    r = scripts_install(py311, "venv", "--venv", str(tmp_path / "v"))
    assert r.returncode == 1
    assert "3.12 and 3.13" in r.stderr and "PYTHON=" in r.stderr
    assert not (tmp_path / "v").exists()


def test_312_without_a_compiler_is_refused_before_anything_is_made(tmp_path, py312):
    env = dict(os.environ, CXX=str(tmp_path / "no-such-c++"))
    r = scripts_install(py312, "venv", "--venv", str(tmp_path / "v"), env=env)
    assert r.returncode == 1
    assert "no C++ compiler" in r.stderr and "nes-py" in r.stderr and "WHEELS=" in r.stderr
    assert not (tmp_path / "v").exists()


def test_a_wheelhouse_without_nes_py_names_it(tmp_path, py312):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    r = scripts_install(py312, "venv", "--venv", str(tmp_path / "v"), "--wheels", str(wheels))
    assert r.returncode == 1
    assert "nes-py 9.0.1" in r.stderr and "make wheelhouse PYTHON=python3.12" in r.stderr


def test_an_existing_venv_of_another_python_is_refused(tmp_path, py312):
    other = python("3.13") or python("3.11")
    if other is None:
        pytest.skip("no Python but 3.12 here to make the other venv with")
    subprocess.run([other, "-m", "venv", "--without-pip", tmp_path / "v"], check=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("nes_py-9.0.1-cp312-cp312-linux_x86_64.whl",
                 "gym_super_mario_bros-9.1.0-py3-none-any.whl"):  # fmt: skip
        (wheels / name).touch()
    r = scripts_install(py312, "venv", "--venv", str(tmp_path / "v"), "--wheels", str(wheels))
    assert r.returncode == 1
    assert "not 3.12" in r.stderr and "rm -rf" in r.stderr


def test_install_checks_what_the_wheelhouse_left_to_the_box_before_making_anything(tmp_path):
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    wheels = tmp_path / "wheels"
    wheels.mkdir()

    def install(from_box: dict, python: str = here) -> subprocess.CompletedProcess:
        manifest = {"python": python, "extras": "", "from_box": from_box}
        (wheels / "wheelhouse.json").write_text(json.dumps(manifest))
        return scripts_install(sys.executable, "venv", "--venv", str(tmp_path / "v"),
                               "--wheels", str(wheels))  # fmt: skip

    old = {"numpy": {"box": "numpy", "version": "99.0", "needs": [["numpy>=99", "the project"]]}}
    r = install(old)
    assert r.returncode == 1, r.stdout
    assert "numpy" in r.stderr and "does not meet numpy>=99 (the project)" in r.stderr
    assert "HAVE=" in r.stderr
    r = install({"opencv-python-headless": {"box": "no-such-opencv", "version": None, "needs": []}})
    assert r.returncode == 1 and "has none" in r.stderr and "no-such-opencv" in r.stderr
    r = install({}, python="3.12" if here != "3.12" else "3.13")
    assert r.returncode == 1 and "the wheelhouse is for Python" in r.stderr
    assert not (tmp_path / "v").exists()


def test_wheelhouse_names_a_missing_pip_list_and_make_passes_the_box_on(tmp_path):
    r = scripts_install(sys.executable, "wheelhouse", "--out", str(tmp_path / "w"),
                        "--have", str(tmp_path / "box.txt"))  # fmt: skip
    assert r.returncode == 1 and "pip list > box.txt" in r.stderr
    argv = ["make", "-n", "--no-print-directory", "wheelhouse", f"PYTHON={sys.executable}",
            "OUT=w", "EXTRAS=", "HAVE=box.txt", "SKIP=torch,numpy==2.2.6"]  # fmt: skip
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--extras '' --have box.txt --skip 'torch,numpy==2.2.6'" in r.stdout
    r = subprocess.run(argv[:5], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--extras" not in r.stdout and "--have" not in r.stdout  # the defaults: dev, nothing


# ---- the interpreter's torch in a real venv -----------------------------------------------------


def venv_site(venv: Path) -> Path:
    return site_packages(venv / "bin/python")


@pytest.mark.slow
@pytest.mark.rehearsal
def test_box_torch_is_linked_not_copied_and_pip_cannot_harm_it(tmp_path):
    """This interpreter's torch (and only what it requires) reaches a fresh venv as links; pip
    uninstalling one of them in the venv removes links, never the interpreter's files."""
    import filelock
    import torch

    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = venv_site(venv)
    box.link_box(venv, site, ["torch"])
    mirror = venv / box.BOX_DIR
    files = [p for p in mirror.rglob("*") if not p.is_dir()]
    assert files and all(p.is_symlink() for p in files)
    assert (mirror / "torch/__init__.py").resolve() == Path(torch.__file__).resolve()
    assert list(mirror.glob("nvidia_cuda_runtime*.dist-info")) or torch.version.cuda is None
    assert (
        not (mirror / "zmq").exists() and not (mirror / "msgpack").exists()
    )  # not the project's deps
    r = subprocess.run(
        [venv / "bin/python", "-c", "import torch; print(torch.__file__, torch.ones(2).sum())"],
        capture_output=True,
        text=True,
        check=True,
    )
    path, total = r.stdout.split(maxsplit=1)
    assert Path(path).resolve() == Path(torch.__file__).resolve() and "2." in total
    assert not list(site.glob("torch*"))  # nothing of torch in the venv itself

    real = Path(filelock.__file__).resolve()
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", venv / "bin/python", "uninstall", "-y",
         "filelock"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (mirror / "filelock/__init__.py").exists() and real.is_file()


# ---- the GPU-box path end to end ----------------------------------------------------------------


def box_python() -> str:
    """The interpreter that plays the GPU box's: Python 3.12 with torch when this checkout has
    the venv of `make test-fast PYTHON=python3.12 VENV=.venv-3.12` (CI makes it first), else
    the test's own interpreter (3.13 with torch)."""
    p = ROOT / ".venv-3.12" / "bin" / "python"
    if p.exists() and box.probe_torch(str(p))[0] is not None:
        return str(p)
    return sys.executable


def box_pip_list(box_py: str, path: Path) -> set[str]:
    """The box's `pip list` in `path`, cut to what a GPU box comes with: torch and what it
    requires, numpy, opencv (when the box has them). Returns those names."""
    code = (
        "from scripts.install.box import closure\n"
        "from scripts.install.rules import norm\n"
        "names = ['torch', 'numpy', 'opencv-python', 'opencv-python-headless']\n"
        "print(' '.join(norm(d.metadata['Name']) for d in closure(names)))\n"
    )
    r = subprocess.run([box_py, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    names = set(r.stdout.split())
    listed = subprocess.run([box_py, "-m", "pip", "list"], capture_output=True, text=True,
                            check=True).stdout.splitlines()  # fmt: skip
    kept = listed[:2] + [line for line in listed[2:] if rules.norm(line.split()[0]) in names]
    path.write_text("\n".join(kept) + "\n")
    return names


@pytest.mark.slow
@pytest.mark.rehearsal
@pytest.mark.integration
def test_offline_install_from_a_wheelhouse_reuses_the_box_torch_and_trains(tmp_path):
    """The runtime-only wheelhouse for a box that has torch, numpy (and opencv): built from the
    box's `pip list`, it holds none of them; a venv made from it with pip's index off borrows
    them from the box and trains."""
    box_py = box_python()
    box_torch, problem = box.probe_torch(box_py)
    assert box_torch is not None, problem
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    have = box_pip_list(box_py, tmp_path / "box-pip-list.txt")
    assert {"torch", "numpy"} <= have
    out = tmp_path / "wheelhouse"
    r = subprocess.run(
        ["make", "--no-print-directory", "wheelhouse", f"PYTHON={box_py}", f"OUT={out}",
         "EXTRAS=", f"HAVE={tmp_path / 'box-pip-list.txt'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads((out / "wheelhouse.json").read_text())
    version = tuple(int(v) for v in manifest["python"].split("."))
    assert manifest["torch"].startswith("left out") and manifest["extras"] == ""
    assert {"torch", "numpy"} <= set(manifest["from_box"])
    sent = {rules.norm(w.split("-")[0]) for w in manifest["wheels"]}
    build = {"setuptools"}  # the backend of pip's isolated build of the checkout: always sent
    assert not sent & (have - build | {"pytest", "ruff", "tensorboard"}), sent & have
    assert any(rules.wheel_matches(w, "nes-py", "9.0.1", version) for w in manifest["wheels"])
    archive = out.with_suffix(".tar")
    with tarfile.open(archive) as tar:
        assert set(manifest["wheels"]) <= set(tar.getnames())
    print(f"runtime-only wheelhouse for Python {manifest['python']}, the box having "
          f"{', '.join(sorted(manifest['from_box']))}: {archive.stat().st_size / 2**20:.1f} MB, "
          f"{len(manifest['wheels'])} wheels")  # fmt: skip
    assert archive.stat().st_size < 100 * 2**20  # a few tens of MB, not ~200

    # the box: no index (and none of this machine's pip settings), the archive only
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    venv = tmp_path / "venv"
    r = subprocess.run(
        ["make", "--no-print-directory", "install", f"PYTHON={box_py}", f"VENV={venv}",
         f"WHEELS={archive}"],
        cwd=ROOT, capture_output=True, text=True, env=offline, timeout=1800, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "nothing downloaded" in r.stdout and "the interpreter's own" in r.stdout
    venv_torch, problem = box.probe_torch(str(venv / "bin/python"))
    assert venv_torch is not None, problem
    assert Path(venv_torch.path).resolve() == Path(box_torch.path).resolve()  # the box's, no other
    site = venv_site(venv)
    assert not [p.name for p in site.iterdir() if p.name.startswith(("torch", "nvidia", "triton",
                "numpy", "cv2", "opencv")) and not p.name.startswith("nvidia_ml_py")]  # fmt: skip
    r = subprocess.run(
        [venv / "bin/python", "-c", "import numpy, cv2, zmq, nes_py; print(numpy.__file__)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and box.BOX_DIR in r.stdout, r.stderr  # numpy: the box's, linked
    r = subprocess.run([venv / "bin/python", "-c", "import pytest"], capture_output=True)
    assert r.returncode != 0  # the runtime only

    # one real training step with the venv's interpreter: a learner and an actor on 1-1
    run_dir = tmp_path / "run"
    port, metrics = procs.free_port(2), procs.free_port(2)
    py = str(venv / "bin/python")
    learner = procs.Proc(
        [py, "-m", "learner", "--run-dir", str(run_dir), "--port", str(port),
         "--metrics-port", str(metrics), "--device", "cpu", "--train-frames", "1",
         "--batch-chunks", "1"],
        tmp_path / "learner.log",
    )  # fmt: skip
    actor = procs.Proc(
        [py, "-m", "actor", "--learner", f"127.0.0.1:{port}", "--num-envs", "1", "--lanes", "1",
         "--metrics-port", str(metrics + 1)],
        tmp_path / "actor.log",
    )  # fmt: skip
    try:
        assert learner.popen.wait(600) == 0, learner.output()[-3000:] + actor.output()[-2000:]
    finally:
        actor.stop()
        learner.stop()
    assert list((run_dir / "checkpoints").glob("ckpt-*.pt")), learner.output()[-3000:]
