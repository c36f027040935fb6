"""Edges of launching and closing a player: wrapper scripts, Ctrl-C during close, odd arguments, odd logs.
Real processes and real FIFOs; every test checks that nothing is left behind (``no_leaks``)."""

from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import textwrap
import threading

import numpy as np
import psutil
import pytest

import renderd
from renderd.config import ArgumentError
from renderd.errors import ConfigError, PlayerCrashed, RenderdError

from .conftest import START, Timer

pytestmark = pytest.mark.usefixtures("no_leaks")

SMALL = dict(width=64, height=48)
#: The reference player installed next to this interpreter (not a version manager's shim found first on PATH).
PLAYER = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or shutil.which("renderd-player")


def launch_wrapped(script, script_text: str):
    """A static-frame reference player started through the shell script ``script`` (``script_text``), stepped once."""
    script.write_text(script_text)
    script.chmod(0o755)
    session = renderd.launch(str(script), **SMALL, platform="headless", args=["--static-frame"],
                             start_timeout=START)
    session.step("Pass")
    return session


def test_a_player_under_a_wrapper_script_gets_its_grace(tmp_path):
    # The script leads the process group and exits at once on SIGTERM; the player (its grandchild here)
    # needs half a second to shut down cleanly. The grace is for the group, not only for its leader.
    marker = tmp_path / "shut-down-cleanly"
    slow = tmp_path / "slow_stop.py"
    slow.write_text(textwrap.dedent(f"""
        import signal, subprocess, sys, time
        def term(*_):
            time.sleep(0.5)
            open({str(marker)!r}, "w").close()
            sys.exit(0)
        signal.signal(signal.SIGTERM, term)
        subprocess.Popen([{PLAYER!r}, *sys.argv[1:]]).wait()
        """))
    session = launch_wrapped(tmp_path / "wrapper.sh", f'#!/bin/sh\n"{sys.executable}" "{slow}" "$@" &\nwait $!\n')
    with Timer() as t:
        session.close()
    assert marker.exists(), "the player was killed before the end of its grace"
    assert 0.5 <= t.elapsed < session.stop_grace


def test_ctrl_c_during_close_still_stops_and_reaps_the_player(tmp_path):
    # The group leader ignores SIGTERM, so close() waits out its grace; Ctrl-C arrives meanwhile. The
    # interruption goes on, but only after the player's group was killed and reaped.
    session = launch_wrapped(tmp_path / "stubborn.sh", f"#!/bin/sh\ntrap '' TERM\n\"{PLAYER}\" \"$@\"\nexec sleep 60\n")
    leader = psutil.Process(session.pid)
    group = [leader, *leader.children(recursive=True)]
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with Timer() as t, pytest.raises(KeyboardInterrupt):
            session.close()
    finally:
        timer.cancel()
    assert t.elapsed < 4.5  # killed at once on Ctrl-C, not after the 5 s grace
    for process in group:
        assert not process.is_running(), f"{process} outlived close()"
    session.close()  # idempotent, and nothing to do


def test_a_log_path_that_is_a_fifo_without_a_reader_fails_at_once(tmp_path):
    log = tmp_path / "log.fifo"
    os.mkfifo(log)
    with Timer() as t, pytest.raises(RenderdError, match="cannot open the player's log file"):
        renderd.launch(**SMALL, platform="headless", log_path=log, start_timeout=2)
    assert t.elapsed < 2


@pytest.mark.parametrize(
    "kwargs, key",
    [
        (dict(args=["--static-frame", "a\0b"]), "args"),
        (dict(env={"FOO": "a\0b"}), "env"),
        (dict(env={"A=B": "x"}), "env"),
        (dict(env={"FOO": None}), "env"),
        (dict(env={"FOO": b"bytes"}), "env"),
    ],
    ids=["nul-arg", "nul-value", "equals-in-name", "none-value", "bytes-value"],
)
def test_arguments_no_process_can_take_are_config_errors(kwargs, key):
    with pytest.raises(ConfigError) as info:
        renderd.launch(**SMALL, platform="headless", start_timeout=START, **kwargs)
    assert info.value.key == key


@pytest.mark.parametrize("x_display", ["managed", ":1"])
def test_a_display_named_twice_is_a_config_error(x_display):
    with pytest.raises(ConfigError, match="both name the display") as info:
        renderd.launch(**SMALL, platform="Linux64", x_display=x_display, env={"DISPLAY": ":0"}, start_timeout=START)
    assert info.value.key == "env"


@pytest.mark.xvfb
@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_an_empty_display_in_env_goes_with_x_display():
    # (It names no display: it only keeps this process's DISPLAY from the player.)
    with renderd.launch(**SMALL, platform="Linux64", x_display="managed", env={"DISPLAY": ""},
                        start_timeout=START) as session:
        assert psutil.Process(session.pid).environ()["DISPLAY"].startswith(":")


def test_numbers_and_paths_in_env_are_written_out(tmp_path):
    env = {"RENDERD_TEST_N": 3, "RENDERD_TEST_NP": np.int64(4), "RENDERD_TEST_F": np.float32(0.5),
           "RENDERD_TEST_DIR": tmp_path}
    with renderd.launch(**SMALL, platform="headless", env=env, start_timeout=START) as s:
        seen = psutil.Process(s.pid).environ()
    assert [seen[k] for k in env] == ["3", "4", "0.5", str(tmp_path)]


def test_numpy_integers_are_sizes_too():
    with renderd.launch(width=np.int64(64), height=np.int32(48), args=["--static-frame"],
                        start_timeout=START) as session:
        session.reset(width=np.int64(80), height=np.uint16(60))
        assert (session.width, session.height) == (80, 60)
        assert session.step("Pass").frame.shape == (60, 80, 3)


def test_a_relative_log_path_is_found_after_a_chdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    session = renderd.launch(**SMALL, platform="headless", log_path="player.log", start_timeout=START)
    try:
        monkeypatch.chdir("/")
        with pytest.raises(PlayerCrashed) as info:
            session.step({"action": "RenderdFault", "fault": "exit", "code": 7})
    finally:
        session.close()
    assert info.value.log_path == str(tmp_path / "player.log")
    assert info.value.log_tail, "the crash quotes the log"


@pytest.mark.parametrize("width", [math.inf, True, 2.5, "64", 0, 4097])
def test_a_bad_reset_size_is_an_argument_error_before_anything_is_sent(width):
    with renderd.launch(**SMALL, platform="headless", args=["--static-frame"], start_timeout=START) as session:
        with pytest.raises(ArgumentError, match="nothing was sent") as info:
            session.reset(width=width)
        assert info.value.key == "width" and str(info.value).startswith("width: reset: must be an integer")
        assert session.step("Pass").sequence_id == 1  # nothing was sent: the sequence goes on
