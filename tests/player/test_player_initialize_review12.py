"""Initialize's maxStepCount: a field of a build's ServerAction that no action reads (a build does not stop or
refuse actions after that many steps), so the player takes it and ignores it, as a build does."""

from __future__ import annotations

from renderd.player.core import Player


def test_max_step_count_limits_nothing():
    p = Player(width=16, height=12)
    md, _ = p.handle({"action": "Initialize", "maxStepCount": 2})
    assert md["agents"][0]["lastActionSuccess"] and md["agents"][0]["errorCode"] is None
    for i in range(5):
        md, images = p.handle({"action": "RotateRight", "sequenceId": i + 1})
        agent = md["agents"][0]
        assert agent["lastActionSuccess"], (i, agent["errorMessage"])
        assert md["sequenceId"] == i + 1 and images
    assert p.yaw == 90  # five quarter turns
