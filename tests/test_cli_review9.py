"""``renderd start``'s errors: what failed, where, and which setting to change."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.helpers.control_review14e import run_renderd


def test_an_http_listener_address_in_use_names_the_setting_without_an_errno_prefix(tmp_path):
    # The message began "cannot start the HTTP listener: [Errno 98] cannot listen on ...": Python's rendering
    # of the OSError, which named neither [daemon] http nor --http.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_renderd("start", "--socket", str(tmp_path / "s.sock"), "--runtime-dir", str(tmp_path / "run"),
                             "--http", f"127.0.0.1:{port}", stdout=subprocess.DEVNULL)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: cannot start the HTTP listener ([daemon] http, --http): cannot listen on "
                           f"127.0.0.1:{port}: "), last
    assert "[EADDRINUSE]" in last and "[Errno" not in last, last
    assert "choose another port" in last, last
    assert not (tmp_path / "run").exists() and not (tmp_path / "s.sock").exists()


@pytest.mark.parametrize("option, value, key", [
    ("--socket", "file/renderd.sock", "the control socket (socket, --socket)"),
    ("--runtime-dir", "file", "runtime_dir (--runtime-dir)"),
])
def test_a_directory_that_is_a_file_names_the_setting(tmp_path, option, value, key):
    # "Error: /x/file exists and is not a directory" said nothing of which setting wanted a directory there.
    (tmp_path / "file").write_text("")
    paths = {"--socket": str(tmp_path / "s.sock"), "--runtime-dir": str(tmp_path / "run")}
    paths[option] = str(tmp_path / value)
    result = run_renderd("start", *(item for pair in paths.items() for item in pair), stdout=subprocess.DEVNULL)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: cannot use {tmp_path / 'file'} as the directory for {key}: it exists and is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
