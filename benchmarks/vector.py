"""Vectorized throughput: renderd's VectorSession and RenderdVectorEnv against Gymnasium's AsyncVectorEnv.

Run on demand (not part of the test suite)::

    python benchmarks/vector.py                        # the full table (a few minutes on 2 CPUs)
    python benchmarks/vector.py --ns 4 --frames static --rounds 15
    python benchmarks/vector.py --json results.json

For n = 1, 2, 4, 8 reference players at 300x300 RGB, with static frames (``renderd-player
--static-frame``: the transport and client cost) and rendered frames (every step a new view, so the
numpy renderer draws each frame: the players' CPU cost), these clients are measured side by side,
total steps per second over all players:

* ``vector``: ``renderd.launch_many(n)`` and ``VectorSession.step(actions)`` (one poll over all slots);
* ``vector-seq``: the same, receiving slot by slot with each session's own deadline instead of one poll
  (the alternative the design asked to measure);
* ``serial``: the same n sessions stepped one after another (``Session.step``), no overlap;
* ``gym-vector``: ``renderd.gym.RenderdVectorEnv`` (a ``gymnasium.vector.VectorEnv`` over a
  VectorSession, batched observation arrays) - the Gymnasium-level number;
* ``async`` / ``async-shm``: ``gymnasium.vector.AsyncVectorEnv`` with one worker process per player,
  each worker holding one ``renderd.launch`` session wrapped in ``renderd.gym.RenderdEnv``;
  ``shared_memory=False`` / ``True`` (Gymnasium's default is True).

``ratio`` is gym-vector over the faster AsyncVectorEnv (the two are the same API, the same observation
copies). A second table gives the CPU time per player step (this process, the players and the workers,
from ``psutil``): on a busy or small machine throughput is about CPUs / CPU-per-step, and that number
moves much less with other load than steps per second do.

Every client of a cell is open at once (idle players and workers use no CPU), and each cell is
``--rounds`` short rounds interleaving the clients in rotating order; medians are reported, so load from
other jobs on a shared machine hits every client alike. Nothing is pinned: players, workers and the
client float over all CPUs, which is how they run in training; pinning n + 1 busy processes to 2 CPUs
would only add constraints. The machine's CPU count, load average and Python version are printed with
the table.

``gym-vector`` and the AsyncVectorEnv clients need ``gymnasium``; without it they are skipped, with a note.
A client that fails in a cell (a player crashed or timed out) is closed and left out of that row, with a
note under the table; the rest go on, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# Allow `python benchmarks/vector.py` from a checkout without installing.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import psutil

import renderd

SIZE = 300
START_TIMEOUT = 120.0
STEP_TIMEOUT = 60.0
WARMUP_STEPS = 10
#: A rotation that never repeats a recent view (the player caches the last few frames it drew).
RENDER_ACTION = {"action": "RotateLeft", "degrees": 7}
STATIC_ACTION = "RotateLeft"
FRAMES = ("static", "rendered")
CLIENTS = ("vector", "vector-seq", "serial", "gym-vector", "async", "async-shm")
#: The clients that need Gymnasium (skipped, with a note, when it is not importable).
GYM_CLIENTS = ("gym-vector", "async", "async-shm")


def _launch_kwargs(frames: str) -> dict[str, Any]:
    return {
        "width": SIZE,
        "height": SIZE,
        "args": ["--static-frame"] if frames == "static" else [],
        "start_timeout": START_TIMEOUT,
        "step_timeout": STEP_TIMEOUT,
    }


def _action(frames: str) -> Any:
    return STATIC_ACTION if frames == "static" else RENDER_ACTION


def gymnasium_available() -> bool:
    """Whether Gymnasium imports here (the gym-vector and AsyncVectorEnv clients need it)."""
    try:
        import gymnasium  # noqa: F401
        import gymnasium.vector  # noqa: F401
    except Exception:
        return False
    return True


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _timed(step: Callable[[], None], duration: float) -> tuple[int, float]:
    step()  # first step after a pause: not counted
    count = 0
    started = time.perf_counter()
    while True:
        step()
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= duration:
            return count, elapsed


class _Client:
    """One client setup (its players, and workers if any), opened once and measured in many rounds."""

    def __init__(self, name: str, n: int, frames: str) -> None:
        self.name, self.n, self.frames = name, n, frames
        self.failed = False
        self.closer: Callable[[], None] = lambda: None
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        action = _action(frames)
        kw = _launch_kwargs(frames)
        if name in ("vector", "vector-seq", "serial"):
            vs = renderd.launch_many(n, **kw)
            vs._sequential_recv = name == "vector-seq"
            actions = [action] * n
            if name == "serial":
                sessions = vs.sessions

                def step() -> None:
                    for s in sessions:
                        s.step(action)
            else:

                def step() -> None:
                    vs.step(actions)

            self.closer = vs.close
        elif name == "gym-vector":
            from renderd.gym import RenderdVectorEnv

            env = RenderdVectorEnv(n, actions=[action], max_episode_steps=None, replace_on_crash=False, **kw)
            env.reset(seed=0)
            acts = np.zeros(n, dtype=np.int64)

            def step() -> None:
                env.step(acts)

            self.closer = env.close
        else:
            from gymnasium.vector import AsyncVectorEnv

            from renderd.gym import RenderdEnv

            make = functools.partial(RenderdEnv, actions=[action], max_episode_steps=None, **kw)
            env = AsyncVectorEnv([make] * n, shared_memory=name == "async-shm")
            env.reset(seed=0)
            acts = np.zeros(n, dtype=np.int64)

            def step() -> None:
                env.step(acts)

            self.closer = env.close
        self.step = step
        try:
            # This client's own processes (players, workers), for its CPU time; idle ones cost nothing.
            self.procs = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
            for _ in range(WARMUP_STEPS):
                self.step()
        except BaseException:
            self.close()  # the caller never gets this client to close
            raise

    def measure(self, duration: float) -> tuple[float, float]:
        """(steps/s over all players, CPU microseconds per player step: this process + its processes)."""
        procs = [psutil.Process(), *self.procs]
        cpu0 = _cpu(procs)
        count, elapsed = _timed(self.step, duration)
        cpu = _cpu(procs) - cpu0
        return count * self.n / elapsed, cpu / (count * self.n) * 1e6

    def close(self) -> None:
        closer, self.closer = self.closer, lambda: None  # once: a failed client is closed before the rest
        closer()


def _failure(exc: BaseException) -> str:
    """``Type: first line`` of ``exc``."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def run(ns: list[int], frames_list: list[str], clients: list[str], duration: float, rounds: int,
        notes: list[str] | None = None) -> list[dict]:
    """Measure every cell; a client that fails in a cell (a player crashed or timed out) is closed and left
    out of that row, with a line in ``notes``."""
    notes = [] if notes is None else notes
    rows = []
    for frames in frames_list:
        for n in ns:
            samples: dict[str, list[float]] = {c: [] for c in clients}
            cpu: dict[str, list[float]] = {c: [] for c in clients}
            # Every client of the cell is open at once (idle players and workers use no CPU) and the
            # rounds interleave them, rotating the order, so a noisy neighbour hits all of them alike.
            opened: list[_Client] = []
            try:
                for c in clients:
                    try:
                        opened.append(_Client(c, n, frames))
                    except Exception as exc:
                        notes.append(f"# {frames}, n = {n}: {c} failed to start: {_failure(exc)}")
                for r in range(rounds):
                    k = r % len(opened) if opened else 0
                    for client in opened[k:] + opened[:k]:
                        if client.failed:
                            continue
                        try:
                            rate, us = client.measure(duration)
                        except Exception as exc:
                            notes.append(f"# {frames}, n = {n}: {client.name} failed: {_failure(exc)}")
                            client.failed = True
                            samples[client.name].clear()
                            cpu[client.name].clear()
                            client.close()
                            continue
                        samples[client.name].append(rate)
                        cpu[client.name].append(us)
            finally:
                for client in opened:
                    client.close()
            row: dict[str, Any] = {"frames": frames, "n": n}
            row.update({c: statistics.median(v) for c, v in samples.items() if v})
            row["cpu_us"] = {c: statistics.median(v) for c, v in cpu.items() if v}
            asyncs = [row[c] for c in ("async", "async-shm") if c in row]
            if "gym-vector" in row and asyncs:
                row["ratio"] = row["gym-vector"] / max(asyncs)
            rows.append(row)
            print(_format_row(row, clients), flush=True)
    return rows


