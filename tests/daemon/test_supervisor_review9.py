"""The supervisor while a rollout is held, and its lock while it cleans up after a player: real players, real
FIFOs, an in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time

import psutil
import pytest

from renderd.config import loads
from renderd.errors import LeaseError
from renderd.process import PlayerProcess
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, ready_pid
from tests.helpers.leaks import pid_gone

#: An executable that exits at once, before any first frame: a build that does not come up.
EXITS_AT_START = '["/bin/sh", "-c", "echo cannot load the scene >&2; exit 3"]'


def _states(sup) -> list[tuple[str, int | None, bool]]:
    with sup.lock:
        return [(p.state.value, p.pid, p.outdated) for p in sup.environments["demo"].players]


def _config(**kwargs) -> str:
    """Two players; a slot that fails to boot once is FAILED (the rollout stops at once)."""
    return fast_config(instances=2, **kwargs).replace("max_boot_failures = 3", "max_boot_failures = 1")


def _start_held_rollout(sup) -> set[int]:
    """Declares a configuration whose players exit at start; returns the pids of the previous configuration's
    players once the replaced slot is FAILED and the other one serves on."""
    wait_for(lambda: [s for s, _, _ in _states(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    old = {pid for _, pid, _ in _states(sup)}
    bad = loads(textwrap.dedent(_config(executable=EXITS_AT_START)))
    sup.put_environment(bad.environments["demo"], source="file")
    wait_for(lambda: sorted(s for s, _, _ in _states(sup)) == ["FAILED", "READY"], DEADLINE,
             "the replaced player FAILED, the other READY")
    return old


def _after_restart(sup, old: set[int]) -> list[tuple[str, int | None, bool]]:
    """The states once the slot of the previous configuration is READY again as a new process, or once both
    slots are FAILED."""

    def check():
        states = _states(sup)
        ready_old = [pid for s, pid, outdated in states if s == "READY" and outdated and pid not in old]
        return states if ready_old or [s for s, _, _ in states] == ["FAILED"] * 2 else None

    return wait_for(check, DEADLINE, f"the slot of the previous configuration restarted: {_states(sup)}")


# -- 1. while a rollout is held, a player of the previous configuration restarts on it ---------------------------
def test_an_old_player_that_crashes_while_the_rollout_is_held_restarts_on_the_old_configuration(supervisor_with):
    sup = supervisor_with(_config())
    old = _start_held_rollout(sup)
    victim = next(pid for s, pid, outdated in _states(sup) if s == "READY" and outdated)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: pid_gone(victim), DEADLINE, "the killed player reaped")
    states = _after_restart(sup, old)
    # Before, it restarted on the new configuration, failed to boot like the first replaced slot: nothing served.
    assert sorted((s, outdated) for s, _, outdated in states) == [("FAILED", False), ("READY", True)], states
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        assert (answer["width"], answer["height"]) == (300, 300), answer
    finally:
        sup.release(lease.id)


def test_an_old_player_recycled_after_its_lease_while_the_rollout_is_held_restarts_on_the_old_configuration(
        supervisor_with):
    sup = supervisor_with(_config())
    old = _start_held_rollout(sup)
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    assert answer["pid"] in old, answer
    assert sup.release(lease.id, clean=False)["recycled"]
    wait_for(lambda: pid_gone(answer["pid"]), DEADLINE, "the recycled player reaped")
    states = _after_restart(sup, old)
    assert sorted((s, outdated) for s, _, outdated in states) == [("FAILED", False), ("READY", True)], states


# -- 2. cleaning up after a player that exited never holds the supervisor's lock ---------------------------------
#: A player whose launcher left, in the player's process group, a process that ignores SIGTERM (a crash handler, a
#: shader compiler): once the player exits, renderd's clean-up gives it its grace (0.1 s) before SIGKILL.
LEAVES_A_HELPER = (f"""["/bin/sh", "-c", '(trap "" TERM; exec sleep 30) & exec "$0" "$@"', "{PLAYER}", """
                   """"--static-frame"]""")


def test_the_clean_up_after_a_player_that_exited_runs_without_the_supervisors_lock(supervisor_with, monkeypatch):
    calls: list[tuple[int, bool, float]] = []
    real_stop = PlayerProcess.stop
    sup_box: list = []

    def spy(self, grace=2.0):  # the real stop, noting whether the supervisor's lock is held around it
        held = bool(sup_box) and sup_box[0].lock._is_owned()
        started = time.monotonic()
        try:
            return real_stop(self, grace)
        finally:
            calls.append((self.pid, held, time.monotonic() - started))

    monkeypatch.setattr(PlayerProcess, "stop", spy)
    sup = supervisor_with(fast_config(executable=LEAVES_A_HELPER).replace("stop_grace = 2.0", "stop_grace = 0.2"))
    sup_box.append(sup)
    pid = ready_pid(sup)
    helpers = wait_for(lambda: [q.pid for q in psutil.process_iter() if q.pid != pid and _pgid(q.pid) == pid],
                       DEADLINE, "the helper in the player's process group")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all(pid_gone(h) for h in [pid, *helpers]), DEADLINE, "the player and its helper gone")
    wait_for(lambda: ready_pid(sup) != pid, DEADLINE, "the player restarted")
    mine = [c for c in calls if c[0] == pid]
    assert mine, calls
    # Before, the supervisor waited out the helper's grace with its lock held: no status, lease or release
    # request was answered meanwhile.
    assert not any(held for _, held, _ in mine), mine


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# -- 3. a lease request whose client exited while it waited gets no player --------------------------------------
def test_a_lease_request_whose_client_exits_while_it_waits_leases_nothing_and_recycles_nothing(supervisor_with):
    sup = supervisor_with()
    pid = ready_pid(sup)
    mine, _ = sup.acquire("demo", os.getpid(), DEADLINE)  # the only player is busy: the next request waits
    client = subprocess.Popen(["sleep", "30"])
    outcome: list = []

    def request() -> None:
        try:
            outcome.append(sup.acquire("demo", client.pid, DEADLINE))
        except Exception as exc:  # noqa: BLE001  (what the request ended with is the point)
            outcome.append(exc)

    waiter = threading.Thread(target=request, name="lease-request")
    waiter.start()
    try:
        wait_for(lambda: sup.describe("demo")["waiting_clients"] == 1, DEADLINE, "the request waiting")
        client.kill()
        client.wait()
        sup.release(mine.id)
        waiter.join(DEADLINE)
        assert not waiter.is_alive()
    finally:
        client.kill()
        client.wait()
    # Before, the player was leased to the dead client and recycled at once: a restart for nobody.
    assert isinstance(outcome[0], LeaseError), outcome
    assert f"client pid {client.pid} exited" in str(outcome[0]), outcome
    assert ready_pid(sup) == pid
    with sup.lock:
        assert not sup.leases


# -- 4. the same on a managed Xvfb: the previous configuration's display is kept for it -------------------------
MANAGED = 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")
def test_an_old_player_restarts_on_the_previous_configurations_managed_display_while_the_rollout_is_held(
        xvfb_spawner, supervisor_with):
    sup = supervisor_with(_config().replace('platform = "headless"', MANAGED))
    wait_for(lambda: [s for s, _, _ in _states(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    with sup.lock:
        old_display = sup.environments["demo"].players[0].display
    old = {pid for _, pid, _ in _states(sup)}
    bad = _config(executable=EXITS_AT_START).replace('platform = "headless"', MANAGED.replace("48", "40"))
    sup.put_environment(loads(textwrap.dedent(bad)).environments["demo"], source="file")
    wait_for(lambda: sorted(s for s, _, _ in _states(sup)) == ["FAILED", "READY"], DEADLINE,
             "the replaced player FAILED, the other READY")
    victim = next(pid for s, pid, outdated in _states(sup) if s == "READY" and outdated)
    os.kill(victim, signal.SIGKILL)
    states = _after_restart(sup, old)
    assert sorted((s, outdated) for s, _, outdated in states) == [("FAILED", False), ("READY", True)], states
    with sup.lock:
        (p,) = [p for p in sup.environments["demo"].players if p.state.value == "READY"]
        assert p.display is old_display and old_display.alive()
        assert (p.config.width, p.config.height) == (64, 48)
    # Stopping gives back the kept selection too: no Xvfb of either configuration outlives the supervisor.
    with sup.lock:
        displays = {id(q.display): q.display for q in sup.environments["demo"].players if q.display is not None}
    displays[id(old_display)] = old_display
    sup.request_stop()
    (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
    loop.join(DEADLINE)
    assert not loop.is_alive()
    for display in displays.values():
        assert pid_gone(display.pid), f"the managed Xvfb {display.name} outlived the supervisor"


# -- 5. a lease request for an environment none of whose players will come back is answered at once --------------
def test_a_lease_request_is_refused_at_once_when_every_player_exited_under_its_restart_policy(supervisor_with):
    sup = supervisor_with(fast_config(extra='restart = "never"'))
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: [s for s, _, _ in _states(sup)] == ["EXITED"], DEADLINE, "the player EXITED (restart = never)")
    started = time.monotonic()
    with pytest.raises(LeaseError, match=r"restart = 'never'.*until the environment is changed") as caught:
        sup.acquire("demo", os.getpid(), 6.0)
    # Before, the request waited its whole timeout for a player nothing would start.
    assert time.monotonic() - started < 3.0, caught.value


def test_a_waiting_lease_request_is_refused_once_the_last_player_exits_under_its_restart_policy(supervisor_with):
    sup = supervisor_with(fast_config(extra='restart = "never"'))
    pid = ready_pid(sup)
    mine, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    outcome: list = []

    def request() -> None:
        try:
            outcome.append(sup.acquire("demo", os.getpid(), DEADLINE))
        except Exception as exc:  # noqa: BLE001  (what the request ended with is the point)
            outcome.append(exc)

    waiter = threading.Thread(target=request, name="lease-request")
    waiter.start()
    wait_for(lambda: sup.describe("demo")["waiting_clients"] == 1, DEADLINE, "the request waiting")
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)  # (it exits 0: not restarted)
    waiter.join(DEADLINE)
    assert not waiter.is_alive()
    assert isinstance(outcome[0], LeaseError) and "restart = 'never'" in str(outcome[0]), outcome
    assert time.monotonic() - started < 5.0, outcome
    with sup.lock:
        assert mine.ended is not None and not sup.leases


def test_a_player_that_dumped_core_is_logged_and_reported_so(supervisor_with, tmp_path, caplog):
    # The first thing to look at after a crash is its core dump: the log line and the reason `renderd status`
    # shows say the player dumped one, besides the signal that killed it.
    wrapper = (f"""["/bin/sh", "-c", 'cd {tmp_path} && ulimit -c unlimited && exec "$0" "$@"', "{PLAYER}", """
               """"--static-frame"]""")
    sup = supervisor_with(fast_config(executable=wrapper))
    pid = ready_pid(sup)
    caplog.set_level("INFO", logger="renderd.daemon.supervisor")
    os.kill(pid, signal.SIGSEGV)

    def reason():
        with sup.lock:
            p = sup.environments["demo"].players[0]
            return p.reason if p.pid == pid and p.returncode is not None else None

    text = wait_for(reason, DEADLINE, "the crash classified")
    cores = [tmp_path / name for name in os.listdir(tmp_path) if name.startswith("core")]
    for core in cores:
        core.unlink()  # (tens of MB)
    if not cores:
        pytest.skip("no core is dumped here (core size limit, or core_pattern's handler)")
    assert "killed by SIGSEGV (core dumped)" in text, text
    assert any("killed by SIGSEGV (core dumped)" in r.getMessage() for r in caplog.records), caplog.text


def test_the_status_line_follows_leases_and_environments_that_shrink_or_go(supervisor_with):
    # systemctl status shows this line: a lease, its end, a smaller instance count and a removed environment
    # each change it (before, it said "demo 2/2 up (0 leased)" under a lease and listed removed environments).
    statuses: list[str] = []
    sup = supervisor_with(fast_config(instances=2) + """
    [environments.other]
    executable = ["%s", "--static-frame"]
    platform = "headless"
    """ % PLAYER, on_status=statuses.append)

    def last(predicate, what):
        return wait_for(lambda: statuses and predicate(statuses[-1]) and statuses[-1], DEADLINE,
                        f"{what}: {statuses[-3:]}")

    last(lambda s: "demo 2/2 up (0 leased)" in s and "other 1/1 up" in s, "both environments up")
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    last(lambda s: "demo 2/2 up (1 leased)" in s, "the lease counted")
    sup.release(lease.id)
    last(lambda s: "demo 2/2 up (0 leased)" in s, "the release counted")
    smaller = loads(textwrap.dedent(fast_config(instances=1)))
    sup.put_environment(smaller.environments["demo"], source="file")
    last(lambda s: "demo 1/1 up (0 leased)" in s, "the smaller count")
    sup.delete_environment("other")
    last(lambda s: "other" not in s, "the removed environment gone from it")


def test_a_lease_request_that_times_out_names_its_timeout_rounded(supervisor_with):
    # A client sends the daemon what is left of its own timeout: 0.999998 s of a 1 s one was quoted as such.
    sup = supervisor_with(fast_config())
    ready_pid(sup)
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    try:
        with pytest.raises(LeaseError, match=r"no ready player of 'demo' within 0\.2 s:"):
            sup.acquire("demo", os.getpid(), 0.1999987)
    finally:
        sup.release(lease.id)


def test_a_lease_request_while_the_daemon_stops_says_what_to_do(supervisor_with):
    sup = supervisor_with(fast_config())
    ready_pid(sup)
    sup.request_stop()
    with pytest.raises(LeaseError, match=r"the daemon is stopping: .*ask again once it has been started again"):
        sup.acquire("demo", os.getpid(), 1.0)
