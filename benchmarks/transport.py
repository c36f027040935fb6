"""Transport throughput: renderd's FIFO client against the raw pipe limit and AI2-THOR's FifoServer.

Run on demand (not part of the test suite)::

    python benchmarks/transport.py                 # the full table (about five minutes on 2 CPUs)
    python benchmarks/transport.py --duration 1 --cases rgb300 --placements different

For each case the same reference player (``renderd-player --static-frame``) answers "Pass" actions, and
these clients are measured in lockstep (send an action, read the whole answer):

* ``raw``: the pipe's limit: a bare writer process answers each request with the *same bytes* the
  player sends (captured from it), and a bare reader reads them with blocking ``readv`` into one
  preallocated buffer; same 1 MiB pipe, no framing, no decoding, no deadlines;
* ``raw, frame kept`` (``--kept``): the same reader alternating two buffers, so that each frame stays
  intact while the next one is read, as renderd's events do (an agent may hold its last frame while it
  steps); at 1024x1024 on one CPU two 3 MiB destinations no longer stay in the CPU's caches;
* ``renderd, bare writer``: renderd's client (``FifoChannel`` + ``Session.step``, events built) against
  the bare writer: what the client itself costs, without the reference player's own per-step work;
* ``raw reader, player``: the ceiling for any client of this player: the raw reader (two buffers in turn)
  sending a fixed request to the real player and reading its answer of known length; the player's own
  per-step work is in, the client's framing, decoding and deadlines are not;
* ``renderd``: ``renderd.launch(...)`` and ``Session.step("Pass")`` (frames decoded into ``Event``s);
* ``ai2thor``: AI2-THOR's own ``FifoServer`` (``send`` + ``receive``, as its controller uses it), on the
  same player; the column is skipped when ``ai2thor`` is not importable.

A column that fails in a cell (its player crashed or timed out) is left out of that row with a note
under the table, the other columns go on, and the exit status is 1.

Client and player are pinned with ``os.sched_setaffinity``: ``same`` puts both on one CPU, ``different``
on two. Numbers are steps per second and MB/s of player -> client payload (whole messages). The ratios:
``renderd/ceiling`` is renderd against that ceiling; ``ceiling/AI2-THOR`` is the most any client could
gain over AI2-THOR's on this player.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import math
import os
import platform
import resource
import select
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

# Allow `python benchmarks/transport.py` from a checkout without installing.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack  # noqa: E402

import renderd  # noqa: E402
from renderd.process import PlayerProcess, player_argv, player_env, resolve_executable  # noqa: E402
from renderd.protocol import encode_action, encode_message  # noqa: E402
from renderd.transport.fifo import DEFAULT_PIPE_SIZE, FifoChannel, FifoPair, _set_pipe_size  # noqa: E402

ACTION = "Pass"
#: The player every column runs (``--player``): a name looked up as renderd.launch looks it up, or a path.
player_executable = "renderd-player"
#: Every column runs the same player with the same bytes: RGB at 3 bytes per pixel, as on Linux64
#: (renderd.launch would otherwise pick CloudRendering on a machine with Vulkan, whose RGB is RGBA).
PLAYER_ENV = {"RENDERD_PLATFORM": "Linux64"}
WARMUP_STEPS = 30
#: Minor page faults per step above which a row gets a note (a re-faulted 300x300 frame is about 66).
FAULT_NOTE_THRESHOLD = 10
START_TIMEOUT = 60.0
STEP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    width: int
    height: int
    depth: bool = False
    objects: int = 0
    #: renderd decodes metadata on first access; this makes its client read ``event.metadata`` every
    #: step, so the row compares the cost of a full decode too (AI2-THOR always decodes in full).
    read_metadata: bool = False
    #: agents in the scene (Initialize's agentCount); every agent's frames come with every step
    agents: int = 1

    def initialize(self) -> dict[str, Any] | None:
        """The Initialize action that sets the case up, or None when the player's defaults are the case."""
        params: dict[str, Any] = {}
        if self.depth:
            params["renderDepthImage"] = True
        if self.agents != 1:
            params["agentCount"] = self.agents
        return {"action": "Initialize", **params} if params else None

    def player_args(self) -> list[str]:
        args = ["--static-frame"]
        if self.objects:
            args += ["--metadata-objects", str(self.objects)]
        return args