def _cpu_table(rows: list[dict], clients: list[str]) -> str:
    cols = ["frames", "n", *clients]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        cells = [row["frames"], str(row["n"])] + [
            f"{row['cpu_us'][c]:.0f}" if c in row["cpu_us"] else "-" for c in clients
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _header(clients: list[str]) -> str:
    cols = ["frames", "n", *clients, "ratio"]
    return "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|"


def _format_row(row: dict, clients: list[str]) -> str:
    cells = [row["frames"], str(row["n"])] + [f"{row[c]:.0f}" if c in row else "-" for c in clients]
    cells.append(f"{row['ratio']:.2f}x" if "ratio" in row else "-")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ns", default="1,2,4,8", help="comma-separated player counts (default 1,2,4,8)")
    p.add_argument("--frames", default="static,rendered", help="static, rendered or both (default both)")
    p.add_argument("--clients", default=",".join(CLIENTS), help=f"subset of {','.join(CLIENTS)}")
    p.add_argument("--duration", type=float, default=0.5, help="seconds measured per client and round")
    p.add_argument("--rounds", type=int, default=9, help="rounds per cell; the median is reported")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not args.duration > 0 or not math.isfinite(args.duration):
        p.error(f"--duration must be a positive number of seconds, not {args.duration:g}")
    ns = []
    for x in (x.strip() for x in args.ns.split(",")):
        if x:
            if not x.isdigit() or int(x) < 1:
                p.error(f"--ns: {x!r} is not a player count (a whole number, at least 1)")
            ns.append(int(x))
    frames = [f.strip() for f in args.frames.split(",") if f.strip()]
    for f in frames:
        if f not in FRAMES:  # any other word would be measured as rendered frames under its own label
            p.error(f"unknown frames {f!r}; expected {' or '.join(FRAMES)}")
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not ns or not frames or not clients:
        p.error("--ns, --frames and --clients must each name at least one")
    for c in clients:
        if c not in CLIENTS:
            p.error(f"unknown client {c!r}; expected one or more of {', '.join(CLIENTS)}")
    skipped = ""
    if any(c in GYM_CLIENTS for c in clients) and not gymnasium_available():
        skipped = ", ".join(c for c in clients if c in GYM_CLIENTS)
        clients = [c for c in clients if c not in GYM_CLIENTS]
    if not clients:
        p.error(f"gymnasium is not importable: no client left to measure (skipped {skipped})")
    load = os.getloadavg()
    print(
        f"# {SIZE}x{SIZE} RGB, steps/s over all players (median of {args.rounds} rounds of {args.duration:g} s); "
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    if skipped:
        print(f"# gymnasium not importable (pip install gymnasium): {skipped} skipped")
    print(_header(clients), flush=True)
    notes: list[str] = []
    rows = run(ns, frames, clients, args.duration, args.rounds, notes)
    for note in notes:
        print(note)
    print("\n# CPU microseconds per player step (this process + players + workers; lower is better)")
    print(_cpu_table(rows, clients))
    load = os.getloadavg()
    print(f"# load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpus": os.cpu_count(), "rows": rows, "notes": notes}, f, indent=2)
    return 1 if notes else 0


if __name__ == "__main__":
    sys.exit(main())
