"""VectorSession: writes of actions larger than client.pipe's buffer, reset actions written while receiving,
and a slot that fails twice in one round. Real reference players on real FIFOs."""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

import renderd
from renderd.errors import PlayerCrashed, PlayerTimeout
from renderd.transport import fifo
from renderd.vector import REPLACE_ATTEMPTS
from tests.helpers import marker_player
from tests.vector.conftest import START_TIMEOUT, player_kwargs, wait_for

#: Each slot's step_timeout in these tests.
STEP = 1.5
#: The SIGTERM grace of stopped players.
GRACE = 0.5
#: How long a channel waits for an answer (or an exit) from a read-close player, which closed client.pipe and
#: sleeps until killed: neither ever comes, so the default second of it is only waited out.
READ_CLOSE_GRACE = 0.2
#: Larger than client.pipe's buffer (64 KiB; even a 1 MiB pipe): written in parts as the player reads.
HUGE = "x" * (2 * 1024 * 1024)


def _stop(session: renderd.Session) -> None:
    session.stop_grace = GRACE
    os.kill(session.pid, signal.SIGSTOP)


def test_a_healthy_slot_after_a_stopped_one_takes_an_action_larger_than_its_pipe(no_leaks):
    # Slot 0 is stopped and does not take its action; slot 1 is healthy but its action is larger than its
    # pipe. The stopped slot must not cost slot 1 its write: slot 1 answers, slot 0 alone fails, and slot
    # 1's stream stays framed for the next steps.
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs(step_timeout=STEP))
    try:
        vs.step(["Pass", "Pass"])  # both players have opened client.pipe
        _stop(vs.sessions[0])
        big = {"action": "Pass", "padding": HUGE}
        out = vs.step([big, big])
        assert out.infos[0].get("error_type") == "PlayerTimeout", out.infos[0]
        assert "did not take its action" in str(out.infos[0]["error"])
        assert "error" not in out.infos[1], out.infos[1]
        assert out.observations[1] is not None and out.observations[1].metadata["lastAction"] == "Pass"
        for name in ("MoveAhead", "RotateLeft"):
            out = vs.step(["Pass", {"action": name, "padding": HUGE}])
            assert "error" not in out.infos[1], out.infos[1]
            assert out.observations[1].metadata["lastAction"] == name
    finally:
        vs.close()


def test_without_replacement_only_the_stopped_slot_fails(no_leaks):
    vs = renderd.launch_many(3, **player_kwargs(step_timeout=STEP))
    try:
        vs.step(["Pass"] * 3)
        _stop(vs.sessions[1])
        big = {"action": "Pass", "padding": HUGE}
        started = time.monotonic()
        with pytest.raises(PlayerTimeout) as info:
            vs.step([big] * 3)
        took = time.monotonic() - started
        assert info.value.slots == [1], info.value
        assert "did not take its action within step_timeout = 1.5 s" in str(info.value.failures[1])
    finally:
        vs.close()
    # The stopped player costs one step_timeout (and its stop grace), not one per slot after it.
    assert took < STEP + GRACE + 2.0, f"step() took {took:.2f} s"


def test_step_timeout_bounds_a_write_that_a_stopped_player_does_not_take(no_leaks):
    # Slot 0 is stopped under an action larger than its pipe; slot 1's action takes 0.3 s. Slot 1 gets its
    # action at once (not after slot 0's write gave up at the timeout) and answers within it; slot 0 fails at
    # the timeout.
    vs = renderd.launch_many(2, **player_kwargs(step_timeout=30.0))
    try:
        vs.step(["Pass", "Pass"])
        _stop(vs.sessions[0])
        started = time.monotonic()
        with pytest.raises(PlayerTimeout) as info:
            vs.step([{"action": "Pass", "padding": HUGE}, {"action": "RenderdFault", "fault": "sleep", "seconds": 0.3}],
                    timeout=1.5)
        took = time.monotonic() - started
        assert info.value.slots == [0], info.value
        assert "did not take its action within the recv timeout of 1.5 s" in str(info.value.failures[0])
    finally:
        vs.close()
    assert took < 1.5 + GRACE + 2.0, f"step(timeout=1.5) took {took:.2f} s"


def _answer_waiting(session: renderd.Session) -> bool:
    poller = select.poll()
    poller.register(session.channel.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def test_a_resetting_slot_whose_player_does_not_take_its_reset_action_holds_up_no_step(no_leaks):
    # Slot 0 resets with an Initialize larger than its pipe; its player answers Reset, then stops. The
    # Initialize is sent while the vector session receives: it must not hold up the other slot's step
    # (a resetting slot never holds up recv), and the slot fails at its own step_timeout.
    step_timeout = 2.5
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs(step_timeout=step_timeout))
    try:
        vs.step(["Pass", "Pass"])
        vs.reset_async([0], padding=HUGE)
        session = vs.sessions[0]
        wait_for(lambda: _answer_waiting(session), 10.0, "the answer to Reset")
        _stop(session)
        started = time.monotonic()
        out = vs.step(["Pass", "MoveAhead"])
        took = time.monotonic() - started
        assert out.observations[1].metadata["lastAction"] == "MoveAhead"
        assert "error" not in out.infos[0] and out.infos[0]["resetting"], out.infos[0]
        assert took < step_timeout - 1.0, f"a resetting slot held step() up for {took:.2f} s"
        # Its Initialize is never taken: it fails at its own step_timeout, reported by a later step.
        deadline = time.monotonic() + step_timeout + 10.0
        while time.monotonic() < deadline:
            out = vs.step(["Pass", "Pass"])
            if "error" in out.infos[0]:
                break
            time.sleep(0.01)  # (a poll, not a busy loop of steps)
        assert out.infos[0].get("error_type") == "PlayerTimeout", out.infos[0]
        assert "Initialize" in str(out.infos[0]["error"])
    finally:
        vs.close()


PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")


class _FirstReplacementDies:
    """A factory whose first player reads one action and closes client.pipe without answering (a crash
    on the slot's reset); the players after it are healthy reference players."""

    tag = None

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, slot: int) -> renderd.Session:
        self.calls += 1
        if self.calls == 1:
            return renderd.launch([sys.executable, PEER, "read-close"], start_timeout=START_TIMEOUT,
                                  step_timeout=STEP)
        return renderd.launch(**player_kwargs(step_timeout=STEP))


def test_a_slot_that_fails_twice_in_one_round_reports_the_first_failure(no_leaks, monkeypatch):
    # Slot 0's player is killed: its action cannot be sent (a crash), and a replacement is started. With
    # wait_resets the round waits for it; it is given the slot's reset and crashes on it (a second failure of
    # the slot in the same round); the next replacement is healthy. The step reports the cause, the first
    # failure, with the second one noted.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", READ_CLOSE_GRACE)
    factory = _FirstReplacementDies()
    sessions = [renderd.launch(**player_kwargs(step_timeout=STEP)) for _ in range(2)]
    vs = renderd.VectorSession(sessions, factory=factory, replace_on_crash=True)
    try:
        vs.reset(scene="FloorPlan1")
        first = vs.sessions[0]
        first_pid = first.pid
        os.kill(first_pid, signal.SIGKILL)
        wait_for(first.channel.player.exited, 10.0, "the SIGKILLed player's exit")
        out = vs.step(["Pass", "Pass"], wait_resets=True, timeout=2 * START_TIMEOUT)
        assert factory.calls == 2, factory.calls
        error = out.infos[0].get("error")
        assert isinstance(error, PlayerCrashed), out.infos[0]
        assert f"pid {first_pid}" in str(error) and "SIGKILL" in str(error), error
        notes = "\n".join(getattr(error, "__notes__", []))
        assert "failed again" in notes and "closed client.pipe" in notes, notes
        assert out.infos[0]["reset_complete"] and out.observations[0] is not None
    finally:
        vs.close()


def test_a_slot_whose_replacements_cannot_start_is_raised_with_its_first_failure(no_leaks, tmp_path):
    # Slot 1's player crashes (SIGSEGV) and every replacement fails to start, all in one round (wait_resets):
    # the error raised names the slot once, with its first failure (the crash, the cause) and the failed
    # replacement noted.
    marker = tmp_path / "exit"
    vs = renderd.launch_many(2, marker_player.argv(str(marker), "--fault-at-start exit"), replace_on_crash=True,
                             **player_kwargs())
    try:
        marker.touch()
        with pytest.raises(PlayerCrashed) as info:
            vs.step(["Pass", {"action": "RenderdFault", "fault": "segfault"}], wait_resets=True)
        text = str(info.value)
        assert info.value.slots == [1], info.value.slots
        assert text.count("slot 1:") == 1, text
        assert "SIGSEGV" in text and f"could not be replaced: {REPLACE_ATTEMPTS} attempts failed" in text, text
        assert text.index("SIGSEGV") < text.index("could not be replaced"), text
        assert isinstance(info.value.failures[1], PlayerCrashed)
    finally:
        vs.close()


class _EveryReplacementDies:
    """A factory whose every player reads one action and closes client.pipe without answering."""

    tag = None

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, slot: int) -> renderd.Session:
        self.calls += 1
        return renderd.launch([sys.executable, PEER, "read-close"], start_timeout=START_TIMEOUT, step_timeout=STEP)


def test_replacements_that_all_fail_their_reset_end_the_call(no_leaks, monkeypatch):
    # Every replacement starts, then crashes on the slot's reset. With wait_resets (as the Gymnasium layer
    # steps) the call replaced the slot again and again, forever without a timeout; now REPLACE_ATTEMPTS
    # such players in a row end it with the slot's failure.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", READ_CLOSE_GRACE)
    factory = _EveryReplacementDies()
    sessions = [renderd.launch(**player_kwargs(step_timeout=STEP)) for _ in range(2)]
    vs = renderd.VectorSession(sessions, factory=factory, replace_on_crash=True)
    try:
        vs.reset(scene="FloorPlan1")
        first = vs.sessions[0]
        os.kill(first.pid, signal.SIGKILL)
        wait_for(first.channel.player.exited, 10.0, "the SIGKILLed player's exit")
        started = time.monotonic()
        with pytest.raises(renderd.RenderdError) as info:
            vs.step(["Pass", "Pass"], wait_resets=True, timeout=40.0)
        took = time.monotonic() - started
        assert not isinstance(info.value, PlayerTimeout), info.value
        assert info.value.slots == [0]
        assert f"could not be replaced: {REPLACE_ATTEMPTS} replacement players in a row failed" in str(info.value)
        assert factory.calls == REPLACE_ATTEMPTS, factory.calls
    finally:
        vs.close()
    assert took < 30.0, f"step() took {took:.1f} s"
