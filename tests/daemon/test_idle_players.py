"""An idle (READY) player must stay silent on ``server.pipe`` until a client sends it an action. One that closes
the pipe, or writes to it unasked, could only fail its next client's first step (end of file, or an answer to
an action nobody sent): the daemon notices at once, stops it and starts another."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import sys
import termios
import time
from pathlib import Path

import pytest

import renderd
from renderd.errors import LeaseError
from renderd.protocol import encode_action
from tests.daemon.conftest import fast_config, wait_for

DEADLINE = 15.0
ODD_PLAYER = str(Path(__file__).with_name("odd_player.py"))


def _metrics(d) -> str:
    return d.client.request("GET", "/metrics")[1]


def _odd_config(idle: str) -> str:
    return fast_config(executable=f'["{sys.executable}", "{ODD_PLAYER}"]', extra=f'env = {{ODD_PLAYER_IDLE = "{idle}"}}')


def test_an_idle_player_that_closes_server_pipe_is_stopped_and_restarted(daemon):
    # (the player lives on: 0.2 s is enough to see that it did not exit, instead of EOF_EXIT_WAIT's 1 s)
    d = daemon(_odd_config("close"), ready=False,
               preamble="import renderd.daemon.supervisor as s; s.EOF_EXIT_WAIT = 0.2")
    wait_for(lambda: re.search(r"demo\[0\] pid \d+ closed server.pipe while idle \(and it did not exit\)", d.output()),
             DEADLINE, "the daemon to notice the closed pipe")
    wait_for(lambda: "restarting in" in d.output(), DEADLINE, "a restart")
    d.wait_players(lambda ps: ps[0]["restarts"] >= 1)  # (counted once its new process has started)
    assert 'renderd_player_idle_failures_total{environment="demo",how="closed_pipe"}' in _metrics(d)
    assert "Traceback" not in d.output()


def test_an_idle_player_that_writes_before_any_action_is_restarted_with_backoff(daemon):
    d = daemon(_odd_config("chatter"), ready=False)
    failed = re.compile(r"demo\[0\] pid (\d+) wrote \d+ byte\(s\) on server.pipe while idle, before any action was sent")
    pids = wait_for(lambda: (lambda found: found if len(found) >= 2 else None)(set(failed.findall(d.output()))),
                    DEADLINE, "two players restarted in turn")
    assert len(pids) >= 2
    assert 'renderd_player_idle_failures_total{environment="demo",how="unasked_output"}' in _metrics(d)
    assert "restarting in" in d.output() and "Traceback" not in d.output()


def _unread(fd: int) -> int:
    """Bytes in the pipe of ``fd`` not yet read."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def test_an_answer_nobody_waited_for_gets_the_player_recycled(daemon):
    """A client sends an action and releases its lease without reading the answer: the answer lands in an idle
    player's pipe. The player is recycled at once (it served a lease: no backoff), and the next client's first
    step gets its own answer."""
    d = daemon(fast_config())
    lease = d.client.lease("demo", timeout=DEADLINE)
    fd = os.open(lease["client_pipe"], os.O_WRONLY | os.O_NONBLOCK)
    try:
        # (The player answers 0.5 s later, after the release.)
        os.write(fd, b"".join(encode_action({"action": "RenderdFault", "fault": "sleep", "seconds": 0.5,
                                             "sequenceId": 1})))
        # The player reads it before the release: an action still unread at release is a reason of its own
        # to recycle the player ("unread"), not the one this test is about.
        wait_for(lambda: _unread(fd) == 0, DEADLINE, "the player to read the action")
    finally:
        os.close(fd)
    d.client.release(lease["lease"])
    assert "unread" not in d.output()  # (the release found nothing to recycle the player for)
    wait_for(lambda: re.search(r"recycling demo\[0\] \(pid \d+\): it wrote \d+ byte\(s\) on server.pipe while idle "
                               r"\(an answer nobody waited for\?\)", d.output()), DEADLINE, "the player recycled")
    with renderd.connect("demo", socket=d.socket, timeout=DEADLINE) as session:
        event = session.step("Pass")
        assert event.metadata["lastAction"] == "Pass" and event.metadata["lastActionSuccess"]
    assert "Traceback" not in d.output()


