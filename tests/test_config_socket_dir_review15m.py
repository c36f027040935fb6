"""A socket path that names an existing directory is refused by the configuration's checks (so by ``renderd
validate`` too, which called it valid while ``renderd start`` refused it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from renderd.config import loads
from renderd.errors import ConfigError


def test_a_socket_that_is_an_existing_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        loads(f'[daemon]\nsocket = "{tmp_path}"\n', path="c.toml")
    assert info.value.key == "daemon.socket"
    assert f"'{tmp_path}' names a directory; give the socket's own path, such as '{tmp_path}/renderd.sock'" in str(
        info.value)
    assert loads(f'[daemon]\nsocket = "{tmp_path}/renderd.sock"\n').daemon.socket == f"{tmp_path}/renderd.sock"


def test_validate_refuses_a_socket_override_that_is_a_directory(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("")
    done = subprocess.run([sys.executable, "-m", "renderd", "validate", str(config), "--socket", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout  # a bad option value: a usage error naming the option
    assert "--socket" in done.stderr and "names a directory" in done.stderr, done.stderr
