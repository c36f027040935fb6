"""``renderd start`` (the daemon, in the foreground) and ``renderd status`` (what a running daemon is doing)."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import queue
import re
import select
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

import click

from renderd.config import (
    MAX_SOCKET_PATH,
    SOCKET_ENV_VAR,
    Config,
    ConfigError,
    default_config,
    error_text,
    load,
    option_path,
)

__all__ = ["start", "status", "configure_logging", "stop_logging", "format_status", "command_line_error"]

log = logging.getLogger("renderd.daemon")

LOG_LEVELS = ("debug", "info", "warning", "error")

# syslog priorities (sd-daemon(3)) by logging level, for journald's "<N>" line prefixes.
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6), (0, 7))


class JournalFormatter(logging.Formatter):
    """``<priority>logger: message`` on every line, which journald turns into the entry's priority."""

    def format(self, record: logging.LogRecord) -> str:
        prio = next(p for level, p in _PRIORITIES if record.levelno >= level)
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return "\n".join(f"<{prio}>{line}" for line in text.splitlines() or [""])


def _stderr_is_journal() -> bool:
    """True when stderr is connected to journald (systemd sets ``JOURNAL_STREAM=dev:ino`` for it)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


#: Log records waiting for stderr, at most: a log call never waits for stderr (journald overloaded, a terminal
#: paused with Ctrl-S, a pipe whose reader stopped reading); beyond these, records are dropped and counted.
LOG_QUEUE_SIZE = 1000
#: Seconds ``renderd start`` waits, as it exits, for the records still queued to reach stderr.
LOG_FLUSH_TIMEOUT = 1.0
#: Seconds with nothing to write after which the writer reports records dropped meanwhile (it reports them
#: sooner, in their place, when the next record is logged).
LOG_IDLE_REPORT = 0.5

_DROPPED = "%d log lines dropped while stderr was not being read"


class _FdStream:
    """A text stream written straight to a file descriptor with ``os.write``: no buffer and no lock of
    ``sys.stderr``'s for a write blocked on a stalled stderr to hold (the interpreter's exit flushes
    ``sys.stderr`` and would wait for such a lock, then abort)."""

    def __init__(self, fd: int, encoding: str | None, errors: str | None) -> None:
        self.fd = fd
        self.encoding = encoding or "utf-8"
        self.errors = errors or "backslashreplace"
        self.name = f"<fd {fd}>"

    def write(self, text: str) -> None:
        view = memoryview(text.encode(self.encoding, self.errors))
        while view:
            view = view[os.write(self.fd, view):]

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        """Whether a line can be written without waiting (a pipe or socket with room), as far as poll tells."""
        try:
            return bool(select.select([], [self.fd], [], 0)[1])
        except (OSError, ValueError):
            return True  # (the write says what is wrong)


class _LogQueueHandler(logging.handlers.QueueHandler):
    """Writes a record to stderr at once when that cannot wait (stderr has room for the whole line, and nothing
    logged before it is still to be written), so that in the usual case a line is out before the call returns
    (in order, and not lost if the process is killed next); otherwise puts it on a bounded queue, without ever
    waiting, for the writer thread: when the queue is full a record is dropped and counted, and the count goes
    in the queue, as one line, ahead of the next record that finds room. In a child this process forked (which
    has no writer thread), records are written to stderr directly."""

    def __init__(self, q: queue.Queue[Any], writer: logging.Handler) -> None:
        super().__init__(q)
        self.writer = writer
        self.pid = os.getpid()
        self.dropped = 0
        self.direct = False  # the writer thread has stopped: write records as they come, unless that would wait
        self.stalled = False  # ... it stopped with stderr not read: drop them
        self._count_lock = threading.Lock()
        #: Held by whoever writes to stderr (the writer thread, or a log call writing at once); a log call never
        #: waits for it (it queues its record instead).
        self.write_lock = threading.Lock()
        #: Records (and drop reports) queued and not yet written (guarded by _count_lock; the writer thread lowers
        #: it once a record is written, holding write_lock): a log call writes at once only when it is 0.
        self.unwritten = 0

    def emit(self, record: logging.LogRecord) -> None:
        if os.getpid() != self.pid:  # a forked child: the queue has no writer here (its lock may even be held)
            self.writer.handle(record)
            return
        if self.direct:  # the writer thread has stopped (stop_logging): written here, if that does not wait
            stream = getattr(self.writer, "stream", None)
            if self.stalled or (isinstance(stream, _FdStream) and not stream.writable()):
                with self._count_lock:
                    self.dropped += 1
            else:
                self.writer.handle(record)
            return
        try:
            record = self.prepare(record)
        except Exception:
            self.handleError(record)
            return
        if not self._write_now(record):
            self._enqueue(record)

    def _write_now(self, record: logging.LogRecord) -> bool:
        """Write ``record`` here if that cannot wait: no other write under way, nothing queued before it or
        dropped, and stderr (a pipe, socket or terminal) has room for the whole line. Whether it was written."""
        stream = getattr(self.writer, "stream", None)
        if not isinstance(stream, _FdStream) or not self.write_lock.acquire(blocking=False):
            return False
        try:
            with self._count_lock:
                if self.unwritten or self.dropped or self.direct:
                    return False
            # A write of at most PIPE_BUF bytes to a pipe that polls writable has room (and is one write); a longer
            # line (a traceback) goes through the queue, as it could wait part-way.
            line = self.writer.format(record) + self.writer.terminator
            if len(line.encode(stream.encoding, stream.errors)) > select.PIPE_BUF or not stream.writable():
                return False
            self.writer.emit(record)
            return True
        finally:
            self.write_lock.release()

    def handleError(self, record: logging.LogRecord) -> None:
        """logging's account of a record that cannot be formatted (a bug), queued like any record: not written
        to ``sys.stderr`` by the thread that logged it, which would wait for a stalled stderr."""
        if logging.raiseExceptions and os.getpid() == self.pid and not self.direct:
            text = (f"--- Logging error ---\n{traceback.format_exc()}"
                    f"Message: {record.msg!r}\nArguments: {record.args!r}")
            self._enqueue(logging.LogRecord("renderd", logging.ERROR, __file__, 0, text, None, None))
        else:
            super().handleError(record)

    def _enqueue(self, record: logging.LogRecord) -> None:
        with self._count_lock:
            if self.direct:  # (stopped meanwhile: into the queue it would never be written)
                self.dropped += 1
                return
            if self.dropped and not self._put(_dropped_record(self.dropped)):
                self.dropped += 1
                return
            self.dropped = 0
            if not self._put(record):
                self.dropped = 1

    def _put(self, item: Any) -> bool:
        """Queue ``item`` without waiting (_count_lock held); whether there was room."""
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            return False
        self.unwritten += 1
        return True

    def written(self) -> None:
        """The writer thread has written one queued record (write_lock held)."""
        with self._count_lock:
            self.unwritten -= 1

    def take_dropped(self) -> logging.LogRecord | None:
        """The line reporting the records dropped since the last report (None if none were), the count reset."""
        with self._count_lock:
            if not self.dropped:
                return None
            record, self.dropped = _dropped_record(self.dropped), 0
            return record

    def report_dropped_if_idle(self) -> None:
        """Queue the line reporting the records dropped since the last report, if any were and nothing is
        queued (records queued after the drops must come after it)."""
        with self._count_lock:
            if self.dropped and self.queue.empty() and self._put(_dropped_record(self.dropped)):
                self.dropped = 0


def _dropped_record(count: int) -> logging.LogRecord:
    return logging.LogRecord("renderd", logging.WARNING, __file__, 0, _DROPPED % count, None, None)


class _LogWriter(logging.handlers.QueueListener):
    """The thread that writes the queued records to stderr, the only one that waits for it."""

    def __init__(self, handler: _LogQueueHandler) -> None:
        super().__init__(handler.queue, handler.writer)
        self.source = handler

    def start(self) -> None:
        self._thread = threading.Thread(target=self._monitor, name="renderd-log", daemon=True)
        self._thread.start()

    def dequeue(self, block: bool) -> Any:
        while True:
            try:
                return self.queue.get(timeout=LOG_IDLE_REPORT)
            except queue.Empty:
                self.source.report_dropped_if_idle()

    def handle(self, record: logging.LogRecord) -> None:
        # The handlers' emit without their lock (a write blocked on stderr must not hold a lock logging.shutdown()
        # takes at exit), under the source's write lock, which a log call writing at once only ever tries.
        with self.source.write_lock:
            try:
                for handler in self.handlers:
                    if handler.filter(record):
                        handler.emit(record)
            finally:
                self.source.written()

    def stop_within(self, timeout: float) -> bool:
        """Write what is queued (and the count of records dropped), waiting at most ``timeout`` seconds for
        stderr, and stop the thread. Returns whether it stopped (False: stderr is not being read)."""
        deadline = time.monotonic() + timeout
        thread = self._thread
        if thread is None:
            return True
        try:
            report = self.source.take_dropped()
            if report is not None:
                self.queue.put(report, timeout=max(0.0, deadline - time.monotonic()))
                with self.source._count_lock:
                    self.source.unwritten += 1
            self.queue.put(self._sentinel, timeout=max(0.0, deadline - time.monotonic()))
        except queue.Full:
            return False
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            return False
        self._thread = None
        return True


_pipeline: tuple[_LogQueueHandler, _LogWriter] | None = None
_pipeline_lock = threading.Lock()


def stop_logging(timeout: float = LOG_FLUSH_TIMEOUT) -> None:
    """Write the log records still queued, waiting at most ``timeout`` seconds for stderr, and stop the writer
    thread; records logged afterwards are written as they come, or dropped if stderr was still not being read.
    Called as ``renderd start`` ends, and at exit."""
    global _pipeline
    with _pipeline_lock:
        if _pipeline is None or _pipeline[0].pid != os.getpid():
            return
        handler, writer = _pipeline
        _pipeline = None
    stopped = writer.stop_within(timeout)
    leftovers = []
    with handler._count_lock:
        handler.direct, handler.stalled = True, not stopped
        # Records queued behind the thread's last one (logged while it stopped), and the count of those dropped
        # meanwhile: written here. (A thread still blocked on stderr keeps the queue: it writes the rest if
        # stderr is read again.)
        while stopped:
            try:
                item = handler.queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                leftovers.append(item)
        if stopped and handler.dropped:
            leftovers.append(_dropped_record(handler.dropped))
            handler.dropped = 0
    for record in leftovers:
        handler.writer.handle(record)


def configure_logging(level: str) -> None:
    """Log to stderr: journald priority prefixes under systemd, ``LEVEL name: message`` otherwise.

    A log call never waits for stderr: it writes its line at once when stderr has room for it and nothing before
    it is still to be written; otherwise the record goes through a bounded queue (``LOG_QUEUE_SIZE``) to a
    thread that writes them; when stderr is not being read and the queue is full they are dropped, and a line
    says how many once there is room again (see :func:`stop_logging` for the exit)."""
    global _pipeline
    stream: Any = sys.stderr
    try:
        stream = _FdStream(sys.stderr.fileno(), sys.stderr.encoding, sys.stderr.errors)
    except (OSError, ValueError, AttributeError):  # not a file (a test's captured stderr): written as it is
        pass
    writer = logging.StreamHandler(stream)
    if _stderr_is_journal():
        writer.setFormatter(JournalFormatter())
    else:
        writer.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    stop_logging()
    handler = _LogQueueHandler(queue.Queue(LOG_QUEUE_SIZE), writer)
    listener = _LogWriter(handler)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    listener.start()
    with _pipeline_lock:
        _pipeline = (handler, listener)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    if root.level > logging.DEBUG:
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" noise


atexit.register(stop_logging)


def _expanded(value: str | None) -> str | None:
    """A path option's value with a leading ``~`` made the user's home directory: a shell leaves it as it is
    in ``--socket=~/renderd.sock`` (and a unit file always does), and a directory named ``~`` in the working
    directory is never what was meant."""
    return os.path.expanduser(value) if value else value


@click.command("start")
@click.option("-c", "--config", "config_path", metavar="CONFIG", type=str,
              help="TOML configuration (docs/configuration.md). Without it: environment `demo` on renderd-player.")
@click.option("--socket", metavar="PATH",
              help="Control socket (overrides [daemon] socket; without either, $RENDERD_SOCKET, else the default path).")
@click.option("--runtime-dir", metavar="DIR", help="Directory for pipes, logs and the lock (overrides [daemon] runtime_dir).")
@click.option("--http", metavar="HOST:PORT", help="HTTP listener for transport = \"http\" players (overrides [daemon] http).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="info", show_default=True,
              help="Least important messages to log.")
def start(config_path: str | None, socket: str | None, runtime_dir: str | None, http: str | None, log_level: str) -> None:
    """Run the renderd daemon in the foreground until SIGTERM or SIGINT (SIGHUP reloads CONFIG).

    Keeps every environment at its wanted number of ready players, leases them to clients over the
    control socket, and restarts players that die. Logs go to stderr (journald-friendly under systemd);
    with NOTIFY_SOCKET set, READY=1 is sent once the players are ready.
    """
    if config_path == "":  # an unset variable in `-c ${CONFIG}`: not a reason to serve the built-in demo
        raise click.BadParameter("an empty path; leave -c out to serve the built-in demo", param_hint="-c/--config")
    for value, hint, key in ((socket, "--socket", "socket"), (runtime_dir, "--runtime-dir", "runtime_dir")):
        if value == "":  # likewise: not a reason to fall back to the file's or the default path
            raise click.BadParameter(f"an empty path; leave {hint} out to use [daemon] {key}", param_hint=hint)
    if http is not None and not http.strip():  # likewise: not a reason to turn the file's listener off
        raise click.BadParameter(f"an empty address ({http!r}); leave --http out to use [daemon] http",
                                 param_hint="--http")
    configure_logging(log_level)
    try:
        from renderd.daemon.service import Daemon, DaemonError

        # Made absolute as --socket is: a reload's refusal (the log, the status line, GET /v1/health) names
        # the file by a path that means something away from the daemon's working directory.
        config_path = option_path(config_path)
        overrides = {"socket": option_path(socket), "runtime_dir": option_path(runtime_dir), "http": http}
        try:
            # The checks between tables (transport "http" needs an http address) run once, with the overrides.
            # The socket: --socket, else the file's [daemon] socket, else $RENDERD_SOCKET (which the clients read).
            from_env = socket is None
            config = (load(config_path, check_cross=False, socket_from_env=from_env) if config_path is not None
                      else default_config(socket_from_env=from_env))
            config = config.with_daemon(**overrides)
        except ConfigError as exc:
            usage = command_line_error(exc, {"--socket": socket, "--runtime-dir": runtime_dir, "--http": http})
            if usage is not None:
                raise usage from None
            _fail(error_text(exc))
        _warn_socket_differs(config)
        try:
            code = Daemon(config, config_path=config_path, overrides=overrides).run()
        except DaemonError as exc:
            _fail(str(exc))
        log.info("stopped")
        sys.exit(code)
    finally:  # what is queued reaches stderr before click's error message, within LOG_FLUSH_TIMEOUT
        stop_logging()


#: The option of each ``[daemon]`` key the command line overrides (renderd start, renderd validate).
_OPTION_OF_KEY = {"daemon.socket": "--socket", "daemon.runtime_dir": "--runtime-dir", "daemon.http": "--http"}
#: Where Config.with_daemon says a command-line override is wrong (ConfigError.path).
_COMMAND_LINE = "command line"


def command_line_error(exc: ConfigError, given: dict[str, str | None]) -> click.BadParameter | None:
    """The usage error (exit 2, naming the option and its value) for ``exc``, an error of
    :meth:`Config.with_daemon` about the command line's overrides; None when the error is the file's or the
    environment's (``$RENDERD_SOCKET``), which keep exit 1. ``given``: each option's value, None if not given."""
    if exc.path != _COMMAND_LINE:
        return None
    option = _OPTION_OF_KEY.get(exc.key or "")
    if option is None or given.get(option) is None:
        # (the socket's path taken by the runtime directory's contents: the option given of the two)
        named = [o for o in ("--socket", "--runtime-dir") if given.get(o) is not None]
        option = named[0] if named else option
    if option is None:
        return None
    value = given.get(option)
    reason = exc.reason
    if value is not None and repr(value) not in reason and repr(option_path(value)) not in reason:
        reason = f"{value!r}: {reason}"
    return click.BadParameter(reason, param_hint=option)


def _fail(message: str) -> NoReturn:
    """Stop ``renderd start`` with ``message``, said once: as an error entry when stderr is journald's (where
    click's ``Error: ...`` would be a second entry, at the default priority), else as ``Error: ...``."""
    if _stderr_is_journal():
        log.error("%s", message)
        sys.exit(1)
    raise click.ClickException(message)


