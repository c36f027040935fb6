"""docs/configuration.md against the code and the command line: its examples, limits and lists."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from renderd import config as cfg
from renderd.cli import COMMANDS, main
from renderd.config import ConfigError, EnvironmentConfig, loads
from renderd.daemon import commands, leases, service

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _doc() -> str:
    return " ".join(DOC.read_text().split())  # (sentences are wrapped anywhere)


def _block(kind: str, after: str = "") -> str:
    text = DOC.read_text()
    return re.search(rf"```{kind}\n(.*?)```", text[text.index(after):], re.S).group(1)


def test_the_validate_example_prints_what_the_doc_shows(tmp_path):
    # The TOML example of docs/configuration.md, checked as `renderd validate` checks it.
    path = tmp_path / "renderd.toml"
    path.write_text(_block("toml"))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    shown = _block("console", "Check a file without starting anything").splitlines()
    assert shown[0] == "$ renderd validate /etc/renderd/renderd.toml"
    player = cfg.resolve_executable("renderd-player")
    expected = [line.replace("/etc/renderd/renderd.toml", str(path)).replace("/usr/local/bin/renderd-player", player)
                for line in shown[1:]]
    assert result.output.splitlines() == expected


@pytest.mark.parametrize("text, message", [
    ("[environments.demo]\nwidth = 0\n", "environments.demo.width: must be an integer 1..4096, got 0"),
    ("[daemon]\nstop_grce = 1\n", "daemon.stop_grce: unknown key; did you mean 'stop_grace'?"),
    ("[daemon]\ninstances = 1\n", "daemon.instances: unknown key; instances is a key of [environments.NAME]"),
    ("[environments.demo]\nenv = {OMP_NUM_THREADS = 4}\n",
     'environments.demo.env: expected a table of string to string, got a table whose OMP_NUM_THREADS is integer 4, '
     'not a string (a string is written in quotes: "4")'),
    ("[environments.demo]\nenv = {API_TOKEN = 4}\n",
     "whose API_TOKEN is an integer (***), not a string (a string is written in quotes)"),
    ('[environments.demo]\nenv = "API_TOKEN=4"\n', "got a string (***)"),
])
def test_the_error_examples_are_the_messages_renderd_gives(text, message):
    assert message in _doc()
    with pytest.raises(ConfigError) as info:
        loads(text, path="bad.toml", resolve=False)
    assert message in str(info.value), str(info.value)


def test_the_limits_and_lists_the_doc_names_are_the_codes():
    doc = _doc()
    from renderd.daemon.service import Daemon

    for phrase in [
        f"at most {cfg.MAX_CONFIG_BYTES >> 20} MiB",
        f"sizes are 1 to {cfg.MAX_RESOLUTION} pixels",
        f"`instances` is 0 to {cfg.MAX_INSTANCES} (`renderd.config.MAX_INSTANCES`)",
        f"at most {cfg.MAX_SECONDS:g} (7 days, `renderd.config.MAX_SECONDS`)",
        f"`lease_timeout` is at most {leases.MAX_LEASE_TIMEOUT:g}",
        f"short enough for a unix socket ({cfg.MAX_SOCKET_PATH} bytes)",
        f"nor what renderd makes in it (`{service.LOCK_NAME}`, `players`, `logs`, `{service.CONTROL_TOKEN_NAME}`)",
        "platform = \"auto\" # " + " | ".join(cfg.PLATFORMS),
        "restart = \"on-failure\" # " + " | ".join(cfg.RESTART_POLICIES),
        "transport = \"fifo\" # " + " | ".join(cfg.TRANSPORTS),
        ", ".join(cfg.SECRET_NAME_PARTS[:-1]) + " or " + cfg.SECRET_NAME_PARTS[-1],
        "take effect only when renderd restarts",
        ", ".join(f"`{key}`" for key in Daemon.RESTART_KEYS[:-1]) + f" and `{Daemon.RESTART_KEYS[-1]}` take effect "
        "only when renderd restarts",
    ]:
        assert phrase in doc, f"docs/configuration.md does not say: {phrase}"
    # Environment names: the rule the doc states is the one the configuration applies.
    assert "environment names are 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit" in doc
    for name, ok in [("a" * 64, True), ("a" * 65, False), ("9._-x", True), ("-x", False), (".x", False),
                     ("_x", False), ("a/b", False), ("é", False)]:
        assert bool(cfg.ENVIRONMENT_NAME.fullmatch(name)) is ok, name


def test_the_keys_a_reload_changes_without_new_players_are_the_ones_the_doc_names():
    doc = _doc()
    match = re.search(r"their players replaced one at a time when anything but ((?:`\w+`(?:, | or ))+`\w+`) changed",
                      doc)
    assert match, "docs/configuration.md: which keys a reload changes in place"
    kept = set(re.findall(r"`(\w+)`", match.group(1)))
    base = EnvironmentConfig(name="demo", executable="/bin/true")
    changes = {"executable": "/bin/false", "width": 301, "height": 301, "quality": "Low", "platform": "headless",
               "x_display": ":1", "gpus": [0], "transport": "http", "instances": 2, "start_timeout": 1.0,
               "step_timeout": 1.0, "health_interval": 1.0, "restart": "never", "env": {"A": "b"}}
    assert set(changes) == {f.name for f in cfg.settings(EnvironmentConfig)}
    for key, value in changes.items():
        changed = dataclasses.replace(base, **{key: value})
        assert changed.replaces_players(base) is (key not in kept), key


def test_every_option_of_renderd_start_is_in_the_doc_and_the_doc_names_no_other():
    doc = _doc()
    options = {opt for param in commands.start.params for opt in param.opts if opt.startswith("--")}
    assert options == {"--config", "--socket", "--runtime-dir", "--http", "--log-level"}
    assert "`renderd start --socket PATH --runtime-dir DIR --http HOST:PORT` override the `[daemon]` keys" in doc
    assert "`renderd start -c CONFIG`" in doc
    named = set(re.findall(r"renderd start[^`]*?(--[a-z-]+)", doc)) | set(re.findall(r"`(--[a-z-]+)`", doc))
    assert named <= options, sorted(named - options)
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = re.findall(r"^  (\w+) ", result.output.partition("Commands:")[2], re.M)
    assert listed == sorted(COMMANDS)


def test_a_path_option_written_with_equals_and_a_tilde_is_the_users_home(tmp_path):
    # A shell expands ~ in `--socket ~/renderd.sock` but not in `--socket=~/renderd.sock` (nor does a unit
    # file): renderd start made a directory named "~" in its working directory and put its socket there, where
    # `renderd status --socket=~/renderd.sock` run from anywhere else did not find it (and a "~" directory is
    # one `rm -rf ~` away from the user's home). -c/--config=~/... was "cannot read the file".
    import subprocess
    import textwrap

    from tests.daemon.conftest import RENDERD, fast_config
    from tests.helpers.control_review14e import run_renderd
    from tests.helpers.leaks import wait_for

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    (home / "renderd.toml").write_text(textwrap.dedent(fast_config(instances=0)))
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env["HOME"] = str(home)
    with open(tmp_path / "daemon.log", "wb") as log:
        proc = subprocess.Popen(
            [*RENDERD, "start", "--config=~/renderd.toml", "--socket=~/renderd.sock", "--runtime-dir=~/run"],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "daemon.log").read_text()
            return (home / "renderd.sock").exists()

        wait_for(up, 20, "the daemon's socket in the home directory")
        assert (home / "run").is_dir()
        result = run_renderd("status", "--socket=~/renderd.sock", "--json", env={"HOME": str(home)})
        assert result.returncode == 0, result.stderr
        assert '"status": "ready"' in result.stdout.decode()
        assert list(cwd.iterdir()) == []
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp_path / "daemon.log").read_text()
    # What it made there is gone again once it stopped.
    assert not (home / "renderd.sock").exists() and not (home / "run").exists()
