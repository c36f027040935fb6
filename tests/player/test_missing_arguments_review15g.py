"""The AgentManager's actions a build dispatches by signature (ChangeResolution, AddThirdPartyCamera) and ChangeQuality
fail a missing or null argument as an AI2-THOR 5.x build's ActionDispatcher does.

* The arguments given are converted first (one that cannot be: ``InvalidArgument``), then every parameter without a
  default that was not given is named, in the parameter order, in the build's words:
  ``action: <name> is missing the following arguments: <a>,<b>`` (``MissingArguments``). The player named only the
  first one, in words of its own (``ChangeResolution needs the argument 'x'``), or both whichever was missing
  (``AddThirdPartyCamera needs position and rotation``), before converting the others.
* A null ``x`` or ``y`` of ChangeResolution is given, not missing: an int cannot be null, so the build's Json.NET
  conversion fails it ``InvalidArgument`` (``action: ChangeResolution has an invalid argument: x (==). Cannot convert
  to: int``); the player answered ``MissingArguments``.
"""

from __future__ import annotations

import pytest

from renderd.player.core import Player
from tests.helpers.fifo_driver import PlayerProcess

CAMERA = {"position": {"x": 0, "y": 2, "z": 0}, "rotation": {"x": 90, "y": 0, "z": 0}}


def _run(p: Player, action: dict) -> dict:
    return p.handle(action)[0]["agents"][0]


def _missing(name: str, keys: str) -> str:
    return f"action: {name} is missing the following arguments: {keys}"


@pytest.mark.parametrize("action, keys", [
    ({"action": "ChangeResolution", "x": 32}, "y"),
    ({"action": "ChangeResolution", "y": 24}, "x"),
    ({"action": "ChangeResolution"}, "x,y"),
    ({"action": "AddThirdPartyCamera", "position": CAMERA["position"]}, "rotation"),
    ({"action": "AddThirdPartyCamera", "rotation": CAMERA["rotation"], "fieldOfView": 60}, "position"),
    ({"action": "AddThirdPartyCamera"}, "position,rotation"),
    ({"action": "ChangeQuality"}, "quality"),
])
def test_every_missing_argument_is_named_in_a_build_s_words(action, keys):
    p = Player(width=16, height=12)
    agent = _run(p, action)
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "MissingArguments"
    assert agent["errorMessage"] == _missing(action["action"], keys)
    assert (p.width, p.height, len(p.cameras)) == (16, 12, 0)  # nothing changed


@pytest.mark.parametrize("action, quoted", [
    # Given arguments are converted before the missing ones are named: a wrong kind is InvalidArgument.
    ({"action": "ChangeResolution", "x": [32]}, "x"),
    ({"action": "AddThirdPartyCamera", "rotation": 90}, "rotation"),
    ({"action": "AddThirdPartyCamera", "position": [0, 2, 0]}, "position"),
    ({"action": "AddThirdPartyCamera", "fieldOfView": None}, "fieldOfView"),
])
def test_a_given_argument_of_the_wrong_kind_is_found_before_the_missing_ones(action, quoted):
    p = Player(width=16, height=12)
    agent = _run(p, action)
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "InvalidArgument", agent["errorMessage"]
    assert quoted in agent["errorMessage"]
    assert (p.width, p.height, len(p.cameras)) == (16, 12, 0)


def test_a_given_fraction_is_converted_before_the_missing_ones_are_named():
    # Json.NET converts 2.5 to a build's int (Convert.ToInt32 rounds it to even: 2), so the conversion passes and the
    # missing y is named next; nothing changes.
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "ChangeResolution", "x": 2.5})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "MissingArguments"
    assert agent["errorMessage"] == _missing("ChangeResolution", "y")
    assert (p.width, p.height) == (16, 12)
    # Given both, the fraction is the size taken.
    agent = _run(p, {"action": "ChangeResolution", "x": 2.5, "y": 24})
    assert agent["lastActionSuccess"], agent["errorMessage"]
    assert (agent["screenWidth"], agent["screenHeight"]) == (2, 24) == (p.width, p.height)


def test_a_given_string_net_cannot_parse_fails_before_the_missing_ones_are_named():
    # Int32.Parse("2.5") throws a FormatException while the given argument is converted, before a build's
    # ActionDispatcher names the missing ones; its agent answers it as any exception: errorCode null.
    p = Player(width=16, height=12)
    agent = _run(p, {"action": "ChangeResolution", "x": "2.5"})
    assert agent["lastActionSuccess"] is False and agent["errorCode"] is None
    assert agent["errorMessage"] == "System.FormatException: Input string was not in a correct format."
    assert (p.width, p.height) == (16, 12)


@pytest.mark.parametrize("key", ["x", "y"])
def test_a_null_size_cannot_be_converted_to_an_int(key):
    p = Player(width=16, height=12)
    action = {"action": "ChangeResolution", "x": 32, "y": 24, key: None}
    agent = _run(p, action)
    assert agent["lastActionSuccess"] is False and agent["errorCode"] == "InvalidArgument"
    assert agent["errorMessage"] == f"action: ChangeResolution has an invalid argument: {key} (==). Cannot convert to: int"
    assert (p.width, p.height) == (16, 12)


def test_the_sizes_and_the_camera_still_work_once_given():
    # The same actions with every argument succeed, and a size out of range is still refused (a guard); a null quality
    # is given, not missing: an unknown level name, InvalidArgument (it was MissingArguments).
    p = Player(width=16, height=12)
    assert _run(p, {"action": "ChangeResolution", "x": 32, "y": 24})["lastActionSuccess"]
    assert (p.width, p.height) == (32, 24)
    agent = _run(p, {"action": "ChangeResolution", "x": 0, "y": 24})
    assert agent["errorCode"] == "InvalidArgument" and (p.width, p.height) == (32, 24)
    assert _run(p, {"action": "AddThirdPartyCamera", **CAMERA})["lastActionSuccess"] and len(p.cameras) == 1
    assert _run(p, {"action": "ChangeQuality", "quality": "Low"})["lastActionSuccess"]
    agent = _run(p, {"action": "ChangeQuality", "quality": None})
    assert agent["errorCode"] == "InvalidArgument" and "None" in agent["errorMessage"]


def test_a_player_process_answers_the_missing_arguments_over_its_pipes(tmp_path):
    with PlayerProcess(tmp_path, ["-screen-width", "16", "-screen-height", "12"]) as p:
        p.start_session()
        ev = p.step("ChangeResolution", x=32)
        assert not ev and ev.metadata["errorCode"] == "MissingArguments"
        assert ev.metadata["errorMessage"] == _missing("ChangeResolution", "y")
        ev = p.step("AddThirdPartyCamera", position=CAMERA["position"])
        assert ev.metadata["errorMessage"] == _missing("AddThirdPartyCamera", "rotation")
        ev = p.step("ChangeResolution", x=32, y=24)
        assert ev and ev.frame.shape[:2] == (24, 32)
