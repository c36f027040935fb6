"""Only the service user can open what renderd makes: directories 0700, the socket, pipes, logs and the
lock 0600, owned by that user, even when renderd inherits umask 000."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

import renderd


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def owned(path: str) -> bool:
    return os.lstat(path).st_uid == os.geteuid()


def test_daemon_runtime_files_are_private(secure_daemon) -> None:
    d = secure_daemon
    run = d.runtime_dir
    dirs = [run, os.path.join(run, "players"), os.path.join(run, "logs"), os.path.dirname(d.socket)]
    players = os.path.join(run, "players")
    pair_dirs = [os.path.join(players, name) for name in os.listdir(players)]
    assert len(pair_dirs) == 2  # demo and web
    dirs += pair_dirs
    for path in dirs:
        assert stat.S_ISDIR(os.lstat(path).st_mode) and owned(path), path
        assert mode(path) == 0o700, f"{path}: {mode(path):04o}"

    assert stat.S_ISSOCK(os.lstat(d.socket).st_mode)
    assert mode(d.socket) == 0o600, f"{d.socket}: {mode(d.socket):04o}"
    files = [os.path.join(run, "renderd.lock")]
    files += [os.path.join(run, "logs", name) for name in os.listdir(os.path.join(run, "logs"))]
    fifos = [os.path.join(p, name) for p in pair_dirs for name in os.listdir(p)]
    assert sorted(os.path.basename(f) for f in fifos) == ["client.pipe", "client.pipe", "server.pipe", "server.pipe"]
    for path in fifos:
        assert stat.S_ISFIFO(os.lstat(path).st_mode), path
    for path in files + fifos:
        assert owned(path) and mode(path) == 0o600, f"{path}: {mode(path):04o}"


def test_launch_pipes_and_log_are_private(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0)
    try:
        with renderd.launch(["renderd-player", "--static-frame"], width=32, height=24, platform="headless",
                            start_timeout=20) as session:
            (directory,) = [tmp_path / name for name in os.listdir(tmp_path)]
            assert mode(str(directory)) == 0o700
            for name in ("server.pipe", "client.pipe", "player.log"):
                assert mode(str(directory / name)) == 0o600, name
            session.step("Pass")
    finally:
        os.umask(old)
    assert os.listdir(tmp_path) == []
