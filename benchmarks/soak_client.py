"""Client soak: long runs of renderd's client library against the reference player, and what this process
holds before and after each (memory, descriptors, pipes, threads, child processes, zombies, temporary files,
Python objects by type). Nothing may grow, and the last steps may not cost more than the first ones.

    python benchmarks/soak_client.py                       # every phase, full length (about 10 minutes)
    python benchmarks/soak_client.py --quick               # a smoke check (well under a minute)
    python benchmarks/soak_client.py --phases session,gym --tracemalloc

Phases (``--phases``, all by default):

* ``session``: one ``renderd.launch`` session, ``--steps`` steps of mixed actions with RGB, depth and instance
  segmentation on; every ``--reset-every`` steps a ``reset`` to the next scene and the next screen size of a
  list that goes up and down (the decoder's buffer pool must not keep every size); the last ``--keep`` events
  are held, then dropped; ``event.metadata`` read every 7th step, ``instance_masks`` and
  ``color_to_object_id`` every 11th.
* ``cycles``: ``--cycles`` launch / step / close cycles.
* ``vector``: a ``VectorSession`` of 4 with ``replace_on_crash=True`` stepped for ``--vector-seconds`` while a
  random running slot's player is SIGKILLed from outside every ``--kill-every`` seconds.
* ``gym``: ``gymnasium.make_vec("renderd/Unity-v0", num_envs=4)`` with autoreset (episodes of 25 steps),
  ``--gym-steps`` steps (skipped without gymnasium).

"Before" is taken after a warm-up (every size once, the first cycles, a quarter of the kills up to 30 s,
100 gym steps), "after" at the end
with the same things open, both after ``gc.collect()``. Each run gets a private temporary directory (the
players' pipe directories go there), which must hold as many entries after as before. Time per step is the
client's CPU time (``time.process_time``) of the first and the last tenth of the steps after the warm-up.
Exit status 1 when a count differs, RSS grew by more than ``--rss-slack`` MiB, the Python objects by more
than ``--objects-slack``, or the last tenth's CPU per step is over ``--slowdown`` times the first's.
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import random
import shutil
import signal
import stat
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import psutil

import renderd
from renderd.vector import SlotState

PLAYER_ARGS = ["--static-frame"]
#: Screen sizes the session phase cycles through at its resets (up and down).
SIZES = [(64, 64), (320, 240), (96, 96), (640, 480), (128, 96), (200, 150)]
SCENES = ["FloorPlan1", "FloorPlan2", "FloorPlan3"]
ACTIONS = ["MoveAhead", "RotateLeft", "Pass", "LookUp", "LookDown", "RotateRight", "MoveBack"]
#: Keys compared for equality before/after.
COUNTS = ("fds", "pipes", "threads", "children", "zombies", "tmp_entries")


def figures(tmp: str) -> dict[str, Any]:
    gc.collect()
    proc = psutil.Process()
    children = proc.children(recursive=True)
    zombies = 0
    for child in children:
        try:
            zombies += child.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    fds = pipes = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
            mode = os.stat(f"/proc/self/fd/{name}").st_mode
        except OSError:  # the listing's own descriptor
            continue
        fds += 1
        pipes += target.startswith("pipe:") or stat.S_ISFIFO(mode)
    mem = proc.memory_full_info()
    return {
        "rss_mib": round(mem.rss / 2**20, 1),
        "uss_mib": round(mem.uss / 2**20, 1),
        "fds": fds,
        "pipes": pipes,
        "threads": proc.num_threads(),
        "children": len(children),
        "zombies": zombies,
        "tmp_entries": sum(len(dirs) + len(files) for _, dirs, files in os.walk(tmp)),
        "objects": len(gc.get_objects()),
    }


def object_types() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


class Phase:
    """Runs one phase: ``warmup()``, then ``before`` figures, ``run(tick)`` (tick() once per step, for the
    CPU-per-step windows), ``after`` figures with the phase's objects still open, then ``close()``."""

    name = ""
    #: Steps between two readings of the CPU time (a list of one per step would itself grow by megabytes).
    sample_every = 20

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.notes: list[str] = []

    def warmup(self) -> None: ...

    def run(self, tick: Callable[[], None]) -> int:
        raise NotImplementedError

    def close(self) -> None: ...


