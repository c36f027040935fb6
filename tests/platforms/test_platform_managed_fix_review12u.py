"""Linux64's fixes offer a managed display by its setting when Xvfb is installed, and installing Xvfb only
when it is not."""

from __future__ import annotations

import os

from renderd.platforms import PlatformRequest
from renderd.platforms.linux64 import Linux64

UNUSED = ":59731"  # (no X server there: nothing answers)


def fake_xvfb(tmp_path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / "Xvfb"
    binary.write_text("#!/bin/sh\nexit 1\n")  # (never run: a check starts nothing)
    binary.chmod(0o755)
    return str(bin_dir)


def check(path: str):
    env = {"PATH": path, "VK_ICD_FILENAMES": "/nonexistent.json"}
    return Linux64().check(PlatformRequest(platform="Linux64", system="Linux", x_display=UNUSED, env=env))


def test_an_unreachable_display_with_xvfb_installed_says_to_ask_for_a_managed_display(tmp_path):
    bin_dir = fake_xvfb(tmp_path)
    report = check(bin_dir)
    assert not report.valid
    text = "\n".join([*report.reasons, report.instructions])
    assert 'x_display="managed"' in text
    assert f"Xvfb is installed: {os.path.join(bin_dir, 'Xvfb')}" in text
    assert "apt-get install" not in text and "needs the xvfb package" not in text


def test_an_unreachable_display_without_xvfb_says_to_install_it(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    report = check(str(empty))
    assert not report.valid
    assert any("needs the xvfb package: apt-get install xvfb" in r for r in report.reasons)
    assert "apt-get install xvfb" in report.instructions
