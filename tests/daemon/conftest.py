"""Fixtures for the daemon's tests: a real ``renderd start`` process with real players, in a tmp dir.

``daemon(config_text=None, ...)`` starts one and waits until it reports ready; every daemon started is
stopped (SIGTERM, then SIGKILL) and every process it spawned is killed after the test, whatever happened.

``supervisor_with(config_text=None, **kwargs)`` is an in-process Supervisor whose loop runs on a thread, stopped
and checked for leaks after the test; ``xvfb_spawner`` starts the managed displays' spawner thread before it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest

from renderd.config import loads
from renderd.daemon.client import ControlClient
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import Supervisor
from renderd.errors import RenderdError
from tests.helpers.leaks import Leaks, pid_gone, wait_for  # noqa: F401  (used by the tests)

#: Deadline for a daemon to report ready (players up) in these tests.
READY_TIMEOUT = 30.0
#: Deadline for a daemon to exit after SIGTERM.
STOP_TIMEOUT = 20.0
#: How often the helpers poll.
POLL = 0.02
#: Deadline for an in-process Supervisor's loop to finish (``supervisor_with``) and for the spawner thread's start.
SUPERVISOR_DEADLINE = 20.0

RENDERD = [sys.executable, "-c", "from renderd.cli import main; main()"]
PLAYER = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or shutil.which("renderd-player")


class DaemonProcess:
    """One ``renderd start`` child process with its own socket and runtime directory."""

    def __init__(self, base: Path, config_text: str | None, *, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, socket: str | None = None,
                 runtime_dir: str | None = None, preamble: str = "") -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.socket = socket or str(base / "renderd.sock")
        self.runtime_dir = runtime_dir or str(base / "run")
        self.config_path: str | None = None
        if config_text is not None:
            self.config_path = str(base / "renderd.toml")
            Path(self.config_path).write_text(textwrap.dedent(config_text))
        renderd = RENDERD
        if preamble:  # Python run in the daemon's process before the command (a fault a test injects)
            renderd = [*RENDERD[:-1], textwrap.dedent(preamble) + "\n" + RENDERD[-1]]
        argv = [*renderd, "start", "--socket", self.socket, "--runtime-dir", self.runtime_dir, *args]
        if self.config_path:
            argv += ["-c", self.config_path]
        self.log_path = base / "daemon.log"
        self._log = open(self.log_path, "wb")
        child_env = dict(os.environ)
        child_env.pop("NOTIFY_SOCKET", None)
        child_env.pop("WATCHDOG_USEC", None)
        child_env.update(env or {})
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=child_env,
                                     stdin=subprocess.DEVNULL)
        self.client = ControlClient(self.socket)
        self.seen_pids: set[int] = set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> dict[str, Any] | None:
        try:
            return self.client.health()
        except RenderdError:
            return None

    def environments(self) -> list[dict[str, Any]]:
        envs = self.client.environments()
        for env in envs:
            for p in env["players"]:
                if p["pid"]:
                    self.seen_pids.add(p["pid"])
        return envs

    def players(self, name: str = "demo") -> list[dict[str, Any]]:
        for env in self.environments():
            if env["name"] == name:
                return env["players"]
        raise AssertionError(f"no environment {name!r}")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited ({self.proc.returncode}):\n{self.output()}")
            h = self.health()
            return h if h and h["status"] == "ready" else None

        health = wait_for(ready, timeout, "the daemon to be ready")
        self.environments()
        return health

    def wait_players(self, predicate: Callable[[list[dict[str, Any]]], Any], name: str = "demo",
                     timeout: float = READY_TIMEOUT, what: str = "players") -> list[dict[str, Any]]:
        def check() -> Any:
            players = self.players(name)
            try:
                return (players,) if predicate(players) else None
            except IndexError:
                if players:
                    raise
                return None  # (the environment's slots are not made yet: a predicate about ps[0] waits for them)

        return wait_for(check, timeout, what)[0]

    def descendants(self) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(self.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        """Stop the daemon and anything it left, whatever state the test left it in."""
        pids = set(self.descendants()) | self.seen_pids
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for pid in pids:
            try:
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
            except psutil.NoSuchProcess:
                pass
        self._log.close()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def daemon(tmp_path: Path):
    """``daemon(config_text=None, args=(), env=None, ready=True, socket=None, runtime_dir=None, preamble="")``
    starts a daemon (waiting until it is ready unless ``ready=False``; ``preamble``: Python code the daemon's
    process runs first, to inject a fault); all are cleaned up after the test."""
    made: list[DaemonProcess] = []

    def start(config_text: str | None = None, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
              ready: bool = True, socket: str | None = None, runtime_dir: str | None = None,
              preamble: str = "") -> DaemonProcess:
        d = DaemonProcess(tmp_path / f"d{len(made)}", config_text, args=args, env=env, socket=socket,
                          runtime_dir=runtime_dir, preamble=preamble)
        made.append(d)
        if ready:
            d.wait_ready()
        return d

    yield start
    for d in made:
        d.cleanup()


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory):
    """One daemon on ``fast_config()``, ready, shared by a module's tests that only ask it things and leave it as
    they found it (no lease, no signal, no configuration change): one start instead of one per test."""
    d = DaemonProcess(tmp_path_factory.mktemp("shared-daemon"), fast_config())
    try:
        d.wait_ready()
        yield d
    finally:
        d.cleanup()


def fast_config(*, instances: int = 1, executable: str | None = None, extra: str = "", daemon: str = "") -> str:
    """A configuration for quick tests: headless static-frame players, short backoff."""
    exe = executable or f'["{PLAYER}", "--static-frame"]'
    return f"""
    [daemon]
    backoff_initial = 0.05
    backoff_max = 0.2
    stop_grace = 2.0
    max_boot_failures = 3
    {daemon}

    [environments.demo]
    executable = {exe}
    platform = "headless"
    instances = {instances}
    start_timeout = 20.0
    step_timeout = 20.0
    {extra}
    """


@pytest.fixture
def supervisor_with(tmp_path):
    """``supervisor_with(config_text=None, **kwargs)``: an in-process Supervisor (real players; by default
    the fast configuration) whose loop runs on a thread; stopped and checked for leaks after the test."""
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    leaks = Leaks(tmp_path / "players", threads=True, zombies=True)
    made: list[tuple[Supervisor, threading.Thread]] = []

    def make(config_text: str | None = None, **kwargs) -> Supervisor:
        kwargs.setdefault("platforms", _Platforms())
        sup = Supervisor(loads(textwrap.dedent(config_text or fast_config())), players_dir=str(tmp_path / "players"),
                         log_dir=str(tmp_path / "logs"), **kwargs)
        loop = threading.Thread(target=sup.run, name="renderd-supervisor-test", daemon=True)
        loop.start()
        made.append((sup, loop))
        return sup

    yield make
    for sup, loop in made:
        sup.request_stop()
        loop.join(SUPERVISOR_DEADLINE)
        assert not loop.is_alive(), "the supervisor loop did not finish"
        sup.close()
    leaks.check()


@pytest.fixture
def xvfb_spawner():
    """The managed displays' spawner thread, started before ``supervisor_with`` counts threads: it lives as long
    as the process, by design (it forks every Xvfb, which dies with the thread that forked it)."""
    from renderd.platforms import xvfb

    xvfb._SPAWNER.run(lambda: None, SUPERVISOR_DEADLINE, lambda _result: None)