CASES = {
    c.key: c
    for c in (
        Case("rgb300", "300x300 RGB", 300, 300),
        Case("depth300", "300x300 RGB+depth", 300, 300, depth=True),
        Case("rgb1024", "1024x1024 RGB", 1024, 1024),
        Case("objects300", "300x300 RGB, 100 objects", 300, 300, objects=100),
        Case("objects300read", "  same, metadata read", 300, 300, objects=100, read_metadata=True),
        Case("agents300", "300x300 RGB, 2 agents", 300, 300, agents=2),
    )
}

PLACEMENTS = ("same", "different")


@dataclass
class Result:
    steps_per_s: float
    bytes_per_step: int
    runs: list[float] = field(default_factory=list)
    #: minor page faults this process took per step (renderd's client columns only)
    faults_per_step: float | None = None

    @property
    def mb_per_s(self) -> float:
        return self.steps_per_s * self.bytes_per_step / 1e6


# -- CPU placement -------------------------------------------------------------------------------------


def cpus_for(placement: str) -> tuple[int, int] | None:
    """(client CPU, player CPU), or None when the placement is impossible here."""
    available = sorted(os.sched_getaffinity(0))
    if placement == "same":
        return available[0], available[0]
    if len(available) < 2:
        return None
    return available[0], available[1]


def pin_all_threads(pid: int, cpu: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except ProcessLookupError:
            pass


class Pinned:
    """Spawn children on ``player_cpu`` (they inherit it), then run this process on ``client_cpu``."""

    def __init__(self, client_cpu: int, player_cpu: int) -> None:
        self.client_cpu, self.player_cpu = client_cpu, player_cpu
        self.saved = os.sched_getaffinity(0)

    def spawning(self) -> None:
        os.sched_setaffinity(0, {self.player_cpu})

    def running(self, child_pid: int) -> None:
        pin_all_threads(child_pid, self.player_cpu)
        os.sched_setaffinity(0, {self.client_cpu})

    def restore(self) -> None:
        os.sched_setaffinity(0, self.saved)


def client_faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(step: Callable[[], Any], duration: float) -> tuple[float, int]:
    """Steps per second of ``step`` over about ``duration`` seconds (after a warm-up)."""
    for _ in range(WARMUP_STEPS):
        step()
    n = 0
    start = time.perf_counter()
    end = start + duration
    batch = 10
    while True:
        for _ in range(batch):
            step()
        n += batch
        now = time.perf_counter()
        if now >= end:
            return n / (now - start), n


class PeerGone(Exception):
    """The process at the other end of a raw reader's pipes exited or closed them (the column fails)."""


def peer_gone(proc: PlayerProcess, what: str) -> PeerGone:
    """A :class:`PeerGone` for ``what``, with how ``proc`` ended (waiting a moment for its exit)."""
    proc.wait_exit(1.0)
    return PeerGone(str(proc.crashed(what)).split("\n", 1)[0])


def open_writer(path: str, proc: PlayerProcess, timeout: float, who: str) -> int:
    """Open ``path`` (a FIFO) for writing once ``proc`` has it open for reading: a blocking descriptor,
    or :class:`PeerGone` if ``proc`` exits first, or TimeoutError after ``timeout`` seconds (a plain blocking
    open would wait forever for a peer that died before opening its end)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        else:
            os.set_blocking(fd, True)
            return fd
        if proc.exited():
            raise peer_gone(proc, f"{who} exited before opening {os.path.basename(path)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{who} did not open {path} within {timeout:g} s")
        time.sleep(0.005)


def wait_readable(fd: int, proc: PlayerProcess, timeout: float, who: str) -> None:
    """Wait until ``fd`` (the read end of a FIFO) has data or its writer closed it; :class:`PeerGone` if
    ``proc`` exits without writing, TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while not poller.poll(50):
        if proc.exited() and not poller.poll(0):
            raise peer_gone(proc, f"{who} exited before writing its first message")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{who} wrote nothing within {timeout:g} s")


# -- renderd ---------------------------------------------------------------------------------------------


def setup_session(session: renderd.Session, case: Case) -> None:
    init = case.initialize()
    if init is not None:
        event = session.step(dict(init))
        if not event:
            raise RuntimeError(f"the player refused {init}: {event.error_message}")


def session_stepper(session: renderd.Session, case: Case, action: Any = ACTION) -> Callable[[], Any]:
    """One step of renderd's client for ``case``: ``session.step(action)``, reading ``event.metadata`` as well
    when the case says so (a full decode every step, as AI2-THOR's client always does)."""
    if case.read_metadata:
        return lambda: session.step(action).metadata
    return lambda: session.step(action)


def run_renderd(case: Case, pin: Pinned, duration: float) -> Result:
    pin.spawning()
    with renderd.launch(
        player_executable,
        width=case.width,
        height=case.height,
        args=case.player_args(),
        env=PLAYER_ENV,
        start_timeout=START_TIMEOUT,
        step_timeout=STEP_TIMEOUT,
    ) as session:
        pin.running(session.pid)
        setup_session(session, case)
        faults = client_faults()
        rate, n = timed(session_stepper(session, case), duration)
        faults = (client_faults() - faults) / (n + WARMUP_STEPS)
        if case.depth:
            assert session.last_event.depth_frame is not None
        assert session.last_event.frame.shape == (case.height, case.width, 3)
        assert len(session.last_event.events) == case.agents
    return Result(rate, 0, faults_per_step=faults)


def capture_answer(case: Case) -> bytes:
    """The exact bytes the player sends in answer to one step of ``case``."""
    with renderd.launch(player_executable, width=case.width, height=case.height, args=case.player_args(),
                        env=PLAYER_ENV, start_timeout=START_TIMEOUT, step_timeout=STEP_TIMEOUT) as session:
        setup_session(session, case)
        session.send(ACTION)
        message = session.channel.recv(time.monotonic() + STEP_TIMEOUT)
        session.close()
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(message.fields))


