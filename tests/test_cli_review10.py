"""The command line and the configuration: settings that name the same path."""

from __future__ import annotations

import subprocess

import pytest

from renderd.config import ConfigError, loads

from tests.helpers.control_review14e import run_renderd


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
    assert result.returncode == 2  # a bad option value: a usage error naming the option
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: Invalid value for --socket: {str(run)!r} is runtime_dir itself"), last
    assert f"such as {str(run / 'renderd.sock')!r}" in last, last
    assert list(tmp_path.iterdir()) == []
    # A socket of its own in the same directory is fine.
    assert loads(f'[daemon]\nsocket = "{run}/renderd.sock"\nruntime_dir = "{run}"\n', resolve=False)


@pytest.mark.parametrize("table, shown", [
    ("env = {API_TOKEN = 123456789, OMP_NUM_THREADS = \"4\"}", "whose API_TOKEN is an integer (***), not a string"),
    ("executable = [\"/bin/true\", \"--password\", 123456789]", "whose [2] is an integer (***), not a string"),
    ("executable = [\"/bin/true\", \"-apiKey\", 123456789.5]", "whose [2] is a number (***), not a string"),
])
def test_a_secret_written_without_quotes_is_not_quoted_in_the_error(tmp_path, table, shown):
    # A numeric token written without quotes was quoted back in full ("whose API_TOKEN is integer 123456789,
    # not a string (a string is written in quotes: "123456789")"): by renderd validate, in the log line of a
    # reload or start that failed, and in a PUT's answer, where the configuration itself shows it as ***.
    config = tmp_path / "renderd.toml"
    config.write_text(f"[environments.demo]\n{table}\n")
    result = run_renderd("validate", str(config))
    assert result.returncode == 1
    assert "123456789" not in result.stderr, result.stderr
    assert shown in result.stderr, result.stderr
    assert "(a string is written in quotes)" in result.stderr, result.stderr
    # Names that look like no secret keep their value in the message.
    config.write_text("[environments.demo]\nenv = {OMP_NUM_THREADS = 4}\n")
    assert 'is integer 4, not a string (a string is written in quotes: "4")' in run_renderd(
        "validate", str(config)).stderr


def test_an_env_written_as_a_string_with_a_secret_in_it_is_not_quoted_in_the_error():
    # env = "API_TOKEN=abc123xyz" (as a shell or a unit file writes it) was answered "expected a table of string
    # to string, got string 'API_TOKEN=abc123xyz'": the secret, printed and logged.
    with pytest.raises(ConfigError) as info:
        loads('[environments.demo]\nenv = "API_TOKEN=abc123xyz"\n', path="renderd.toml", resolve=False)
    message = str(info.value)
    assert "abc123xyz" not in message, message
    assert message == "renderd.toml: environments.demo.env: expected a table of string to string, got a string (***)"
    with pytest.raises(ConfigError) as info:
        loads('[environments.demo]\nenv = "OMP_NUM_THREADS=4"\n', path="renderd.toml", resolve=False)
    assert "got string 'OMP_NUM_THREADS=4'" in str(info.value)
