"""X displays: naming, discovery and the checks Unity's Linux64 player needs.

The facts come from :mod:`renderd.platforms._x11probe` run in a child process; this module turns them
into reasons. A screen is usable when the display answers, the screen number exists (python-xlib
silently falls back to another screen when asked for a missing one, so the number is compared with
``screen_count()``), the GLX extension is present, the screen is at least the requested size and its
root window has depth 24.
"""

from __future__ import annotations

import concurrent.futures
import glob
import ipaddress
import logging
import os
import pwd
import re
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from renderd.platforms.probe import kill_probe, run_probe

log = logging.getLogger(__name__)

#: Deadline for probing one display (each display is probed in a child of its own).
X11_PROBE_TIMEOUT = 10.0
#: How many displays are probed at the same time.
X11_PROBE_PARALLEL = 4
#: Where X servers put their local sockets (``X<n>``).
X11_SOCKET_DIR = "/tmp/.X11-unix"
#: Deadline for connecting to a local X server's socket (to tell whether one runs there).
LOCAL_SOCKET_TIMEOUT = 1.0
#: The root depth Unity's X11 player needs.
REQUIRED_DEPTH = 24

_PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_x11probe.py")
_PROBE_MARKER = "RENDERD-X11-PROBE"
#: What the probe answers when python-xlib cannot be imported.
XLIB_MISSING = "python-xlib is not installed"
_BARE_RE = re.compile(r"^\d+(?:\.\d+)?$")
#: ``:NUMBER[.SCREEN]`` at the end of a name; the host is what comes before (it may hold colons: IPv6).
_TAIL_RE = re.compile(r":(?P<number>\d+)(?:\.(?P<screen>\d+))?$")
#: A host name or IPv4 address, as python-xlib's display names allow them (less the colons of IPv6).
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9._-]+")
#: The highest number of a display reached over TCP (it listens on port 6000 + its number).
MAX_TCP_DISPLAY = 65535 - 6000
#: Protocols a display name may start with (``tcp/host:0``): python-xlib knows ``tcp`` and ``unix``, libxcb (every X
#: client, Unity's player included) ``inet`` and ``inet6`` too; the probe reaches those over TCP.
DISPLAY_PROTOCOLS = ("tcp", "inet", "inet6", "unix")
#: The forms of X display names renderd takes, for its errors.
DISPLAY_NAME_FORMS = (
    "[PROTOCOL/]HOST:NUMBER[.SCREEN], such as ':0', ':1.0', 'unix:1', 'localhost:10.0', 'tcp/host:0', "
    "'[::1]:0' (PROTOCOL: tcp, inet, inet6 or unix; HOST: empty for this machine's socket, a host name, an IPv4 "
    "address or an IPv6 address, bracketed or not)"
)

MANAGED_FIX = 'let renderd start an Xvfb (x_display="managed"; needs the xvfb package: apt-get install xvfb)'


def managed_fix(xvfb_path: str | None) -> str:
    """:data:`MANAGED_FIX` for a machine where Xvfb is installed at ``xvfb_path`` (None: it is not)."""
    if xvfb_path is None:
        return MANAGED_FIX
    return (f'let renderd start an Xvfb (x_display="managed", as launch()\'s argument or the x_display key of '
            f"the configuration; Xvfb is installed: {xvfb_path})")


