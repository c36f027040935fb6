"""The reference player reads an action as an AI2-THOR 5 build's Json.NET does where a build hands the action to its
serializer (docs/player.md, Actions): a whole ServerAction (Initialize, Reset, LookUp, LookDown) and every Vector3
argument (a teleport's or a camera's ``position`` and ``rotation``). What that serializer cannot read fails as a build
answers its JsonReaderException or JsonSerializationException (lastActionSuccess false, errorCode null, the exception's
first line, ending at the value's JSON path), nothing applied; an ``agentId`` is converted as a build's AgentManager
converts it (``(int)JToken``: 1.5 names agent 2, "1" and true agent 1)."""

from __future__ import annotations

import pytest

from renderd.player.core import Player
from tests.helpers.fifo_driver import PlayerProcess

READER = "Newtonsoft.Json.JsonReaderException: "
SERIALIZATION = "Newtonsoft.Json.JsonSerializationException: "
NULL_CAST = " ---> System.InvalidCastException: Null object cannot be converted to a value type."
OVERFLOW = "System.OverflowException: Value was either too large or too small for an Int32."


def _player(**kwargs) -> Player:
    return Player(width=16, height=12, platform="Linux64", headless=True, **kwargs)


def _acting(p: Player, action: dict) -> dict:
    md, _ = p.handle(action)
    return md["agents"][md["activeAgentId"]]


def _failed_as_a_build(agent: dict, message: str) -> None:
    assert not agent["lastActionSuccess"] and agent["errorCode"] is None, agent["errorMessage"]
    assert agent["errorMessage"] == message


@pytest.mark.parametrize("value, message", [
    ("abc", READER + "Could not convert string to integer: abc. Path 'agentCount'."),
    ("2.5", READER + "Could not convert string to integer: 2.5. Path 'agentCount'."),  # int.TryParse: digits only
    ("99999999999", READER + "Could not convert string to integer: 99999999999. Path 'agentCount'."),
    (None, SERIALIZATION + "Error converting value {null} to type 'System.Int32'. Path 'agentCount'." + NULL_CAST),
    ("", SERIALIZATION + "Error converting value {null} to type 'System.Int32'. Path 'agentCount'." + NULL_CAST),
    (True, READER + "Error reading integer. Unexpected token: Boolean. Path 'agentCount'."),
    ([2], READER + "Error reading integer. Unexpected token: StartArray. Path 'agentCount'."),
    ({"n": 2}, READER + "Error reading integer. Unexpected token: StartObject. Path 'agentCount'."),
    (3e9, READER + "Could not convert to integer: 3000000000. Path 'agentCount'. ---> " + OVERFLOW),
    (2**40, READER + "Could not convert to integer: 1099511627776. Path 'agentCount'. ---> " + OVERFLOW),
    (2**70, OVERFLOW),  # a BigInteger: its (int) cast throws unwrapped
])
def test_an_int_field_json_net_cannot_read_fails_as_a_build_answers_the_exception(value, message):
    p = _player()
    p.handle({"action": "Initialize", "agentCount": 2})
    agent = _acting(p, {"action": "Initialize", "agentCount": value, "gridSize": 0.5})
    _failed_as_a_build(agent, message)
    assert len(p.agents) == 2 and p.grid_size == 0.25  # nothing applied: Initialize never ran


@pytest.mark.parametrize("value, message", [
    ("abc", READER + "Could not convert string to double: abc. Path 'degrees'."),
    ("0x10", READER + "Could not convert string to double: 0x10. Path 'degrees'."),
    (None, SERIALIZATION + "Error converting value {null} to type 'System.Single'. Path 'degrees'." + NULL_CAST),
    (False, READER + "Error reading double. Unexpected token: Boolean. Path 'degrees'."),
    ([30], READER + "Error reading double. Unexpected token: StartArray. Path 'degrees'."),
])
def test_a_float_field_json_net_cannot_read_fails_as_a_build_answers_the_exception(value, message):
    p = _player()
    for name in ("LookUp", "LookDown"):
        _failed_as_a_build(_acting(p, {"action": name, "degrees": value}), message)
        assert p.horizon == 0
    assert _acting(p, {"action": "LookDown", "degrees": " 1,0 "})["lastActionSuccess"] and p.horizon == 10


