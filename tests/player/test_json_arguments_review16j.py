"""The reference player reads action arguments as an AI2-THOR build's Json.NET converts them (docs/player.md,
Actions)."""

from __future__ import annotations

import pytest

from renderd.player.core import Player


def _player() -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True)


def _agent(md: dict, index: int = 0) -> dict:
    return md["agents"][index]


def _step(p: Player, action: dict, index: int = 0) -> dict:
    md, _ = p.handle(action)
    return _agent(md, index)


@pytest.mark.parametrize("text, degrees", [("30", 30.0), (" 45.5 ", 45.5), ("+1e1", 10.0), ("1,000", 1000.0),
                                           (".5", 0.5), ("-90", -90.0)])
def test_a_numeric_string_is_a_number_where_a_float_is_wanted(text, degrees):
    p = _player()
    turned = _step(p, {"action": "RotateRight", "degrees": text})
    assert turned["lastActionSuccess"], turned["errorMessage"]
    assert turned["agent"]["rotation"]["y"] == pytest.approx(degrees % 360.0)


def test_numeric_strings_and_bools_reach_every_kind_of_number_argument():
    p = _player()
    moved = _step(p, {"action": "MoveAhead", "moveMagnitude": " 0.5"})
    assert moved["lastActionSuccess"] and moved["agent"]["position"]["z"] == -1.5
    moved = _step(p, {"action": "MoveBack", "moveMagnitude": True})  # Json.NET: true is 1
    assert moved["lastActionSuccess"] and moved["agent"]["position"]["z"] == -2.5
    looked = _step(p, {"action": "LookDown", "degrees": "20"})  # a ServerAction field, converted the same
    assert looked["lastActionSuccess"] and looked["agent"]["cameraHorizon"] == 20
    teleported = _step(p, {"action": "TeleportFull", "position": {"x": "0.5", "y": "0.9", "z": "-1"},
                           "rotation": {"x": 0, "y": "90", "z": "0"}, "horizon": "10", "standing": "true"})
    assert teleported["lastActionSuccess"], teleported["errorMessage"]
    assert teleported["agent"]["position"] == {"x": 0.5, "y": 0.9, "z": -1.0}
    assert teleported["agent"]["rotation"]["y"] == 90 and teleported["agent"]["cameraHorizon"] == 10
    resized = _step(p, {"action": "ChangeResolution", "x": "32", "y": " 24 "})
    assert resized["lastActionSuccess"] and (resized["screenWidth"], resized["screenHeight"]) == (32, 24)
    added = _step(p, {"action": "AddThirdPartyCamera", "position": {"x": "0", "y": "2", "z": "0"},
                      "rotation": {"x": "30", "y": "0", "z": "0"}, "fieldOfView": "60"})
    assert added["lastActionSuccess"], added["errorMessage"]
    updated = _step(p, {"action": "UpdateThirdPartyCamera", "thirdPartyCameraId": "0", "fieldOfView": "70"})
    assert updated["lastActionSuccess"], updated["errorMessage"]
    reach = _step(p, {"action": "GetReachablePositions", "maxStepCount": "100"})
    assert reach["lastActionSuccess"] and reach["actionReturn"]
    md, _ = p.handle({"action": "Initialize", "gridSize": "0.5", "fieldOfView": "60", "agentCount": "2"})
    assert _agent(md)["lastActionSuccess"], _agent(md)["errorMessage"]
    assert len(md["agents"]) == 2 and p.grid_size == 0.5 and _agent(md)["fov"] == 60


