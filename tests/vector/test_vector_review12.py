"""A vector session's launch threads and its failed slots: a factory that closes its own vector session, and players
that close client.pipe but stay alive."""

from __future__ import annotations

import secrets
import select
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import renderd
import renderd.vector
from renderd.errors import CallOrderError, PlayerCrashed
from renderd.transport import fifo
from tests.helpers.leaks import pid_gone
from tests.vector.conftest import GONE_TIMEOUT, STEP_TIMEOUT, every_slot_crashes, player_kwargs, wait_for

EXIT = {"action": "RenderdFault", "fault": "exit", "code": 3}
PEERS = Path(__file__).parent.parent / "transport"
#: What the tests use for renderd.transport.fifo.EOF_CLASSIFY_TIMEOUT (1 s): how long a player that closed
#: client.pipe gets to exit (or answer) before it is reported as a crash.
CLASSIFY = 0.4
#: Players in the tests of players that close client.pipe: one after another they would take N x CLASSIFY.
N = 5
#: Runs the script of its first argument (with the rest as its arguments) with SIGTERM ignored.
IGNORES_SIGTERM = (
    "import runpy, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
#: A scripted FIFO player (tests/transport/peer.py's helpers) that reads one action, closes client.pipe, answers the
#: action after ARG seconds (none: never), and then stays alive until killed.
CLOSE_THEN_ANSWER = f"""
import os, sys, time
sys.path.insert(0, {str(PEERS)!r})
from peer import message, read_action, write_all
out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
write_all(out, message(0, 32, 24))
inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
action = read_action(inp)
os.close(inp)
time.sleep(float(sys.argv[1]))
write_all(out, message(int(action["sequenceId"]), 32, 24))
time.sleep(3600)
"""


def test_a_factory_that_closes_its_own_vector_session_does_not_wait_for_itself(no_leaks):
    # The factory runs in the failed slot's launch thread; close() waited for every replacement on its way, this one
    # included: for the thread it ran in, forever. Now it closes everything else and returns, and the session the
    # factory makes after that is closed as it returns.
    go, returned = threading.Event(), threading.Event()
    raised: list[BaseException] = []
    made: list[renderd.Session] = []
    launch_threads: list[threading.Thread] = []

    def factory(slot: int):
        launch_threads.append(threading.current_thread())
        go.wait(STEP_TIMEOUT)
        try:
            vs.close()
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)
        returned.set()
        session = renderd.launch(**player_kwargs())
        made.append(session)
        return session

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    pids = vs.pids
    running = None
    try:
        result = vs.step([EXIT, "Pass"])
        assert result.infos[0]["replaced"] and vs.slot_states[0] is renderd.vector.SlotState.REPLACING
        running = vs._slots[0].future  # (only to end the launch thread's wait, should close() wait for it after all)
        go.set()
        assert returned.wait(5.0), "close() called by the factory waits for its own launch thread"
        assert raised == []
        assert vs.closed
        wait_for(lambda: made and made[0].closed, GONE_TIMEOUT, "the session the factory made after close() to close")
        with pytest.raises(CallOrderError, match="closed"):
            vs.step(["Pass", "Pass"])
        started = time.monotonic()
        vs.close()  # (returns at once: the factory's close() has finished)
        assert time.monotonic() - started < 1.0
        assert all(pid_gone(pid) for pid in pids)
        assert launch_threads[0].name.startswith("renderd-vector")
        wait_for(lambda: not launch_threads[0].is_alive(), GONE_TIMEOUT, "the launch thread to end")
    finally:
        go.set()
        if not returned.is_set() and running is not None and not running.done():
            running.set_result(None)  # (lets the stuck close() go on, so that the test ends)
            returned.wait(5.0)
        vs.close()



