"""Managed Xvfb displays under races: a fork that comes after its caller gave up, stale locks and sockets
of a display number another server takes, and a selection released while its display is replaced."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from renderd.platforms import PlatformRequest
from renderd.platforms import xvfb as xvfb_mod
from renderd.platforms.base import Selection
from renderd.platforms.selection import decide
from renderd.platforms.xvfb import DisplayManager

from .conftest import wait_until

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script(path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(10)
    return proc.pid


def _lock_path(number: int) -> str:
    return f"/tmp/.X{number}-lock"


def _socket_path(number: int) -> str:
    return os.path.join("/tmp/.X11-unix", f"X{number}")


# -- 1. a fork that runs after its caller gave up uses only its own descriptors ------------------------

LATE_FORK = textwrap.dedent(
    """
    import os, select, signal, sys, threading, time
    from collections.abc import Mapping

    import psutil

    # Inherited by the fake Xvfb: it still writes after the late-fork cleanup sends it SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from renderd.errors import PlatformError
    from renderd.platforms import xvfb

    xvfb.XVFB_SPAWN_TIMEOUT = 0.5
    go = threading.Event()
    paused = threading.Event()

    class Slow(str):
        # Popen encodes the environment after it took its descriptors' numbers and before it forks:
        # holding it there is a fork that comes late.
        def encode(self, *args, **kwargs):
            if threading.current_thread().name == "renderd-xvfb-spawner" and not go.is_set():
                paused.set()
                go.wait(20)
            return str.encode(str(self), *args, **kwargs)

    class Env(Mapping):
        def __init__(self):
            self.data = {"PATH": os.environ["PATH"], "SLOW": Slow("1")}
        def __getitem__(self, key):
            return self.data[key]
        def __iter__(self):
            return iter(self.data)
        def __len__(self):
            return len(self.data)

    manager = xvfb.DisplayManager(xvfb=sys.argv[1], stop_grace=1.0)
    try:
        manager.acquire(64, 64, env=Env())
        sys.exit("acquire returned")
    except PlatformError as exc:
        message = " ".join(str(exc).split())
    assert paused.is_set()
    # Descriptors another thread opens now take the numbers the caller just closed.
    pipes = [os.pipe() for _ in range(8)]
    go.set()
    got = b""
    # Watch the pipes until the late Xvfb has come and gone (it writes as it starts; it is stopped after
    # stop_grace), or for 3 s if none ever comes.
    started = time.monotonic()
    seen = False
    while time.monotonic() < started + (15 if seen else 3):
        ready, _, _ = select.select([r for r, _ in pipes], [], [], 0.05)
        for r in ready:
            got += os.read(r, 100)
        alive = bool(psutil.Process().children())
        if seen and not alive:
            break
        seen = seen or alive
    ready, _, _ = select.select([r for r, _ in pipes], [], [], 0)
    for r in ready:
        got += os.read(r, 100)
    deadline = time.monotonic() + 15
    while psutil.Process().children() and time.monotonic() < deadline:  # the late Xvfb, stopped
        time.sleep(0.05)
    print(message)
    print(repr(got))
    """
)


def test_a_late_fork_does_not_hand_xvfb_descriptors_another_thread_opened(tmp_path):
    # The caller gives up on a fork the spawner has not done yet and closes its pipe and log file; a
    # descriptor another thread opens then takes their numbers, and the late Xvfb inherited it, writing
    # its display number (and its output) into someone else's pipe, socket or file.
    fake = _script(tmp_path / "Xvfb", 'echo "99" >&$2\necho "said on stdout"\nexec sleep 30')
    done = subprocess.run(
        [sys.executable, "-c", LATE_FORK, fake],
        check=False, capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", REPO)},
    )
    assert done.returncode == 0, done.stderr
    message, got = done.stdout.strip().splitlines()[-2:]
    assert got == "b''", done.stdout
    # A fork that missed its deadline is reported as such (Python's TimeoutError is an OSError, which made it
    # "cannot start .../Xvfb: " with no reason at all).
    assert "could not fork" in message and "within 0.5 s" in message, message


# -- 2. stale locks and sockets of a display number another server now holds ---------------------------


def _free_number() -> int:
    for number in range(400, 700):
        if not os.path.lexists(_lock_path(number)) and not os.path.lexists(_socket_path(number)):
            return number
    pytest.skip("no free X display number in 400..699")


@pytest.fixture
def numbered_xvfb() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A real ``Xvfb :N`` started as a user would (with a display number: it takes the lock file first)."""
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    number = _free_number()
    proc = subprocess.Popen(
        [binary, f":{number}", "-nolisten", "tcp", "-screen", "0", "64x64x24"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0,
    )
    try:
        assert wait_until(lambda: _listening(_socket_path(number)) or proc.poll() is not None, 15)
        assert proc.poll() is None and os.path.isfile(_lock_path(number))
        yield number, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def _listening(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def test_a_lock_whose_pid_runs_is_not_removed(numbered_xvfb):
    # The pid of the stopped server runs (it survived SIGKILL, or the number was reused by the server
    # that took the display): its lock is live and stays, and so does its socket.
    number, proc = numbered_xvfb
    xvfb_mod._remove_leftovers(number, proc.pid)
    assert os.path.isfile(_lock_path(number))
    assert _listening(_socket_path(number))


def test_a_lock_taken_over_while_it_is_read_is_not_removed(numbered_xvfb):
    # The lock of a dead managed server is read; before it is unlinked a new server takes the display
    # number (it removes the stale lock and links its own). Unlinking then removed the live server's lock.
    # A FIFO at the lock path holds the reader between its read and its unlink (an open() of a FIFO also
    # blocked the cleanup for as long as nobody wrote to it).
    number, proc = numbered_xvfb
    lock = _lock_path(number)
    aside = lock + ".review8"
    os.replace(lock, aside)
    try:
        os.mkfifo(lock)
        dead = _dead_pid()
        cleaner = threading.Thread(target=xvfb_mod._remove_leftovers, args=(number, dead), daemon=True)
        cleaner.start()
        writer = None
        deadline = time.monotonic() + 5
        while writer is None and cleaner.is_alive() and time.monotonic() < deadline:
            try:
                writer = os.open(lock, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: nobody has it open for reading (yet)
                time.sleep(0.01)
        if writer is not None:
            os.write(writer, f"{dead:10d}\n".encode())
        os.replace(aside, lock)  # the new server's lock
        if writer is not None:
            os.close(writer)
        cleaner.join(5)
        assert not cleaner.is_alive(), "the cleanup blocked on a FIFO at the lock path"
        assert os.path.isfile(lock), "the live server's lock was removed"
        with open(lock) as f:
            assert int(f.read()) == proc.pid
    finally:
        if os.path.lexists(aside):
            if os.path.lexists(lock):
                os.unlink(lock)
            os.replace(aside, lock)


def test_a_refusing_socket_of_a_display_a_live_server_holds_is_left_alone(numbered_xvfb):
    # A new server took the display number (its lock names a live pid) and is about to listen, or has
    # just replaced the socket: whatever the socket does at the moment of the check, it is not the dead
    # managed server's to remove.
    number, _ = numbered_xvfb
    path = _socket_path(number)
    aside = path + ".review8"
    os.rename(path, aside)
    try:
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)
        stale.close()  # a socket file nobody accepts on: connect is refused
        xvfb_mod._remove_leftovers(number, _dead_pid())
        assert os.path.lexists(path), "the socket of a display a live server holds was removed"
    finally:
        if os.path.lexists(path):
            os.unlink(path)
        os.rename(aside, path)


def test_the_dead_servers_own_lock_and_stale_socket_are_removed():
    number = _free_number()
    dead = _dead_pid()
    lock, path = _lock_path(number), _socket_path(number)
    try:
        with open(lock, "w") as f:
            f.write(f"{dead:10d}\n")
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)
        stale.close()
        xvfb_mod._remove_leftovers(number, dead)
        assert not os.path.lexists(lock) and not os.path.lexists(path)
    finally:
        for leftover in (lock, path):
            if os.path.lexists(leftover):
                os.unlink(leftover)


def test_what_a_killed_managed_xvfb_leaves_is_removed(xvfb):
    manager = DisplayManager()
    try:
        display = manager.acquire(64, 64)
        number = display.number
        assert _listening(_socket_path(number))
        os.killpg(display.pid, signal.SIGKILL)
        assert wait_until(lambda: not display.alive(), 5)
        assert os.path.lexists(_socket_path(number))  # SIGKILL: Xvfb could not remove it
        display.release()
    finally:
        manager.shutdown()
    assert not os.path.lexists(_socket_path(number))


# -- 3. releasing a selection whose display is being replaced ------------------------------------------


def test_release_does_not_wait_for_a_display_being_replaced(tmp_path):
    # Replacing a dead managed display starts an Xvfb (up to its start deadline, 15 s). release() waited
    # for that under the selection's lock; it returns at once now, and the new display, once up, is
    # released by the replacement itself: no Xvfb is left behind.
    real = shutil.which("Xvfb")
    if real is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    gate = tmp_path / "go"
    started = tmp_path / "started"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "Xvfb", f'touch "{started}"\nwhile [ ! -e "{gate}" ]; do sleep 0.02; done\nexec {real} "$@"')
    manager = DisplayManager(start_timeout=20)
    try:
        display = manager.acquire(96, 64)
        request = PlatformRequest(
            platform="Linux64", system="Linux", width=96, height=64, x_display="managed",
            env={"PATH": f"{bindir}:{os.environ['PATH']}"},
        )
        report = decide(request).chosen  # the valid managed report
        selection = Selection(
            "Linux64", env={"DISPLAY": display.screen_name(0)}, report=report, request=request, display=display
        )
        os.killpg(display.pid, signal.SIGKILL)
        assert wait_until(lambda: not display.alive(), 5)
        errors: list[BaseException] = []

        def renew() -> None:
            try:
                selection.renew_display()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        assert wait_until(started.exists, 10)
        t0 = time.monotonic()
        selection.release()
        elapsed = time.monotonic() - t0
        gate.touch()
        renewer.join(30)
        assert not renewer.is_alive()
        assert elapsed < xvfb_mod.XVFB_STOP_GRACE, f"release() waited {elapsed:.1f} s for the replacement"
        assert not errors, errors
        assert selection.released
        assert wait_until(lambda: not manager.displays(), 10), manager.displays()
        assert not [p for p in psutil.Process().children(recursive=True) if p.name() == "Xvfb"]
    finally:
        gate.touch()
        manager.shutdown()


