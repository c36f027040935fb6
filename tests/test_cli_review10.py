"""The command line and the configuration: settings that name the same path."""

from __future__ import annotations

import subprocess

import pytest

from renderd.config import ConfigError, loads

from tests.daemon.test_control_review8 import run_renderd


@pytest.mark.parametrize("socket, runtime_dir, extra, what", [
    ("{run}", "{run}", "", "runtime_dir itself"),
    ("{run}", "{run}/", "", "runtime_dir itself"),
    ("{run}/renderd.lock", "{run}", "", "renderd's lock file in runtime_dir"),
    ("{run}/players", "{run}", "", "the players' pipe directory in runtime_dir"),
    ("{run}/logs", "{run}", "", "the players' log directory in runtime_dir"),
    ("{run}/control.token", "{run}", "", "the control token renderd writes in runtime_dir"),
    ("{tmp}/keep", "{run}", 'log_dir = "{tmp}/keep"', "log_dir"),
    ("{tmp}/token", "{run}", 'control_token_file = "{tmp}/token"', "control_token_file"),
])
def test_a_socket_at_a_path_renderd_uses_for_something_else_is_a_configuration_error(
        tmp_path, socket, runtime_dir, extra, what):
    # renderd start made the runtime directory (and its lock, pipe and log directories), then found its socket
    # path taken and said "exists and is not a socket; remove it or choose another --socket": of renderd's own
    # directory or file, which was gone again by the time anyone looked.
    text = f'[daemon]\nsocket = "{socket}"\nruntime_dir = "{runtime_dir}"\n{extra}\n'
    text = text.format(run=tmp_path / "run", tmp=tmp_path)
    with pytest.raises(ConfigError) as info:
        loads(text, path="renderd.toml", resolve=False)
    assert info.value.key == "daemon.socket"
    message = str(info.value)
    assert message.startswith("renderd.toml: daemon.socket: "), message
    assert what in message and "give the socket a path of its own" in message, message
    # Where renderd would not take that path, it is the socket's.
    if extra:
        assert loads(text.replace(extra.format(tmp=tmp_path), ""), resolve=False)


def test_start_refuses_a_socket_that_is_the_runtime_directory_before_creating_anything(tmp_path):
    run = tmp_path / "run"
    result = run_renderd("start", "--socket", str(run), "--runtime-dir", str(run), stdout=subprocess.DEVNULL)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: command line: daemon.socket: {str(run)!r} is runtime_dir itself"), last
    assert f"such as {str(run / 'renderd.sock')!r}" in last, last
    assert list(tmp_path.iterdir()) == []
    # A socket of its own in the same directory is fine.
    assert loads(f'[daemon]\nsocket = "{run}/renderd.sock"\nruntime_dir = "{run}"\n', resolve=False)
