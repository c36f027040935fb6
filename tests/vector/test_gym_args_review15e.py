"""The Gymnasium envs' arguments as an RL program passes them: ``reset(options=...)`` that is not a dict is refused
naming ``options`` (nothing seeded, sent or launched), and a numpy integer is a valid number of players."""

from __future__ import annotations

import numpy as np
import pytest

import renderd
from tests.vector.conftest import player_kwargs

gym = pytest.importorskip("renderd.gym")

SIZE = 32


def _kw() -> dict:
    kw = player_kwargs()
    kw.update(width=SIZE, height=SIZE)
    return kw


# (A string was taken apart as a sequence of pairs, "dictionary update sequence element #0 has length 1", or failed
# with "'str' object has no attribute 'get'"; a list of pairs was taken as a dict.)
NOT_A_DICT = ["FloorPlan2", [("scene", "FloorPlan2")], 3]


@pytest.mark.parametrize("options", NOT_A_DICT, ids=["str", "pairs", "int"])
def test_single_env_reset_refuses_options_that_are_not_a_dict_before_launching(no_leaks, options):
    env = gym.RenderdEnv(**_kw())
    try:
        with pytest.raises(TypeError, match=r"reset\(options=\.\.\.\) takes a dict .*nothing was reset") as info:
            env.reset(options=options)
        assert type(options).__name__ in str(info.value)
        assert env.session is None  # no player was started for it
        obs, _ = env.reset(options={"scene": "FloorPlan2"})
        assert env.observation_space.contains(obs)
        assert env.session.last_event.metadata["sceneName"] == "FloorPlan2"
    finally:
        env.close()


@pytest.mark.parametrize("options", NOT_A_DICT, ids=["str", "pairs", "int"])
def test_vector_env_reset_refuses_options_that_are_not_a_dict_and_resets_nothing(no_leaks, options):
    kw = _kw()
    envs = gym.RenderdVectorEnv(2, width=SIZE, height=SIZE, args=kw["args"], start_timeout=kw["start_timeout"],
                                step_timeout=kw["step_timeout"])
    try:
        envs.reset(seed=1, options={"scene": "FloorPlan1"})
        before = [s.last_event.sequence_id for s in envs.vector_session.sessions]
        with pytest.raises(TypeError, match=r"reset\(options=\.\.\.\) takes a dict .*nothing was reset"):
            envs.reset(options=options)
        after = [s.last_event.sequence_id for s in envs.vector_session.sessions]
        assert after == before  # nothing was sent
        assert all(s.last_event.metadata["sceneName"] == "FloorPlan1" for s in envs.vector_session.sessions)
        obs, _ = envs.reset(options={"scene": "FloorPlan2"})  # still usable
        assert envs.observation_space.contains(obs)
        assert all(s.last_event.metadata["sceneName"] == "FloorPlan2" for s in envs.vector_session.sessions)
    finally:
        envs.close()


def test_vector_env_takes_a_numpy_integer_as_num_envs(no_leaks):
    kw = _kw()
    envs = gym.RenderdVectorEnv(np.int64(2), width=SIZE, height=SIZE, args=kw["args"],
                                start_timeout=kw["start_timeout"], step_timeout=kw["step_timeout"])
    try:
        assert envs.num_envs == 2 and type(envs.num_envs) is int
        obs, _ = envs.reset(seed=0)
        assert obs["rgb"].shape == (2, SIZE, SIZE, 3)
    finally:
        envs.close()


@pytest.mark.parametrize("num_envs", [0, np.int64(0), 1.5, "2", True, 2000])
def test_vector_env_names_num_envs_when_it_is_refused(no_leaks, num_envs):
    # (The error said "n must be ...", a name the caller never wrote.)
    with pytest.raises(ValueError, match=r"^num_envs must be an integer 1\.\.1024, got "):
        gym.RenderdVectorEnv(num_envs, width=SIZE, height=SIZE)


def test_launch_many_takes_a_numpy_integer(no_leaks):
    # (np.int64(2), a count computed with numpy, was refused as "n must be an integer 1..1024, got np.int64(2)".)
    with renderd.launch_many(np.int64(2), **_kw()) as vs:
        assert len(vs) == 2 and vs.num_envs == 2 and type(vs.num_envs) is int
        assert all(e is not None for e in vs.step(["Pass", "Pass"]).observations)
    with pytest.raises(ValueError, match=r"^n must be an integer 1\.\.1024, got 0$"):
        renderd.launch_many(np.int64(0), **_kw())
