"""After its player fails, RenderdEnv says what a Gymnasium user does about it: call reset(), which starts a new
player (the session's own message says to close it and launch a new one, which an env user does not do)."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")

from renderd.errors import CallOrderError, PlayerCrashed  # noqa: E402
from renderd.gym import RenderdEnv  # noqa: E402


def test_a_failed_player_is_followed_by_a_call_to_reset():
    env = RenderdEnv(actions=[{"action": "RenderdFault", "fault": "exit", "code": 3}, "Pass"], width=32, height=24,
                     start_timeout=60, step_timeout=30)
    try:
        env.reset(seed=1)
        with pytest.raises(PlayerCrashed) as info:
            env.step(0)
        assert "call reset(), which starts a new player" in "\n".join(getattr(info.value, "__notes__", []))
        with pytest.raises(CallOrderError, match=r"^step\(\) after the player failed \(PlayerCrashed\): call reset"):
            env.step(1)
        env.reset()
        observation, *_ = env.step(1)
        assert observation["rgb"].shape == (24, 32, 3)
    finally:
        env.close()
