"""Soak: N crash-and-restart cycles through a real daemon, and what the daemon and the client hold before
and after (file descriptors, processes, FIFOs, threads, RSS). Nothing may grow.

    python benchmarks/soak.py                      # 500 cycles
    python benchmarks/soak.py --cycles 200 --json soak.json

One cycle: ``renderd.connect("demo")``, one step, then the player crashes under the lease (in turn:
SIGKILL from outside, the ``abort``, ``segfault`` and ``exit`` fault hooks), the next step must raise
PlayerCrashed, the session is closed (its lease is already over), and the daemon must have a new READY
player (a new pid) before the next cycle. The daemon runs ``renderd start`` with its own socket and
runtime directory under a private temporary directory, one headless ``--static-frame`` player, fast
backoff.

"Before" is measured after ``--warmup`` cycles (lazily created sockets, threads, metric series), "after"
at the end; both once the daemon is idle (player READY, no lease) and its descriptor count has settled.
Samples every ``--every`` cycles show any trend. Exit status 1 if a count differs or RSS grew by more
than ``--rss-slack`` MiB; the daemon is stopped with SIGTERM at the end and must leave nothing behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from typing import Any

import psutil

import renderd
from renderd.daemon.client import ControlClient
from renderd.errors import PlayerCrashed, RenderdError

RENDERD = [sys.executable, "-c", "from renderd.cli import main; main()"]
#: Deadlines (seconds): daemon ready, a new player ready after a crash, the daemon's exit after SIGTERM.
READY_TIMEOUT = 60.0
RESTART_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
#: How long the "idle" measurement waits for the daemon's descriptors to settle (API connections close
#: asynchronously), and how often it looks.
SETTLE_TIMEOUT = 5.0
POLL = 0.01
CRASHES = ("SIGKILL", "abort", "segfault", "exit")

CONFIG = """
[daemon]
backoff_initial = 0.02
backoff_max = 0.2
stop_grace = 2.0
max_boot_failures = 1000

