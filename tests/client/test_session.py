"""renderd.launch() and Session against the reference player and a scripted peer: real processes, real FIFOs."""

from __future__ import annotations

import importlib.util
import os
import signal

import numpy as np
import psutil
import pytest

import renderd
from renderd.client import Session, SessionState
from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    ConfigError,
    LeaseError,
    NoPendingCallError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
)
from renderd.transport import fifo

from .conftest import START, Timer, live_children, open_fds, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")

#: A crash must be reported within this many seconds of the step that caused it.
CRASH_REPORTED_WITHIN = 1.0
SMALL = dict(width=64, height=48)


def fault(kind: str, **params) -> dict:
    return {"action": "RenderdFault", "fault": kind, **params}


def expected_frame(images, width: int, height: int) -> np.ndarray:
    """The frame a client should see for the reference player's wire-layout RGB(A) image."""
    rgb = dict(images)[renderd.protocol.FieldType.RGB_IMAGE]
    return rgb.reshape(height, width, -1)[::-1, :, :3]


class TestSteps:
    def test_1000_steps_frames_match_the_scene(self):
        """Every frame equals what the reference player's own scene renders for the same actions."""
        from renderd.player.core import Player

        actions = [
            "MoveAhead", "RotateRight", "MoveAhead", "LookDown", "RotateLeft", "MoveBack",
            "LookUp", "MoveLeft", "MoveRight", {"action": "RotateLeft", "degrees": 30},
        ]
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            # The player was told its platform in RENDERD_PLATFORM; mirror it in the reference.
            env_platform = psutil.Process(session.pid).environ().get("RENDERD_PLATFORM")
            reference = Player(**SMALL, platform=env_platform)
            _, images = reference.first_message()
            assert np.array_equal(session.last_event.frame, expected_frame(images, **SMALL))
            for i in range(1000):
                action = actions[i % len(actions)]
                event = session.step(action)
                metadata, images = reference.handle(dict(action) if isinstance(action, dict) else {"action": action})
                assert event.sequence_id == i + 1
                assert event.metadata["lastActionSuccess"] == metadata["agents"][0]["lastActionSuccess"]
                assert event.metadata["agent"]["position"] == metadata["agents"][0]["agent"]["position"]
                assert event.frame.shape == (48, 64, 3) and event.frame.dtype == np.uint8
                assert np.array_equal(event.frame, expected_frame(images, **SMALL)), f"frame {i + 1} differs"

    def test_frames_an_agent_keeps_stay_intact_while_buffers_are_reused(self):
        """The decoder reuses large frame buffers, but never one an agent still holds (every third
        event here, with RGB and depth frames large enough to get buffers of their own)."""
        actions = ["MoveAhead", "RotateRight", "LookDown", "RotateLeft", "LookUp", "MoveBack"]
        kept: list[tuple[renderd.Event, np.ndarray, np.ndarray]] = []
        with renderd.launch(width=160, height=120, start_timeout=START, step_timeout=10) as session:
            session.step("Initialize", renderDepthImage=True)
            for i in range(60):
                event = session.step(actions[i % len(actions)])
                assert event.depth_frame is not None and event.frame.nbytes > renderd.protocol.SMALL_BODY
                if i % 3 == 0:
                    kept.append((event, event.frame.copy(), event.depth_frame.copy()))
            for event, frame, depth in kept:
                assert np.array_equal(event.frame, frame)
                assert np.array_equal(event.depth_frame, depth)
            assert len({event.frame.ctypes.data for event, _, _ in kept}) == len(kept)
            assert 0 < session.channel.decoder.pooled_bytes <= renderd.protocol.POOL_BYTES
        assert session.channel.decoder.pooled_bytes == 0  # closing lets the pool's memory go
        for event, frame, _ in kept:
            assert np.array_equal(event.frame, frame)

    def test_action_forms_and_sequence_ids(self):
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            assert session.last_event.sequence_id == 0
            assert session.step("Pass").sequence_id == 1
            assert session.step(action="RotateLeft", degrees=30).sequence_id == 2
            assert session.step({"action": "Teleport", "x": 1.0}, y=2.0).sequence_id == 3
            assert session.step({"action": "Pass", "sequenceId": 10}).sequence_id == 10
            assert session.step("Pass").sequence_id == 11
            assert session.sequence_id == 11
            assert (session.width, session.height) == (32, 24)
            assert isinstance(session.pid, int) and psutil.pid_exists(session.pid)

    def test_a_numpy_integer_sequence_id_is_taken_as_an_int(self):
        # AI2-THOR sends any integer (numpy's too); renderd refused numpy's with ValueError.
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            for seq in (np.int64(5), np.uint32(6), np.int8(7)):
                assert session.step({"action": "Pass", "sequenceId": seq}).sequence_id == int(seq)
                assert session.sequence_id == int(seq) and type(session.sequence_id) is int
            assert session.step("Pass").sequence_id == 8
            for bad in (np.bool_(True), np.float64(9.0), True, 2**64):
                with pytest.raises(ValueError, match="sequenceId"):
                    session.step("Pass", sequenceId=bad)
            assert session.step("Pass").sequence_id == 9

    def test_split_send_and_recv(self):
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            seq = session.send("Pass")
            assert session.state is SessionState.PENDING
            with pytest.raises(AlreadyPendingCallError):
                session.send("Pass")
            assert session.recv(timeout=10).sequence_id == seq
            with pytest.raises(NoPendingCallError):
                session.recv()

    @pytest.mark.parametrize("bad", [None, {"degrees": 3}, {"action": ""}, 42])
    def test_action_without_a_name_is_refused_and_the_session_stays_usable(self, bad):
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            with pytest.raises((ValueError, TypeError)):
                session.step(bad)
            with pytest.raises(ValueError, match="JSON"):
                session.step("Pass", value=object())
            assert session.step("Pass").sequence_id == 1

    @pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, "1", True])
    def test_a_bad_recv_timeout_is_refused_and_the_session_stays_usable(self, timeout):
        # NaN once made the wait loop spin forever: no deadline compares as passed against it.
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            seq = session.send("Pass")
            with pytest.raises(ValueError, match="timeout"):
                session.recv(timeout=timeout)
            assert session.state is SessionState.PENDING
            assert session.recv(timeout=10).sequence_id == seq
            with pytest.raises(ValueError, match="timeout"):
                session.wait_ready(timeout)
            assert session.state is SessionState.READY and session.step("Pass").sequence_id == seq + 1

    def test_reset_and_initialize(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            event = session.reset("FloorPlan2", gridSize=0.5)
            assert event.metadata["lastAction"] == "Initialize" and event
            assert event.metadata["sceneName"] == "FloorPlan2"
            assert event.sequence_id == 1  # Reset restarts the sequence at 0, Initialize is 1
            event = session.reset(width=80, height=60)
            assert event.frame.shape == (60, 80, 3)
            assert (session.width, session.height) == (80, 60)
            assert event.metadata["sceneName"] == "FloorPlan2"
            with pytest.raises(ValueError, match="no scene named"):
                session.reset("NoSuchScene")


    def test_a_scene_that_is_not_a_name_is_refused_before_anything_is_sent(self):
        # A procedural house (a dict, as AI2-THOR's reset takes one) is no scene name: sent as sceneName, the
        # player refused it and the reset went on in the old scene, returning a successful Initialize.
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            before = session.sequence_id
            with pytest.raises(TypeError, match="not dict .*nothing was sent"):
                session.reset({"rooms": [], "objects": []}, gridSize=0.5)
            assert session.sequence_id == before and "gridSize" not in session._init_params
            assert session.reset("FloorPlan2").metadata["sceneName"] == "FloorPlan2"


class TestCallOrder:
    def test_step_after_close(self):
        session = renderd.launch(peer_argv(), platform="headless", start_timeout=START)
        pid = session.pid
        session.close()
        session.close()  # idempotent
        assert session.closed
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        with pytest.raises(CallOrderError, match="closed session"):
            session.step("Pass")
        with pytest.raises(CallOrderError):
            session.recv()

    def test_wait_ready_after_the_first_frame_is_a_call_order_error(self):
        # It used to wait start_timeout for a first frame that had come already, then break the session.
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            for _ in range(2):  # right after launch, and after a step
                with Timer() as t, pytest.raises(CallOrderError, match="first frame"):
                    session.wait_ready(5.0)
                assert t.elapsed < 1.0
                assert session.state is SessionState.READY
                assert session.step("Pass").sequence_id == session.sequence_id

    def test_a_broken_session_says_why(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            with pytest.raises(ProtocolError) as first:
                session.step(fault("garbage"))
            assert session.state is SessionState.BROKEN and session.error is first.value
            with pytest.raises(CallOrderError, match="broken session.*ProtocolError") as again:
                session.step("Pass")
            assert again.value.__cause__ is first.value


class TestFaults:
    @pytest.mark.parametrize(
        "params, expected, returncode",
        [
            (dict(fault="abort"), "killed by SIGABRT", -signal.SIGABRT),
            (dict(fault="segfault"), "killed by SIGSEGV", -signal.SIGSEGV),
            (dict(fault="exit", code=3), "exit code 3", 3),
        ],
    )
    def test_crash_during_a_step_is_reported_at_once(self, params, expected, returncode):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=100) as session:
            session.step("MoveAhead")
            with Timer() as t, pytest.raises(PlayerCrashed) as info:
                session.step({"action": "RenderdFault", **params})
            assert t.elapsed < CRASH_REPORTED_WITHIN, f"took {t.elapsed:.2f} s"
            err = info.value
            assert expected in str(err)
            assert err.returncode == returncode and err.pid == session.pid
            assert f"fault: {params['fault']}" in err.log_tail or params["fault"] in err.log_tail
            with pytest.raises(CallOrderError):
                session.step("Pass")

    def test_hang_is_a_timeout_naming_step_timeout(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=0.5) as session:
            with Timer() as t, pytest.raises(PlayerTimeout) as info:
                session.step(fault("hang"))
            assert 0.5 <= t.elapsed < 0.5 + CRASH_REPORTED_WITHIN
            err = info.value
            assert err.deadline == "step_timeout" and err.seconds == 0.5
            assert "RenderdFault" in str(err) and "step_timeout = 0.5 s" in str(err)
            assert session.state is SessionState.BROKEN

    def test_a_player_that_never_reads_its_action_is_named_so(self):
        # The action was never written: the timeout says the player did not take it, not that it did not answer.
        with renderd.launch(peer_argv("no-client"), start_timeout=START, step_timeout=0.3) as session:
            with pytest.raises(PlayerTimeout) as info:
                session.send("Pass")
            text = str(info.value)
            assert "Pass: the player (pid" in text and "did not take the action within step_timeout = 0.3 s" in text
            assert "no answer" not in text and info.value.deadline == "step_timeout"
            assert session.state is SessionState.BROKEN

    def test_a_slow_step_within_the_deadline_is_fine(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=5) as session:
            assert session.step(fault("sleep", seconds=0.2)).sequence_id == 1
            assert session.step("Pass")

    def test_malformed_bytes(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            with Timer() as t, pytest.raises(ProtocolError, match="unknown field type 42"):
                session.step(fault("garbage"))
            assert t.elapsed < CRASH_REPORTED_WITHIN

    def test_oversize_body_is_refused_from_its_header(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=10) as session:
            with pytest.raises(ProtocolError, match="over the limit"):
                session.step(fault("oversize"))

    def test_pipe_closed_mid_message_then_exit(self):
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=100) as session:
            with Timer() as t, pytest.raises(PlayerCrashed) as info:
                session.step(fault("truncate", code=9))
            assert t.elapsed < CRASH_REPORTED_WITHIN
            err = info.value
            assert "in the middle of a message" in str(err) and "exit code 9" in str(err)
            assert isinstance(err.__cause__, ProtocolError)

    def test_pipe_closed_mid_message_player_still_running(self, monkeypatch):
        # (the player stays alive until client.pipe closes: the wait for its exit is only waited out, and a short
        # one says "still running" as the default second does)
        monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.2)
        with renderd.launch(**SMALL, start_timeout=START, step_timeout=100) as session:
            with Timer() as t, pytest.raises(PlayerCrashed, match="still running") as info:
                session.step(fault("close"))
            # EOF is seen at once; up to EOF_CLASSIFY_TIMEOUT (1 s by default) is spent waiting for an exit status.
            assert t.elapsed < 1.0 + CRASH_REPORTED_WITHIN
            assert isinstance(info.value.__cause__, ProtocolError)

    def test_sequence_id_mismatch(self):
        with renderd.launch(peer_argv("wrong-seq"), platform="headless", start_timeout=START) as session:
            with pytest.raises(ProtocolError, match="sequenceId 1001, expected 1"):
                session.step("Pass")


