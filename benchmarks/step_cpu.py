"""Where a step's time goes: CPU time per step of renderd's client and of the player, side by side with the
raw reader (the ceiling column of ``transport.py``) on the same player, both processes pinned.

For each placement and round, one player is driven first by ``Session.step`` and then, on the same pipes, by
the raw reader (two buffers in turn, no framing, no decoding); for each it prints steps per second, the
client's user and kernel time per step (``getrusage``), the player's (``psutil``, from ``/proc``), and the
client's voluntary and involuntary context switches per step. ``send``/``recv`` are the medians of
``Session.send`` (which on one CPU includes the player's whole step: writing the action wakes it, and it runs
before the client goes on) and ``Session.recv`` (reading the answer and building the event; with
``--case objects300read`` also reading ``event.metadata``, a full decode, as in ``transport.py``).

    python benchmarks/step_cpu.py                           # 300x300 RGB+depth, one CPU then two, 3 rounds
    python benchmarks/step_cpu.py --case rgb1024 --rounds 5 --steps 2000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transport as T  # noqa: E402

import renderd  # noqa: E402


def measure(steps: int, step: Callable[[], object]) -> tuple[float, list[float]]:
    """(seconds, [user s, kernel s, voluntary and involuntary context switches] of this process) around
    ``steps`` calls of ``step``."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return t1 - t0, [r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_nvcsw - r0.ru_nvcsw,
                     r1.ru_nivcsw - r0.ru_nivcsw]


def one_round(case: T.Case, placement: str, steps: int, payload: bytes) -> list[str]:
    cpus = T.cpus_for(placement)
    if cpus is None:
        return [f"| {placement} | (needs two CPUs) |"]
    pin = T.Pinned(*cpus)
    lines = []
    try:
        pin.spawning()
        with renderd.launch(T.player_executable, width=case.width, height=case.height, args=case.player_args(),
                            env=T.PLAYER_ENV, start_timeout=T.START_TIMEOUT, step_timeout=T.STEP_TIMEOUT) as s:
            pin.running(s.pid)
            T.setup_session(s, case)
            player = psutil.Process(s.pid)
            for _ in range(T.WARMUP_STEPS):
                s.step(T.ACTION)
            sends: list[int] = []
            recvs: list[int] = []
            clock = time.perf_counter_ns

            read_metadata = case.read_metadata

            def step() -> None:
                a = clock()
                s.send(T.ACTION)
                b = clock()
                event = s.recv()
                if read_metadata:  # the case's full decode (objects300read), as transport.py's renderd column
                    event.metadata
                sends.append(b - a)
                recvs.append(clock() - b)

            p0 = player.cpu_times()
            seconds, me = measure(steps, step)
            p1 = player.cpu_times()
            lines.append(row(case, placement, "renderd", steps, seconds, me, p1.user - p0.user, p1.system - p0.system,
                             statistics.median(sends) / 1e3, statistics.median(recvs) / 1e3))
            raw = RawReader(s, payload)
            try:
                with raw.watchdog():
                    for _ in range(T.WARMUP_STEPS):
                        raw.step()
                    p0 = player.cpu_times()
                    seconds, me = measure(steps, raw.step)
                    p1 = player.cpu_times()
                raw.check(payload)
            finally:
                raw.close()
            lines.append(row(case, placement, "raw reader", steps, seconds, me, p1.user - p0.user,
                             p1.system - p0.system, None, None))
    finally:
        pin.restore()
    return lines