[environments.demo]
executable = [{player}, "--static-frame"]
platform = "headless"
width = 64
height = 48
start_timeout = 30.0
step_timeout = 10.0
restart = "always"
"""


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)


def count_fifos(root: str) -> int:
    n = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            try:
                if stat.S_ISFIFO(os.lstat(os.path.join(directory, name)).st_mode):
                    n += 1
            except FileNotFoundError:
                pass
    return n


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, or a process gone meanwhile, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def process_figures(proc: psutil.Process, *, exclude: set[int] = frozenset()) -> dict[str, Any]:
    children = [c for c in proc.children(recursive=True) if c.pid not in exclude]
    zombies = 0
    for c in children:
        try:
            zombies += c.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    return {
        "fds": len(os.listdir(f"/proc/{proc.pid}/fd")),
        "threads": proc.num_threads(),
        "rss_mib": round(proc.memory_info().rss / 2**20, 1),
        "children": len(children),
        "zombies": zombies,
    }


class Soak:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.socket = os.path.join(directory, "renderd.sock")
        self.runtime_dir = os.path.join(directory, "run")
        self.config_path = os.path.join(directory, "renderd.toml")
        player = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or "renderd-player"
        with open(self.config_path, "w") as f:
            f.write(textwrap.dedent(CONFIG.format(player=json.dumps(player))))
        self.log = open(os.path.join(directory, "daemon.log"), "wb")
        self.daemon = subprocess.Popen(
            [*RENDERD, "start", "-c", self.config_path, "--socket", self.socket, "--runtime-dir", self.runtime_dir],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        self.proc = psutil.Process(self.daemon.pid)
        self.control = ControlClient(self.socket)
        self.me = psutil.Process()

    def player(self) -> dict[str, Any] | None:
        try:
            (env,) = self.control.environments()
        except RenderdError:
            return None
        return env["players"][0] if env["players"] else None

    def wait_ready(self, not_pid: int | None = None) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited ({self.daemon.returncode}); see {self.log.name}")
            p = self.player()
            return p if p and p["state"] == "READY" and p["pid"] != not_pid else None

        return wait_for(ready, READY_TIMEOUT if not_pid is None else RESTART_TIMEOUT, "a READY player")

    def cycle(self, i: int) -> None:
        crash = CRASHES[i % len(CRASHES)]
        with renderd.connect("demo", socket=self.socket, timeout=RESTART_TIMEOUT) as session:
            pid = session.pid
            session.step("MoveAhead")
            if crash == "SIGKILL":
                os.kill(pid, signal.SIGKILL)
                action: Any = "Pass"
            else:
                action = {"action": "RenderdFault", "fault": crash, "code": 7}
            try:
                session.step(action)
            except PlayerCrashed:
                pass
            else:
                raise AssertionError(f"cycle {i}: the player survived {crash}")
        self.wait_ready(not_pid=pid)

    def sample(self, cycles: int) -> dict[str, Any]:
        """Figures once idle: player READY, no lease, the daemon's descriptor count no longer falling."""
        self.wait_ready()
        last = None
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
            if fds == last:
                break
            last = fds
            time.sleep(0.2)
        daemon = process_figures(self.proc)
        daemon["fifos"] = count_fifos(self.runtime_dir)
        daemon["player_dirs"] = len(os.listdir(os.path.join(self.runtime_dir, "players")))
        client = process_figures(self.me, exclude={self.proc.pid, *(c.pid for c in self.proc.children(recursive=True))})
        client["python_threads"] = threading.active_count()
        return {"cycles": cycles, "daemon": daemon, "client": client}

    def stop(self) -> dict[str, Any]:
        """SIGTERM the daemon; what it left behind."""
        players = [c.pid for c in self.proc.children(recursive=True)]
        self.daemon.send_signal(signal.SIGTERM)
        code = self.daemon.wait(STOP_TIMEOUT)
        left = [pid for pid in players if running(pid)]
        self.log.close()
        return {"exit_code": code, "processes_left": left, "socket_left": os.path.exists(self.socket),
                "runtime_dir_left": os.path.exists(self.runtime_dir)}

    def kill(self) -> None:
        """Stop the daemon after a failure: SIGTERM first, so that it stops its player and removes its socket,
        FIFOs and runtime directory (SIGKILL would leave them all in the soak directory); SIGKILL only if it
        has not exited within ``STOP_TIMEOUT``."""
        if self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait(STOP_TIMEOUT)
        if not self.log.closed:
            self.log.close()


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    rows = ["| | daemon before | daemon after | client before | client after |", "| --- | --- | --- | --- | --- |"]
    keys = ["fds", "threads", "children", "zombies", "fifos", "player_dirs", "rss_mib", "python_threads"]
    for key in keys:
        cells = []
        for who in ("daemon", "client"):
            for snap in (before, after):
                cells.append(str(snap[who].get(key, "-")))
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=500, help="crash-and-restart cycles (default 500)")
    parser.add_argument("--warmup", type=int, default=10, help="cycles before the 'before' figures (default 10)")
    parser.add_argument("--every", type=int, default=50, help="take intermediate figures every N cycles")
    parser.add_argument("--rss-slack", type=float, default=8.0, help="RSS growth (MiB) still called stable")
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    if args.every < 1 or args.cycles < 0 or args.warmup < 0:
        parser.error("--every must be at least 1, --cycles and --warmup at least 0")

    directory = tempfile.mkdtemp(prefix="renderd-soak-")
    soak = Soak(directory)
    samples = []
    try:
        soak.wait_ready()
        for i in range(args.warmup):
            soak.cycle(i)
        before = soak.sample(0)
        samples.append(before)
        started = time.monotonic()
        for i in range(1, args.cycles + 1):
            soak.cycle(args.warmup + i)
            if i % args.every == 0 and i != args.cycles:
                samples.append(soak.sample(i))
                print(f"{i} cycles: daemon {samples[-1]['daemon']}", flush=True)
        elapsed = time.monotonic() - started
        after = soak.sample(args.cycles)
        samples.append(after)
        player = soak.player()
        metrics = soak.control.request("GET", "/metrics")[1]
        stopped = soak.stop()
    except BaseException:
        soak.kill()
        print(f"failed; the daemon's log is in {directory}/daemon.log", file=sys.stderr)
        raise
    shutil.rmtree(directory, ignore_errors=True)

    print(f"\n{args.cycles} crash-and-restart cycles in {elapsed:.1f} s ({args.cycles / elapsed:.2f} cycles/s), "
          f"restarts shown by status {player['restarts']}\n")
    print(table(before, after))
    counters = ("renderd_player_restarts_total{", "renderd_player_exits_total{", "renderd_player_recycles_total{",
                "renderd_lease_ends_total{")
    print("\n" + "\n".join(line for line in metrics.splitlines() if line.startswith(counters)))
    print(f"after SIGTERM: {stopped}")
    unstable = []
    for who in ("daemon", "client"):
        for key in ("fds", "threads", "children", "zombies", "fifos", "player_dirs", "python_threads"):
            if key in before[who] and before[who][key] != after[who][key]:
                unstable.append(f"{who} {key}: {before[who][key]} -> {after[who][key]}")
        growth = after[who]["rss_mib"] - before[who]["rss_mib"]
        if growth > args.rss_slack:
            unstable.append(f"{who} RSS grew {growth:.1f} MiB")
    if stopped["exit_code"] != 0 or stopped["processes_left"] or stopped["socket_left"] or stopped["runtime_dir_left"]:
        unstable.append(f"the daemon's stop left something: {stopped}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cycles": args.cycles, "seconds": elapsed, "samples": samples, "stop": stopped,
                       "unstable": unstable}, f, indent=2)
    print("STABLE" if not unstable else "UNSTABLE: " + "; ".join(unstable))
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