def _warn_socket_differs(config: Config) -> None:
    """A warning when ``$RENDERD_SOCKET`` is set and names another socket than the one renderd listens on:
    renderd status and renderd.connect() in this environment would look for the daemon there."""
    env_socket = os.environ.get(SOCKET_ENV_VAR)
    if not env_socket or config.socket_from == f"${SOCKET_ENV_VAR}":
        return
    if os.path.abspath(os.path.expanduser(env_socket)) == os.path.abspath(config.daemon.socket):
        return
    named_by = "--socket" if config.socket_from == "--socket" else f"[daemon] socket in {config.path}"
    log.warning(
        "listening on %s (%s), not $%s (%s), where renderd status and renderd.connect() run with this environment "
        "look for the daemon: set %s=%s for them, or unset it", config.daemon.socket, named_by, SOCKET_ENV_VAR,
        env_socket, SOCKET_ENV_VAR, config.daemon.socket,
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


# Control characters but newline (a platform error's reason has several lines): a player's last log line
# is quoted in its reason, and escape sequences in it must reach the operator's terminal as text.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _shown(text: Any) -> str:
    """``text`` as printable characters: each control character written as its escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def format_status(health: dict[str, Any], environments: list[dict[str, Any]]) -> str:
    """The table ``renderd status`` prints."""
    lines = [_shown(
        f"renderd {health.get('version', '?')} pid {health.get('pid')} {health.get('status')}, "
        f"up {_duration(health.get('uptime'))}"
    )]
    reload = health.get("reload")
    if reload and not reload.get("ok", True):  # (kept in sight until a reload succeeds)
        ago = _duration(max(0.0, time.time() - reload["at"])) if isinstance(reload.get("at"), (int, float)) else "?"
        lines.append(_shown(f"reload failed {ago} ago, the running configuration kept: {reload.get('error')}"))
    header = ("ENVIRONMENT", "PLAYER", "STATE", "PID", "UPTIME", "RESTARTS", "LEASE")
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    any_outdated = False
    for env in environments:
        name = env["name"] + (" (removing)" if env.get("removing") else "")
        if not env["players"]:
            rows.append((name, "-", f"wanted {env['wanted']}", "-", "-", "-", "-"))
        for p in env["players"]:
            lease = p.get("lease")
            lease_text = f"client pid {lease['client_pid']} for {_duration(lease['duration'])}" if lease else "-"
            outdated = bool(p.get("outdated"))  # (a rollout under way: on the previous configuration)
            any_outdated = any_outdated or outdated
            # (the environment wants fewer players: this one goes once its lease ends, or once it has stopped)
            retiring = " (retiring)" if p.get("retiring") and p["state"] not in ("STOPPING", "EXITED") else ""
            state = p["state"]
            waiting = bool(p.get("awaiting_platform")) and state == "BACKOFF"
            if waiting:  # (about to start once its environment's platform is selected: nothing failed)
                state = "STARTING"
            rows.append((
                name, str(p["index"]),
                state + ("*" if outdated else "") + (" (awaiting platform)" if waiting else "") + retiring,
                str(p["pid"] or "-"), _duration(p.get("uptime")), str(p["restarts"]), lease_text,
            ))
            if waiting:
                if p.get("boot_failures") and p.get("reason"):  # (its reason is then its last boot failure's)
                    notes.append(_shown(f"{env['name']}[{p['index']}] STARTING (awaiting platform) after "
                                        f"{p['boot_failures']} boot failure(s), the last: {p['reason']}"))
            elif p.get("reason") and p["state"] in ("FAILED", "BACKOFF", "EXITED"):
                notes.append(_shown(f"{env['name']}[{p['index']}] {p['state']}: {p['reason']}"))
    if not environments:
        lines.append("no environments")
        return "\n".join(lines)
    rows = [tuple(_shown(cell) for cell in row) for row in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    lines += notes
    if any_outdated:
        lines.append("* still on the previous configuration: a rollout of the new one is under way")
    return "\n".join(lines)


def _check_status_socket(value: str, path: str) -> None:
    """``renderd status --socket VALUE`` (``path``: it expanded) that can name no daemon's socket: a usage error,
    as renderd start's for the same value, rather than the failure to reach a daemon (exit 1)."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        raise click.BadParameter(
            f"{value!r} is {size} bytes long; a unix socket path holds at most {MAX_SOCKET_PATH} (pass the path "
            "renderd start listens on, or a shorter one to it, such as a relative path)", param_hint="--socket")
    if path.endswith("/") or os.path.isdir(path):
        example = os.path.join(path.rstrip("/") or "/", "renderd.sock")
        raise click.BadParameter(f"{value!r} names a directory; give the daemon's socket, such as {example!r}",
                                 param_hint="--socket")


