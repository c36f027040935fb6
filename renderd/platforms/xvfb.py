"""Managed X displays: renderd starts Xvfb itself, shares it, and never leaves one behind.

``DisplayManager.acquire(width, height, screens)`` returns a :class:`ManagedDisplay` handle on an Xvfb
whose screens are ``width x height x 24`` with GLX. Handles of the same geometry and the same Xvfb
environment (:func:`xvfb_environment`: the variables that change the server) share one server; the
server stops when the last handle is released, when :meth:`DisplayManager.shutdown` runs (the daemon
calls it on exit; it is also registered with :mod:`atexit`), or when this process dies: each Xvfb gets
``PR_SET_PDEATHSIG`` and its own process group.

How a server starts::

    Xvfb -displayfd <fd> -screen 0 WxHx24 [-screen 1 WxHx24 ...] +extension GLX -nolisten tcp -noreset \
         -I renderd-managed-display
      |
      +-- "-I" makes the server ignore the rest of its command line: the marker after it is how
      |   :func:`managed_display_pid` recognises renderd's own Xvfbs (any process's, any daemon's), so that
      |   display discovery never adopts one without a reference
      +-- writes "<number>\\n" to <fd> when it accepts connections (read here with a deadline)
      +-- verified with python-xlib (screens, size, depth, GLX) before the handle is returned

Stopping escalates: SIGTERM to the process group, :data:`XVFB_STOP_GRACE` seconds, SIGKILL, reap, then
the lock file and socket are removed if the server could not remove them itself (and no other server
has taken its display number since: see :func:`_remove_leftovers`).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import queue
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

from renderd.errors import PlatformError, describe_exit, os_error_message
from renderd.platforms import x11
from renderd.platforms._x11probe import setup_answered
from renderd.process import die_with_parent

log = logging.getLogger(__name__)

#: The X server binary looked up on ``PATH``.
XVFB_BINARY = "Xvfb"
#: Deadline for a new Xvfb to write its display number (and for the verification that follows).
XVFB_START_TIMEOUT = 15.0
#: Deadline for forking Xvfb on the spawner thread (fork and exec take milliseconds).
XVFB_SPAWN_TIMEOUT = 30.0
#: Seconds between SIGTERM and SIGKILL when stopping.
XVFB_STOP_GRACE = 5.0
#: Seconds to wait for the kernel to reap after SIGKILL.
XVFB_KILL_WAIT = 5.0
#: Colour depth of every managed screen (what Unity's X11 player needs).
XVFB_DEPTH = 24
#: How long a running managed Xvfb gets to answer a connection before it is shared with a new caller: one that
#: does not is hung (stopped, wedged), so it is killed and replaced instead of handed out.
XVFB_SHARE_CHECK_TIMEOUT = 10.0
#: Deadline for checking whether anything still listens on a stopped Xvfb's socket.
SOCKET_CHECK_TIMEOUT = 1.0
#: How much of Xvfb's own output is quoted when it fails to start.
XVFB_LOG_TAIL_CHARS = 1500

INSTALL_HINT = "install Xvfb and its GL drivers: apt-get install xvfb libgl1-mesa-dri libglx-mesa0"

_T = TypeVar("_T")

#: Environment variables that change the Xvfb started with them, by name and by prefix: the binary found
#: (``PATH``), the dynamic loader (``LD_*``: libraries, preloads), and the GL stack its GLX loads (libglvnd's
#: ``__GLX_*``/``__GL_*``/``__EGL_*``, Mesa's ``LIBGL_*``/``MESA_*``/``GALLIUM_*``/``LP_*`` (llvmpipe)/
#: ``EGL_*``/``GBM_*``/``DRI_PRIME``) and its keyboard setup (``XKB_*``, ``XLOCALEDIR``). Requests that differ in
#: one of them get servers of their own; the rest of an environment (a session's own settings) is not
#: read by Xvfb and does not stop them from sharing.
XVFB_ENV_NAMES = frozenset({"PATH", "DRI_PRIME", "XLOCALEDIR"})
XVFB_ENV_PREFIXES = ("LD_", "__GLX_", "__GL_", "__EGL_", "LIBGL_", "MESA_", "GALLIUM_", "LP_", "EGL_", "GBM_", "XKB_")

#: The word after ``-I`` (the X server ignores everything from ``-I`` on) at the end of every managed
#: Xvfb's command line: the mark of a display renderd manages.
MANAGED_MARKER = "renderd-managed-display"


def find_xvfb(env: Mapping[str, str] | None = None) -> str | None:
    """The path of the Xvfb binary on ``env['PATH']`` (default: this process's), or None."""
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which(XVFB_BINARY, path=path)


def socket_dir_problem(socket_dir: str | None = None) -> str | None:
    """Why an X server this process starts could not create its socket in ``socket_dir`` (default
    :data:`x11.X11_SOCKET_DIR`), or None. A directory this user may not write to (a lab server's
    ``/tmp/.X11-unix`` left with the wrong owner or mode) makes Xvfb -displayfd try every display number, write
    hundreds of thousands of lines, and fail with "Failed to find a socket to listen on"."""
    socket_dir = socket_dir or x11.X11_SOCKET_DIR
    fix = (f"fix: as root, `chown root:root {socket_dir} && chmod 1777 {socket_dir}` (the owner and mode X servers "
           "expect; create it so if it is missing), or run renderd as a user who may write there")
    try:
        st = os.stat(socket_dir)
    except FileNotFoundError:
        parent = os.path.dirname(socket_dir) or "."
        if os.access(parent, os.W_OK | os.X_OK):
            return None  # the X server creates it
        return (f"{socket_dir}, where X servers put their sockets, does not exist and {parent} is not writable for "
                f"{_this_user()}, so an X server this user starts cannot create it; {fix}")
    except OSError as exc:
        return f"{os_error_message(exc, f'cannot look at {socket_dir}, where X servers put their sockets')}; {fix}"
    if not stat.S_ISDIR(st.st_mode):
        return (f"{socket_dir}, where X servers put their sockets, is not a directory, so no X server can listen "
                f"there; fix: as root, remove it and `mkdir -m 1777 {socket_dir}`")
    if not os.access(socket_dir, os.W_OK | os.X_OK):
        return (f"{socket_dir} is not writable for {_this_user()}: it belongs to uid {st.st_uid} with mode "
                f"{stat.S_IMODE(st.st_mode):04o}, so an X server this user starts cannot create its socket there "
                f"(Xvfb tries every display number, then fails: \"Failed to find a socket to listen on\"); {fix}")
    return None


def _this_user() -> str:
    uid = os.geteuid()
    try:
        import pwd

        return f"this user ({pwd.getpwuid(uid).pw_name}, uid {uid})"
    except KeyError:
        return f"this user (uid {uid})"


def xvfb_environment(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of ``env`` that changes an Xvfb started with it (:data:`XVFB_ENV_NAMES`,
    :data:`XVFB_ENV_PREFIXES`), sorted: managed displays are shared only between equal ones."""
    return tuple(
        sorted((k, v) for k, v in env.items() if k in XVFB_ENV_NAMES or k.startswith(XVFB_ENV_PREFIXES))
    )


_Key = tuple[int, int, int, tuple[tuple[str, str], ...]]


# -- spawning from one long-lived thread --------------------------------------------------------------
# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. Spawning from
# a worker thread that later ends would kill a display still in use, so every Xvfb is forked by one
# daemon thread that lives as long as the process.


class _Spawner:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], _T], timeout: float, on_late: Callable[[_T], None]) -> _T:
        """Run ``fn`` on the spawner thread and return its result. Raises what ``fn`` raises, or
        ``concurrent.futures.TimeoutError`` after ``timeout`` seconds; a result that arrives after that
        is handed to ``on_late`` (which stops it)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._loop, args=(self._jobs,), name="renderd-xvfb-spawner", daemon=True
                )
                self._thread.start()
                self._pid = os.getpid()
            jobs = self._jobs
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        jobs.put((fn, future))
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            if not future.cancel():
                future.add_done_callback(lambda f: on_late(f.result()) if f.exception() is None else None)
            raise

    @staticmethod
    def _loop(jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]) -> None:
        while True:
            fn, future = jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)