# -- 4. a probe or GPU tool that SIGKILL does not end ----------------------------------------------------
# A process in uninterruptible sleep in a wedged GPU driver (nvidia-smi on a GPU that fell off the bus, a
# Vulkan ICD stuck in an ioctl) does not die of SIGKILL until the kernel call returns. The kill is made to
# miss here (the only mock: the wedged driver); the child itself is real, and killed by the test after.


def _kill_children() -> None:
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(psutil.Process().children(recursive=True), timeout=5)
    from renderd.platforms import probe

    reap = getattr(probe, "reap_left_behind", None)  # what a stuck child left, now that it is gone
    if reap is not None:
        reap()


def _call_with_deadline(fn, deadline: float) -> tuple[bool, list]:
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(deadline)
    return not thread.is_alive(), result


def test_a_probe_that_survives_sigkill_does_not_hang_the_check(tmp_path, monkeypatch):
    from renderd.platforms import probe

    script = tmp_path / "wedged.py"
    script.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    monkeypatch.setattr(probe, "_kill_group", lambda proc: None)
    monkeypatch.setattr(probe, "PROBE_DRAIN_TIMEOUT", 0.2)
    monkeypatch.setattr(probe, "PROBE_REAP_TIMEOUT", 0.5, raising=False)  # (the code before the cap has none)
    try:
        done, result = _call_with_deadline(
            lambda: probe.run_probe(str(script), [], marker="M", env=os.environ, timeout=0.5),
            0.5 + probe.PROBE_DRAIN_TIMEOUT + getattr(probe, "PROBE_REAP_TIMEOUT", 5.0) + 5,
        )
        assert done, "run_probe waited for a probe that SIGKILL did not end"
        outcome = result[0]
        assert outcome.answer is None and outcome.timed_out
        assert "did not finish within 0.5 s" in outcome.failure and "survived SIGKILL" in outcome.failure
    finally:
        _kill_children()