@dataclass(frozen=True)
class DisplayName:
    """A parsed X display name ``[protocol/][host]:number[.screen]``. ``host`` is as written (``[::1]`` keeps its
    brackets); ``protocol`` is None when the name has none."""

    host: str
    number: int
    screen: int | None
    protocol: str | None = None

    @property
    def base(self) -> str:
        """The name without its screen: ``:1`` for ``:1.2``, ``tcp/host:1`` for ``tcp/host:1.2``."""
        prefix = f"{self.protocol}/" if self.protocol else ""
        return f"{prefix}{self.host}:{self.number}"

    @property
    def address(self) -> str:
        """The host without IPv6 brackets (``::1`` for ``[::1]``)."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    @property
    def tcp(self) -> bool:
        """Whether clients reach this display over TCP (as libxcb and python-xlib decide it): a host other than
        ``unix`` is named and the protocol is not ``unix``."""
        return self.protocol != "unix" and self.host not in ("", "unix")

    def with_screen(self, screen: int) -> str:
        return f"{self.base}.{screen}"

    def __str__(self) -> str:
        return self.base if self.screen is None else self.with_screen(self.screen)


def parse_display_name(name: str) -> DisplayName | None:
    """Parse ``:1``, ``:1.0``, ``unix:1.0``, ``host:10.0``, ``tcp/host:0``, ``[::1]:0`` (see
    :data:`DISPLAY_NAME_FORMS`); ``None`` when it is not a display name (:func:`display_name_problem` says why).
    A number without a colon (``1``, ``0.0``) is taken as AI2-THOR takes ``x_display``: ``:1``, ``:0.0``."""
    parsed = _parse(name)
    return parsed if isinstance(parsed, DisplayName) else None


def display_name_problem(name: str) -> str | None:
    """Why ``name`` is not an X display name renderd can use (None when it is), saying what and where."""
    why = display_name_error(name)
    return None if why is None else f"{name!r} is not an X display name: {why}; expected {DISPLAY_NAME_FORMS}"


def display_name_error(name: str) -> str | None:
    """What is wrong in ``name`` as an X display name (``"it does not end with ':NUMBER' ..."``), or None."""
    parsed = _parse(name)
    return None if isinstance(parsed, DisplayName) else parsed


def _parse(name: str) -> DisplayName | str:
    """What :func:`parse_display_name` returns, or why there is none. The name is split as libxcb splits it
    (the protocol before the ``/``, the number after the last ``:``), and only what python-xlib (through the probe)
    and X clients both take is a name."""
    name = name.strip()
    if ":" not in name and _BARE_RE.match(name):
        name = ":" + name
    protocol: str | None = None
    rest = name
    if "/" in rest:
        protocol, _, rest = rest.partition("/")
        if protocol not in DISPLAY_PROTOCOLS:
            return f"{protocol!r} before the '/' is not a protocol (tcp, inet, inet6 or unix)"
    tail = _TAIL_RE.search(rest)
    if tail is None:
        return "it does not end with ':NUMBER' or ':NUMBER.SCREEN'"
    host = rest[: tail.start()]
    problem = _host_problem(host)
    if problem is not None:
        return problem
    if protocol in ("tcp", "inet", "inet6") and not host:
        return f"protocol {protocol!r} needs a host (as in '{protocol}/localhost:{tail['number']}')"
    screen = tail["screen"]
    parsed = DisplayName(host, int(tail["number"]), None if screen is None else int(screen), protocol)
    if parsed.tcp and parsed.number > MAX_TCP_DISPLAY:
        # (X clients keep the port in 16 bits: they, and the probe, would reach port 6000 + N - 65536, another display's)
        return (f"display {parsed.number} is reached over TCP on port 6000 + {parsed.number}, beyond the last port "
                f"(65535): a display on a host is numbered 0..{MAX_TCP_DISPLAY}")
    return parsed


def _host_problem(host: str) -> str | None:
    if not host or _HOSTNAME_RE.fullmatch(host):
        return None
    bracketed = host.startswith("[") and host.endswith("]")
    literal = host[1:-1] if bracketed else host
    if bracketed or ":" in literal:
        try:
            ipaddress.IPv6Address(literal)
        except ValueError:
            return f"the host {host!r} is not an IPv6 address"
        if "%" in literal:
            return f"the host {host!r} has a zone index, which X clients do not all take"
        return None
    return f"the host {host!r} is not a host name or IP address"


def socket_displays(socket_dir: str = X11_SOCKET_DIR) -> list[str]:
    """Displays with a local socket in ``socket_dir``, lowest number first (``[":0", ":1"]``)."""
    numbers = []
    for path in glob.glob(os.path.join(socket_dir, "X*")):
        suffix = os.path.basename(path)[1:]
        if suffix.isdigit():
            numbers.append(int(suffix))
    return [f":{n}" for n in sorted(set(numbers))]


@dataclass
class DisplayFacts:
    """What the probe found on one display (``ok`` False: it could not be reached; see ``error``)."""

    name: str
    ok: bool
    error: str = ""
    error_kind: str = ""
    screen_count: int = 0
    glx: bool = False
    vendor: str = ""
    screens: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DisplayFacts:
        return cls(
            name=str(data.get("name", "")),
            ok=bool(data.get("ok")),
            error=str(data.get("error", "")),
            error_kind=str(data.get("error_kind", "")),
            screen_count=int(data.get("screen_count", 0)),
            glx=bool(data.get("glx")),
            vendor=str(data.get("vendor", "")),
            screens=[dict(s) for s in data.get("screens", [])],
        )


def probe_displays(
    names: Iterable[str], env: Mapping[str, str], timeout: float | None = None
) -> dict[str, DisplayFacts]:
    """Probe each display (by its base name, screens included); keyed by the given names. Each display
    is probed in a child of its own with its own ``timeout`` (default :data:`X11_PROBE_TIMEOUT`), a few at a time (see :class:`DisplayProbes`),
    so a hung server fails only itself.

    Never raises for a display's problems: an unreachable display, a hung server or a missing
    python-xlib come back as facts with ``ok=False`` and an ``error``.
    """
    names = list(dict.fromkeys(names))
    with DisplayProbes(names, env, timeout) as probes:
        return {name: probes.result(name) for name in names}


class DisplayProbes:
    """Probes of several displays running concurrently, one child per display, each with its own deadline
    (at most :data:`X11_PROBE_PARALLEL` at a time, in the order given). :meth:`result` waits for one
    display only, so a caller that walks its candidates in order of preference stops at the first usable
    one without waiting for a frozen server further down the list; :meth:`close` (or leaving the
    ``with`` block) kills the probes still running and waits for their threads.
    """

    def __init__(
        self,
        names: Iterable[str],
        env: Mapping[str, str],
        timeout: float | None = None,
        parallel: int | None = None,
    ) -> None:
        self.names = list(dict.fromkeys(names))
        # XAUTHORITY and HOME matter for authorisation; DISPLAY must not leak into the probe's choice. The
        # probe is renderd's own Python: PYTHONPATH, PYTHONHOME ... set for the player (a Python player's
        # own installation) would break it, and every display would seem unreachable; it gets renderd's.
        self._env = {k: v for k, v in env.items() if k != "DISPLAY" and not k.startswith("PYTHON")}
        self._env.update((k, v) for k, v in os.environ.items() if k.startswith("PYTHON"))
        self._timeout = X11_PROBE_TIMEOUT if timeout is None else timeout
        parallel = X11_PROBE_PARALLEL if parallel is None else parallel
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._closed = False
        self._futures: dict[str, concurrent.futures.Future[DisplayFacts]] = {}
        if not self.names:
            self._pool = None
            return
        # Each probe runs (and is waited for) on a pool thread: the thread outlives its child, as
        # PR_SET_PDEATHSIG requires (see renderd.platforms.probe).
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, min(parallel, len(self.names))), thread_name_prefix="renderd-x11-probe"
        )
        for name in self.names:
            self._futures[name] = self._pool.submit(self._probe, name)

    def result(self, name: str) -> DisplayFacts:
        """The facts about ``name`` (one of the names given), waiting for its probe."""
        future = self._futures[name]
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            return DisplayFacts(name, False, "the X probe was cancelled", "probe")

    def close(self) -> None:
        """Kill the probes still running, drop those not started, and wait for the threads. Idempotent."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for proc in running:
            kill_probe(proc)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> DisplayProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if not self._closed:
                self._running.add(proc)
                return
        kill_probe(proc)

    def _probe(self, name: str) -> DisplayFacts:
        with self._lock:
            if self._closed:
                return DisplayFacts(name, False, "the X probe was cancelled", "probe")
        try:
            outcome = run_probe(
                _PROBE_SCRIPT, [name], marker=_PROBE_MARKER, env=self._env, timeout=self._timeout,
                on_start=self._started,
            )
        except OSError as exc:
            return DisplayFacts(name, False, f"the X probe could not be started: {exc}", "probe")
        finally:
            with self._lock:
                self._running = {p for p in self._running if p.returncode is None}
        if outcome.answer is None or "displays" not in outcome.answer:
            error = outcome.failure or str((outcome.answer or {}).get("error", "no answer"))
            if outcome.stderr:
                error += f": {outcome.stderr.splitlines()[-1]}"
            kind = "hung" if outcome.timed_out else "xlib" if outcome.answer and XLIB_MISSING in error else "probe"
            return DisplayFacts(name, False, f"the X probe failed: {error}", kind)
        for item in outcome.answer["displays"]:
            found = DisplayFacts.from_json(item)
            if found.name == name:
                return found
        return DisplayFacts(name, False, "the X probe said nothing about it", "probe")


