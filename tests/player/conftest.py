"""Fixtures for the reference player's tests: real player processes on real FIFOs."""

from __future__ import annotations

import pytest

from tests.helpers.fifo_driver import PlayerProcess


@pytest.fixture
def spawn(tmp_path):
    """Start a player: ``spawn(args, platform=..., env=...)``; every one is stopped and cleaned up after."""
    made: list[PlayerProcess] = []

    def _spawn(args=(), **kwargs) -> PlayerProcess:
        directory = tmp_path / f"p{len(made)}"
        directory.mkdir()
        p = PlayerProcess(directory, args, **kwargs)
        made.append(p)
        return p

    yield _spawn
    for p in made:
        p.close()


@pytest.fixture(scope="module")
def ready_player(tmp_path_factory):
    """One ready 300x300 player (depth and instance segmentation on) shared by a module's tests.

    Tests Reset it first; it is stopped after the module.
    """
    p = PlayerProcess(tmp_path_factory.mktemp("player"), ["-screen-width", "300", "-screen-height", "300"])
    try:
        p.start_session()
        ev = p.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
        assert ev.metadata["lastActionSuccess"]
        yield p
    finally:
        p.close()


@pytest.fixture
def player(ready_player):
    """The shared player, Reset to FloorPlan1 at 300x300 with no third-party cameras, and Initialized again
    with depth and instance segmentation on (a Reset restores the defaults, as a build's does)."""
    ev = ready_player.step("ChangeResolution", x=300, y=300)
    assert ev, ev.metadata["errorMessage"]
    ev = ready_player.step("Reset", sceneName="FloorPlan1")
    assert ev, ev.metadata["errorMessage"]
    ev = ready_player.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
    assert ev, ev.metadata["errorMessage"]
    return ready_player