def test_a_gpu_tool_that_survives_sigkill_does_not_hang_the_check(tmp_path, monkeypatch):
    from renderd.platforms import gpus

    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "nvidia-smi", "exec sleep 60")
    monkeypatch.setattr(gpus, "_kill_group", lambda proc: None)
    monkeypatch.setattr(gpus, "GPU_TOOL_TIMEOUT", 0.5)
    monkeypatch.setattr(gpus, "GPU_TOOL_DRAIN_TIMEOUT", 0.2)
    monkeypatch.setattr(gpus, "GPU_TOOL_REAP_TIMEOUT", 0.5, raising=False)  # (the code before the cap has none)
    gpus.clear_cache()
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    try:
        done, result = _call_with_deadline(
            lambda: gpus.nvidia_survey(env),
            0.5 + gpus.GPU_TOOL_DRAIN_TIMEOUT + getattr(gpus, "GPU_TOOL_REAP_TIMEOUT", 5.0) + 5,
        )
        assert done, "nvidia_survey waited for an nvidia-smi that SIGKILL did not end"
        devices, problem = result[0]
        assert devices == [] and "did not answer within 0.5 s" in problem
    finally:
        _kill_children()
        gpus.clear_cache()


# -- 5. X displays the probe could not check -------------------------------------------------------------


