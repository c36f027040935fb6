"""Gymnasium conformance of renderd/Unity-v0 beyond the checker: the envs over leased players, and the
behaviours a training loop relies on (arguments, recovery, wrappers). Real players on real FIFOs."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import renderd
import renderd.gym as rgym
from tests.daemon.conftest import daemon, fast_config  # noqa: F401 - daemon is a fixture

#: Small frames: each test stays well under a few seconds.
W, H = 32, 24


def _rendering_config(instances: int = 1) -> str:
    # fast_config's players run headless (no images); a Gymnasium env needs frames.
    return fast_config(instances=instances, extra=f"width = {W}\n    height = {H}").replace(
        'platform = "headless"', 'platform = "auto"'
    )


def test_vector_env_over_leased_players_takes_step_timeout(no_leaks, daemon):
    # connect_many takes step_timeout; the env refused it as a "launch argument" that does not apply.
    d = daemon(_rendering_config())
    envs = rgym.RenderdVectorEnv(1, environment="demo", socket=d.socket, timeout=15, step_timeout=2.5)
    try:
        assert [s.step_timeout for s in envs.vector_session.sessions] == [2.5]
        obs, _ = envs.reset(seed=0)
        assert obs["rgb"].shape == (1, H, W, 3) and obs in envs.observation_space
    finally:
        envs.close()
    with pytest.raises(ValueError, match="step_timeout"):
        rgym.RenderdVectorEnv(1, environment="demo", socket=d.socket, timeout=15, step_timeout=-1)
    with pytest.raises(ValueError, match=r"\['width'\] do not apply"):
        rgym.RenderdVectorEnv(1, environment="demo", socket=d.socket, timeout=15, width=W)


def test_reset_after_a_crashed_player_starts_a_new_one(no_leaks):
    # reset() is how an episode loop recovers; on the dead player's session it raised CallOrderError forever.
    env = rgym.RenderdEnv(actions=["Pass", {"action": "RenderdFault", "fault": "segfault"}], width=W, height=H,
                          start_timeout=30, step_timeout=20)
    try:
        env.reset(seed=0)
        crashed = env.session.pid
        with pytest.raises(renderd.PlayerCrashed):
            env.step(1)
        obs, info = env.reset()
        assert env.session.pid != crashed and obs in env.observation_space
        assert info == {"last_action_success": True, "error_message": ""}
        assert env.step(0)[4]["last_action_success"] is True
    finally:
        env.close()


def test_a_player_failing_in_an_autoreset_step_starts_the_new_episode(no_leaks):
    # The player answers the fault action (which ends the episode), then dies: the autoreset hits a dead player.
    fault_after = {"action": "RenderdFault", "fault": "segfault", "when": "after"}
    envs = rgym.RenderdVectorEnv(2, actions=["Pass", fault_after], width=W, height=H, render_mode="rgb_array",
                                 start_timeout=30, step_timeout=20,
                                 terminated_fn=lambda ev: ev.last_action == "RenderdFault")
    try:
        envs.reset(seed=0)
        crashed = envs.vector_session.pids[1]
        _, _, terminated, truncated, _ = envs.step(np.array([0, 1]))
        assert terminated.tolist() == [False, True] and not truncated.any()
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert envs.vector_session.pids[1] != crashed
        assert rewards[1] == 0.0 and not terminated.any() and not truncated.any()
        assert infos["_error"].tolist() == [False, True] and isinstance(infos["error"][1], renderd.PlayerCrashed)
        assert infos["replaced"].tolist() == [False, True] and infos["last_action_success"].tolist() == [True, False]
        assert obs in envs.observation_space and np.array_equal(obs["rgb"][1], envs.render()[1])
        # The new episode goes on.
        _, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert rewards.tolist() == [pytest.approx(rgym.STEP_REWARD)] * 2 and not (terminated | truncated).any()
        assert infos["last_action_success"].tolist() == [True, True]
    finally:
        envs.close()


def _assert_same(a, b, where):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), (where, sorted(a), sorted(b))
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (where, a.shape, b.shape)
        assert a.dtype == b.dtype or object in (a.dtype, b.dtype), (where, a.dtype, b.dtype)
        assert np.array_equal(a, b), (where, a, b)


def test_vector_env_behaves_as_gymnasiums_sync_vector_env(no_leaks):
    # Gymnasium's own next-step autoreset (SyncVectorEnv over RenderdEnvs, each in a TimeLimit) is the
    # reference: same seeds and actions, same observations, rewards, flags and infos, step by step, across
    # terminations, truncations, autoresets and a partial reset.
    kw = dict(width=W, height=H, start_timeout=30, step_timeout=20, depth=True, max_episode_steps=3,
              scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"],
              actions=["MoveAhead", "RotateLeft", {"action": "LookUp", "degrees": 90}],
              terminated_fn=lambda ev: not ev)
    ours = gymnasium.make_vec(rgym.ENV_ID, num_envs=2, **kw)
    try:
        ref = gymnasium.make_vec(rgym.ENV_ID, num_envs=2, vectorization_mode="sync", **kw)
        try:
            assert isinstance(ours.unwrapped, rgym.RenderdVectorEnv)
            assert ours.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"]
            assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
            _assert_same(ours.reset(seed=11), ref.reset(seed=11), "reset")
            actions = np.random.default_rng(0).integers(0, 3, (16, 2))
            for step, action in enumerate(actions):
                _assert_same(ours.step(action), ref.step(action), f"step {step}")
                if step == 8:
                    mask = np.array([False, True])
                    _assert_same(ours.reset(seed=[None, 5], options={"reset_mask": mask.copy()}),
                                 ref.reset(seed=[None, 5], options={"reset_mask": mask.copy()}), "partial reset")
        finally:
            ref.close()
    finally:
        ours.close()
