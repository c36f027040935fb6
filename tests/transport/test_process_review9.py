"""The player process, review 9: what stop() finds to stop, and what a crash says about how the player died.
Real child processes; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import threading
import time

import psutil
import pytest

from renderd.process import LeasedPlayer, PlayerProcess

from tests.helpers.leaks import pid_gone

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_helper_the_running_player_daemonised_is_stopped_with_it(tmp_path):
    # The classic daemonising helper: the player starts a child in a session of its own, which starts the
    # helper in the background and exits, so the helper is orphaned while the player still runs. It is in
    # no process group of the player's, and no longer the player's descendant: stop() must still end it.
    script = "setsid sh -c 'sleep 600 & echo helper $!'; echo started; sleep 600"
    log_path = tmp_path / "player.log"
    proc = PlayerProcess.spawn(["sh", "-c", script], None, log_path)
    helper_pid = None
    try:
        assert wait_until(lambda: "started" in log_path.read_text(), 30), log_path.read_text()
        helper_pid = int(log_path.read_text().split("helper ")[1].split()[0])
        assert os.getsid(helper_pid) != os.getsid(proc.pid) and os.getpgid(helper_pid) != proc.pgid
        proc.stop(1.0)
        assert wait_until(lambda: pid_gone(helper_pid), 10), "the daemonised helper outlived the player's stop()"
    finally:
        proc.stop(1.0)
        if helper_pid is not None and not pid_gone(helper_pid):
            os.kill(helper_pid, signal.SIGKILL)


def test_a_stopped_player_ends_on_sigterm_without_waiting_out_the_grace(tmp_path, caplog):
    # A player stopped by SIGSTOP (a debugger that let go, `kill -STOP` to pause a run, a job-control
    # stop) keeps a SIGTERM pending: it cannot act on it until it is continued. stop() must continue it
    # after the SIGTERM, so it ends of that signal at once, instead of waiting out the whole grace and
    # being SIGKILLed as a player that ignored it.
    proc = PlayerProcess.spawn(["sleep", "600"], None, tmp_path / "player.log")
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, 10)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="renderd.process"):
            code = proc.stop(5.0)
        took = time.monotonic() - started
        assert code == -signal.SIGTERM and not proc.escalated and proc.ended_by_stop()
        assert took < 2.5, f"stop() of a stopped player took {took:.3g} s"
        assert not [r for r in caplog.records if "SIGKILL" in r.getMessage()]
    finally:
        proc.stop(1.0)


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


@pytest.mark.skipif(not os.access(NS_LAST_PID, os.W_OK), reason="choosing the next pid needs CAP_SYS_ADMIN")
def test_the_group_id_of_a_player_reaped_elsewhere_is_not_signalled_once_recycled(tmp_path):
    # This process ignores SIGCHLD, so the kernel reaps the player as it exits: its pid and process group id
    # are free again (no zombie holds them). When that id is given to a new group leader (another player,
    # any setsid'd program) before the session is closed, stop() must not SIGTERM and SIGKILL that group.
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        proc = PlayerProcess.spawn(["sh", "-c", "exit 3"], None, tmp_path / "player.log")
        assert wait_until(lambda: proc.poll() is not None, 10)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    victim = None
    try:
        assert proc.status_unknown and pid_gone(proc.pid)
        for _ in range(50):  # (other processes may take the pid first)
            with open(NS_LAST_PID, "w") as f:
                f.write(str(proc.pgid - 1))
            candidate = subprocess.Popen(["sleep", "600"], start_new_session=True)
            if candidate.pid == proc.pgid:
                victim = candidate
                break
            candidate.kill()
            candidate.wait()
        if victim is None:
            pytest.skip(f"pid {proc.pgid} could not be given to a new process")
        assert os.getpgid(victim.pid) == proc.pgid
        proc.stop(1.0)
        with pytest.raises(subprocess.TimeoutExpired):
            victim.wait(0.5)  # (a signal sent to it would end it at once)
    finally:
        proc.stop(1.0)
        if victim is not None:
            victim.kill()
            victim.wait()


def test_the_group_of_a_player_reaped_elsewhere_is_still_stopped_while_it_has_members(tmp_path):
    # The other side of the test above: the leader was reaped by the kernel (SIGCHLD ignored), but a process
    # of its group runs on, which keeps the group id from being given out: stop() ends it.
    log_path = tmp_path / "player.log"
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        proc = PlayerProcess.spawn(["sh", "-c", "sleep 600 & echo child $!; exit 3"], None, log_path)
        assert wait_until(lambda: proc.poll() is not None, 10)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    child = None
    try:
        assert proc.status_unknown
        assert wait_until(lambda: "\n" in log_path.read_text(), 10)
        child = int(log_path.read_text().split()[1])
        assert os.getpgid(child) == proc.pgid
        proc.stop(1.0)
        assert wait_until(lambda: pid_gone(child), 5), "the player's group was left running"
    finally:
        proc.stop(1.0)
        if child is not None and not pid_gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_player_that_dumped_core_says_so(tmp_path):
    # A crash that left a core dump is the first thing to look at: the error and the exit description say
    # that the player dumped core, besides the signal that killed it.
    proc = PlayerProcess.spawn(["sh", "-c", "ulimit -c unlimited 2>/dev/null; kill -SEGV $$"], None,
                               tmp_path / "player.log", cwd=tmp_path)
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # (waits; leaves it to the PlayerProcess)
        if info.si_code != os.CLD_DUMPED:
            pytest.skip("no core is dumped here (core size limit, or core_pattern's handler)")
        assert proc.exit_description() == "killed by SIGSEGV (core dumped)"
        error = proc.crashed("the player exited")
        assert error.returncode == -signal.SIGSEGV
        assert "dumped core" in str(error) and "killed by SIGSEGV" in str(error), str(error)
    finally:
        proc.stop(1.0)


PREVIOUS_RUN = "".join(f"previous run line {i}\n" for i in range(30)) + "Traceback: the previous run's error\n"


@pytest.mark.parametrize(
    ("script", "tail"),
    [
        ("kill -KILL $$", ""),  # said nothing at all
        ("echo this run; exit 3", "this run"),
    ],
    ids=["silent", "one-line"],
)
def test_the_log_tail_quotes_only_what_this_player_wrote(tmp_path, script, tail):
    # The log is appended to (a launch(log_path=...) kept from run to run): a player that crashes having
    # written little or nothing must not have the previous run's last lines quoted as its own.
    log_path = tmp_path / "player.log"
    log_path.write_text(PREVIOUS_RUN)
    proc = PlayerProcess.spawn(["sh", "-c", script], None, log_path)
    try:
        assert proc.wait(10) is not None
        error = proc.crashed("the player exited")
        assert error.log_tail == tail, error.log_tail
        assert proc.log_tail() == tail
        assert log_path.read_text().startswith(PREVIOUS_RUN)  # (still appended: nothing of the log is lost)
    finally:
        proc.stop(1.0)


def test_a_log_the_player_rewrote_from_its_start_is_quoted_whole(tmp_path):
    # A player that truncates its -logFile and writes it anew (as Unity players do) past the length the
    # file had before: its own lines are all after the old end, and all of them are quoted.
    log_path = tmp_path / "player.log"
    log_path.write_text("old\n" * 50)
    script = f"for i in $(seq 1 30); do echo new line $i; done > {log_path}; exit 3"
    proc = PlayerProcess.spawn(["sh", "-c", script], None, log_path)
    try:
        assert proc.wait(10) == 3
        assert log_path.stat().st_size > 200
        tail = proc.log_tail().split("\n")
        assert tail[0] == "new line 11" and tail[-1] == "new line 30", tail
    finally:
        proc.stop(1.0)


def test_a_helper_outside_the_group_is_stopped_when_pidfds_are_unavailable(tmp_path, monkeypatch):
    # pidfd_open refused (a container's seccomp profile older than the call, a kernel before 5.3): the
    # player is watched by polling, and a helper it started in a session of its own must still get the
    # stop's SIGTERM (by pid, checked against pid reuse), not run on after close().
    def refused(pid, flags=0):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", refused)
    script = "setsid sleep 600 & echo helper $!; wait"
    log_path = tmp_path / "player.log"
    proc = PlayerProcess.spawn(["sh", "-c", script], None, log_path)
    helper_pid = None
    try:
        assert proc.pidfd is None
        assert wait_until(lambda: "helper " in log_path.read_text(), 30), log_path.read_text()
        helper_pid = int(log_path.read_text().split()[1])
        assert wait_until(lambda: os.getpgid(helper_pid) == helper_pid, 10)  # (setsid has run)
        started = time.monotonic()
        proc.stop(5.0)
        assert wait_until(lambda: pid_gone(helper_pid), 10), "the helper outlived the player's stop()"
        assert time.monotonic() - started < 3
    finally:
        proc.stop(1.0)
        if helper_pid is not None and not pid_gone(helper_pid):
            os.kill(helper_pid, signal.SIGKILL)


def test_a_leased_players_log_tail_is_its_own_after_the_daemon_restarted_it(tmp_path):
    # The daemon restarts a player that crashed under a lease after a short backoff, and the new player's log
    # takes the path (the old one is renamed to PATH.1). A client that notices the crash only at its next
    # step, after that, must quote the crashed player's last lines, not the new player's first ones.
    log_path = tmp_path / "demo.0.log"
    player = PlayerProcess.spawn(["sh", "-c", "echo loading scene; echo fatal: out of video memory; kill -ABRT $$"],
                                 None, log_path)  # (the daemon's player)
    leased = LeasedPlayer(player.pid, log_path=str(log_path))
    try:
        assert player.wait(10) == -signal.SIGABRT
        os.replace(log_path, f"{log_path}.1")  # what the daemon does when it starts the slot's next player
        log_path.write_text("renderd-player: starting\n")
        error = leased.crashed("the player exited while renderd waited for its answer")
        assert error.log_tail == "loading scene\nfatal: out of video memory", error.log_tail
    finally:
        leased.close()
        player.stop(1.0)


def test_an_exit_read_while_another_thread_stops_the_player_is_not_taken_for_an_unknown_status():
    # close() from a watchdog thread stops the player while the session's own thread asks how it ended
    # (poll(), as a wait for the answer does when the pidfd fires). The stop's reap and that question race:
    # the kernel has reaped the player before the stop's Popen has recorded its status. That is no exit
    # status lost to someone else (SIGCHLD ignored): the status must stay known, and right.
    for _ in range(24):  # (the race is lost about one time in eight: 24 tries miss it about one run in 25)
        proc = PlayerProcess.spawn(["sleep", "600"], None, None)
        done = threading.Event()

        def ask() -> None:
            while not done.is_set() and not proc.status_unknown:
                proc.poll()

        asker = threading.Thread(target=ask)
        asker.start()
        try:
            assert proc.stop(5.0) == -signal.SIGTERM
        finally:
            done.set()
            asker.join()
        assert not proc.status_unknown
        assert proc.exit_description() == "killed by SIGTERM"
        assert proc.crashed("the player exited").returncode == -signal.SIGTERM


def test_the_players_environment_leaves_out_the_service_managers_variables():
    # (the daemon runs under systemd: its NOTIFY_SOCKET, watchdog and socket-activation variables are its own)
    from renderd.process import player_env

    base = {"PATH": "/usr/bin", "NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "30000000",
            "WATCHDOG_PID": "1234", "LISTEN_FDS": "1", "LISTEN_PID": "1234", "LISTEN_FDNAMES": "control"}
    env = player_env(base, server_type="FIFO", server_pipe="/s", client_pipe="/c")
    assert env["PATH"] == "/usr/bin"
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                "LISTEN_FDNAMES"} & set(env), sorted(env)
    env = player_env(base, server_type="FIFO", server_pipe="/s", client_pipe="/c", extra={"LISTEN_FDS": "0"})
    assert env["LISTEN_FDS"] == "0"  # (an explicit value wins)
