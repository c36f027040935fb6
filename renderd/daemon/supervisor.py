"""Supervision: keep each environment at its wanted number of ready players, and survive what they do.

One loop (:meth:`Supervisor.run`, on the daemon's main thread) does everything that changes a player:
it spawns, reads the first frame, reaps, restarts with backoff, recycles, and reconciles toward the
declared configuration. Other threads (the control API) only change *wanted* state and leases under
:attr:`Supervisor.lock` and wake the loop through a self-pipe; signal handlers only write their number
into the same pipe (``signal.set_wakeup_fd``). The loop sleeps in one ``epoll`` over: the wake-up pipe,
each starting player's ``server.pipe``, each player's pidfd and each lease holder's pidfd.

A player's life::

    (spawn) STARTING --first frame decoded, client.pipe opened--> READY <--release--> LEASED
       ^        |  exit / undecodable frame / start_timeout                 |  unclean end: recycle
       |        v                                                           v
       +---- BACKOFF (exponential) ...after max_boot_failures... FAILED    STOPPING --reaped--> (spawn)

Pipes across leases: the daemon opens ``server.pipe`` for reading *before* it spawns the player (so the
player's open never blocks), reads and decodes the readiness message itself, then opens ``client.pipe``
for writing. It holds both ends for the player's whole life and never touches them again, so a client
that disconnects never gives the player end of file or EPIPE; and since the daemon is only a *reader* of
``server.pipe``, a client reading sees end of file when the player dies.

Players are spawned from the loop thread only: ``PR_SET_PDEATHSIG`` fires when the spawning *thread*
exits, and the loop thread lives as long as the daemon. The loop does it after a pass, without the lock (fork and
exec take milliseconds, and as long as a hung mount lasts for a program on one), as it notes the players' helpers
and gathers what a player silent at its start_timeout did with its pipes (walks of /proc). Platform selection,
which may probe the machine for seconds, runs on a short-lived thread per environment without the lock (a managed
Xvfb is forked by the platforms' own long-lived spawner thread); it stores its result under the lock and wakes the
loop. So does
replacing a managed display that died, which starts a new Xvfb; and giving back a selection nothing uses any
more, which stops its managed Xvfb when it was the last user (seconds, if that Xvfb hangs).

Nothing a player sends and no failing signal handler or callback ends the loop: an unexpected error on a
first frame is that player's boot failure, and a handler's error is logged with its traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import fcntl
import logging
import math
import os
import select
import selectors
import signal
import termios
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable

from renderd.config import RESTART_KEYS, Config, DaemonConfig, EnvironmentConfig
from renderd.daemon.leases import Lease, LeaseEnd, open_client_pidfd
from renderd.daemon.metrics import Metrics
from renderd.errors import (
    LeaseError,
    PlatformError,
    ProtocolError,
    RenderdError,
    describe_exit,
    os_error_message,
)
from renderd.event import FrameAssembler
from renderd.process import (
    KILL_REAP_TIMEOUT,
    PlayerProcess,
    player_argv,
    player_env,
    poll_readable,
    process_start_ticks,
)
from renderd.protocol import NEED_DATA, FieldType, decode_metadata, encode_action
from renderd.transport.fifo import FifoChannel, FifoPair

__all__ = ["State", "Player", "Environment", "Supervisor", "NotFound"]

log = logging.getLogger(__name__)

#: How long the loop sleeps at most when nothing is due (it wakes at once for anything that happens).
LOOP_IDLE = 1.0
#: Pause between attempts to open ``client.pipe`` while the player has not opened its reading end.
CLIENT_PIPE_RETRY = 0.01
#: The action a health check sends an idle player (``health_interval``): it changes nothing in a scene.
HEALTH_CHECK_ACTION = "Pass"
#: sequenceId of a player's first health check (the next ones count up, wrapping after HEALTH_CHECK_IDS): far
#: from the 1, 2, 3... of a client's actions, so that a late answer to its last client's action, read during a
#: check, is never taken for the check's answer; within a 32-bit int, as a Unity build's sequenceId is.
HEALTH_CHECK_FIRST_ID = 2_000_000_000
HEALTH_CHECK_IDS = 100_000_000
#: Extra seconds, beyond ``stop_grace``, that a graceful stop of the whole daemon waits for reaping.
SHUTDOWN_SLACK = 5.0
#: Extra seconds, beyond its grace and KILL_REAP_TIMEOUT, that the end of a shutdown waits for a player's stop
#: under way (scanning /proc for its group, a busy machine) before it leaves that stop to its thread.
STOP_BOUND_SLACK = 2.0
#: Grace (seconds) that what is left of an exited player's process group gets between SIGTERM and SIGKILL.
REAP_CLEANUP_GRACE = 0.1
#: Log lines of a player quoted in its failure reason.
REASON_LOG_LINES = 8
#: Longest, in seconds, a stopping daemon waits for a platform selection under way (its probes end within
#: their own timeouts, X11_PROBE_TIMEOUT for an X server) after SHUTDOWN_SLACK.
SELECTION_STOP_WAIT = 60.0
#: Longest, in seconds, a stopping daemon waits for platform selections it released to be given back (the last
#: user of a managed Xvfb stops it: SIGTERM, its stop grace, SIGKILL, reap: about 11 s at most).
RELEASE_STOP_WAIT = 20.0
#: After a booting player's server.pipe ends before its first frame, how long (seconds) its exit is waited
#: for, so the boot failure gives its exit code or signal and log: the end of file often comes first.
EOF_EXIT_WAIT = 1.0
#: While a lease request waits for a player, how often (seconds) it asks whether its client hung up.
HANG_UP_POLL_INTERVAL = 0.25
#: When a player on a managed X display did not start within start_timeout, how long (seconds) that display
#: gets to answer a connection: one that does not is hung (stopped, wedged; it would fail every player
#: started on it, and reloads would keep it), so it is killed and replaced as a dead one.
DISPLAY_CHECK_TIMEOUT = 10.0
#: Ended leases remembered (newest last), so that a holder can still ask how its lease ended and how its
#: player exited (``GET /v1/leases/{id}``) after the daemon reaped the player.
ENDED_LEASES_KEPT = 256


class State(str, enum.Enum):
    STARTING = "STARTING"  # spawned; waiting for its first frame and for it to open client.pipe
    READY = "READY"  # idle, leasable
    LEASED = "LEASED"  # held by a client
    STOPPING = "STOPPING"  # asked to stop; waiting to reap it
    BACKOFF = "BACKOFF"  # exited; waiting before the next start
    FAILED = "FAILED"  # given up after max_boot_failures (reason says why); retried on reload
    EXITED = "EXITED"  # exited and not restarted by its restart policy; restarted when its environment changes


class NotFound(RenderdError):
    """An environment or lease that does not exist (the control API answers 404)."""


class _SelectionPending(Exception):
    """The environment's platform is being selected (on its own thread): spawn once it is known."""


@dataclass
class _Stop:
    """Why a player is being stopped and what follows once it is reaped."""

    reason: str
    then: str  # "respawn" (at once), "backoff", "remove" (slot goes away), "none" (nothing: shutdown)
    boot_failure: bool = False
    lease: Lease | None = None  # the lease whose end recycles the player
    #: The stop follows a failure that the player's own death can cause (its HTTP connection closed as it
    #: died): a lease it ends is told why (``ended_reason``) only once the player is reaped and the stop is
    #: what ended it; a player that died of something else first is a crash under that lease.
    after_failure: bool = False
    ended: Lease | None = None  # (set by _begin_stop, with after_failure) the lease this stop ended


class Player:
    """One player slot of an environment, and the process currently filling it (if any)."""

    def __init__(self, environment: Environment, index: int) -> None:
        self.environment = environment
        self.index = index
        self.state = State.BACKOFF
        self.proc: PlayerProcess | None = None
        self.config: EnvironmentConfig = environment.config
        self.selection: Any = None
        self.display: Any = None  # the managed display (if any) the running process was started on
        #: ``(selection, platform env, platform args, managed display)`` of its latest start, kept while the slot
        #: is outdated: while a rollout is held it restarts on its own configuration with them (see _keeps_config).
        self.launch: tuple[Any, dict[str, str], list[str], Any] | None = None
        self.pair: FifoPair | None = None
        #: ``(device, inode)`` of its server.pipe and client.pipe when they were made: a lease checks that the
        #: paths still name them (a tmp cleaner may unlink them while the player runs).
        self.pipe_ids: tuple[tuple[int, int] | None, tuple[int, int] | None] | None = None
        self.holder: FifoChannel | None = None  # the daemon's reader of server.pipe
        self.writer_fd: int | None = None  # the daemon's writer of client.pipe
        self.assembler: FrameAssembler | None = None
        self.log_path: str | None = None
        self.http_token: str | None = None
        self.http_bridge: Any = None
        self.started_at: float | None = None  # monotonic, at spawn
        self.ready_at: float | None = None
        self.deadline: float | None = None  # start deadline while STARTING; restart time while BACKOFF
        self.next_open: float = 0.0
        self.spawns = 0
        #: Times it was started again after its process exited or failed to start (a crash, a failed boot, a failed
        #: health check): counted, as renderd_player_restarts_total is, once the new process has started (_started),
        #: not while the restart is waited for. A restart that never happens (its environment removed, or changed, or
        #: the daemon stopped, while it waited) is not counted; nor is a start that failed (the next one counts).
        self.restarts = 0
        #: A restart scheduled (_schedule_restart) whose process has not started yet: counted in ``restarts`` and
        #: renderd_player_restarts_total once it does (_started).
        self.restart_due = False
        self.boot_failures = 0  # consecutive
        self.backoff_failures = 0  # consecutive exits used for the backoff delay (see _schedule_restart)
        self.served = False  # leased at least once since its last spawn
        self.backoff_delay = 0.0  # the wait before its latest restart
        self.came_up = False  # it has been READY (since the slot was made): READY=1 does not wait for it again
        self.check_due: float | None = None  # READY: when its next health check is sent (set by the tick)
        #: READY: when the wait for its next health check began (its last check answered, its lease ended, it came
        #: up); the check is due health_interval after it, whatever interval a reload set meanwhile.
        self.check_from: float | None = None
        self.check_deadline: float | None = None  # a health check under way: when its answer is due
        self.check_sent = 0.0  # when the health check under way was sent (its answer is due step_timeout later)
        self.checks = 0  # health checks sent to it (each one's sequenceId)
        self.reason = ""
        self.returncode: int | None = None
        #: BACKOFF after its process exited on its own once ready: that exit's status, which its restart policy
        #: let it restart after (a change of ``restart`` may let it go instead: see _apply_restart_policy).
        self.restart_after: int | None = None
        self.lease: Lease | None = None
        self.stop: _Stop | None = None
        self.stop_done = threading.Event()
        self.retire = False  # scale down: remove the slot once it is free
        self.awaiting_platform = False  # BACKOFF until its environment's platform selection is done
        #: Set while STARTING when server.pipe ended before a first frame but the process has not exited
        #: yet: its exit, expected within EOF_EXIT_WAIT, is what gets classified (code or signal, log).
        self.eof_reason: str | None = None
        #: Set while STARTING once its start_timeout has passed with nothing read: ``(the reader of its server.pipe,
        #: the deadline that had passed, what it did with its pipes)``, gathered without the lock
        #: (Supervisor._gather_silences) for its boot failure; only for that reader and that deadline (a PUT that
        #: moves start_timeout meanwhile has it gathered again once the new one passes).
        self.silence: tuple[FifoChannel, float, str] | None = None
        #: Set (still BACKOFF) from when its start is prepared until the loop has started its process without the lock
        #: (Supervisor._run_spawns): that start's token.
        self.spawning: object | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def outdated(self) -> bool:
        return self.config.replaces_players(self.environment.config)

    @property
    def shown_state(self) -> str:
        """Its state as ``renderd status`` and the counts (``renderd_players``, an environment's ``states``) give
        it: STARTING for a slot BACKOFF only while its environment's platform is selected (about to start, nothing
        failed), its state otherwise."""
        if self.awaiting_platform and self.state == State.BACKOFF:
            return State.STARTING.value
        return self.state.value

    def to_dict(self) -> dict[str, Any]:
        now = time.monotonic()
        running = self.state in (State.STARTING, State.READY, State.LEASED, State.STOPPING)
        return {
            "index": self.index,
            "state": self.state.value,
            "pid": self.pid if running else None,
            "uptime": round(now - self.started_at, 3) if running and self.started_at is not None and self.proc else None,
            "restarts": self.restarts,
            "boot_failures": self.boot_failures,
            "reason": self.reason,
            "width": self.config.width,
            "height": self.config.height,
            "platform": _platform_name(self.selection),
            "log": self.log_path,
            "lease": self.lease.public() if self.lease else None,
            "retiring": self.retire,
            "outdated": self.outdated,
            # BACKOFF only because its environment's platform selection is under way: about to start, not failed.
            "awaiting_platform": self.awaiting_platform and self.state == State.BACKOFF,
        }


class Environment:
    """One declared environment: its wanted configuration and its player slots."""

    def __init__(self, config: EnvironmentConfig, source: str) -> None:
        self.config = config
        self.source = source  # "file" or "api": what a reload may change
        self.players: list[Player] = []
        self.removing = False
        #: How many times it was removed (DELETE, a reload): a lease request that began before a removal is refused
        #: even if the environment was declared again since (it asked for a player of the removed declaration).
        self.removals = 0
        self.waiters: deque[object] = deque()
        self.selection: Any = None
        self.selection_for: EnvironmentConfig | None = None
        # Platform selection runs on a thread of its own, never with the supervisor's lock held (a probe of
        # a hung X server takes its whole timeout): the thread while it runs.
        self.selecting: threading.Thread | None = None
        #: ``(selection, its managed display, [(env, args) of each GPU slot])``: what ``selection.for_instance``
        #: gave on the selection's thread, for that display. On the loop, for_instance would start a new Xvfb
        #: (seconds, with the lock held) if the display died since it was found alive: it is never called there.
        self.prepared: tuple[Any, Any, list[tuple[dict[str, str], list[str]]]] | None = None
        #: Why the rollout of a changed configuration is held (a slot of the new one has not come up), for the
        #: status line; None when it is not held. ``held_key``: (that slot's index, "held", "failed" or "retrying").
        self.held: str | None = None
        self.held_key: tuple[int, str] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    def live(self) -> list[Player]:
        return [p for p in self.players if not p.retire]

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for p in self.players:  # (as renderd status and renderd_players count them: see Player.shown_state)
            state = p.shown_state
            counts[state] = counts.get(state, 0) + 1
        return {
            "name": self.name,
            "source": self.source,
            "removing": self.removing,
            "wanted": 0 if self.removing else self.config.instances,
            "ready": counts.get("READY", 0),
            "leased": counts.get("LEASED", 0),
            "states": counts,
            "waiting_clients": len(self.waiters),
            "config": self.config.redacted(),  # shown to anyone who asks: no secret values
            "players": [p.to_dict() for p in self.players],
        }


