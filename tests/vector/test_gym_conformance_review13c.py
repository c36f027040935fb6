"""Gymnasium conformance as a user checks it: the VectorEnv attribute contracts, Gymnasium's own vector utilities
and wrappers over RenderdVectorEnv, reset_mask errors of the types Gymnasium's vector envs raise, and a depth bound
the float32 depth space can hold. Real players on real FIFOs."""

from __future__ import annotations

import re

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array, iterate
from gymnasium.wrappers.vector import DictInfoToList, RecordEpisodeStatistics

import renderd.gym as rgym

W, H = 32, 24
KW = dict(width=W, height=H, start_timeout=30, step_timeout=20)


@pytest.mark.parametrize("max_depth", [1e39, 1e-50])
def test_a_depth_bound_float32_cannot_hold_is_refused_naming_max_depth(no_leaks, max_depth):
    # 1e39 made gymnasium's Box raise "Box high is out of bounds of the dtype range" (not naming max_depth); 1e-50
    # rounded to 0 in float32, a depth space of the single value 0.
    for make in (lambda: rgym.RenderdEnv(depth=True, max_depth=max_depth, **KW),
                 lambda: rgym.RenderdVectorEnv(2, depth=True, max_depth=max_depth, **KW)):
        shown = re.escape(repr(max_depth))
        with pytest.raises(ValueError, match=rf"^max_depth must be a positive finite number of metres, got {shown}: "
                                             "the depth space is float32"):
            make()


def test_reset_mask_errors_have_gymnasiums_types(no_leaks):
    # Gymnasium's SyncVectorEnv (the reference) raises TypeError for a mask that is not bool, ValueError for a bad
    # shape or no True value; RenderdVectorEnv raised ValueError for all three.
    ref = gymnasium.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    envs = rgym.RenderdVectorEnv(2, **KW)
    try:
        ref.reset(seed=0)
        envs.reset(seed=0)
        for mask in (np.array([0, 1]), np.array([True, False, True]), np.array([False, False])):
            with pytest.raises((TypeError, ValueError)) as expected:
                ref.reset(options={"reset_mask": mask.copy()})
            with pytest.raises(expected.type, match=r"reset_mask.*nothing was reset"):
                envs.reset(options={"reset_mask": mask.copy()})
        obs, info = envs.reset(options={"reset_mask": [False, True]})  # (a list of bools is taken too)
        assert info["_last_action_success"].tolist() == [False, True] and obs in envs.observation_space
    finally:
        envs.close()
        ref.close()


def test_vector_env_contracts_and_gymnasiums_vector_utilities(no_leaks):
    envs = gymnasium.make_vec(rgym.ENV_ID, num_envs=2, depth=True, render_mode="rgb_array", max_episode_steps=2, **KW)
    try:
        assert isinstance(envs, rgym.RenderdVectorEnv) and envs.spec is not None and envs.spec.id == rgym.ENV_ID
        assert envs.num_envs == 2 and envs.render_mode == "rgb_array" and not envs.closed
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert envs.single_action_space == gymnasium.spaces.Discrete(len(rgym.DEFAULT_ACTIONS))
        assert envs.observation_space["rgb"].shape == (2, H, W, 3)
        assert envs.observation_space["depth"].shape == (2, H, W)
        obs, info = envs.reset(seed=7)
        assert envs.np_random_seed == 7 and obs in envs.observation_space
        for key, space in envs.observation_space.items():
            assert obs[key].dtype == space.dtype and obs[key].shape == space.shape
        assert 0.0 <= obs["depth"].min() and obs["depth"].max() <= envs.single_observation_space["depth"].high.max()
        assert info["_last_action_success"].tolist() == [True, True]
        # Gymnasium's vector utilities take the batches apart and put them together again.
        actions = envs.action_space.sample()
        assert [int(a) for a in iterate(envs.action_space, actions)] == actions.tolist()
        obs, rewards, terminated, truncated, info = envs.step(actions)
        singles = list(iterate(envs.observation_space, obs))
        assert len(singles) == 2 and all(one in envs.single_observation_space for one in singles)
        space = envs.single_observation_space
        again = concatenate(space, singles, create_empty_array(space, 2))
        assert all(np.array_equal(again[key], obs[key]) for key in obs)
        assert rewards.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
        frames = envs.render()
        assert len(frames) == 2 and all(np.array_equal(f, o) for f, o in zip(frames, obs["rgb"]))
        # Gymnasium's vector wrappers (they read metadata["autoreset_mode"] and the info masks).
        wrapped = DictInfoToList(RecordEpisodeStatistics(envs))
        ended = []
        for _ in range(4):
            _, _, terminated, truncated, infos = wrapped.step(wrapped.action_space.sample())
            assert isinstance(infos, list) and len(infos) == 2
            ended.append(["episode" in one for one in infos])
        # Two steps per episode, the step after one ended resets it: episodes end at the 1st (the step above was the
        # episode's first) and 4th steps here.
        assert ended == [[True, True], [False, False], [False, False], [True, True]], ended
        assert all(one["episode"]["l"] == 2 for one in infos)
    finally:
        envs.close()
    assert envs.closed
    envs.close()  # idempotent


def test_vector_session_argument_must_be_an_open_vector_session(no_leaks, launch):
    # A list of sessions failed with "AttributeError: 'list' object has no attribute 'sessions'"; a closed vector
    # session was taken, and the env failed only at its first reset.
    vs = launch(1, width=W, height=H)
    with pytest.raises(TypeError, match=r"^vector_session must be a renderd.VectorSession .*not list"):
        rgym.RenderdVectorEnv(vector_session=list(vs.sessions))
    vs.close()
    with pytest.raises(ValueError, match=r"^vector_session is closed: pass an open one"):
        rgym.RenderdVectorEnv(vector_session=vs)
