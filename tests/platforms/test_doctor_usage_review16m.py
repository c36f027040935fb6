"""renderd doctor takes an X display name or an executable that cannot be one as a bad option (exit 2, naming the
option), as the configuration's keys refuse them, rather than as a platform finding (exit 1) or not at all."""

import subprocess
import sys

DOCTOR = [sys.executable, "-m", "renderd", "doctor"]


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*DOCTOR, *args], capture_output=True, text=True, timeout=120)


def test_a_malformed_x_display_is_a_usage_error():
    out = _doctor("--x-display", "bogus")
    assert out.returncode == 2, out
    assert "Invalid value for --x-display: 'bogus' is not auto, managed or an X display name" in out.stderr


def test_an_executable_that_does_not_exist_is_a_usage_error(tmp_path):
    missing = str(tmp_path / "no-such-player")
    out = _doctor("--headless", "--executable", missing)
    assert out.returncode == 2, out
    assert f"Invalid value for --executable: {missing!r} does not exist" in out.stderr, out.stderr


def test_an_executable_found_by_name_is_taken():
    out = _doctor("--headless", "--executable", "renderd-player", "--json")
    assert out.returncode == 0, out
