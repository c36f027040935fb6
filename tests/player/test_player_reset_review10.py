"""Reset reloads the scene with its agent, as a Unity build's does: Initialize's settings do not outlive it."""

from __future__ import annotations

import pytest

import renderd


@pytest.fixture
def session():
    with renderd.launch(["renderd-player"], width=64, height=48,
                        start_timeout=30, step_timeout=30) as s:
        yield s


def _moved(session, action: str = "MoveAhead") -> float:
    before = session.last_event.metadata["agent"]["position"]
    after = session.step(action).metadata["agent"]["position"]
    return ((after["x"] - before["x"]) ** 2 + (after["z"] - before["z"]) ** 2) ** 0.5


def _turned(session) -> float:
    before = session.last_event.metadata["agent"]["rotation"]["y"]
    return (session.step("RotateRight").metadata["agent"]["rotation"]["y"] - before) % 360


def test_reset_restores_the_initialization_defaults(session):
    # A build's Reset destroys the agent and loads the scene again: gridSize, depth and the other
    # Initialize settings are the defaults until the next Initialize. A player that kept them handed
    # the next client of a leased player the previous client's settings (a step of 0.5 m where it asked
    # for none, depth frames it never asked for).
    assert session.step("Initialize", gridSize=0.5, renderDepthImage=True, renderInstanceSegmentation=True,
                        fieldOfView=60, rotateStepDegrees=30, snapToGrid=False)
    assert abs(_moved(session) - 0.5) < 1e-6
    assert abs(_turned(session) - 30) < 1e-6
    event = session.step("Pass")
    assert event.depth_frame is not None and event.instance_segmentation_frame is not None
    assert event.metadata["fov"] == 60
    event = session.step({"action": "Reset", "sequenceId": 0})
    assert event.depth_frame is None and event.instance_segmentation_frame is None
    assert event.metadata["fov"] == 90
    assert abs(_moved(session) - 0.25) < 1e-6
    assert abs(_turned(session) - 90) < 1e-6


def test_session_reset_sends_its_own_settings_again(session):
    # renderd's Session.reset re-sends every initialization parameter given so far (as AI2-THOR's
    # controller does), so within one session the settings survive a reset.
    session.reset(gridSize=0.5, renderDepthImage=True)
    event = session.reset()
    assert event.depth_frame is not None
    assert abs(_moved(session) - 0.5) < 1e-6
