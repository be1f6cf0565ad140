"""What a box lacks (scripts/install/lacks.py, behind `make wheelhouse HAVE=... SKIP=...`): a box's
`pip list` in each of its formats, versions against specifiers, markers in the target's
environment, and the split of a resolved set of distributions into what the box receives and
what it already has, against hand-made boxes."""

from __future__ import annotations

import json

import pytest

from scripts.install import lacks
from scripts.install.__main__ import project
from scripts.install.rules import InstallError

LINUX_312 = {"python_version": "3.12", "sys_platform": "linux", "platform_machine": "x86_64",
             "platform_system": "Linux", "implementation_name": "cpython", "os_name": "posix"}  # fmt: skip
ROOTS = ["torch>=2.6", "numpy>=2", "opencv-python-headless>=4.10", "matplotlib>=3.9", "pyzmq>=26"]
DISTS = {  # what pip resolved for ROOTS, with the Requires-Dist that matter here
    "torch": lacks.Dist("2.14.1", ("sympy>=1.13", "nvidia-cudnn-cu13==9.13; platform_system == 'Linux'")),
    "sympy": lacks.Dist("1.14.0", ("mpmath<1.4,>=1.1.0",)),
    "mpmath": lacks.Dist("1.3.0"),
    "nvidia-cudnn-cu13": lacks.Dist("9.13"),
    "numpy": lacks.Dist("2.3.5"),
    "opencv-python-headless": lacks.Dist("4.12.0.88", ("numpy<2.3.0,>=2; python_version >= '3.9'",)),
    "matplotlib": lacks.Dist("3.10.7", ("numpy>=1.23", "pillow>=8", "pyparsing>=3",
                                        "importlib-resources>=3.2.0; python_version < '3.10'")),
    "pillow": lacks.Dist("12.0.0"),
    "pyparsing": lacks.Dist("3.2.5"),
    "pyzmq": lacks.Dist("27.1.0", ("cffi; implementation_name == 'pypy'",)),
}  # fmt: skip
EVERYTHING = {"torch", "sympy", "mpmath", "nvidia-cudnn-cu13", "numpy", "opencv-python-headless",
              "matplotlib", "pillow", "pyparsing", "pyzmq"}  # fmt: skip


def test_a_box_with_nothing_gets_everything_its_markers_ask_for():
    chosen = lacks.select(ROOTS, DISTS, {}, LINUX_312)
    assert chosen.keep == EVERYTHING  # not importlib-resources (< 3.10) nor cffi (PyPy)
    assert not chosen.from_box and not chosen.why_kept


def test_the_gpu_box_gets_only_what_it_lacks():
    """torch, numpy and opencv on the box: none of them, nor what only torch requires, is sent;
    opencv-python (not headless) meets the project's opencv-python-headless."""
    box = {"torch": "2.14.1+cu130", "numpy": "2.2.6", "opencv-python": "4.11.0.86",
           "sympy": "1.13.3", "pip": "24.0"}  # fmt: skip
    chosen = lacks.select(ROOTS, DISTS, box, LINUX_312)
    assert chosen.keep == {"matplotlib", "pillow", "pyparsing", "pyzmq"}
    assert set(chosen.from_box) == {"torch", "numpy", "opencv-python-headless"}
    assert chosen.from_box["opencv-python-headless"].box_name == "opencv-python"
    numpy = chosen.from_box["numpy"]
    assert numpy.box_version == "2.2.6"
    assert ("numpy>=2", "the project") in numpy.needs
    assert ("numpy>=1.23", "matplotlib 3.10.7") in numpy.needs  # from what the box receives
    assert not [w for _, w in numpy.needs if w.startswith("opencv")]  # not from the box's own


@pytest.mark.parametrize(
    ("box", "kept", "words"),
    [
        ({"numpy": "1.26.4"}, "numpy", "the box's numpy 1.26.4 does not meet numpy>=2 (the project)"),
        ({"torch": "2.5.1+cu121"}, "torch", "torch 2.5.1+cu121 does not meet torch>=2.6"),
        ({"pillow": "7.2.0"}, "pillow", "pillow>=8 (matplotlib 3.10.7)"),  # a requirement's requirement
        ({"opencv-python": "4.8.1.78"}, "opencv-python-headless", "opencv-python 4.8.1.78"),
    ],
)  # fmt: skip
def test_a_version_the_project_cannot_use_is_sent_and_the_reason_given(box, kept, words):
    chosen = lacks.select(ROOTS, DISTS, box, LINUX_312)
    assert kept in chosen.keep and kept not in chosen.from_box
    assert words in chosen.why_kept[kept]


