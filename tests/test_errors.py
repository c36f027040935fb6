"""The error tree: messages that say what and where, and the allow-listed JSON form."""

from __future__ import annotations

import errno
import signal

import renderd
from renderd.errors import (
    ERROR_TYPES,
    PlayerCrashed,
    ProtocolError,
    describe_exit,
    error_from_dict,
    error_to_dict,
    os_error_message,
)


def test_every_public_error_is_a_renderd_error():
    for name in ("ProtocolError", "PlayerCrashed", "PlayerTimeout", "PlatformError", "ConfigError", "LeaseError"):
        assert issubclass(getattr(renderd, name), renderd.RenderdError)


def test_describe_exit():
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_exit(None) == "still running"


def test_player_crashed_quotes_log_and_hints():
    e = PlayerCrashed("player 12 exited during step 4", pid=12, returncode=-signal.SIGKILL, log_tail="a\nb\n")
    text = str(e)
    assert "SIGKILL" in text and "out-of-memory" in text and "  | a\n  | b" in text
    assert e.signal_name == "SIGKILL"


def test_round_trip_by_allow_list_only():
    e = error_from_dict(error_to_dict(ProtocolError("bad", offset=9)))
    assert type(e) is ProtocolError and str(e) == "bad (at byte offset 9)" and e.offset is None
    assert type(error_from_dict({"type": "os.system", "message": "x"})) is renderd.RenderdError
    assert type(error_from_dict({"type": "__import__", "message": "x"})) is renderd.RenderdError
    assert type(error_from_dict("garbage")) is renderd.RenderdError
    assert error_to_dict(ValueError("v")) == {"type": "RenderdError", "message": "v"}
    assert set(ERROR_TYPES) >= {"LeaseError", "ConfigError", "PlatformError"}


def test_os_error_message_names_errno():
    msg = os_error_message(OSError(errno.ENXIO, "No such device", "/tmp/x.pipe"), "opening client.pipe")
    assert "opening client.pipe (/tmp/x.pipe)" in msg and "ENXIO" in msg and "no process" in msg


def test_an_error_copied_from_itself_still_reads_as_text():
    # Gymnasium's AsyncVectorEnv re-raises a worker's error as type(error)(error).
    from renderd.errors import PlayerCrashed, PlayerTimeout, ProtocolError, RenderdError

    from renderd.config import ArgumentError
    from renderd.errors import ConfigError

    for error in (RenderdError("x went wrong"), ProtocolError("bad bytes", offset=7),
                  PlayerCrashed("it died", returncode=-9, log_tail="last line\n"), PlayerTimeout("slow"),
                  ConfigError("must be positive", path="/etc/renderd.toml", key="width"),
                  ArgumentError("must be positive", key="width")):
        copy = type(error)(error)
        assert str(copy) == str(error) and isinstance(copy.message, str)