class SessionPhase(Phase):
    name = "session"

    def warmup(self) -> None:
        self.session = renderd.launch(width=64, height=64, args=PLAYER_ARGS)
        self.kept: list[Any] = []
        self.i = 0
        for _ in range(len(SIZES)):  # every size once, so the figures before have seen them all
            self._reset()
            for _ in range(20):
                self._step()
        self.kept.clear()

    def _reset(self) -> None:
        n = self.i // max(self.args.reset_every, 1)
        width, height = SIZES[n % len(SIZES)]
        self.session.reset(SCENES[n % len(SCENES)], width=width, height=height, renderDepthImage=True,
                           renderInstanceSegmentation=True)
        self.i += 1

    def _step(self) -> None:
        i = self.i
        self.i += 1
        event = self.session.step(ACTIONS[i % len(ACTIONS)])
        if i % 7 == 0:
            event.metadata["agent"]
        if i % 11 == 0:
            event.instance_masks
            event.color_to_object_id
        self.kept.append(event)
        if len(self.kept) > self.args.keep:
            self.kept.clear()

    def run(self, tick: Callable[[], None]) -> int:
        for k in range(self.args.steps):
            if k and k % self.args.reset_every == 0:
                self._reset()
            self._step()
            tick()
        self.kept.clear()
        # End where the warm-up ended: at the first size, with the pool's idle buffers aged out.
        self.i = 0
        self._reset()
        for _ in range(100):
            self._step()
        self.kept.clear()
        self.notes.append(f"decoder pool at the end: {self.session.channel.decoder.pooled_bytes} bytes")
        return self.args.steps

    def close(self) -> None:
        self.session.close()


class CyclesPhase(Phase):
    name = "cycles"
    sample_every = 1

    @staticmethod
    def _cycle() -> None:
        with renderd.launch(width=64, height=64, args=PLAYER_ARGS) as session:
            session.step("Pass")

    def warmup(self) -> None:
        for _ in range(3):
            self._cycle()

    def run(self, tick: Callable[[], None]) -> int:
        for _ in range(self.args.cycles):
            self._cycle()
            tick()
        return self.args.cycles


class VectorPhase(Phase):
    name = "vector"

    def warmup(self) -> None:
        self.vs = renderd.launch_many(4, width=64, height=64, args=PLAYER_ARGS, replace_on_crash=True)
        self.vs.reset(scene=SCENES + SCENES[:1], renderDepthImage=True, timeout=120)
        self.kills = 0
        self.failures: collections.Counter[str] = collections.Counter()
        # Kills for a while first: the launch threads' malloc arenas grow to their working size over the first
        # few dozen replacements (about 10 MiB), and stay there.
        self._kill_for(min(30.0, self.args.vector_seconds / 4), lambda: None)
        self._settle()

    def _settle(self) -> None:
        self.vs.reset(timeout=120)
        for _ in range(20):
            self.vs.step(["Pass"] * 4)

    def _kill_for(self, seconds: float, tick: Callable[[], None]) -> int:
        steps = 0
        end = time.monotonic() + seconds
        last_kill = time.monotonic()
        while time.monotonic() < end:
            result = self.vs.step([random.choice(ACTIONS) for _ in range(4)], timeout=120)
            for info in result.infos:
                if "error_type" in info:
                    self.failures[info["error_type"]] += 1
            steps += 1
            tick()
            if time.monotonic() - last_kill >= self.args.kill_every:
                # Only players that have answered: killing a replacement before its first answer, three times in
                # a row, gives the slot up (renderd.vector.REPLACE_ATTEMPTS), as it should.
                pids = [pid for pid, state in zip(self.vs.pids, self.vs.slot_states)
                        if pid and state is SlotState.RUNNING]
                if pids:
                    os.kill(random.choice(pids), signal.SIGKILL)
                    self.kills += 1
                last_kill = time.monotonic()
        return steps

    def run(self, tick: Callable[[], None]) -> int:
        steps = self._kill_for(self.args.vector_seconds, tick)
        self._settle()
        self.notes.append(f"{self.kills} players killed, failures reported: {dict(self.failures)}")
        return steps

    def close(self) -> None:
        self.vs.close()


