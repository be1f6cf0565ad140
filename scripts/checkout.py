"""The checkout: where make runs, and the working directory of every process a script starts."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