# -- raw -------------------------------------------------------------------------------------------------


def raw_writer(server_path: str, client_path: str, payload_path: str, request_size: int) -> None:
    """The bare writer: for every request read from client.pipe, write the payload to server.pipe."""
    with open(payload_path, "rb") as f:
        payload = f.read()
    out = os.open(server_path, os.O_WRONLY)
    inp = os.open(client_path, os.O_RDONLY)
    request = bytearray(request_size)
    view = memoryview(request)
    while True:
        got = 0
        while got < request_size:
            n = os.readv(inp, [view[got:]])
            if n == 0:
                return
            got += n
        data = memoryview(payload)
        while data:
            n = os.write(out, data)
            data = data[n:]


def _request(seq: int = 1) -> bytes:
    return b"".join(bytes(b) for b in encode_action({"action": ACTION, "sequenceId": seq}))


def _spawn_raw_writer(pair: FifoPair, payload_path: str, request_size: int) -> PlayerProcess:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks.transport import raw_writer; "
        "raw_writer(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = [sys.executable, "-c", code, root, pair.server_path, pair.client_path, payload_path, str(request_size)]
    return PlayerProcess.spawn(argv, None, None)


def run_raw(case: Case, pin: Pinned, duration: float, payload: bytes, buffers: int = 1) -> Result:
    """The raw lockstep reader: blocking ``readv`` of each answer into one preallocated buffer, or, with
    ``buffers=2``, into two in turn (each frame stays intact while the next is read, as renderd's events
    do: an agent may hold the last frame while it steps)."""
    request = _request()
    with FifoPair.create() as pair, tempfile.NamedTemporaryFile() as tmp:
        tmp.write(payload)
        tmp.flush()
        pin.spawning()
        proc = _spawn_raw_writer(pair, tmp.name, len(request))
        fds: list[int] = []
        try:
            # Not a blocking open: it would wait forever for a writer that died before opening its end.
            rfd = os.open(pair.server_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            fds.append(rfd)
            _set_pipe_size(rfd, DEFAULT_PIPE_SIZE)
            wfd = open_writer(pair.client_path, proc, START_TIMEOUT, "the bare writer")
            fds.append(wfd)
            os.set_blocking(rfd, True)
            pin.running(proc.pid)
            bufs = [bytearray(len(payload)) for _ in range(buffers)]
            views = [memoryview(b) for b in bufs]
            total = len(payload)
            turn = [0]

            def step() -> None:
                os.write(wfd, request)
                turn[0] = (turn[0] + 1) % buffers
                view = views[turn[0]]
                got = 0
                while got < total:
                    n = os.readv(rfd, [view[got:]])
                    if not n:  # end of file: the writer is gone (without this check the loop would spin forever)
                        raise peer_gone(proc, "the bare writer closed server.pipe")
                    got += n

            try:
                rate, _ = timed(step, duration)
            except BrokenPipeError:
                raise peer_gone(proc, "the bare writer closed client.pipe") from None
            if any(bytes(b) != payload for b in bufs):
                raise AssertionError("raw reader received different bytes")
        finally:
            for fd in fds:
                os.close(fd)
            proc.stop(1.0)
    return Result(rate, len(payload))


class NoCeiling(Exception):
    """The player does not answer a repeated request with the same bytes, so the raw reader cannot drive it."""


def run_ceiling(case: Case, pin: Pinned, duration: float, payload: bytes) -> Result:
    """The best any client can do on the player: the raw reader of :func:`run_raw` (two buffers in
    turn, so frames are kept, as renderd's are) sending a fixed request to the real player and reading exactly
    the ``payload`` it answers with. No framing, no decoding, no deadline per step; the player's own work per
    step stays in. A reader that fell out of step with the player would block, so a timer bounds the run."""
    seq = msgpack.unpackb(payload[5 : 5 + int.from_bytes(payload[1:5], "big")])["sequenceId"]
    request = _request(seq)
    total = len(payload)
    pin.spawning()
    with renderd.launch(player_executable, width=case.width, height=case.height, args=case.player_args(),
                        env=PLAYER_ENV, start_timeout=START_TIMEOUT, step_timeout=STEP_TIMEOUT) as session:
        pin.running(session.pid)
        setup_session(session, case)
        session.step(ACTION)  # the player has opened client.pipe, so the open below cannot wait for it
        channel = session.channel
        # The session stays idle while this reader drives the player through its own (blocking) descriptors
        # on the same pipes, whose buffers the channel has already enlarged.
        rfd = os.open(channel.server_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(rfd, True)
        try:
            wfd = open_writer(channel.client_path, session.process, STEP_TIMEOUT, "the player")
        except BaseException:
            os.close(rfd)
            raise
        bufs = [bytearray(total) for _ in range(2)]
        views = [memoryview(b) for b in bufs]
        turn = [0]

        def step() -> None:
            os.write(wfd, request)
            turn[0] ^= 1
            view = views[turn[0]]
            got = 0
            while got < total:
                n = os.readv(rfd, [view[got:]])
                if not n:  # end of file: the player is gone (the loop would otherwise spin until the timer)
                    raise peer_gone(session.process, "the player closed server.pipe under the raw reader")
                got += n

        def out_of_step(signum: int, frame: Any) -> None:
            raise NoCeiling(f"the player's answers are not {total} bytes each; the reader fell out of step")

        previous = signal.signal(signal.SIGALRM, out_of_step)
        signal.setitimer(signal.ITIMER_REAL, duration + STEP_TIMEOUT)
        try:
            rate, _ = timed(step, duration)
        except BrokenPipeError:
            raise peer_gone(session.process, "the player closed client.pipe under the raw reader") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            os.close(wfd)
            os.close(rfd)
        if any(bytes(b) != payload for b in bufs):
            raise NoCeiling("the player's answers differ from the captured one (it does not answer a repeated "
                            "request with the same bytes)")
    return Result(rate, total)


def run_renderd_bare(case: Case, pin: Pinned, duration: float, payload: bytes) -> Result:
    """renderd's client (FifoChannel + Session, events built) against the bare writer: the client's own cost."""
    seq = msgpack.unpackb(payload[5 : 5 + int.from_bytes(payload[1:5], "big")])["sequenceId"]
    request = _request(seq)
    with FifoPair.create() as pair, tempfile.NamedTemporaryFile() as tmp:
        tmp.write(payload)
        tmp.flush()
        channel = FifoChannel(pair.server_path, pair.client_path)
        pin.spawning()
        proc = _spawn_raw_writer(pair, tmp.name, len(request))
        channel.attach(proc)
        with renderd.Session(channel, process=proc, stop_grace=1.0) as session:
            pin.running(proc.pid)
            action = {"action": ACTION, "sequenceId": seq}
            faults = client_faults()
            rate, n = timed(session_stepper(session, case, action), duration)
            faults = (client_faults() - faults) / (n + WARMUP_STEPS)
            assert session.last_event.frame.shape == (case.height, case.width, 3)
    return Result(rate, len(payload), faults_per_step=faults)


# -- AI2-THOR --------------------------------------------------------------------------------------------


def ai2thor_available(module: str = "ai2thor.fifo_server") -> bool:
    """Whether AI2-THOR's ``module`` imports here (its column is skipped otherwise)."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def ai2thor_stepper(server: Any, case: Case) -> Callable[[], None]:
    """Set ``case`` up through an AI2-THOR server (FIFO or WSGI) whose player is ready; return one step as
    AI2-THOR's controller takes it (``send`` + ``receive``)."""
    init = case.initialize()
    if init is not None:
        server.send(dict(init))
        server.receive()

    def step() -> None:
        server.send({"action": ACTION})
        server.receive()

    return step


def check_ai2thor_event(server: Any, case: Case) -> None:
    """The last event AI2-THOR's server decoded holds the frames ``case`` asks for."""
    event = server.last_event
    # (With several agents AI2-THOR's server gives a MultiAgentEvent, which has each agent's event in events.)
    assert len(event.events) == case.agents
    for agent in event.events:
        assert agent.frame.shape == (case.height, case.width, 3)
        if case.depth:
            assert agent.depth_frame is not None


def run_ai2thor(case: Case, pin: Pinned, duration: float) -> Result:
    import ai2thor.fifo_server

    server = ai2thor.fifo_server.FifoServer(width=case.width, height=case.height, timeout=STEP_TIMEOUT)
    proc: PlayerProcess | None = None
    try:
        server.start()
        params = server.unity_params()
        env = player_env(
            None, server_pipe=params["fifo_server_pipe_path"], client_pipe=params["fifo_client_pipe_path"],
            extra=PLAYER_ENV,
        )
        argv = player_argv(
            resolve_executable(player_executable), width=case.width, height=case.height,
            extra_args=case.player_args(),
        )
        pin.spawning()
        proc = PlayerProcess.spawn(argv, env, None)
        server.unity_proc = proc._popen
        # FifoServer opens its pipes when it first uses them, with blocking opens that wait forever for a
        # player that died before opening its end: open them for it (the same file objects it would make).
        rfd = os.open(server.server_pipe_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        server.server_pipe = os.fdopen(rfd, "rb")
        wait_readable(rfd, proc, START_TIMEOUT, "the player")
        os.set_blocking(rfd, True)
        server.receive()
        server.client_pipe = os.fdopen(open_writer(server.client_pipe_path, proc, START_TIMEOUT, "the player"), "wb")
        pin.running(proc.pid)
        step = ai2thor_stepper(server, case)
        step()
        rate, _ = timed(step, duration)
        check_ai2thor_event(server, case)
    except Exception as exc:
        if proc is not None and not isinstance(exc, PeerGone) and proc.exited():
            raise peer_gone(proc, f"the player exited under AI2-THOR's FifoServer ({exc})") from exc
        raise
    finally:
        for pipe in (server.client_pipe, server.server_pipe):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:  # a buffered writer flushing into a pipe the player has left
                    pass
        if proc is not None:
            proc.stop(1.0)
        server.tmp_dir.cleanup()
    return Result(rate, 0)


# -- the table -------------------------------------------------------------------------------------------


#: Each column's header, for the notes.
COLUMNS = {
    "raw": "raw lockstep",
    "kept": "raw, frame kept",
    "bare": "renderd, bare writer",
    "ceiling": "raw reader, player",
    "renderd": "renderd",
    "ai2thor": "AI2-THOR FifoServer",
}


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def fmt(result: Result | None) -> str:
    if result is None:
        return "-"
    return f"{result.steps_per_s:8.0f} /s {result.mb_per_s:7.0f} MB/s"


def parse_cases_and_placements(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[Case], list[str]]:
    """The ``--cases`` and ``--placements`` of ``args`` (comma-separated), refusing unknown ones through ``p``,
    as well as a ``--duration`` that is not positive and a ``--repeat`` under 1."""
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    placements = [x.strip() for x in args.placements.split(",") if x.strip()]
    # A duration of 0 or less would still time one batch of steps and print it as a rate; no run or no case
    # would print an empty table and exit 0.
    if not args.duration > 0 or not math.isfinite(args.duration):
        p.error(f"--duration must be a positive number of seconds, not {args.duration:g}")
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, not {args.repeat}")
    if not keys:
        p.error(f"--cases names no case; expected one or more of {', '.join(CASES)}")
    if not placements:
        p.error(f"--placements names no placement; expected {' or '.join(PLACEMENTS)}")
    for key in keys:
        if key not in CASES:
            p.error(f"unknown case {key!r}; expected one of {', '.join(CASES)}")
    for placement in placements:
        if placement not in PLACEMENTS:  # cpus_for() would measure any other word as "different"
            p.error(f"unknown placement {placement!r}; expected {' or '.join(PLACEMENTS)}")
    return [CASES[k] for k in keys], placements


def main(argv: list[str] | None = None) -> int:
    global player_executable  # noqa: PLW0603 - one setting read by every column's runner
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=1.0, help="seconds measured per run (default 1)")
    p.add_argument("--repeat", type=int, default=3, help="runs per cell, interleaved; the median is reported")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {', '.join(CASES)}")
    p.add_argument("--placements", default=",".join(PLACEMENTS),
                   help="comma-separated: same (one CPU), different (two CPUs); default both")
    p.add_argument("--no-ai2thor", action="store_true", help="skip the AI2-THOR column")
    p.add_argument("--json", action="store_true", help="print the results as JSON as well")
    p.add_argument("--kept", action="store_true",
                   help="add the column 'raw, frame kept': the raw reader alternating two buffers, so each frame "
                   "stays intact while the next is read (as renderd's events do)")
    p.add_argument("--player", default="renderd-player",
                   help="the player program for every column (default renderd-player; e.g. another build of it)")
    args = p.parse_args(argv)
    player_executable = args.player

    cases, placements = parse_cases_and_placements(p, args)
    with_ai2thor = not args.no_ai2thor and ai2thor_available()
    print(f"# {cpu_model()}; {os.cpu_count()} CPUs; Linux {platform.release()}; Python {platform.python_version()}")
    print(f"# renderd {renderd.__version__}; pipe {DEFAULT_PIPE_SIZE // 1024} KiB; median of {args.repeat} interleaved"
          f" runs of {args.duration:g} s; action {ACTION!r} on {args.player} --static-frame; load average"
          f" {os.getloadavg()[0]:.2f} at start")
    if not with_ai2thor:
        print("# ai2thor not importable (or --no-ai2thor): AI2-THOR column skipped")
    kept_head = f" {'raw, frame kept':>24}" if args.kept else ""
    kept_ratio_head = f" {'renderd/kept':>12}" if args.kept else ""
    header = (f"{'case':<26} {'CPUs':<9} {'raw lockstep':>24}{kept_head} {'renderd, bare writer':>24}"
              f" {'raw reader, player':>24} {'renderd':>24} {'AI2-THOR FifoServer':>24} {'bare/raw':>9}"
              f" {'renderd/raw':>11}{kept_ratio_head} {'renderd/ceiling':>15} {'renderd/AI2-THOR':>16}"
              f" {'ceiling/AI2-THOR':>16}")
    print(header)
    print("-" * len(header))
    rows = []
    loads = [os.getloadavg()[0]]
    notes: list[str] = []
    failed = False
    for case in cases:
        try:
            payload = capture_answer(case)
        except Exception as exc:
            # The player could not even answer one step: no column of this case can run.
            print(f"{case.label:<26} {'-':<9} (skipped: the player failed: {first_line(exc)})", flush=True)
            failed = True
            continue
        for placement in placements:
            cpus = cpus_for(placement)
            if cpus is None:
                print(f"{case.label:<26} {placement:<9} (needs 2 CPUs)")
                continue
            pin = Pinned(*cpus)
            runners: dict[str, Callable[[], Result] | None] = {
                "raw": lambda: run_raw(case, pin, args.duration, payload),
                "kept": (lambda: run_raw(case, pin, args.duration, payload, buffers=2)) if args.kept else None,
                "bare": lambda: run_renderd_bare(case, pin, args.duration, payload),
                "ceiling": lambda: run_ceiling(case, pin, args.duration, payload),
                "renderd": lambda: run_renderd(case, pin, args.duration),
                "ai2thor": (lambda: run_ai2thor(case, pin, args.duration)) if with_ai2thor else None,
            }
            rates: dict[str, list[float]] = {name: [] for name in runners}
            faults: dict[str, list[float]] = {name: [] for name in runners}
            try:
                # Interleave the columns so that a burst of other load on the machine hits them alike.
                for _ in range(args.repeat):
                    for name, run in runners.items():
                        if run is not None:
                            try:
                                result = run()
                            except Exception as exc:
                                # One column's failure (a crashed player, a timeout) costs that cell only.
                                if isinstance(exc, NoCeiling):
                                    notes.append(f"# {case.label.strip()}, {placement}: no ceiling column: {exc}")
                                else:
                                    failed = True
                                    notes.append(f"# {case.label.strip()}, {placement}: column {COLUMNS[name]!r}"
                                                 f" failed: {type(exc).__name__}: {first_line(exc)}")
                                runners[name] = None  # for the rest of this row
                                rates[name].clear()
                                faults[name].clear()
                                continue
                            rates[name].append(result.steps_per_s)
                            if result.faults_per_step is not None:
                                faults[name].append(result.faults_per_step)
            finally:
                pin.restore()
            cells: dict[str, Result | None] = {
                name: Result(statistics.median(r), len(payload), r) if r else None for name, r in rates.items()
            }
            raw, bare, ours, theirs = cells["raw"], cells["bare"], cells["renderd"], cells["ai2thor"]
            bare_raw = f"{bare.steps_per_s / raw.steps_per_s:.0%}" if raw and bare else "-"
            vs_raw = f"{ours.steps_per_s / raw.steps_per_s:.0%}" if raw and ours else "-"
            vs_thor = f"{ours.steps_per_s / theirs.steps_per_s:.2f}x" if theirs and ours else "-"
            ceiling = cells["ceiling"]
            vs_ceiling = f"{ours.steps_per_s / ceiling.steps_per_s:.0%}" if ceiling and ours else "-"
            ceiling_thor = f"{ceiling.steps_per_s / theirs.steps_per_s:.2f}x" if theirs and ceiling else "-"
            kept = cells["kept"]
            kept_cell = f" {fmt(kept):>24}" if args.kept else ""
            kept_ratio = ""
            if args.kept:
                kept_ratio = f" {(f'{ours.steps_per_s / kept.steps_per_s:.0%}' if kept and ours else '-'):>12}"
            print(f"{case.label:<26} {placement:<9} {fmt(raw):>24}{kept_cell} {fmt(bare):>24} {fmt(ceiling):>24}"
                  f" {fmt(ours):>24} {fmt(theirs):>24} {bare_raw:>9} {vs_raw:>11}{kept_ratio} {vs_ceiling:>15}"
                  f" {vs_thor:>16} {ceiling_thor:>16}", flush=True)
            rows.append({
                "case": case.key, "label": case.label, "placement": placement, "bytes_per_step": len(payload),
                **{f"{k}_steps_per_s": (v.steps_per_s if v else None) for k, v in cells.items()},
                **{f"{k}_client_faults_per_step": statistics.median(v) for k, v in faults.items() if v},
            })
            faulty = [f"{k} {statistics.median(v):.0f}" for k, v in faults.items()
                      if v and statistics.median(v) >= FAULT_NOTE_THRESHOLD]
            if faulty:
                notes.append(f"# {case.label.strip()}, {placement}: renderd's client took minor page faults per step"
                             f" ({', '.join(faulty)}): its frame buffers were handed back to the kernel and re-faulted")
            loads.append(os.getloadavg()[0])
    print(f"# load average (1 min) {min(loads):.2f}-{max(loads):.2f} during the run, {loads[-1]:.2f} at the end")
    for note in notes:
        print(note)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
