"""renderd start's warning about a runtime directory others can look into: what that exposes, and whether anything
needs doing."""

from __future__ import annotations

import os

from tests.daemon.conftest import fast_config


def test_a_runtime_directory_others_can_look_into_says_what_is_exposed_and_what_to_do(daemon, tmp_path):
    run = tmp_path / "shared-run"
    run.mkdir()
    os.chmod(run, 0o755)
    d = daemon(fast_config(), runtime_dir=str(run))
    line = next(line for line in d.output().splitlines() if "has mode 0755" in line)
    assert "the names of what renderd keeps in it" in line and "nothing more" in line, line
    assert "nothing needs doing" in line and f"chmod 700 {run}" in line, line


def test_a_socket_directory_others_may_write_to_says_that_they_can_replace_the_socket(daemon, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    d = daemon(fast_config(), socket=str(shared / "renderd.sock"))
    line = next(line for line in d.output().splitlines() if "has mode 0777" in line)
    assert "can remove or replace what renderd keeps in it" in line and f"chmod go-w {shared}" in line, line
    os.chmod(shared, 0o1777)  # (sticky, as /tmp: the names only, and not renderd's directory to change)
    d = daemon(fast_config(), socket=str(shared / "other.sock"))
    line = next(line for line in d.output().splitlines() if "has mode 1777" in line)
    assert line.endswith("nothing needs doing") and "chmod" not in line, line


def test_a_socket_in_the_open_runtime_directory_gets_one_warning_for_both(daemon, tmp_path):
    # The socket's directory is the runtime directory: its mode was warned about twice, once per key.
    run = tmp_path / "shared-run"
    run.mkdir()
    os.chmod(run, 0o755)
    d = daemon(fast_config(), runtime_dir=str(run), socket=str(run / "renderd.sock"))
    lines = [line for line in d.output().splitlines() if "has mode 0755" in line]
    assert len(lines) == 1, lines
    assert f"chmod 700 {run}" in lines[0], lines