def _platform_name(selection: Any) -> str | None:
    if selection is None:
        return None
    for attr in ("platform", "name"):
        value = getattr(selection, attr, None)
        if isinstance(value, str):
            return value
        name = getattr(value, "name", None)
        if isinstance(name, str):
            return name
    return None


def _restarts(policy: str, code: int) -> bool:
    """Whether the ``restart`` policy ``policy`` restarts a player that exited on its own with status ``code``."""
    return policy == "always" or (policy == "on-failure" and code != 0)


def _check_id(n: int) -> int:
    """The sequenceId of a player's health check number ``n`` (1, 2, ...)."""
    return HEALTH_CHECK_FIRST_ID + (n - 1) % HEALTH_CHECK_IDS


def _pending_bytes(fd: int | None) -> int:
    """Bytes waiting in the pipe behind ``fd`` (FIONREAD works on either end of a FIFO)."""
    if fd is None:
        return 0
    buf = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buf, True)
    except OSError:
        return 0
    return int.from_bytes(buf, "little", signed=True)


class Supervisor:
    """Keeps environments at their wanted number of ready players; grants and ends leases.

    Construct, then call :meth:`run` on the thread that should own the players (it returns after
    :meth:`request_stop` once everything is stopped). Every public method is thread-safe.
    """

    def __init__(
        self,
        config: Config,
        *,
        players_dir: str,
        log_dir: str,
        platforms: Any,
        http: Any = None,
        on_ready: Callable[[], None] | None = None,
        on_status: Callable[[str], None] | None = None,
        on_tick: Callable[[float], float | None] | None = None,
        signal_handlers: dict[int, Callable[[], None]] | None = None,
        file_group: int | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.file_group = file_group  # group id given the players' pipes and logs ([daemon] socket_group)
        self.changed = threading.Condition(self.lock)
        self.daemon_config: DaemonConfig = config.daemon
        self.environments: dict[str, Environment] = {}
        self.leases: dict[str, Lease] = {}
        self._ended_leases: OrderedDict[str, Lease] = OrderedDict()
        self.players_dir = players_dir
        self.log_dir = log_dir
        self.platforms = platforms
        self.http = http
        self.metrics = Metrics(self.snapshot)
        self.started_at = time.monotonic()  # uptime must not follow the wall clock (NTP, date -s)
        self._on_ready = on_ready
        self._on_status = on_status
        self._on_tick = on_tick
        self._signal_handlers = dict(signal_handlers or {})
        self._stopping = False
        self._ready_sent = False
        #: The last reload's outcome, for GET /v1/health (see note_reload); None until one is made.
        self._last_reload: dict[str, Any] | None = None
        self._last_status = ""
        self._selector = selectors.DefaultSelector()
        self._registered: dict[int, Any] = {}
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_pending = False  # a wake-up byte is in the pipe (see wake())
        self._watch(self._wake_r, ("wake", None))
        #: Stops under way (see _begin_stop): each thread, when its stop() ends at the latest (its grace, then
        #: KILL_REAP_TIMEOUT for SIGKILL and the reap), and an event set once that stop() has ended.
        self._stoppers: list[tuple[threading.Thread, float, threading.Event]] = []
        self._selectors: list[threading.Thread] = []  # platform selections under way (see _selection)
        self._releasers: list[threading.Thread] = []  # selections being given back (see _release_selection)
        self._displays: dict[int, tuple[int, Any]] = {}  # id(managed display) -> (pidfd of its Xvfb, display)
        self._display_checks: set[int] = set()  # id(managed display) being checked for a hang (_check_display)
        self._failures: deque[tuple[Player, Any, str]] = deque()
        #: Processes _spawn prepared, for the loop to start without the lock (_run_spawns).
        self._spawns: deque[tuple[Player, object, list[str], dict[str, str], str | None, bool]] = deque()
        for name, env_config in config.environments.items():
            self.environments[name] = Environment(env_config, "file")
            self.metrics.declare(name)
        # The loop's first pass starts these environments' players at once, not after LOOP_IDLE (every start of
        # the daemon was a second slower than its players needed).
        self.wake()

    # -- waking the loop ---------------------------------------------------------------------------------
    @property
    def wakeup_fd(self) -> int:
        """The write end of the self-pipe; give it to ``signal.set_wakeup_fd``."""
        return self._wake_w

    def wake(self) -> None:
        """Make the loop run soon (from any thread).

        At most one wake-up byte is pending at a time: signal handlers write into the same pipe, and wake-ups
        piling up while the loop is busy would fill it, and a full pipe drops a signal. (The flag is cleared
        before the loop drains the pipe and acts, so a change made before a skipped write is still seen.)"""
        if self._wake_pending:
            return
        self._wake_pending = True
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the loop is awake already
        except OSError:
            pass  # closed: the loop has finished

    # -- views -------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Counts for metrics: ``{environment: {"states": {STATE: n}, "leases": n, "wanted": n}}``."""
        with self.lock:
            out = {}
            for name, env in self.environments.items():
                states = {s.value: 0 for s in State}
                for p in env.players:  # (a slot awaiting its platform is STARTING, as renderd status shows it)
                    states[p.shown_state] += 1
                out[name] = {
                    "states": states,
                    "leases": sum(1 for p in env.players if p.lease is not None),
                    "wanted": 0 if env.removing else env.config.instances,
                }
            return out

    def describe(self, name: str | None = None) -> Any:
        """JSON-ready state of one environment (raises NotFound) or of all of them (a list)."""
        with self.lock:
            if name is None:
                return [env.to_dict() for env in self.environments.values()]
            return self._environment(name).to_dict()

    def health(self) -> dict[str, Any]:
        with self.lock:
            envs = {
                name: {"wanted": 0 if env.removing else env.config.instances, "ready": sum(
                    1 for p in env.players if p.state == State.READY), "leased": sum(
                    1 for p in env.players if p.state == State.LEASED), "failed": sum(
                    1 for p in env.players if p.state == State.FAILED)}
                for name, env in self.environments.items()
            }
            return {
                "status": "stopping" if self._stopping else ("ready" if self._ready_sent else "starting"),
                "pid": os.getpid(),
                "uptime": round(time.monotonic() - self.started_at, 3),
                "environments": envs,
                "reload": dict(self._last_reload) if self._last_reload is not None else None,
            }

    def note_reload(self, error: str | None) -> None:
        """Record the outcome of a reload of the configuration file (SIGHUP) for :meth:`health`: when (Unix time),
        whether it applied, and why not (``error``; None when it did). The next reload's outcome replaces it."""
        with self.lock:
            self._last_reload = {"at": round(time.time(), 3), "ok": error is None, "error": error}

    def _environment(self, name: str) -> Environment:
        env = self.environments.get(name)
        if env is None:
            raise NotFound(f"no environment named {name!r} (known: {', '.join(self.environments) or 'none'})")
        return env

    # -- declaring wanted state (any thread) -------------------------------------------------------------
    def put_environment(self, config: EnvironmentConfig, *, source: str = "api") -> dict[str, Any]:
        """Declare an environment's wanted state; the loop reconciles toward it.

        Returns the environment's state (:meth:`Environment.to_dict`) with ``declared``: ``created`` (it was
        not there), ``redeclared`` (it was being removed: that removal goes on for the players it had, whose
        leases end, and the new declaration gets players of its own), ``changed`` or ``unchanged``. A change of
        keys a running player never sees (``config.IN_PLACE_KEYS``) applies to the running players at once: a
        player starting now gets the new ``start_timeout``, counted from its start. Raises RenderdError once
        the daemon is stopping.
        """
        with self.lock:
            if self._stopping:
                raise RenderdError("the daemon is stopping")
            env = self.environments.get(config.name)
            if env is None:
                env = self.environments[config.name] = Environment(config, source)
                self.metrics.declare(config.name)
                log.info("environment %s declared: %s", config.name, _summary(config))
                declared = "created"
            elif env.removing:
                # Its removal was answered (DELETE's 202) or logged (a reload) as done: its leases end and its
                # players stop, whatever comes after. None of them serves the new declaration, even one of the
                # same configuration, so that what happens does not depend on whether the loop took up the
                # removal before this declaration came.
                for p in list(env.players):
                    self._retire(p, "environment removed")
                stopping = len(env.players)
                env.config = config
                env.source = source
                env.removing = False
                env.held = env.held_key = None  # (a rollout of the removed declaration, held: not this one's)
                log.info("environment %s declared again while being removed: %s (%d player(s) of the removed "
                         "declaration still stopping)", config.name, _summary(config), stopping)
                declared = "redeclared"
            else:
                changed = env.config != config
                if changed:
                    log.info("environment %s changed: %s", config.name, _summary(config))
                new_policy = config.restart if config.restart != env.config.restart else None
                env.config = config
                env.source = source
                for p in env.players:
                    if not p.config.replaces_players(config):
                        # Nothing its process was started with changed: the keys it never sees (start_timeout...)
                        # are its own from now on. A player starting now has the new start_timeout, from its start.
                        p.config = config
                        if p.state == State.STARTING and p.eof_reason is None and p.started_at is not None:
                            p.deadline = p.started_at + config.start_timeout
                    # A new declaration gives failed slots a new chance; a player its restart policy let go
                    # (EXITED) is restarted only by a change of its environment, never by an unrelated reload, and
                    # not by a change of `restart` to a policy that lets its exit go either.
                    if p.state == State.FAILED:
                        self._retry(p)
                    elif changed:
                        self._apply_restart_policy(p, new_policy)
                declared = "changed" if changed else "unchanged"
            self.changed.notify_all()  # (a lease request waiting has nothing to wait for with instances = 0)
            self.wake()
            return {**env.to_dict(), "declared": declared}

    @staticmethod
    def _retry(p: Player) -> None:
        """Start the FAILED or EXITED slot ``p`` again, its failures forgotten, at the loop's next pass (lock held)."""
        p.boot_failures = p.backoff_failures = 0
        p.state = State.BACKOFF
        p.deadline = None
        p.restart_after = None
        p.restart_due = False  # (started by the reload or PUT, not as a restart)

    def _apply_restart_policy(self, p: Player, new_policy: str | None) -> None:
        """Its environment changed (lock held). An EXITED slot is started again, and a restart waited for after
        an exit goes on, unless the change set ``restart`` to ``new_policy``, which lets that exit go: the slot is
        (or stays) EXITED then, as if the policy had been in force when the player exited."""
        if p.retire or p.state not in (State.EXITED, State.BACKOFF):
            return
        code = p.restart_after if p.state == State.BACKOFF else p.returncode
        if p.state == State.BACKOFF and code is None:
            return  # (waiting after a boot failure or a stop renderd made: restart does not decide those)
        if new_policy is not None and code is not None and not _restarts(new_policy, code):
            if p.state == State.BACKOFF:
                log.info("%s[%d] not restarted after all (restart = %s now; it exited with %s)", p.environment.name,
                         p.index, new_policy, describe_exit(code))
                p.state = State.EXITED
                p.deadline = None
                p.restart_after = None
                self.changed.notify_all()  # (a lease request waiting for it is refused once no player comes back)
                self._status_update()
            # It starts with the new configuration if anything starts it again, rather than being taken for a slot
            # to roll out: no process of it is left to replace.
            p.config = p.environment.config
            return
        if p.state == State.EXITED:
            self._retry(p)

    def delete_environment(self, name: str) -> dict[str, Any]:
        """Remove an environment: its leases end and its players stop (the loop does it at its next pass). A lease
        request waiting for one of its players is refused, even if the environment is declared again meanwhile.
        Raises NotFound."""
        with self.lock:
            env = self._environment(name)
            if not env.removing:
                env.removing = True
                env.removals += 1
                log.info("environment %s removed: stopping its %d player(s)", name, len(env.players))
            self.changed.notify_all()
            self.wake()
            return env.to_dict()

    def reload(self, config: Config) -> bool:
        """Apply a reloaded configuration file: its environments replace the ones that came from a file.

        Environments created through the API and not named in the file are kept (their FAILED players are
        retried, as the file's are). ``[daemon]`` keys that need a restart (``config.RESTART_KEYS``) are left as
        they are (the caller reports them: the daemon's reload log line); the others apply from then on (a
        changed backoff to the restarts being waited for too: see :meth:`_retime_restarts`; a lowered
        ``max_boot_failures`` to the slots waiting to start again: see :meth:`_apply_boot_failure_limit`). A reload while the daemon is stopping changes nothing (it is
        logged): returns False then, True once applied.
        """
        with self.lock:
            if self._stopping:
                log.info("reload ignored: the daemon is stopping")
                return False
            old = self.daemon_config
            self.daemon_config = dataclasses.replace(
                config.daemon, **{key: getattr(old, key) for key in RESTART_KEYS}
            )
            if (old.backoff_initial, old.backoff_max) != (config.daemon.backoff_initial, config.daemon.backoff_max):
                self._retime_restarts()
            for name, env in self.environments.items():
                if env.source == "file" and name not in config.environments:
                    self.delete_environment(name)
            for env_config in config.environments.values():
                self.put_environment(env_config, source="file")
            # A reload gives every FAILED player a new chance, as its log line and the lease refusals say: those of
            # the environments declared through the API too (a raised max_boot_failures is for them as well).
            for name, env in self.environments.items():
                if name in config.environments or env.removing:
                    continue
                failed = [p for p in env.players if p.state == State.FAILED and not p.retire]
                for p in failed:
                    self._retry(p)
                if failed:
                    log.info("reload: retrying %d FAILED player(s) of environment %s (declared through the API)",
                             len(failed), name)
                    self.wake()
            if self.daemon_config.max_boot_failures < old.max_boot_failures:
                self._apply_boot_failure_limit()
            return True

    def _apply_boot_failure_limit(self) -> None:
        """A reload lowered ``max_boot_failures`` (lock held): a slot waiting to start again after as many boot
        failures in a row as the new limit, or more, is FAILED at once, keeping the reason of its last failure,
        rather than started once more. (One starting now is judged by its own start: FAILED if it fails too.) Not
        a slot whose configuration the reload changed (outdated): its failures were those of the configuration
        being replaced, and it is started with the new one, its failures forgotten (see _reconcile)."""
        limit = self.daemon_config.max_boot_failures
        given_up = 0
        for env in self.environments.values():
            for p in env.players:
                if (p.state != State.BACKOFF or p.retire or env.removing or p.boot_failures < limit
                        or p.outdated or p.spawning is not None):  # (being started: judged by that start)
                    continue
                p.state = State.FAILED
                p.deadline = None
                p.awaiting_platform = False
                given_up += 1
                log.error(
                    "%s[%d] FAILED: %d consecutive boot failures, and max_boot_failures is %d now; giving up (reload "
                    "or PUT the environment to retry). Last: %s", env.name, p.index, p.boot_failures, limit, p.reason,
                )
        if given_up:
            self.changed.notify_all()  # (a lease request waiting for it is refused once no player comes back)
            self._status_update()
            self.wake()  # (a held rollout says that it stopped)

    # -- leases (any thread) -----------------------------------------------------------------------------
    def acquire(
        self, name: str, client_pid: int, timeout: float | None, *, pidfd: int | None = None,
        deadline: float | None = None, hung_up: Callable[[], bool] | None = None,
        on_wait: Callable[[], Callable[[], None]] | None = None,
    ) -> tuple[Lease, dict[str, Any]]:
        """Wait up to ``timeout`` seconds for a READY player of ``name`` and lease it to ``client_pid``.

        ``deadline`` (``time.monotonic()`` seconds, the client's CLOCK_MONOTONIC on this host) is when the
        client stops waiting for the answer: no lease is granted after it, however long the request sat in
        the control API's queue before this call, so a request its client gave up on is never granted (a
        lease nobody knows of would keep its player LEASED for as long as the client process lives).
        Without it, only ``timeout`` counts, from this call. ``hung_up()`` (the control API's: whether the
        request's connection was closed) is asked every :data:`HANG_UP_POLL_INTERVAL` while the request
        waits and before a lease is granted: a client that gave up and hung up gets no lease either.
        ``on_wait()`` (the control API's) is called when the request begins to wait for a player, and what it
        returns when the request stops waiting: the control socket's server then has a thread more meanwhile,
        so that waiting requests never keep a release (which is what serves them) or a status request queued.

        Waiters are served in arrival order. Raises NotFound for an unknown environment, LeaseError
        when the client pid cannot be watched (``pidfd``, a pidfd of the client, is taken over and closed
        in every case), when no player became ready in time (saying why: all busy, starting..., or the
        request came after its deadline), at once when every player is FAILED or EXITED or when the environment
        wants 0 instances (nothing starts a player before a reload or PUT; a request waiting when one sets
        ``instances = 0`` is refused then, not kept for a later one that might raise it again), when the client
        process exited while the request waited (a lease would only have its player recycled), or when the daemon
        or environment stops meanwhile.
        """
        if timeout is None:
            timeout = self.daemon_config.lease_timeout
        if pidfd is None:
            pidfd = open_client_pidfd(client_pid)
        started = time.monotonic()
        until = started + max(0.0, timeout)
        if deadline is not None:
            until = min(until, deadline)
        token = object()
        done_waiting: Callable[[], None] | None = None
        try:
            with self.lock:
                env = self._environment(name)
                removals = env.removals
                env.waiters.append(token)
                waiting = False
                try:
                    while True:
                        if self._stopping:
                            raise LeaseError(STOPPING_LEASE_MESSAGE)
                        if env.removing or env.removals != removals or self.environments.get(name) is not env:
                            raise LeaseError(f"environment {name!r} was removed")
                        if env.config.instances == 0:
                            # Nothing starts a player for it before a PUT or a reload raises `instances` (a player
                            # not retired yet by the loop is not leased either: it is on its way out).
                            raise LeaseError(self._no_instances(env))
                        now = time.monotonic()
                        if deadline is not None and now > deadline:
                            self.metrics.lease_timeouts.labels(name).inc()
                            if started > deadline:
                                raise LeaseError(self._came_late(env, client_pid, timeout, started - deadline))
                            raise LeaseError(self._no_player_reason(env, timeout))
                        if hung_up is not None and hung_up():
                            log.info("client pid %d hung up while waiting for a player of %s: no lease",
                                     client_pid, name)
                            raise LeaseError("the client hung up before a player was ready")
                        if pidfd is not None and poll_readable(pidfd, 0):
                            # Granted, the lease would end at the loop's next pass and its player be recycled:
                            # a restart for nobody.
                            log.info("client pid %d exited while waiting for a player of %s: no lease",
                                     client_pid, name)
                            raise LeaseError(f"client pid {client_pid} exited before a player of {name!r} was "
                                             "ready: no lease")
                        if env.waiters[0] is token:
                            # An up-to-date player first; while a changed configuration is rolled out one
                            # player at a time, an idle one of the previous configuration serves rather than
                            # nobody (the answer gives its width and height; it is replaced after the lease).
                            ready = [
                                p for p in env.players
                                if p.state == State.READY and not p.retire and p.eof_reason is None
                                and p.check_deadline is None  # (a health check under way: one step at most)
                                and not self._unread_output(p) and not self._display_gone(p)
                                and not self._exited_unseen(p) and not self._pipes_gone(p)
                            ]
                            player = next((p for p in ready if not p.outdated), ready[0] if ready else None)
                            if player is not None:
                                lease = Lease(player=player, client_pid=client_pid, pidfd=pidfd,
                                              player_pid=player.pid, player_index=player.index)
                                pidfd = None
                                player.state = State.LEASED
                                player.lease = lease
                                player.served = True
                                if player.holder is not None and not player.holder.closed:
                                    self._unwatch(player.holder.fileno())  # its client reads server.pipe now
                                self.leases[lease.id] = lease
                                self._status_update()
                                waited = now - started
                                self.metrics.leases.labels(name).inc()
                                self.metrics.lease_wait.labels(name).observe(waited)
                                log.info(
                                    "lease of %s[%d] (pid %d) to client pid %d after %.3f s",
                                    name, player.index, player.pid, client_pid, waited,
                                )
                                self.wake()
                                return lease, self._lease_answer(lease)
                        if env.players and all(p.state == State.FAILED for p in env.players):
                            # Given up on, each one: nothing will be ready before a reload or PUT retries them.
                            reasons = "; ".join(sorted({p.reason for p in env.players if p.reason}))
                            raise LeaseError(
                                f"no ready player of {name!r}: every player failed to start and is not retried "
                                f"until the environment is reloaded or PUT again ({reasons})"
                            )
                        if env.players and all(p.state in (State.FAILED, State.EXITED) for p in env.players):
                            # Some exited and their restart policy lets them go, the others (if any) failed: nothing
                            # starts them before a reload or PUT either.
                            raise LeaseError(self._none_coming_back(env))
                        remaining = until - now
                        if remaining <= 0:
                            self.metrics.lease_timeouts.labels(name).inc()
                            raise LeaseError(self._no_player_reason(env, timeout))
                        if not waiting:
                            waiting = True
                            if on_wait is not None:
                                done_waiting = on_wait()
                            log.debug("client pid %d waits for a player of %s (at most %.3f s)",
                                      client_pid, name, remaining)
                        self.changed.wait(remaining if hung_up is None else min(remaining, HANG_UP_POLL_INTERVAL))
                finally:
                    env.waiters.remove(token)
                    self.changed.notify_all()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            if done_waiting is not None:
                done_waiting()

    @staticmethod
    def _no_instances(env: Environment) -> str:
        """Why a lease request for ``env``, whose configuration has ``instances = 0``, is refused at once."""
        how = ("PUT the environment with a higher `instances`, or raise it in the configuration file and reload"
               if env.source == "file" else "PUT the environment with a higher `instances`")
        return (f"no player of {env.name!r} to lease: the environment wants 0 instances (instances = 0), so none "
                f"is started; to lease one, {how}")

    @staticmethod
    def _none_coming_back(env: Environment) -> str:
        """Why a lease request for ``env``, every player of which is EXITED or FAILED, is refused at once."""
        failed = any(p.state == State.FAILED for p in env.players)
        reasons = "; ".join(sorted({p.reason for p in env.players if p.reason}))
        what = "failed to start or exited" if failed else "exited"
        return (
            f"no ready player of {env.name!r}: every player {what}, and one that exited is not restarted "
            f"(restart = {env.config.restart!r}) until the environment is changed by a reload or PUT"
            + (" (which retries a failed one even when it changes nothing)" if failed else "")
            + (f" ({reasons})" if reasons else "")
        )

    def _unread_output(self, p: Player) -> bool:
        """Whether ``p``'s server.pipe holds bytes or an end of file that the loop has not handled yet (lock
        held): they came after the loop last looked, and handed on they would be its next client's first
        answer. The loop, woken, stops or recycles the player; it is not leased meanwhile."""
        holder = p.holder
        if holder is None or holder.closed:
            return False
        poller = select.poll()
        poller.register(holder.fileno(), select.POLLIN)
        if not poller.poll(0):
            return False
        self.wake()
        return True

    def _exited_unseen(self, p: Player) -> bool:
        """Whether ``p``'s process has exited without the loop having handled it yet (lock held): its server.pipe
        gives no end of file while a process it started holds it open (a wrapper script that died, its player
        child alive). The loop, woken, classifies the exit and restarts it."""
        if p.proc is None or p.proc.poll() is None:
            return False
        self.wake()
        return True

    def _display_gone(self, p: Player) -> bool:
        """Whether ``p``'s managed X display has died without the loop having handled it yet (lock held): handed
        on, the player would fail its client's first step. The loop, woken, restarts it on a new display."""
        display = p.display
        if display is None or display.alive():
            return False
        self.wake()
        return True

    def _came_late(self, env: Environment, client_pid: int, timeout: float, late: float) -> str:
        """Why a lease request that reached :meth:`acquire` after its client's deadline is refused."""
        # (%.3f of a deadline sent from another clock, such as -1e308, is a number of 300 digits)
        shown = f"{late:.3f}" if late < 1e9 else f"{late:.3g}"
        log.warning(
            "lease request of client pid %d for %s reached the supervisor %s s after the client's deadline: "
            "refused (were all [daemon] api_threads = %d busy?)",
            client_pid, env.name, shown, self.daemon_config.api_threads,
        )
        return (f"no player of {env.name!r} leased: the daemon took the request up {shown} s after the "
                f"client's deadline (of its {timeout:g} s wait) had passed, so it did not wait at all (was the "
                "control API busy?)")

    def _lease_answer(self, lease: Lease) -> dict[str, Any]:
        p = lease.player
        assert p.pair is not None and p.proc is not None
        return {
            "lease": lease.id,
            "environment": p.environment.name,
            "index": p.index,
            "server_pipe": p.pair.server_path,
            "client_pipe": p.pair.client_path,
            "pid": p.proc.pid,
            # When it started (clock ticks since boot, /proc/<pid>/stat), read while the daemon has not reaped
            # it, so the pid is still its own: a client that opens a pidfd by the pid checks it names this
            # process, not one the pid was given to after the player exited (renderd.process.LeasedPlayer).
            "pid_start": process_start_ticks(p.proc.pid),
            "width": p.config.width,
            "height": p.config.height,
            "platform": _platform_name(p.selection),
            "step_timeout": p.environment.config.step_timeout,
            "log": p.log_path,
            "transport": p.config.transport,
        }

    def _no_player_reason(self, env: Environment, timeout: float) -> str:
        states = [p.state for p in env.players]
        # (rounded: a client sends what is left of its own timeout, 0.999998 s for its 1 s)
        base = f"no ready player of {env.name!r} within {round(timeout, 2):g} s"
        if states and all(s == State.FAILED for s in states):
            reasons = "; ".join(sorted({p.reason for p in env.players if p.reason}))
            return f"{base}: every player failed to start ({reasons})"
        busy = sum(1 for s in states if s == State.LEASED)
        parts = [f"{busy} of {env.config.instances} leased"]
        parts += [f"{s.value}: {states.count(s)}" for s in State if s in states and s != State.LEASED]
        checking = sum(1 for p in env.players if p.state == State.READY and p.check_deadline is not None)
        if checking:
            parts.append(f"{checking} READY under a health check (ends within step_timeout)")
        closed = sum(1 for p in env.players if p.state == State.READY and p.eof_reason is not None)
        if closed:
            parts.append(f"{closed} READY closed server.pipe while idle (being replaced)")
        return (
            f"{base}: " + ", ".join(parts)
            + (f"; {len(env.waiters) - 1} other client(s) waiting" if len(env.waiters) > 1 else "")
        )

    def release(self, lease_id: str, *, clean: bool = True) -> dict[str, Any]:
        """End a lease. ``clean``: the client finished its last step, so the player can be handed on
        (if its pipes really are empty, and, with health checks on, once it has answered the check sent to it
        at once: an answer to an action the client left unread would come first); otherwise it is recycled.
        Raises NotFound for an unknown id."""
        with self.lock:
            lease = self.leases.get(lease_id)
            if lease is None:
                raise NotFound("no such lease (it ended already, or its player exited)")
            how = LeaseEnd.RELEASED if clean else LeaseEnd.UNCLEAN
            recycled = self._end_lease(lease, how)
            self.wake()
            answer: dict[str, Any] = {"released": True, "recycled": recycled}
            if lease.player_returncode is not None:
                answer["player_exit"] = _player_exit(lease.player_returncode)
            return answer

    def lease_status(self, lease_id: str) -> dict[str, Any]:
        """What the holder of ``lease_id`` may know of it: ``ended`` (``None`` while it runs, else how it
        ended) and ``ended_reason`` (why, when the daemon ended it), the player's ``pid``, and ``player_exit`` (``{"returncode", "description"}``) once the
        daemon has reaped a player that died under the lease. Ended leases are remembered for a while
        (the last :data:`ENDED_LEASES_KEPT`). Raises NotFound for an unknown id."""
        with self.lock:
            lease = self.leases.get(lease_id) or self._ended_leases.get(lease_id)
            if lease is None:
                raise NotFound("no such lease (or it ended long ago)")
            code = lease.player_returncode
            return {
                "environment": lease.player.environment.name,
                "index": lease.player_index,
                "pid": lease.player_pid,
                "client_pid": lease.client_pid,
                "ended": lease.ended.value if lease.ended is not None else None,
                "ended_reason": lease.ended_reason,
                "player_exit": _player_exit(code) if code is not None else None,
            }

    def _end_lease(self, lease: Lease, how: LeaseEnd, reason: str | None = None) -> bool:
        """End ``lease`` (lock held), ``reason`` saying why when the daemon ends it. Returns whether its
        player is recycled."""
        p = lease.player
        if (
            how != LeaseEnd.PLAYER_EXITED and p.lease is lease and p.state == State.LEASED
            and p.proc is not None and p.proc.poll() is not None
        ):
            # The player exited before the lease ended (the release or the client's exit reached the loop
            # before its pidfd did): a crash all the same. _reap classifies, logs and counts it, ends this
            # lease as PLAYER_EXITED and restarts the player with backoff.
            self._reap(p)
            return True
        lease.ended = how
        lease.ended_reason = reason
        self.leases.pop(lease.id, None)
        self._ended_leases[lease.id] = lease
        while len(self._ended_leases) > ENDED_LEASES_KEPT:
            self._ended_leases.popitem(last=False)
        self._unwatch(lease.pidfd)
        lease.close_pidfd()
        self.metrics.lease_ends.labels(p.environment.name, how.value).inc()
        if p.lease is lease:
            p.lease = None
        recycle = False
        if p.state == State.LEASED:
            display = p.display
            if how == LeaseEnd.RELEASED and display is not None and not display.alive():
                # Its managed display died under the lease: handed on, it would fail the next client's
                # first step. It is restarted on a new display, as the idle players were.
                why = (f"its managed X display {display.name} (Xvfb pid {display.pid}) died "
                       f"({describe_exit(display.returncode)})")
                log.error("lease of %s[%d] (pid %s) released: %s; restarting it on a new display",
                          p.environment.name, p.index, p.pid, why)
                p.reason = why
                self._begin_stop(p, _Stop(why, "backoff"))
                self.changed.notify_all()
                return True
            if how == LeaseEnd.RELEASED:
                left = _pending_bytes(p.holder.fileno() if p.holder and not p.holder.closed else None)
                left_in = _pending_bytes(p.writer_fd)
                if left or left_in:
                    log.warning(
                        "lease of %s[%d] released with %d byte(s) unread and %d unsent in its pipes; recycling",
                        p.environment.name, p.index, left, left_in,
                    )
                    recycle = True
            else:
                recycle = True
            if recycle and how == LeaseEnd.STOPPED:  # its environment is going, or the daemon: not a recycle
                self._begin_stop(p, _Stop(f"lease ended {how.value}", "respawn", lease=lease))
            elif recycle and p.retire:  # scaled down: stopped and removed whatever the end, nothing replaces it
                log.info("lease of %s[%d] ended %s; retiring the player", p.environment.name, p.index, how.value)
                self._begin_stop(p, _Stop(f"lease ended {how.value}", "remove", lease=lease))
            elif recycle:
                self.metrics.recycles.labels(p.environment.name).inc()
                log.info(
                    "recycling %s[%d] (pid %s): lease ended %s", p.environment.name, p.index, p.pid, how.value
                )
                self._begin_stop(p, _Stop(f"lease ended {how.value}", "respawn", lease=lease))
            elif p.retire:
                log.info("lease of %s[%d] released; retiring the player", p.environment.name, p.index)
                self._begin_stop(p, _Stop("scaled down", "remove"))
            else:
                p.state = State.READY
                p.check_due = p.check_from = None  # the next health check is due health_interval from now
                if (
                    how == LeaseEnd.RELEASED and p.environment.config.health_interval > 0
                    and p.writer_fd is not None and p.eof_reason is None
                ):
                    # Empty pipes do not prove that nothing is on its way: a client driving the pipes by hand may
                    # release cleanly while the player still works on its last action. With health checks on, the
                    # player is checked at once and leased again only once it has answered: an answer to that
                    # action comes first (the player answers in order) and gets it recycled, never handed on.
                    self._send_check(p, time.monotonic())
                    if p.state == State.READY:
                        log.info("lease of %s[%d] released; player ready again once it answers a health check",
                                 p.environment.name, p.index)
                else:
                    log.info("lease of %s[%d] released; player ready again", p.environment.name, p.index)
        self._status_update()
        self.changed.notify_all()
        return recycle

    def player_failed(self, player: Player, bridge: Any, reason: str) -> None:
        """A transport noticed that ``player`` (while it still had ``bridge``) cannot serve any more: the loop
        stops it and counts a boot failure or a crash. Any thread; never blocks (it only queues)."""
        self._failures.append((player, bridge, reason))
        self.wake()

    def _handle_failures(self) -> None:
        while self._failures:
            player, bridge, reason = self._failures.popleft()
            if player.http_bridge is not bridge or player.state not in (State.STARTING, State.READY, State.LEASED):
                continue
            if player.state == State.STARTING:
                self._boot_failed(player, reason)
            else:
                log.error("%s[%d] pid %s failed: %s", player.environment.name, player.index, player.pid, reason)
                player.reason = reason
                self._begin_stop(player, _Stop(reason, "backoff", after_failure=True))

    # -- the loop ----------------------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Begin a graceful stop (any thread; also what SIGTERM/SIGINT do)."""
        with self.lock:
            if self._stopping:
                return
            self._stopping = True
            self.changed.notify_all()
            log.info("stopping: ending %d lease(s) and stopping players", len(self.leases))
            self._status("stopping")
        self.wake()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def run(self) -> None:
        """Supervise until a stop is requested and every player is gone. Run it on one long-lived thread."""
        try:
            self._loop()
        finally:
            self._finish()  # also after a bug in the loop: never leave a player behind

    def _loop(self) -> None:
        shutdown_deadline: float | None = None
        while True:
            timeout = self._next_timeout()
            if self._on_tick is not None:
                extra = self._call(self._on_tick, "the loop's tick callback", time.monotonic())
                if extra is not None:
                    timeout = min(timeout, extra)
            events = self._selector.select(max(0.0, timeout))
            signals: list[int] = []
            with self.lock:
                for key, _mask in events:
                    if self._registered.get(key.fd) is not key.data:
                        # Stale: unwatched since select returned it (another thread handled it while this
                        # one waited for the lock, e.g. a release that found the player dead and reaped it).
                        continue
                    kind, obj = key.data
                    if kind == "wake":
                        signals += self._drain_wake()
                    elif kind == "ready":
                        self._read_first_frame(obj)
                    elif kind == "idle":
                        self._idle_output(obj)
                    elif kind == "exit":
                        self._reap(obj)
                    elif kind == "display":
                        self._display_died(obj)
                    elif kind == "client":
                        if obj.ended is None and obj.id in self.leases:
                            log.warning(
                                "client pid %d exited holding the lease of %s[%d]",
                                obj.client_pid, obj.player.environment.name, obj.player.index,
                            )
                            self._end_lease(obj, LeaseEnd.CLIENT_EXITED)
                        else:
                            self._unwatch(obj.pidfd)
            for signum in signals:
                handler = self._signal_handlers.get(signum)
                if handler is not None:
                    self._call(handler, f"handling signal {_signal_name(signum)}")
            with self.lock:
                self._tick()
                if self._stopping:
                    if shutdown_deadline is None:
                        shutdown_deadline = time.monotonic() + self.daemon_config.stop_grace + SHUTDOWN_SLACK
                        self._shutdown_players()
                    if self._all_gone() or time.monotonic() > shutdown_deadline:
                        break
                running = self._running_processes()
                silent = self._silent_players()
            self._run_spawns()
            self._note_helpers(running)
            self._gather_silences(silent)

    def _running_processes(self) -> list[PlayerProcess]:
        """The processes of the players that run and are not being stopped (lock held)."""
        return [
            p.proc for env in self.environments.values() for p in env.players
            if p.proc is not None and p.stop is None and p.state in (State.STARTING, State.READY, State.LEASED)
        ]

    def _note_helpers(self, procs: list[PlayerProcess]) -> None:
        """Note the helpers each of ``procs`` started outside its process group, when due (at most every
        DESCENDANT_NOTE_INTERVAL seconds per player), so that its stop still finds them once it has exited. Without
        the lock: a note walks /proc over the player's descendants (milliseconds for a player with hundreds of
        threads, tens of them for a few such players), which lease, status and release requests would wait for.
        A player stopped or reaped meanwhile is safe: its stop takes the noted helpers under the process's own
        lock before it reaps, and a note of an exited or stopped player reads nothing."""
        for proc in procs:
            self._call(proc.note_if_due, f"noting the helpers of player pid {proc.pid}")

    @staticmethod
    def _call(fn: Callable[..., Any], what: str, *args: Any) -> Any:
        """``fn(*args)`` for the loop: a signal handler or a callback that fails is logged with its traceback
        and never ends the loop (which would stop every player). Returns None when it failed."""
        try:
            return fn(*args)
        except Exception:
            log.exception("%s failed; the daemon carries on", what)
            return None

    def _drain_wake(self) -> list[int]:
        self._wake_pending = False
        signals = []
        while True:
            try:
                data = os.read(self._wake_r, 4096)
            except BlockingIOError:
                break
            if not data:
                break
            signals += [b for b in data if b]
        return signals

    def _next_timeout(self) -> float:
        now = time.monotonic()
        due = now + LOOP_IDLE
        with self.lock:
            for env in self.environments.values():
                for p in env.players:
                    if p.deadline is not None and (
                        p.state in (State.STARTING, State.READY)
                        or (p.state == State.BACKOFF and not self._stopping)  # (no restart once stopping)
                    ):
                        due = min(due, p.deadline)
                    if p.state == State.STARTING and p.next_open:
                        due = min(due, p.next_open)
                    if p.state == State.READY and p.eof_reason is None:  # (one that closed its pipe is not checked)
                        for t in (p.check_due, p.check_deadline):
                            if t is not None:
                                due = min(due, t)
                        if (
                            p.check_from is None and p.check_deadline is None and p.writer_fd is not None
                            and p.holder is not None and not p.holder.closed
                            and env.config.health_interval > 0
                        ):
                            # Its next check is not timed yet (it has just come up, answered a check, or ended a
                            # lease): a pass now times it (_health_tick), from now, rather than after LOOP_IDLE.
                            due = now
        return max(0.0, due - now)

    def _watch(self, fd: int | None, data: tuple[str, Any]) -> None:
        if fd is None or fd in self._registered:
            return
        self._selector.register(fd, selectors.EVENT_READ, data)
        self._registered[fd] = data

    def _unwatch(self, fd: int | None) -> None:
        if fd is None or fd not in self._registered:
            return
        del self._registered[fd]
        try:
            self._selector.unregister(fd)
        except (KeyError, ValueError):
            pass

    # -- one pass: timers, reconciling (lock held) -------------------------------------------------------
    def _tick(self) -> None:
        self._handle_failures()
        now = time.monotonic()
        for lease in list(self.leases.values()):
            self._watch(lease.pidfd, ("client", lease))
        for env in list(self.environments.values()):
            for p in list(env.players):
                if p.stop is not None and p.stop_done.is_set():
                    self._after_stop(p)
                elif p.state == State.STARTING:
                    if p.proc is not None and p.proc.poll() is not None:
                        self._reap(p)
                    elif p.deadline is not None and now >= p.deadline:
                        silent = self._silent_failure(p)
                        if p.eof_reason is not None:
                            self._boot_failed(p, f"{p.eof_reason} (and it did not exit)")
                        elif p.assembler is None:
                            self._check_display(p.display)  # (a hung X server would explain it)
                            self._boot_failed(
                                p, f"did not open client.pipe within start_timeout ({p.config.start_timeout:g} s)"
                            )
                        elif silent is not None:
                            self._check_display(p.display)
                            self._boot_failed(p, silent)
                        # (else: what it did with its pipes is gathered without the lock after this pass, see
                        # _gather_silences, and it fails at the next pass, at once: its deadline has passed)
                    elif p.assembler is None and p.writer_fd is None and now >= p.next_open:
                        self._open_client_pipe(p)
                elif p.state in (State.READY, State.LEASED) and p.proc is not None and p.proc.poll() is not None:
                    self._reap(p)
                elif p.state == State.READY and p.eof_reason is not None:
                    if p.deadline is not None and now >= p.deadline:
                        self._idle_failed(p, f"{p.eof_reason} (and it did not exit)", "closed_pipe")
                elif p.state == State.READY and p.holder is not None and not p.holder.closed:
                    self._watch(p.holder.fileno(), ("idle", p))
                    self._health_tick(p, now)
                elif p.state == State.BACKOFF and not self._stopping and (p.deadline is None or now >= p.deadline):
                    if not env.removing and not p.retire and p.spawning is None:  # (not one being started)
                        self._spawn(p)
            if not self._stopping:
                self._reconcile(env)
        self._maybe_ready()
        # (each pass: a smaller instance count or a removed environment shows once its players are gone; an
        # unchanged line is not sent again)
        self._status_update()

    def _reconcile(self, env: Environment) -> None:
        if env.removing:
            for p in list(env.players):
                self._retire(p, "environment removed")
            if not env.players:
                del self.environments[env.name]
                self._release_selection(env.selection)
                env.selection = None
                log.info("environment %s removed", env.name)
            return
        for p in env.players:
            if p.retire and p.state == State.READY:
                self._begin_stop(p, _Stop("scaled down", "remove"))
        live = env.live()
        wanted = env.config.instances
        if len(live) < wanted:
            # A leased player that a scale-down retired (stopped when its lease ends) is wanted again: it stays,
            # rather than a new player started beside it (one process more than instances while the lease lasts).
            for p in env.players:
                if len(live) >= wanted:
                    break
                if p.retire and p.state == State.LEASED:
                    p.retire = False
                    live.append(p)
                    log.info("environment %s: leased player %d is wanted again; it is no longer retired",
                             env.name, p.index)
        if len(live) < wanted:
            # The lowest indices no live slot has: 0 to instances - 1 again once retired slots are gone. A retired
            # slot still stopping (scaled down, or of a removed declaration) may share its index with a new one for
            # that while: the index names the player's log file and pipe directory and picks its GPU, which should
            # not depend on how long a previous player took to stop.
            used = {p.index for p in live}
            for _ in range(wanted - len(live)):
                index = next(i for i in range(len(env.players) + wanted + 1) if i not in used)
                used.add(index)
                p = Player(env, index)
                env.players.append(p)
                env.players.sort(key=lambda q: q.index)
                log.info("environment %s: adding player %d", env.name, index)
                self._spawn(p)
        elif len(live) > wanted:
            # Retire the slots doing least first: not yet ready, then idle, then leased; of those, the ones of a
            # previous configuration first (a rollout would replace them: retiring a player of the new one instead
            # stops it and restarts an old one), then the highest index.
            order = {State.FAILED: 0, State.EXITED: 0, State.BACKOFF: 1, State.STARTING: 2, State.STOPPING: 2,
                     State.READY: 3, State.LEASED: 4}
            victims = sorted(live, key=lambda p: (order[p.state], not p.outdated, -p.index))[: len(live) - wanted]
            for p in victims:
                self._retire(p, "scaled down")
        # A changed resolution, executable, platform...: replace outdated players one at a time, idle first.
        live = env.live()
        if not any(p.outdated for p in live):
            self._set_hold(env, None)
            return
        for p in live:
            # Slots serving nobody (their process exited) take the new configuration at once: they would start
            # with it anyway. Not while a slot of the new configuration has not come up (the rollout is held):
            # they restart on their own, the previous configuration, and keep serving.
            if p.outdated and p.state in (State.BACKOFF, State.FAILED, State.EXITED) and not self._keeps_config(p):
                p.config = env.config
                p.boot_failures = p.backoff_failures = 0
                p.deadline = None
                p.state = State.BACKOFF
                p.restart_due = False  # (a restart waited for is replaced by this start, on the new configuration)
        # A slot of the new configuration that has not come up holds the rollout: the players of the previous one
        # keep serving (and are leased) until it is READY. One that ends FAILED holds it until a reload or a PUT
        # retries it (or declares another configuration).
        coming = self._coming(env)
        failing = [p for p in coming if p.boot_failures > 0]
        if failing or not coming:
            self._set_hold(env, failing[0] if failing else None)
        elif env.held is not None:  # a slot retried by a new declaration (its failures reset): held meanwhile
            self._set_hold(env, coming[0])
        # (a player of the previous configuration still starting does not hold the rollout: it serves nobody, and
        # one that never comes up, the configuration being replaced for that very reason, would hold it until its
        # start_timeout passed; it is the first one replaced)
        replacing = coming or any(
            (p.state == State.STOPPING or p.awaiting_platform
             or (p.state == State.STARTING and not p.outdated)) and not p.retire
            for p in env.players
        )
        if not replacing:
            outdated = [p for p in live if p.outdated and p.state in (State.STARTING, State.READY)]
            outdated.sort(key=lambda p: p.state != State.STARTING)  # (starting ones first, then idle ones)
            for p in outdated[:1]:
                if p.state == State.STARTING:
                    log.info("environment %s: replacing player %d, still starting on the previous configuration "
                             "(configuration changed)", env.name, p.index)
                    # (its boot failures were the previous configuration's: the new one starts afresh)
                    p.boot_failures = p.backoff_failures = 0
                else:
                    log.info("environment %s: replacing player %d (configuration changed)", env.name, p.index)
                self._begin_stop(p, _Stop("configuration changed", "respawn"))
        # Keep failed or exited slots where they are, unless the policy or a new declaration says otherwise.

    @staticmethod
    def _coming(env: Environment) -> list[Player]:
        """The live slots of ``env``'s current configuration that have not come up (starting, backing off after
        a failure, FAILED): while there is one, a rollout to that configuration is held (lock held)."""
        return [p for p in env.live()
                if not p.outdated and p.state not in (State.READY, State.LEASED, State.EXITED)]

    def _keeps_config(self, p: Player) -> bool:
        """Whether the outdated slot ``p`` starts again on its own (the previous) configuration: while a rollout is
        held, a player of the previous configuration that exits or is recycled must keep serving, not become one
        more slot of a configuration that does not come up (lock held)."""
        return p.outdated and not p.environment.removing and any(q is not p for q in self._coming(p.environment))

    def _set_hold(self, env: Environment, p: Player | None) -> None:
        """Say (log, status line) that ``env``'s rollout is held because ``p``, a slot of the new configuration,
        has not come up; ``p`` None: not held (any more). Logs only when that changes (lock held)."""
        if p is None:
            if env.held is not None:
                env.held = env.held_key = None
                log.info("environment %s: rollout of the new configuration goes on", env.name)
                self._status_update()
            return
        serving = sum(1 for q in env.live() if q.outdated and q.state in (State.READY, State.LEASED))
        how = "failed" if p.state == State.FAILED else "held" if p.boot_failures else "retrying"
        key = (p.index, how)
        if env.held_key == key:
            return
        env.held_key = key
        reason = p.reason or "no reason given"
        if how == "retrying":
            env.held = f"rollout held: retrying {env.name}[{p.index}] of the new configuration"
            log.info("environment %s: rollout of the new configuration held while %s[%d] of it is retried; %d "
                     "player(s) of the previous configuration keep serving", env.name, env.name, p.index, serving)
        elif how == "failed":
            env.held = f"rollout stopped: {env.name}[{p.index}] of the new configuration FAILED ({reason})"
            log.error(
                "environment %s: rollout of the new configuration stopped: %s[%d] of it FAILED after %d boot "
                "failure(s) (%s); %d player(s) of the previous configuration keep serving until a reload or PUT "
                "retries it", env.name, env.name, p.index, p.boot_failures, reason, serving,
            )
        else:
            env.held = f"rollout held: {env.name}[{p.index}] of the new configuration is not ready ({reason})"
            log.warning(
                "environment %s: rollout of the new configuration held: %s[%d] of it has not become ready (%s); "
                "%d player(s) of the previous configuration keep serving", env.name, env.name, p.index, reason,
                serving,
            )
        self._status_update()

    def _retire(self, p: Player, why: str) -> None:
        p.retire = True
        if p.state == State.LEASED:
            if p.environment.removing and p.lease is not None:
                self._end_lease(p.lease, LeaseEnd.STOPPED, why)
            else:
                return  # retired when its lease ends
        if p.state in (State.STARTING, State.READY, State.LEASED):
            self._begin_stop(p, _Stop(why, "remove"))
        elif p.state in (State.BACKOFF, State.FAILED, State.EXITED):
            self._remove_slot(p)

    def _remove_slot(self, p: Player) -> None:
        env = p.environment
        self._close_player_resources(p)
        if p in env.players:
            env.players.remove(p)
        self._drop_launch(p)
        log.info("environment %s: player %d removed", env.name, p.index)

    def _renumber(self, p: Player) -> None:
        """Before a new process fills the slot ``p`` (lock held): a slot numbered ``instances`` or more (the lower
        slots were removed by a scale-down, which kept this one) takes the lowest index below ``instances`` that no
        other wanted slot has, so that indices come back to 0 to ``instances`` - 1 as players restart (the index
        names the log file and pipe directory, and picks the GPU). A running process is never renumbered."""
        env = p.environment
        if p.retire or p.index < env.config.instances:
            return
        # (nor the index of a leased player a scale-down retired: a later one may want it again, and it keeps its
        # index, as a running process does; two wanted players would share one for good)
        used = {q.index for q in env.players if q is not p and (not q.retire or q.state == State.LEASED)}
        index = next((i for i in range(env.config.instances) if i not in used), None)
        if index is None:
            return
        log.info("environment %s: player %d starts as player %d (instances = %d)", env.name, p.index, index,
                 env.config.instances)
        p.index = index
        env.players.sort(key=lambda q: q.index)

    # -- spawning (loop thread) --------------------------------------------------------------------------
    def _spawn(self, p: Player) -> None:
        env = p.environment
        launch = p.launch if self._keeps_config(p) else None
        if launch is not None and launch[3] is not None and not launch[3].alive():
            log.info("%s[%d]: the managed display of the previous configuration died: it starts on the new one",
                     env.name, p.index)
            launch = None
        cfg = p.config if launch is not None else env.config
        p.config = cfg
        if launch is None:
            self._renumber(p)
        previous, p.launch = p.launch, None
        p.spawning = None  # (a start prepared before and not made yet is stale)
        p.reason = p.reason if p.boot_failures else ""
        p.stop = None
        p.stop_done.clear()
        p.returncode = None
        p.restart_after = None
        p.proc = None  # the previous process (if any) is gone; a transport may look at this one
        p.awaiting_platform = False
        p.eof_reason = None
        p.silence = None
        try:
            if launch is not None:  # the rollout is held: on the previous configuration, as it last started
                selection = launch[0]
            else:
                try:
                    selection = self._selection(env)
                except _SelectionPending:
                    p.state = State.BACKOFF  # spawned once the selection thread wakes the loop
                    p.deadline = None
                    p.awaiting_platform = True
                    if not p.reason:
                        p.reason = "waiting for its platform to be selected"
                    if previous is not None:
                        self._release_selection(previous[0])
                    return
            p.selection = selection
            if previous is not None and previous[0] is not selection:
                self._release_selection(previous[0])
            prepared = env.prepared
            if launch is not None:
                platform_env, platform_args, p.display = dict(launch[1]), list(launch[2]), launch[3]
            elif prepared is not None and prepared[0] is selection:
                # (a managed display: prepared on the selection's thread, for the display found alive just now)
                slot_env, slot_args = prepared[2][p.index % len(prepared[2])]
                platform_env, platform_args = dict(slot_env), list(slot_args)
                p.display = prepared[1]
            else:  # no managed display: for_instance never blocks
                platform_env, platform_args = selection.for_instance(p.index)
                p.display = None
            program = cfg.argv
            if getattr(selection, "executable", None):  # the binary inside a macOS bundle
                program = [selection.executable, *program[1:]]
            self._remake_dir(self.players_dir, "the players' pipe directory")
            p.pair = FifoPair.create(self.players_dir, prefix=f"{env.name}.{p.index}.", group=self.file_group)
            p.pipe_ids = _pipe_ids(p.pair)
            p.holder = FifoChannel(p.pair.server_path, p.pair.client_path)
            self._remake_dir(self.log_dir, "the players' log directory")
            p.log_path = self._log_path(p)
            argv = player_argv(
                program, width=cfg.width, height=cfg.height, quality=cfg.quality, extra_args=platform_args,
                log_path=p.log_path,
            )
            base_env = dict(os.environ)
            base_env.update(platform_env)
            # A build sends images only with AI2THOR_SERVER_SIDE_SCREENSHOT=True: "False" when headless (no
            # graphics device, no images either way), as renderd.launch and AI2-THOR's controller set it.
            screenshot = not getattr(selection, "headless", False)
            if cfg.transport == "http":
                endpoint = self._http_endpoint(p)
                child_env = player_env(base_env, server_type="WSGI", extra=cfg.env, screenshot=screenshot, **endpoint)
            else:
                child_env = player_env(
                    base_env, server_type="FIFO", server_pipe=p.pair.server_path,
                    client_pipe=p.pair.client_path, extra=cfg.env, screenshot=screenshot,
                )
            # The screen the platform chose for this instance wins over a DISPLAY in the environment's ``env``:
            # the selection was made with it (a DISPLAY named there is the display probed), so DISPLAY=:N.s
            # (GPUs spread round-robin) is the player's. Every other variable of ``env`` overrides the platform's.
            if "DISPLAY" in platform_env:
                child_env["DISPLAY"] = platform_env["DISPLAY"]
            p.launch = (selection, dict(platform_env), list(platform_args), p.display)
        except Exception as exc:  # whatever stops this player from starting is its boot failure, never the loop's end
            self._spawn_failed(p, exc)
            return
        # The process itself is started by the loop after this pass, without the lock (_run_spawns): fork and exec
        # take milliseconds to tens of them, and an exec of a program on a network filesystem that hangs lasts as
        # long as the mount does, while lease, status and release requests wait for the lock. Until then the slot
        # stays BACKOFF, without a process, as it was (p.spawning says its start is under way; it is STARTING once
        # the process runs); a stop, a removal or a new start meanwhile makes that start stale.
        p.state = State.BACKOFF
        p.deadline = None
        p.spawning = object()
        self._spawns.append((p, p.spawning, argv, child_env, p.log_path, launch is not None))

    def _remake_dir(self, path: str, what: str) -> None:
        """Make ``path`` (the players' pipe or log directory) again when it was removed while the daemon ran (a tmp
        cleaner: systemd-tmpfiles, tmpreaper), private as renderd made it at start (lock held). Only the directory
        itself: a parent that is gone too is not made again (the runtime directory holds the control socket).
        Raises RenderdError when it cannot be made; that start is then a boot failure saying so."""
        if os.path.isdir(path):
            return
        try:
            os.mkdir(path, 0o700)
            if self.file_group is not None:  # (the group first, then the mode that lets it in)
                os.chown(path, -1, self.file_group)
                os.chmod(path, 0o750)
            else:
                os.chmod(path, 0o700)  # whatever the umask
        except FileExistsError:
            pass  # (made meanwhile: checked below)
        except OSError as exc:
            raise RenderdError(os_error_message(
                exc, f"cannot make {what} again, removed while the daemon ran (a tmp cleaner?); make it, owned by "
                "the daemon's user, or restart the daemon, and exclude the runtime directory from the cleaner"
            )) from exc
        else:
            log.warning("%s %s was removed while the daemon ran (a tmp cleaner such as systemd-tmpfiles?): made it "
                        "again; exclude the daemon's directories from the cleaner", what, path)
            return
        st = os.lstat(path)
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.geteuid():
            raise RenderdError(
                f"{what} {path} was removed while the daemon ran and something else is there now (not a "
                f"directory of this user, uid {os.geteuid()}); remove it, and the daemon makes the directory again"
            )

    def _pipes_gone(self, p: Player) -> bool:
        """Whether ``p``'s named pipes were removed (or replaced) while it ran, by a tmp cleaner most often (lock
        held): its client could not open them, so it is recycled with new ones, never leased."""
        if p.pair is None or p.pipe_ids is None or p.state != State.READY:
            return False
        if _pipe_ids(p.pair) == p.pipe_ids:
            return False
        self._recycle_idle(p, f"its named pipes in {p.pair.directory} were removed or replaced while it ran (a tmp "
                              "cleaner?): restarted with new ones; exclude the daemon's runtime directory from the "
                              "cleaner")
        return True

    def _spawn_failed(self, p: Player, exc: Exception) -> None:
        """What stopped ``p``'s process from starting is its boot failure (lock held)."""
        env = p.environment
        if isinstance(exc, RenderdError):
            reason = str(exc)
        elif isinstance(exc, OSError):
            reason = os_error_message(exc, "cannot start the player")
        else:
            log.error("%s[%d]: starting the player failed", env.name, p.index, exc_info=exc)
            reason = f"cannot start the player: {type(exc).__name__}: {exc}"
        if isinstance(exc, (RenderdError, OSError)):  # (each failed start says why, not only the last one's FAILED)
            log.error("%s[%d] failed to start: %s", env.name, p.index, reason)
        p.spawning = None
        self._close_player_resources(p)
        self._count_boot_failure(p, reason)

    def _run_spawns(self) -> None:
        """Start the processes _spawn prepared (loop thread, without the lock: players are started from the loop
        thread only, see PR_SET_PDEATHSIG in the module's docstring), then hand each to its slot."""
        while True:
            with self.lock:
                if not self._spawns:
                    return
                p, token, argv, child_env, log_path, held = self._spawns.popleft()
                if p.spawning is not token:
                    continue  # stopped, removed or started again since it was prepared: nothing to start
            proc: PlayerProcess | None = None
            failure: Exception | None = None
            try:
                # (keep_log_open: one descriptor per player, so that a crash's log lines are quoted even when a tmp
                # cleaner removed the file while the player ran)
                proc = PlayerProcess.spawn(argv, child_env, log_path, show_log_path=True, log_group=self.file_group,
                                           keep_log_open=True)
                # Its helpers are noted by the loop without the lock (_note_helpers), not by each poll() made with it.
                proc.notes_on_poll = False
            except Exception as exc:
                failure = exc
            with self.lock:
                if p.spawning is not token or p.state != State.BACKOFF:
                    # Stopped, removed or started again while its process started: that process serves nothing.
                    if proc is not None:
                        log.info("%s[%d]: stopping pid %d, started for a slot that has changed since",
                                 p.environment.name, p.index, proc.pid)
                        self._start_stopper(proc, self.daemon_config.stop_grace, None)
                    continue
                if failure is not None:
                    self._spawn_failed(p, failure)
                    continue
                assert proc is not None
                p.spawning = None
                p.proc = proc
                self._started(p, held)

    def _started(self, p: Player, held: bool) -> None:
        """``p``'s process has started (lock held): wait for its first frame."""
        env = p.environment
        cfg = p.config
        assert p.proc is not None and p.holder is not None
        p.holder.attach(p.proc)
        p.spawns += 1
        restart = ""
        if p.restart_due:  # (counted now that it has started: see Player.restarts)
            p.restart_due = False
            p.restarts += 1
            self.metrics.restarts.labels(env.name).inc()
            restart = f", restart {p.restarts}"  # (the log says which start renderd status's RESTARTS counts)
        p.state = State.STARTING
        p.started_at = time.monotonic()
        p.ready_at = None
        p.served = False
        p.check_due = p.check_from = p.check_deadline = None
        p.checks = 0
        p.deadline = p.started_at + cfg.start_timeout
        p.next_open = 0.0
        p.assembler = FrameAssembler()
        self._watch(p.holder.fileno(), ("ready", p))
        self._watch(p.proc.fileno(), ("exit", p))
        log.info(
            "started %s[%d] pid %d (%dx%d, %s, log %s%s)%s",
            env.name, p.index, p.proc.pid, cfg.width, cfg.height, _platform_name(p.selection) or "no platform",
            p.log_path, restart, " on the previous configuration: the rollout is held" if held else "",
        )
        self._watch_display(p.display)  # (last: a display found dead here stops the player at once)
        self._status_update()

    # -- managed displays (loop thread) ------------------------------------------------------------------
    def _watch_display(self, display: Any) -> None:
        """Watch the Xvfb of a managed display (a pidfd in the loop's selector), once per display."""
        if display is None or id(display) in self._displays:
            return
        try:
            pidfd = os.pidfd_open(display.pid)
        except OSError as exc:  # gone already, or no pidfds here
            log.debug("cannot watch managed display %s (Xvfb pid %s): %s", display.name, display.pid, exc)
            if not display.alive():
                # Died (and reaped) since it was found alive for the player just started on it: no pidfd will
                # report it, so its death is handled now (its players restart on a new display).
                self._display_died(display)
            return
        self._displays[id(display)] = (pidfd, display)
        self._watch(pidfd, ("display", display))

    def _unwatch_display(self, display: Any) -> None:
        entry = self._displays.pop(id(display), None)
        if entry is not None:
            self._unwatch(entry[0])
            os.close(entry[0])

    def _check_display(self, display: Any) -> None:
        """On a thread (without the lock): whether the managed ``display`` answers within
        DISPLAY_CHECK_TIMEOUT; a hung one is killed, so that its pidfd reports it dead and it is replaced."""
        if display is None or id(display) in self._display_checks or self._stopping:
            return
        self._display_checks.add(id(display))

        def check() -> None:
            try:
                if not display.answers(DISPLAY_CHECK_TIMEOUT) and display.alive():
                    log.error(
                        "managed X display %s (Xvfb pid %d) did not answer a connection within %g s: it is hung; "
                        "killing it so that a new one is started", display.name, display.pid, DISPLAY_CHECK_TIMEOUT,
                    )
                    display.kill(f"hung: it did not answer a connection within {DISPLAY_CHECK_TIMEOUT:g} s")
            except Exception:  # never the daemon's end
                log.exception("checking managed X display %s failed", display.name)
            finally:
                with self.lock:
                    self._display_checks.discard(id(display))
                self.wake()

        threading.Thread(target=check, name=f"renderd-check-display-{display.name}", daemon=True).start()

    def _display_died(self, display: Any) -> None:
        """A managed Xvfb exited: players that are not leased are stopped and restarted (with backoff) on a
        new display; a leased player is left to its client, since it fails at its next frame (a Unity
        player dies of the X I/O error), which classifies the exit as usual."""
        self._unwatch_display(display)
        users = [
            p for env in self.environments.values() for p in env.players
            if p.display is display
            and p.state in (State.STARTING, State.READY, State.LEASED)
        ]
        if not users:
            return
        how = describe_exit(display.returncode)
        killed_because = getattr(display, "killed_because", None)
        if killed_because:
            how = f"{killed_because}; renderd killed it"
        why = f"its managed X display {display.name} (Xvfb pid {display.pid}) died ({how})"
        log.error("managed X display %s (Xvfb pid %d) died (%s) under %d player(s)",
                  display.name, display.pid, how, len(users))
        for p in users:
            if p.state == State.LEASED:
                log.warning("%s[%d] pid %s is leased: it is replaced when it fails or its lease ends",
                            p.environment.name, p.index, p.pid)
                continue
            log.error("%s[%d] pid %s: %s; restarting it on a new display", p.environment.name, p.index, p.pid, why)
            p.reason = why
            self._begin_stop(p, _Stop(why, "backoff"))

    def _log_path(self, p: Player) -> str:
        """The log file of ``p``'s next process, ``NAME.INDEX.log``; the previous one there is kept as ``.1``.

        A retired slot of the same index still stopping writes on in the file it opened: its log is that file,
        moved with it (its status, and the last lines quoted if it turns out to have crashed). A file another slot
        still names is never replaced: when ``.1`` is the log of a retiring player (``p`` restarts before that
        player is gone), it moves on to ``.2`` (and so on) first."""
        path = os.path.join(self.log_dir, f"{p.environment.name}.{p.index}.log")
        if not os.path.exists(path):
            return path
        others = [q for q in p.environment.players if q is not p and q.log_path]
        held = {q.log_path for q in others}
        chain = [path]
        while f"{path}.{len(chain)}" in held:
            chain.append(f"{path}.{len(chain)}")
        chain.append(f"{path}.{len(chain)}")  # (named by no slot: the file there, if any, is replaced)
        for src, dst in reversed(list(zip(chain, chain[1:]))):
            try:
                os.replace(src, dst)
            except FileNotFoundError:
                pass  # (removed by hand: the slot naming it names where it would be, never another's file)
            except OSError as exc:
                log.warning("%s", os_error_message(exc, "cannot keep the previous player log"))
                break
            for q in others:
                if q.log_path == src:
                    q.log_path = dst
                    if q.proc is not None:
                        q.proc.log_path = dst
        return path

    def _selection(self, env: Environment) -> Any:
        """The platform selection for ``env``'s configuration (lock held, loop thread).

        Selecting may probe the machine for seconds (an X server that never answers takes the probe's whole
        timeout), so it never runs here, with the lock held: a thread selects, stores the result and wakes
        the loop; meanwhile this raises :class:`_SelectionPending`. The same holds for a selection whose
        managed display died: a thread starts the new Xvfb. One such thread runs per environment at a time; a
        failure is a boot failure of every player that waited for it, whose retries (after their back-off)
        select, or replace the display, again. For a managed display, that thread also prepares the players'
        environment and arguments (``env.prepared``, see :func:`_prepare_instances`): ``for_instance`` on this
        thread would start a new Xvfb itself if the display died after the check here.
        """
        cfg = env.config
        selection = env.selection
        if selection is not None and env.selection_for is not None and not _platform_changed(env.selection_for, cfg):
            # A managed display that died is replaced on a thread too: starting an Xvfb takes seconds. The
            # players' environment and arguments for a managed display are prepared there as well (env.prepared),
            # so that nothing on the loop can start an Xvfb if the display dies after this check.
            display = getattr(selection, "display", None)
            if display is None:
                return selection
            prepared = env.prepared
            dead = getattr(selection, "display_dead", None)
            if (dead is None or not dead()) and prepared is not None and prepared[0] is selection \
                    and prepared[1] is display:
                return selection
            target, args, what = self._renew_display, (env, selection), "display"
        else:
            target, args, what = self._select_platform, (env, cfg), "select"
        if env.selecting is None and not self._stopping:
            t = threading.Thread(target=target, args=args, daemon=True, name=f"renderd-{what}-{env.name}")
            env.selecting = t
            self._selectors = [q for q in self._selectors if q.is_alive()] + [t]
            t.start()
        raise _SelectionPending()

    def _renew_display(self, env: Environment, selection: Any) -> None:
        """Replace ``selection``'s dead managed display on this thread (without the lock), prepare its players'
        environment and arguments (env.prepared), then wake the loop."""
        prepared, reason = self._platform_call(
            env, "replacing the managed display", lambda: _prepare_instances(selection)
        )
        try:
            with self.lock:
                if env.selecting is threading.current_thread():
                    env.selecting = None
                if prepared is not None and env.selection is selection:
                    env.prepared = prepared
                if reason and not self._stopping and self.environments.get(env.name) is env:
                    log.warning("environment %s: %s", env.name, reason)
                    self._platform_failed(env, reason)
        finally:
            self.wake()

    @staticmethod
    def _platform_call(env: Environment, what: str, fn: Callable[[], Any]) -> tuple[Any, str]:
        """``(fn(), "")``, or ``(None, why it failed)``: a platform's error, or a bug in a platform (logged with
        its traceback), is that environment's failure, never the daemon's."""
        try:
            return fn(), ""
        except RenderdError as exc:
            return None, str(exc)
        except Exception as exc:
            log.exception("environment %s: %s failed", env.name, what)
            return None, f"{what} failed: {type(exc).__name__}: {exc}"

    def _platform_failed(self, env: Environment, reason: str) -> None:
        """The players that waited for ``env``'s platform: a boot failure each (lock held)."""
        for p in list(env.players):
            if p.awaiting_platform and p.state == State.BACKOFF:
                p.awaiting_platform = False
                self._count_boot_failure(p, reason)

    def _select_platform(self, env: Environment, cfg: EnvironmentConfig) -> None:
        """Select ``cfg``'s platform on this thread (without the lock), then hand the result to ``env``."""
        selection, reason = self._platform_call(env, "selecting a platform", lambda: self.platforms.select(cfg))
        prepared = None
        if selection is not None and getattr(selection, "display", None) is not None:
            prepared, reason = self._platform_call(
                env, "preparing the managed display", lambda: _prepare_instances(selection)
            )
        try:
            with self.lock:
                if env.selecting is threading.current_thread():
                    env.selecting = None
                current = (
                    not self._stopping and self.environments.get(env.name) is env and not env.removing
                    and not _platform_changed(cfg, env.config)
                )
                if not current:  # stale: the environment changed, went away, or the daemon is stopping
                    if selection is not None:
                        self._release_selection(selection)
                elif selection is None or reason:
                    log.warning("environment %s: no platform: %s", env.name, reason)
                    if selection is not None:
                        self._release_selection(selection)
                    self._platform_failed(env, reason)
                else:
                    old = env.selection
                    env.selection, env.selection_for = selection, cfg
                    env.prepared = prepared
                    if old is not None and old is not selection and not any(
                        q.selection is old for q in env.players
                    ):
                        self._release_selection(old)
        finally:
            self.wake()

    def _release_selection(self, selection: Any) -> None:
        """Give back ``selection`` once nothing uses it (lock held). Giving back the last reference on a managed
        display stops its Xvfb (SIGTERM, its grace, SIGKILL: seconds for a hung one), so the release runs on a
        thread of its own, never with the lock held: control requests and the loop go on meanwhile. Nothing can
        start a player on that display any more (no environment or player holds the selection; the display
        manager hands a new request a server it still shares, or a new one once this one is being stopped), and
        a daemon that stops meanwhile waits for these threads (:meth:`_finish`)."""
        if selection is None:
            return
        for env in self.environments.values():
            if env.selection is selection or any(
                p.selection is selection or (p.launch is not None and p.launch[0] is selection) for p in env.players
            ):
                return
        # Its managed display, if another environment shares it, runs on: stop watching it for this one.
        self._unwatch_display(getattr(selection, "display", None))
        release = getattr(selection, "release", None)
        if release is None:
            return

        def give_back() -> None:
            try:
                release()
            except Exception:  # a platform's release must never take the daemon down
                log.exception("releasing a platform selection failed")

        t = threading.Thread(target=give_back, name=f"renderd-release-{_platform_name(selection) or 'platform'}",
                             daemon=True)
        self._releasers = [q for q in self._releasers if q.is_alive()] + [t]
        t.start()

    def _http_endpoint(self, p: Player) -> dict[str, Any]:
        if self.http is None:
            raise RenderdError("transport 'http' needs the daemon's HTTP listener ([daemon] http)")
        return self.http.register(p)

    # -- readiness (loop thread) -------------------------------------------------------------------------
    def _read_first_frame(self, p: Player) -> None:
        holder = p.holder
        if p.state != State.STARTING or holder is None or holder.closed or p.assembler is None:
            return
        decoder = holder.decoder
        fd = holder.fileno()
        try:
            while True:
                try:
                    n = os.readv(fd, decoder.get_buffers())
                except BlockingIOError:
                    return
                if n == 0:
                    self._unwatch(fd)
                    if p.proc is not None and p.proc.poll() is not None:
                        self._reap(p)
                    elif p.proc is not None and p.eof_reason is None:
                        # Usually the process is dying: its pidfd wakes the loop, which classifies the exit.
                        # If it lives on, the tick fails its boot at this deadline.
                        p.eof_reason = "closed server.pipe before sending a whole first frame"
                        p.deadline = min(p.deadline or math.inf, time.monotonic() + EOF_EXIT_WAIT)
                    else:
                        self._boot_failed(p, "closed server.pipe before sending a whole first frame")
                    return
                decoder.buffers_updated(n)
                message = decoder.next_message()
                if message is not NEED_DATA:
                    break
            event = p.assembler.event(message)
        except ProtocolError as exc:
            self._boot_failed(p, f"undecodable first frame: {exc}")
            return
        except OSError as exc:
            self._boot_failed(p, os_error_message(exc, "cannot read server.pipe"))
            return
        except Exception as exc:  # any other failure is this player's, never the daemon's
            # Decoding or assembling a frame should only raise ProtocolError: anything else is a bug that
            # this player's bytes triggered. Its traceback is logged; the player failed to boot.
            log.exception(
                "%s[%d] pid %s: unexpected %s reading its first frame from %s", p.environment.name, p.index,
                p.pid, type(exc).__name__, getattr(p.pair, "server_path", "server.pipe"),
            )
            if p.state == State.STARTING:  # (not if the failure came from handling its exit above)
                self._boot_failed(p, f"unusable first frame: {type(exc).__name__}: {exc}")
            return
        if decoder.failed is not None or decoder.has_message or decoder.in_message:
            # Read together with the first frame: a player says nothing more before an action is sent.
            after = f"malformed bytes ({decoder.failed})" if decoder.failed is not None else "more bytes"
            self._boot_failed(p, f"sent {after} right after its first frame, before any action")
            return
        self._unwatch(fd)
        p.assembler = None
        # The first frame's body buffers would stay in the decoder's pool for as long as the player lives
        # (megabytes per player at large sizes): the daemon reads no more frames from it.
        decoder.release_pool()
        log.debug(
            "%s[%d] first frame: %sx%s, sequenceId %s",
            p.environment.name, p.index, event.screen_width, event.screen_height, event.sequence_id,
        )
        self._open_client_pipe(p)

    def _idle_output(self, p: Player) -> None:
        """``server.pipe`` of an idle player became readable (lock held). Nobody sent it an action, so it must
        be silent: what it wrote would be taken by its next client as the answer to that client's first action,
        and a pipe it closed would fail that step. Either way it is not leased again."""
        holder = p.holder
        if holder is None or holder.closed:
            return
        fd = holder.fileno()
        if p.state == State.READY and p.check_deadline is not None and p.eof_reason is None:
            self._read_check_answer(p)
            return
        self._unwatch(fd)
        if p.state != State.READY:
            return  # leased meanwhile (its client reads the pipe now) or being stopped
        if p.proc is not None and p.proc.poll() is not None:
            self._reap(p)  # it exited: the exit is the news
            return
        pending = _pending_bytes(fd)
        if not pending:
            # Readable, yet nothing to read: an end of file only if a read says so (0 bytes: no writer left).
            # Bytes another reader of the pipe took first (a released client still reading) leave it empty with
            # the player's end open: nothing happened to the player, and it is watched again (by the tick).
            try:
                pending = len(os.read(fd, 1))
            except BlockingIOError:
                return
            except OSError as exc:
                self._idle_failed(p, os_error_message(exc, "cannot read server.pipe"), "closed_pipe")
                return
            pending += _pending_bytes(fd) if pending else 0
        if pending and p.served:
            # Most often the answer to an action its last client sent and then released the lease without
            # reading: not this player's failure, but its pipes no longer line up with the next client's.
            self._recycle_idle(
                p, f"it wrote {pending} byte(s) on server.pipe while idle (an answer nobody waited for?)"
            )
            return
        if pending:  # nobody ever sent it an action: its own failure, restarted with backoff
            self._idle_failed(
                p, f"wrote {pending} byte(s) on server.pipe while idle, before any action was sent", "unasked_output"
            )
            return
        # End of file: every writer closed it. Usually the player is dying and its pidfd wakes the loop, which
        # classifies the exit; if it lives on, the tick stops it at this deadline.
        p.eof_reason = "closed server.pipe while idle"
        p.deadline = time.monotonic() + EOF_EXIT_WAIT

    def _recycle_idle(self, p: Player, why: str) -> None:
        """Replace an idle player that has served a lease and wrote what nobody asked for (lock held)."""
        self.metrics.recycles.labels(p.environment.name).inc()
        log.warning("recycling %s[%d] (pid %s): %s", p.environment.name, p.index, p.pid, why)
        self._begin_stop(p, _Stop(why, "respawn"))
        self.changed.notify_all()

    # -- health checks of idle players (loop thread, lock held) ------------------------------------------
    def _health_tick(self, p: Player, now: float) -> None:
        interval = p.environment.config.health_interval
        if p.writer_fd is None or p.eof_reason is not None:
            return
        if p.check_deadline is not None:
            # (with the step_timeout in force now, counted from when the check was sent: a reload may have changed it)
            p.check_deadline = p.check_sent + p.environment.config.step_timeout
            if now >= p.check_deadline:
                p.check_deadline = None
                self._check_display(p.display)  # (a hung X server would explain it)
                self._idle_failed(
                    p, f"did not answer a health check ({HEALTH_CHECK_ACTION}) within step_timeout "
                    f"({p.environment.config.step_timeout:g} s): hung",
                )
        elif interval <= 0:
            p.check_due = p.check_from = None
        else:
            # Counted from when the wait began, with the interval in force now: a reload that raises it puts the
            # next check further away, one that lowers it below what has passed has it sent at once.
            if p.check_from is None:
                p.check_from = now
            p.check_due = p.check_from + interval
            if now >= p.check_due:
                self._send_check(p, now)

    def _send_check(self, p: Player, now: float) -> None:
        assert p.writer_fd is not None
        p.checks += 1
        data = b"".join(encode_action({"action": HEALTH_CHECK_ACTION, "sequenceId": _check_id(p.checks)}))
        try:
            # Small enough (under PIPE_BUF) to be written whole or not at all.
            os.write(p.writer_fd, data)
        except BlockingIOError:
            self._idle_failed(p, "its client.pipe is full while idle: it reads no actions (hung)")
            return
        except OSError as exc:
            self._idle_failed(p, os_error_message(exc, "cannot send a health check on client.pipe"))
            return
        p.check_due = p.check_from = None
        p.check_sent = now
        p.check_deadline = now + p.environment.config.step_timeout

    def _read_check_answer(self, p: Player) -> None:
        """Read what an idle player sent while a health check is under way: its answer, possibly in parts."""
        holder = p.holder
        assert holder is not None
        decoder = holder.decoder
        fd = holder.fileno()
        try:
            while True:
                try:
                    n = os.readv(fd, decoder.get_buffers())
                except BlockingIOError:
                    return  # the rest comes later (still watched)
                if n == 0:
                    self._unwatch(fd)
                    p.check_deadline = None
                    if p.proc is not None and p.proc.poll() is not None:
                        self._reap(p)
                    else:
                        p.eof_reason = "closed server.pipe while answering a health check"
                        p.deadline = time.monotonic() + EOF_EXIT_WAIT
                    return
                decoder.buffers_updated(n)
                message = decoder.next_message()
                if message is not NEED_DATA:
                    break
            ftype = FieldType.METADATA if message.first(FieldType.METADATA) is not None else FieldType.METADATA_PATCH
            body = message.first(ftype)
            if body is None:
                raise ProtocolError("its answer to a health check has no metadata")
            seq = decode_metadata(body, ftype=ftype).get("sequenceId")
        except ProtocolError as exc:
            self._unwatch(fd)
            p.check_deadline = None
            self._idle_failed(p, f"answered a health check with bytes that do not decode: {exc}")
            return
        except OSError as exc:
            self._unwatch(fd)
            p.check_deadline = None
            self._idle_failed(p, os_error_message(exc, "cannot read server.pipe"))
            return
        except Exception as exc:  # a bug these bytes triggered: this player's failure, never the daemon's
            log.exception("%s[%d] pid %s: unexpected %s reading its answer to a health check",
                          p.environment.name, p.index, p.pid, type(exc).__name__)
            self._unwatch(fd)
            p.check_deadline = None
            self._idle_failed(p, f"unusable answer to a health check: {type(exc).__name__}: {exc}")
            return
        finally:
            message = None
        decoder.release_pool()  # (no frame of it is kept: see _read_first_frame)
        p.check_deadline = None
        if seq != _check_id(p.checks):
            self._unwatch(fd)
            if p.served and (isinstance(seq, int) and not isinstance(seq, bool)):
                # The answer to its last client's action, come after the release (with the check's behind it):
                # an answer nobody waited for, as without a check under way; not a failure of the player.
                self._recycle_idle(
                    p, f"it answered sequenceId {seq} while health check {p.checks} was under way "
                    "(an answer nobody waited for?)",
                )
            else:
                self._idle_failed(p, f"answered health check {p.checks} with sequenceId {seq!r}")
            return
        if decoder.in_message or decoder.has_message:
            self._unwatch(fd)
            self._idle_failed(p, "sent more than its answer to a health check")
            return
        log.debug("%s[%d] pid %s answered health check %d", p.environment.name, p.index, p.pid, p.checks)
        self.changed.notify_all()  # (a lease request may be waiting for it)

    def _idle_failed(self, p: Player, why: str, how: str = "health_check") -> None:
        """Stop an idle player that failed (``how``: health_check, closed_pipe, unasked_output); it is restarted
        with backoff."""
        self.metrics.idle_failures.labels(p.environment.name, how).inc()
        log.error("%s[%d] pid %s %s", p.environment.name, p.index, p.pid, why)
        p.reason = why
        self._begin_stop(p, _Stop(why, "backoff", after_failure=True))
        self.changed.notify_all()

    def _open_client_pipe(self, p: Player) -> None:
        assert p.pair is not None
        try:
            p.writer_fd = os.open(p.pair.client_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # the player has not opened its reading end yet
                p.next_open = time.monotonic() + CLIENT_PIPE_RETRY
                return
            self._boot_failed(p, os_error_message(exc, "cannot open client.pipe"))
            return
        p.next_open = 0.0
        p.state = State.READY
        p.ready_at = time.monotonic()
        p.deadline = None
        p.boot_failures = 0  # (backoff_failures is not reset here: see _end_run)
        p.reason = ""
        p.came_up = True
        log.info(
            "%s[%d] pid %d ready after %.3f s", p.environment.name, p.index, p.pid, p.ready_at - (p.started_at or 0)
        )
        self.changed.notify_all()
        self._status_update()

    # -- exits and stops (loop thread) -------------------------------------------------------------------
    def _silent_players(self) -> list[tuple[Player, FifoChannel, float]]:
        """The STARTING players whose start_timeout has passed without a first frame, with the reader of their
        server.pipe and that deadline, whose account of what they did with their pipes (_gather_silences) is not
        known yet for that reader and deadline (lock held): the tick fails their boot once it is."""
        now = time.monotonic()
        return [
            (p, p.holder, p.deadline) for env in self.environments.values() for p in env.players
            if p.state == State.STARTING and p.stop is None and p.eof_reason is None and p.assembler is not None
            and p.deadline is not None and now >= p.deadline and p.holder is not None
            and (p.silence is None or p.silence[0] is not p.holder or p.silence[1] != p.deadline)
        ]

    @staticmethod
    def _silent_failure(p: Player) -> str | None:
        """The boot failure of the STARTING player ``p`` that sent nothing by its start_timeout, once what it did
        with its pipes has been gathered for that deadline (lock held); None before. Decided then: an exit that comes
        after (one the account's look at client.pipe caused, or any other) is that failure, not a crash of its own."""
        silence, holder = p.silence, p.holder
        if (silence is None or holder is None or silence[0] is not holder or silence[1] != p.deadline
                or p.eof_reason is not None or p.assembler is None):
            return None
        sent = holder.decoder.offset or holder.decoder.in_message  # (bytes read since: it did not send nothing)
        return f"no first frame within start_timeout ({p.config.start_timeout:g} s){'' if sent else silence[2]}"

    def _gather_silences(self, players: list[tuple[Player, FifoChannel, float]]) -> None:
        """For each of ``players`` (from _silent_players) that has sent nothing by its start_timeout: what it did
        with its pipes (has not opened server.pipe, opened it and sent nothing, opened client.pipe first), as
        ``"; it ..."``, the account renderd.launch() gives of the same fault (its FifoChannel's, ``p.holder``,
        which reads server.pipe here too); "" when bytes came, or it cannot be told. On the loop thread, without
        the lock: it lists /proc/PID/fd of the player and of each of its descendants and reads where each
        descriptor's link points, which lease, status and release requests would otherwise wait for. Kept as
        ``p.silence`` for that reader and
        deadline: the tick fails the boot with it, unless bytes came meanwhile (then it did not send nothing) or a PUT
        moved start_timeout (then it is gathered again once the new deadline has passed)."""
        for p, holder, deadline in players:
            text = ""
            if not (holder.closed or holder.decoder.offset or holder.decoder.in_message):
                try:
                    text = holder.silence()
                except Exception:  # (only an explanation: never in the way of the boot failure itself)
                    log.debug("%s[%d]: cannot tell what the player did with its pipes", p.environment.name, p.index,
                              exc_info=True)
            with self.lock:
                p.silence = (holder, deadline, text)

    def _boot_failed(self, p: Player, why: str) -> None:
        log.warning("%s[%d] pid %s failed to boot: %s", p.environment.name, p.index, p.pid, why)
        self._begin_stop(p, _Stop(why, "backoff", boot_failure=True))

    def _begin_stop(self, p: Player, stop: _Stop) -> None:
        """Stop ``p``'s process in a helper thread (SIGTERM, grace, SIGKILL, reap); the loop continues."""
        p.state = State.STOPPING  # first: ending the lease below must not recycle the player again
        p.spawning = None  # (a process not started yet is not started: _run_spawns)
        if p.http_token is not None and self.http is not None:
            self.http.expect_end(p)  # its HTTP stream ends next: not a failure worth a warning
        if p.lease is not None:
            if stop.after_failure:
                stop.ended = p.lease  # told why once the player is reaped (_after_stop)
            self._end_lease(p.lease, LeaseEnd.STOPPED, None if stop.after_failure else stop.reason)
        p.stop = stop
        p.stop_done.clear()
        proc = p.proc
        if p.holder is not None and not p.holder.closed:
            self._unwatch(p.holder.fileno())
        if proc is None:
            p.stop_done.set()
            return
        self._unwatch(proc.fileno())
        self._start_stopper(proc, self.daemon_config.stop_grace, p)

    def _start_stopper(self, proc: PlayerProcess, grace: float, p: Player | None) -> None:
        """``proc.stop(grace)`` on a thread of its own (lock held); then, with ``p``, mark ``p``'s stop done and
        wake the loop. A stopping daemon waits for it (_finish), within its bound."""

        stopped = threading.Event()  # (its stop is over: only the thread's own end is left)

        def stopper() -> None:
            try:
                proc.stop(grace)
            except Exception:  # never lose the loop's wake-up
                log.exception("stopping player pid %d failed", proc.pid)
            finally:
                stopped.set()
                if p is not None:
                    p.stop_done.set()
                    self.wake()

        t = threading.Thread(target=stopper, name=f"renderd-stop-{proc.pid}", daemon=True)
        until = time.monotonic() + grace + KILL_REAP_TIMEOUT + STOP_BOUND_SLACK
        self._stoppers = [(s, u, e) for s, u, e in self._stoppers if s.is_alive()] + [(t, until, stopped)]
        t.start()

    def _after_stop(self, p: Player) -> None:
        stop = p.stop
        assert stop is not None
        p.stop = None
        p.returncode = p.proc.returncode if p.proc is not None else None
        self._close_player_resources(p)
        env = p.environment
        if (
            stop.lease is not None and p.proc is not None and p.returncode is not None
            and not p.proc.ended_by_stop()
        ):
            # Recycled after its lease, but it died of something else meanwhile (a crash that raced the
            # release): classify, count and restart it as the crash it is.
            reason = self._classify_exit(p, p.returncode, stop.lease)
            self._after_exit(p, p.returncode, reason, False)
            self.changed.notify_all()
            return
        if stop.ended is not None:
            if p.proc is not None and p.returncode is not None and not p.proc.ended_by_stop():
                # It died of something else before the stop reached it (a crash, a SIGKILL from outside,
                # whose closed connection was the failure): its holder is told that exit, not a stop.
                reason = self._classify_exit(p, p.returncode, stop.ended)
                self._after_exit(p, p.returncode, reason, False)
                self.changed.notify_all()
                return
            stop.ended.ended_reason = stop.reason
        if stop.boot_failure:
            self._count_boot_failure(p, stop.reason)
        elif stop.then == "remove" or p.retire or env.removing:
            self._remove_slot(p)
        elif stop.then == "respawn" and not self._stopping:
            self._spawn(p)
        elif stop.then == "backoff" and not self._stopping:
            self._schedule_restart(p)
        else:
            p.state = State.EXITED
        self.changed.notify_all()

    def _reap(self, p: Player) -> None:
        """The player's process exited without being asked to (lock held)."""
        if p.proc is None or p.stop is not None or p.returncode is not None:
            return  # not running, being stopped, or its exit is handled already
        code = p.proc.poll()
        if code is None:
            return
        booting = p.state == State.STARTING
        silent = self._silent_failure(p) if booting else None
        if silent is not None:
            # Its boot failure was decided when its start_timeout passed without a first frame, and what it did with
            # its pipes was gathered (without the lock) for it; it exited before the next pass could stop it: often
            # because that account opened and closed client.pipe, which a player that opened it first reads as end
            # of file. As when the stop came first, the failure is the one decided, with that account.
            log.info("%s[%d] pid %d %s after its start_timeout passed", p.environment.name, p.index, p.pid,
                     p.proc.exit_description())
            self._check_display(p.display)
            self._boot_failed(p, silent)
            return
        p.state = State.STOPPING  # first: ending the lease below must not recycle the player
        lease = p.lease
        if lease is not None:
            self._end_lease(lease, LeaseEnd.PLAYER_EXITED)
        reason = self._classify_exit(p, code, lease, booting=booting)
        p.returncode = code
        if p.holder is not None and not p.holder.closed:
            self._unwatch(p.holder.fileno())
        proc = p.proc
        self._unwatch(proc.fileno())
        # What is left to do (kill leftovers of its group, after REAP_CLEANUP_GRACE for any that ignore SIGTERM;
        # reap it; close its pidfd) runs on a thread, never with the lock held: it scans /proc and may wait out
        # that grace, while status, lease and release requests wait for the lock. (stop_done: its stop is taken
        # care of, _close_player_resources does not stop it again.)
        p.stop_done.set()
        self._after_exit(p, code, reason, booting)
        self._start_stopper(proc, REAP_CLEANUP_GRACE, None)

    def _classify_exit(self, p: Player, code: int, lease: Lease | None, *, booting: bool = False) -> str:
        """Log and count an exit renderd did not ask for; returns the reason kept for ``renderd status``.
        The exit status is kept on ``lease`` (the lease it ended, if any) for its holder to ask."""
        env = p.environment
        # ("killed by SIGSEGV (core dumped)": the first thing to look at after a crash)
        how = p.proc.exit_description() if p.proc is not None else describe_exit(code)
        self.metrics.crashes.labels(env.name, "signal" if code < 0 else f"exit_{min(code, 255)}").inc()
        tail = p.proc.log_tail(REASON_LOG_LINES) if p.proc is not None else ""
        last = f"; last log line: {tail.splitlines()[-1].strip()}" if tail else ""
        if p.log_path and not os.path.lexists(p.log_path):
            # (a tmp cleaner or a hand removed it while the player ran: the file the next start makes at that path
            # holds nothing of this run; what the player wrote is quoted from the file it was started with, kept
            # open since: see keep_log_open in _run_spawns)
            last += (f"; its log file {p.log_path} was removed while it ran"
                     + (" (quoted from the file it had open)" if tail else ", with nothing of its output to quote"))
        reason = f"{'exited before readiness' if booting else 'exited'}: {how}{last}"
        if lease is not None:
            lease.player_returncode = code
            log.error("%s[%d] pid %d %s while leased to client pid %d%s",
                      env.name, p.index, p.pid, how, lease.client_pid, last)
        else:
            level = logging.ERROR if code != 0 else logging.INFO
            log.log(level, "%s[%d] pid %d %s", env.name, p.index, p.pid, reason)
        if code == -signal.SIGKILL:
            log.error("%s[%d] was SIGKILLed by something outside renderd (the out-of-memory killer?)",
                      env.name, p.index)
        return reason

    def _after_exit(self, p: Player, code: int, reason: str, booting: bool) -> None:
        self._close_player_resources(p)
        env = p.environment
        p.reason = reason
        if booting:
            self._count_boot_failure(p, reason)
            return
        if p.retire or env.removing:
            self._remove_slot(p)
            return
        if self._stopping:
            p.state = State.EXITED
            return
        policy = env.config.restart
        if not _restarts(policy, code):
            log.info("%s[%d] not restarted (restart = %s)", env.name, p.index, policy)
            p.state = State.EXITED
            self.changed.notify_all()  # (a lease request waiting for it is refused once no player comes back)
            return
        self._schedule_restart(p)
        p.restart_after = code

    def _count_boot_failure(self, p: Player, reason: str) -> None:
        env = p.environment
        p.boot_failures += 1
        p.reason = reason
        self.metrics.boot_failures.labels(env.name).inc()
        limit = self.daemon_config.max_boot_failures
        if p.retire or env.removing:
            self._remove_slot(p)
            return
        if self._stopping:  # no restart follows: the daemon is stopping
            p.state = State.EXITED
            p.deadline = None
            log.info("%s[%d] stopped during the daemon's shutdown (it had failed to boot: %s); not restarted",
                     env.name, p.index, reason)
            return
        if p.boot_failures >= limit:
            p.state = State.FAILED
            p.deadline = None
            log.error(
                "%s[%d] FAILED: %d consecutive boot failures; giving up (reload or PUT the environment to "
                "retry). Last: %s", env.name, p.index, p.boot_failures, reason,
            )
            self.changed.notify_all()
            self._status_update()
            return
        self._schedule_restart(p)

    def _backoff(self, failures: int) -> float:
        """The wait before a restart that follows ``failures`` consecutive failures before this one."""
        cfg = self.daemon_config
        # (The exponent is capped: 2 ** 1024 is beyond a float, and a long run of failures must not end the loop.)
        return min(cfg.backoff_max, cfg.backoff_initial * 2.0 ** min(failures, 64))

    def _retime_restarts(self) -> None:
        """A reload changed the backoff: a restart being waited for waits what the new settings give, counted from
        when its wait began, as if they had been in force then (lock held). A wait lowered below what has passed
        ends at the loop's next pass."""
        for env in self.environments.values():
            for p in env.players:
                if p.state != State.BACKOFF or p.deadline is None or p.backoff_failures <= 0:
                    continue  # (not waiting for a restart: starting at once, or waiting for its platform)
                began = p.deadline - p.backoff_delay
                p.backoff_delay = self._backoff(p.backoff_failures - 1)
                p.deadline = began + p.backoff_delay
                log.info("%s[%d] restarting in %.3g s (the backoff changed)", env.name, p.index,
                         max(0.0, p.deadline - time.monotonic()))

    def _schedule_restart(self, p: Player) -> None:
        # (backoff_failures was reset when a process that ran ended: see _end_run.)
        delay = self._backoff(p.backoff_failures)
        p.restart_after = None  # (set by _after_exit when an exit its restart policy restarts is what it waits for)
        p.backoff_failures += 1
        p.backoff_delay = delay
        p.state = State.BACKOFF
        p.deadline = time.monotonic() + delay
        p.restart_due = True  # (counted in restarts and renderd_player_restarts_total once its process starts)
        log.info("%s[%d] restarting in %.3g s", p.environment.name, p.index, delay)
        self._status_update()

    def _end_run(self, p: Player) -> None:
        """The process filling ``p`` is gone (lock held). If it ran (it served a lease, or stayed up at least as
        long as the longest wait), the backoff series ends: the next exit waits backoff_initial, whether that
        exit is this process's or a replacement's (one recycled after its lease, one that fails to start). A
        player that exits soon after every start, before serving anybody, is a crash loop however quickly it
        became ready: its waits keep doubling."""
        if p.ready_at is not None and (
            p.served or time.monotonic() - p.ready_at >= self.daemon_config.backoff_max
        ):
            p.backoff_failures = 0
        p.ready_at = None
        p.served = False

    def _close_player_resources(self, p: Player) -> None:
        self._end_run(p)
        p.spawning = None
        if p.holder is not None:
            if not p.holder.closed:
                self._unwatch(p.holder.fileno())
            p.holder.close()
            p.holder = None
        if p.writer_fd is not None:
            os.close(p.writer_fd)
            p.writer_fd = None
        if p.proc is not None:
            self._unwatch(p.proc.fileno())
            if not p.stop_done.is_set():
                # Never leave a process behind, even on a path that forgot to stop it. An exited player
                # is still a zombie here (PlayerProcess.poll does not reap): stop() reaps it at once and
                # closes its pidfd.
                p.proc.stop(self.daemon_config.stop_grace)
        if p.http_token is not None and self.http is not None:
            self.http.unregister(p)
            p.http_token = None
        if p.pair is not None:
            p.pair.remove()
            p.pair = None
            p.pipe_ids = None
        p.assembler = None
        p.display = None
        old_selection, p.selection = p.selection, None
        launch = None
        if not p.outdated or self._stopping:  # (kept for a restart on the previous configuration: _keeps_config)
            launch, p.launch = p.launch, None
        if old_selection is not None and old_selection is not p.environment.selection:
            self._release_selection(old_selection)
        if launch is not None and launch[0] is not old_selection and launch[0] is not p.environment.selection:
            self._release_selection(launch[0])

    def _drop_launch(self, p: Player) -> None:
        """Forget how ``p`` last started, giving back its selection if nothing else uses it (lock held)."""
        launch, p.launch = p.launch, None
        if launch is not None:
            self._release_selection(launch[0])

    # -- stopping everything -----------------------------------------------------------------------------
    def _shutdown_players(self) -> None:
        for lease in list(self.leases.values()):
            self._end_lease(lease, LeaseEnd.STOPPED, "the daemon is stopping")
        for env in self.environments.values():
            for p in env.players:
                if p.state in (State.STARTING, State.READY, State.LEASED):
                    self._begin_stop(p, _Stop("daemon stopping", "none"))
        self.changed.notify_all()

    def _all_gone(self) -> bool:
        return all(
            p.state not in (State.STARTING, State.READY, State.LEASED, State.STOPPING)
            for env in self.environments.values()
            for p in env.players
        )

    def _finish(self) -> None:
        self._spawns.clear()  # (prepared starts not made: their slots' resources are closed below)
        for t in self._selectors:  # each sees the stop and releases what it selected
            t.join(SHUTDOWN_SLACK)
            if t.is_alive():  # a probe (a child process of that thread) must not outlive the daemon
                log.warning("waiting for a platform probe to end (%s) before stopping", t.name)
                t.join(SELECTION_STOP_WAIT)
        # A stop under way (begun with a longer stop_grace than a reload left, or when the loop failed) is waited
        # for, within the bound of its own grace: stopping its player from this thread too would signal and reap
        # it twice at once (a process group signalled after its reap may be someone else's by then).
        # (A thread whose stop is over, the one that woke the loop for the last player, is only ending: joined
        # without a word.)
        for t, until, stopped in self._stoppers:
            if t.is_alive() and not stopped.is_set():
                log.info("waiting for the stop under way in %s (at most %.3g s)", t.name,
                         max(0.0, until - time.monotonic()))
            t.join(max(0.0, until - time.monotonic()))
        with self.lock:
            for env in self.environments.values():
                for p in env.players:
                    if p.stop is not None and not p.stop_done.is_set():
                        # Past its bound (stuck in the kernel?): left to its stopper, never stopped twice.
                        log.error("%s[%d] pid %s: its stop did not end within its grace and the SIGKILL's %g s; "
                                  "leaving it", env.name, p.index, p.pid, KILL_REAP_TIMEOUT)
                        p.proc = None
                    elif p.proc is not None and p.proc.returncode is None:
                        log.warning("%s[%d] pid %s still running at shutdown; killing it",
                                    env.name, p.index, p.pid)
                        p.proc.stop(0.0)
                    self._close_player_resources(p)
                sel, env.selection = env.selection, None
                self._release_selection(sel)
        # Selections given back (each on its thread: stopping a managed Xvfb takes seconds if it hangs) are waited
        # for, so that no display outlives the daemon's stop.
        until = time.monotonic() + RELEASE_STOP_WAIT
        for t in self._releasers:
            t.join(max(0.0, until - time.monotonic()))
            if t.is_alive():
                log.error("giving back a platform selection (%s) did not end within %g s; leaving it", t.name,
                          RELEASE_STOP_WAIT)

    def close(self) -> None:
        """Release the loop's own descriptors (after :meth:`run`, once no signal can be routed to the
        wake-up pipe any more). Idempotent."""
        if self._wake_r < 0:
            return
        for pidfd, _display in self._displays.values():
            os.close(pidfd)
        self._displays.clear()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._wake_r = self._wake_w = -1

    # -- notifications -----------------------------------------------------------------------------------
    def _maybe_ready(self) -> None:
        if self._ready_sent or self._stopping:
            return
        # Once every player has sent its first frame (or is given up on): not necessarily all at the same moment,
        # since players that crash soon after they come up, and restart with backoff, may never all be up at once.
        for env in self.environments.values():
            for p in env.players:
                if p.state not in (State.READY, State.LEASED, State.FAILED, State.EXITED) and not p.came_up:
                    return
            if len(env.live()) < env.config.instances:
                return
        self._ready_sent = True
        summary = self._summary()
        log.info("ready: %s", summary)
        if self._on_ready is not None:
            self._call(self._on_ready, "the ready callback")
        self._status(summary)

    def _summary(self) -> str:
        parts = []
        for env in self.environments.values():
            ready = sum(1 for p in env.players if p.state == State.READY)
            leased = sum(1 for p in env.players if p.state == State.LEASED)
            failed = sum(1 for p in env.players if p.state == State.FAILED)
            exited = sum(1 for p in env.players if p.state == State.EXITED)  # (not restarted: its restart policy)
            if env.removing:  # (wanted 0, as GET /v1/health and renderd_players_wanted say: none of them serves)
                parts.append(f"{env.name} being removed, {len(env.players)} player(s) stopping")
                continue
            part = f"{env.name} {ready + leased}/{env.config.instances} up ({leased} leased)"
            if failed:
                part += f", {failed} failed"
            if exited:
                part += f", {exited} exited"
            if env.held is not None:
                part += f", {env.held}"
            parts.append(part)
        return "; ".join(parts) or "no environments"

    def _status_update(self) -> None:
        if not self._stopping:
            self._status(self._summary() if self._ready_sent else f"starting: {self._summary()}")

    def _status(self, text: str) -> None:
        if text != self._last_status and self._on_status is not None:
            self._last_status = text
            self._call(self._on_status, "the status callback", text)


def _pipe_ids(pair: FifoPair) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """``(device, inode)`` of the FIFOs at ``pair``'s two paths (None for one that is not there)."""

    def ident(path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    return ident(pair.server_path), ident(pair.client_path)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _player_exit(code: int) -> dict[str, Any]:
    return {"returncode": code, "description": describe_exit(code)}


#: What a lease request is told once the daemon is stopping.
STOPPING_LEASE_MESSAGE = (
    "the daemon is stopping: no player is leased any more; ask again once it has been started again "
    "(renderd start, or systemctl start renderd)"
)
#: Attempts at preparing a managed display's players (see _prepare_instances) while that display keeps dying.
PREPARE_ATTEMPTS = 3


def _prepare_instances(selection: Any) -> tuple[Any, Any, list[tuple[dict[str, str], list[str]]]]:
    """``(selection, display, [(env, args) of each GPU slot])`` for a selection holding a managed display, from
    its ``for_instance`` (instance ``i`` gets slot ``i % instances_per_cycle``), on a selection's thread: it
    replaces a dead display first (seconds). Raises PlatformError when that fails, or when the display keeps
    dying while this runs."""
    for _ in range(PREPARE_ATTEMPTS):
        selection.renew_display()
        display = selection.display
        slots = [selection.for_instance(i) for i in range(max(1, int(selection.instances_per_cycle)))]
        if selection.display is display and display.alive():
            return selection, display, slots
    raise PlatformError(f"the managed display {selection.display.name} died again as each of {PREPARE_ATTEMPTS} "
                        "replacements was started")


def _platform_changed(old: EnvironmentConfig, new: EnvironmentConfig) -> bool:
    keys = ("platform", "x_display", "width", "height", "gpus", "executable", "env")
    return any(getattr(old, k) != getattr(new, k) for k in keys)


def _summary(config: EnvironmentConfig) -> str:
    return (
        f"{config.instances} x {os.path.basename(config.argv[0])} {config.width}x{config.height} "
        f"platform {config.platform} transport {config.transport}"
    )

