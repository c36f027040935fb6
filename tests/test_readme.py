"""The README's test command is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("Run the tests", 1)[1]
    return re.search(r"```sh\n(.+?)\n```", section, re.S).group(1).strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _test_command()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines


def test_readme_names_the_main_job():
    readme = (ROOT / "README.md").read_text()
    assert "pip install . && renderd start" in readme