_SPAWNER = _Spawner()

class _Server:
    """One running Xvfb and the handles on it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        number: int,
        width: int,
        height: int,
        screens: int,
        log_file: IO[bytes],
        env: Mapping[str, str],
    ) -> None:
        self.proc = proc
        self.number = number
        self.width = width
        self.height = height
        self.screens = screens
        self.log_file = log_file
        #: The environment it was started with (a replacement for it starts with the same one).
        self.env = dict(env)
        self.key: _Key = (width, height, screens, xvfb_environment(self.env))
        self.users = 0
        self.started = time.time()
        #: Set (under the manager's lock) by whoever takes it on to stop and clean up: the last release,
        #: shutdown, or the acquire that found it dead. Handles still held then release it without
        #: stopping it again.
        self.retired = False

    @property
    def name(self) -> str:
        return f":{self.number}"

    def alive(self) -> bool:
        return self.proc.poll() is None


class ManagedDisplay:
    """A handle on a managed Xvfb, one per :meth:`DisplayManager.acquire`. Release it exactly once
    (further releases do nothing); it is also a context manager."""

    def __init__(self, manager: DisplayManager, server: _Server) -> None:
        self._manager = manager
        self._server = server
        self.released = False
        #: Why renderd killed this display's Xvfb (:meth:`kill`), or None.
        self.killed_because: str | None = None

    @property
    def name(self) -> str:
        """The display name without a screen, e.g. ``:3``."""
        return self._server.name

    @property
    def number(self) -> int:
        return self._server.number

    @property
    def width(self) -> int:
        return self._server.width

    @property
    def height(self) -> int:
        return self._server.height

    @property
    def screens(self) -> int:
        return self._server.screens

    @property
    def pid(self) -> int:
        """The Xvfb process id (also its process group id)."""
        return self._server.proc.pid

    def alive(self) -> bool:
        """True while the Xvfb process runs."""
        return self._server.alive()

    @property
    def returncode(self) -> int | None:
        """The Xvfb's exit status once it has exited (``Popen.returncode``: < 0 a signal), else None."""
        return self._server.proc.poll()

    def answers(self, timeout: float) -> bool:
        """Whether the server answers an X connection setup within ``timeout`` seconds. False means it runs
        but is hung (stopped, wedged): the kernel completes the connection from its listen backlog, but no
        answer comes. True when it answers, and when it cannot be told (the socket is gone or refuses: it
        is exiting, which its pidfd reports)."""
        return _x_answers(os.path.join(x11.X11_SOCKET_DIR, f"X{self.number}"), timeout)

    def kill(self, why: str) -> None:
        """SIGKILL the Xvfb's process group now (a hung server); it is reaped and replaced as a dead one.
        ``why`` is kept as :attr:`killed_because`, for whoever reports its death."""
        self.killed_because = why
        _signal_group(self._server.proc, signal.SIGKILL)

    def screen_name(self, screen: int = 0) -> str:
        """``:N.screen``; raises ``ValueError`` for a screen the display does not have."""
        if not 0 <= screen < self.screens:
            raise ValueError(f"managed display {self.name} has screens 0..{self.screens - 1}, not {screen}")
        return f"{self.name}.{screen}"

    def release(self) -> None:
        """Drop this reference; the Xvfb stops when it was the last. Idempotent."""
        self._manager.release(self)

    def renew(self, env: Mapping[str, str] | None = None) -> ManagedDisplay:
        """A handle on a running display of the same geometry for ``env`` (default: the environment this
        one's server was started with), a new server if this one died, then release this handle. Raises
        :class:`PlatformError` as :meth:`DisplayManager.acquire` does."""
        env = env if env is not None else self._server.env
        fresh = self._manager.acquire(self.width, self.height, self.screens, env=env)
        self.release()
        return fresh

    def __enter__(self) -> ManagedDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        geometry = f"{self.width}x{self.height}x{XVFB_DEPTH}"
        return f"<ManagedDisplay {self.name} {geometry} screens={self.screens} pid={self.pid} {state}>"


