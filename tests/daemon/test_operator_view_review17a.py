"""The operator's views of a player agree: `renderd status` (its RESTARTS column and STATE), the JSON API
(`restarts`, an environment's `states`) and /metrics (`renderd_player_restarts_total`, `renderd_players`) count
the same restarts (those that happened: a new process started) and the same states (a slot waiting for its
platform is STARTING, not BACKOFF). Real daemons and in-process supervisors, real players."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading

from renderd.daemon.commands import format_status
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import State, Supervisor
from tests.daemon.conftest import PLAYER, RENDERD, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid


def _long_backoff(text: str | None = None) -> str:
    return (text or fast_config()).replace("backoff_initial = 0.05", "backoff_initial = 60").replace(
        "backoff_max = 0.2", "backoff_max = 120")


def _restarts_metric(sup: Supervisor) -> float:
    return sup.metrics.registry.get_sample_value("renderd_player_restarts_total", {"environment": "demo"})


def _status_row(text: str, name: str = "demo") -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(f"{name} "))
    return row.split()


# -- 1. RESTARTS, `restarts` and renderd_player_restarts_total count the same restarts ----------------------------
def test_a_restart_waited_for_is_counted_nowhere_until_its_player_starts(daemon):
    d = daemon(_long_backoff())
    (before,) = d.players()
    os.kill(before["pid"], signal.SIGSEGV)
    (player,) = d.wait_players(lambda ps: ps[0]["state"] == "BACKOFF", what="the crashed player in its backoff")
    out = subprocess.run([*RENDERD, "status", "--socket", d.socket], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    # ENVIRONMENT PLAYER STATE PID UPTIME RESTARTS LEASE
    assert _status_row(out.stdout)[:6] == ["demo", "0", "BACKOFF", "-", "-", "0"], out.stdout
    assert player["restarts"] == 0, player
    metrics = d.client.request("GET", "/metrics")[1]
    assert 'renderd_player_restarts_total{environment="demo"} 0.0' in metrics


def test_a_restart_that_happened_is_counted_once_everywhere(supervisor_with):
    sup = supervisor_with()  # (backoff_initial 0.05 s)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGABRT)
    wait_for(lambda: ready_pid(sup) != pid, DEADLINE, "the crashed player restarted and READY")
    [player] = sup.describe("demo")["players"]
    assert player["restarts"] == 1 and _restarts_metric(sup) == 1
    assert _status_row(format_status(sup.health(), sup.describe()))[5] == "1"


def test_restarts_whose_process_never_started_are_not_counted(supervisor_with, tmp_path):
    # The player's program goes away after it started once: each restart fails to start it (a boot failure each),
    # until the slot is FAILED. It was never started again, so no restart is shown or counted.
    program = tmp_path / "player.sh"
    program.write_text(f'#!/bin/sh\nexec "{PLAYER}" --static-frame "$@"\n')
    program.chmod(0o755)
    sup = supervisor_with(fast_config(executable=f'["{program}"]'))
    pid = ready_pid(sup)
    program.unlink()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: only_player(sup).state == State.FAILED, DEADLINE, "the slot FAILED, its program gone")
    [player] = sup.describe("demo")["players"]
    assert player["boot_failures"] == 3 and "player.sh" in player["reason"], player
    assert player["restarts"] == 0 and _restarts_metric(sup) == 0, player


# -- 2. a slot waiting for its platform is STARTING in the counts too ------------------------------------------------
class _GatedPlatforms:
    """Real platform selection, held until ``gate`` opens (a slow probe of the machine)."""

    def __init__(self) -> None:
        self.real = _Platforms()
        self.gate = threading.Event()
        self.asked = threading.Event()

    def select(self, config):
        self.asked.set()
        self.gate.wait(DEADLINE)
        return self.real.select(config)


def test_a_slot_awaiting_its_platform_is_counted_starting_not_backoff(supervisor_with):
    platforms = _GatedPlatforms()
    sup = supervisor_with(platforms=platforms)
    try:
        def waiting() -> bool:
            with sup.lock:
                p = only_player(sup)
                return p is not None and p.state == State.BACKOFF and p.awaiting_platform

        wait_for(lambda: platforms.asked.is_set() and waiting(), DEADLINE, "the player waiting for its platform")
        text = sup.metrics.render().decode()
        assert 'renderd_players{environment="demo",state="BACKOFF"} 0.0' in text, text
        assert 'renderd_players{environment="demo",state="STARTING"} 1.0' in text, text
        env = sup.describe("demo")
        assert env["states"] == {"STARTING": 1}, env["states"]
        [player] = env["players"]
        assert player["state"] == "BACKOFF" and player["awaiting_platform"] is True  # (the player's JSON as it was)
        assert _status_row(format_status(sup.health(), sup.describe()))[2] == "STARTING"
    finally:
        platforms.gate.set()
    ready_pid(sup)
    text = sup.metrics.render().decode()
    assert re.search(r'renderd_players\{environment="demo",state="READY"\} 1\.0', text), text


# -- 3. the status line (systemd's STATUS=) of an environment being removed ----------------------------------------
def test_the_status_line_says_an_environment_is_being_removed_not_that_it_wants_its_players(supervisor_with):
    # A player that ignores SIGTERM (and never becomes ready) takes its stop_grace to stop once its environment
    # is removed: meanwhile GET /v1/health and renderd_players_wanted say 0 wanted, and so must the status line.
    statuses: list[str] = []
    exe = '["/bin/sh", "-c", "trap \'\' TERM; exec sleep 30"]'
    sup = supervisor_with(fast_config(executable=exe).replace("stop_grace = 2.0", "stop_grace = 3.0"),
                          on_status=statuses.append)
    wait_for(lambda: only_player(sup) is not None and only_player(sup).state == State.STARTING, DEADLINE,
             "the player starting")
    sup.delete_environment("demo")
    wait_for(lambda: only_player(sup).state == State.STOPPING, DEADLINE, "the removed environment's player stopping")
    assert sup.health()["environments"]["demo"]["wanted"] == 0
    wait_for(lambda: statuses and "demo being removed, 1 player(s) stopping" in statuses[-1], 5.0,
             "the status line to say the environment is being removed")
    assert "0/1 up" not in statuses[-1], statuses
    wait_for(lambda: "demo" not in sup.environments, DEADLINE, "the environment gone")


def test_the_log_says_which_start_is_a_restart_and_its_number_as_restarts_counts_it(supervisor_with, caplog):
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    sup = supervisor_with()  # (backoff_initial 0.05 s)
    for n in (1, 2):
        pid = ready_pid(sup)
        os.kill(pid, signal.SIGABRT)
        wait_for(lambda: ready_pid(sup) != pid, DEADLINE, "the crashed player restarted and READY")
    started = [r.getMessage() for r in caplog.records if r.getMessage().startswith("started demo[0]")]
    assert len(started) == 3, started
    assert "restart" not in started[0], started  # (the first start is no restart)
    assert [re.search(r", restart (\d+)\)", m).group(1) for m in started[1:]] == ["1", "2"], started
    assert only_player(sup).restarts == 2 and _restarts_metric(sup) == 2
