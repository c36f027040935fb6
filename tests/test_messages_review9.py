"""What a new user reads first: the errors of a mistyped executable or socket, and the package's names."""

from __future__ import annotations

import pytest

import renderd
from renderd.errors import ConfigError, RenderdError


def test_an_executable_that_is_a_directory_is_said_to_be_one(tmp_path):
    with pytest.raises(ConfigError, match=r"is a directory, not a program"):
        renderd.launch(str(tmp_path))


def test_connect_to_no_daemon_names_the_argument_a_python_caller_has(tmp_path):
    with pytest.raises(RenderdError, match=r"socket= from Python, --socket on the command line") as caught:
        renderd.connect("demo", socket=str(tmp_path / "none" / "control.sock"), timeout=2)
    assert "Is `renderd start` running?" in str(caught.value)


def test_the_public_names_are_listed_once():
    assert len(renderd.__all__) == len(set(renderd.__all__)), renderd.__all__
    for name in renderd.__all__:
        assert getattr(renderd, name) is not None


def test_listening_on_an_address_that_is_not_this_machines_says_so():
    from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

    server = PlayerHttpServer(PlayerBridgeRegistry(), host="192.0.2.1", port=0)  # (TEST-NET-1: nobody's address)
    with pytest.raises(OSError, match=r"cannot listen on 192\.0\.2\.1:0: .*not an address of this machine"):
        server.start()


def test_a_host_name_for_the_http_listener_is_told_the_loopback_addresses():
    from renderd.config import loads

    with pytest.raises(ConfigError, match=r"'localhost' is not an IP address .*127\.0\.0\.1 or ::1"):
        loads('[daemon]\nhttp = "localhost:8080"\n')



def test_an_unknown_quality_lists_the_levels_to_choose_from_without_the_placeholder():
    with pytest.raises(ConfigError, match=r"expected one of Very Low, Low, .*High WebGL$") as caught:
        renderd.launch("renderd-player", quality="Bogus")
    assert "DONOTUSE" not in str(caught.value)


def test_timeouts_computed_with_numpy_are_taken(tmp_path):
    import numpy as np

    from renderd.config import ArgumentError, check_seconds

    assert check_seconds(np.float32(1.5), "step_timeout") == 1.5
    assert check_seconds(np.int64(2), "step_timeout") == 2.0
    for bad in (np.True_, True, "1", None, 10**400, np.float64("nan")):
        with pytest.raises(ArgumentError):
            check_seconds(bad, "step_timeout")
    with renderd.launch("renderd-player", width=32, height=32, start_timeout=np.float32(30),
                        step_timeout=np.int64(30)) as session:
        assert session.step("Pass").frame.shape == (32, 32, 3)


@pytest.mark.parametrize(("executable", "says"), [
    (b"/bin/true", "not bytes"),
    (["renderd-player", None], "not NoneType: None in"),
    (["renderd-player", 3], "not int: 3 in"),
    (5, "is a path or an argv list, not int"),
])
def test_an_executable_of_the_wrong_kind_is_a_config_error_naming_it(executable, says):
    with pytest.raises(ConfigError, match=says) as caught:
        renderd.launch(executable)
    assert caught.value.key == "executable"
