"""Vector sessions: a replacement player that has not opened client.pipe yet, while recv works."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import renderd
from renderd.errors import CallOrderError, PlayerTimeout
from renderd.vector import SlotState
from tests.vector.conftest import SIZE, START_TIMEOUT, STEP_TIMEOUT, wait_for

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")
#: A scripted player (tests/transport/peer.py's messages), by what the marker file says when it starts (a
#: crashed slot's replacements start after a test changed it):
#:   "serve": answers every action; "Gate" once MARKER.ready exists, GATE seconds later; "Nap" 0.1 s later.
#:   "no-client": sends its first frame, creates MARKER.ready, never opens client.pipe.
#:   "late S": sends its first frame, opens client.pipe S seconds later, then answers every action.
WRAPPER = """
import os, sys, time
marker, peer, gate = sys.argv[1:4]
mode = open(marker).read().split()
sys.path.insert(0, os.path.dirname(peer))
import peer as p
size = int(os.environ["PEER_WIDTH"])
out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
p.write_all(out, p.message(0, size, size))
if mode[0] == "no-client":
    open(marker + ".ready", "w").close()
    time.sleep(3600)
if mode[0] == "late":
    time.sleep(float(mode[1]))
inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
while (action := p.read_action(inp)) is not None:
    if action["action"] == "Gate":
        while not os.path.exists(marker + ".ready"):
            time.sleep(0.01)
        time.sleep(float(gate))
    elif action["action"] == "Nap":
        time.sleep(0.1)
    p.write_all(out, p.message(int(action["sequenceId"]), size, size))