def screen_reasons(
    facts: DisplayFacts, screen: int, width: int, height: int, *, managed: bool = False
) -> list[str]:
    """Why screen ``screen`` of the probed display cannot serve a ``width`` x ``height`` player (empty: it can).
    ``managed``: the display is an Xvfb renderd started, so the fixes name what to install or ask for, not
    how to start a server or that renderd could start one."""
    parsed = parse_display_name(facts.name)
    base = parsed.base if parsed else facts.name
    label = parsed.with_screen(screen) if parsed else facts.name
    # Xvfb takes the display as ":N" only ("unix:N" and "host:N" are unrecognised options); a display on
    # a host is reached over TCP, which an X server does not listen on unless told to.
    server = f":{parsed.number}" if parsed else base
    remote = parsed is not None and parsed.tcp
    if managed:
        return _managed_screen_reasons(facts, screen, width, height, label)
    if not facts.ok:
        if facts.error_kind in _PROBE_FIXES:
            return [_PROBE_FIXES[facts.error_kind](facts, base)]
        if facts.error_kind == "name":
            return [f"{facts.name!r} is {facts.error}; fix: use a name like ':0' or ':1.0', or {MANAGED_FIX}"]
        if facts.error_kind == "refused":
            return [_refused_reason(facts, base)]
        local_socket = _local_server_socket(parsed) if remote and facts.error_kind == "connect" else None
        if local_socket is not None:
            return [_tcp_only_reason(facts, parsed, screen, local_socket)]
        where = f"on {parsed.host}, listening on TCP: Xvfb {server} -listen tcp" if remote else f"Xvfb {server}"
        # with every screen up to the one asked for: a server with screen 0 only would fail the next check
        screen_args = " ".join(f"-screen {i} {width}x{height}x24" for i in range(screen + 1))
        holder = None if remote or parsed is None else _lock_holder(parsed.number)
        head = f"X display {facts.name} is not reachable: {facts.error}; fix: "
        if holder is not None and holder[1].startswith("X"):  # Xorg, Xvfb, Xwayland, Xvnc ...: not stale
            path, (pid, comm) = X_LOCK_FILE.format(number=parsed.number), holder
            return [
                head + f"{path} names pid {pid} ({comm}), an X server that runs: if it serves display "
                f":{parsed.number}, renderd cannot reach its socket {X11_SOCKET_DIR}/X{parsed.number} (removed by a "
                "/tmp cleaner, not writable for this user, or renderd sees another /tmp than the server): restart "
                f"that server, check DISPLAY, or {MANAGED_FIX}"
            ]
        stale = ""
        if holder is not None:
            path, (pid, comm) = X_LOCK_FILE.format(number=parsed.number), holder
            stale = (
                f"{path} names pid {pid}{f' ({comm})' if comm else ''}, which runs but does not serve the display: "
                "unless an X server is starting there, the lock is stale (its pid taken again since, as when a "
                f"container restarts with its /tmp) and every X server refuses display :{parsed.number} while it "
                f"is there: remove {path}, then "
            )
        return [
            f"{head}{stale}start an X server there ({where} {screen_args} +extension GLX &), check DISPLAY and "
            f"XAUTHORITY, or {MANAGED_FIX}"
        ]
    if screen >= facts.screen_count:
        plural = "s" if facts.screen_count != 1 else ""
        return [
            f"screen {screen} does not exist on X display {base} (it has {facts.screen_count} screen{plural}: "
            f"0..{facts.screen_count - 1}); fix: use a screen below {facts.screen_count}, or start the X server "
            f"with more screens (Xvfb {server} -screen 0 ... -screen {screen} {width}x{height}x24)"
        ]
    reasons = []
    if not facts.glx:
        reasons.append(
            f"X display {base} has no GLX extension (Unity needs GLX); fix: start the server with "
            f"+extension GLX and install its GL drivers (apt-get install libgl1-mesa-dri libglx-mesa0), "
            f"or {MANAGED_FIX}"
        )
    geometry = facts.screens[screen]
    if geometry["width"] < width or geometry["height"] < height:
        reasons.append(
            f"screen {label} is {geometry['width']}x{geometry['height']}, smaller than the requested "
            f"{width}x{height} (frames would be cut off); fix: start the X server with a larger screen "
            f"(-screen {screen} {width}x{height}x24), or {MANAGED_FIX}"
        )
    if geometry["depth"] != REQUIRED_DEPTH:
        reasons.append(
            f"screen {label} has colour depth {geometry['depth']}, Unity needs {REQUIRED_DEPTH}; fix: start "
            f"the X server with a 24-bit screen (-screen {screen} {width}x{height}x24), or {MANAGED_FIX}"
        )
    return reasons


