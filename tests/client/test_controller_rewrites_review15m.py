"""``Session.step`` sends an action as AI2-THOR's controller would: a number as ``rotation`` becomes the yaw
``{"y": n}`` (a build refuses a number there), and ``renderObjectImage`` / ``renderClassImage`` also set their
newer names. What the player received is checked on the player's side of the pipe."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import renderd

W, H = 4, 2

# A player that answers each action with metadata whose actionReturn is the action exactly as it received it.
_PLAYER = """
import os
import msgpack
from renderd.protocol import NEED_DATA, Decoder, FieldType, encode_message, decode_action
def answer(seq, received):
    agent = {"screenWidth": %d, "screenHeight": %d, "lastAction": received.get("action", "Pass"),
             "lastActionSuccess": True, "errorMessage": "", "actionReturn": received}
    return encode_message([(FieldType.METADATA, msgpack.packb({"sequenceId": seq, "agents": [agent]}))])
w = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
os.writev(w, answer(0, {}))
r = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
d = Decoder()
while True:
    data = os.read(r, 65536)
    if not data:
        break
    d.receive_data(data)
    m = d.next_message()
    if m is not NEED_DATA:
        action = decode_action(m)
        os.writev(w, answer(action["sequenceId"], action))
""" % (W, H)


@pytest.fixture
def echo(tmp_path):
    session = renderd.launch(executable=[sys.executable, "-c", _PLAYER], width=W, height=H, platform="headless",
                             start_timeout=20, step_timeout=10, log_path=str(tmp_path / "player.log"))
    try:
        yield session
    finally:
        session.close()


def received(session, *args, **kwargs):
    received = dict(session.step(*args, **kwargs).metadata["actionReturn"])
    received.pop("sequenceId")
    return received


def test_a_number_as_rotation_is_sent_as_the_yaw(echo):
    position = {"x": 1.0, "y": 0.9, "z": 0.5}
    assert received(echo, "Teleport", position=position, rotation=90) == {
        "action": "Teleport", "position": position, "rotation": {"y": 90}}
    assert received(echo, {"action": "Teleport", "rotation": 45.5})["rotation"] == {"y": 45.5}
    assert received(echo, "Teleport", rotation=np.float32(30))["rotation"] == {"y": 30.0}
    # A dict is sent as it is; what is not a number is left for the player to judge.
    assert received(echo, "Teleport", rotation={"x": 0, "y": 180, "z": 0})["rotation"] == {"x": 0, "y": 180, "z": 0}
    assert received(echo, "Teleport", rotation=True)["rotation"] is True
    assert received(echo, "Teleport", rotation=[0, 90, 0])["rotation"] == [0, 90, 0]
    assert "rotation" not in received(echo, "MoveAhead")


def test_the_old_names_of_the_segmentation_switches_set_the_new_ones_too(echo):
    assert received(echo, "Pass", renderObjectImage=True) == {
        "action": "Pass", "renderObjectImage": True, "renderInstanceSegmentation": True}
    assert received(echo, "Pass", renderClassImage=False, renderSemanticSegmentation=True) == {
        "action": "Pass", "renderClassImage": False, "renderSemanticSegmentation": False}


def test_reset_sends_its_initialize_rewritten_too(echo):
    echo.reset(renderObjectImage=True)
    init = dict(echo.last_event.metadata["actionReturn"])
    assert init["action"] == "Initialize"
    assert init["renderObjectImage"] is True and init["renderInstanceSegmentation"] is True


def test_the_callers_dict_is_not_changed(echo):
    action = {"action": "Teleport", "rotation": 90, "renderObjectImage": True}
    echo.step(action)
    assert action == {"action": "Teleport", "rotation": 90, "renderObjectImage": True}
