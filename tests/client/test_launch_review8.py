"""Launching and closing a player, review 8: text no process can be given, and a session closed from another
thread while a step waits. Real processes and real FIFOs; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import renderd
from renderd.errors import CallOrderError, ConfigError

from .conftest import START, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize(
    ("kwargs", "key", "where"),
    [
        (dict(env={"RENDERD_TEST_X": "caf\u00e9 \ud800"}), "env", "RENDERD_TEST_X"),
        (dict(env={"RENDERD_TEST_\ud800": "x"}), "env", "RENDERD_TEST_"),
        (dict(args=["--name=\udfff"]), "args", "--name="),
        (dict(log_path="player-\ud800.log"), "log_path", "player-"),
    ],
    ids=["value", "name", "arg", "log-path"],
)
def test_text_with_a_lone_surrogate_is_a_config_error_naming_it(kwargs, key, where):
    # No process can be given a lone surrogate (it has no UTF-8 bytes): a ConfigError naming the argument,
    # not a bare UnicodeEncodeError from deep inside subprocess, and nothing started.
    with pytest.raises(ConfigError) as info:
        renderd.launch(peer_argv("serve"), start_timeout=START, **kwargs)
    assert info.value.key == key
    assert where in str(info.value)


def test_non_ascii_text_reaches_the_player(tmp_path):
    # (Non-ASCII text that has bytes, surrogate-escaped undecodable bytes included, goes through as it is.)
    log_path = tmp_path / "journal-\u00e9t\u00e9.log"
    env = {"RENDERD_TEST_X": "caf\u00e9 \u2603", "RENDERD_TEST_RAW": os.fsdecode(b"raw-\xff")}
    with renderd.launch(peer_argv("serve"), env=env, log_path=log_path, start_timeout=START) as session:
        with open(f"/proc/{session.pid}/environ", "rb") as f:
            seen = f.read().split(b"\0")
        with open(f"/proc/{session.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    assert "RENDERD_TEST_X=caf\u00e9 \u2603".encode() in seen
    assert b"RENDERD_TEST_RAW=raw-\xff" in seen
    assert os.fsencode(log_path) in argv and log_path.exists()