def test_python_variables_set_for_the_player_do_not_break_the_x_probe(xvfb):
    # The X probe is renderd's own Python; a PYTHONHOME (or PYTHONPATH) in the environment's env is the
    # player's (a Python player's own installation). The probe ran with it, died, and the display was
    # reported unreachable with the fix "start an X server there".
    from renderd.platforms.linux64 import Linux64

    server = xvfb("-screen", "0", "64x64x24", "+extension", "GLX")
    request = PlatformRequest(
        platform="Linux64", system="Linux", width=64, height=64, x_display=server.name,
        env={"PYTHONHOME": "/nonexistent/python-home", "PYTHONPATH": "/nonexistent/python-path"},
    )
    report = Linux64().check(request)
    assert report.valid, report.reasons


def test_a_display_that_does_not_answer_is_not_told_to_be_started(xvfb, monkeypatch):
    # A server that accepts connections and never answers (stopped, hung) was "not reachable" with the
    # fix "start an X server there": one runs there; it must be restarted.
    from renderd.platforms import x11
    from renderd.platforms.linux64 import Linux64

    monkeypatch.setattr(x11, "X11_PROBE_TIMEOUT", 1.0)
    server = xvfb("-screen", "0", "64x64x24", "+extension", "GLX")
    os.kill(server.pid, signal.SIGSTOP)
    try:
        report = Linux64().check(
            PlatformRequest(platform="Linux64", system="Linux", width=64, height=64, x_display=server.name)
        )
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert not report.valid and len(report.reasons) == 1
    reason = report.reasons[0]
    assert f"X display {server.name} does not answer" in reason and "did not finish within 1 s" in reason, reason
    assert "restart the server of" in reason and "start an X server there" not in reason, reason
