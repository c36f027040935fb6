"""What renderd.gym's envs do with an answer whose frame does not fit the observation space (no image, another
size), through real reference players: the step or reset raises and no episode goes on unseen."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

import renderd.gym as rgym
from renderd.errors import CallOrderError, RenderdError
from tests.vector.conftest import SIZE, player_kwargs

SHRINK = {"action": "ChangeResolution", "x": 32, "y": 32}


def _kwargs(**overrides):
    kw = player_kwargs(**overrides)
    kw.pop("args")  # rendered frames
    return kw


def test_single_env_ends_the_episode_of_a_step_whose_frame_does_not_fit(no_leaks):
    # reward_fn and terminated_fn ran on it, and the episode went on (perhaps terminated) unseen by the caller.
    scored = []
    env = rgym.RenderdEnv(actions=["Pass", {"action": "Pass", "renderImage": False}],
                          reward_fn=lambda event: scored.append(event) or 0.0, **_kwargs())
    try:
        env.reset(seed=0)
        with pytest.raises(RenderdError, match="the player sent no RGB image") as raised:
            env.step(1)
        assert any("the episode ended: call reset()" in note for note in raised.value.__notes__)
        assert scored == []
        with pytest.raises(CallOrderError, match="did not fit the observation space: call reset"):
            env.step(0)
        env.reset(seed=0)
        obs, *_ = env.step(0)
        assert obs in env.observation_space and len(scored) == 1
    finally:
        env.close()


def test_single_env_reset_with_a_frame_that_does_not_fit_begins_no_episode(no_leaks):
    env = rgym.RenderdEnv(actions=["Pass", SHRINK], **_kwargs())
    try:
        env.reset(seed=0)
        with pytest.raises(RenderdError, match="the player sent a 32 x 32 frame"):
            env.step(1)
        with pytest.raises(RenderdError, match="the player sent a 32 x 32 frame"):
            env.reset(seed=0)  # (the player keeps its new size)
        with pytest.raises(CallOrderError, match="after a reset\\(\\) that failed"):
            env.step(0)  # (a reset that raised began no episode)
    finally:
        env.close()


def test_vector_env_reset_with_a_frame_that_does_not_fit_begins_no_episode(no_leaks):
    envs = rgym.RenderdVectorEnv(2, **player_kwargs())
    try:
        envs.reset(seed=0)
        envs.vector_session.reset([1], width=32, height=32)  # slot 1's player now answers in 32 x 32
        pid = envs.vector_session.pids[1]
        with pytest.raises(RenderdError, match=rf"^sub-environment 1 \(player pid {pid}\): the player sent a 32 x 32"):
            envs.reset(seed=0)
        with pytest.raises(CallOrderError, match="after a reset\\(\\) that failed"):
            envs.step(np.array([0, 0]))  # (it stepped on, and slot 1's frame broke the vector session)
        assert envs.vector_session.error is None
        envs.vector_session.reset([1], width=SIZE, height=SIZE)
        obs, _ = envs.reset(seed=0)
        assert obs in envs.observation_space
        envs.step(np.array([0, 0]))
    finally:
        envs.close()
