"""The Gymnasium envs when the caller's reward_fn or terminated_fn raises: the step is booked whole, and the caller's
own exception goes on, with notes saying which function raised it and what became of the step."""

from __future__ import annotations

import pytest

from renderd.errors import CallOrderError
from tests.vector.conftest import player_kwargs

gym = pytest.importorskip("renderd.gym")

# Indices into gym.DEFAULT_ACTIONS.
MOVE, LOOK_UP, LOOK_DOWN = 0, 3, 4


def _reward(event) -> float:
    if event.metadata["lastAction"] == "LookUp":
        raise KeyError("score")
    return 1.0


def _terminated(event) -> bool:
    return event.metadata["lastAction"] == "LookDown"


def test_a_vector_env_whose_reward_fn_raises_books_the_step_for_every_sub_environment(no_leaks):
    # The step stopped booking at the sub-environment whose reward_fn raised: one that had been reset in that step
    # kept its autoreset flag and was reset again in the next step, and the raising one's episode went on, its
    # termination never decided. The KeyError came out alone, not saying that reward_fn raised it.
    envs = gym.RenderdVectorEnv(2, max_episode_steps=None, reward_fn=_reward, terminated_fn=_terminated,
                                **player_kwargs())
    try:
        envs.reset(seed=0)
        _, rewards, terminated, _, _ = envs.step([LOOK_DOWN, MOVE])
        assert terminated.tolist() == [True, False] and rewards.tolist() == [1.0, 1.0]
        pid = envs.vector_session.pids[1]
        with pytest.raises(KeyError, match="score") as info:
            envs.step([MOVE, LOOK_UP])  # (sub-environment 0 is reset in this step; 1's reward_fn raises)
        notes = info.value.__notes__
        assert notes[0] == "raised by reward_fn(event)"
        assert notes[1] == f"in sub-environment 1 (player pid {pid})"
        assert "sub-environment 1's episode ended: it is reset at the next step" in notes[2]
        # Sub-environment 0 was reset in the failed step: it steps now; 1's episode ended: it is reset now.
        _, rewards, terminated, truncated, _ = envs.step([MOVE, MOVE])
        assert rewards.tolist() == [1.0, 0.0]
        assert not terminated.any() and not truncated.any()
        _, rewards, _, _, _ = envs.step([MOVE, MOVE])
        assert rewards.tolist() == [1.0, 1.0]
    finally:
        envs.close()


def test_an_env_whose_terminated_fn_raises_counts_the_step_and_ends_the_episode(no_leaks):
    # The step was counted (its observation kept, the episode's step count raised) but the episode went on,
    # whether or not it had ended; the exception did not say terminated_fn raised it.
    def terminated(event) -> bool:
        if event.metadata["lastAction"] == "LookUp":
            raise ValueError("no target")
        return False

    env = gym.RenderdEnv(terminated_fn=terminated, **player_kwargs())
    try:
        env.reset(seed=0)
        env.step(MOVE)
        with pytest.raises(ValueError) as info:
            env.step(LOOK_UP)
        assert str(info.value) == "no target"
        assert info.value.__notes__ == [
            "raised by terminated_fn(event)",
            "the step was counted (step 2 of the episode) and the episode ended: call reset()",
        ]
        assert env.last_event is not None and env.last_event.metadata["lastAction"] == "LookUp"
        with pytest.raises(CallOrderError, match=r"step\(\) after terminated_fn raised: call reset\(\)"):
            env.step(MOVE)
        env.reset()
        env.step(MOVE)
    finally:
        env.close()