def test_a_factory_that_closes_its_own_vector_session_while_a_step_waits_for_it(no_leaks):
    # As the gym layer steps (wait_resets=True), the step waits for the replacement: the factory's close() waited for
    # that step to leave, and the step, seeing the close, waited for the replacement (the launch running the close).
    # Now the step raises CallOrderError at once and the close goes on.
    returned = threading.Event()
    made: list[renderd.Session] = []

    def factory(slot: int):
        vs.close()
        returned.set()
        made.append(renderd.launch(**player_kwargs()))
        return made[0]

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    raised: list[BaseException] = []

    def stepping() -> None:
        try:
            vs.step([EXIT, "Pass"], wait_resets=True)
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)

    stepper = threading.Thread(target=stepping, name="stepper", daemon=True)  # (daemon: on failure it may never end)
    started = time.monotonic()
    stepper.start()
    stepper.join(STEP_TIMEOUT)
    took = time.monotonic() - started
    assert not stepper.is_alive(), "the step never returned"
    assert len(raised) == 1 and isinstance(raised[0], CallOrderError), raised
    assert took < 3.0, f"the step took {took:.2f} s to raise"
    assert returned.wait(5.0), "close() called by the factory did not return"
    wait_for(lambda: made and made[0].closed, GONE_TIMEOUT, "the session the factory made after close() to close")
    vs.close()

def test_players_that_close_client_pipe_under_their_action_take_one_classify_wait_between_them(no_leaks, monkeypatch):
    # Each player reads its action, closes client.pipe and stays alive. Each slot's channel waited its
    # EOF_CLASSIFY_TIMEOUT for an answer or an exit in turn: N players took N seconds. Now the waits overlap.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", CLASSIFY)
    vs = renderd.launch_many(N, [sys.executable, str(PEERS / "peer.py"), "read-close"], start_timeout=30.0,
                             step_timeout=30.0)
    try:
        _, took = every_slot_crashes(vs, ["Pass"] * N, "the player closed client.pipe and sent no answer while renderd "
                                     "waited for it", "the player process is still running")
    finally:
        vs.close()
    assert CLASSIFY <= took < 2.5 * CLASSIFY, f"step() took {took:.2f} s for {N} players that closed client.pipe"


def _reader_gone(session: renderd.Session) -> bool:
    poller = select.poll()
    poller.register(session.channel.writer_fileno(), 0)
    return bool(poller.poll(0))


def test_players_that_closed_client_pipe_since_their_answer_take_one_classify_wait_between_them(
    no_leaks, monkeypatch, tmp_path
):
    # Each player closes client.pipe, answers the action it read 0.1 s later (an answer on its way is taken), and
    # stays alive. The next step's writes failed (EPIPE) one after another, each then waiting EOF_CLASSIFY_TIMEOUT
    # for the player's exit: N players took N seconds. Now the waits overlap, and no write is tried.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", CLASSIFY)
    script = tmp_path / "close_then_answer.py"
    script.write_text(CLOSE_THEN_ANSWER)
    vs = renderd.launch_many(N, [sys.executable, str(script), "0.1"], start_timeout=30.0, step_timeout=30.0)
    try:
        out = vs.step(["Pass"] * N)
        assert all(event is not None for event in out.observations), out.infos
        assert not any("error" in info for info in out.infos), out.infos
        wait_for(lambda: all(_reader_gone(s) for s in vs.sessions), GONE_TIMEOUT, "every player to close client.pipe")
        _, took = every_slot_crashes(vs, ["Pass"] * N, "the player closed client.pipe while renderd sent it an action",
                                     "the player process is still running")
    finally:
        vs.close()
    assert CLASSIFY <= took < 2.5 * CLASSIFY, f"step() took {took:.2f} s for {N} players that closed client.pipe"


