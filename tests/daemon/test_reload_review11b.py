"""How reloads and PUTs reach running players, continued: a change of ``restart`` decides the restarts it finds
waiting and the players it finds exited. Real players, real FIFOs: an in-process Supervisor
(tests/daemon/conftest.py's ``supervisor_with``) where the loop's passes are counted, a real
``renderd start`` where the reload's log is."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from renderd.config import EnvironmentConfig
from renderd.daemon.supervisor import State, _pending_bytes
from renderd.protocol import encode_action
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.helpers.leaks import pid_gone
from tests.helpers.reload_review14e import SLOW_TO_STOP, _config, _counting, _demo, _ticks


SLOW_BACKOFF = {"backoff_initial = 0.05": "backoff_initial = 30.0", "backoff_max = 0.2": "backoff_max = 60.0"}


def send_hang(client_pipe: str) -> None:
    """Write, as a client driving the pipes by hand, an action the player never answers (it hangs, alive), and wait
    until it has read it (client.pipe empty)."""
    wfd = os.open(client_pipe, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(wfd, b"".join(encode_action({"action": "RenderdFault", "fault": "hang", "sequenceId": 1})))
        wait_for(lambda: _pending_bytes(wfd) == 0, DEADLINE, "the player to read the action")
    finally:
        os.close(wfd)


def _with(text: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


# -- 1. a change of `restart` --------------------------------------------------------------------------------
def test_restart_set_to_never_cancels_a_restart_being_waited_for(supervisor_with):
    # A player that crashed waits 30 s for its restart; `restart = "never"` declared meanwhile lets it go at once
    # (it stayed BACKOFF, and came back 30 s later against the new policy).
    ticks, tick = _counting()
    text = _with(fast_config(extra='restart = "always"'), SLOW_BACKOFF)
    sup = supervisor_with(text, on_tick=tick)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: only_player(sup).state == State.BACKOFF, DEADLINE, "the crashed player waiting to restart")
    answer = sup.put_environment(_demo(text.replace('restart = "always"', 'restart = "never"')), source="file")
    assert [p["state"] for p in answer["players"]] == ["EXITED"], answer
    _ticks(ticks, 3, sup)
    p = only_player(sup)
    assert p.state == State.EXITED and p.deadline is None and p.spawns == 1
    assert pid_gone(pid)
    # Back to a policy that restarts that exit (a SIGKILL): the player starts again.
    sup.put_environment(_demo(text.replace('restart = "always"', 'restart = "on-failure"')), source="file")
    assert ready_pid(sup) != pid


def test_a_change_of_restart_restarts_only_the_exited_players_the_new_policy_restarts(supervisor_with):
    # `on-failure` let a clean exit (SIGTERM: exit code 0) go. Changing `restart` to `never` used to start it again
    # (any change restarted EXITED players); `always` does, as does a change of any other key.
    ticks, tick = _counting()
    text = fast_config(extra='restart = "on-failure"')
    sup = supervisor_with(text, on_tick=tick)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: only_player(sup).state == State.EXITED, DEADLINE, "the player EXITED (exit code 0)")
    never = text.replace('restart = "on-failure"', 'restart = "never"')
    sup.reload(_config(never))
    _ticks(ticks, 3, sup)
    assert only_player(sup).state == State.EXITED, "restart = 'never' started an exited player again"
    assert only_player(sup).spawns == 1
    # Another key changed, `restart` left as it is: the documented new chance.
    sup.reload(_config(never.replace("step_timeout = 20.0", "step_timeout = 25.0")))
    pid2 = ready_pid(sup)
    assert pid2 != pid
    os.kill(pid2, signal.SIGTERM)
    wait_for(lambda: only_player(sup).state == State.EXITED, DEADLINE, "the player EXITED again")
    sup.reload(_config(never.replace('restart = "never"', 'restart = "always"')))
    assert ready_pid(sup) not in (pid, pid2)


# -- 2. a reload retries the FAILED players of every environment ---------------------------------------------
def test_a_reload_retries_the_failed_players_of_an_environment_declared_through_the_api(supervisor_with):
    # Only the file's environments were retried: one declared through the API stayed FAILED through any reload,
    # even one raising max_boot_failures.
    sup = supervisor_with(fast_config().replace("max_boot_failures = 3", "max_boot_failures = 1"))
    ready_pid(sup)
    sup.put_environment(EnvironmentConfig(name="api", executable=["/bin/sh", "-c", "exit 3"], platform="headless",
                                          start_timeout=20.0))

    def api_slot():
        with sup.lock:
            players = sup.environments["api"].players
            return (players[0].state, players[0].spawns, players[0].boot_failures) if players else (None, 0, 0)

    wait_for(lambda: api_slot()[0] == State.FAILED, DEADLINE, "the API's player FAILED")
    assert api_slot()[1:] == (1, 1)
    assert sup.reload(_config(fast_config()))  # (max_boot_failures = 3)
    wait_for(lambda: api_slot()[1] > 1, DEADLINE, "the API's FAILED player retried by the reload")
    wait_for(lambda: api_slot()[0] == State.FAILED, DEADLINE, "the API's player FAILED again")
    assert api_slot()[1:] == (4, 3), "it was not given the reload's max_boot_failures"
    with sup.lock:
        assert sup.environments["api"].source == "api"


# -- 3. a changed health_interval times the next check of an idle player ---------------------------------------
def test_a_raised_health_interval_puts_the_next_check_further_away_and_a_lowered_one_brings_it_near(supervisor_with):
    # The next check stayed due at the time the old, shorter interval gave: raised from 0.1 s to 30 s, an idle
    # player was still checked 0.1 s later (and then every 30 s).
    ticks, tick = _counting()
    text = fast_config(extra="health_interval = 0.1")
    sup = supervisor_with(text, on_tick=tick)
    ready_pid(sup)

    def checks() -> tuple[int, bool]:
        with sup.lock:
            p = only_player(sup)
            return p.checks, p.check_deadline is None

    wait_for(lambda: checks() == (1, True), DEADLINE, "a first health check answered")
    assert sup.reload(_config(text.replace("health_interval = 0.1", "health_interval = 30.0")))
    raised = time.monotonic()
    _ticks(ticks, 1, sup)
    with sup.lock:
        p = only_player(sup)
        assert p.check_due is not None and p.check_due - raised > 25.0, (p.check_due, raised)
    wait_for(lambda: time.monotonic() - raised > 0.3, DEADLINE, "three of the old intervals to pass")
    _ticks(ticks, 1, sup)
    assert checks() == (1, True), "the idle player was checked at the old interval's time"
    # Lowered below what has passed since that check: the next one is sent at once.
    lowered = time.monotonic()
    assert sup.reload(_config(text.replace("health_interval = 0.1", "health_interval = 0.3")))
    wait_for(lambda: checks() == (2, True), DEADLINE, "the next check after the lowered interval")
    assert time.monotonic() - lowered < 5.0


# -- 4. a [daemon] key that takes effect only at a restart is logged once ----------------------------------------
def test_a_reload_logs_a_daemon_key_that_needs_a_restart_once(daemon):
    d = daemon(fast_config(daemon="api_threads = 16"))
    path = Path(d.config_path)
    path.write_text(path.read_text().replace("api_threads = 16", "api_threads = 17").replace(
        "step_timeout = 20.0", "step_timeout = 21.0\n    restart = \"never\""))
    d.signal(signal.SIGHUP)
    # (the environment's change is logged by the supervisor after the reload's [daemon] keys)
    wait_for(lambda: "environment demo changed" in d.output(), DEADLINE, "the reload applied")
    lines = [line for line in d.output().splitlines() if "api_threads" in line]
    assert len(lines) == 1, lines
    assert "daemon.api_threads 16 -> 17 (when renderd restarts)" in lines[0] and "WARNING" in lines[0], lines
    assert d.client.get("/v1/environments/demo")["config"]["step_timeout"] == 21.0
    # The line says what the new restart policy does to exited players (it said "exited ones restart").
    assert lines[0].endswith("(players kept; exited ones are not restarted, and restarts waited for after an exit "
                             "are cancelled)"), lines


# -- 5. the indices of new slots --------------------------------------------------------------------------------
def test_a_redeclared_environment_gets_the_indices_and_log_files_of_its_instances(supervisor_with, tmp_path):
    # Its new slot was numbered after the one of the removed declaration still stopping (1 with instances = 1), and
    # kept that index: its log file was demo.1.log, its pipes demo.1.*, for as long as it ran.
    text = fast_config(executable=SLOW_TO_STOP).replace("stop_grace = 2.0", "stop_grace = 30.0")
    sup = supervisor_with(text)
    old = ready_pid(sup)
    with sup.lock:
        sup.delete_environment("demo")
        sup.put_environment(_demo(fast_config()))
    logs = tmp_path / "logs"

    def slots():
        with sup.lock:
            return [(p.index, p.state.value, p.retire, p.log_path) for p in sup.environments["demo"].players]

    wait_for(lambda: [(i, s, r) for i, s, r, _ in slots()] == [(0, "STOPPING", True), (0, "READY", False)],
             DEADLINE, "the new player READY beside the old one stopping")
    assert [log for *_, log in slots()] == [str(logs / "demo.0.log.1"), str(logs / "demo.0.log")]
    with sup.lock:
        new = sup.environments["demo"].players[1]
        assert os.path.basename(os.path.dirname(new.pair.server_path)).startswith("demo.0.")
        assert sup.environments["demo"].players[0].proc.log_path == str(logs / "demo.0.log.1")
    os.kill(old, signal.SIGKILL)  # (rather than wait out its stop_grace)
    wait_for(lambda: [(i, s) for i, s, _, _ in slots()] == [(0, "READY")], DEADLINE, "only the new player left")
    assert pid_gone(old)


# -- 6. a changed step_timeout times the answer to a health check under way --------------------------------------
def test_a_health_check_under_way_is_given_the_step_timeout_a_reload_sets(supervisor_with):
    # Its answer stayed due at the time the old step_timeout gave, while the failure's reason named the new one: a
    # player raised from 0.4 s to 30 s was still stopped as hung 0.4 s after the check, "within step_timeout (30 s)".
    ticks, tick = _counting()
    text = fast_config(extra="health_interval = 60.0").replace("step_timeout = 20.0", "step_timeout = 0.4")
    sup = supervisor_with(text, on_tick=tick)
    pid = ready_pid(sup)
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    send_hang(answer["client_pipe"])  # (it reads the action, then never answers anything)
    sent = time.monotonic()
    sup.release(lease.id, clean=True)  # (a clean release with health checks on: a check is sent at once)
    released = time.monotonic()
    assert only_player(sup).check_deadline is not None
    assert sup.reload(_config(text.replace("step_timeout = 0.4", "step_timeout = 30.0")))
    wait_for(lambda: time.monotonic() - sent > 0.7, DEADLINE, "the old step_timeout to pass")
    _ticks(ticks, 2, sup)
    p = only_player(sup)
    assert (p.state, p.pid) == (State.READY, pid), f"failed at the old step_timeout: {p.reason}"
    assert sent + 30.0 <= p.check_deadline <= released + 30.0
    # Lowered below what has passed: hung at the loop's next pass, the reason naming the step_timeout it had.
    assert sup.reload(_config(text.replace("step_timeout = 0.4", "step_timeout = 0.5")))
    wait_for(lambda: "within step_timeout (0.5 s): hung" in only_player(sup).reason, DEADLINE, "the check failed")
    wait_for(lambda: pid_gone(pid), DEADLINE, "the hung player stopped")


def test_a_player_kept_by_a_scale_down_takes_a_free_lower_index_at_its_next_start(supervisor_with, tmp_path):
    # Scaled from 2 to 1, the slot that went was player 0 (it was waiting to restart): player 1 stayed, and kept
    # index 1 (demo.1.log) with instances = 1 through every restart. It now starts as player 0 the next time it starts.
    text = _with(fast_config(instances=2), SLOW_BACKOFF)
    sup = supervisor_with(text)

    def slots():
        with sup.lock:
            return [(p.index, p.state.value, p.pid) for p in sup.environments["demo"].players]

    wait_for(lambda: [s for _, s, _ in slots()] == ["READY", "READY"], DEADLINE, "two READY players")
    os.kill(slots()[0][2], signal.SIGKILL)
    wait_for(lambda: [s for _, s, _ in slots()] == ["BACKOFF", "READY"], DEADLINE, "player 0 waiting to restart")
    kept = slots()[1][2]
    sup.put_environment(_demo(text.replace("instances = 2", "instances = 1")))
    wait_for(lambda: slots() == [(1, "READY", kept)], DEADLINE, "player 0 removed, player 1 kept as it is")
    lease, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id, clean=False)  # (recycled: a new process fills the slot)
    wait_for(lambda: [(i, s) for i, s, pid in slots() if pid != kept] == [(0, "READY")], DEADLINE,
             "the recycled player up as player 0")
    with sup.lock:
        assert only_player(sup).log_path == str(tmp_path / "logs" / "demo.0.log")
    assert pid_gone(kept)
    # The lease's holder is told the index its player had, not the slot's new one.
    assert sup.lease_status(lease.id)["index"] == 1


# -- 6. a scale-down during a rollout ---------------------------------------------------------------------------
def test_a_scale_down_during_a_rollout_retires_a_player_of_the_previous_configuration(supervisor_with):
    # Of two idle players, one of the new configuration and one of the previous, a scale-down to 1 retired the one
    # of the highest index, whichever it was: the new one was stopped, and the old one then replaced (a restart
    # for nothing, and no player ready meanwhile).
    text = fast_config(instances=2)
    sup = supervisor_with(text)

    def slots():
        with sup.lock:
            return [(p.index, p.state.value, p.pid, p.outdated) for p in sup.environments["demo"].players]

    wait_for(lambda: [s for _, s, _, _ in slots()] == ["READY", "READY"], DEADLINE, "two READY players")
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    assert answer["index"] == 0
    wide = text.replace("step_timeout = 20.0", "step_timeout = 20.0\n    width = 64")
    sup.put_environment(_demo(wide))  # (the idle player 1 is replaced first; player 0 after its lease)
    wait_for(lambda: [(s, o) for _, s, _, o in slots()] == [("LEASED", True), ("READY", False)], DEADLINE,
             "player 1 replaced, player 0 leased on the previous configuration")
    new = slots()[1][2]
    with sup.lock:
        sup.release(lease.id, clean=True)
        sup.put_environment(_demo(wide.replace("instances = 2", "instances = 1")))
    wait_for(lambda: [(s, pid) for _, s, pid, _ in slots()] == [("READY", new)], DEADLINE,
             "only the player of the new configuration left")
    assert pid_gone(answer["pid"])
    with sup.lock:
        assert only_player(sup).spawns == 2 and not only_player(sup).outdated  # (its start, and the rollout's)
