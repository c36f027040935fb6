"""Eight players stepped 500 times while one of them is SIGKILLed from outside, mid-run."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import renderd
from renderd.errors import PlayerCrashed
from tests.vector.conftest import pipe_dirs, player_kwargs

N = 8
STEPS = 500
KILL_AT = 200
VICTIM = 5
#: Seconds a replacement player may take to start and answer after the kill was noticed.
REPLACEMENT_WITHIN = 60.0
ACTIONS = ["MoveAhead", "MoveBack", "RotateLeft", "RotateRight", "LookUp", "LookDown", "Pass", "Pass"]


def _actions(step: int) -> list[str]:
    return [ACTIONS[(step + i) % len(ACTIONS)] for i in range(N)]


def test_sigkill_mid_run_with_replace_on_crash(no_leaks):
    vs = renderd.launch_many(N, replace_on_crash=True, **player_kwargs())
    try:
        pids = vs.pids
        dirs = pipe_dirs(vs)
        answered = [0] * N
        crash_info = None
        for step in range(STEPS):
            if step == KILL_AT:
                os.kill(pids[VICTIM], signal.SIGKILL)
            obs, _, dones, infos = vs.step(_actions(step))
            for i in range(N):
                if obs[i] is not None:
                    answered[i] += 1
                    assert obs[i].frame.shape == (64, 64, 3)
                if "error" in infos[i]:
                    assert i == VICTIM and crash_info is None, f"unexpected failure in slot {i}: {infos[i]}"
                    crash_info = (step, dones[i], infos[i])
            assert all(obs[i] is not None for i in range(N) if i != VICTIM), "a healthy slot was disturbed"
        assert crash_info is not None, "the SIGKILL was never reported"
        step, done, info = crash_info
        assert KILL_AT <= step <= KILL_AT + 1  # this step's send or recv saw it
        assert done is True and info["replaced"] is True and info["error_type"] == "PlayerCrashed"
        assert isinstance(info["error"], PlayerCrashed) and info["error"].signal_name == "SIGKILL"
        # Every other slot answered every step; the victim answered before the kill and again after its
        # replacement was up.
        assert all(answered[i] == STEPS for i in range(N) if i != VICTIM)
        assert KILL_AT <= answered[VICTIM] < STEPS
        # On a loaded machine the replacement can take longer to start than the steps left after the kill
        # last: step on until it answers.
        deadline = time.monotonic() + REPLACEMENT_WITHIN
        while obs[VICTIM] is None:
            assert time.monotonic() < deadline, f"the replacement did not answer within {REPLACEMENT_WITHIN} s"
            obs = vs.step(_actions(STEPS)).observations
        new_pids = vs.pids
        assert None not in new_pids and new_pids[VICTIM] != pids[VICTIM]
        assert [p for i, p in enumerate(new_pids) if i != VICTIM] == [p for i, p in enumerate(pids) if i != VICTIM]
        dirs += pipe_dirs(vs)
    finally:
        vs.close()
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in new_pids)
    assert not any(os.path.exists(d) for d in dirs)


def test_sigkill_mid_run_without_replacement_names_the_slot(no_leaks):
    vs = renderd.launch_many(N, **player_kwargs())
    pids = vs.pids
    dirs = pipe_dirs(vs)
    try:
        with pytest.raises(PlayerCrashed) as info:
            for step in range(STEPS):
                if step == KILL_AT:
                    os.kill(pids[VICTIM], signal.SIGKILL)
                vs.step(_actions(step))
        assert info.value.slots == [VICTIM]
        message = str(info.value)
        assert message.startswith(f"slot {VICTIM} of {N} failed")
        assert f"pid {pids[VICTIM]}" in message and "killed by SIGKILL" in message
        # The healthy slots answered the failing step: their streams stay in step.
        assert all(s.state.value == "ready" for i, s in enumerate(vs.sessions) if i != VICTIM)
    finally:
        vs.close()
    assert not any(os.path.exists(d) for d in dirs)
