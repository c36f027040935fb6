"""AI2THOR_SERVER_SIDE_SCREENSHOT, read as a build's AgentManager reads it (``bool.Parse``; unset: false).

A build renders and sends images only when the variable is true (``shouldRender = renderImage &&
serverSideScreenshot``): otherwise its answers carry metadata only, with no camera list in the agents' maps.
A value ``bool.Parse`` rejects stops a build at start; the player then exits 2 (bad environment), naming the
variable and its value.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from renderd import protocol
from renderd.protocol import FieldType
from tests.helpers.fifo_driver import PlayerProcess

SMALL = ["-screen-width", "16", "-screen-height", "12"]
VAR = "AI2THOR_SERVER_SIDE_SCREENSHOT"
IMAGE_FIELDS = set(protocol.IMAGE_FIELDS)


def _start(tmp_path, value: str | None) -> PlayerProcess:
    p = PlayerProcess(tmp_path, SMALL, start=False)
    if value is None:
        p.env.pop(VAR, None)
    else:
        p.env[VAR] = value
    p.start()
    return p


def _field_types(message) -> set:
    return {t for t, _ in message.fields}


@pytest.mark.parametrize("value", [None, "False", " false\t"])
def test_no_images_unless_the_variable_is_true(tmp_path, value):
    with _start(tmp_path, value) as p:
        first = p.recv_message()
        assert FieldType.METADATA in _field_types(first)
        assert not _field_types(first) & IMAGE_FIELDS, f"{VAR}={value!r}: the first message has images"
        p.open_client()
        p.send("AddThirdPartyCamera", position={"x": 0, "y": 1.5, "z": 0}, rotation={"x": 0, "y": 0, "z": 0})
        p.recv_message()
        p.send("Pass", renderDepthImage=True, renderInstanceSegmentation=True)
        answer = p.recv_message()
        assert not _field_types(answer) & IMAGE_FIELDS, f"{VAR}={value!r}: a step sent images"
        event = p.assembler.event(answer)
        assert event.metadata["lastActionSuccess"] is True
        assert event.metadata["thirdPartyCameras"] is None  # as a build's answer without images
        assert event.frame is None
        assert p.terminate() == 0
        assert f"{VAR}" in p.log_text() and "metadata only" in p.log_text()


@pytest.mark.parametrize("value", ["True", " TRUE \n"])
def test_images_when_the_variable_parses_true(tmp_path, value):
    with _start(tmp_path, value) as p:
        first = p.recv_message()
        assert FieldType.RGB_IMAGE in _field_types(first)
        p.open_client()
        event = p.step("Pass")
        assert event.frame is not None and event.frame.shape[:2] == (12, 16)
        assert p.terminate() == 0


@pytest.mark.parametrize("value", ["yes", "1", "", "Truee"])
def test_a_value_bool_parse_rejects_stops_the_player_at_start(tmp_path, value):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update({"AI2THOR_SERVER_TYPE": "FIFO", "AI2THOR_FIFO_SERVER_PIPE_PATH": str(tmp_path / "s"),
                "AI2THOR_FIFO_CLIENT_PIPE_PATH": str(tmp_path / "c"), VAR: value})
    result = subprocess.run([sys.executable, "-m", "renderd.player", *SMALL], env=env, capture_output=True,
                            text=True, timeout=15)
    assert result.returncode == 2, result.stderr
    assert f"{VAR}={value!r}" in result.stderr and "True or False" in result.stderr
    assert not (tmp_path / "s").exists()  # it stopped before touching the pipes
