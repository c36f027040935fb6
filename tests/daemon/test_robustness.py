"""What must never take the daemon down: a signal at the wrong time, a failing signal handler or callback,
a player's unexpected first frame; and lease requests that must not outlive their client's wait."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from renderd.daemon import client as control_client
from renderd.daemon.client import ControlClient, connect
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import Supervisor
from renderd.errors import LeaseError, PlatformError, RenderdError
from tests.daemon.conftest import PLAYER, fast_config, wait_for

DEADLINE = 20.0
ODD_PLAYER = str(Path(__file__).with_name("odd_player.py"))

#: Run in the daemon's process before it starts: a frame whose metadata carries ``renderdTestFault`` makes
#: the frame assembler raise what it never should (an error that is not a ProtocolError).
ASSEMBLER_FAULT = """
import renderd.event
_event = renderd.event.FrameAssembler.event
def _faulty_event(self, message, *args, **kwargs):
    ev = _event(self, message, *args, **kwargs)
    if ev.metadata.get("renderdTestFault"):
        raise RuntimeError("fault injected by the test")
    return ev
renderd.event.FrameAssembler.event = _faulty_event
"""


# -- 1. signals and callbacks --------------------------------------------------------------------------------
def test_sighup_during_a_graceful_stop_is_ignored_and_the_stop_completes(daemon):
    # The player's process group ignores SIGTERM: the stop waits the whole stop_grace, and the SIGHUP
    # arrives meanwhile. The daemon must finish its stop (SIGKILL after the grace) and exit 0.
    exe = f'["/bin/sh", "-c", "trap \'\' TERM; {PLAYER} --static-frame; exec sleep 30"]'
    d = daemon(fast_config(executable=exe).replace("stop_grace = 2.0", "stop_grace = 1.0"))
    assert len(d.players()) == 1  # (and its pid is remembered for the cleanup)
    d.signal(signal.SIGTERM)
    wait_for(lambda: "stopping: ending" in d.output(), DEADLINE, "the graceful stop to begin")
    d.signal(signal.SIGHUP)
    assert d.wait_exit() == 0, d.output()
    out = d.output()
    assert "SIGHUP ignored: the daemon is stopping" in out
    assert "did not exit within 1 s of SIGTERM; sending SIGKILL" in out  # the grace was given
    assert "Traceback" not in out and "still running at shutdown" not in out


def _go(marker: Path) -> Path:
    """The file a test makes to end the window a :func:`_slow_step` opened with ``marker``."""
    return marker.with_name(marker.name + ".go")


def _slow_step(method: str, marker: Path) -> str:
    """A preamble making ``Daemon.<method>`` write ``marker`` and wait first, until the test makes
    ``_go(marker)`` (at most 10 s): a window for a signal, held open until the test has sent it."""
    return f"""
    import os, time
    from renderd.daemon import service
    _original = service.Daemon.{method}
    def _slow(self, *args, **kwargs):
        open({str(marker)!r}, "w").close()
        _until = time.monotonic() + 10
        while not os.path.exists({str(_go(marker))!r}) and time.monotonic() < _until:
            time.sleep(0.01)
        return _original(self, *args, **kwargs)
    service.Daemon.{method} = _slow
    """


@pytest.mark.parametrize(
    "method, signals",
    [
        ("_check_socket", (signal.SIGTERM,)),  # start-up: lock and directories made, socket not yet bound
        ("_cleanup", (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)),  # after the stop, before the clean-up
    ],
)
def test_a_signal_while_setting_up_or_cleaning_up_leaves_nothing_behind(daemon, tmp_path, method, signals):
    marker = tmp_path / "window"
    d = daemon(fast_config(), ready=method == "_cleanup", preamble=_slow_step(method, marker))
    if method == "_cleanup":
        d.signal(signal.SIGTERM)
    wait_for(marker.exists, DEADLINE, f"the daemon to reach {method}")
    for sig in signals:
        d.signal(sig)
    _go(marker).touch()  # (the signals are pending or handled by now: the daemon goes on with them)
    assert d.wait_exit() == 0, d.output()
    assert sorted(os.listdir(d.base)) == ["daemon.log", "renderd.toml"], d.output()  # no socket, lock, dirs
    assert "Traceback" not in d.output()


# -- start-up races: the socket and the lock file ------------------------------------------------------------


def test_two_daemons_started_at_once_on_one_socket_one_refuses(daemon, tmp_path):
    # The first is held between its check that the socket path is free and its bind; the second starts then.
    marker = tmp_path / "checked"
    first = daemon(fast_config(), ready=False, socket=str(tmp_path / "r.sock"), preamble=f"""
        import time
        from renderd.daemon import service
        _check = service.Daemon._check_socket
        import os
        def _checked_then_slow(self, path):
            _check(self, path)
            open({str(marker)!r}, "w").close()
            until = time.monotonic() + 1.5  # (or until the test makes the go file: see below)
            while not os.path.exists({str(_go(marker))!r}) and time.monotonic() < until:
                time.sleep(0.01)
        service.Daemon._check_socket = _checked_then_slow
        """)
    wait_for(marker.exists, DEADLINE, "the first daemon to check its socket path")
    second = daemon(fast_config(), ready=False, socket=first.socket)

    def second_at_the_socket_directory() -> bool:
        # The second daemon has the socket's directory open (to lock it, waiting while the first holds it), or
        # has exited; a daemon that never opens it keeps the first one's window open for its whole 1.5 s.
        if second.proc.poll() is not None:
            return True
        try:
            fds = os.listdir(f"/proc/{second.pid}/fd")
        except OSError:
            return True
        for fd in fds:
            try:
                if os.readlink(f"/proc/{second.pid}/fd/{fd}") == str(tmp_path):
                    return True
            except OSError:
                pass
        return False

    try:
        wait_for(second_at_the_socket_directory, 1.5, "the second daemon at the socket directory")
    except AssertionError:
        pass  # (the first daemon's window has ended on its own)
    else:
        _go(marker).touch()
    assert second.wait_exit() == 1
    assert "already listens on" in second.output()
    first.wait_ready()
    first.signal(signal.SIGTERM)
    assert first.wait_exit() == 0 and not os.path.exists(first.socket)


def test_a_stopping_daemon_removes_only_its_own_socket(daemon, tmp_path):
    d = daemon(fast_config())
    os.unlink(d.socket)  # removed by hand, and something else listens there now
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(d.socket)
        other.listen()
        d.signal(signal.SIGTERM)
        assert d.wait_exit() == 0
        assert os.path.exists(d.socket), "the daemon removed a socket it did not bind"
        assert "no longer the socket this daemon bound" in d.output()
    os.unlink(d.socket)


def test_a_daemon_that_locks_the_lock_file_of_one_stopping_takes_a_fresh_one(daemon, tmp_path):
    # B opens the lock file of A, which is stopping, and locks it only after A has unlinked it: B must lock
    # the file at the path instead (else a third daemon, C, would run on the same runtime directory too).
    opened, go = tmp_path / "opened", tmp_path / "go"
    a = daemon(fast_config())
    b = daemon(fast_config(), ready=False, runtime_dir=a.runtime_dir, socket=str(tmp_path / "b.sock"), preamble=f"""
        import fcntl, os, time
        _flock = fcntl.flock
        _first = [True]
        def flock(fd, op):
            if _first[0]:
                _first[0] = False
                open({str(opened)!r}, "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
                    time.sleep(0.01)
            return _flock(fd, op)
        fcntl.flock = flock
        """)
    wait_for(opened.exists, DEADLINE, "B to open the lock file")
    a.signal(signal.SIGTERM)
    assert a.wait_exit() == 0
    go.touch()
    b.wait_ready()
    c = daemon(fast_config(), ready=False, runtime_dir=a.runtime_dir, socket=str(tmp_path / "c.sock"))
    assert c.wait_exit() == 1
    assert f"another renderd (pid {b.pid}) is already running" in c.output()


@pytest.mark.parametrize("name", ["players", "logs"])
def test_a_runtime_dir_holding_someone_elses_players_or_logs_loses_nothing(daemon, tmp_path, name):
    runtime = tmp_path / "shared"
    (runtime / name).mkdir(parents=True)
    precious = runtime / name / "important.txt"
    precious.write_text("keep me")
    d = daemon(fast_config(), ready=False, runtime_dir=str(runtime))
    assert d.wait_exit() == 1
    assert f"{runtime / name} exists and was not made by renderd" in d.output(), d.output()
    assert precious.read_text() == "keep me"


def test_the_players_directory_a_killed_daemon_left_is_taken_over(daemon):
    first = daemon(fast_config())
    players = Path(first.runtime_dir) / "players"
    first.signal(signal.SIGKILL)
    first.wait_exit()
    (players / "stale").write_text("left by the killed daemon")
    again = daemon(fast_config(), socket=first.socket, runtime_dir=first.runtime_dir)
    assert not (players / "stale").exists()  # emptied: it was renderd's
    again.signal(signal.SIGTERM)
    assert again.wait_exit() == 0
    assert not players.exists() and not (Path(first.runtime_dir) / "logs").exists()


def test_a_failed_start_after_a_killed_daemon_leaves_the_next_start_possible(daemon, tmp_path):
    # A killed daemon leaves players/, logs/ and its lock; a start on that runtime directory that fails
    # (its socket is taken) must not leave the directories without the lock that shows they are renderd's.
    killed = daemon(fast_config())
    killed.signal(signal.SIGKILL)
    killed.wait_exit()
    (log,) = (Path(killed.runtime_dir) / "logs").iterdir()
    why = log.read_text()
    other = daemon(fast_config(), socket=killed.socket, runtime_dir=str(tmp_path / "other-run"))
    failed = daemon(fast_config(), ready=False, socket=killed.socket, runtime_dir=killed.runtime_dir)
    assert failed.wait_exit() == 1 and "already listens on" in failed.output()
    assert log.read_text() == why  # the killed daemon's player log is still there to read
    other.signal(signal.SIGTERM)
    assert other.wait_exit() == 0
    again = daemon(fast_config(), socket=killed.socket, runtime_dir=killed.runtime_dir)
    assert again.players()[0]["state"] == "READY"


def test_a_lock_file_that_cannot_be_opened_is_one_clear_line(daemon, tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "renderd.lock").mkdir()
    d = daemon(fast_config(), ready=False, runtime_dir=str(runtime))
    assert d.wait_exit() == 1
    assert "cannot open the lock file" in d.output() and "Traceback" not in d.output(), d.output()


def _demo_ready(sup: Supervisor) -> bool:
    with sup.lock:
        return [p.state.value for p in sup.environments["demo"].players] == ["READY"]


def test_a_failing_signal_handler_or_callback_is_logged_and_the_loop_goes_on(supervisor_with, caplog):
    caplog.set_level(logging.ERROR, logger="renderd.daemon.supervisor")
    handled: list[int] = []

    def bad_handler() -> None:
        handled.append(signal.SIGUSR1)
        raise RenderdError("a handler that fails")

    def bad_status(text: str) -> None:
        raise ValueError("a status callback that fails")

    ticks: list[float] = []

    def bad_tick(now: float) -> float:
        ticks.append(now)
        if len(ticks) == 1:
            raise OSError("a tick callback that fails once")
        return 1.0

    sup = supervisor_with(signal_handlers={signal.SIGUSR1: bad_handler}, on_status=bad_status, on_tick=bad_tick,
                          on_ready=lambda: 1 / 0)
    wait_for(lambda: _demo_ready(sup) and sup.health()["status"] == "ready", DEADLINE, "a READY player")
    os.write(sup.wakeup_fd, bytes([signal.SIGUSR1]))  # what signal.set_wakeup_fd does for a signal
    wait_for(lambda: handled and any("handling signal SIGUSR1 failed" in r.message for r in caplog.records),
             DEADLINE, "the handler's failure logged")
    # The loop still works: a lease, a recycle after an unclean release, a new READY player.
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id, clean=False)
    wait_for(lambda: _demo_ready(sup) and sup.environments["demo"].players[0].pid != answer["pid"], DEADLINE,
             "the recycled player READY")
    failed = {r.message for r in caplog.records if "failed; the daemon carries on" in r.message}
    assert failed == {"handling signal SIGUSR1 failed; the daemon carries on",
                      "the status callback failed; the daemon carries on",
                      "the loop's tick callback failed; the daemon carries on",
                      "the ready callback failed; the daemon carries on"}
    assert all(r.exc_info for r in caplog.records if "failed; the daemon carries on" in r.message)


# -- 2. a player's first frame ---------------------------------------------------------------------------------
def test_an_unexpected_error_on_a_first_frame_is_that_players_boot_failure(daemon):
    d = daemon(fast_config(), preamble=ASSEMBLER_FAULT)
    (demo,) = d.players()
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.step("Pass").sequence_id == 1
        status, _ = d.client.request("PUT", "/v1/environments/odd", {
            "executable": [sys.executable, ODD_PLAYER], "platform": "headless", "instances": 2,
            "start_timeout": 20.0,
        })
        assert status == 201
        odd = d.wait_players(lambda ps: len(ps) == 2 and all(p["state"] == "FAILED" for p in ps), name="odd",
                             what="both odd players FAILED")
        # Meanwhile the leased player went on serving, and nothing else was disturbed.
        assert session.step("MoveAhead").sequence_id == 2
    assert d.proc.poll() is None and d.health()["status"] == "ready"
    for p in odd:
        assert p["boot_failures"] == 3  # max_boot_failures: each failed frame counted as a boot failure
        assert p["reason"] == "unusable first frame: RuntimeError: fault injected by the test"
    out = d.output()
    assert "Traceback (most recent call last)" in out and "in _read_first_frame" in out
    assert "odd[0] pid " in out and "unexpected RuntimeError reading its first frame from " in out
    assert "odd[1] pid " in out and "failed to boot: unusable first frame: RuntimeError" in out
    (again,) = d.wait_players(lambda ps: ps[0]["state"] == "READY", what="the demo player READY")
    assert again["pid"] == demo["pid"] and again["restarts"] == 0


SPAWN_FAULT = """
import renderd.daemon.supervisor as supervisor
_spawn = supervisor.PlayerProcess.spawn
def _faulty_spawn(argv, *args, **kwargs):
    if "--renderd-test-spawn-fault" in argv:
        raise UnicodeEncodeError("utf-8", "\\ud800", 0, 1, "fault injected by the test")
    return _spawn(argv, *args, **kwargs)
supervisor.PlayerProcess.spawn = _faulty_spawn
"""


def test_an_unexpected_error_starting_a_player_is_its_boot_failure(daemon):
    d = daemon(fast_config(), preamble=SPAWN_FAULT)
    with connect("demo", socket=d.socket, timeout=10) as session:
        status, _ = d.client.request("PUT", "/v1/environments/odd", {
            "executable": [PLAYER, "--static-frame", "--renderd-test-spawn-fault"], "platform": "headless",
        })
        assert status == 201
        (odd,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", name="odd", what="the odd player FAILED")
        assert session.step("Pass").sequence_id == 1  # the daemon and its leased player carry on
    assert odd["reason"].startswith("cannot start the player: UnicodeEncodeError")
    assert d.proc.poll() is None and "starting the player failed" in d.output()


@pytest.mark.parametrize("kind, how", [("exit", "exit code 1"), ("abort", "killed by SIGABRT")])
def test_a_player_that_dies_before_its_first_frame_is_recorded_with_its_exit(daemon, kind, how):
    # Its end of file usually reaches the daemon before its exit does: every boot failure must still say
    # how it ended, and count as an exit.
    exe = f'["{PLAYER}", "--static-frame", "--fault-at-start", "{kind}"]'
    d = daemon(fast_config(executable=exe).replace("max_boot_failures = 3", "max_boot_failures = 6")
               .replace("backoff_max = 0.2", "backoff_max = 0.05"), ready=False)  # (restarts at once)
    wait_for(lambda: d.health() is not None, DEADLINE, "the daemon to answer")
    (failed,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", what="the slot FAILED")
    assert failed["boot_failures"] == 6 and how in failed["reason"], failed
    out = d.output()
    assert len(re.findall(r"pid \d+ exited before readiness", out)) == 6, out
    assert "closed server.pipe before sending a whole first frame" not in out


def test_a_slot_without_a_process_shows_no_uptime(daemon):
    d = daemon(fast_config(executable='["/bin/false"]'), ready=False)
    wait_for(lambda: d.health() is not None, DEADLINE, "the daemon to answer")
    (failed,) = d.wait_players(lambda ps: ps and ps[0]["state"] == "FAILED", what="the slot FAILED")
    assert failed["pid"] is None and failed["uptime"] is None, failed


def test_backoff_stays_at_its_maximum_after_any_number_of_failures(supervisor_with):
    sup = supervisor_with()
    wait_for(lambda: _demo_ready(sup), DEADLINE, "the demo player READY")
    with sup.lock:
        (p,) = sup.environments["demo"].players
        saved = (p.state, p.deadline, p.restarts, p.backoff_failures, p.ready_at)
        p.backoff_failures = 5000  # 2 ** 5000 is beyond a float
        p.ready_at = None  # as after a failed boot: the series goes on
        sup._schedule_restart(p)
        delay = p.deadline - time.monotonic()
        assert p.backoff_failures == 5001
        p.state, p.deadline, p.restarts, p.backoff_failures, p.ready_at = saved
    assert 0 < delay <= sup.daemon_config.backoff_max


# -- 3. lease requests and their client's deadline -----------------------------------------------------------
def _timeouts(d) -> float:
    text = d.client.request("GET", "/metrics")[1]
    line = next((ln for ln in text.splitlines() if ln.startswith('renderd_lease_timeouts_total{environment="demo"}')),
                None)
    return float(line.split()[-1]) if line else 0.0


def _blocked_health(gate: Path, entered: Path) -> str:
    """A preamble making ``GET /v1/health`` note its start in ``entered`` and wait while ``gate`` exists:
    control API threads held for as long as a test likes (a lease request waiting for a player holds none)."""
    return f"""
    import os, time
    from renderd.daemon import supervisor
    _health = supervisor.Supervisor.health
    def _blocked(self):
        if os.path.exists({str(gate)!r}):
            with open({str(entered)!r}, "a") as f:
                f.write("x")
        deadline = time.monotonic() + 60
        while os.path.exists({str(gate)!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
        return _health(self)
    supervisor.Supervisor.health = _blocked
    """


def test_a_lease_request_that_waited_past_its_deadline_is_never_granted(daemon, monkeypatch, tmp_path):
    """Both control API threads are busy (two slow requests); two lease requests queue behind them until
    after their deadlines: one from a ControlClient that gives up meanwhile, one that still waits for its
    answer. When they are taken up the player is ready: neither may get it (a lease granted to a client that
    gave up would keep the player LEASED for as long as that client's process lives)."""
    gate, entered = tmp_path / "gate", tmp_path / "entered"
    d = daemon(fast_config(daemon="api_threads = 2"), args=("--log-level", "debug"),
               preamble=_blocked_health(gate, entered))
    pid = os.getpid()
    path = "/v1/environments/demo/leases"
    results: dict[str, object] = {}

    def ask(name: str, body: dict | None = None, timeout: float = 0.0) -> None:
        try:
            if body is None:
                results[name] = ControlClient(d.socket).lease("demo", timeout=timeout)
            elif body == "health":
                results[name] = ControlClient(d.socket).health()
            else:
                results[name] = ControlClient(d.socket).request("POST", path, body)
        except RenderdError as exc:
            results[name] = exc

    gate.touch()
    busy = [threading.Thread(target=ask, args=(f"h{i}", "health")) for i in range(2)]
    for t in busy:
        t.start()
    wait_for(lambda: entered.exists() and len(entered.read_text()) == 2, DEADLINE, "both API threads busy")
    # A ControlClient that gives up after 0.7 s (deadline 0.45 s after sending), and a request with a deadline
    # 0.3 s away: both wait in waitress's queue until the two slow requests end.
    monkeypatch.setattr(control_client, "REQUEST_SLACK", 0.5)
    monkeypatch.setattr(control_client, "LEASE_ANSWER_MARGIN", 0.25)
    late = [threading.Thread(target=ask, args=("gave_up", None, 0.2)),
            threading.Thread(target=ask, args=("late", {"client_pid": pid, "timeout": 10,
                                                        "deadline": time.monotonic() + 0.3}))]
    for t in late:
        t.start()
    late[0].join(DEADLINE)  # (the client that gives up, 0.7 s after it sent)
    gate.unlink()
    for t in busy + late:
        t.join(DEADLINE)
    assert all(isinstance(results[f"h{i}"], dict) for i in range(2)), results
    (player,) = d.players()
    assert player["state"] == "READY" and player["lease"] is None, f"granted past its deadline: {player} {results}"
    # The request of the client that gave up (and hung up) is dropped unserved, or refused for its deadline;
    # either way it queued before this one, so this one getting the player shows it did not.
    fresh = d.client.lease("demo", timeout=DEADLINE)
    assert d.client.release(fresh["lease"]) == {"released": True, "recycled": False}
    assert isinstance(results["gave_up"], RenderdError) and "did not answer" in str(results["gave_up"])
    assert isinstance(results["late"], LeaseError) and results["late"].status == 503
    assert "after the client's deadline" in str(results["late"])
    # "late" was refused for its deadline; "gave_up" too, unless it was dropped unserved.
    assert d.output().count("after the client's deadline: refused") in (1, 2)
    assert _timeouts(d) in (1, 2)
    # A request with a deadline that has not passed is served as before.
    with connect("demo", socket=d.socket, timeout=5) as session:
        assert session.step("Pass").sequence_id == 1


def test_a_lease_request_is_refused_at_its_deadline_before_its_timeout(daemon):
    d = daemon(fast_config())
    held = d.client.lease("demo", timeout=5)
    started = time.monotonic()
    with pytest.raises(LeaseError, match="1 of 1 leased") as info:
        d.client.request("POST", "/v1/environments/demo/leases",
                         {"client_pid": os.getpid(), "timeout": 30, "deadline": time.monotonic() + 0.5})
    assert info.value.status == 503 and 0.4 < time.monotonic() - started < 5
    d.client.release(held["lease"])
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="the player READY")
    for deadline in ("soon", True, float("inf"), float("nan"), 10**400, [1]):
        with pytest.raises(LeaseError, match="deadline must be a finite number") as info:
            d.client.request("POST", "/v1/environments/demo/leases",
                             {"client_pid": os.getpid(), "timeout": 1, "deadline": deadline})
        assert info.value.status == 400
    assert d.players()[0]["state"] == "READY"


# -- 4. platform selection never holds the supervisor's lock -------------------------------------------------
class HungX:
    """Platforms whose Linux64 probe hangs (an X server that never answers) until ``gate`` opens, then fails;
    every other platform is selected for real."""

    def __init__(self) -> None:
        self.real = _Platforms()
        self.gate = threading.Event()
        self.probes: list[str] = []

    def select(self, config):
        if config.platform != "Linux64":
            return self.real.select(config)
        self.probes.append(config.name)
        self.gate.wait(DEADLINE / 2)
        raise PlatformError("X display :77 did not answer the probe (a test's hung X server)")


HUNG_X_ENV = f"""
[environments.x]
executable = ["{PLAYER}", "--static-frame"]
platform = "Linux64"
x_display = ":77"
instances = 2
start_timeout = 20.0
"""


def _states(sup: Supervisor, name: str) -> list[tuple[str, int, str]]:
    with sup.lock:
        return [(p.state.value, p.boot_failures, p.reason) for p in sup.environments[name].players]


def test_a_hung_platform_probe_stalls_nothing_and_a_failure_is_probed_again_at_each_retry(supervisor_with):
    platforms = HungX()
    sup = supervisor_with(fast_config() + HUNG_X_ENV, platforms=platforms)
    wait_for(lambda: _demo_ready(sup) and platforms.probes == ["x"], DEADLINE, "demo READY, x's probe hanging")
    # While the probe hangs: control requests answer at once, and the loop goes on (it recycles a player).
    started = time.monotonic()
    assert sup.health()["environments"]["x"] == {"wanted": 2, "ready": 0, "leased": 0, "failed": 0}
    lease, answer = sup.acquire("demo", os.getpid(), 5)
    sup.release(lease.id, clean=False)
    wait_for(lambda: _demo_ready(sup) and sup.environments["demo"].players[0].pid != answer["pid"], DEADLINE,
             "the recycled demo player READY")
    assert not platforms.gate.is_set() and time.monotonic() - started < DEADLINE / 4
    assert _states(sup, "x") == [("BACKOFF", 0, "waiting for its platform to be selected")] * 2
    assert platforms.probes == ["x"]  # one probe for both players
    # The probe fails: a boot failure for both players that waited for it; their retries (after back-off)
    # probe again (a display that comes up later is found), until max_boot_failures.
    platforms.gate.set()
    wait_for(lambda: [s[0] for s in _states(sup, "x")] == ["FAILED", "FAILED"], DEADLINE, "x's players FAILED")
    reason = "X display :77 did not answer the probe (a test's hung X server)"
    assert _states(sup, "x") == [("FAILED", 3, reason)] * 2
    assert 3 <= len(platforms.probes) <= 6  # one per retry round (the two players retry about together)
    # Declaring the environment again probes again.
    probed = len(platforms.probes)
    with sup.lock:
        config = sup.environments["x"].config
    sup.put_environment(config, source="file")
    wait_for(lambda: len(platforms.probes) > probed and [s[0] for s in _states(sup, "x")] == ["FAILED", "FAILED"]
             and all(s[1] == 3 for s in _states(sup, "x")), DEADLINE, "x probed again, and FAILED again")