class GymPhase(Phase):
    name = "gym"

    def warmup(self) -> None:
        import gymnasium

        import renderd.gym  # noqa: F401  (registers renderd/Unity-v0)

        self.env = gymnasium.make_vec("renderd/Unity-v0", num_envs=4, width=64, height=64, depth=True,
                                      max_episode_steps=25, scene=SCENES, args=PLAYER_ARGS)
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        for _ in range(100):
            self.env.step(self.env.action_space.sample())

    def run(self, tick: Callable[[], None]) -> int:
        episodes = 0
        for _ in range(self.args.gym_steps):
            _, _, terminated, truncated, _ = self.env.step(self.env.action_space.sample())
            episodes += int((terminated | truncated).sum())
            tick()
        self.notes.append(f"{episodes} episode ends (autoreset)")
        return self.args.gym_steps

    def close(self) -> None:
        self.env.close()


PHASES = {p.name: p for p in (SessionPhase, CyclesPhase, VectorPhase, GymPhase)}


def run_phase(phase: Phase, tmp: str, use_tracemalloc: bool) -> dict[str, Any]:
    try:
        phase.warmup()
        before = figures(tmp)
        types_before = object_types()
        if use_tracemalloc:
            tracemalloc.start(5)
            snap_before = tracemalloc.take_snapshot()
        # (step count, CPU time) every phase.sample_every steps.
        cpu: list[tuple[int, float]] = [(0, time.process_time())]
        count = 0

        def tick() -> None:
            nonlocal count
            count += 1
            if count % phase.sample_every == 0:
                cpu.append((count, time.process_time()))

        started = time.monotonic()
        steps = phase.run(tick)
        elapsed = time.monotonic() - started
        after = figures(tmp)
        types_after = object_types()
        top = []
        if use_tracemalloc:
            top = [str(s) for s in tracemalloc.take_snapshot().compare_to(snap_before, "lineno")[:8]]
            tracemalloc.stop()
    finally:
        phase.close()
    closed = figures(tmp)
    grown = sorted(((types_after[k] - types_before[k], k) for k in types_after if types_after[k] > types_before[k]),
                   reverse=True)[:6]
    window = max((len(cpu) - 1) // 10, 1)
    first = last = 0.0
    if len(cpu) > window:
        first = (cpu[window][1] - cpu[0][1]) / (cpu[window][0] - cpu[0][0])
        last = (cpu[-1][1] - cpu[-1 - window][1]) / (cpu[-1][0] - cpu[-1 - window][0])
    return {"phase": phase.name, "steps": steps, "seconds": elapsed, "before": before, "after": after,
            "closed": closed, "grown_types": grown, "tracemalloc": top, "cpu_first_us": first * 1e6,
            "cpu_last_us": last * 1e6, "notes": phase.notes}


def table(results: list[dict[str, Any]]) -> str:
    keys = ["rss_mib", "uss_mib", "fds", "pipes", "threads", "children", "zombies", "tmp_entries", "objects"]
    columns = [f"{r['phase']} {when}" for r in results for when in ("before", "after", "closed")]
    head = "| | " + " | ".join(columns) + " |"
    rows = [head, "| --- |" + " --- | --- | --- |" * len(results)]
    for key in keys:
        cells = [f"{r[w][key]}" for r in results for w in ("before", "after", "closed")]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    cells = [f"{r['cpu_first_us']:.0f} | {r['cpu_last_us']:.0f} | " for r in results]
    rows.append("| client CPU us/step (first / last tenth) | " + " ".join(cells) + " |")
    return "\n".join(rows)


def verdict(result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    before, after = result["before"], result["after"]
    name = result["phase"]
    out = [f"{name} {k}: {before[k]} -> {after[k]}" for k in COUNTS if before[k] != after[k]]
    if after["rss_mib"] - before["rss_mib"] > args.rss_slack:
        out.append(f"{name} RSS grew {after['rss_mib'] - before['rss_mib']:.1f} MiB")
    if after["objects"] - before["objects"] > args.objects_slack:
        out.append(f"{name} Python objects grew by {after['objects'] - before['objects']}: {result['grown_types']}")
    if result["cpu_first_us"] and result["cpu_last_us"] > args.slowdown * result["cpu_first_us"]:
        out.append(f"{name} CPU per step {result['cpu_first_us']:.0f} -> {result['cpu_last_us']:.0f} us")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--quick", action="store_true", help="short runs of every phase (a smoke check)")
    parser.add_argument("--steps", type=int, default=50_000, help="session phase steps (default 50000)")
    parser.add_argument("--reset-every", type=int, default=500, help="session phase: steps between resets")
    parser.add_argument("--keep", type=int, default=50, help="session phase: events held before dropping them")
    parser.add_argument("--cycles", type=int, default=500, help="launch/close cycles (default 500)")
    parser.add_argument("--vector-seconds", type=float, default=180.0, help="vector phase length (default 180)")
    parser.add_argument("--kill-every", type=float, default=0.5, help="vector phase: seconds between kills")
    parser.add_argument("--gym-steps", type=int, default=20_000, help="gym phase steps (default 20000)")
    parser.add_argument("--rss-slack", type=float, default=8.0, help="RSS growth (MiB) still called stable")
    parser.add_argument("--objects-slack", type=int, default=300, help="Python object growth still called stable")
    parser.add_argument("--slowdown", type=float, default=2.0, help="last/first CPU per step still called stable")
    parser.add_argument("--tracemalloc", action="store_true", help="print the top allocation growth of each phase")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.reset_every, args.cycles = 3000, 250, 20
        args.vector_seconds, args.kill_every, args.gym_steps = 8.0, 0.5, 500
    names = [n.strip() for n in args.phases.split(",") if n.strip()]
    unknown = [n for n in names if n not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {unknown}: choose from {', '.join(PHASES)}")
    if min(args.steps, args.reset_every, args.cycles, args.gym_steps, args.keep) < 1 or args.kill_every <= 0:
        parser.error("--steps, --reset-every, --cycles, --gym-steps and --keep must be at least 1, "
                     "--kill-every greater than 0")

    tmp = tempfile.mkdtemp(prefix="renderd-soak-client-")
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = tmp
    results = []
    try:
        for name in names:
            if name == "gym":
                try:
                    import gymnasium  # noqa: F401
                except ImportError:
                    print("gym: skipped (gymnasium is not installed)")
                    continue
            print(f"{name}: running", flush=True)
            results.append(run_phase(PHASES[name](args), tmp, args.tracemalloc))
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        left = os.listdir(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for r in results:
        print(f"{r['phase']}: {r['steps']} steps in {r['seconds']:.1f} s; " + "; ".join(r["notes"]))
        if r["grown_types"]:
            print(f"  object types grown: {r['grown_types']}")
        for line in r["tracemalloc"]:
            print(f"  {line}")
    print("\n" + table(results))
    unstable = [problem for r in results for problem in verdict(r, args)]
    if left:
        unstable.append(f"left in the temporary directory: {left}")
    print("STABLE" if not unstable else "UNSTABLE: " + "; ".join(unstable))
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