#: Reasons for a display the probe could not check (``error_kind``): the fix is not to start a server there.
_PROBE_FIXES = {
    "hung": lambda facts, base: (
        f"X display {facts.name} does not answer: {facts.error}; fix: its X server accepts connections but does "
        f"not answer (stopped or hung): restart the server of {base}, or {MANAGED_FIX}"
    ),
    "xlib": lambda facts, base: (
        f"X display {facts.name} cannot be checked: python-xlib is not installed for {sys.executable}; fix: "
        f"{sys.executable} -m pip install 'python-xlib>=0.33' (a dependency of renderd)"
    ),
    "probe": lambda facts, base: (
        f"X display {facts.name} cannot be checked: {facts.error}; fix: run `{sys.executable} -P "
        f"{_PROBE_SCRIPT} {facts.name}` to see why (renderd's Python installation may be broken)"
    ),
}


def _local_server_socket(parsed: DisplayName) -> str | None:
    """The socket of a local X server on display ``parsed.number`` when ``parsed`` names this machine by a host
    name (``localhost:1``, ``127.0.0.1:1``, its own name), else None. Such a name is reached over TCP, which X
    servers do not listen on unless told to (``-listen tcp``)."""
    if parsed.address.lower() not in {"localhost", "127.0.0.1", "::1", socket.gethostname().lower()}:
        return None
    path = os.path.join(X11_SOCKET_DIR, f"X{parsed.number}")
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    # A socket left by a server that died is no server: something must accept the connection.
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(LOCAL_SOCKET_TIMEOUT)
        sock.connect(path)
    except OSError:
        return None
    finally:
        sock.close()
    return path