"""
#: The slots' step_timeout: what a replacement that has not opened client.pipe used to hold recv for.
HOLD = 2.0
#: How long after the replacement has sent its first frame the other slot answers "Gate".
GATE = 0.5
GRACE = 0.3
#: How long after its first frame the late replacement opens client.pipe.
LATE = 0.3


def _launch(n: int, marker: Path, **kw) -> renderd.VectorSession:
    vs = renderd.launch_many(
        n, [sys.executable, "-c", WRAPPER, str(marker), PEER, str(GATE)], width=SIZE, height=SIZE,
        env={"PEER_WIDTH": str(SIZE)}, start_timeout=START_TIMEOUT, **kw,
    )
    for session in vs.sessions:
        session.stop_grace = GRACE
    return vs


def test_a_replacement_that_has_not_opened_its_pipe_holds_no_other_slot_up(tmp_path, no_leaks):
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, replace_on_crash=True, step_timeout=HOLD)
    try:
        vs.reset()  # (so a replacement is given the slot's reset)
        marker.write_text("no-client")
        os.kill(vs.pids[0], signal.SIGKILL)
        started = time.monotonic()
        # Slot 1 answers GATE seconds after slot 0's replacement has sent its first frame.
        out = vs.step(["Pass", "Gate"])
        returned = time.time()
        assert out.infos[0]["error_type"] == "PlayerCrashed", out.infos[0]
        assert out.observations[1] is not None and out.infos[1]["dropped_action"] is False
        # The replacement was made ready while slot 1 worked: its Reset waits for client.pipe to be opened
        # without holding the step (which waits only for slot 1) until its step_timeout.
        assert vs.slot_states[0] is SlotState.RESETTING, vs.slot_states
        after_ready = returned - os.stat(f"{marker}.ready").st_mtime
        assert after_ready < HOLD - 0.5, f"step() returned {after_ready:.2f} s after the replacement was ready"
        # It fails at its Reset's step_timeout, saying what the player did not do.
        replacement = vs.pids[0]
        deadline = time.monotonic() + HOLD + 10.0
        while True:
            out = vs.step(["Pass", "Nap"])
            if "error" in out.infos[0]:
                break
            assert time.monotonic() < deadline, "the replacement that never opened client.pipe did not fail"
            assert out.infos[0]["resetting"] and out.observations[0] is None, out.infos[0]
        failed = time.monotonic()
        err = out.infos[0]["error"]
        assert isinstance(err, PlayerTimeout) and err.deadline == "step_timeout", repr(err)
        assert str(err).startswith(f"Reset: the player (pid {replacement}) did not open client.pipe within "
                                   f"step_timeout = {HOLD:g} s"), str(err)
        assert failed - started >= HOLD, f"failed {failed - started:.2f} s after the crash, before its step_timeout"
        assert out.infos[1]["dropped_action"] is False and out.observations[1] is not None
    finally:
        vs.close()


def test_a_replacement_that_opens_its_pipe_late_is_reset_and_steps(tmp_path, no_leaks):
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, replace_on_crash=True, step_timeout=STEP_TIMEOUT)
    try:
        vs.reset()
        marker.write_text(f"late {LATE}")
        os.kill(vs.pids[0], signal.SIGKILL)
        out = vs.step(["Pass", "Pass"])
        assert out.infos[0]["error_type"] == "PlayerCrashed", out.infos[0]
        # (Most likely ready during this step's recv: its Reset is written once it has opened client.pipe.)
        out = vs.step(["Pass", "Pass"], wait_resets=True)
        replacement = vs.pids[0]
        assert out.infos[0].get("reset_complete") and "error" not in out.infos[0], out.infos[0]
        assert out.observations[0] is not None and out.observations[0].frame.shape == (SIZE, SIZE, 3)
        out = vs.step(["Pass", "Pass"])
        assert out.infos[0]["dropped_action"] is False and out.observations[0] is not None, out.infos[0]
        assert vs.pids[0] == replacement and vs.slot_states == [SlotState.RUNNING] * 2
    finally:
        vs.close()


def test_a_ctrl_c_during_recv_is_named_by_the_calls_that_follow(tmp_path, no_leaks):
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, step_timeout=STEP_TIMEOUT)
    handled = threading.Event()

    def on_sigint(signum, frame):
        handled.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        vs.send(["Pass", "Gate"])  # (slot 1 answers only once MARKER.ready exists: recv waits)
        timer = threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                vs.recv()
        finally:
            timer.join()
        assert handled.is_set() and isinstance(vs.error, KeyboardInterrupt)
        with pytest.raises(CallOrderError) as info:
            vs.step(["Pass", "Pass"])
        text = str(info.value)
        assert "an earlier recv() was interrupted (KeyboardInterrupt) while it used the players' pipes" in text, text
        assert "half-read or half-written" in text and "KeyboardInterrupt: ." not in text, text
    finally:
        signal.signal(signal.SIGINT, previous)
        vs.close()


def test_errors_of_step_and_reset_name_them_not_send_and_reset_async(tmp_path, no_leaks):
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, step_timeout=STEP_TIMEOUT)
    try:
        with pytest.raises(ValueError, match=r"^step\(\) needs 2 actions \(one per slot\), got 1"):
            vs.step(["Pass"])
        with pytest.raises(TypeError, match=r"^step\(\) takes one action per slot"):
            vs.step("Pass")
        with pytest.raises(ValueError, match=r"^reset\(\) got 3 scenes for 2 slots"):
            vs.reset(scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"])
        with pytest.raises(TypeError, match=r"^reset\(\): a scene is a name or None"):
            vs.reset(scene=[None, 3])
        vs.send(["Pass", "Pass"])
        with pytest.raises(renderd.AlreadyPendingCallError, match=r"^step\(\) while the answers to an earlier send"):
            vs.step(["Pass", "Pass"])
        with pytest.raises(renderd.AlreadyPendingCallError, match=r"^reset\(\) between send\(\) and recv\(\)"):
            vs.reset()
        with pytest.raises(renderd.AlreadyPendingCallError, match=r"^reset_async\(\) between send\(\) and recv\(\)"):
            vs.reset_async()
        vs.recv()
    finally:
        vs.close()
    with pytest.raises(CallOrderError, match=r"^reset\(\) on a closed VectorSession"):
        vs.reset()
    with pytest.raises(CallOrderError, match=r"^step\(\) on a closed VectorSession"):
        vs.step(["Pass", "Pass"])


def test_a_player_failing_as_reset_async_sends_is_not_said_to_have_had_answers_received(tmp_path, no_leaks):
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, step_timeout=STEP_TIMEOUT)
    try:
        vs.step(["Pass", "Pass"])  # (both players have client.pipe open)
        first = vs.sessions[0]
        os.kill(first.pid, signal.SIGKILL)
        wait_for(first.channel.player.exited, START_TIMEOUT, "the SIGKILLed player's exit")
        with pytest.raises(renderd.PlayerCrashed) as info:
            vs.reset_async()
        text = str(info.value)
        assert text.startswith("slot 0 of 2 failed; this VectorSession is broken now: close it"), text
        assert "answers were received" not in text, text
    finally:
        vs.close()


def test_a_replacement_ready_before_a_step_that_has_not_opened_its_pipe_holds_no_slot_up(tmp_path, no_leaks):
    # The same replacement as above, but ready before the next step's send, which gives it the slot's reset:
    # that send does not wait for client.pipe to be opened either (it used to, until the step_timeout,
    # before any other slot's action was written).
    marker = tmp_path / "mode"
    marker.write_text("serve")
    vs = _launch(2, marker, replace_on_crash=True, step_timeout=HOLD)
    try:
        vs.reset()
        marker.write_text("no-client")
        os.kill(vs.pids[0], signal.SIGKILL)
        out = vs.step(["Pass", "Pass"])
        assert out.infos[0]["error_type"] == "PlayerCrashed", out.infos[0]
        replacement = vs._slots[0].future  # white box: ready between two steps
        wait_for(replacement.done, START_TIMEOUT, "the replacement to be ready")
        started = time.monotonic()
        out = vs.step(["Pass", "Pass"])
        took = time.monotonic() - started
        assert vs.slot_states[0] is SlotState.RESETTING and out.infos[0]["dropped_action"], out.infos[0]
        assert out.observations[1] is not None and out.infos[1]["dropped_action"] is False
        assert took < HOLD - 1.0, f"step() took {took:.2f} s: held by a replacement that has not opened client.pipe"
    finally:
        vs.close()
