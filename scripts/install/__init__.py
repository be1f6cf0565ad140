"""Install the project into a venv, or build a wheelhouse for a box with no package index.

Runs under the interpreter the venv is made from (the Makefile's PYTHON), with the standard
library only, from the project root (docs/howto/gpu-box.md):

    python -m scripts.install venv --venv .venv [--torch auto|box|venv] [--wheels DIR|FILE.tar]
        [--extras dev]
    python -m scripts.install wheelhouse --out DIR [--torch auto|box|venv] [--extras dev]
        [--have BOX-PIP-LIST.txt] [--skip torch,numpy==2.2.6]

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

A wheelhouse for a box whose Python has some packages already (`--have`, its `pip list`;
`--skip`, names) leaves out each one whose version meets every requirement on it, and with
`--extras ''` the test and lint extras too (docs/howto/offline-box.md). Its manifest
(wheelhouse.json) names what it left to the box; `venv --wheels` checks those are in the
interpreter in such a version, links them into the venv as it links torch, and installs the extras
the wheelhouse was built with.
"""