def _tcp_only_reason(facts: DisplayFacts, parsed: DisplayName, screen: int, local_socket: str) -> str:
    local = f":{parsed.number}" if screen == 0 else f":{parsed.number}.{screen}"
    return (
        f"X display {facts.name} is not reachable: {facts.error}; fix: an X server runs on this machine's display "
        f":{parsed.number} ({local_socket}), but {parsed.base} is reached over TCP, "
        f"which it does not listen on (X servers do not by default): use {local!r} to reach it through its "
        f"socket, or restart it with -listen tcp (starting another server there fails: the display is taken)"
    )


#: Where an X server on this machine locks its display number (it holds the server's pid).
X_LOCK_FILE = "/tmp/.X{number}-lock"


def _lock_holder(number: int) -> tuple[int, str] | None:
    """``(pid, process name)`` of the running process the lock file of local display ``number`` names, else
    None (no lock, unreadable, or its process is gone: an X server replaces such a lock itself).

    An X server refuses a display whose lock names a running process ("Server is already active"). When
    nothing could be reached on the display, a lock naming a process that is no X server is stale (its pid
    was taken again, as when a container restarts with its /tmp), unless a server is just starting there."""
    path = X_LOCK_FILE.format(number=number)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        pid = int(data.strip())
    except ValueError:
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass  # EPERM: it runs, as another user
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return pid, f.read().strip()
    except OSError:
        return pid, ""


