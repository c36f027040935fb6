"""renderd validate takes the command-line overrides renderd start takes, so a file that relies on them can
be checked as it will run."""

from __future__ import annotations

import subprocess
import sys

HTTP_ENV = """
[environments.web]
executable = "renderd-player"
transport = "http"
platform = "headless"
"""


def _validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "renderd", "validate", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_file_relying_on_start_http_validates_with_the_same_option(tmp_path):
    config = tmp_path / "renderd.toml"
    config.write_text(HTTP_ENV)
    refused = _validate(str(config))
    assert refused.returncode == 1 and "--http" in refused.stderr, refused
    accepted = _validate(str(config), "--http", "127.0.0.1:8200")
    assert accepted.returncode == 0, accepted
    assert "valid" in accepted.stdout


def test_validate_checks_the_socket_and_runtime_dir_given_on_its_command_line(tmp_path):
    config = tmp_path / "renderd.toml"
    config.write_text('[environments.demo]\nexecutable = "renderd-player"\n')
    socket = tmp_path / "run" / "ctl.sock"
    result = _validate(str(config), "--socket", str(socket), "--runtime-dir", str(tmp_path / "run"))
    assert result.returncode == 0 and str(socket) in result.stdout, result
    bad = _validate(str(config), "--http", "not-an-address")
    assert bad.returncode == 2 and "Invalid value for --http" in bad.stderr, bad  # a usage error, as for start
