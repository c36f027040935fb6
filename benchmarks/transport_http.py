"""HTTP transport throughput: renderd's HTTP path against its FIFO path and AI2-THOR's WsgiServer.

Run on demand (not part of the test suite)::

    python benchmarks/transport_http.py                    # the table (about two minutes on 2 CPUs)
    python benchmarks/transport_http.py --duration 1 --repeat 1 --cases rgb300 --placements different
    python benchmarks/transport_http.py --parsers          # the multipart splitter vs the multipart package

For each case the same reference player (``renderd-player --static-frame``, with RGB at 3 bytes per pixel
in every column: ``RENDERD_PLATFORM=Linux64``, as in ``benchmarks/transport.py``) answers "Pass" actions,
and three clients are measured in lockstep (send an action, receive the whole answer as an event):

* ``HTTP``: ``renderd.launch(transport="http")`` and ``Session.step("Pass")``: the player posts
  multipart frames to renderd's waitress server, the bridge hands them to the session in memory;
* ``FIFO``: ``renderd.launch()`` (named pipes), the same session code;
* ``waitress`` / ``cheroot`` (with ``--waitress`` / ``--cheroot``): renderd's HTTP application and
  bridge served by plain waitress (``waitress.create_server``) or cheroot (``cheroot.wsgi.Server``; the
  column is skipped, with a note, when cheroot is not installed) instead of renderd's own server: the
  measurement behind that choice;
* ``AI2-THOR``: AI2-THOR's own ``WsgiServer`` (``send`` + ``receive``, as its controller uses it), the
  same player posting to it; the column is skipped when ``ai2thor`` is not importable.

Client (with its server threads) and player are pinned with ``os.sched_setaffinity``: ``same`` puts both
on one CPU, ``different`` on two. The three clients run interleaved, ``--repeat`` times per cell, and
the median is reported, so that load from other processes hits all columns alike. Besides steps per
second, each cell gives the CPU time per step (user + system) of the client process (all its threads:
for HTTP that includes the server) and of the player: on a busy machine these vary far less than
wall-clock rates, and in lockstep their sum bounds the rate (the "(CPU)" column compares the sums).

A column that fails in a cell (its player crashed or timed out) is left out of that row with a note under
the table, the other columns go on, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402

import renderd  # noqa: E402
from benchmarks.transport import (  # noqa: E402
    ACTION,
    CASES,
    PLACEMENTS,
    PLAYER_ENV,
    START_TIMEOUT,
    STEP_TIMEOUT,
    WARMUP_STEPS,
    Case,
    Pinned,
    ai2thor_stepper,
    check_ai2thor_event,
    cpu_model,
    parse_cases_and_placements,
    cpus_for,
    pin_all_threads,
    session_stepper,
    setup_session,
)
from benchmarks.transport import ai2thor_available as fifo_ai2thor_available  # noqa: E402
from renderd.process import PlayerProcess, player_argv, player_env  # noqa: E402

DEFAULT_CASES = ("rgb300", "depth300")
COLUMNS = ("http", "fifo", "ai2thor", "waitress", "cheroot")
TITLES = {
    "http": "renderd HTTP",
    "fifo": "renderd FIFO",
    "ai2thor": "AI2-THOR WsgiServer",
    "waitress": "HTTP via waitress",
    "cheroot": "HTTP via cheroot",
}


@dataclass
class Cell:
    steps_per_s: float
    cpu_us_per_step: float
    player_cpu_us_per_step: float = 0.0
    runs: list[float] = field(default_factory=list)

    @property
    def total_cpu_us_per_step(self) -> float:
        return self.cpu_us_per_step + self.player_cpu_us_per_step


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def measure(step: Callable[[], Any], duration: float, player_pid: int) -> Cell:
    """Steps per second, and the CPU microseconds per step of this process and of the player, over about
    ``duration`` seconds."""
    for _ in range(WARMUP_STEPS):
        step()
    n = 0
    p0 = _cpu(player_pid)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    end = start + duration
    while True:
        for _ in range(10):
            step()
        n += 10
        now = time.perf_counter()
        if now >= end:
            break
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    p1 = _cpu(player_pid)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return Cell(n / (now - start), cpu / n * 1e6, (p1 - p0) / n * 1e6)


def check_renderd_event(event: renderd.Event, case: Case) -> None:
    """The last event of a renderd column holds what ``case`` asks for (as ``check_ai2thor_event`` checks
    AI2-THOR's): every agent's frame, and its depth frame with depth on."""
    assert len(event.events) == case.agents
    for agent in event.events:
        assert agent.frame.shape == (case.height, case.width, 3)
        if case.depth:
            assert agent.depth_frame is not None


def _pin_self(pin: Pinned, child_pid: int) -> None:
    pin.running(child_pid)
    pin_all_threads(os.getpid(), pin.client_cpu)  # the server's threads too


def run_session(case: Case, pin: Pinned, duration: float, transport: str) -> Cell:
    pin.spawning()
    with renderd.launch(
        width=case.width,
        height=case.height,
        transport=transport,
        args=case.player_args(),
        env=PLAYER_ENV,
        start_timeout=START_TIMEOUT,
        step_timeout=STEP_TIMEOUT,
    ) as session:
        _pin_self(pin, session.pid)
        setup_session(session, case)
        cell = measure(session_stepper(session, case), duration, session.pid)
        check_renderd_event(session.last_event, case)
    pin.restore()
    return cell


def _measure_on(registry: Any, port: int, case: Case, pin: Pinned, duration: float) -> Cell:
    """Launch the reference player against ``registry`` served on 127.0.0.1:``port`` and measure it."""
    from renderd.client import launch_player

    bridge = registry.register()
    endpoint = player_env({}, server_type="WSGI", host="127.0.0.1", port=port, token=bridge.token)
    with launch_player(bridge, endpoint, width=case.width, height=case.height, args=case.player_args(),
                       env=PLAYER_ENV, start_timeout=START_TIMEOUT, step_timeout=STEP_TIMEOUT) as session:
        _pin_self(pin, session.pid)
        setup_session(session, case)
        cell = measure(session_stepper(session, case), duration, session.pid)
        check_renderd_event(session.last_event, case)
    return cell


def run_waitress(case: Case, pin: Pinned, duration: float) -> Cell:
    """renderd's application and bridge behind plain waitress (the daemon-independent WSGI path)."""
    import waitress
    import waitress.wasyncore

    from renderd.transport.http import PlayerBridgeRegistry, make_player_app

    pin.spawning()
    registry = PlayerBridgeRegistry()
    server = waitress.create_server(
        make_player_app(registry), host="127.0.0.1", port=0, threads=3, channel_request_lookahead=1,
        inbuf_overflow=registry.max_request_size + 1, max_request_body_size=registry.max_request_size + 1,
        recv_bytes=256 * 1024, ident="renderd",
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        cell = _measure_on(registry, server.effective_port, case, pin, duration)
    finally:
        registry.close()
        server.trigger.pull_trigger(lambda: waitress.wasyncore.close_all(server._map, ignore_all=True))
        thread.join(5.0)
        server.task_dispatcher.shutdown(timeout=5.0)
        pin.restore()
    return cell


def run_cheroot(case: Case, pin: Pinned, duration: float) -> Cell:
    """renderd's application and bridge behind cheroot's thread-pool WSGI server."""
    import cheroot.wsgi

    from renderd.transport.http import PlayerBridgeRegistry, make_player_app

    pin.spawning()
    registry = PlayerBridgeRegistry()
    server = cheroot.wsgi.Server(("127.0.0.1", 0), make_player_app(registry), numthreads=3)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        cell = _measure_on(registry, server.bind_addr[1], case, pin, duration)
    finally:
        registry.close()
        server.stop()
        thread.join(5.0)
        pin.restore()
    return cell


def ai2thor_available() -> bool:
    return fifo_ai2thor_available("ai2thor.wsgi_server")


def run_ai2thor(case: Case, pin: Pinned, duration: float) -> Cell:
    import ai2thor.wsgi_server

    pin.spawning()
    server = ai2thor.wsgi_server.WsgiServer("127.0.0.1", timeout=STEP_TIMEOUT, width=case.width, height=case.height)
    server.client_token = "benchmark-token"
    server.start()
    host, port = server.wsgi_server.socket.getsockname()[:2]
    env = player_env(None, server_type="WSGI", host=host, port=port, token=server.client_token, extra=PLAYER_ENV)
    argv = player_argv("renderd-player", width=case.width, height=case.height, extra_args=case.player_args())
    proc = None
    try:
        proc = PlayerProcess.spawn(argv, env, None)  # (in the try: a failed spawn stops the server too)
        server.unity_proc = proc._popen
        server.receive(timeout=START_TIMEOUT)
        _pin_self(pin, proc.pid)
        cell = measure(ai2thor_stepper(server, case), duration, proc.pid)
        check_ai2thor_event(server, case)
    finally:
        if proc is not None:
            proc.stop(1.0)
        # Its request handler waits for an action with no timeout: give it one, then stop the server.
        try:
            server.response_queue.put_nowait({})
        except queue.Full:
            pass
        stopper = threading.Thread(target=server.wsgi_server.shutdown, daemon=True)
        stopper.start()
        stopper.join(2.0)
        server.wsgi_server.server_close()
        pin.restore()
    return cell


def parsers() -> None:
    """The multipart splitter against the ``multipart`` package on the reference player's RGB+depth frame."""
    import secrets
    import timeit

    import multipart as mp

    from renderd.player.core import Player
    from renderd.player.http_link import build_form
    from renderd.transport.multipart import split_multipart

    player = Player(static_frame=True)
    player.first_message()
    md, images = player.handle({"action": "Initialize", "renderDepthImage": True})
    boundary = secrets.token_hex(20).encode()
    body = bytearray(b"".join(bytes(memoryview(b).cast("B")) for b in build_form(md, images, "t" * 43, boundary)))
    raw = bytes(body)
    hints = [q.size for q in split_multipart(body, boundary)]

    def push(chunk: int) -> Callable[[], dict]:
        def run() -> dict:
            parser = mp.PushMultipartParser(boundary, content_length=len(raw))
            out: dict = {}
            for i in range(0, len(raw), chunk):
                for event in parser.parse(raw[i : i + chunk]):
                    if isinstance(event, mp.MultipartSegment):
                        segment, chunks = event, []
                    elif event is None:
                        out[segment.name] = b"".join(chunks)
                    else:
                        chunks.append(event)
            for _ in parser.parse(b""):
                pass
            return out

        return run

    def best(fn: Callable[[], Any]) -> float:
        return min(timeit.repeat(fn, number=200, repeat=7)) / 200 * 1e6

    print(f"# one body of {len(body)} bytes, {len(hints)} parts; best of 7 x 200 runs")
    print(f"split_multipart, every byte searched   {best(lambda: split_multipart(body, boundary)):8.1f} us")
    print(f"split_multipart, size hints            {best(lambda: split_multipart(body, boundary, size_hints=hints)):8.1f} us")
    print(f"multipart.PushMultipartParser, 1 chunk {best(push(len(raw))):8.1f} us")
    print(f"multipart.PushMultipartParser, 64 KiB  {best(push(65536)):8.1f} us")


def fmt(cell: Cell | None) -> str:
    if cell is None:
        return "-"
    return f"{cell.steps_per_s:5.0f}/s {cell.cpu_us_per_step:5.0f}+{cell.player_cpu_us_per_step:4.0f}us"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=2.0, help="seconds measured per run (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved runs per cell; the median is reported")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated: {', '.join(CASES)}")
    p.add_argument("--placements", default=",".join(PLACEMENTS),
                   help="comma-separated: same (one CPU), different (two CPUs); default both")
    p.add_argument("--no-ai2thor", action="store_true", help="skip the AI2-THOR column")
    p.add_argument("--waitress", action="store_true", help="add the column: renderd's app served by waitress")
    p.add_argument("--cheroot", action="store_true", help="add the column: renderd's app served by cheroot")
    p.add_argument("--json", action="store_true", help="print the results as JSON as well")
    p.add_argument("--parsers", action="store_true",
                   help="only time the multipart splitter against the multipart package")
    args = p.parse_args(argv)
    if args.parsers:
        parsers()
        return 0

    cases, placements = parse_cases_and_placements(p, args)
    with_ai2thor = not args.no_ai2thor and ai2thor_available()
    # cheroot is not a renderd dependency: its column is skipped, with a note, when it is not installed.
    with_cheroot = args.cheroot and fifo_ai2thor_available("cheroot.wsgi")
    import platform

    print(f"# {cpu_model()}; {os.cpu_count()} CPUs; Linux {platform.release()}; Python {platform.python_version()}")
    print(f"# renderd {renderd.__version__}; {args.duration:g} s per run, median of {args.repeat} interleaved runs;"
          f" action {ACTION!r} on renderd-player --static-frame, RGB 3 bytes per pixel;"
          " cells: steps/s, CPU us/step of the client process (all threads) + of the player")
    if not with_ai2thor:
        print("# ai2thor not importable (or --no-ai2thor): AI2-THOR column skipped")
    if args.cheroot and not with_cheroot:
        print("# cheroot not importable (pip install cheroot): its column skipped")
    header = (f"{'case':<20} {'CPUs':<9} {TITLES['http']:>22} {TITLES['fifo']:>22} {TITLES['ai2thor']:>22}"
              f" {'HTTP/AI2-THOR':>13} {'(CPU)':>6}" + (f" {TITLES['waitress']:>22}" if args.waitress else "")
              + (f" {TITLES['cheroot']:>22}" if args.cheroot else ""))
    print(header)
    print("-" * len(header))
    rows = []
    notes: list[str] = []
    failed = False
    for case in cases:
        for placement in placements:
            cpus = cpus_for(placement)
            if cpus is None:
                print(f"{case.label:<20} {placement:<9} (needs 2 CPUs)")
                continue
            pin = Pinned(*cpus)
            runs: dict[str, list[Cell]] = {c: [] for c in COLUMNS}
            runners: dict[str, Callable[[], Cell] | None] = {
                "http": lambda: run_session(case, pin, args.duration, "http"),
                "fifo": lambda: run_session(case, pin, args.duration, "fifo"),
                "ai2thor": (lambda: run_ai2thor(case, pin, args.duration)) if with_ai2thor else None,
                "waitress": (lambda: run_waitress(case, pin, args.duration)) if args.waitress else None,
                "cheroot": (lambda: run_cheroot(case, pin, args.duration)) if with_cheroot else None,
            }
            try:
                for _ in range(args.repeat):
                    for name, run in runners.items():
                        if run is not None:
                            try:
                                runs[name].append(run())
                            except Exception as exc:
                                # One column's failure (a crashed player, a timeout) costs that cell only.
                                failed = True
                                text = (str(exc).strip().splitlines() or [""])[0]
                                notes.append(f"# {case.label.strip()}, {placement}: column {TITLES[name]!r} failed:"
                                             f" {type(exc).__name__}: {text}")
                                runners[name] = None  # for the rest of this row
                                runs[name].clear()
            finally:
                pin.restore()
            cells: dict[str, Cell | None] = {}
            for name, results in runs.items():
                if not results:
                    cells[name] = None
                    continue
                cells[name] = Cell(
                    statistics.median(r.steps_per_s for r in results),
                    statistics.median(r.cpu_us_per_step for r in results),
                    statistics.median(r.player_cpu_us_per_step for r in results),
                    [round(r.steps_per_s) for r in results],
                )
            ours, theirs = cells["http"], cells["ai2thor"]
            vs_thor = f"{ours.steps_per_s / theirs.steps_per_s:12.2f}x" if theirs and ours else "-"
            vs_cpu = f"{theirs.total_cpu_us_per_step / ours.total_cpu_us_per_step:5.2f}x" if theirs and ours else "-"
            print(f"{case.label:<20} {placement:<9} {fmt(ours):>22} {fmt(cells['fifo']):>22} {fmt(theirs):>22}"
                  f" {vs_thor:>13} {vs_cpu:>6}" + (f" {fmt(cells['waitress']):>22}" if args.waitress else "")
                  + (f" {fmt(cells['cheroot']):>22}" if args.cheroot else ""), flush=True)
            rows.append({
                "case": case.key, "placement": placement,
                **{f"{k}_steps_per_s": (v.steps_per_s if v else None) for k, v in cells.items()},
                **{f"{k}_cpu_us_per_step": (v.cpu_us_per_step if v else None) for k, v in cells.items()},
                **{f"{k}_player_cpu_us_per_step": (v.player_cpu_us_per_step if v else None) for k, v in cells.items()},
                **{f"{k}_runs": (v.runs if v else None) for k, v in cells.items()},
            })
    for note in notes:
        print(note)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
