"""Errors, review 9: an error rebuilt as ``type(error)(error)`` (Gymnasium's AsyncVectorEnv re-raises a worker's
error that way, after pickling it across processes) keeps what it carries."""

from __future__ import annotations

import pickle

import pytest

from renderd.config import ArgumentError
from renderd.errors import (
    ConfigError,
    LeaseBusyError,
    PlatformError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
)

ERRORS = [
    PlayerCrashed("the player exited while renderd waited for its answer", pid=4242, returncode=-11,
                  log_tail="loading scene\nsegfault in renderer", log_path="/var/log/player.log"),
    PlayerTimeout("no answer within step_timeout = 5 s", deadline="step_timeout", seconds=5.0),
    ProtocolError("unknown field type 72", offset=1024, field_type=72),
    ConfigError("must be an integer 1..4096, got 0", path="/etc/renderd.toml", key="environments.demo.width"),
    ArgumentError("must be a finite number of seconds", key="step_timeout"),
    PlatformError("no platform can run it", reports=["Linux64: no X display"]),
    LeaseBusyError("the daemon holds as many waiting requests as it can"),
]


@pytest.mark.parametrize("error", ERRORS, ids=[type(e).__name__ for e in ERRORS])
def test_an_error_rebuilt_from_itself_keeps_what_it_carries(error):
    # AsyncVectorEnv's worker puts the error on a queue (pickled), and the parent raises exctype(value): the
    # PlayerCrashed a user caught there had returncode, signal_name, pid and log_tail None or empty, a
    # PlayerTimeout no deadline, a ConfigError no key (and its reason the whole message).
    received = pickle.loads(pickle.dumps(error))
    rebuilt = type(received)(received)
    assert type(rebuilt) is type(error)
    assert str(rebuilt) == str(error)
    assert vars(rebuilt) == vars(error)
    if isinstance(error, PlayerCrashed):
        assert rebuilt.signal_name == "SIGSEGV" and rebuilt.returncode == -11


def test_explicit_attributes_win_over_those_of_the_error_given_as_message():
    source = PlayerTimeout("no answer", deadline="step_timeout", seconds=5.0)
    rebuilt = PlayerTimeout(source, deadline="recv timeout")
    assert rebuilt.deadline == "recv timeout" and rebuilt.seconds == 5.0