def test_a_failed_players_stop_grace_does_not_delay_its_replacement(no_leaks):
    # The launch thread stopped the failed player (SIGTERM, its stop grace, SIGKILL) before it called the factory:
    # a player that ignores SIGTERM held its slot's replacement up for the whole grace. Now it is stopped while the
    # replacement starts.
    grace = 1.5
    called: list[float] = []
    peer = [sys.executable, str(PEERS / "peer.py"), "serve"]

    def factory(slot: int):
        called.append(time.monotonic())
        return renderd.launch(peer, start_timeout=30.0, step_timeout=30.0)

    deaf = [sys.executable, "-c", IGNORES_SIGTERM, *peer[1:]]
    vs = renderd.VectorSession([renderd.launch(deaf, start_timeout=30.0, step_timeout=30.0) for _ in range(2)],
                               factory=factory, replace_on_crash=True)
    try:
        old = vs.sessions[0]
        old.stop_grace = grace
        out = vs.step([{"action": "HalfThenHang"}, "Pass"], timeout=0.3)  # (slot 0's player hangs half-way)
        failed = time.monotonic()
        assert out.infos[0].get("error_type") == "PlayerTimeout", out.infos[0]
        wait_for(lambda: called, GONE_TIMEOUT, "the factory to be called")
        assert called[0] - failed < grace / 2, f"the factory was called {called[0] - failed:.2f} s after the failure"
        out = vs.step(["Pass", "Pass"], wait_resets=True)
        assert out.infos[0].get("reset_complete") and vs.slot_states[0] is renderd.vector.SlotState.RUNNING
        wait_for(lambda: pid_gone(old.pid), grace + GONE_TIMEOUT, "the failed player to be stopped")
        assert old.process.returncode == -signal.SIGKILL  # (it did ignore SIGTERM: the grace was waited out)
    finally:
        vs.close()


def test_close_stops_another_slots_ready_replacement_cleanly(no_leaks, monkeypatch):
    # Slot 1's replacement was ready (not yet taken up by a step) while slot 0's was still on its way: close(), waiting
    # for slot 0's, SIGKILLed slot 1's player as a booting one. Now only players still booting are killed; a ready
    # one is closed as every slot's player is.
    tag = secrets.token_hex(8)
    release = threading.Event()
    made: dict[int, renderd.Session] = {}

    def factory(slot: int):
        if slot == 0:
            release.wait(STEP_TIMEOUT)
        session = renderd.launch(**player_kwargs(env={renderd.vector.TAG_VARIABLE: tag}))
        made[slot] = session
        return session

    factory.tag = tag  # (as launch_many's factory: close() kills this vector session's players still booting)
    kills: list[set] = []
    kill_tagged = renderd.vector._kill_tagged

    def counted(tag: str, known: set) -> None:  # (the real one, counted: slot 0's launch goes on after two rounds)
        kill_tagged(tag, known)
        kills.append(known)
        if len(kills) >= 2:
            release.set()

    monkeypatch.setattr(renderd.vector, "_kill_tagged", counted)
    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    try:
        out = vs.step([EXIT, EXIT])
        assert out.infos[0].get("replaced") and out.infos[1].get("replaced")
        wait_for(lambda: 1 in made, GONE_TIMEOUT, "slot 1's replacement to be ready")
    except BaseException:
        release.set()  # (the test failed above: slot 0's launch goes on, so close() does not wait it out)
        raise
    finally:
        vs.close()  # (slot 0's launch goes on once close() has made two rounds of kills: counted() above)
    assert len(kills) >= 2
    assert made[1].closed
    assert made[1].process.returncode == 0, f"slot 1's ready replacement ended with {made[1].process.returncode}"


def test_slot_by_slot_receiving_waits_for_players_that_closed_client_pipe_in_the_poll_too(
    no_leaks, monkeypatch, tmp_path
):
    # benchmarks/vector.py's slot-by-slot strategy received from a slot whose action was never written (its player had
    # closed client.pipe): NoPendingCallError, reported as that slot's failure instead of the player's crash.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", CLASSIFY)
    script = tmp_path / "close_then_answer.py"
    script.write_text(CLOSE_THEN_ANSWER)
    vs = renderd.launch_many(2, [sys.executable, str(script), "0"], start_timeout=30.0, step_timeout=30.0)
    vs._sequential_recv = True  # (white box: the strategy benchmarks/vector.py measures)
    try:
        vs.step(["Pass", "Pass"])
        wait_for(lambda: all(_reader_gone(s) for s in vs.sessions), GONE_TIMEOUT, "every player to close client.pipe")
        with pytest.raises(PlayerCrashed) as info:
            vs.step(["Pass", "Pass"])
        assert info.value.slots == [0, 1]
        assert "the player closed client.pipe while renderd sent it an action" in str(info.value.failures[0])
    finally:
        vs.close()
