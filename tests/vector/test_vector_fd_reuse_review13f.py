"""A slot's session closed from outside the VectorSession (``vs.sessions[i].close()`` in another thread) while a
call of the vector session is under way: its descriptors (its pipes, its player's pidfd) stay open under their
numbers until that call has let go of them, so a file opened meanwhile can never take one of those numbers and be
polled, read or written by the vector session in its place. Before, close() closed them at once, and the call,
between its check that the session was open and its next poll, read or write, used whatever file had taken the
number since."""

from __future__ import annotations

import os
import sys
import threading

import pytest

import renderd
import renderd.transport.fifo as fifo
from renderd.errors import CallOrderError
from tests.helpers.fds_review14c import fd_target, take_numbers
from tests.helpers.pause import line_of
from tests.vector.conftest import tracing, wait_for

CLOSED = "was closed from outside the VectorSession (a close() of vs.sessions[0]"
CONTENT = b"someone else's file\n" * 4


def _descriptors(session: renderd.Session) -> dict[int, str]:
    """The session's descriptor numbers (server.pipe's read end, client.pipe's write end, the player's pidfd), each
    with what it refers to now."""
    fds = [session.channel.fileno(), session.channel.writer_fileno(), session.process.fileno()]
    return {fd: fd_target(fd) for fd in fds if fd is not None}


