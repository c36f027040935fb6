"""A session from ``renderd.connect``, review 9: closed from another thread while a step waits. Real daemon,
real players, real FIFOs."""

from __future__ import annotations

import renderd.process
from renderd.daemon.client import connect
from renderd.errors import CallOrderError, PlayerCrashed
from tests.daemon.conftest import daemon, fast_config  # noqa: F401  (daemon: the fixture)

from .conftest import blocked_in_poll, close_while_stepping

START = 30.0


def test_close_from_another_thread_leaves_a_leased_steps_pipes_alone_until_it_has_left(daemon, monkeypatch):
    # A watchdog thread closes a leased session while another thread's step waits: for the answer of a
    # player that hangs (recv), or for room to write a large action it does not read (send). close() closed
    # the pipes at once and then released the lease over a new socket, which could take the number
    # server.pipe had just freed: the waiting step read the daemon's HTTP answer as frame bytes ("unknown
    # field type 72", the 'H' of "HTTP/1.1"), or its end of file, or EBADF; a waiting send wrote the rest of
    # its action into whatever had client.pipe's number (EPIPE from the closed socket), or passed None to
    # writev. Now the lease is released first (the daemon stops the player, which ends the wait) and the
    # pipes are closed only once the step has left them: it ends with a CallOrderError saying the session
    # was closed, the pipes still open when it leaves.
    monkeypatch.setattr(renderd.process, "LEASED_EXIT_STATUS_TIMEOUT", 0.2)  # (how the stopped player ended)
    d = daemon(fast_config())
    for waiting_in in ("recv", "send"):
        session = connect("demo", socket=d.socket, timeout=START, step_timeout=60)
        if waiting_in == "recv":
            action = {"action": "RenderdFault", "fault": "hang"}
        else:
            session.step({"action": "RenderdFault", "fault": "hang", "when": "after"})  # answers, then hangs
            action = {"action": "Big", "payload": "x" * (4 << 20)}
        outcome: dict[str, object] = {}

        def step():
            try:
                session.step(action)
                outcome["error"] = None
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["pipes_open"] = session.channel._rfd is not None  # (first: no call, no thread switch)
                outcome["error"] = exc

        close_while_stepping(session, step, blocked_in_poll)
        error = outcome["error"]
        assert isinstance(error, CallOrderError), (waiting_in, repr(error))
        assert "closed" in str(error)
        assert outcome["pipes_open"], f"{waiting_in}: the pipes were closed under the waiting step ({error.__cause__!r})"
        assert error.__cause__ is None or isinstance(error.__cause__, PlayerCrashed), repr(error.__cause__)
        assert session.closed and session.channel.closed
        # The lease was released, uncleanly: the player is replaced, never handed on mid-action.
        d.wait_players(lambda ps: ps and ps[0]["state"] == "READY" and ps[0]["pid"] != session.pid,
                       what="the player to be replaced")


def test_how_a_player_ended_is_known_at_once_when_this_client_released_its_lease(daemon):
    # A close() from another thread releases the lease while a step waits; the daemon then stops the player
    # and keeps no exit status of it: asking for one waited out its whole timeout (2 s by default) first.
    from renderd.daemon.client import ControlClient, _exit_status

    d = daemon(fast_config())
    control = ControlClient(d.socket)
    for clean in (False, True):
        lease_id = control.lease("demo", timeout=START)["lease"]
        control.release(lease_id, clean=clean)
        returncode, why = _exit_status(control, lease_id, 30.0)
        assert returncode is None
        assert why == f"this client released the lease ({'released' if clean else 'unclean'}) while the player worked"