def test_a_stricter_requirement_of_what_is_sent_overrules_the_project():
    """numpy 2.0 meets the project's numpy>=2, but not what the opencv it receives asks."""
    dists = dict(DISTS, **{"opencv-python-headless": lacks.Dist("4.12.0.88", ("numpy>=2.1",))})
    chosen = lacks.select(ROOTS, dists, {"numpy": "2.0.2"}, LINUX_312)
    assert "numpy" in chosen.keep
    assert "numpy>=2.1 (opencv-python-headless 4.12.0.88)" in chosen.why_kept["numpy"]
    assert "numpy>=2 (the project)" not in chosen.why_kept["numpy"]  # that one it met


def test_extras_asked_of_a_requirement_bring_its_extra_requirements():
    dists = {"a": lacks.Dist("1.0", ("b>=1; extra == 'fast'", "c; extra == 'slow'")),
             "b": lacks.Dist("1.5"), "c": lacks.Dist("1.0")}  # fmt: skip
    assert lacks.select(["a[fast]"], dists, {}, LINUX_312).keep == {"a", "b"}
    assert lacks.select(["a"], dists, {}, LINUX_312).keep == {"a"}


def test_a_name_without_a_version_is_trusted_and_left_to_install_to_check():
    chosen = lacks.select(ROOTS, DISTS, lacks.parse_skip("torch, numpy"), LINUX_312)
    assert chosen.from_box["torch"].box_version is None
    assert {"torch", "numpy"} <= set(chosen.from_box) and "sympy" not in chosen.keep


def test_the_projects_own_requirements_leave_the_gpu_box_torch_out():
    """Before anything is fetched (no Requires-Dist known yet) the real requirements already
    leave out the box's torch, numpy and opencv."""
    roots = project()["dependencies"]
    box = {"torch": "2.14.1+cu130", "numpy": "2.2.6", "opencv-python": "4.11.0.86"}
    chosen = lacks.select(roots, {}, box, LINUX_312)
    assert set(chosen.from_box) == {"torch", "numpy", "opencv-python-headless"}
    assert {"nes-py", "pyzmq", "gymnasium"} <= chosen.keep


@pytest.mark.parametrize(
    ("version", "specifier", "ok"),
    [
        ("2.14.1+cu130", ">=2.6", True), ("2.5.1", ">=2.6", False), ("2.10.0", ">=2.6", True),
        ("2.14.1+cu130", "==2.14.1", True), ("2.14.1", "==2.14.1+cu130", False),
        ("4.11.0.86", ">=4.10", True), ("4.9.0.80", ">=4.10", False), ("2.0", ">=2,<3", True),
        ("4.10.0.84", "~=4.10", True), ("5.0", "~=4.10", False), ("2.2.6", "==2.*", True),
        ("3.0", "!=3.*", False), ("1.0.dev1", "<1.0", True), ("1.0rc1", "<1.0", True),
        ("1!0.1", ">=2", True), ("9.0.1", "", True),
    ],
)  # fmt: skip
def test_versions_meet_specifiers_as_pip_judges(version, specifier, ok):
    assert lacks.satisfies(version, specifier) is ok


@pytest.mark.parametrize(
    ("marker", "ok"),
    [
        ('python_version < "3.10"', False), ("sys_platform == 'win32'", False),
        ("platform_system == 'Linux' and platform_machine == 'x86_64'", True),
        ('(python_version >= "3.9" and os_name != "nt") or extra == "x"', True),
        ("platform_machine in 'x86_64 aarch64'", True), ('extra == "test"', False),
    ],
)  # fmt: skip
def test_markers_are_judged_in_the_targets_environment(marker, ok):
    assert lacks.marker_applies(marker, LINUX_312) is ok


PIP_LIST = """\
Package                Version      Editable project location
---------------------- ------------ -------------------------
numpy                  2.2.6
opencv-python          4.11.0.86
torch                  2.14.1+cu130
mario-impala           0.1.0        /home/me/mario-impala

[notice] A new release of pip is available: 24.0 -> 25.3
"""
BOX = {"numpy": "2.2.6", "opencv-python": "4.11.0.86", "torch": "2.14.1+cu130",
       "mario-impala": "0.1.0"}  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        PIP_LIST,
        "numpy==2.2.6\nopencv_python==4.11.0.86\ntorch==2.14.1+cu130\nmario-impala==0.1.0\n",
        json.dumps([{"name": n, "version": v} for n, v in BOX.items()]),
    ],
)
def test_pip_list_is_read_in_each_of_its_formats(text):
    assert lacks.parse_pip_list(text) == BOX


def test_pip_freeze_url_lines_have_no_version_and_a_bad_file_is_named():
    assert lacks.parse_pip_list("numpy @ file:///croot/numpy\n") == {"numpy": None}
    with pytest.raises(InstallError, match="HAVE=box.txt line 2.*pip list"):
        lacks.parse_pip_list("numpy==2.2.6\nthis is not a package list\n", "HAVE=box.txt")
    with pytest.raises(InstallError, match="SKIP=torch,numpy==2.1.3"):
        lacks.parse_skip("torch,numpy==two")