#: What an X server says when it turns a client away for want of authorization (Xorg, Xvfb, Xwayland).
_AUTH_REFUSAL_RE = re.compile(r"authoriz|protocol specified|cookie|access", re.IGNORECASE)


def _refused_reason(facts: DisplayFacts, base: str) -> str:
    """A server that answered the connection setup with a refusal runs: it is not to be started, but let in."""
    head = f"X display {facts.name} does not let renderd in: {facts.error}; fix: "
    if _AUTH_REFUSAL_RE.search(facts.error):
        try:
            user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            user = str(os.geteuid())
        return head + (
            "its X server runs and wants a cookie renderd does not send: set XAUTHORITY (in the environment's env, "
            "which the player gets too) to the file that holds it (`xauth -f FILE list` shows the displays a file "
            f"has cookies for), or let this user in on that server (DISPLAY={base} xhost +SI:localuser:{user}), "
            f"or {MANAGED_FIX}"
        )
    return head + (
        "its X server runs but turned the connection away for the reason it gives (too many clients: close some "
        f"or restart it), or {MANAGED_FIX}"
    )


#: What a managed Xvfb needs: Xvfb itself (Debian/Ubuntu package ``xvfb``) and the Mesa drivers its GLX loads.
MANAGED_GL_DRIVERS = "apt-get install libgl1-mesa-dri libglx-mesa0"
MANAGED_XVFB_REINSTALL = "apt-get install --reinstall xvfb"


def _managed_screen_reasons(facts: DisplayFacts, screen: int, width: int, height: int, label: str) -> list[str]:
    # The caller (renderd.platforms.xvfb) adds whether Xvfb exited and quotes the last lines of its output.
    if not facts.ok:
        if facts.error_kind in ("xlib", "probe"):
            return [_PROBE_FIXES[facts.error_kind](facts, facts.name)]
        if facts.error_kind == "hung":
            return [
                f"it accepts connections but does not answer: {facts.error}; fix: Xvfb is hung, or the machine "
                f"is too loaded for it to answer in time (retry when the load is lower); if it persists, check "
                f"Xvfb's errors and reinstall it and its GL drivers ({MANAGED_XVFB_REINSTALL} libgl1-mesa-dri "
                f"libglx-mesa0)"
            ]
        return [
            f"it is not reachable: {facts.error}; fix: Xvfb failed right after it announced its display: an "
            f"error about GLX, DRI or swrast in its output means its GL drivers are missing "
            f"({MANAGED_GL_DRIVERS}); otherwise the Xvfb on PATH is broken or not Xvfb "
            f"({MANAGED_XVFB_REINSTALL})"
        ]
    if screen >= facts.screen_count:
        return [
            f"screen {screen} does not exist (it has {facts.screen_count}); fix: the server started as Xvfb "
            f"ignored its -screen options: the Xvfb on PATH is not Xvfb, or is a wrapper that drops options "
            f"(use the real one: {MANAGED_XVFB_REINSTALL})"
        ]
    reasons = []
    if not facts.glx:
        reasons.append(
            "it has no GLX extension (Unity needs GLX) although renderd started it with +extension GLX; fix: "
            f"install the GL drivers Xvfb's GLX loads: {MANAGED_GL_DRIVERS} (and the Xvfb of the xvfb package, "
            f"built with GLX: {MANAGED_XVFB_REINSTALL})"
        )
    geometry = facts.screens[screen]
    if geometry["width"] < width or geometry["height"] < height:
        reasons.append(
            f"screen {label} is {geometry['width']}x{geometry['height']}, smaller than the requested "
            f"{width}x{height}; fix: ask for a size Xvfb can make"
        )
    if geometry["depth"] != REQUIRED_DEPTH:
        reasons.append(
            f"screen {label} has colour depth {geometry['depth']}, Unity needs {REQUIRED_DEPTH}; fix: the Xvfb on "
            f"PATH ignored its -screen {screen} {width}x{height}x{REQUIRED_DEPTH} option (use the real one: "
            f"{MANAGED_XVFB_REINSTALL})"
        )
    return reasons
