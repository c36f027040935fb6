"""The Gymnasium layer: renderd/Unity-v0 passes Gymnasium's checker, the VectorEnv steps, autoresets and
survives a crashed player. pytest turns every warning into an error, so the checks run warning-free."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import renderd
import renderd.gym as rgym
from tests.vector.conftest import SIZE, player_kwargs

FAULT = "RenderdFault"


def _kwargs(**overrides):
    kw = player_kwargs(**overrides)
    kw.pop("args")  # rendered frames: observations must follow the actions
    return kw


def test_registered_on_import():
    spec = gymnasium.spec(rgym.ENV_ID)
    assert spec.entry_point == "renderd.gym:RenderdEnv"
    assert spec.vector_entry_point == "renderd.gym:RenderdVectorEnv"
    rgym.register()  # idempotent, no "overriding" warning


def test_check_env_passes(no_leaks):
    env = gymnasium.make(rgym.ENV_ID, scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"], **_kwargs())
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def test_check_env_passes_with_depth_and_rendering(no_leaks):
    env = gymnasium.make(rgym.ENV_ID, depth=True, render_mode="rgb_array", **_kwargs())
    try:
        check_env(env.unwrapped)
        obs, info = env.reset(seed=3)
        assert set(obs) == {"rgb", "depth"}
        assert obs["rgb"].shape == (SIZE, SIZE, 3) and obs["rgb"].dtype == np.uint8
        assert obs["depth"].shape == (SIZE, SIZE) and obs["depth"].dtype == np.float32
        assert 0.0 < obs["depth"].min() <= obs["depth"].max() <= rgym.DEFAULT_MAX_DEPTH
        assert obs["rgb"].flags.c_contiguous and obs in env.observation_space
        frame = env.render()
        assert np.array_equal(frame, obs["rgb"]) and frame is not obs["rgb"]
        assert info == {"last_action_success": True, "error_message": ""}
    finally:
        env.close()


def test_single_env_episode(no_leaks):
    env = gymnasium.make(rgym.ENV_ID, actions=["MoveAhead", {"action": "LookUp", "degrees": 90}],
                         scene="FloorPlan2", max_episode_steps=3, **_kwargs())
    try:
        assert env.action_space == gymnasium.spaces.Discrete(2)
        env.reset(seed=0)
        assert env.unwrapped.last_event.metadata["sceneName"] == "FloorPlan2"
        _, reward, terminated, truncated, info = env.step(0)
        assert reward == pytest.approx(rgym.STEP_REWARD) and not terminated and not truncated
        _, reward, _, truncated, info = env.step(1)  # 90 degrees up is out of range: the action fails
        assert reward == pytest.approx(rgym.STEP_REWARD + rgym.FAILED_ACTION_REWARD)
        assert info["last_action_success"] is False and "look up" in info["error_message"]
        assert not truncated
        _, _, _, truncated, _ = env.step(0)
        assert truncated
        with pytest.raises(ValueError, match="no scene named"):
            env.reset(options={"scene": "NoSuchScene"})
    finally:
        env.close()


def test_make_max_episode_steps_is_the_episode_limit(no_leaks):
    # gymnasium.make consumes max_episode_steps (a TimeLimit wrapper): the env's own default limit must not
    # truncate the episode before it.
    limit = rgym.DEFAULT_MAX_EPISODE_STEPS + 2
    env = gymnasium.make(rgym.ENV_ID, max_episode_steps=limit, actions=["Pass"], **player_kwargs())
    try:
        env.reset(seed=0)
        for step in range(1, limit + 1):
            _, _, terminated, truncated, _ = env.step(0)
            assert not terminated
            if truncated:
                break
        assert step == limit
    finally:
        env.close()


def test_make_vec_max_episode_steps_minus_one_is_never(no_leaks):
    # -1 is gymnasium's "no limit"; make_vec hands it to the vector env's constructor unchanged.
    envs = gymnasium.make_vec(rgym.ENV_ID, num_envs=1, max_episode_steps=-1, actions=["Pass"], **player_kwargs())
    try:
        envs.reset(seed=0)
        for _ in range(rgym.DEFAULT_MAX_EPISODE_STEPS + 2):
            _, _, terminated, truncated, _ = envs.step(np.array([0]))
            assert not terminated.any() and not truncated.any()
    finally:
        envs.close()


def test_a_limit_given_in_a_registration_holds(no_leaks):
    # An id registered with its own max_episode_steps in kwargs (no TimeLimit): the env truncates itself.
    env_id = "renderd-test/Limit3-v0"
    gymnasium.register(id=env_id, entry_point="renderd.gym:RenderdEnv", kwargs={"max_episode_steps": 3})
    try:
        env = gymnasium.make(env_id, actions=["Pass"], **player_kwargs())
        try:
            env.reset(seed=0)
            assert [env.step(0)[3] for _ in range(3)] == [False, False, True]
        finally:
            env.close()
    finally:
        del gymnasium.registry[env_id]


def test_seeded_scene_choice_is_deterministic(no_leaks):
    env = rgym.RenderdEnv(scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"], **_kwargs())
    try:
        scenes = []
        for seed in (7, 7, 8):
            env.reset(seed=seed)
            scenes.append([env.last_event.metadata["sceneName"]] + [
                (env.reset(), env.last_event.metadata["sceneName"])[1] for _ in range(3)
            ])
        assert scenes[0] == scenes[1]
    finally:
        env.close()


def test_vector_env_steps_and_autoresets(no_leaks):
    def terminate_on_failure(ev):
        return not ev

    envs = gymnasium.make_vec(rgym.ENV_ID, num_envs=3, actions=["MoveAhead", {"action": "LookUp", "degrees": 90}],
                              max_episode_steps=4, terminated_fn=terminate_on_failure, render_mode="rgb_array",
                              **_kwargs())
    try:
        assert isinstance(envs.unwrapped, rgym.RenderdVectorEnv)
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert envs.num_envs == 3
        assert envs.action_space == gymnasium.spaces.MultiDiscrete([2, 2, 2])
        obs, infos = envs.reset(seed=1)
        assert obs in envs.observation_space and obs["rgb"].shape == (3, SIZE, SIZE, 3)
        assert infos["last_action_success"].tolist() == [True] * 3

        # Slot 1 fails an action (terminated), the others go on until they are truncated at 4 steps.
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1, 0]))
        assert terminated.tolist() == [False, True, False] and not truncated.any()
        assert rewards[1] == pytest.approx(rgym.STEP_REWARD + rgym.FAILED_ACTION_REWARD)
        # Next step: slot 1 resets (its action is ignored: reward 0, not done), the others step.
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1, 0]))
        assert rewards.tolist() == [pytest.approx(rgym.STEP_REWARD), 0.0, pytest.approx(rgym.STEP_REWARD)]
        assert not terminated.any() and not truncated.any()
        assert obs in envs.observation_space
        for _ in range(2):
            obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0, 0]))
        assert truncated.tolist() == [True, False, True]
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0, 0]))
        assert rewards.tolist() == [0.0, pytest.approx(rgym.STEP_REWARD), 0.0]
        frames = envs.render()
        assert len(frames) == 3 and all(np.array_equal(f, o) for f, o in zip(frames, obs["rgb"]))

        # A partial reset with a mask touches only the masked sub-environments.
        before = obs["rgb"][0].copy()
        obs, infos = envs.reset(options={"reset_mask": np.array([False, True, False])})
        assert infos["_last_action_success"].tolist() == [False, True, False]
        assert np.array_equal(obs["rgb"][0], before)
        with pytest.raises(ValueError, match="reset_mask"):
            envs.reset(options={"reset_mask": np.array([False, False, False])})
        with pytest.raises(ValueError):
            envs.step(np.array([0, 5, 0]))
    finally:
        envs.close()


def test_a_refused_autoreset_raises_after_every_sub_environment_stepped(no_leaks):
    # Seeds 0 and 12 both draw FloorPlan1 at the reset; then 12 draws NoSuchScene, then FloorPlan1 again.
    envs = rgym.RenderdVectorEnv(2, actions=["Pass", {"action": "LookUp", "degrees": 90}],
                                 scene=["NoSuchScene", "FloorPlan1"], max_episode_steps=2,
                                 terminated_fn=lambda ev: not ev, **_kwargs())
    try:
        envs.reset(seed=[0, 12])
        _, _, terminated, _, _ = envs.step(np.array([0, 1]))
        assert terminated.tolist() == [False, True]
        # Env 1's autoreset is refused; env 0 reaches its limit in the same step.
        with pytest.raises(ValueError, match="sub-environment 1: reset failed: Reset: no scene named") as info:
            envs.step(np.array([0, 0]))
        assert "Reset: Reset:" not in str(info.value)
        # Both are reset at the next step: env 0 because its episode was truncated, env 1 again.
        _, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert rewards.tolist() == [0.0, 0.0] and not terminated.any() and not truncated.any()
        _, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert rewards.tolist() == [pytest.approx(rgym.STEP_REWARD)] * 2 and not truncated.any()
        assert infos["last_action_success"].tolist() == [True, True]
    finally:
        envs.close()


def test_vector_env_replaces_a_crashed_player(no_leaks):
    envs = rgym.RenderdVectorEnv(2, actions=["Pass", {"action": FAULT, "fault": "segfault"}], **_kwargs())
    try:
        envs.reset(seed=0)
        before = envs.vector_session.pids
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 1]))
        # The crashed episode ends truncated with the error; the other sub-environment is untouched.
        assert truncated.tolist() == [False, True] and not terminated.any()
        assert infos["_error"].tolist() == [False, True]
        assert isinstance(infos["error"][1], renderd.PlayerCrashed)
        assert infos["error_type"][1] == "PlayerCrashed"
        # The info describes the crashed action, not the replacement's first frame.
        assert infos["last_action_success"].tolist() == [True, False]
        assert infos["error_message"][1] == str(infos["error"][1]) and "SIGSEGV" in infos["error_message"][1]
        assert obs in envs.observation_space
        after = envs.vector_session.pids
        assert after[0] == before[0] and after[1] != before[1]
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))  # autoreset of env 1
        assert rewards[1] == 0.0 and not truncated.any()
        obs, rewards, terminated, truncated, infos = envs.step(np.array([0, 0]))
        assert infos["last_action_success"].tolist() == [True, True]
    finally:
        envs.close()


def test_vector_env_over_an_existing_vector_session(no_leaks):
    vs = renderd.launch_many(2, **_kwargs())
    # A constructor that raises leaves the caller's vector session open, whatever argument was wrong.
    for bad in ({"num_envs": 3}, {"width": SIZE}, {"actions": []}, {"actions": [3]}, {"max_depth": -1.0},
                {"max_episode_steps": 0}, {"scene": []}, {"render_mode": "human"}):
        with pytest.raises((ValueError, TypeError)):
            rgym.RenderdVectorEnv(vector_session=vs, **bad)
        assert not vs.closed, bad
    seen = []
    vs.on_event = lambda i, event: seen.append((i, event.sequence_id))  # the caller's own callback
    envs = rgym.RenderdVectorEnv(vector_session=vs, depth=True)
    try:
        obs, _ = envs.reset()
        assert obs["depth"].shape == (2, SIZE, SIZE)
        with pytest.raises(ValueError, match="slots"):
            rgym.RenderdVectorEnv(3, vector_session=vs)
        seen.clear()
        for _ in range(2):  # it keeps running for every event of every step, and stays set
            envs.step(np.array([0, 0]))
        assert sorted(i for i, _ in seen) == [0, 0, 1, 1] and vs.on_event is not None
    finally:
        envs.close()
    assert vs.closed


@pytest.mark.parametrize("h,w", [(1, 1), (3, 5), (7, 1), (64, 48)])
def test_rgb_copy_matches_numpy(h, w):
    rng = np.random.default_rng(h * 100 + w)
    body = rng.integers(0, 256, h * w * 4, dtype=np.uint8)
    rgba = body.reshape(h, w, 4)
    # RGBA bodies as events view them (rows flipped, alpha dropped), RGB bodies, and anything else.
    for view in (rgba[::-1][..., :3], rgba[..., :3], body[: h * w * 3].reshape(h, w, 3)[::-1], rgba[:, ::-1, :3]):
        out = rgym.rgb_copy(view)
        assert out.shape == (h, w, 3) and out.dtype == np.uint8 and out.flags.c_contiguous
        assert np.array_equal(out, view)
        assert not np.shares_memory(out, body)
