"""A vector session closed from another thread while its call is busy: in on_event, in a slot's send, and in
the middle of starting a failed slot's replacement."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import renderd
import renderd.vector
from renderd.errors import CallOrderError
from tests.helpers.fork_review14c import in_child
from tests.helpers.pause import line_of
from tests.vector.conftest import GONE_TIMEOUT, START_TIMEOUT, player_kwargs, running_children, tracing, wait_for

#: What the tests use for renderd.vector.CLOSE_WAITER_TIMEOUT (5 s): how long close() waits for the call.
WAITER = 0.3


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pause_at(function, source: str, until: threading.Event, reached: threading.Event):
    """A trace function that stops its thread once just before ``function`` runs its line ``source``, until
    ``until`` is set (10 s at most), setting ``reached`` first."""
    code, at = function.__code__, line_of(function, source)

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not reached.is_set():
                reached.set()
                until.wait(10.0)
            return line

        return line

    return trace


def test_a_close_from_another_thread_leaves_the_pipes_to_a_step_still_in_on_event(no_leaks, monkeypatch):
    # A watchdog's close() waited 5 s for the step, then closed the pipes (and the wake-up descriptor) under it
    # while its on_event still ran; now it stops the players and returns, and the step closes the rest as it ends.
    monkeypatch.setattr(renderd.vector, "CLOSE_WAITER_TIMEOUT", WAITER)
    vs = renderd.launch_many(2, **player_kwargs())
    entered, release = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def slow_on_event(slot: int, event: object) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(10.0)

    def stepping() -> None:
        try:
            vs.step(["Pass", "Pass"])
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)

    vs.on_event = slow_on_event
    channels = [s.channel for s in vs.sessions]
    pids = vs.pids
    stepper = threading.Thread(target=stepping)
    try:
        stepper.start()
        assert entered.wait(START_TIMEOUT)
        started = time.monotonic()
        vs.close()
        assert time.monotonic() - started < WAITER + 3.0
        assert vs.closed and stepper.is_alive()  # (on_event still runs)
        assert not any(channel.closed for channel in channels), "pipes closed under a running on_event"
        assert vs._wake_fd is not None
        wait_for(lambda: all(_gone(p) for p in pids), 5.0, "the players to be stopped")
        release.set()
        stepper.join(10.0)
        assert not stepper.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], CallOrderError), raised
        assert "the VectorSession was closed" in str(raised[0])
        assert all(channel.closed for channel in channels) and vs._wake_fd is None and vs._executor is None
        vs.close()  # (returns at once)
    finally:
        release.set()
        stepper.join(10.0)
        vs.close()


def test_a_close_from_another_thread_landing_in_a_slots_send_logs_no_slot_failure(no_leaks, caplog):
    # The slot's send raised the session's CallOrderError ("closed while it sent it"), which the step took for a
    # failed player: "slot 1 (player pid ...) failed: CallOrderError" was logged, though no player had failed.
    vs = renderd.launch_many(2, **player_kwargs())
    session = vs.sessions[1]
    code = renderd.Session._send.__code__
    at = line_of(renderd.Session._send, "self.channel.send(buffers, write_by, name)")
    closer = threading.Thread(target=vs.close, name="watchdog")

    def trace(frame, event, arg):
        if frame.f_code is not code or frame.f_locals.get("self") is not session:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and closer.ident is None:
                closer.start()
                wait_for(lambda: session._closing, 5.0, "the watchdog to close the slot's session")
            return line

        return line

    try:
        with caplog.at_level(logging.WARNING, logger="renderd.vector"):
            with tracing(trace), pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
                vs.step(["Pass", "Pass"])
        assert closer.ident is not None
        closer.join(10.0)
        assert not closer.is_alive() and vs.closed
        assert not [r for r in caplog.records if "failed" in r.getMessage()], caplog.text
    finally:
        if closer.ident is not None:
            closer.join(10.0)
        vs.close()


def test_a_close_from_another_thread_landing_as_a_replacement_is_started_launches_no_player(no_leaks):
    # The close had begun (the vector session was marked closed) but had not yet cancelled replacements when the
    # failed slot's replacement was submitted: the launch thread, not cancelled yet, started a player, which the
    # step then waited for (its whole start) only to close it.
    launched: list[int] = []

    def factory(slot: int):
        launched.append(slot)
        return renderd.launch(**player_kwargs())

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    go, paused = threading.Event(), threading.Event()
    close_all = renderd.vector.VectorSession._close_all
    first_line = inspect.getsource(close_all).split("\n")[1].strip()  # (its first line: where close() begins)
    pause_closer = _pause_at(close_all, first_line, go, paused)

    def watchdog() -> None:
        sys.settrace(pause_closer)
        try:
            vs.close()
        finally:
            sys.settrace(None)

    closer = threading.Thread(target=watchdog, name="watchdog")
    code = renderd.vector.VectorSession._fail.__code__
    at = line_of(renderd.vector.VectorSession._fail, "executor = self._ensure_executor()")

    def trace(frame, event, arg):  # (in the step: the watchdog's close() begins just there)
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and closer.ident is None:
                closer.start()
                assert paused.wait(5.0)
            return line

        return line

    try:
        sys.settrace(trace)
        try:
            with pytest.raises(CallOrderError, match="closed"):
                vs.step([{"action": "RenderdFault", "fault": "exit", "code": 3}, "Pass"])
        finally:
            sys.settrace(None)
            go.set()
        closer.join(10.0)
        assert not closer.is_alive() and vs.closed
        assert launched == [], "a replacement player was launched after close() began"
    finally:
        go.set()
        if closer.ident is not None:
            closer.join(10.0)
        vs.close()


def test_a_vector_env_names_the_sub_environment_whose_frame_does_not_fit(no_leaks):
    # "the player sent a 32 x 32 frame; the observation space is 64 x 64": which of the players did was not said.
    rgym = pytest.importorskip("renderd.gym")
    shrink = {"action": "ChangeResolution", "x": 32, "y": 32}
    envs = rgym.RenderdVectorEnv(2, actions=["Pass", shrink], **player_kwargs())
    try:
        envs.reset(seed=0)
        pid = envs.vector_session.pids[1]
        with pytest.raises(renderd.RenderdError, match=rf"^sub-environment 1 \(player pid {pid}\): the player sent a "
                                                       r"32 x 32 frame; the observation space is 64 x 64"):
            envs.step(np.array([0, 1]))
    finally:
        envs.close()
    size_of = renderd.VectorSession([renderd.launch(**player_kwargs()), renderd.launch(**player_kwargs(width=32))])
    envs = rgym.RenderdVectorEnv(vector_session=size_of)
    try:
        with pytest.raises(renderd.RenderdError, match=r"^sub-environment 1 \(player pid \d+\): the player sent a 32 x 64"):
            envs.reset(seed=0)
    finally:
        envs.close()


def test_a_vector_session_refuses_a_missing_shared_or_closed_session_and_leaves_them_open(no_leaks):
    # A session given for two slots was sent two actions at once: the second slot "failed" with
    # AlreadyPendingCallError (and, with replace_on_crash, its replacement closed the other slot's session); None
    # failed at the first step with an AttributeError; a closed session was taken for a crashed player.
    session = renderd.launch(**player_kwargs())
    closed = renderd.launch(**player_kwargs())
    closed.close()
    try:
        with pytest.raises(ValueError, match=r"sessions\[1\] is sessions\[0\]: a session can be one slot's only"):
            renderd.VectorSession([session, session])
        with pytest.raises(TypeError, match=r"sessions\[1\] is None"):
            renderd.VectorSession([session, None])
        with pytest.raises(ValueError, match=r"sessions\[0\] is closed"):
            renderd.VectorSession([closed, session])
        with pytest.raises(TypeError, match="sessions must be a list of sessions"):
            renderd.VectorSession(session)
        assert not session.closed  # (still the caller's)
        assert session.step("Pass")
    finally:
        session.close()


@pytest.mark.parametrize("where", ["thread", "signal"])
def test_a_single_env_closed_while_its_player_boots_stops_the_player_at_once(no_leaks, where):
    # close() (from another thread, or a signal handler) while reset() waited for the new player's first frame found
    # no player to stop: the player went on booting, and reset() went on waiting, until its start_timeout.
    rgym = pytest.importorskip("renderd.gym")
    env = rgym.RenderdEnv(**player_kwargs(args=["--fault-at-start", "hang"], start_timeout=8.0,
                                          platform="CloudRendering"))
    closed: list[float] = []

    def booting() -> bool:  # (the player runs: exec'd)
        try:
            return any("--fault-at-start" in p.cmdline() for p in running_children())
        except psutil.Error:
            return False

    def close_once_booting() -> None:
        wait_for(booting, START_TIMEOUT, "the player to start")
        closed.append(time.monotonic())
        if where == "thread":
            env.close()
        else:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    helper = threading.Thread(target=close_once_booting)
    previous = signal.signal(signal.SIGUSR1, lambda *_: env.close())
    try:
        helper.start()
        with pytest.raises(CallOrderError, match=r"reset\(\): the env was closed .* while it started its player"):
            env.reset(seed=0)
        ended = time.monotonic()
        helper.join(10.0)
        assert closed and ended - closed[0] < 3.0, f"reset() ended {ended - closed[0]:.2f} s after close()"
        assert env.session is None
        wait_for(lambda: not running_children(), 5.0, "the booting player to be stopped")
    finally:
        signal.signal(signal.SIGUSR1, previous)
        helper.join(10.0)
        env.close()


def test_a_vector_env_names_the_sub_environment_whose_action_is_outside_the_action_space(no_leaks):
    # "invalid action 9: expected an integer in 0..4": which sub-environment's action was not said.
    rgym = pytest.importorskip("renderd.gym")
    envs = rgym.RenderdVectorEnv(2, **player_kwargs())
    try:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"^actions\[1\] \(sub-environment 1\): invalid action 9: expected an "
                                             r"integer in 0\.\.4; nothing was sent"):
            envs.step(np.array([0, 9]))
        envs.step(np.array([0, 1]))  # (nothing was sent: the vector env steps on)
    finally:
        envs.close()


def test_a_vector_env_refuses_a_bad_seed_saying_which_before_anything_changes(no_leaks):
    # seed=1.5 failed with "'float' object is not iterable"; seed=[1, "a"] with gymnasium's "Seed must be a python
    # integer", naming no sub-environment, after sub-environment 0 had been reseeded already.
    rgym = pytest.importorskip("renderd.gym")
    envs = rgym.RenderdVectorEnv(2, scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"], **player_kwargs())
    try:
        envs.reset(seed=7)
        state = [rng.bit_generator.state for rng in envs._rngs]  # white box: the sub-environments' generators
        with pytest.raises(TypeError, match=r"seed must be an integer .* not float"):
            envs.reset(seed=1.5)
        with pytest.raises(ValueError, match=r"seed\[1\] .*sub-environment 1.* must be an integer 0 or more, or None, "
                                             r"got 'a'"):
            envs.reset(seed=[1, "a"])
        with pytest.raises(ValueError, match=r"seed\[0\] .*sub-environment 0.* got -1"):
            envs.reset(seed=[-1, 2])
        assert [rng.bit_generator.state for rng in envs._rngs] == state  # (nothing was reseeded)
        envs.reset(seed=np.int64(7))
        envs.reset(seed=[np.int64(1), None])
    finally:
        envs.close()


def test_a_callback_that_is_not_callable_is_refused_when_set_not_in_the_step_it_breaks(no_leaks):
    # vs.on_event = 5 was taken; the next step then broke the vector session with "'int' object is not callable".
    sessions = [renderd.launch(**player_kwargs()) for _ in range(2)]
    with pytest.raises(TypeError, match=r"factory must be a callable factory\(slot\) -> a new session, not str"):
        renderd.VectorSession(sessions, factory="renderd-player", replace_on_crash=True)
    with pytest.raises(TypeError, match=r"VectorSession reward_fn must be None or a callable .*, not float"):
        renderd.VectorSession(sessions, reward_fn=1.0)
    vs = renderd.VectorSession(sessions)
    try:
        with pytest.raises(TypeError, match=r"VectorSession on_event must be None or a callable on_event\(slot, event\), "
                                            r"not int"):
            vs.on_event = 5
        with pytest.raises(TypeError, match=r"VectorSession done_fn must be None or a callable"):
            vs.done_fn = "yes"
        assert vs.on_event is None and vs.done_fn is None
        seen = []
        vs.on_event = lambda slot, event: seen.append(slot)
        vs.done_fn = lambda event: True
        assert vs.step(["Pass", "Pass"]).dones == [True, True] and sorted(seen) == [0, 1]
    finally:
        vs.close()


def test_a_child_forked_while_a_parent_thread_enters_a_call_is_not_stuck_on_its_lock(no_leaks):
    # The lock a call takes as it begins and ends was copied held into a child forked meanwhile: the child's step()
    # (which must raise "inherited over fork") then waited for it forever.
    vs = renderd.launch_many(1, **player_kwargs())
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # (as a parent thread does for an instant whenever it begins or ends a call)
        with vs._call_lock:
            held.set()
            release.wait(10.0)

    def child_steps() -> None:
        try:
            vs.step(["Pass"])
        except CallOrderError as exc:
            assert "inherited over fork" in str(exc)
            vs.close()
            return
        raise AssertionError("the child stepped the parent's player")

    holder = threading.Thread(target=hold)
    try:
        holder.start()
        assert held.wait(5.0)
        assert in_child(child_steps) == 0
    finally:
        release.set()
        holder.join(10.0)
        vs.close()


def test_an_exception_from_a_callback_says_which_callback_and_slot_raised_it(no_leaks):
    # A KeyError from reward_fn (or on_event, done_fn) came out of step() alone: which slot's event it failed on, and
    # that it came from the caller's own callback, was not said.
    vs = renderd.launch_many(2, **player_kwargs())
    try:
        scored: list[object] = []

        def reward_fn(event) -> float:  # (called slot by slot: the second call is slot 1's)
            scored.append(event)
            if len(scored) == 2:
                raise KeyError("score")
            return 1.0

        vs.reward_fn = reward_fn
        with pytest.raises(KeyError) as info:
            vs.step(["Pass", "Pass"])
        assert info.value.__notes__ == [
            f"raised by the VectorSession's reward_fn(event) for slot 1 (player pid {vs.pids[1]}), in step()"
        ]
    finally:
        vs.close()
    vs = renderd.launch_many(2, **player_kwargs())
    try:
        def on_event(slot, event):
            if slot == 0:
                raise RuntimeError("no room for the frame")

        vs.on_event = on_event
        with pytest.raises(RuntimeError, match="no room") as info:
            vs.reset()
        assert info.value.__notes__ == [
            f"raised by the VectorSession's on_event(slot, event) for slot 0 (player pid {vs.pids[0]}), in reset()"
        ]
    finally:
        vs.close()


def test_a_closed_vector_env_step_names_step_not_an_inner_call(no_leaks):
    # With a sub-environment to autoreset, step() on a closed env said "reset_async() on a closed VectorSession".
    rgym = pytest.importorskip("renderd.gym")
    envs = rgym.RenderdVectorEnv(2, max_episode_steps=1, **player_kwargs())
    try:
        envs.reset(seed=0)
        envs.step(np.array([0, 0]))  # (truncated: the next step autoresets both)
    finally:
        envs.close()
    with pytest.raises(CallOrderError, match=r"^step\(\) on a closed VectorSession"):
        envs.step(np.array([0, 0]))


def _xvfbs() -> list[psutil.Process]:
    from renderd.platforms.xvfb import MANAGED_MARKER

    found = []
    for p in psutil.Process().children():
        try:
            if MANAGED_MARKER in p.cmdline():
                found.append(p)
        except psutil.Error:
            pass
    return found


def test_closing_a_vector_session_while_a_replacement_boots_spares_a_shared_managed_display():
    # The managed Xvfb that the vector session's first player started had the session's tag in its environment
    # (it runs with the players' environment); close() killed every tagged child that was no slot's player, so the
    # display went too, with the player of another session of this process that shared it.
    from tests.helpers.leaks import Leaks

    leaks = Leaks()  # (not the threads: the display manager's spawner thread lives as long as this process)
    kw = player_kwargs(args=["--static-frame", "--start-delay", "0.5"], platform="Linux64", x_display="managed")
    vs = renderd.launch_many(1, replace_on_crash=True, **kw)
    other = None
    try:
        displays = _xvfbs()
        assert len(displays) == 1
        other = renderd.launch(**kw)  # (the same geometry: it shares the display)
        assert _xvfbs() == displays
        vs.step([{"action": "RenderdFault", "fault": "segfault"}])  # its replacement boots (0.5 s)
        crashed = vs._slots[0]  # white box: the slot's replacement is on its way
        wait_for(lambda: [p for p in running_children() if p.pid != other.pid and p not in displays]
                 or crashed.future.done(), START_TIMEOUT, "the replacement player to be spawned")
        assert not crashed.future.done()
        vs.close()
        assert displays[0].is_running() and displays[0].status() != psutil.STATUS_ZOMBIE, "the shared display was killed"
        assert other.step("Pass")
    finally:
        vs.close()
        if other is not None:
            other.close()
    leaks.check(GONE_TIMEOUT)


def test_a_single_env_closed_while_its_platform_is_probed_leaves_the_probe_alone(no_leaks):
    # The Vulkan probe runs with the player's environment, so with the tag that marks the env's players: close()
    # killed it, the launch failed with "Vulkan is not usable: ... the probe died (killed by SIGKILL)", and that
    # verdict was cached, failing this process's next CloudRendering launches too.
    rgym = pytest.importorskip("renderd.gym")
    from renderd.platforms import vulkan

    kw = player_kwargs(args=["--fault-at-start", "hang"], start_timeout=8.0, platform="CloudRendering")
    env = rgym.RenderdEnv(**kw)
    tagged: list[str] = []

    def first_tagged() -> bool:  # (the probe: it runs before the player is spawned)
        for p in running_children():
            try:
                if renderd.vector.TAG_VARIABLE in p.environ():
                    tagged.append(" ".join(p.cmdline()))
                    return True
            except psutil.Error:
                pass
        return False

    def close_at_the_first_tagged_child() -> None:
        wait_for(first_tagged, START_TIMEOUT, "the probe to start")
        env.close()

    vulkan.clear_cache()
    helper = threading.Thread(target=close_at_the_first_tagged_child)
    try:
        helper.start()
        with pytest.raises(CallOrderError, match=r"reset\(\): the env was closed"):
            env.reset(seed=0)
        helper.join(10.0)
        assert "_vkprobe" in tagged[0], tagged
        assert vulkan.probe_vulkan(dict(os.environ)).ok  # (not poisoned)
    finally:
        helper.join(10.0)
        env.close()


def test_launch_many_takes_a_log_path_given_as_bytes(no_leaks, tmp_path):
    # os.fspath(b".../{slot}.log").replace("{slot}", ...) raised "a bytes-like object is required, not 'str'" in
    # every launch thread, naming neither the argument nor the slot.
    pattern = os.fsencode(str(tmp_path / "player-{slot}.log"))
    vs = renderd.launch_many(2, log_path=pattern, **player_kwargs())
    try:
        vs.step(["Pass", "Pass"])
        assert sorted(p.name for p in tmp_path.iterdir()) == ["player-0.log", "player-1.log"]
    finally:
        vs.close()
    with pytest.raises(TypeError, match=r"log_path must be a path .* or None, not int"):
        renderd.launch_many(2, log_path=5, **player_kwargs())


@pytest.mark.parametrize("limit", ["abc", 2.5, 0, True])
def test_an_env_refuses_a_max_episode_steps_that_is_no_positive_integer(limit):
    # "abc" failed with int()'s "invalid literal for int() with base 10", naming no argument; 2.5 was taken as 2.
    rgym = pytest.importorskip("renderd.gym")
    for make in (rgym.RenderdEnv, lambda **kw: rgym.RenderdVectorEnv(2, **kw)):
        with pytest.raises(ValueError, match=r"max_episode_steps must be a positive integer or None, got"):
            make(max_episode_steps=limit, **player_kwargs())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"width": "abc"}, ValueError, r"^width: must be an integer 1\.\.\d+, got 'abc'"),
        ({"height": 2.5}, ValueError, r"^height: must be an integer 1\.\.\d+, got 2\.5"),
        ({"max_depth": "far"}, ValueError, r"^max_depth must be a positive finite number of metres, got 'far'"),
        ({"init_params": 5}, TypeError, r"^init_params must be a dict of Initialize parameters"),
        ({"init_params": {"gridSize": b"1"}}, ValueError, r"^init_params cannot be sent: .*bytes"),
        ({"reward_fn": 3}, TypeError, r"^reward_fn must be None or a callable reward_fn\(event\), not int"),
        ({"terminated_fn": "no"}, TypeError, r"^terminated_fn must be None or a callable"),
    ],
)
def test_an_env_refuses_bad_arguments_naming_them_before_a_player_starts(kwargs, error, match):
    # width="abc" raised int()'s "invalid literal for int() with base 10", max_depth="far" float()'s "could not
    # convert string to float", init_params=5 "'int' object is not iterable"; height=2.5 was taken as 2; an
    # init_params value that cannot be sent, or a reward_fn that is no callable, failed only at the first reset or
    # step (the vector env's after its players had started).
    rgym = pytest.importorskip("renderd.gym")
    launched = len(running_children())
    for make in (rgym.RenderdEnv, lambda **kw: rgym.RenderdVectorEnv(2, **kw)):
        with pytest.raises(error, match=match):
            make(**{**player_kwargs(), **kwargs})
    assert len(running_children()) == launched
