"""The reference player converts action arguments as an AI2-THOR build's Json.NET does (docs/player.md, Actions): an int
argument given a fraction is rounded as Convert.ToInt32 rounds it (to even), one beyond 32 bits fails as its
OverflowException is answered, and an argument string .NET cannot parse fails as a build's ActionDispatcher answers
the FormatException (no errorCode, the exception's text), so AI2-THOR's controller returns the event instead of
raising a ValueError."""

from __future__ import annotations

import pytest

from renderd.player.core import Player
from tests.helpers.fifo_driver import PlayerProcess

FORMAT = "System.FormatException: Input string was not in a correct format."
OVERFLOW = "System.OverflowException: Value was either too large or too small for an Int32."


def _player(**kwargs) -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True, **kwargs)


def _agent(p: Player, action: dict, index: int = 0) -> dict:
    md, _ = p.handle(action)
    return md["agents"][index]


@pytest.mark.parametrize("given, taken", [(32.5, 32), (33.5, 34), (32.4, 32), (32.6, 33), (True, 1)])
def test_an_int_argument_given_a_fraction_is_rounded_to_even_as_json_net_converts_it(given, taken):
    # Json.NET's (int) conversion of a float is Convert.ToInt32: to the nearest integer, a tie to the even one.
    p = _player()
    agent = _agent(p, {"action": "ChangeResolution", "x": given, "y": 24.5})
    assert agent["lastActionSuccess"], agent["errorMessage"]
    assert (agent["screenWidth"], agent["screenHeight"]) == (taken, 24) == (p.width, p.height)


def test_every_int_argument_rounds_a_fraction():
    p = _player()
    md, _ = p.handle({"action": "Initialize", "agentCount": 2.5})  # a ServerAction's int field: the same rounding
    assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
    assert len(md["agents"]) == 2
    md, _ = p.handle({"action": "Initialize", "agentCount": 3.5})
    assert len(md["agents"]) == 4
    p.handle({"action": "Reset"})
    assert _agent(p, {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 1, "z": 0},
                      "rotation": {"x": 0, "y": 0, "z": 0}})["lastActionSuccess"]
    updated = _agent(p, {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": 0.4, "fieldOfView": 60})
    assert updated["lastActionSuccess"], updated["errorMessage"]
    assert updated["thirdPartyCameras"] is None and p.cameras[0].fov == 60  # (headless: no images, no camera list)
    reach = _agent(p, {"action": "GetReachablePositions", "maxStepCount": 10000.4})
    assert reach["lastActionSuccess"] and reach["actionReturn"]
    # Rounded, then checked as an integer given: -0.4 is 0, no size.
    refused = _agent(p, {"action": "ChangeResolution", "x": -0.4, "y": 24})
    assert not refused["lastActionSuccess"] and refused["errorCode"] == "InvalidArgument" and p.width == 16


@pytest.mark.parametrize("value", [2.0**31 - 0.5, -(2.0**31) - 0.6, 2**31, "99999999999"])
def test_an_int_argument_beyond_32_bits_fails_as_convert_to_int32_overflows(value):
    p = _player()
    agent = _agent(p, {"action": "ChangeResolution", "x": value, "y": 24})
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None
    assert agent["errorMessage"] == OVERFLOW and p.width == 16


@pytest.mark.parametrize("action", [
    {"action": "RotateRight", "degrees": "abc"},
    {"action": "RotateLeft", "degrees": ""},
    {"action": "MoveAhead", "moveMagnitude": "0x10"},
    {"action": "Teleport", "horizon": "level"},
    {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 1, "z": 0}, "rotation": {"x": 0, "y": 0, "z": 0},
     "fieldOfView": "wide"},
    {"action": "ChangeResolution", "x": "2.5", "y": 24},  # Int32.Parse takes digits only
    {"action": "ChangeResolution", "x": 32, "y": "1,000"},
    {"action": "GetReachablePositions", "maxStepCount": "3e1"},
    {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": "first"},
])
def test_a_string_net_cannot_parse_fails_as_a_build_answers_the_format_exception(action):
    # .NET's parse throws a FormatException, which a build's ActionDispatcher does not catch as a conversion
    # (ArgumentException): its agent answers it as any exception, lastActionSuccess false, errorCode null.
    p = _player()
    agent = _agent(p, action)
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None
    assert agent["errorMessage"] == FORMAT
    assert (p.width, p.height, len(p.cameras), p.yaw, p.x, p.z, p.horizon) == (16, 12, 0, 0.0, 0.0, -2.0, 0.0)


def test_what_json_net_cannot_convert_at_all_is_still_an_invalid_argument():
    # null, an object or an array: Json.NET's conversion raises an ArgumentException, a build's InvalidArgument.
    p = _player()
    for value in (None, [30], {"d": 30}):
        agent = _agent(p, {"action": "RotateRight", "degrees": value} if value is not None else
                       {"action": "ChangeResolution", "x": None, "y": 24})
        assert not agent["lastActionSuccess"] and agent["errorCode"] == "InvalidArgument", value


def test_a_whole_server_action_s_field_is_read_by_json_net_s_serializer_whose_exceptions_a_build_answers():
    # Initialize, LookUp and LookDown take a whole ServerAction: Json.NET's reader rounds an int field's fraction as
    # above, and throws its own exceptions for what it cannot read, which a build answers as any exception (errorCode
    # null, the exception's first line: see test_server_action_fields_review17h.py).
    p = _player()
    looked = _agent(p, {"action": "LookUp", "degrees": "abc"})
    assert looked["errorCode"] is None and looked["errorMessage"] == (
        "Newtonsoft.Json.JsonReaderException: Could not convert string to double: abc. Path 'degrees'.")
    for count in ("2.5", "two", 2**40, 1e10, None):
        md, _ = p.handle({"action": "Initialize", "agentCount": count})
        agent = md["agents"][0]
        assert not agent["lastActionSuccess"] and agent["errorCode"] is None, count
        assert "Path 'agentCount'." in agent["errorMessage"], count
        assert len(md["agents"]) == 1
    md, _ = p.handle({"action": "Initialize", "agentCount": "2"})
    assert md["agents"][0]["lastActionSuccess"] and len(md["agents"]) == 2


def test_a_player_process_answers_an_unparsable_string_as_a_build(tmp_path):
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "24", "--static-frame"]) as p:
        p.start_session()
        refused = p.step("RotateRight", degrees="abc")
        assert not refused and refused.metadata["errorCode"] is None
        assert refused.metadata["errorMessage"] == FORMAT
        resized = p.step("ChangeResolution", x=40.5, y=30)
        assert resized and (resized.metadata["screenWidth"], resized.frame.shape) == (40, (30, 40, 3))
        assert p.step("Pass").metadata["agent"]["rotation"]["y"] == 0
