"""The player process: command line, environment, process group, escalating stop, exit classification."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from renderd.errors import ConfigError, RenderdError
from renderd.process import QUALITY_SETTINGS, PlayerProcess, player_argv, player_env, resolve_executable

from tests.helpers.leaks import pid_gone

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


class TestArgv:
    def test_unity_flags_in_order(self, tmp_path):
        argv = player_argv(sys.executable, width=640, height=480, quality="High", log_path=tmp_path / "p.log",
                           extra_args=["--static-frame"])
        assert argv == [
            os.path.abspath(sys.executable),
            "-screen-fullscreen", "0", "-screen-quality", str(QUALITY_SETTINGS["High"]),
            "-screen-width", "640", "-screen-height", "480",
            "-logFile", str(tmp_path / "p.log"),
            "--static-frame",
        ]

    def test_headless_adds_batchmode(self):
        argv = player_argv(sys.executable, width=1, height=1, headless=True)
        assert argv[-2:] == ["-batchmode", "-nographics"]
        assert argv[argv.index("-screen-quality") + 1] == "7"  # Ultra by default

    def test_argv_list_keeps_its_arguments_and_resolves_the_program(self):
        argv = player_argv(["python3", "-m", "renderd.player"], width=2, height=3, quality=2)
        assert os.path.isabs(argv[0])
        assert argv[1:3] == ["-m", "renderd.player"]

    def test_name_is_found_next_to_the_running_python(self):
        # renderd-player is installed next to this interpreter, whatever PATH says.
        path = resolve_executable("renderd-player")[0]
        assert os.path.dirname(path) == os.path.dirname(os.path.abspath(sys.executable)) or os.access(path, os.X_OK)

    def test_missing_program_names_it(self):
        with pytest.raises(ConfigError, match="no-such-player-xyz") as info:
            player_argv("no-such-player-xyz", width=1, height=1)
        assert info.value.key == "executable"

    def test_missing_path_and_non_executable(self, tmp_path):
        with pytest.raises(ConfigError, match="does not exist"):
            resolve_executable(str(tmp_path / "nope"))
        script = tmp_path / "player"
        script.write_text("#!/bin/sh\n")
        with pytest.raises(ConfigError, match="not executable"):
            resolve_executable(str(script))
        with pytest.raises(ConfigError, match="empty"):
            resolve_executable([])

    @pytest.mark.parametrize("quality", ["Ultimate", 42, True])
    def test_unknown_quality(self, quality):
        with pytest.raises(ConfigError) as info:
            player_argv(sys.executable, width=1, height=1, quality=quality)
        assert info.value.key == "quality"

    @pytest.mark.parametrize("width", [0, -1, 1.5, True])
    def test_bad_size(self, width):
        with pytest.raises(ConfigError) as info:
            player_argv(sys.executable, width=width, height=1)
        assert info.value.key == "width"


class TestEnv:
    def test_fifo_endpoint(self):
        env = player_env({"HOME": "/h", "AI2THOR_HOST": "stale", "AI2THOR_PORT": "1"},
                         server_pipe="/d/server.pipe", client_pipe="/d/client.pipe")
        assert env == {
            "HOME": "/h",
            "AI2THOR_SERVER_TYPE": "FIFO",
            "AI2THOR_FIFO_SERVER_PIPE_PATH": "/d/server.pipe",
            "AI2THOR_FIFO_CLIENT_PIPE_PATH": "/d/client.pipe",
            "AI2THOR_SERVER_SIDE_SCREENSHOT": "True",
        }

    def test_wsgi_endpoint_with_token_and_extra_last(self):
        env = player_env({}, server_type="WSGI", host="127.0.0.1", port=8200, token="t0k", screenshot=False,
                         extra={"AI2THOR_SERVER_SIDE_SCREENSHOT": "True", "X": 1})
        assert env["AI2THOR_SERVER_TYPE"] == "WSGI"
        assert (env["AI2THOR_HOST"], env["AI2THOR_PORT"], env["AI2THOR_CLIENT_TOKEN"]) == ("127.0.0.1", "8200", "t0k")
        assert env["AI2THOR_SERVER_SIDE_SCREENSHOT"] == "True"
        assert env["X"] == "1"

    def test_default_base_is_os_environ(self):
        assert player_env(None, server_pipe="s", client_pipe="c")["PATH"] == os.environ["PATH"]

    @pytest.mark.parametrize(
        "kwargs", [dict(server_type="FIFO"), dict(server_type="WSGI", host="h"), dict(server_type="TCP")]
    )
    def test_incomplete_endpoint(self, kwargs):
        with pytest.raises(ConfigError):
            player_env({}, **kwargs)


class TestSpawn:
    def test_log_gets_stdout_and_stderr_and_the_group_is_its_own(self, tmp_path):
        log = tmp_path / "player.log"
        proc = PlayerProcess.spawn(
            python("""
                import os, sys
                print("to stdout", flush=True)
                print("to stderr", file=sys.stderr, flush=True)
                print("pgid", os.getpgid(0), flush=True)
            """),
            None,
            log,
        )
        try:
            assert proc.wait(10) == 0
            text = log.read_text()
            assert "to stdout" in text and "to stderr" in text
            assert f"pgid {proc.pid}" in text
            assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
            assert proc.exit_description() == "exit code 0"
            assert proc.log_tail(1) == f"pgid {proc.pid}"
        finally:
            proc.stop()

    def test_log_is_appended(self, tmp_path):
        log = tmp_path / "player.log"
        log.write_text("earlier run\n")
        proc = PlayerProcess.spawn(python("print('later run')"), None, log)
        proc.wait(10)
        proc.stop()
        assert log.read_text() == "earlier run\nlater run\n"

    def test_no_descriptor_is_inherited(self, tmp_path):
        r, w = os.pipe()
        os.set_inheritable(w, True)
        try:
            proc = PlayerProcess.spawn(python("import os; print(sorted(os.listdir('/proc/self/fd')))"), None,
                                       tmp_path / "log")
            proc.wait(10)
            proc.stop()
        finally:
            os.close(r)
            os.close(w)
        # 0, 1, 2 and the descriptor listdir itself opens.
        assert len(eval((tmp_path / "log").read_text())) == 4

    def test_unstartable_program(self, tmp_path):
        script = tmp_path / "bad"
        script.write_text("#!/nonexistent/interpreter\n")
        script.chmod(0o755)
        with pytest.raises(RenderdError, match="cannot start the player") as info:
            PlayerProcess.spawn([str(script)], None, tmp_path / "log")
        assert isinstance(info.value.__cause__, OSError)

    def test_stats(self, tmp_path):
        proc = PlayerProcess.spawn(python("import time; time.sleep(30)"), None, None)
        try:
            stats = proc.stats()
            assert stats["running"] and stats["rss"] > 0 and stats["children"] == []
        finally:
            proc.stop(grace=1)
        assert proc.stats() == {"pid": proc.pid, "running": False}


class TestStop:
    def test_sigterm_ends_a_cooperative_player(self, tmp_path):
        proc = PlayerProcess.spawn(python("import time; time.sleep(30)"), None, None)
        started = time.monotonic()
        assert proc.stop(grace=5) == -signal.SIGTERM
        assert time.monotonic() - started < 2
        assert proc.stop() == -signal.SIGTERM  # idempotent
        assert proc.pidfd is None

    def test_escalates_to_sigkill_and_warns(self, tmp_path, caplog):
        proc = PlayerProcess.spawn(
            python("""
                import signal, time
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                print("ready", flush=True)
                time.sleep(30)
            """),
            None,
            tmp_path / "log",
        )
        assert wait_until(lambda: "ready" in (tmp_path / "log").read_text())
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="renderd.process"):
            code = proc.stop(grace=0.3)
        assert code == -signal.SIGKILL
        assert 0.3 <= time.monotonic() - started < 2
        assert any("SIGKILL" in r.getMessage() for r in caplog.records)

    def test_leftover_group_members_are_killed(self, tmp_path):
        log = tmp_path / "log"
        proc = PlayerProcess.spawn(
            python("""
                import subprocess, sys
                child = subprocess.Popen([sys.executable, "-c",
                    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
                print("child", child.pid, flush=True)
            """),
            None,
            log,
        )
        assert wait_until(lambda: "child" in log.read_text())
        child_pid = int(log.read_text().split()[1])
        assert proc.wait(10) == 0  # the leader is gone, its child lives on in the group
        assert psutil.pid_exists(child_pid)
        proc.stop(grace=0.2)
        assert wait_until(lambda: not psutil.pid_exists(child_pid) or
                          psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE, 5)

    def test_an_exited_player_stays_unreaped_until_stop(self, tmp_path):
        """Its zombie holds the pid and group id, so stop() cannot signal a recycled id."""
        proc = PlayerProcess.spawn(python("raise SystemExit(6)"), None, None)
        assert proc.wait(10) == 6
        assert proc.poll() == 6 and proc.returncode == 6 and proc.exited()
        assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
        assert proc.stop() == 6
        assert not psutil.pid_exists(proc.pid)

    def test_crashed_classifies_the_exit(self, tmp_path):
        proc = PlayerProcess.spawn(python("import os; print('about to abort', flush=True); os.abort()"), None,
                                   tmp_path / "log")
        proc.wait(10)
        err = proc.crashed("the player died")
        assert err.returncode == -signal.SIGABRT
        assert err.signal_name == "SIGABRT"
        assert "killed by SIGABRT" in str(err)
        assert "about to abort" in str(err)
        assert err.pid == proc.pid
        proc.stop()

    def test_player_dies_with_its_owner(self, tmp_path):
        """If the process that spawned the player is SIGKILLed, the player gets SIGKILL too."""
        log = tmp_path / "log"
        out = open(log, "w")
        owner = subprocess.Popen(
            python("""
                import sys, time
                from renderd.process import PlayerProcess
                p = PlayerProcess.spawn([sys.executable, "-c", "import time; time.sleep(60)"], None, None)
                print(p.pid, flush=True)
                time.sleep(60)
            """),
            stdout=out,
        )
        out.close()
        try:
            assert wait_until(lambda: log.read_text().strip() != "", 10)
            player_pid = int(log.read_text())
            assert psutil.pid_exists(player_pid)
            owner.kill()
            owner.wait(10)
            # Dead: gone, or a zombie its new parent (init, which may reap seconds later) has not reaped yet.
            assert wait_until(lambda: pid_gone(player_pid), 2)
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.wait()


@pytest.mark.parametrize("call", ["wait", "stop"])
def test_a_nan_timeout_or_grace_does_not_wait_forever(tmp_path, call):
    """wait(nan), and stop(nan) of a player that ignores SIGTERM, spun forever: a NaN deadline never
    compares as passed. Now NaN is no time at all. (In a child process, which the test kills if it spins.)"""
    code = f"""
import signal, sys
sys.path.insert(0, {os.getcwd()!r})
from renderd.process import PlayerProcess
ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
proc = PlayerProcess.spawn([sys.executable, "-c", ignore_term], None, {str(tmp_path / "p.log")!r})
import time
while "up" not in open({str(tmp_path / "p.log")!r}).read():
    time.sleep(0.01)
if {call!r} == "wait":
    print("wait:", proc.wait(float("nan")))
    proc.stop(0.1)
else:
    print("stop:", proc.stop(float("nan")))
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and the player it started
        proc.communicate()
        pytest.fail(f"{call} with NaN did not return within 5 s")
    assert (f"{call}: None" if call == "wait" else "stop: -9") in out, out


def test_a_player_on_display_that_cannot_be_watched_leaves_no_descriptor(tmp_path):
    """PlayerOnDisplay opens the display's pidfd, then an epoll: when the epoll cannot be made (out of file
    descriptors) the error goes through and the pidfd was left open. (In a child whose descriptor limit
    leaves room for exactly one more.)"""
    code = """
import os, resource, subprocess, sys
from renderd.process import PlayerOnDisplay, PlayerProcess
sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
player = PlayerProcess.spawn(sleeper, None, None)
display = subprocess.Popen(sleeper)
class Display:
    pid, name, returncode = display.pid, ":99", None
    def alive(self):
        return True
free = os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: no lower one is free
os.close(free)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (free + 1, hard))
try:
    PlayerOnDisplay(player, Display())
except OSError as exc:
    print("raised", exc.errno)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("leaked" if os.path.exists(f"/proc/self/fd/{free}") else "clean")
player.stop(0.1)
display.kill()
display.wait()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20, cwd=os.getcwd())
    assert "raised" in out.stdout, out.stdout + out.stderr
    assert "clean" in out.stdout, out.stdout + out.stderr