def test_the_first_field_json_net_cannot_read_in_the_action_s_order_is_the_one_answered():
    p = _player()
    first = _acting(p, {"action": "Initialize", "gridSize": "fine", "agentCount": "two"})
    _failed_as_a_build(first, READER + "Could not convert string to double: fine. Path 'gridSize'.")
    first = _acting(p, {"action": "Initialize", "agentCount": "two", "gridSize": "fine"})
    _failed_as_a_build(first, READER + "Could not convert string to integer: two. Path 'agentCount'.")
    # A field the player does not use is read all the same, and a key is matched to its field ignoring case.
    _failed_as_a_build(_acting(p, {"action": "Initialize", "moveMagnitude": "far"}),
                       READER + "Could not convert string to double: far. Path 'moveMagnitude'.")
    _failed_as_a_build(_acting(p, {"action": "Initialize", "AgentCount": "two"}),
                       READER + "Could not convert string to integer: two. Path 'AgentCount'.")
    _failed_as_a_build(_acting(p, {"action": "Reset", "sceneName": {"name": "FloorPlan2"}}),
                       READER + "Error reading string. Unexpected token: StartObject. Path 'sceneName'.")
    _failed_as_a_build(_acting(p, {"action": "Reset", "position": {"x": "here"}}),
                       READER + "Could not convert string to double: here. Path 'position.x'.")
    # A key that names no field is ignored, and what Json.NET reads is taken.
    assert _acting(p, {"action": "Initialize", "agentCount": "2", "unknownKey": "abc"})["lastActionSuccess"]
    assert len(p.agents) == 2


def test_a_bool_field_takes_what_bool_try_parse_takes():
    p = _player()
    _failed_as_a_build(_acting(p, {"action": "Initialize", "renderDepthImage": "yes"}),
                       READER + "Could not convert string to boolean: yes. Path 'renderDepthImage'.")
    _failed_as_a_build(
        _acting(p, {"action": "Initialize", "snapToGrid": None}),
        SERIALIZATION + "Error converting value {null} to type 'System.Boolean'. Path 'snapToGrid'." + NULL_CAST)
    assert not p.render_depth
    assert _acting(p, {"action": "Initialize", "renderDepthImage": " TRUE "})["lastActionSuccess"] and p.render_depth


def test_a_vector_axis_json_net_cannot_read_fails_as_a_build_answers_the_exception():
    # A Vector3 argument of an action dispatched by signature is converted with Json.NET's serializer too, whose
    # exception is no ArgumentException: not InvalidArgument, but the agent's catch-all (errorCode null).
    p = _player()
    _failed_as_a_build(
        _acting(p, {"action": "Teleport", "position": {"x": 0.25, "y": 0.9, "z": None}}),
        SERIALIZATION + "Error converting value {null} to type 'System.Single'. Path 'position.z'." + NULL_CAST)
    # The axes are read in the object's order: z fails before x is looked at.
    _failed_as_a_build(_acting(p, {"action": "TeleportFull", "position": {"z": "back", "x": None, "y": 0.9},
                                   "rotation": {"y": 0}, "horizon": 0, "standing": True}),
                       READER + "Could not convert string to double: back. Path 'position.z'.")
    _failed_as_a_build(_acting(p, {"action": "AddThirdPartyCamera", "position": {"x": True}, "rotation": {}}),
                       READER + "Error reading double. Unexpected token: Boolean. Path 'position.x'.")
    assert (p.x, p.z, p.cameras) == (0.0, -2.0, [])
    # An axis is matched ignoring case, as Json.NET matches a field.
    assert _acting(p, {"action": "Teleport", "position": {"X": 0.25, "Y": 0.9, "Z": -2}})["lastActionSuccess"]
    assert (p.x, p.z) == (0.25, -2.0)