@click.command("status")
@click.option("--socket", metavar="PATH", help="The daemon's socket (default: $RENDERD_SOCKET, else the default path).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
def status(socket: str | None, as_json: bool) -> None:
    """Show a running daemon's environments and players: pid, state, uptime, restarts, lease.

    Exits 1 when the daemon cannot be reached, 2 when --socket cannot be a socket's path (too long, a directory).
    """
    from renderd.daemon.client import ControlClient
    from renderd.errors import RenderdError

    if socket == "":  # an unset variable in `--socket "$VAR"`: not a path to connect to
        raise click.BadParameter("an empty path; leave --socket out to use $RENDERD_SOCKET or the default path",
                                 param_hint="--socket")
    if socket is not None:
        _check_status_socket(socket, _expanded(socket) or socket)
    client = ControlClient(_expanded(socket))
    try:
        health = client.health()
        environments = client.environments()
    except RenderdError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"daemon": health, "environments": environments}, indent=2))
        return
    try:
        text = format_status(health, environments)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a daemon of another version, or not renderd
        raise click.ClickException(
            f"{client.socket} answered GET /v1/environments with entries renderd status cannot read "
            f"({type(exc).__name__}: {exc}): not a renderd daemon of this version (is --socket or RENDERD_SOCKET "
            "the right path? `renderd status --json` prints the answer as it is)"
        ) from None
    click.echo(text)
