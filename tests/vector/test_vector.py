"""VectorSession over real reference players: results in slot order, call order, masks while resetting,
failures with and without replacement, timeouts, and nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import psutil
import pytest

import renderd
from renderd.config import ArgumentError
from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    ConfigError,
    NoPendingCallError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
)
from renderd.protocol import MAX_RESOLUTION
from renderd.vector import REPLACE_ATTEMPTS, SlotState
from tests.helpers import marker_player
from tests.vector.conftest import (
    HANG,
    START_TIMEOUT,
    check_signal_during_close_is_raised_once_everything_is_closed,
    pipe_dirs,
    player_kwargs,
    wait_for,
)

FAULT = "RenderdFault"


def test_launch_many_steps_every_slot_in_order(no_leaks, launch):
    vs = launch(3)
    assert vs.num_envs == vs.n == len(vs) == 3
    pids = vs.pids
    assert len(set(pids)) == 3 and all(psutil.pid_exists(p) for p in pids)
    # Every slot starts with its first frame.
    assert all(s.last_event is not None and s.last_event.sequence_id == 0 for s in vs.sessions)

    obs, rewards, dones, infos = vs.step(["MoveAhead", "RotateLeft", {"action": "LookUp", "degrees": 10}])
    assert [e.metadata["lastAction"] for e in obs] == ["MoveAhead", "RotateLeft", "LookUp"]
    assert all(obs) and all(e.frame.shape == (64, 64, 3) for e in obs)
    assert rewards == [0.0, 0.0, 0.0] and dones == [False, False, False]
    assert infos == [{"resetting": False, "dropped_action": False}] * 3
    assert infos[0] is not infos[1]

    vs.send(["Pass", "Pass", "Pass"])
    assert vs.pending
    result = vs.recv(timeout=STEP)
    assert [e.sequence_id for e in result.observations] == [2, 2, 2]
    assert vs.pids == pids


STEP = 20.0


def test_reward_and_done_functions(no_leaks, launch):
    vs = launch(2, reward_fn=lambda ev: 1.0 if ev else -1.0, done_fn=lambda ev: ev.metadata["lastAction"] == "Done")
    _, rewards, dones, _ = vs.step(["Done", {"action": "LookUp", "degrees": 90}])  # the second one fails
    assert rewards == [1.0, -1.0]
    assert dones == [True, False]


def test_call_order_errors(no_leaks, launch):
    vs = launch(2)
    with pytest.raises(NoPendingCallError):
        vs.recv()
    vs.send(["Pass", "Pass"])
    with pytest.raises(AlreadyPendingCallError):
        vs.send(["Pass", "Pass"])
    with pytest.raises(AlreadyPendingCallError):
        vs.reset_async([0])
    with pytest.raises(AlreadyPendingCallError):
        vs.reset()
    vs.recv()
    with pytest.raises(NoPendingCallError):
        vs.recv()
    # Bad actions are refused before anything is sent, and the vector session stays usable.
    with pytest.raises(ValueError, match="2 actions"):
        vs.send(["Pass"])
    with pytest.raises(TypeError, match="one action per slot"):
        vs.send("Pass")
    with pytest.raises(TypeError, match="slot 1"):
        vs.send(["Pass", 3])
    with pytest.raises(ValueError, match="slot 0"):
        vs.send([{"action": "Teleport", "x": object()}, "Pass"])
    with pytest.raises(ValueError, match="slot 1"):
        vs.send(["Pass", ""])
    with pytest.raises(ValueError, match="slot 1: sequenceId must be an integer"):
        vs.send(["Pass", {"action": "Pass", "sequenceId": "x"}])  # slot 0's action must not go out alone
    for timeout in (float("nan"), -1.0, "1"):
        with pytest.raises(ValueError, match="timeout"):
            vs.step(["Pass", "Pass"], timeout=timeout)  # refused before anything is sent
        with pytest.raises(ValueError, match="timeout"):
            vs.reset(timeout=timeout)
    with pytest.raises(ValueError, match="slot"):
        vs.reset_async([5])
    assert not vs.pending
    assert all(vs.step(["Pass", "Pass"]).observations)
    vs.close()
    vs.close()  # idempotent
    for call in (lambda: vs.send(["Pass", "Pass"]), vs.recv, lambda: vs.step(["Pass", "Pass"]), vs.reset):
        with pytest.raises(CallOrderError, match="closed"):
            call()


def test_close_leaves_nothing(no_leaks):
    vs = renderd.launch_many(4, **player_kwargs())
    pids, dirs = vs.pids, pipe_dirs(vs)
    assert all(os.path.isdir(d) for d in dirs)
    vs.step(["Pass"] * 4)
    vs.send(["Pass"] * 4)  # close with answers pending is fine too
    with vs:
        pass
    assert vs.closed
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)
    assert not any(os.path.exists(d) for d in dirs)


def test_log_path_replaces_only_slot(no_leaks, tmp_path):
    logs = tmp_path / "run{}-{a}"
    logs.mkdir()
    renderd.launch_many(2, log_path=str(logs / "player-{slot}.log"), **player_kwargs()).close()
    assert sorted(os.listdir(logs)) == ["player-0.log", "player-1.log"]


def test_launch_failure_names_the_problem_and_leaves_nothing(no_leaks):
    with pytest.raises(ConfigError, match="none of the 3 players could be started") as info:
        renderd.launch_many(3, "/nonexistent/player", **player_kwargs())
    assert info.value.slots == [0, 1, 2]
    # One player that dies at start: the other slots are closed again, the error names the slot.
    with pytest.raises(PlayerCrashed):
        renderd.launch_many(1, **player_kwargs(args=["--static-frame", "--fault-at-start", "exit"]))


TRANSPORTS = pytest.mark.parametrize("transport", ["fifo", "http"])


@TRANSPORTS
def test_masks_while_resetting(no_leaks, launch, transport):
    vs = launch(3, transport=transport)
    vs.step(["RotateRight"] * 3)
    vs.reset_async([1], scene="FloorPlan2")
    assert vs.slot_states == [SlotState.RUNNING, SlotState.RESETTING, SlotState.RUNNING]
    assert "slots=[r,s,r]" in repr(vs)
    seen = []
    for _ in range(50):
        obs, _, _, infos = vs.step(["MoveAhead", "MoveAhead", "MoveAhead"])
        assert obs[0] is not None and obs[2] is not None
        assert infos[0]["dropped_action"] is False
        seen.append((obs[1], infos[1]))
        if obs[1] is not None:
            break
    # Every step while slot 1 reset: its action dropped and marked, no observation, flags still there.
    for event, info in seen[:-1]:
        assert event is None
        assert info == {"resetting": True, "dropped_action": True}
    event, info = seen[-1]
    assert info == {"resetting": False, "dropped_action": True, "reset_complete": True}
    assert event.metadata["lastAction"] == "Initialize" and event.metadata["sceneName"] == "FloorPlan2"
    # Then it runs again: the next action is applied.
    obs, _, _, infos = vs.step(["Pass", "MoveAhead", "Pass"])
    assert obs[1].metadata["lastAction"] == "MoveAhead" and infos[1]["dropped_action"] is False
    assert vs.slot_states == [SlotState.RUNNING] * 3


@TRANSPORTS
def test_a_slow_reset_does_not_hold_up_the_others(no_leaks, launch, transport):
    vs = launch(2, transport=transport)
    # Slot 1's player answers, then sleeps 1 s before it reads its next action (its Reset).
    vs.step(["Pass", {"action": FAULT, "fault": "sleep", "seconds": 1.0, "when": "after"}])
    vs.reset_async([1])
    started = time.monotonic()
    steps = 0
    while True:
        t0 = time.monotonic()
        obs, _, _, infos = vs.step(["Pass", "Pass"])
        assert time.monotonic() - t0 < 0.5, "a step waited for the resetting slot"
        assert obs[0] is not None
        steps += 1
        if obs[1] is not None:
            break
        assert infos[1] == {"resetting": True, "dropped_action": True}
        assert time.monotonic() - started < STEP
    assert time.monotonic() - started >= 0.9
    assert steps > 5  # slot 0 kept stepping all the while
    assert infos[1]["reset_complete"] is True


def test_stepping_while_every_slot_resets_does_not_spin(no_leaks, launch):
    vs = launch(1)
    vs.step([{"action": FAULT, "fault": "sleep", "seconds": 1.0, "when": "after"}])
    vs.reset_async()
    started = time.monotonic()
    calls = 0
    while True:
        obs, _, _, infos = vs.step(["Pass"])
        calls += 1
        if obs[0] is not None:
            break
        assert infos[0]["dropped_action"] and infos[0]["resetting"]
    # One step waited for the Reset answer (1 s), one more for the Initialize answer: no busy loop.
    assert time.monotonic() - started >= 0.9
    assert calls <= 3
    assert infos[0]["reset_complete"]


def test_reset_waits_and_returns_every_slot(no_leaks, launch):
    vs = launch(3)
    result = vs.reset(scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"], gridSize=0.5)
    assert [e.metadata["sceneName"] for e in result.observations] == ["FloorPlan1", "FloorPlan2", "FloorPlan3"]
    assert all(i["reset_complete"] for i in result.infos)
    before = vs.sessions[0].last_event
    result = vs.reset([2], width=32, height=48)
    assert result.observations[0] is before  # untouched slots: their last event, nothing sent
    assert (result.observations[2].screen_width, result.observations[2].screen_height) == (32, 48)
    assert result.observations[2].frame.shape == (48, 32, 3)
    assert result.observations[2].metadata["sceneName"] == "FloorPlan3"
    # Moves use the accumulated gridSize.
    obs = vs.step(["MoveAhead"] * 3).observations
    assert obs[2].metadata["agent"]["position"]["z"] == pytest.approx(-2.5 + 0.5)
    # A scene the player does not have: the reset finishes, and says why it failed.
    result = vs.reset([0], scene="NoSuchScene")
    assert "NoSuchScene" in result.infos[0]["reset_error"]


def test_a_bad_reset_size_is_an_argument_error_and_breaks_nothing(no_leaks, launch):
    vs = launch(2)
    for bad in ("64px", 0, 2.5, True, MAX_RESOLUTION + 1):
        with pytest.raises(ArgumentError, match="width: must be an integer"):
            vs.reset(scene="FloorPlan2", width=bad)
    with pytest.raises(ArgumentError, match="height"):
        vs.reset_async([1], height="64")
    assert vs.error is None and vs.slot_states == [SlotState.RUNNING] * 2
    assert all(ev.metadata["lastAction"] == "Pass" for ev in vs.step(["Pass", "Pass"]).observations)


def test_crash_without_replacement_names_every_failed_slot(no_leaks, launch):
    vs = launch(4)
    crashed = vs.pids[1]
    hit = vs.pids[3]
    with pytest.raises(PlayerCrashed) as info:
        vs.step(["Pass", {"action": FAULT, "fault": "segfault"}, "Pass", {"action": FAULT, "fault": "abort"}])
    text = str(info.value)
    assert "2 of 4 slots failed (slots 1, 3)" in text
    assert "slot 1: PlayerCrashed" in text and "SIGSEGV" in text
    assert "slot 3: PlayerCrashed" in text and "SIGABRT" in text
    assert info.value.slots == [1, 3]
    assert isinstance(info.value.failures[1], PlayerCrashed)
    # The other slots' answers were read: their streams are clean and they are still there.
    assert vs.sessions[0].state.value == "ready" and vs.sessions[2].state.value == "ready"
    assert not psutil.pid_exists(crashed) or psutil.Process(crashed).status() == psutil.STATUS_ZOMBIE
    assert hit not in [p.pid for p in psutil.Process().children()]
    with pytest.raises(CallOrderError, match="broken") as later:
        vs.step(["Pass"] * 4)
    assert str(later.value).endswith("Close it and start a new one (or use replace_on_crash=True).")


def test_mixed_failures_raise_a_renderd_error(no_leaks, launch):
    vs = launch(2)
    with pytest.raises(renderd.RenderdError) as info:
        vs.step([{"action": FAULT, "fault": "garbage"}, {"action": FAULT, "fault": "exit", "code": 3}])
    assert type(info.value) is renderd.RenderdError
    assert "slot 0: ProtocolError" in str(info.value) and "slot 1: PlayerCrashed" in str(info.value)
    assert "exit code 3" in str(info.value)


def test_replace_on_crash_keeps_the_others_running(no_leaks, launch):
    vs = launch(3, replace_on_crash=True)
    vs.reset([0, 1, 2], scene="FloorPlan2")
    others = [vs.pids[0], vs.pids[2]]
    old = vs.pids[1]
    seq_before = [s.sequence_id for s in vs.sessions]
    obs, _, dones, infos = vs.step(["Pass", {"action": FAULT, "fault": "segfault"}, "Pass"])
    assert obs[1] is None and dones == [False, True, False]
    assert isinstance(infos[1]["error"], PlayerCrashed) and infos[1]["error_type"] == "PlayerCrashed"
    assert infos[1]["replaced"] is True and infos[1]["resetting"] is True
    assert "SIGSEGV" in str(infos[1]["error"])
    assert vs.slot_states[1] is SlotState.REPLACING and "slots=[r,p,r]" in repr(vs)
    # The others stepped on, untouched (no reset: their sequence ids just went up by one).
    assert [obs[0].sequence_id, obs[2].sequence_id] == [seq_before[0] + 1, seq_before[2] + 1]
    # Static frames: thousands of steps go by while the replacement boots on a busy machine; step until it
    # answers, within the start deadline.
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        obs, _, dones, infos = vs.step(["Pass"] * 3)
        assert obs[0] is not None and obs[2] is not None and not any(dones)
        if obs[1] is not None:
            break
        assert time.monotonic() < deadline, "the replacement did not answer within start_timeout"
    assert infos[1]["reset_complete"] is True and infos[1]["dropped_action"] is True
    # The replacement got the slot's last reset (scene FloorPlan2).
    assert obs[1].metadata["sceneName"] == "FloorPlan2"
    assert vs.pids[1] != old and [vs.pids[0], vs.pids[2]] == others
    assert vs.step(["MoveAhead"] * 3).observations[1].metadata["lastAction"] == "MoveAhead"


def test_replace_on_crash_with_wait_resets(no_leaks, launch):
    vs = launch(2, replace_on_crash=True)
    obs, _, dones, infos = vs.step(["Pass", {"action": FAULT, "fault": "exit"}], wait_resets=True)
    # The replacement is ready within the step: its first frame (the slot was never reset), done, the error.
    assert dones == [False, True]
    assert obs[1] is not None and obs[1].sequence_id == 0 and obs[1].metadata["lastAction"] == ""
    assert infos[1]["replaced"] and infos[1]["reset_complete"] and infos[1]["error_type"] == "PlayerCrashed"
    assert vs.slot_states == [SlotState.RUNNING, SlotState.RUNNING]


def test_a_replacement_ready_before_send_returns_its_first_frame(no_leaks, launch):
    vs = launch(2, replace_on_crash=True, reward_fn=lambda ev: 1.0)
    vs.step(["Pass", {"action": FAULT, "fault": "segfault"}])
    replacement = vs._slots[1].future  # white box: the moment it is ready, between two steps
    wait_for(lambda: replacement.done(), START_TIMEOUT, "the replacement to be ready")
    obs, rewards, dones, infos = vs.step(["Pass", "RotateLeft"])
    # The slot was never reset: its observation is the new player's first frame; the action was dropped.
    assert obs[1].sequence_id == 0 and obs[1].metadata["lastAction"] == ""
    assert infos[1] == {"resetting": False, "dropped_action": True, "reset_complete": True}
    assert rewards == [1.0, 0.0] and dones == [False, False]
    assert vs.step(["Pass", "RotateLeft"]).observations[1].metadata["lastAction"] == "RotateLeft"


@TRANSPORTS
def test_recv_timeout_names_the_hung_slot(no_leaks, launch, transport):
    vs = launch(3, transport=transport)
    vs.send(["Pass", HANG, "Pass"])
    started = time.monotonic()
    with pytest.raises(PlayerTimeout) as info:
        vs.recv(timeout=0.5)
    assert time.monotonic() - started < 5.0
    assert "slot 1 of 3 failed" in str(info.value) and "recv timeout of 0.5 s" in str(info.value)
    assert "RenderdFault: no answer from the player" in str(info.value) and "only part" not in str(info.value)
    assert info.value.deadline == "recv timeout"


def test_replacements_that_all_fail_are_raised_without_suggesting_replacement(no_leaks, tmp_path):
    marker = tmp_path / "exit"
    vs = renderd.launch_many(2, marker_player.argv(str(marker), "--fault-at-start exit"), replace_on_crash=True,
                             **player_kwargs())
    try:
        marker.touch()
        with pytest.raises(renderd.RenderdError) as info:
            vs.step(["Pass", {"action": FAULT, "fault": "segfault"}], wait_resets=True)
        text = str(info.value)
        assert info.value.slots == [1] and f"could not be replaced: {REPLACE_ATTEMPTS} attempts failed" in text
        assert "replace_on_crash" not in text
        assert "slots=[r,f]" in repr(vs)
        # Every later call says the session is broken, still without suggesting what is already set.
        with pytest.raises(CallOrderError) as later:
            vs.step(["Pass", "Pass"])
        assert "on a broken VectorSession" in str(later.value) and later.value.__cause__ is info.value
        assert "replace_on_crash" not in str(later.value)
    finally:
        vs.close()


def test_timeout_is_replaced_too(no_leaks, launch):
    vs = launch(2, replace_on_crash=True, step_timeout=0.5)
    obs, _, dones, infos = vs.step(["Pass", HANG], wait_resets=True)
    assert dones == [False, True] and infos[1]["error_type"] == "PlayerTimeout"
    text = str(infos[1]["error"])
    assert "no answer from the player" in text and "within step_timeout = 0.5 s" in text
    # The time since the action was sent, not the length of the last (instant) wait for it.
    assert float(re.search(r"\(([0-9.e+-]+) s after the action was sent", text)[1]) >= 0.5
    assert obs[1] is not None


def test_protocol_error_is_replaced(no_leaks, launch):
    vs = launch(2, replace_on_crash=True)
    _, _, dones, infos = vs.step([{"action": FAULT, "fault": "garbage"}, "Pass"])
    assert dones == [True, False] and isinstance(infos[0]["error"], ProtocolError)


def test_external_sigkill_while_idle_is_noticed_at_the_next_step(no_leaks, launch):
    vs = launch(2, replace_on_crash=True)
    victim = vs.pids[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE,
             5.0, "the player to die")
    obs, _, dones, infos = vs.step(["Pass", "Pass"])
    assert dones == [True, False] and "SIGKILL" in str(infos[0]["error"])
    assert obs[1] is not None


# -- players stuck in the middle of a message, answers that cannot be decoded in full ---------------------


def peer(mode: str = "serve") -> list[str]:
    """The scripted FIFO peer of the transport tests (see tests/transport/peer.py for its modes)."""
    return [sys.executable, os.path.join(os.path.dirname(os.path.dirname(__file__)), "transport", "peer.py"), mode]


def test_a_slot_stuck_mid_message_holds_up_no_other_slot(no_leaks):
    # Slot 1 writes half its answer and stops: slots 0 and 2 are answered at once, and slot 1 fails at the
    # recv timeout, not at its much later step_timeout.
    vs = renderd.launch_many(3, peer(), platform="headless", start_timeout=START_TIMEOUT, step_timeout=STEP)
    try:
        started = time.monotonic()
        with pytest.raises(PlayerTimeout) as info:
            vs.step(["Pass", "HalfThenHang", "Pass"], timeout=1.0)
        assert time.monotonic() - started < STEP / 2
        text = str(info.value)
        assert "slot 1 of 3 failed" in text and "recv timeout of 1 s" in text and "slot 0" not in text
        assert "only part of an answer (an incomplete message)" in text
    finally:
        vs.close()


def test_a_resetting_slot_stuck_mid_message_does_not_hold_up_steps(no_leaks):
    vs = renderd.launch_many(2, peer(), platform="headless", start_timeout=START_TIMEOUT, step_timeout=STEP,
                             env={"PEER_HALF_ACTION": "Reset"})
    try:
        vs.reset_async([1])
        for _ in range(3):
            started = time.monotonic()
            obs, _, _, infos = vs.step(["Pass", "Pass"])
            assert time.monotonic() - started < STEP / 2, "a step waited for the resetting slot's half answer"
            assert obs[0] is not None and obs[1] is None and infos[1]["resetting"]
    finally:
        vs.close()


def test_a_failed_reset_with_undecodable_metadata_is_reported_not_raised(no_leaks):
    # The failure is read from the answer's summary; the full metadata (whose sceneName is not UTF-8)
    # is only decoded, and only then refused, when someone asks for it.
    vs = renderd.launch_many(2, peer("bad-failure"), platform="headless", replace_on_crash=True,
                             start_timeout=START_TIMEOUT, step_timeout=STEP)
    try:
        obs, _, _, infos = vs.reset()
        assert vs.slot_states == [SlotState.RUNNING, SlotState.RUNNING]
        assert all("failed on purpose" in info["reset_error"] for info in infos)
        assert not any("error" in info for info in infos)
        with pytest.raises(ProtocolError, match="not valid msgpack"):
            _ = obs[0].metadata
    finally:
        vs.close()


# -- closing while a replacement is on its way ------------------------------------------------------------

#: close() stops a booting replacement within this many seconds (its start_timeout is much longer).
CLOSE_WITHIN = 5.0


def test_close_stops_a_replacement_that_is_still_booting(no_leaks, tmp_path):
    # Replacements hang before their first frame; close() must not wait out 3 x start_timeout for them.
    marker = tmp_path / "hang"
    vs = renderd.launch_many(2, marker_player.argv(str(marker), "--fault-at-start hang"), replace_on_crash=True,
                             **player_kwargs(start_timeout=10.0))
    try:
        marker.touch()
        vs.step(["Pass", {"action": FAULT, "fault": "segfault"}])

        def booting():
            found = []
            for p in psutil.Process().children():
                try:
                    if p.pid not in vs.pids and "--fault-at-start" in " ".join(p.cmdline()):
                        found.append(p)
                except psutil.Error:  # (the crashed player, a zombie until it is reaped)
                    pass
            return found

        wait_for(booting, START_TIMEOUT, "the replacement player to start")
    finally:
        started = time.monotonic()
        vs.close()
    assert time.monotonic() - started < CLOSE_WITHIN


def test_ctrl_c_during_close_is_raised_once_everything_is_closed(no_leaks):
    # A replacement that takes as long as the test wants: close() waits for it while Ctrl-C comes.
    check_signal_during_close_is_raised_once_everything_is_closed(signal.SIGINT, STEP)


def test_a_reset_started_over_reports_only_its_own_errors(no_leaks, launch):
    # The first reset's Reset is in flight when a second reset is asked for: its refusal is not the second's.
    vs = launch(2)
    vs.reset_async([0], scene="NoSuchScene")
    result = vs.reset([0], scene="FloorPlan2")
    assert result.observations[0].metadata["sceneName"] == "FloorPlan2"
    assert result.infos[0]["reset_complete"] is True and "reset_error" not in result.infos[0], result.infos[0]
    # A reset that is refused itself still says so.
    vs.reset_async([0], scene="FloorPlan3")
    result = vs.reset([0], scene="NoSuchScene")
    assert "no scene named 'NoSuchScene'" in result.infos[0]["reset_error"]
    assert result.infos[0]["reset_error"].count("Reset:") == 1