def test_update_third_party_camera_converts_its_vectors_before_it_checks_the_field_of_view():
    # A build's ActionDispatcher converts every argument (in the parameters' order) before the action runs and checks
    # the field of view; an OptionalVector3's null axis is not given (the camera's value kept).
    p = _player()
    assert _acting(p, {"action": "AddThirdPartyCamera", "position": {"x": 1, "y": 2, "z": -1},
                       "rotation": {"x": 30, "y": 45, "z": 0}})["lastActionSuccess"]
    _failed_as_a_build(_acting(p, {"action": "UpdateThirdPartyCamera", "fieldOfView": 500,
                                   "rotation": {"x": "up"}}),
                       READER + "Could not convert string to double: up. Path 'rotation.x'.")
    assert p.cameras[0].position == (1.0, 2.0, -1.0) and p.cameras[0].fov == 90
    assert _acting(p, {"action": "UpdateThirdPartyCamera", "position": {"x": None, "Y": 3}})["lastActionSuccess"]
    assert p.cameras[0].position == (1.0, 3.0, -1.0)


@pytest.mark.parametrize("agent_id, acting", [(1.5, 2), (2.5, 2), (0.5, 0), ("1", 1), (" +2 ", 2), (True, 1),
                                               (False, 0), (2.0, 2)])
def test_an_agent_id_is_converted_as_a_build_s_agent_manager_converts_it(agent_id, acting):
    # (int)JToken: Convert.ToInt32, a float rounded to even, a bool 1 or 0, a string by Int32.Parse.
    p = _player()
    p.handle({"action": "Initialize", "agentCount": 3})
    md, _ = p.handle({"action": "RotateRight", "agentId": agent_id})
    assert md["activeAgentId"] == acting == p.active
    assert md["agents"][acting]["lastActionSuccess"] and md["agents"][acting]["lastAction"] == "RotateRight"
    assert [a["agent"]["rotation"]["y"] for a in md["agents"]] == [90.0 if i == acting else 0.0 for i in range(3)]


@pytest.mark.parametrize("agent_id", ["1.5", "one", 3.5, 2.0**31, None, {"id": 1}])
def test_an_agent_id_a_build_cannot_convert_or_that_names_no_agent_is_answered_by_agent_0(agent_id):
    p = _player()
    p.handle({"action": "Initialize", "agentCount": 3})
    md, _ = p.handle({"action": "RotateRight", "agentId": agent_id})
    agent = md["agents"][0]
    assert md["activeAgentId"] == 0 and not agent["lastActionSuccess"] and agent["errorCode"] == "InvalidArgument"
    assert all(a["agent"]["rotation"]["y"] == 0.0 for a in md["agents"])


def test_a_whole_server_action_reads_its_agent_id_field_as_json_net_reads_it():
    # The AgentManager's (int)true names agent 1; the ServerAction's int field then cannot be read from a bool.
    p = _player()
    p.handle({"action": "Initialize", "agentCount": 2})
    md, _ = p.handle({"action": "LookDown", "agentId": True})
    assert md["activeAgentId"] == 1
    _failed_as_a_build(md["agents"][1], READER + "Error reading integer. Unexpected token: Boolean. Path 'agentId'.")
    assert [a.horizon for a in p.agents] == [0.0, 0.0]
    md, _ = p.handle({"action": "LookDown", "agentId": "1"})
    assert md["activeAgentId"] == 1 and md["agents"][1]["lastActionSuccess"] and p.agents[1].horizon == 30


def test_no_color_bounds_in_an_agent_s_map_as_an_ai2thor_5_build_s_metadata_has_none():
    # AI2-THOR 5's MetadataWrapper has no colorBounds field (older builds had one): the map leaves it out, with the
    # segmentation images too.
    p = Player(width=16, height=12, platform="Linux64")
    md, _ = p.handle({"action": "Initialize", "renderInstanceSegmentation": True, "renderSemanticSegmentation": True})
    assert md["agents"][0]["colors"] and "colorBounds" not in md["agents"][0]


def test_a_player_process_answers_what_json_net_cannot_read_as_a_build(tmp_path):
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "24", "--static-frame"]) as p:
        p.start_session()
        refused = p.step("Initialize", agentCount="two")
        assert not refused and refused.metadata["errorCode"] is None
        assert refused.metadata["errorMessage"] == (
            READER + "Could not convert string to integer: two. Path 'agentCount'.")
        assert len(p.step("Initialize", agentCount="2").events) == 2
        turned = p.step("RotateRight", agentId="1")
        assert turned and turned.metadata["agentId"] == 1 and turned.metadata["agent"]["rotation"]["y"] == 90
        assert p.step("Pass").metadata["agent"]["rotation"]["y"] == 0
