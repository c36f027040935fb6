"""RenderdVectorEnv: a partial reset (``options["reset_mask"]``) needs every sub-environment reset once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

import renderd.gym as rgym
from renderd.errors import CallOrderError
from tests.vector.conftest import player_kwargs


def test_a_masked_reset_before_a_first_reset_of_every_sub_environment_is_refused(no_leaks):
    envs = rgym.RenderdVectorEnv(2, **player_kwargs())
    try:
        sessions = envs.vector_session.sessions
        before = [s.last_event for s in sessions]
        never = r"reset_mask.*sub-environment 0, which was never reset: call reset\(\) without a mask first"
        with pytest.raises(CallOrderError, match=never):
            envs.reset(options={"reset_mask": np.array([False, True])})
        # Nothing was sent, and no episode began.
        assert all(s.last_event is ev for s, ev in zip(sessions, before))
        with pytest.raises(CallOrderError, match="before reset"):
            envs.step(np.zeros(2, dtype=np.int64))
        obs, _ = envs.reset(seed=1)
        assert envs.observation_space.contains(obs)
        obs, info = envs.reset(options={"reset_mask": np.array([False, True])})
        assert envs.observation_space.contains(obs) and info["_last_action_success"].tolist() == [False, True]
        envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close()