class TestStartup:
    @pytest.mark.parametrize(
        "kind, expected",
        [("no-open", "exit code 1"), ("exit", "exit code 1"), ("abort", "SIGABRT"), ("segfault", "SIGSEGV")],
    )
    def test_death_before_the_first_frame(self, kind, expected):
        with Timer() as t, pytest.raises(PlayerCrashed, match=expected):
            renderd.launch(**SMALL, args=["--fault-at-start", kind], start_timeout=START)
        # Well under start_timeout: the exit is seen at once (the rest is the player's own start-up).
        assert t.elapsed < 5

    def test_no_first_frame_is_a_timeout_naming_start_timeout(self):
        with Timer() as t, pytest.raises(PlayerTimeout) as info:
            renderd.launch(**SMALL, args=["--fault-at-start", "hang"], start_timeout=1.0)
        assert 1.0 <= t.elapsed < 1.0 + 2.0
        assert info.value.deadline == "start_timeout"
        assert "start_timeout = 1 s" in str(info.value)

    def test_malformed_first_frame(self):
        with pytest.raises(ProtocolError):
            renderd.launch(**SMALL, args=["--fault-at-start", "garbage"], start_timeout=START)

    def test_unknown_executable_leaves_nothing(self):
        with pytest.raises(ConfigError, match="no-such-player") as info:
            renderd.launch("no-such-player", start_timeout=START)
        assert info.value.key == "executable"

    @pytest.mark.parametrize(
        "kwargs",
        [dict(transport="pigeon"), dict(step_timeout=0), dict(quality="Best"), dict(width=0), dict(height=4097)],
    )
    def test_bad_arguments(self, kwargs):
        with pytest.raises(ConfigError):
            renderd.launch(peer_argv(), platform="headless", **kwargs)

    def test_http_transport_is_delegated(self):
        if importlib.util.find_spec("renderd.transport.http") is None:
            with pytest.raises(ConfigError, match="renderd.transport.http"):
                renderd.launch(transport="http")
            return
        with renderd.launch(transport="http", **SMALL, start_timeout=START) as session:
            assert session.step("Pass").frame.shape == (48, 64, 3)