#: What a build answers when .NET's parse of an argument string throws: its ActionDispatcher catches only an
#: ArgumentException as a conversion (InvalidArgument), so its agent answers the FormatException as any exception,
#: errorCode null and the exception's text.
FORMAT = "System.FormatException: Input string was not in a correct format."
NOT_NUMBERS = ["abc", "1_0", "0x10", "1e", "", "1.2.3"]


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_a_string_net_cannot_parse_as_a_float_fails_as_a_build_answers_the_format_exception(value):
    p = _player()
    refused = _step(p, {"action": "RotateRight", "degrees": value})
    assert not refused["lastActionSuccess"] and refused["errorCode"] is None
    assert refused["errorMessage"] == FORMAT
    assert refused["agent"]["rotation"]["y"] == 0 and refused["agent"]["cameraHorizon"] == 0


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_a_whole_server_action_s_float_field_that_is_not_a_number_fails_as_json_net_s_reader_throws(value):
    # LookUp takes a whole ServerAction, read by Json.NET's serializer, whose reader throws a JsonReaderException for
    # such a field (an empty string is read as null, which a float cannot hold: a JsonSerializationException); a
    # build's agent answers either as any exception, errorCode null (docs/player.md).
    p = _player()
    refused = _step(p, {"action": "LookUp", "degrees": value})
    assert not refused["lastActionSuccess"] and refused["errorCode"] is None
    assert refused["errorMessage"] == (
        f"Newtonsoft.Json.JsonReaderException: Could not convert string to double: {value}. Path 'degrees'." if value
        else "Newtonsoft.Json.JsonSerializationException: Error converting value {null} to type 'System.Single'. "
             "Path 'degrees'. ---> System.InvalidCastException: Null object cannot be converted to a value type.")
    assert refused["agent"]["rotation"]["y"] == 0 and refused["agent"]["cameraHorizon"] == 0


@pytest.mark.parametrize("value, shown", [(None, ""), ([30], "[30]")])
def test_what_json_net_cannot_convert_to_a_float_is_an_invalid_argument_named_as_a_build_names_it(value, shown):
    # null, an object or an array, for an argument a build converts by itself: Json.NET's conversion raises an
    # ArgumentException, a build's InvalidArgument. (null in a whole ServerAction's field: see above.)
    p = _player()
    refused = _step(p, {"action": "RotateRight", "degrees": value} if value is not None else
                    {"action": "ChangeResolution", "x": 32, "y": None})
    key, kind = ("degrees", "float") if value is not None else ("y", "int")
    name = "RotateRight" if value is not None else "ChangeResolution"
    assert not refused["lastActionSuccess"] and refused["errorCode"] == "InvalidArgument"
    assert refused["errorMessage"] == (
        f"action: {name} has an invalid argument: {key} (=={shown}). Cannot convert to: {kind}")
    assert refused["agent"]["rotation"]["y"] == 0 and refused["agent"]["cameraHorizon"] == 0


def test_an_int_argument_takes_digits_only_and_a_string_argument_takes_a_number_as_its_text():
    p = _player()
    for value in ("32.0", "1,000", "3e1"):  # Int32.Parse refuses them: a FormatException, errorCode null
        refused = _step(p, {"action": "ChangeResolution", "x": value, "y": 24})
        assert not refused["lastActionSuccess"] and refused["errorCode"] is None, value
        assert refused["errorMessage"] == FORMAT
        assert (refused["screenWidth"], refused["screenHeight"]) == (16, 12)
    refused = _step(p, {"action": "Initialize", "agentCount": "2.0"})  # a ServerAction's field: Json.NET's reader
    assert refused["errorCode"] is None and refused["errorMessage"] == (
        "Newtonsoft.Json.JsonReaderException: Could not convert string to integer: 2.0. Path 'agentCount'.")
    # ChangeQuality's quality is a string: the number 5 is the name "5", which is no quality level.
    quality = _step(p, {"action": "ChangeQuality", "quality": 5})
    assert not quality["lastActionSuccess"] and "no quality level named '5'" in quality["errorMessage"]


def test_a_real_player_converts_a_numeric_string_and_fails_one_that_is_not_a_number_as_a_build(spawn):
    p = spawn(["-screen-width", "32", "-screen-height", "24"])
    p.start_session()
    turned = p.step("RotateRight", degrees="30")
    assert turned.metadata["lastActionSuccess"], turned.metadata["errorMessage"]
    assert turned.metadata["agent"]["rotation"]["y"] == 30
    refused = p.step("MoveAhead", moveMagnitude="abc")
    assert not refused.metadata["lastActionSuccess"] and refused.metadata["errorCode"] is None
    assert refused.metadata["errorMessage"] == FORMAT
    assert refused.metadata["agent"]["position"]["z"] == -2