def test_an_idle_player_costs_the_daemon_no_frame_buffer(supervisor_with):
    """The daemon reads a player's first frame and no other: that frame's body buffers are not kept (they
    would be megabytes per player at large sizes, for as long as the player lives)."""
    sup = supervisor_with(fast_config(executable=f'["{sys.executable}", "{ODD_PLAYER}"]',
                                      extra='env = {ODD_PLAYER_IMAGE = "1"}'))

    def holder():
        with sup.lock:
            (p,) = sup.environments["demo"].players or (None,)
            return p.holder if p is not None and p.state.value == "READY" else None

    decoder = wait_for(holder, DEADLINE, "the demo player READY").decoder
    assert decoder.pooled_bytes == 0


def test_a_lease_refused_while_the_only_idle_player_closed_its_pipe_says_so(supervisor_with):
    """The READY player that closed server.pipe is not leased (it is stopped once its exit was waited for):
    the refusal names that, rather than a READY player it did not lease."""
    sup = supervisor_with(_odd_config("close"))

    def closed():
        with sup.lock:
            (p,) = sup.environments["demo"].players or (None,)
            ok = p is not None and p.state.value == "READY" and p.eof_reason is not None
            return p if ok and p.deadline - time.monotonic() > 0.6 else None

    wait_for(closed, DEADLINE, "the idle player's end of file noticed")
    with pytest.raises(LeaseError) as raised:
        sup.acquire("demo", os.getpid(), 0.2)
    assert "1 READY closed server.pipe while idle (being replaced)" in str(raised.value)


def test_the_loop_does_not_spin_while_it_waits_out_an_idle_players_exit(supervisor_with):
    """A READY player that closed server.pipe gets EOF_EXIT_WAIT to exit. With health checks due meanwhile (a
    check is never sent to it), the loop must still sleep until something is due, not run flat out."""
    ticks: list[float] = []
    sup = supervisor_with(fast_config(executable=f'["{sys.executable}", "{ODD_PLAYER}"]',
                                      extra='env = {ODD_PLAYER_IDLE = "close"}\nhealth_interval = 0.01'),
                          on_tick=lambda now: ticks.append(now))

    def closed():
        with sup.lock:
            (p,) = sup.environments["demo"].players or (None,)
            ok = p is not None and p.state.value == "READY" and p.eof_reason is not None
            return p if ok and p.deadline - time.monotonic() > 0.6 else None

    p = wait_for(closed, DEADLINE, "the idle player's end of file noticed")
    start, count = time.monotonic(), len(ticks)
    wait_for(lambda: time.monotonic() - start > 0.3, DEADLINE, "0.3 s")
    with sup.lock:
        assert p.state.value == "READY" and p.eof_reason is not None  # (still waiting out its exit)
    assert len(ticks) - count < 50, f"{len(ticks) - count} loop passes in 0.3 s"


@pytest.mark.parametrize("after, said", [
    ("garbage", "sent malformed bytes (unknown field type 42"),
    ("message", "sent more bytes right after its first frame, before any action"),
])
def test_bytes_read_together_with_the_first_frame_are_a_boot_failure(daemon, after, said):
    d = daemon(fast_config(executable=f'["{sys.executable}", "{ODD_PLAYER}"]',
                           extra=f'env = {{ODD_PLAYER_AFTER_FIRST = "{after}"}}'), ready=False)
    wait_for(lambda: d.health() is not None, DEADLINE, "the daemon to answer")
    (failed,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", what="the slot FAILED")
    assert said in failed["reason"], failed
    assert "ready after" not in d.output()