def _offset(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return int(next(line for line in f if line.startswith("pos:")).split()[1])


def test_files_opened_after_a_close_in_another_thread_are_never_read_by_the_vector(no_leaks, launch, tmp_path):
    vs = launch(2, replace_on_crash=True)
    vs.step(["Pass", "Pass"])  # (client.pipe is open: every descriptor of the slot exists)
    session = vs.sessions[0]
    before = _descriptors(session)
    assert len(before) == 3, before
    # The close lands inside the FifoChannel.ready() of slot 0 that the step makes as its answer is readable, after
    # ready() took the descriptor number of server.pipe and before it reads it (where a thread switch can land).
    code = fifo.FifoChannel.ready.__code__
    at = line_of(fifo.FifoChannel.ready, "decoder = self.decoder")
    opened: list[int] = []
    during: dict[int, str] = {}

    def close_and_open() -> None:
        session.close()
        for fd in before:  # (what the numbers refer to now, while the step still runs)
            during[fd] = fd_target(fd)
        take_numbers(list(before), opened, tmp_path, CONTENT, os.O_RDWR)

    def trace(frame, event, arg):
        if frame.f_code is not code or frame.f_locals.get("self") is not session.channel:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not opened:
                closer = threading.Thread(target=close_and_open, name="closer")
                closer.start()
                closer.join(10)
            return line

        return line

    with tracing(trace):
        result = vs.step(["Pass", "Pass"])
    try:
        assert opened, "the close never came"
        assert session.closed
        assert during == before, f"the session's descriptors were closed under the step: {during} (were {before})"
        touched = {fd: _offset(fd) for fd in opened if _offset(fd) != 0}
        assert not touched, f"the vector session read files opened after the close: {touched}"
        for fd in opened:
            assert os.pread(fd, len(CONTENT) + 1, 0) == CONTENT
        err = result.infos[0]["error"]
        assert isinstance(err, CallOrderError) and CLOSED in str(err), err
        assert result.observations[1] is not None and "error" not in result.infos[1]
        # The step let go of them: they are closed now (nothing leaks), and the slot goes on with a new player.
        assert session.channel.closed
        result = vs.step(["Pass", "Pass"], wait_resets=True)
        assert result.infos[0].get("reset_complete") and vs.error is None
    finally:
        for fd in opened:
            os.close(fd)


def test_a_close_between_calls_takes_the_descriptors_out_of_the_poll(no_leaks, launch, tmp_path):
    # Slot 0 resets across calls (its Reset in flight, its descriptors in the vector session's poll) when its session
    # is closed from another thread between two calls: files opened then take its freed numbers, and the next call
    # fails the slot without polling, reading or writing them.
    vs = launch(2, replace_on_crash=True)
    vs.step(["Pass", "Pass"])
    session = vs.sessions[0]
    before = _descriptors(session)
    vs.reset_async(0)  # (slot 0's Reset is in flight; its answer is taken by a later call)
    wait_for(lambda: session.channel.ready(), 10.0, "slot 0's answer to arrive")
    closer = threading.Thread(target=session.close, name="closer")
    closer.start()
    closer.join(10)
    assert session.closed and session.channel.closed  # (no call was under way: closed at once)
    assert not set(before) & set(vs._fd_slots), "the closed session's descriptors are still polled"
    opened: list[int] = []
    take_numbers(list(before), opened, tmp_path, CONTENT, os.O_RDWR)
    try:
        result = vs.step(["Pass", "Pass"])
        assert all(_offset(fd) == 0 for fd in opened)
        err = result.infos[0]["error"]
        assert isinstance(err, CallOrderError) and CLOSED in str(err), err
        result = vs.step(["Pass", "Pass"], wait_resets=True)
        assert result.infos[0].get("reset_complete") and vs.error is None
    finally:
        for fd in opened:
            os.close(fd)


def test_a_close_while_the_vector_session_s_lock_is_held_does_not_wait_for_it(no_leaks, launch):
    # The vector session's call lock held by another thread (one a signal handler interrupted as a call began or
    # ended, whose handler waits for this close): close() does not wait for it. The descriptors are left to the
    # vector session, whose next call fails the slot and closes them.
    vs = launch(2, replace_on_crash=True)
    vs.step(["Pass", "Pass"])
    session = vs.sessions[0]
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with vs._call_lock:
            taken.set()
            done.wait(30)

    holder = threading.Thread(target=hold, name="lock-holder")
    holder.start()
    try:
        assert taken.wait(10)
        session.close()  # (returns: the lock is not waited for beyond a moment)
        assert session.closed and not session.channel.closed
    finally:
        done.set()
        holder.join(10)
    result = vs.step(["Pass", "Pass"])
    err = result.infos[0]["error"]
    assert isinstance(err, CallOrderError) and CLOSED in str(err), err
    assert session.channel.closed
    result = vs.step(["Pass", "Pass"], wait_resets=True)
    assert result.infos[0].get("reset_complete") and vs.error is None


def test_a_close_of_the_vector_session_inside_its_call_leaves_it_the_pipes(no_leaks, launch, tmp_path):
    # The VectorSession itself closed from inside its own call (as a signal handler does, interrupting the call where
    # it is): its close() closed every slot's pipes at once, and the call, resuming inside FifoChannel.ready() with
    # server.pipe's number in hand, read the file opened meanwhile that had taken it. Now each session's close()
    # leaves its descriptors to the call, which closes them as it returns (raising CallOrderError).
    vs = launch(2)
    vs.step(["Pass", "Pass"])
    session = vs.sessions[0]
    before = _descriptors(session)
    code = fifo.FifoChannel.ready.__code__
    at = line_of(fifo.FifoChannel.ready, "decoder = self.decoder")
    opened: list[int] = []

    def trace(frame, event, arg):
        if frame.f_code is not code or frame.f_locals.get("self") is not session.channel:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not opened:
                sys.settrace(None)
                vs.close()  # (what a SIGTERM handler of a batch job does)
                take_numbers(list(before), opened, tmp_path, CONTENT, os.O_RDWR)
            return line

        return line

    with tracing(trace), pytest.raises(CallOrderError, match="the VectorSession was closed"):
        vs.step(["Pass", "Pass"])
    try:
        assert opened and vs.closed
        touched = {fd: _offset(fd) for fd in opened if _offset(fd) != 0}
        assert not touched, f"the vector session read files opened after its close: {touched}"
        assert session.channel.closed and all(s.channel.closed for s in vs.sessions)
    finally:
        for fd in opened:
            os.close(fd)


def test_a_close_of_the_vector_session_just_before_its_poll_leaves_the_call_what_it_polls(no_leaks, launch):
    # Closed from inside its own call just before the call's poll (a signal handler landing there): the poll's wake-up
    # eventfd was closed at once, though the call resumed to poll it (whatever file had taken its number by then).
    vs = launch(2)
    vs.step(["Pass", "Pass"])
    wake = vs._wake_fd
    polled = {fd: fd_target(fd) for fd in [wake, *_descriptors(vs.sessions[0]), *_descriptors(vs.sessions[1])]}
    assert polled[wake] == "anon_inode:[eventfd]", polled
    code = renderd.VectorSession._sweep.__code__
    at = line_of(renderd.VectorSession._sweep, "ready = self._poller.poll(ms)")
    during: dict[int, str] = {}

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not during:
                sys.settrace(None)
                vs.close()  # (what a SIGTERM handler of a batch job does)
                during.update({fd: fd_target(fd) for fd in polled})
            return line

        return line

    with tracing(trace), pytest.raises(CallOrderError, match="the VectorSession was closed"):
        vs.step(["Pass", "Pass"])
    assert during == polled, f"descriptors the call polls were closed under it: {during} (were {polled})"
    assert vs.closed and vs._wake_fd is None and all(s.channel.closed for s in vs.sessions)
