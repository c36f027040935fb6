"""``renderd start``'s errors: what failed, where, and which setting to change."""

from __future__ import annotations

import socket
import subprocess

from tests.daemon.test_control_review8 import run_renderd


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
    assert not (tmp_path / "run").exists() and not (tmp_path / "s.sock").exists()
