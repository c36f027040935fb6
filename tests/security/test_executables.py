"""Executables are resolved to absolute paths once, when a configuration is loaded or an environment is
declared, and players are started with that path: a later change of ``PATH`` or of the working
directory cannot swap the program a daemon runs."""

from __future__ import annotations

import os
import shutil
import sys

import psutil
import pytest

import renderd
from renderd.config import loads
from renderd.daemon.client import ControlClient
from renderd.errors import ConfigError
from renderd.process import player_argv


def program_path(cmdline: list[str]) -> str:
    """The program a process runs: argv[0], or the script an interpreter runs (a console script)."""
    if os.path.basename(cmdline[0]).startswith("python") and len(cmdline) > 1:
        return cmdline[1]
    return cmdline[0]


def test_config_resolves_names_to_absolute_paths() -> None:
    config = loads('[environments.a]\nexecutable = "renderd-player"\n'
                   '[environments.b]\nexecutable = ["sh", "-c", "true"]\n')
    a, b = config.environments["a"], config.environments["b"]
    assert os.path.isabs(a.executable) and os.path.basename(a.executable) == "renderd-player"
    assert b.executable[0] == shutil.which("sh") and b.executable[1:] == ["-c", "true"]
    with pytest.raises(ConfigError, match="environments.c.executable"):
        loads('[environments.c]\nexecutable = "no-such-program-anywhere"\n')


def test_relative_paths_are_made_absolute(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    program = tmp_path / "bin" / "player"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o700)
    monkeypatch.chdir(tmp_path)
    config = loads('[environments.a]\nexecutable = "./bin/player"\n')
    assert config.environments["a"].executable == str(program)
    assert player_argv("./bin/player", width=1, height=1)[0] == str(program)


def test_daemon_players_run_absolute_paths(secure_daemon) -> None:
    envs = ControlClient(secure_daemon.socket).environments()
    for env in envs:
        assert os.path.isabs(env["config"]["executable"][0]), env["config"]["executable"]
        for player in env["players"]:
            cmdline = psutil.Process(player["pid"]).cmdline()
            assert os.path.isabs(program_path(cmdline)), cmdline


def test_put_environment_resolves_the_executable(secure_daemon) -> None:
    client = ControlClient(secure_daemon.socket)
    try:
        state = client.request("PUT", "/v1/environments/resolved",
                               {"executable": "renderd-player", "instances": 0, "platform": "headless"})[1]
        path = state["config"]["executable"]
        assert os.path.isabs(path) and os.path.basename(path) == "renderd-player"
    finally:
        client.request("DELETE", "/v1/environments/resolved")


def test_launch_runs_the_absolute_path(nothing_left) -> None:
    with renderd.launch("renderd-player", width=32, height=24, platform="headless", args=["--static-frame"],
                        start_timeout=20) as session:
        cmdline = psutil.Process(session.pid).cmdline()
        path = program_path(cmdline)
        assert os.path.isabs(path) and path == shutil.which("renderd-player", path=os.path.dirname(sys.executable))