class RawReader:
    """The ceiling column's reader on a session's pipes (the session stays idle meanwhile)."""

    def __init__(self, session: renderd.Session, payload: bytes) -> None:
        channel = session.channel
        self.rfd = os.open(channel.server_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(self.rfd, True)
        try:
            self.wfd = T.open_writer(channel.client_path, session.process, T.STEP_TIMEOUT, "the player")
        except BaseException:
            os.close(self.rfd)
            raise
        # The request that ``payload`` (captured by ``transport.capture_answer``) answers: the player answers
        # it with the same bytes every time.
        self.request = T._request(msgpack.unpackb(payload[5 : 5 + int.from_bytes(payload[1:5], "big")])["sequenceId"])
        self.total = len(payload)
        self.views = [memoryview(bytearray(self.total)) for _ in range(2)]
        self.turn = 0
        self.steps = 0

    def step(self) -> None:
        os.write(self.wfd, self.request)
        self.turn ^= 1
        view = self.views[self.turn]
        got = 0
        while got < self.total:
            n = os.readv(self.rfd, [view[got:]])
            if not n:
                raise T.PeerGone("the player closed server.pipe under the raw reader")
            got += n
        self.steps += 1

    @contextlib.contextmanager
    def watchdog(self) -> Iterator[None]:
        """Bound the blocking reads (no deadline per step, to keep the column's cost the pipe's): a timer fires
        every ``STEP_TIMEOUT`` seconds, and a step that has not ended since the last one (a player that hangs,
        or a reader fallen out of step with answers of another length) ends the column with an error."""
        seen = [-1]

        def tick(signum: int, frame: Any) -> None:
            if self.steps == seen[0]:
                raise T.NoCeiling(f"no answer of {self.total} bytes within {T.STEP_TIMEOUT:g} s under the raw reader "
                                  "(the player hung, or its answers are not the captured one's length)")
            seen[0] = self.steps

        previous = signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, T.STEP_TIMEOUT, T.STEP_TIMEOUT)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def check(self, payload: bytes) -> None:
        """The last two answers were the captured one, byte for byte (else the column measured something else)."""
        if any(bytes(v) != payload for v in self.views):
            raise T.NoCeiling("the player's answers differ from the captured one (it does not answer a repeated "
                              "request with the same bytes)")

    def close(self) -> None:
        os.close(self.wfd)
        os.close(self.rfd)


def row(case: T.Case, placement: str, client: str, steps: int, seconds: float, me: list[float],
        player_user: float, player_sys: float, send_us: float | None, recv_us: float | None) -> str:
    us = 1e6 / steps
    phases = f"{send_us:.0f} / {recv_us:.0f}" if send_us is not None else "-"
    return (f"| {case.label} | {placement} | {client} | {steps / seconds:.0f} | {me[0] * us:.0f} + {me[1] * us:.0f} | "
            f"{player_user * us:.0f} + {player_sys * us:.0f} | {me[2] / steps:.2f} / {me[3] / steps:.2f} | {phases} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="depth300", choices=sorted(T.CASES), help="default depth300")
    p.add_argument("--placements", default="same,different", help="comma-separated: same, different")
    p.add_argument("--rounds", type=int, default=3, help="rounds per placement (default 3)")
    p.add_argument("--steps", type=int, default=3000, help="steps measured per client and round (default 3000)")
    args = p.parse_args(argv)
    placements = [x.strip() for x in args.placements.split(",") if x.strip()]
    for placement in placements:
        if placement not in T.PLACEMENTS:  # cpus_for() would measure any other word as "different"
            p.error(f"unknown placement {placement!r}; expected {' or '.join(T.PLACEMENTS)}")
    if not placements:
        p.error(f"--placements names no placement; expected {' or '.join(T.PLACEMENTS)}")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, not {args.rounds}")
    if args.steps < 1:
        p.error(f"--steps must be at least 1, not {args.steps}")
    case = T.CASES[args.case]
    payload = T.capture_answer(case)
    print(f"# {T.cpu_model()}; {len(os.sched_getaffinity(0))} CPUs; load average {os.getloadavg()[0]:.2f} at start")
    print("| case | CPUs | client | steps/s | client us/step: user + kernel | player us/step: user + kernel | "
          "client switches/step: voluntary / involuntary | send / recv median us |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for _ in range(args.rounds):
        for placement in placements:
            try:
                lines = one_round(case, placement, args.steps, payload)
            except (renderd.RenderdError, T.PeerGone, T.NoCeiling) as exc:  # (the run goes on; noted, exit 1)
                failed += 1
                first = str(exc).split("\n", 1)[0]
                lines = [f"| {case.label} | {placement} | (failed: {type(exc).__name__}: {first}) |"]
            for line in lines:
                print(line, flush=True)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    if failed:
        print(f"# {failed} round(s) failed (noted in the table)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
