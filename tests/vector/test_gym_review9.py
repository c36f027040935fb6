"""RenderdVectorEnv: a partial reset (``options["reset_mask"]``) needs every sub-environment reset once; an
``autoreset_mode`` other than next-step is refused."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.vector import AutoresetMode

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


def test_an_autoreset_mode_other_than_next_step_is_refused_before_any_player_starts(no_leaks):
    # Gymnasium's vector environments take autoreset_mode; this one resets in the next step only, and says so
    # (instead of handing the argument to renderd.launch, which does not know it).
    for mode in (AutoresetMode.SAME_STEP, "Disabled"):
        with pytest.raises(ValueError, match=r"autoreset_mode.*only AutoresetMode.NEXT_STEP"):
            rgym.RenderdVectorEnv(2, autoreset_mode=mode, **player_kwargs())
    with pytest.raises(ValueError, match=r"autoreset_mode.*only AutoresetMode.NEXT_STEP"):
        gymnasium.make_vec(rgym.ENV_ID, num_envs=2, autoreset_mode=AutoresetMode.SAME_STEP, **player_kwargs())
    for mode in (AutoresetMode.NEXT_STEP, "NextStep"):
        envs = rgym.RenderdVectorEnv(1, autoreset_mode=mode, **player_kwargs())
        try:
            assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
            envs.reset(seed=0)
        finally:
            envs.close()


@pytest.mark.parametrize("make", [rgym.RenderdEnv, lambda **kw: rgym.RenderdVectorEnv(2, **kw)], ids=["env", "vector"])
def test_an_action_that_cannot_be_sent_is_refused_when_the_env_is_made(make, no_leaks):
    # Not when a policy first picks it, possibly hours into training.
    actions = ["MoveAhead", {"action": "RotateLeft", "degrees": b"30"}]
    with pytest.raises(ValueError, match=r"actions\[1\] \('RotateLeft'\) cannot be sent: .*bytes"):
        make(actions=actions, **player_kwargs())


@pytest.mark.parametrize("scene", [{"rooms": [], "objects": []}, ["FloorPlan1", None], b"FloorPlan1"],
                         ids=["house", "none-in-list", "bytes"])
def test_a_scene_that_is_not_a_name_is_refused_when_the_env_is_made(scene, no_leaks):
    # (A procedural house dict used to become a list of its keys, each reset asking the player for a scene
    # named "rooms" or "objects".)
    for make in (rgym.RenderdEnv, lambda **kw: rgym.RenderdVectorEnv(2, **kw)):
        with pytest.raises(TypeError, match="scene"):
            make(scene=scene, **player_kwargs())


def test_a_reset_scene_option_that_is_not_a_name_is_refused_before_anything_is_sent(no_leaks):
    env = rgym.RenderdEnv(scene="FloorPlan1", **player_kwargs())
    try:
        env.reset(seed=0)
        session, event = env.session, env.last_event
        with pytest.raises(TypeError, match=r"options\['scene'\].*dict"):
            env.reset(options={"scene": {"rooms": []}})
        assert env.session is session and session.last_event is event  # nothing was sent
        env.step(0)  # the episode goes on
    finally:
        env.close()
