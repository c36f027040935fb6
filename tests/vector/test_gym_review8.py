"""RenderdEnv's call order: step() is refused, saying why, when no episode is under way: after close(), and
after a reset() the player refused (the previous episode must not go on as if nothing had happened)."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")

import renderd.gym as rgym
from renderd.errors import CallOrderError
from tests.vector.conftest import player_kwargs


def _env(**kw):
    kwargs = player_kwargs()
    kwargs.pop("args")
    return rgym.RenderdEnv(**kwargs, **kw)


def test_step_after_a_refused_reset_is_refused_and_a_new_reset_recovers(no_leaks):
    env = _env(scene="FloorPlan1")
    try:
        env.reset(seed=1)
        env.step(0)
        with pytest.raises(ValueError, match="NoSuchScene"):
            env.reset(options={"scene": "NoSuchScene"})
        with pytest.raises(CallOrderError, match="after a reset\\(\\) that failed"):
            env.step(0)
        obs, info = env.reset(options={"scene": "FloorPlan2"})
        assert info["last_action_success"] is True
        env.step(0)  # the new episode runs
    finally:
        env.close()


def test_step_after_close_says_the_env_was_closed(no_leaks):
    env = _env()
    with pytest.raises(CallOrderError, match="before reset"):
        env.step(0)
    env.reset(seed=2)
    env.close()
    with pytest.raises(CallOrderError, match="after close\\(\\)"):
        env.step(0)
    env.reset(seed=3)  # a closed env starts a new player on reset, as before
    env.step(0)
    env.close()