class _StartLock:
    """The lock that lets one caller at a time start a server of one key (:meth:`DisplayManager.acquire`), and how
    many callers hold it or wait for it (changed under the manager's lock): it is dropped when that falls to 0."""

    __slots__ = ("lock", "callers")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.callers = 0


_MANAGERS: weakref.WeakSet[DisplayManager] = weakref.WeakSet()


@atexit.register
def _shutdown_all() -> None:
    for manager in list(_MANAGERS):
        manager.shutdown()


class DisplayManager:
    """Starts, shares and stops managed Xvfb displays. Thread-safe.

    ``DisplayManager.default()`` is the process-wide instance the platforms use; tests and embedders
    may create their own. Every manager is shut down at interpreter exit.
    """

    _default: DisplayManager | None = None
    _default_lock = threading.Lock()

    def __init__(
        self,
        *,
        xvfb: str | None = None,
        start_timeout: float = XVFB_START_TIMEOUT,
        stop_grace: float = XVFB_STOP_GRACE,
    ) -> None:
        self.xvfb = xvfb
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        #: See :data:`XVFB_SHARE_CHECK_TIMEOUT`.
        self.share_check_timeout = XVFB_SHARE_CHECK_TIMEOUT
        self._lock = threading.Lock()
        # Keyed by geometry and Xvfb environment (xvfb_environment). One start lock per key: a start that
        # takes long (up to start_timeout) holds back only the callers that want the same server, never
        # those sharing a server already running. A key's lock is there only while callers of acquire() hold it
        # or wait for it (see _StartLock): a long-running daemon whose environments change on reloads would
        # otherwise keep one per key it ever saw.
        self._start_locks: dict[_Key, _StartLock] = {}
        self._servers: dict[_Key, _Server] = {}
        self._closed = False
        _MANAGERS.add(self)

    @classmethod
    def default(cls) -> DisplayManager:
        """The process-wide manager."""
        with cls._default_lock:
            if cls._default is None:
                cls._default = cls()
            return cls._default

    @classmethod
    def shutdown_default(cls) -> None:
        """Shut the process-wide manager down (see :meth:`shutdown`) and let go of it: the next
        :meth:`default` is a new manager, so a daemon that ran inside a process and stopped its displays
        leaves that process able to start managed displays again."""
        with cls._default_lock:
            manager, cls._default = cls._default, None
        if manager is not None:
            manager.shutdown()

    # -- public API -----------------------------------------------------------------------------------

    def acquire(
        self, width: int, height: int, screens: int = 1, *, env: Mapping[str, str] | None = None
    ) -> ManagedDisplay:
        """A handle on an Xvfb with ``screens`` screens of ``width`` x ``height`` x 24 and GLX.

        Shares a running server of the same geometry started with the same :func:`xvfb_environment`, else
        starts one and verifies it. ``env`` is the environment Xvfb runs with (default: this process's).

        Raises :class:`PlatformError` when Xvfb is not installed, exits, does not announce its display
        within ``start_timeout``, fails verification, or the manager was shut down.
        """
        if width <= 0 or height <= 0 or screens <= 0:
            raise ValueError(f"invalid managed display geometry {width}x{height}, {screens} screens")
        env = env if env is not None else os.environ
        key = (width, height, screens, xvfb_environment(env))
        with self._lock:
            start_lock = self._start_locks.get(key)
            if start_lock is None:
                start_lock = self._start_locks[key] = _StartLock()
            start_lock.callers += 1
        try:
            return self._acquire(key, start_lock, width, height, screens, env)
        finally:
            with self._lock:
                # The last caller with this key lets its lock go: no one holds or waits for it, so dropping it
                # cannot let two callers start a server each (a caller counted in it uses it; one that comes
                # later makes a new one, which every caller after it shares until they are all done).
                start_lock.callers -= 1
                if start_lock.callers == 0 and self._start_locks.get(key) is start_lock:
                    del self._start_locks[key]

    def _acquire(self, key: _Key, start_lock: _StartLock, width: int, height: int, screens: int,
                 env: Mapping[str, str]) -> ManagedDisplay:
        """:meth:`acquire` once the caller is counted in ``start_lock``, the start lock of ``key``."""
        with start_lock.lock:
            shared = self._share(key)
            if shared is not None:
                if shared.answers(self.share_check_timeout):
                    return shared
                # Hung (SIGSTOPped, wedged): every player started on it would hang. Kill it; the acquire below
                # finds it dead and starts a new one (players still on it lose it, as they would anyway).
                if shared.alive():
                    log.error(
                        "managed display %s (pid %d) did not answer a connection within %g s: it is hung; "
                        "killing it and starting a new one", shared.name, shared.pid, self.share_check_timeout,
                    )
                    shared.kill(f"hung: it did not answer a connection within {self.share_check_timeout:g} s")
                try:
                    shared._server.proc.wait(timeout=XVFB_KILL_WAIT)
                except subprocess.TimeoutExpired:
                    shared.release()
                    raise PlatformError(
                        f"the managed display {shared.name} (Xvfb pid {shared.pid}) is hung and survived SIGKILL for "
                        f"{XVFB_KILL_WAIT:g} s (stuck in the kernel?); fix: retry later, or restart renderd"
                    ) from None
                shared.release()
            with self._lock:
                self._check_open()
                server = self._servers.get(key)
                if server is not None and not server.alive():
                    log.error(
                        "managed display %s (pid %d) exited unexpectedly (%s); starting a new one",
                        server.name, server.proc.pid, describe_exit(server.proc.returncode),
                    )
                    del self._servers[key]
                    server.retired = True
                    self._reap(server)
                    server = None
                if server is not None:
                    server.users += 1
                    log.debug("sharing managed display %s (%d users)", server.name, server.users)
                    return ManagedDisplay(self, server)
            server = self._start(width, height, screens, env)
            with self._lock:
                if not self._closed:
                    server.users = 1
                    self._servers[key] = server
                    return ManagedDisplay(self, server)
            self._stop(server)
            raise PlatformError("the display manager was shut down while a managed display was starting")

    def _share(self, key: _Key) -> ManagedDisplay | None:
        """A new handle on the running server of ``key``, or None (none, or it died)."""
        with self._lock:
            self._check_open()
            server = self._servers.get(key)
            if server is None or not server.alive():
                return None  # (a dead one is reaped and replaced by the caller)
            server.users += 1
            log.debug("sharing managed display %s (%d users)", server.name, server.users)
            return ManagedDisplay(self, server)

    def release(self, display: ManagedDisplay) -> None:
        """Drop one handle; stop the Xvfb (TERM, grace, KILL, reap) when it was the last. Idempotent."""
        with self._lock:
            if display.released:
                return
            display.released = True
            server = display._server
            server.users -= 1
            if server.users > 0:
                log.debug("managed display %s still has %d users", server.name, server.users)
                return
            if server.retired:
                return  # stopped by shutdown(), or reaped when found dead and replaced: stop it only once
            server.retired = True
            if self._servers.get(server.key) is server:
                del self._servers[server.key]
        self._stop(server)

    def shutdown(self) -> None:
        """Stop every managed display now, whoever holds it; later ``acquire`` calls raise. Idempotent."""
        with self._lock:
            self._closed = True
            servers = list(self._servers.values())
            self._servers.clear()
            for server in servers:
                server.retired = True
        for server in servers:
            self._stop(server)

    def displays(self) -> list[dict[str, Any]]:
        """What runs now: one dict per server (name, pid, geometry, users, uptime)."""
        with self._lock:
            return [
                {
                    "name": s.name,
                    "pid": s.proc.pid,
                    "width": s.width,
                    "height": s.height,
                    "screens": s.screens,
                    "users": s.users,
                    "uptime": time.time() - s.started,
                }
                for s in self._servers.values()
            ]

    # -- internals ------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise PlatformError("the display manager has been shut down; no managed display can be started")

    def _start(self, width: int, height: int, screens: int, env: Mapping[str, str]) -> _Server:
        binary = self.xvfb or find_xvfb(env)
        if binary is None:
            raise PlatformError(f"cannot start a managed display: Xvfb is not installed; fix: {INSTALL_HINT}")
        problem = socket_dir_problem()
        if problem is not None:  # (Xvfb would take seconds to fail, and quote none of this)
            raise PlatformError(f"cannot start a managed display: {problem}")
        argv = [binary, "-displayfd", "<fd>", "+extension", "GLX", "-nolisten", "tcp", "-noreset"]
        for screen in range(screens):
            argv += ["-screen", str(screen), f"{width}x{height}x{XVFB_DEPTH}"]
        argv += ["-I", MANAGED_MARKER]  # must stay last: "-I" ignores what follows
        deadline = time.monotonic() + self.start_timeout
        child_env = dict(env)

        def spawn() -> tuple[subprocess.Popen[bytes], int, IO[bytes]]:
            # Everything the child inherits is made here, on the spawner thread, and belongs to this job: a
            # fork that comes after the caller gave up (XVFB_SPAWN_TIMEOUT) must not pass on descriptor
            # numbers the caller has closed, which another thread may have opened again meanwhile.
            log_file = tempfile.TemporaryFile(prefix="renderd-xvfb-")
            try:
                read_fd, write_fd = os.pipe()
            except BaseException:  # (out of descriptors: the log file's is not left to the garbage collector)
                log_file.close()
                raise
            try:
                proc = subprocess.Popen(
                    [*argv[:2], str(write_fd), *argv[3:]],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    pass_fds=(write_fd,),
                    process_group=0,
                    preexec_fn=die_with_parent(os.getpid(), signal.SIGTERM),  # SIGTERM: it removes its socket
                )
            except BaseException:
                os.close(read_fd)
                log_file.close()
                raise
            finally:
                os.close(write_fd)
            return proc, read_fd, log_file

        def stop_late(spawned: tuple[subprocess.Popen[bytes], int, IO[bytes]]) -> None:
            proc, read_fd, log_file = spawned
            try:
                self._stop_process(proc)
            finally:
                os.close(read_fd)
                log_file.close()

        try:
            proc, read_fd, log_file = _SPAWNER.run(spawn, timeout=XVFB_SPAWN_TIMEOUT, on_late=stop_late)
        except concurrent.futures.TimeoutError:  # before OSError: TimeoutError is one
            raise PlatformError(
                f"could not fork {binary} within {XVFB_SPAWN_TIMEOUT:g} s (the machine is overloaded, or out of "
                "memory or processes)"
            ) from None
        except OSError as exc:
            raise PlatformError(os_error_message(exc, f"cannot start {binary}")) from exc
        try:
            try:
                number = self._read_display_number(proc, read_fd, deadline, log_file)
            except BaseException:
                self._stop_process(proc)
                raise
        except BaseException:
            log_file.close()
            raise
        finally:
            os.close(read_fd)
        server = _Server(proc, number, width, height, screens, log_file, child_env)
        try:
            self._verify(server, env, deadline)
        except BaseException:
            self._stop(server)
            raise
        log.info(
            "started managed display %s (Xvfb pid %d, %d screen(s) %dx%dx%d)",
            server.name, proc.pid, screens, width, height, XVFB_DEPTH,
        )
        return server

    def _read_display_number(self, proc: subprocess.Popen[bytes], fd: int, deadline: float, log_file: IO[bytes]) -> int:
        data = b""
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PlatformError(
                    f"Xvfb (pid {proc.pid}) did not announce its display within {self.start_timeout:g} s"
                    + _quote(log_file)
                )
            if not poller.poll(remaining * 1000):
                continue
            chunk = os.read(fd, 64)
            if not chunk:
                try:
                    proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass
                raise PlatformError(
                    f"Xvfb (pid {proc.pid}) closed its display pipe without a display number "
                    f"({describe_exit(proc.poll())})" + _quote(log_file)
                )
            data += chunk
        text = data.split(b"\n", 1)[0].strip()
        if not text.isdigit():
            raise PlatformError(f"Xvfb (pid {proc.pid}) wrote {text!r} instead of a display number")
        return int(text)

    def _verify(self, server: _Server, env: Mapping[str, str], deadline: float) -> None:
        timeout = max(1.0, deadline - time.monotonic())
        facts = x11.probe_displays([server.name], env, timeout=timeout)[server.name]
        reasons: list[str] = []
        if facts.ok and facts.screen_count < server.screens:
            reasons.append(f"it has {facts.screen_count} screens, {server.screens} were asked for")
        for screen in range(min(server.screens, max(facts.screen_count, 1))):
            reasons += x11.screen_reasons(facts, screen, server.width, server.height, managed=True)
        if reasons:
            exited = ""
            if not facts.ok:  # unreachable: did it die after it announced the display?
                try:
                    server.proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    pass
                if server.proc.returncode is not None:
                    exited = f"Xvfb exited ({describe_exit(server.proc.returncode)}) after it announced the display; "
            raise PlatformError(
                f"the managed display {server.name} (Xvfb pid {server.proc.pid}) failed verification: "
                + exited
                + "; ".join(reasons)
                + (_quote(server.log_file) or "\nXvfb wrote nothing.")
            )

    def _stop(self, server: _Server) -> None:
        self._stop_process(server.proc)
        self._reap(server)
        log.info(
            "stopped managed display %s (Xvfb pid %d, %s)",
            server.name, server.proc.pid, describe_exit(server.proc.returncode),
        )

    def _reap(self, server: _Server) -> None:
        _remove_leftovers(server.number, server.proc.pid)
        server.log_file.close()

    def _stop_process(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is not None:
            return
        _signal_group(proc, signal.SIGTERM)
        _signal_group(proc, signal.SIGCONT)  # a stopped (SIGSTOP, hung) server acts on its SIGTERM at once
        try:
            proc.wait(timeout=self.stop_grace)
            return
        except subprocess.TimeoutExpired:
            log.warning("Xvfb (pid %d) ignored SIGTERM for %g s; sending SIGKILL", proc.pid, self.stop_grace)
        _signal_group(proc, signal.SIGKILL)
        try:
            proc.wait(timeout=XVFB_KILL_WAIT)
        except subprocess.TimeoutExpired:
            log.error("Xvfb (pid %d) survived SIGKILL for %g s (stuck in the kernel?)", proc.pid, XVFB_KILL_WAIT)


def managed_display_pid(number: int, socket_dir: str = x11.X11_SOCKET_DIR) -> int | None:
    """The pid of the Xvfb renderd manages on display ``:number`` (started by any renderd process), or
    None when the display is not renderd's (a user's X server), not running, or cannot be told.

    The server is found through its socket, not through names or files that could be stale: the kernel
    reports the listening process (``SO_PEERCRED``), whose live command line must end in
    ``-I`` :data:`MANAGED_MARKER`. Takes one connect (a frozen server still completes it from the
    listen backlog); bounded by :data:`SOCKET_CHECK_TIMEOUT`.
    """
    pid = _listener_pid(os.path.join(socket_dir, f"X{number}"))
    if pid is None:
        return None
    return pid if is_managed_xvfb(pid) else None


def is_managed_xvfb(pid: int) -> bool:
    """True when process ``pid`` runs and is an Xvfb that renderd started (see :data:`MANAGED_MARKER`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    marker = MANAGED_MARKER.encode()
    return any(argv[i] == b"-I" and argv[i + 1] == marker for i in range(len(argv) - 1))


def display_listener(number: int, socket_dir: str = x11.X11_SOCKET_DIR) -> tuple[int, int] | None:
    """``(pid, uid)`` of the X server listening on display ``:number``'s socket, as the kernel reports it
    (``SO_PEERCRED``; pid 0: the server runs in a pid namespace this process cannot see), or None when nothing
    accepts connections there. Takes one connect, bounded by :data:`SOCKET_CHECK_TIMEOUT`."""
    return _listener_credentials(os.path.join(socket_dir, f"X{number}"))


def _listener_credentials(socket_path: str) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process listening on ``socket_path`` (pid 0: in a pid namespace this process
    cannot see), or None when nothing accepts connections there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(SOCKET_CHECK_TIMEOUT)
    try:
        sock.connect(socket_path)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    finally:
        sock.close()
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def _listener_pid(socket_path: str) -> int | None:
    creds = _listener_credentials(socket_path)
    return (creds[0] or None) if creds is not None else None  # 0: a pid namespace this process cannot see


def _x_answers(socket_path: str, timeout: float) -> bool:
    """See :meth:`ManagedDisplay.answers`: a connection setup request (no authorization) and any byte back."""
    return setup_answered(socket.AF_UNIX, socket_path, timeout)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.send_signal(sig)


def _remove_leftovers(number: int, pid: int) -> None:
    """Remove what a killed Xvfb (``pid``) could not: its lock file (with ``-displayfd`` there is usually
    none) and its socket (only if nothing listens on it any more).

    Display ``:number`` is free the moment the server dies, and the next X server started anywhere (another
    renderd's managed one, one started by hand) takes it: it replaces a stale lock and socket with its own
    (new files; the lock first, when it uses one). So nothing is removed while ``pid`` runs (it survived
    SIGKILL), or while a lock names anyone else (a live server) or cannot be read; and a file is unlinked
    only if it is still, right before the unlink, the very file that was found stale."""
    if _pid_alive(pid):
        return
    lock_path = f"/tmp/.X{number}-lock"
    owner, lock_id = _read_lock(lock_path)
    if owner is not None and owner != pid:
        return  # the display is someone else's now (or is being taken): nothing here is the dead server's
    socket_path = os.path.join(x11.X11_SOCKET_DIR, f"X{number}")
    socket_id = _file_id(socket_path, stat.S_IFSOCK)
    stale = False
    if socket_id is not None:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        probe.settimeout(SOCKET_CHECK_TIMEOUT)
        try:
            probe.connect(socket_path)
        except ConnectionRefusedError:
            stale = True  # nobody accepts on it
        except OSError:
            pass  # gone already, or someone else's live server
        finally:
            probe.close()
    # Re-check right before unlinking: the lock still names the dead server (or there is none) and each
    # file is the one found stale, not a new server's.
    now_owner, now_lock_id = _read_lock(lock_path)
    if now_owner is not None and (now_owner != pid or now_lock_id != lock_id):
        return
    if now_owner is not None and _file_id(lock_path, stat.S_IFREG) == lock_id:
        _unlink(lock_path)
    if stale and _file_id(socket_path, stat.S_IFSOCK) == socket_id:
        _unlink(socket_path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: it runs, as another user
    return True


def _file_id(path: str, kind: int) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path`` (not followed) when it is a file of type ``kind``, else None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_IFMT(st.st_mode) == kind else None


def _read_lock(path: str) -> tuple[int | None, tuple[int, int] | None]:
    """``(pid, file id)`` of an X lock file; ``(None, None)`` when there is none; ``(-1, None)`` when it
    cannot be read or is no regular file naming a pid (never blocks: a FIFO there is not opened for
    reading until someone writes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError:
        return -1, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return -1, None
        data = os.read(fd, 64)
    except OSError:
        return -1, None
    finally:
        os.close(fd)
    try:
        owner = int(data.strip())
    except ValueError:
        return -1, None
    return (owner if owner > 0 else -1), (st.st_dev, st.st_ino)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("%s", os_error_message(exc, "cannot remove what a stopped Xvfb left behind"))


def _quote(log_file: IO[bytes]) -> str:
    try:
        log_file.flush()
        log_file.seek(0)
        text = log_file.read().decode("utf-8", "replace").strip()
        log_file.seek(0, os.SEEK_END)
    except (OSError, ValueError):
        return ""
    if not text:
        return ""
    tail = text[-XVFB_LOG_TAIL_CHARS:]
    return "\nXvfb said:\n" + "\n".join("  | " + line for line in tail.splitlines())
