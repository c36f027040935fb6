"""What renderd start says: an error that stops it once (not as a log line and again as 'Error: ...')."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.daemon.conftest import RENDERD


def _start(tmp_path: Path, *args: str, stderr=subprocess.PIPE, env: dict[str, str] | None = None):
    base = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "NOTIFY_SOCKET")}
    return subprocess.run([*RENDERD, "start", "--socket", str(tmp_path / "r.sock"), *args], stdout=subprocess.PIPE,
                          stderr=stderr, text=True, timeout=30, env={**base, **(env or {})})


def test_a_configuration_error_is_printed_once(tmp_path):
    missing = tmp_path / "missing.toml"
    out = _start(tmp_path, "-c", str(missing), "--runtime-dir", str(tmp_path / "run"))
    assert out.returncode == 1
    assert out.stderr.splitlines() == [f"Error: {missing}: cannot read the file: No such file or directory"], out.stderr


def test_a_start_up_error_is_printed_once(tmp_path):
    taken = tmp_path / "run"
    taken.write_text("")  # (a file where the runtime directory should be)
    out = _start(tmp_path, "--runtime-dir", str(taken))
    assert out.returncode == 1
    assert out.stderr.count("is not a directory") == 1, out.stderr
    assert out.stderr.splitlines()[-1].startswith("Error: ") and "ERROR" not in out.stderr, out.stderr


def test_under_journald_the_error_is_one_entry_with_its_priority(tmp_path):
    # (The journal's own line, "<3>renderd.daemon: ...", is the error entry; "Error: ..." would be a second
    # entry at the default priority.)
    err_path = tmp_path / "stderr"
    with open(err_path, "w") as err:
        st = os.fstat(err.fileno())
        out = _start(tmp_path, "-c", str(tmp_path / "missing.toml"), "--runtime-dir", str(tmp_path / "run"),
                     stderr=err, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    assert out.returncode == 1
    lines = err_path.read_text().splitlines()
    assert lines == [f"<3>renderd.daemon: {tmp_path / 'missing.toml'}: cannot read the file: No such file or directory"], lines