class TestLogs:
    def test_log_path_is_kept_and_quoted(self, tmp_path):
        log = tmp_path / "player.log"
        with renderd.launch(**SMALL, start_timeout=START, log_path=log) as session:
            with pytest.raises(PlayerCrashed) as info:
                session.step(fault("exit", code=4))
        assert str(log) in str(info.value)
        assert "fault: exit" in log.read_text()

    def test_default_log_lives_in_the_pipe_directory(self, private_tmp):
        with renderd.launch(**SMALL, start_timeout=START) as session:
            (directory,) = os.listdir(private_tmp)
            assert sorted(os.listdir(private_tmp / directory)) == ["client.pipe", "player.log", "server.pipe"]
            with pytest.raises(PlayerCrashed) as info:
                session.step(fault("abort"))
            assert "Player log:" not in str(info.value)  # that file goes away at close
            assert info.value.log_tail


def test_100_launch_close_cycles_leave_nothing_behind(private_tmp):
    fds = open_fds()
    pids = []
    for _ in range(100):
        with renderd.launch(peer_argv(), platform="headless", start_timeout=START) as session:
            pids.append(session.pid)
            session.step("Pass")
    assert open_fds() == fds
    assert live_children() == []
    assert os.listdir(private_tmp) == []
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_connect_goes_to_the_daemon(tmp_path):
    """renderd.connect() is the daemon client's; without a daemon it says so (no hang, no stub)."""
    if importlib.util.find_spec("renderd.daemon.client") is None:
        with pytest.raises(LeaseError, match="daemon client"):
            renderd.connect("demo")
    else:
        with pytest.raises(renderd.RenderdError, match="cannot reach the renderd daemon"):
            renderd.connect("demo", socket=str(tmp_path / "no-daemon.sock"), timeout=1)


def test_session_over_any_channel():
    """A Session is built from a Channel; its constructor does no I/O."""

    class NoChannel:
        closed = 0

        def recv(self, deadline, deadline_name="step_timeout"):
            raise AssertionError("no I/O expected")

        send = recv

        def close(self):
            self.closed += 1

    channel = NoChannel()
    released = []
    session = Session(channel, on_close=released.append, width=8, height=6, pid=123)
    assert (session.pid, session.width, session.height, session.last_event) == (123, 8, 6, None)
    session.close()
    session.close()
    assert channel.closed == 1 and released == [None]
