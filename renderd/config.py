"""The daemon's configuration: every key defined once, with its default, type and help text.

A configuration file is TOML::

    [daemon]
    socket = "/run/renderd/renderd.sock"
    runtime_dir = "/run/renderd"
    http = "127.0.0.1:8200"

    [environments.demo]
    executable = "renderd-player"
    width = 300
    ...

Each key is one dataclass field of :class:`DaemonConfig` or :class:`EnvironmentConfig`, declared with
:func:`setting` (default, help text, and a check for impossible values). Those definitions feed the TOML
parser (:func:`load`), ``renderd validate``, ``renderd start``, the control API's
``PUT /v1/environments/{name}`` (:func:`parse_environment`) and the key tables of docs/configuration.md
(``python -m renderd.config --markdown``). Unknown keys, wrong types and impossible values raise
:class:`~renderd.errors.ConfigError` naming the file, the key (``environments.demo.width``) and why.

Constructing a config has no side effects: nothing is created, opened or started. Loading reads the file
and resolves executables to absolute paths (an executable that cannot be found is an error at load time).
"""

from __future__ import annotations

import dataclasses
import difflib
import grp
import ipaddress
import math
import numbers
import os
import re
import stat
import sys
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import click

from renderd.errors import ConfigError
from renderd.process import endpoint_variable_error
from renderd.protocol import MAX_RESOLUTION

__all__ = [
    "DaemonConfig",
    "EnvironmentConfig",
    "Config",
    "PLATFORMS",
    "QUALITIES",
    "RESTART_POLICIES",
    "TRANSPORTS",
    "DEFAULT_ENVIRONMENT",
    "default_socket_path",
    "SOCKET_ENV_VAR",
    "environment_socket",
    "error_text",
    "key_line",
    "default_runtime_dir",
    "load",
    "loads",
    "default_config",
    "parse_environment",
    "parse_http_address",
    "parse_gpus",
    "resolve_executable",
    "markdown",
    "validate_command",
    "SECRET_NAME_PARTS",
    "REDACTED",
    "is_secret_name",
    "redact_env",
    "redact_argv",
    "MAX_SECONDS",
    "MAX_INSTANCES",
    "ArgumentError",
    "check_seconds",
    "IN_PLACE_KEYS",
    "RESTART_KEYS",
]

#: Platform names an environment may ask for (``auto`` lets renderd choose; see docs/platforms.md).
PLATFORMS = ("auto", "CloudRendering", "Linux64", "OSXIntel64", "headless")
#: Unity quality levels, as AI2-THOR builds name them.
QUALITIES = ("Very Low", "Low", "Medium", "MediumCloseFitShadows", "High", "Very High", "Ultra", "High WebGL")
#: When a player that exited is started again.
RESTART_POLICIES = ("always", "on-failure", "never")
#: How a player talks to its client.
TRANSPORTS = ("fifo", "http")
#: The environment served when renderd starts with no configuration file.
DEFAULT_ENVIRONMENT = "demo"
#: The environment variable naming the control socket: for the clients (``renderd status``, ``renderd.connect()``)
#: when they are given none, and for ``renderd start`` when neither ``--socket`` nor ``[daemon] socket`` names one.
SOCKET_ENV_VAR = "RENDERD_SOCKET"
#: The longest path a unix socket address holds (``sun_path`` is 108 bytes including the NUL).
MAX_SOCKET_PATH = 107
#: Environment names appear in URLs and file names: keep them to a safe alphabet.
ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The most seconds any setting or argument accepts (a week: a Unity build's cold start or a long step fits
#: with room to spare). Every wait in renderd has a deadline; an infinite or absurd number of seconds is a
#: mistake that would make one never end (or overflow the poll timeout).
MAX_SECONDS = 7 * 24 * 3600.0
#: The most players one environment may ask for. Each is a process (a Unity player is a GPU context and
#: gigabytes of memory); a typo'd count must not make the daemon fork until the machine gives out.
MAX_INSTANCES = 1024
#: The most control API worker threads (a lease request waiting for a player has a thread of its own besides).
MAX_API_THREADS = 1024
#: The largest configuration file renderd reads (a real one is a few kilobytes): a path that names something
#: huge or endless must be an error, not a daemon or ``renderd validate`` eating memory.
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Parts of a variable or option name that mark its value as a secret (compared upper-cased).
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
#: What a secret value is shown as in every outward view (status, API answers, ``renderd validate``).
REDACTED = "***"


# -- secrets -----------------------------------------------------------------------------------------
def is_secret_name(name: str) -> bool:
    """Whether a variable or option named ``name`` holds a secret (its name contains TOKEN, SECRET,
    PASSWORD, PASSWD, KEY or CREDENTIAL, in any case)."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the values of secret-looking names replaced by :data:`REDACTED` (names are kept, so
    a reader sees that they are set)."""
    return {name: REDACTED if is_secret_name(name) else value for name, value in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the values of secret-looking options hidden: ``--token=X`` -> ``--token=***``, and the
    argument after ``--password`` / ``-apiKey`` -> ``***``. The program itself is kept."""
    out: list[str] = []
    hide_next = False
    for i, arg in enumerate(argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if i > 0 and arg.startswith("-"):
            name, sep, _value = arg.partition("=")
            if is_secret_name(name):
                if sep:
                    out.append(f"{name}={REDACTED}")
                    continue
                hide_next = True
        out.append(arg)
    return out


# -- defaults that depend on who runs the daemon ------------------------------------------------------
def default_runtime_dir() -> str:
    """``/run/renderd`` for root, else ``$XDG_RUNTIME_DIR/renderd``, else ``/tmp/renderd-$UID``."""
    if os.geteuid() == 0:
        return "/run/renderd"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "renderd")
    return f"/tmp/renderd-{os.geteuid()}"


def default_socket_path() -> str:
    """The control socket when none is configured: ``renderd.sock`` in :func:`default_runtime_dir`."""
    return os.path.join(default_runtime_dir(), "renderd.sock")


# -- one definition per key ---------------------------------------------------------------------------
Check = Callable[[Any], "str | None"]


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    check: Check | None = None,
    default_factory: Callable[[], Any] | None = None,
    doc_default: str | None = None,
    doc_type: str | None = None,
) -> Any:
    """Declare one configuration key: its default, its help text, and a check returning why a value is
    impossible (or ``None`` when it is fine). Types come from the field's annotation."""
    metadata = {"help": help, "check": check, "doc_default": doc_default, "doc_type": doc_type}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


class ArgumentError(ConfigError, ValueError):
    """A bad argument to a Python call (``renderd.launch``, ``renderd.connect``...): a :class:`ConfigError`
    whose ``key`` is the argument's name (the same rule as the configuration key of that name), and a
    ``ValueError``, so either ``except`` catches it."""


def _seconds(value: float, *, zero_ok: bool = False) -> str | None:
    """Why ``value`` is not an acceptable number of seconds (``None`` when it is)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number of seconds, at most {MAX_SECONDS:g}, not {value}"
    if zero_ok and value < 0:
        return f"must be 0 or more seconds, got {value:g}"
    if not zero_ok and value <= 0:
        return f"must be greater than 0 seconds, got {value:g}"
    if value > MAX_SECONDS:
        return f"must be at most {MAX_SECONDS:g} seconds (7 days), got {value:g}"
    return None


def _positive_seconds(value: float) -> str | None:
    return _seconds(value)


def _non_negative_seconds(value: float) -> str | None:
    return _seconds(value, zero_ok=True)


def _lease_seconds(value: float) -> str | None:
    from renderd.daemon.leases import MAX_LEASE_TIMEOUT

    why = _seconds(value, zero_ok=True)
    if why is None and value > MAX_LEASE_TIMEOUT:
        why = (f"must be at most {MAX_LEASE_TIMEOUT:g} seconds, the longest a lease request may wait (as for the "
               f"timeout a client gives), got {value:g}")
    return why


def check_seconds(value: Any, name: str, *, zero_ok: bool = False) -> float:
    """Check a Python argument that is a number of seconds: a finite number greater than 0 (0 allowed
    with ``zero_ok``) and at most :data:`MAX_SECONDS`. Returns it as a float.

    Raises :class:`ArgumentError` (a ConfigError and a ValueError) naming ``name``.
    """
    # (numbers.Real: numpy's floats and integers too, as a timeout computed with numpy is)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"must be a number of seconds, got {value!r}", key=name)
    try:
        value = float(value)
    except OverflowError:  # (an int past float's range)
        raise ArgumentError(f"must be at most {MAX_SECONDS:g} seconds (7 days), got {value}", key=name) from None
    why = _seconds(value, zero_ok=zero_ok)
    if why:
        raise ArgumentError(why, key=name)
    return value


def _count(lowest: int, highest: int) -> Check:
    """A check for a whole number from ``lowest`` to ``highest``."""

    def check(value: int) -> str | None:
        if value < lowest:
            return f"must be {lowest} or more (at most {highest}), got {value}"
        if value > highest:
            return f"must be at most {highest}, got {value}"
        return None

    return check


def _positive(value: Any) -> str | None:
    return None if value > 0 else f"must be greater than 0, got {value}"


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(value: str) -> str | None:
        if value in choices:
            return None
        return f"{value!r} is not one of: {', '.join(choices)}{_choice_hint(value, choices)}"

    return check


def _choice_hint(value: str, choices: tuple[str, ...]) -> str:
    """``; did you mean 'Ultra'?`` for a value that is one of ``choices`` written in another case or with a
    typo (as for a key's typo), else ""."""
    folded = {c.casefold(): c for c in choices}
    close = folded.get(value.casefold())
    if close is None:
        match = difflib.get_close_matches(value.casefold(), list(folded), n=1, cutoff=0.7)
        close = folded[match[0]] if match else None
    return f"; did you mean {close!r}?" if close else ""


def _absolute_path(value: str) -> str | None:
    if not value:
        return "must not be empty"
    if not os.path.isabs(value):
        return f"{value!r} must be an absolute path"
    if "\0" in value:
        return "must not contain a NUL byte"
    return None


def _socket_path(value: str) -> str | None:
    why = _absolute_path(value)
    if why:
        return why
    if len(os.fsencode(value)) > MAX_SOCKET_PATH:
        return f"{value!r} is {len(os.fsencode(value))} bytes long; a unix socket path holds at most {MAX_SOCKET_PATH}"
    if value.endswith("/") or os.path.isdir(value):
        example = value.rstrip("/") + "/renderd.sock"
        return f"{value!r} names a directory; give the socket's own path, such as {example!r}"
    return None


_GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")


def _group(value: str) -> str | None:
    if value == "":
        return None
    if not _GROUP_NAME.fullmatch(value):
        return f"{value!r} is not a group name"
    try:
        grp.getgrnam(value)  # a lookup: nothing is changed
    except KeyError:
        return f"there is no group named {value!r} on this machine (getent group {value})"
    return None


def _optional_absolute_path(value: str) -> str | None:
    return None if value == "" else _absolute_path(value)


def parse_http_address(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) into an IP literal and a port.

    Raises ValueError saying what is wrong.
    """
    bracketed = value.startswith("[")
    if bracketed:
        host, sep, port = value[1:].partition("]:")
        if not sep:
            raise ValueError(f"{value!r} is not [IPV6]:PORT")
    else:
        host, sep, port = value.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{value!r} is not HOST:PORT (for example 127.0.0.1:8200)")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"host {host!r} is not an IP address (players are told it as AI2THOR_HOST; for this machine only, 127.0.0.1 or ::1)") from None
    if bracketed and address.version != 6:
        raise ValueError(f"{value!r}: brackets are for an IPv6 address; write {host}:{port}")
    if not bracketed and address.version == 6:
        raise ValueError(f"{value!r}: an IPv6 address goes in brackets, as [{host}]:{port}")
    if not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:  # ASCII digits only
        raise ValueError(f"port {port!r} is not a number from 0 to 65535")
    return host, int(port)


def _http_address(value: str) -> str | None:
    if value == "":
        return None
    try:
        parse_http_address(value)
    except ValueError as exc:
        return str(exc)
    return None


def _resolution(value: int) -> str | None:
    # (as renderd.launch() says it for its width and height)
    if not 1 <= value <= MAX_RESOLUTION:
        return f"must be an integer 1..{MAX_RESOLUTION}, got {value}"
    return None


def x_display_problem(value: str) -> str | None:
    """Why ``value`` cannot be an ``x_display`` setting (None when it can): ``auto``, ``managed`` or an X display name
    in any form X clients and the probe take (:data:`renderd.platforms.x11.DISPLAY_NAME_FORMS`), a number without its
    colon taken as AI2-THOR's ``x_display`` takes it (``0`` as ``:0``); white space around it is refused. The
    configuration, launch() and renderd doctor all check it here."""
    if value in ("auto", "managed"):
        return None
    from renderd.platforms import x11  # (here: renderd.platforms imports this module)

    why = "it has white space around it" if value != value.strip() else x11.display_name_error(value)
    if why is None:
        return None
    return (f"{value!r} is not auto, managed or an X display name: {why}; expected auto, managed, a display number "
            f"('0', '1.0', as ':0', ':1.0') or {x11.DISPLAY_NAME_FORMS}")


def display_variable_problem(value: str) -> str | None:
    """Why ``value`` cannot be a player's ``DISPLAY`` (None when it can): an X display name as X clients take it, so
    with its ``:NUMBER`` (a bare ``0`` is AI2-THOR's ``x_display`` form, not a ``DISPLAY``)."""
    from renderd.platforms import x11

    why = "it has white space around it" if value != value.strip() else x11.display_name_error(value)
    if why is None and ":" not in value:
        why = "it has no ':NUMBER' (DISPLAY=:0, not DISPLAY=0)"
    return None if why is None else f"DISPLAY {value!r} is not an X display name: {why}; expected {x11.DISPLAY_NAME_FORMS}"


def _gpus(value: list[int]) -> str | None:
    for i, gpu in enumerate(value):
        if gpu < 0:
            return f"[{i}] is {gpu}; a device index is 0 or more"
    if len(set(value)) != len(value):
        return "lists a device twice"
    return None


def parse_gpus(text: str) -> list[int]:
    """Split a comma-separated list of GPU indices (``renderd doctor --gpus 0,1``; spaces around them are
    ignored, an empty text is no GPUs) and check it as the ``gpus`` key is checked.

    Raises ValueError saying what is wrong.
    """
    if not text.strip():
        return []
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if not re.fullmatch(r"[0-9]+", item):  # ASCII digits: int() would take "٣" or "-1" too
            raise ValueError(f"expected comma-separated GPU indices such as 0,1, got {text!r}")
    gpus = [int(item) for item in items]
    why = _gpus(gpus)
    if why:
        raise ValueError(f"{text!r} {why}")
    return gpus


#: The longest argument or environment string (``NAME=value``) the kernel passes to a program, its NUL included
#: (Linux's MAX_ARG_STRLEN, 32 pages): exec fails with E2BIG past it, so no configuration string may be longer.
MAX_ARG_STRLEN = 32 * 4096
#: What one environment's ``env`` table may take in all (its ``NAME=value`` strings): a quarter of the kernel's
#: limit on a program's arguments and environment together (ARG_MAX), the daemon's own environment, the
#: platform's variables and the argv coming on top.
MAX_ENV_BYTES = max(MAX_ARG_STRLEN, (os.sysconf("SC_ARG_MAX") if hasattr(os, "sysconf") else 2 * 1024 * 1024) // 4)


def _strings(value: Any) -> typing.Iterator[str]:
    """Every string in ``value`` (a string, or a list or table of them; table names included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)


def _unencodable(text: str) -> bool:
    """Whether ``text`` has no bytes for the OS: a path, argument or variable is handed to the kernel
    as ``os.fsencode(text)``, which a lone surrogate such as ``"\\ud800"`` (JSON can carry one) fails."""
    try:
        os.fsencode(text)
    except UnicodeError:
        return True
    return False


def _executable(value: str | list[str]) -> str | None:
    argv = [value] if isinstance(value, str) else value
    if not argv:
        return "must not be an empty list"
    if not argv[0]:
        return "must not be empty"
    return None


def _env(value: dict[str, str]) -> str | None:
    size = 0
    for name, text in value.items():
        entry = len(os.fsencode(name)) + len(os.fsencode(text)) + 2  # NAME=value and its NUL
        if entry > MAX_ARG_STRLEN:
            return (f"{name[:100]!r} is {entry} bytes as NAME=value, over the {MAX_ARG_STRLEN} the kernel passes to a "
                    "program as one environment variable (starting the player would fail with E2BIG)")
        size += entry + 8  # (and the kernel's pointer to it)
    if size > MAX_ENV_BYTES:
        return (f"takes {size} bytes as NAME=value strings, over the {MAX_ENV_BYTES} renderd allows (a quarter of "
                "the kernel's limit on a program's arguments and environment together, ARG_MAX): starting the "
                "player would fail with E2BIG; pass large data in a file")
    for name in value:
        if not name or "=" in name or "\0" in name:
            return f"{name!r} is not a valid environment variable name"
        reason = endpoint_variable_error(name)
        if reason is not None:
            return reason
    display = value.get("DISPLAY", "")
    if display:  # it names the player's display, as x_display does (empty: none)
        return display_variable_problem(display)
    return None


@dataclass(frozen=True)
class DaemonConfig:
    """The ``[daemon]`` table."""

    socket: str = setting(
        default_factory=default_socket_path,
        doc_default="`$RENDERD_SOCKET` when set, else `/run/renderd/renderd.sock` as root, else "
        "`$XDG_RUNTIME_DIR/renderd/renderd.sock` (`/tmp/renderd-$UID/renderd.sock` without `XDG_RUNTIME_DIR`)",
        help="Unix socket of the control API. Its directory is created with mode 0700, the socket with 0600. "
        "`renderd start` takes `--socket`, else this key, else `$RENDERD_SOCKET` (the variable the clients "
        "read), else the default path; it warns when the socket it listens on is not `$RENDERD_SOCKET`.",
        check=_socket_path,
    )
    socket_group: str = setting(
        "",
        doc_default='`""` (only the service user)',
        help="Group whose members may use the daemon: the socket becomes 0660, and the runtime directory, "
        "the players' pipe directories and the log directory 0750 (pipes 0660, player logs 0640), all "
        "with this group, so its members can `renderd.connect()` too. They can then do through the "
        "control API whatever the service user can (declaring an environment runs a program as the "
        "service user). Empty: everything is private to the service user (0700/0600).",
        check=_group,
    )
    runtime_dir: str = setting(
        default_factory=default_runtime_dir,
        doc_default="`/run/renderd` as root, else `$XDG_RUNTIME_DIR/renderd` (`/tmp/renderd-$UID`)",
        help="Directory (mode 0700) for the players' pipes and logs and the daemon's lock file. "
        "What renderd creates in it is removed when it stops.",
        check=_absolute_path,
    )
    http: str = setting(
        "",
        doc_default='`""` (off)',
        help="Address (`HOST:PORT` with an IP literal, such as `127.0.0.1:8200`; IPv6 in brackets: `[::1]:8200`) "
        "of the HTTP listener for `transport = \"http\"` players "
        "(each gets its own token) and for remote control: the control API, with the bearer token of "
        "`control_token_file`. Empty: no listener.",
        check=_http_address,
    )
    control_token_file: str = setting(
        "",
        doc_default='`""` (a token generated at start into `RUNTIME_DIR/control.token`, mode 0600)',
        help="File holding the bearer token of the control API on the HTTP listener (`[daemon] http`): "
        "requests other than the players' `/ping` and `/train` need `Authorization: Bearer TOKEN` "
        "(compared in constant time; 401 without it). At least 16 characters; surrounding whitespace "
        "is ignored. SIGHUP re-reads the file's contents (the path itself takes effect at restart).",
        check=_optional_absolute_path,
    )
    stop_grace: float = setting(
        5.0,
        help="Seconds a player gets to exit after SIGTERM before it is killed with SIGKILL. Every number of "
        "seconds in the configuration is finite and at most 604800 (7 days).",
        check=_positive_seconds,
    )
    max_boot_failures: int = setting(
        5,
        help="Consecutive boot failures (an exit or an undecodable first frame before readiness, no first frame "
        "within `start_timeout`, a player or platform that could not be started) after which a player slot is "
        "given up (state FAILED, with the reason). A reload that lowers it gives up at once the slots waiting to "
        "start again after as many failures or more, unless the same reload changes their environment's "
        "configuration: those start with the new one, their failures forgotten.",
        check=_positive,
    )
    backoff_initial: float = setting(
        0.5,
        help="Seconds before the first restart of a crashed player; doubles with each consecutive failure. "
        "Failures stay consecutive across a start that reached readiness: a player that exits soon after every "
        "start, before any lease, is a crash loop and its restarts keep slowing down. A series ends, and the next "
        "exit waits `backoff_initial` again, once a player has served a lease or stayed up `backoff_max` seconds "
        "after becoming ready.",
        check=_positive_seconds,
    )
    backoff_max: float = setting(
        30.0,
        help="Longest wait, in seconds, between restarts of a player that keeps failing.",
        check=_positive_seconds,
    )
    lease_timeout: float = setting(
        30.0,
        help="Seconds a lease request waits for a ready player when the client does not say; at most 3600, the "
        "longest any lease request waits (`renderd.daemon.leases.MAX_LEASE_TIMEOUT`).",
        check=_lease_seconds,
    )
    api_threads: int = setting(
        16,
        help="Worker threads of the control API (at most 1024). A lease request waiting for a player gets a thread of "
        "its own while it waits, beyond these.",
        check=_count(1, MAX_API_THREADS),
    )
    log_dir: str = setting(
        "",
        doc_default='`""` (`RUNTIME_DIR/logs`, removed at stop)',
        help="Directory for the players' own log files (`-logFile`), kept after renderd stops. "
        "Empty: a directory inside `runtime_dir`, removed with it.",
        check=_optional_absolute_path,
    )


#: Keys of an environment that a running player never sees: how many players are kept, the supervisor's timings
#: (``start_timeout``: how long one may take to send its first frame), the client's ``step_timeout``, the health
#: checks and the restart policy. A reload or PUT that changes only these applies them to the running players,
#: without replacing any (see :meth:`EnvironmentConfig.replaces_players`).
IN_PLACE_KEYS = frozenset({"instances", "start_timeout", "step_timeout", "health_interval", "restart"})

#: ``[daemon]`` keys that a reload leaves as they are until renderd restarts (the listeners, the directories and the
#: API's threads are set up once, at start); a reload applies every other ``[daemon]`` key.
RESTART_KEYS = ("socket", "socket_group", "runtime_dir", "http", "control_token_file", "api_threads", "log_dir")


#: The reference player's program name. It renders with numpy on any machine, so when ``auto`` finds no valid
#: platform for it, the daemon and :func:`renderd.launch` run it without one (with a warning saying why).
REFERENCE_PLAYER = "renderd-player"


@dataclass(frozen=True)
class EnvironmentConfig:
    """One ``[environments.NAME]`` table: what to run and how many ready players to keep."""

    name: str = field(default=DEFAULT_ENVIRONMENT, metadata={"internal": True})
    executable: str | list[str] = setting(
        REFERENCE_PLAYER,
        doc_type="string or list of strings",
        help="The player: a path or command name, or an argv list. Resolved to an absolute path when the "
        "configuration is loaded (a name is looked up next to the Python running renderd, then on `PATH`).",
        check=_executable,
    )
    width: int = setting(300, help="Frame width in pixels (`-screen-width`).", check=_resolution)
    height: int = setting(300, help="Frame height in pixels (`-screen-height`).", check=_resolution)
    quality: str = setting(
        "Ultra", help=f"Unity quality level (`-screen-quality`): {', '.join(QUALITIES)}.", check=_one_of(QUALITIES)
    )
    platform: str = setting(
        "auto",
        help=f"Platform to render on: {' | '.join(PLATFORMS)}. `auto` picks the first valid one "
        "(see docs/platforms.md).",
        check=_one_of(PLATFORMS),
    )
    x_display: str = setting(
        "auto",
        help='X display for Linux64: `auto`, a display name such as `":0.0"` (a bare `"0.0"` is taken as `":0.0"`, '
        'as AI2-THOR takes it), or `managed` (renderd starts and owns an Xvfb). Anything but `auto` needs `platform` '
        '`auto` or `Linux64`: the other platforms use no X display.',
        check=x_display_problem,
    )
    gpus: list[int] = setting([], help="GPU device indices to spread instances over, round-robin.", check=_gpus)
    transport: str = setting(
        "fifo",
        help='How players talk to clients: `fifo` (named pipes) or `http` (needs `[daemon] http`).',
        check=_one_of(TRANSPORTS),
    )
    instances: int = setting(
        1, help=f"Number of ready players to keep, 0 to {MAX_INSTANCES}.", check=_count(0, MAX_INSTANCES)
    )
    start_timeout: float = setting(
        300.0,
        help="Seconds a player has to send its first frame (readiness), counted from its start; at most 604800 "
        "(7 days). A reload or PUT that changes only this (or other keys a running player never sees) replaces "
        "no player: the new value holds from then on, for a player starting at that moment too (still counted "
        "from its start: one started longer ago than a lowered value has failed to boot).",
        check=_positive_seconds,
    )
    step_timeout: float = setting(
        100.0,
        help="Seconds a client waits for the answer to one step; at most 604800 (7 days).",
        check=_positive_seconds,
    )
    health_interval: float = setting(
        0.0,
        help="Seconds between health checks of an idle (READY) player, on either transport: the daemon sends it "
        "the action `Pass` and expects a whole answer, echoing its `sequenceId`, within `step_timeout`. One that "
        "does not answer in time is hung: it is stopped and restarted with backoff (and a managed X display it "
        "runs on is checked as well). A lease request waits for a check under way (one step). 0: no checks, and "
        "a player that hangs while idle is noticed only by its next client's `step_timeout`.",
        check=_non_negative_seconds,
    )
    restart: str = setting(
        "on-failure",
        help="Restart a player that exited: `always`, `on-failure` (not after exit code 0) or `never`. "
        "A player whose lease ended uncleanly is always replaced.",
        check=_one_of(RESTART_POLICIES),
    )
    env: dict[str, str] = setting(
        {},
        help="Extra environment variables for the player; the platform's probes run with them too, and they "
        "override the platform's variables, except `DISPLAY`: a `DISPLAY = \":1\"` here names display `:1` "
        "(as `x_display` does, so it must be an X display name, or empty, and cannot go with an `x_display` other "
        "than `auto`), and each player gets the screen chosen on it (`:1.0`, `:1.1` ...). The player's endpoint "
        "(`AI2THOR_SERVER_TYPE`, `AI2THOR_FIFO_SERVER_PIPE_PATH`, `AI2THOR_FIFO_CLIENT_PIPE_PATH`, `AI2THOR_HOST`, "
        "`AI2THOR_PORT`, `AI2THOR_CLIENT_TOKEN`) is renderd's to set and is refused here. Values of names "
        "containing TOKEN, SECRET, PASSWORD, PASSWD, KEY or CREDENTIAL are shown as `***` by `renderd status` "
        "and the control API. What the kernel could not pass to the player is refused: a `NAME=value` over 128 KiB "
        "(`MAX_ARG_STRLEN`; any string of the configuration, an `executable` argument too), or the table over "
        "a quarter of `ARG_MAX` in all (`renderd.config.MAX_ENV_BYTES`, 512 KiB on most machines).",
        check=_env,
    )

    @property
    def argv(self) -> list[str]:
        """The executable as an argv list."""
        return [self.executable] if isinstance(self.executable, str) else list(self.executable)

    def to_dict(self) -> dict[str, Any]:
        """The keys of this table as plain JSON/TOML values (without ``name``), secrets included: for
        internal use only. What is shown to anyone is :meth:`redacted`."""
        return {f.name: _plain(getattr(self, f.name)) for f in settings(EnvironmentConfig)}

    def redacted(self) -> dict[str, Any]:
        """:meth:`to_dict` for outward views (``renderd status``, the control API): the values of
        secret-looking ``env`` names and executable options are :data:`REDACTED`."""
        data = self.to_dict()
        data["env"] = redact_env(self.env)
        argv = redact_argv(self.argv)
        data["executable"] = argv[0] if isinstance(self.executable, str) else argv
        return data

    def replaces_players(self, other: EnvironmentConfig) -> bool:
        """Whether moving from ``other`` to this configuration needs new player processes: a key the player
        process is started with (its program, arguments, environment, platform) changed, anything but
        :data:`IN_PLACE_KEYS`."""
        return any(
            getattr(self, f.name) != getattr(other, f.name)
            for f in settings(EnvironmentConfig) if f.name not in IN_PLACE_KEYS
        )


@dataclass(frozen=True)
class Config:
    """A whole configuration: the daemon's settings, its environments, and the file they came from."""

    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    environments: dict[str, EnvironmentConfig] = field(default_factory=dict)
    path: str | None = None
    #: What named ``daemon.socket``: ``--socket``, ``[daemon] socket``, ``$RENDERD_SOCKET``, or "" (the default).
    socket_from: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The whole configuration as plain values, secrets included (internal use; see
        :meth:`EnvironmentConfig.redacted`)."""
        return {
            "daemon": {f.name: _plain(getattr(self.daemon, f.name)) for f in settings(DaemonConfig)},
            "environments": {name: env.to_dict() for name, env in self.environments.items()},
        }

    def with_daemon(self, **changes: Any) -> Config:
        """A copy with some ``[daemon]`` keys replaced (command-line overrides), checked like the file.

        Raises ConfigError naming the key.
        """
        source = "command line"
        values = {}
        for name, value in changes.items():
            if value is None:
                continue
            f = _field(DaemonConfig, name)
            values[name] = _check_value(f, value, source, f"daemon.{name}")
        config = dataclasses.replace(self, daemon=dataclasses.replace(self.daemon, **values))
        if "socket" in values:
            config = dataclasses.replace(config, socket_from="--socket")
        _check_daemon(config.daemon, source)
        env_socket = config.socket_from == f"${SOCKET_ENV_VAR}"
        _check_paths(config.daemon, source if values.keys() & {"socket", "runtime_dir"} else
                     f"${SOCKET_ENV_VAR}" if env_socket else self.path or source)
        # A file's environment that needs [daemon] http: the command line's fault if it overrode http.
        _check_cross(config, source if "http" in values else self.path or source)
        return config


def settings(cls: type) -> list[dataclasses.Field]:
    """The configuration keys of ``cls`` (a dataclass of this module), in declaration order."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _field(cls: type, name: str) -> dataclasses.Field:
    for f in settings(cls):
        if f.name == name:
            return f
    raise KeyError(name)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


# -- type checking -----------------------------------------------------------------------------------
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}s"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"table of {_type_name(k)} to {_type_name(v)}"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(tp, getattr(tp, "__name__", str(tp)))


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _value_name(value: Any) -> str:
    if value is None:  # (a JSON request body's null: TOML has none)
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _conform(tp: Any, value: Any) -> tuple[bool, Any]:
    """Check ``value`` against the annotation ``tp``; returns (ok, value converted)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, converted = _conform(arg, value)
            if ok:
                return True, converted
        return False, value
    if origin is list:
        if not isinstance(value, list):
            return False, value
        (item,) = typing.get_args(tp)
        out = []
        for v in value:
            ok, converted = _conform(item, v)
            if not ok:
                return False, value
            out.append(converted)
        return True, out
    if origin is dict:
        if not isinstance(value, dict):
            return False, value
        kt, vt = typing.get_args(tp)
        out_d = {}
        for k, v in value.items():
            ok_k, k2 = _conform(kt, k)
            ok_v, v2 = _conform(vt, v)
            if not (ok_k and ok_v):
                return False, value
            out_d[k2] = v2
        return True, out_d
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        try:
            return True, float(value)
        except OverflowError:  # an integer beyond any float (a JSON body can carry one)
            return True, math.inf
    if tp is str:
        return isinstance(value, str), value
    return isinstance(value, tp), value


def _first_mismatch(tp: Any, value: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """In a list or table ``value`` that does not conform to ``tp``: where its first item that does not is
    (``OMP_NUM_THREADS`` in a table, ``[2]`` in a list, ``A.B`` deeper), that item's expected type and the item;
    ``None`` when the trouble is ``value`` itself."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):  # a list or a table: explained by the member of its kind
            if typing.get_origin(arg) in (list, dict) and isinstance(value, typing.get_origin(arg)):
                return _first_mismatch(arg, value, where)
        return None
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(tp)
        items: list[tuple[str, Any]] = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
    elif origin is dict and isinstance(value, dict):
        item = typing.get_args(tp)[1]
        items = [(f"{where}.{k}" if where else str(k), v) for k, v in value.items()]
    else:
        return None
    for item_where, v in items:
        if not _conform(item, v)[0]:
            return _first_mismatch(item, v, item_where) or (item_where, item, v)
    return None


def _type_error(tp: Any, value: Any, source: str, key: str) -> ConfigError:
    """What is wrong with a ``value`` that does not conform to ``tp``, naming the very item of a list or table
    that is wrong (a table of twenty variables, one of them unquoted, must not leave the reader to guess)."""
    # (a string such as env = "API_TOKEN=..." is not written out either)
    got = f"a string ({REDACTED})" if isinstance(value, str) and is_secret_name(value) else _value_name(value)
    message = f"expected {_a(_type_name(tp))}, got {got}"
    if value is None:  # (a request body's "key": null, meant as "the default")
        message += " (leave the key out for its default)"
    inner = _first_mismatch(tp, value)
    if inner is not None:
        where, item_tp, item = inner
        # A value under a secret-looking name (API_TOKEN = 123456 in env, 123456 after --password in an argv)
        # is not written out: the message is printed, logged and answered, where the configuration shows ***.
        secret = isinstance(item, (bool, int, float)) and _secret_item(value, where)
        named = f"{_a(_type_name(type(item)))} ({REDACTED})" if secret else _value_name(item)
        message += f" whose {where} is {named}, not {_a(_type_name(item_tp))}"
        if item_tp is str and isinstance(item, (bool, int, float)):
            text = str(item).lower() if isinstance(item, bool) else str(item)
            message += " (a string is written in quotes)" if secret else f' (a string is written in quotes: "{text}")'
    return ConfigError(message, path=source, key=key)


def _secret_item(value: Any, where: str) -> bool:
    """Whether the item ``where`` (as :func:`_first_mismatch` names it) of a table or an argv list holds a
    secret: a table's entry whose name looks secret, or the argument after an option whose name does (as
    :func:`redact_env` and :func:`redact_argv` hide them)."""
    if isinstance(value, dict):
        return any(is_secret_name(str(name)) for name in value
                   if where == str(name) or where.startswith((f"{name}.", f"{name}[")))
    if isinstance(value, list) and where.startswith("[") and "]" in where:
        index = int(where[1:where.index("]")])
        before = value[index - 1] if index > 1 else None
        return isinstance(before, str) and before.startswith("-") and "=" not in before and is_secret_name(before)
    return False


def _check_value(f: dataclasses.Field, value: Any, source: str, key: str) -> Any:
    tp = _hints(_owner(f))[f.name]
    ok, converted = _conform(tp, value)
    if not ok:
        raise _type_error(tp, value, source, key)
    if isinstance(converted, float) and converted != converted:  # NaN
        raise ConfigError("must be a number, not nan", path=source, key=key)
    strings = list(_strings(converted))
    if any("\0" in text for text in strings):
        raise ConfigError("contains a NUL byte, which no path, argument, name or environment variable can hold",
                          path=source, key=key)
    if any(_unencodable(text) for text in strings):
        raise ConfigError(
            "contains a character the operating system cannot take (a lone UTF-16 surrogate such as \\ud800), "
            "which no path, argument, name or environment variable can hold",
            path=source, key=key,
        )
    longest = max((len(os.fsencode(text)) for text in strings), default=0)
    if longest >= MAX_ARG_STRLEN:  # (not quoted: the message is printed, logged and answered)
        raise ConfigError(
            f"holds a string of {longest} bytes, over the {MAX_ARG_STRLEN - 1} the kernel passes to a program as "
            "one argument or environment variable (starting the player would fail with E2BIG)",
            path=source, key=key,
        )
    check = f.metadata.get("check")
    why = check(converted) if check else None
    if why:
        raise ConfigError(why, path=source, key=key)
    return converted


def _owner(f: dataclasses.Field) -> type:
    for cls in (DaemonConfig, EnvironmentConfig):
        if any(g is f for g in dataclasses.fields(cls)):
            return cls
    raise KeyError(f.name)


#: Where each key belongs, for an unknown key's message: the table a key of another one goes in.
_TABLE_OF = {DaemonConfig: "[daemon]", EnvironmentConfig: "[environments.NAME]"}


def _unknown_key_hint(name: Any, known: list[str], cls: type | None) -> str:
    """What an unknown key ``name`` (in a table of ``cls``; None: at the top of the file) was likely meant to
    be: a key of another table, or a known key it is a typo of ("" when neither)."""
    if not isinstance(name, str):
        return ""
    for other, table in _TABLE_OF.items():
        if other is not cls and any(f.name == name for f in settings(other)):
            return f"; {name} is a key of {table}"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""


def _table(cls: type, data: Any, source: str, prefix: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"expected a table, got {_value_name(data)}", path=source, key=prefix)
    known = {f.name: f for f in settings(cls)}
    values: dict[str, Any] = {}
    for name, value in data.items():
        key = f"{prefix}.{name}"
        f = known.get(name)
        if f is None:
            hint = _unknown_key_hint(name, list(known), cls)
            if isinstance(name, str) and len(name) > 100:  # (a request body's key may be a megabyte long)
                key = f"{prefix}.{name[:100]}... ({len(name)} characters)"
            raise ConfigError(f"unknown key{hint} (known keys: {', '.join(known)})", path=source, key=key)
        values[name] = _check_value(f, value, source, key)
    return values


# -- executables -------------------------------------------------------------------------------------
def resolve_executable(name: str) -> str:
    """The absolute path of an executable (:func:`renderd.process.resolve_executable`: a bare name is
    looked up next to the running Python, where ``pip install`` puts console scripts, then on ``PATH``).

    Raises ValueError saying what is wrong. An application bundle directory (``*.app``) is accepted as it
    is; the platform finds the program inside it.
    """
    from renderd.process import resolve_executable as resolve_argv

    if os.sep in name:
        try:
            path = os.path.abspath(os.path.expanduser(name))
        except OSError as exc:  # a relative path, and the working directory was removed
            raise ValueError(
                f"{name!r} is relative, and the working directory cannot be read ({exc.strerror}); "
                "give an absolute path"
            ) from None
        if path.endswith(".app") and os.path.isdir(path):
            return path
        name = path
    try:
        path = resolve_argv(name)[0]
    except ConfigError as exc:
        raise ValueError(exc.reason) from None
    why = _missing_interpreter(path) or _not_executable_format(path)
    if why:
        raise ValueError(why)
    return path


def _not_executable_format(path: str) -> str | None:
    """Why the kernel would refuse to start ``path`` (ENOEXEC, exec format error): a file that is neither a
    program (ELF) nor a script with a ``#!`` line, which a shell runs as a script, so it seems to work by
    hand. ``None`` when it may run, or when this machine has binfmt_misc handlers for other formats."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return None
    if head.startswith((b"\x7fELF", b"#!")):
        return None
    try:
        if set(os.listdir("/proc/sys/fs/binfmt_misc")) - {"register", "status"}:
            return None  # (a handler may run this format: the kernel decides)
    except OSError:
        pass
    what = "empty" if not head else "neither a program (ELF) nor a script with a '#!' first line"
    return (f"{path!r} is {what}: the kernel cannot start it (exec format error); a script needs a first line "
            "naming its interpreter, such as #!/bin/sh")


#: Bytes of a script's first line the kernel reads for its ``#!`` line (``BINPRM_BUF_SIZE``).
_SHEBANG_BYTES = 256


def _missing_interpreter(path: str) -> str | None:
    """Why the script ``path`` cannot run because the interpreter its ``#!`` line names is missing or not
    executable (a virtual environment removed or moved since), else ``None``. Starting it would fail with
    ENOENT, "no such file or directory", for a file that is there: said here, when the file is loaded."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SHEBANG_BYTES)
    except OSError:
        return None  # (executable but not readable: the kernel may still run a binary)
    if not head.startswith(b"#!") or b"\n" not in head:
        return None
    # As the kernel reads it: the name ends at a space or tab; a CR (a file saved with Windows line ends) is
    # part of it, and no such interpreter exists.
    line = head[2:].split(b"\n", 1)[0].strip(b" \t")
    interpreter = os.fsdecode(re.split(rb"[ \t]", line, maxsplit=1)[0])
    if not interpreter or not os.path.isabs(interpreter):
        return None  # (a relative one is taken from the player's working directory: not knowable here)
    if os.path.isfile(interpreter) and os.access(interpreter, os.X_OK):
        return None
    state = "does not exist" if not os.path.exists(interpreter) else "is not an executable file"
    if interpreter.endswith("\r"):
        state += " (the script has Windows line ends, CRLF: convert it with dos2unix)"
    return (f"{path!r} is a script run by {interpreter!r} (its #! line), which {state}; fix that line or "
            "reinstall it")


def _resolve(env: EnvironmentConfig, source: str, key: str) -> EnvironmentConfig:
    argv = env.argv
    try:
        argv[0] = resolve_executable(argv[0])
    except ValueError as exc:
        raise ConfigError(str(exc), path=source, key=key) from None
    executable: str | list[str] = argv[0] if isinstance(env.executable, str) else argv
    return dataclasses.replace(env, executable=executable)


# -- loading -----------------------------------------------------------------------------------------
def parse_environment(
    name: str, data: Any, *, source: str = "<request>", resolve: bool = True
) -> EnvironmentConfig:
    """Build one environment from a mapping of its keys (a TOML table or a JSON request body).

    Missing keys take their defaults. Raises ConfigError naming ``source`` and ``environments.NAME.KEY``.
    """
    prefix = f"environments.{name}"
    if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
        raise ConfigError(
            "an environment name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            path=source,
            key=prefix,
        )
    values = _table(EnvironmentConfig, data, source, prefix)
    env = EnvironmentConfig(name=name, **values)
    if env.x_display != "auto" and env.platform not in ("auto", "Linux64"):
        raise ConfigError(
            f"x_display {env.x_display!r} is an X display for Linux64, and platform {env.platform!r} uses none "
            "(it would be ignored): set platform = \"Linux64\" (or \"auto\"), or leave x_display out",
            path=source,
            key=f"{prefix}.x_display",
        )
    display = env.env.get("DISPLAY", "")
    if display and env.x_display != "auto":
        raise ConfigError(
            f"DISPLAY {display!r} conflicts with x_display {env.x_display!r}: a DISPLAY in env names the "
            "player's display as x_display does; set only one of them",
            path=source,
            key=f"{prefix}.env",
        )
    return _resolve(env, source, f"{prefix}.executable") if resolve else env


def _check_daemon(daemon: DaemonConfig, source: str) -> None:
    if daemon.backoff_max < daemon.backoff_initial:
        raise ConfigError(
            f"{daemon.backoff_max} is less than daemon.backoff_initial ({daemon.backoff_initial})",
            path=source,
            key="daemon.backoff_max",
        )


def _check_paths(daemon: DaemonConfig, source: str) -> None:
    """The control socket must have a path of its own: not ``runtime_dir`` or what renderd makes in it (its lock
    file, the players' pipe and log directories, the control token), not ``log_dir`` or ``control_token_file``.
    ``renderd start`` would make that directory or file first and then find the socket's path taken."""
    from renderd.daemon.service import CONTROL_TOKEN_NAME, LOCK_NAME

    socket = os.path.normpath(daemon.socket)
    runtime_dir = os.path.normpath(daemon.runtime_dir)
    taken = {
        runtime_dir: "runtime_dir itself",
        os.path.join(runtime_dir, LOCK_NAME): "renderd's lock file in runtime_dir",
        os.path.join(runtime_dir, "players"): "the players' pipe directory in runtime_dir",
        os.path.join(runtime_dir, CONTROL_TOKEN_NAME): "the control token renderd writes in runtime_dir",
    }
    if not daemon.log_dir:
        taken[os.path.join(runtime_dir, "logs")] = "the players' log directory in runtime_dir"
    else:
        taken[os.path.normpath(daemon.log_dir)] = "log_dir"
    if daemon.control_token_file:
        taken[os.path.normpath(daemon.control_token_file)] = "control_token_file"
    what = taken.get(socket)
    if what is not None:
        raise ConfigError(
            f"{daemon.socket!r} is {what}: give the socket a path of its own, such as "
            f"{os.path.join(runtime_dir, 'renderd.sock')!r}",
            path=source, key="daemon.socket",
        )


def _check_cross(config: Config, source: str) -> None:
    for name, env in config.environments.items():
        if env.transport == "http" and not config.daemon.http:
            raise ConfigError(
                "transport 'http' needs the HTTP listener: set [daemon] http (or renderd start --http, which "
                "renderd validate takes too)",
                path=source,
                key=f"environments.{name}.transport",
            )


def loads(text: str, *, path: str = "<string>", resolve: bool = True, check_cross: bool = True,
          socket_from_env: bool = False) -> Config:
    """Parse a configuration from TOML text. Raises ConfigError naming ``path``, the key and why.

    ``check_cross=False`` leaves out the checks between tables (an environment with ``transport = "http"``
    needs ``[daemon] http``) and between paths (the control socket's is its own) for a caller that applies
    command-line overrides next with :meth:`Config.with_daemon`, which makes them on the result.
    ``socket_from_env``: a text without ``[daemon] socket`` gets :func:`environment_socket` when it is set, as
    ``renderd start`` does without ``--socket``.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path) from None
    unknown = sorted(set(data) - {"daemon", "environments"})
    if unknown:
        hint = _unknown_key_hint(unknown[0], ["daemon", "environments"], None)
        raise ConfigError(f"unknown table or key{hint} (known: daemon, environments)", path=path, key=unknown[0])
    daemon_values = _table(DaemonConfig, data.get("daemon", {}), path, "daemon")
    socket_from = "[daemon] socket" if "socket" in daemon_values else ""
    if socket_from_env and not socket_from:
        env_socket = environment_socket()
        if env_socket is not None:
            daemon_values["socket"], socket_from = env_socket, f"${SOCKET_ENV_VAR}"
    daemon = DaemonConfig(**daemon_values)
    _check_daemon(daemon, path)
    envs_data = data.get("environments", {})
    if not isinstance(envs_data, dict):
        raise ConfigError(f"expected a table, got {_value_name(envs_data)}", path=path, key="environments")
    for name, table in envs_data.items():
        if not isinstance(table, dict) and any(f.name == name for f in settings(EnvironmentConfig)):
            # (`[environments]` then `width = 3`: the keys of an environment written straight into the table
            # of environments, which holds one table per environment)
            raise ConfigError(
                f"expected a table (an environment named {name!r}), got {_value_name(table)}: {name} is a key of "
                "an environment, and each environment is a table of its own: [environments.NAME], such as "
                "[environments.demo]",
                path=path, key=f"environments.{name}",
            )
    environments = {
        name: parse_environment(name, table, source=path, resolve=resolve) for name, table in envs_data.items()
    }
    config = Config(daemon=daemon, environments=environments, path=path, socket_from=socket_from)
    if check_cross:
        _check_paths(daemon, f"${SOCKET_ENV_VAR}" if socket_from.startswith("$") else path)
        _check_cross(config, path)
    return config


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a file"


def _read_config(name: str) -> str:
    """The text of the configuration file ``name``: a regular file of at most :data:`MAX_CONFIG_BYTES`,
    UTF-8, with its line ends made ``\\n`` (as text mode reads it).

    Opened non-blocking, so a FIFO without a writer is refused at once instead of waiting for one; a FIFO,
    device (``/dev/zero``), socket or directory is not read at all. Raises ConfigError naming ``name``.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", path=name) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"not a regular file ({_file_kind(mode)}); a configuration is a TOML file", path=name)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:  # a file that grows while it is read stops at the limit too
            chunk = os.read(fd, min(1 << 20, MAX_CONFIG_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", path=name) from None
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes, the limit for a configuration file", path=name)
    try:
        # "utf-8-sig": a leading byte-order mark (as some Windows editors save UTF-8) is dropped, not a TOML error.
        text = b"".join(chunks).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc}", path=name) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def load(path: str | os.PathLike[str], *, resolve: bool = True, check_cross: bool = True,
         socket_from_env: bool = False) -> Config:
    """Read and parse a configuration file (``check_cross`` and ``socket_from_env`` as for :func:`loads`).
    Raises ConfigError (also for a file that cannot be read: missing, not a regular file, larger than
    :data:`MAX_CONFIG_BYTES`)."""
    name = os.fspath(path)
    text = _read_config(name)
    try:
        return loads(text, path=name, resolve=resolve, check_cross=check_cross, socket_from_env=socket_from_env)
    except ConfigError as exc:
        if exc.path == name and exc.key:
            exc.line = key_line(text, exc.key)  # (for error_text)
        raise


def key_line(text: str, key: str) -> int | None:
    """The line (from 1) of TOML ``text`` where ``key`` (``daemon.NAME`` or ``environments.ENV.NAME``, as a
    ConfigError names it) is set, or None unless that is certain: the key written as ``NAME = ...`` under its
    own ``[daemon]`` or ``[environments.ENV]`` header, each found exactly once, in a text without multi-line
    strings (whose lines could look like anything). Written otherwise (a dotted key, an inline table, an
    environment name holding a dot), None."""
    if '"""' in text or "'''" in text:
        return None
    parts = key.split(".")
    if parts[0] == "daemon" and len(parts) == 2:
        table = "daemon"
    elif parts[0] == "environments" and len(parts) == 3:
        env = re.escape(parts[1])
        table = rf"""environments[ \t]*\.[ \t]*(?:{env}|"{env}"|'{env}')"""
    else:
        return None
    name = re.escape(parts[-1])
    header = re.compile(rf"[ \t]*\[[ \t]*{table}[ \t]*\][ \t]*(?:#.*)?")
    setting = re.compile(rf"""[ \t]*(?:{name}|"{name}"|'{name}')[ \t]*=""")
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if header.fullmatch(line)]
    if len(starts) != 1:
        return None
    found = []
    for i in range(starts[0] + 1, len(lines)):
        if lines[i].lstrip(" \t").startswith("["):  # the next table (or a line of an array: only fewer found)
            break
        if setting.match(lines[i]):
            found.append(i + 1)
    return found[0] if len(found) == 1 else None


def error_text(exc: ConfigError) -> str:
    """``str(exc)``, with the line of the file where its key is set when :func:`load` found it:
    ``renderd.toml:7: environments.demo.width: ...``, as compilers write it (and editors jump to it)."""
    line = getattr(exc, "line", None)
    if line is None or not exc.path or not exc.key:
        return str(exc)
    return f"{exc.path}:{line}: {exc.key}: {exc.reason}"


def default_config(*, resolve: bool = True, socket_from_env: bool = False) -> Config:
    """The configuration used without a file: one environment ``demo`` on the reference player (and with
    ``socket_from_env``, the socket :func:`environment_socket` names, when it is set)."""
    env = EnvironmentConfig(name=DEFAULT_ENVIRONMENT)
    if resolve:
        env = _resolve(env, "<default configuration>", f"environments.{DEFAULT_ENVIRONMENT}.executable")
    env_socket = environment_socket() if socket_from_env else None
    if env_socket is None:
        return Config(environments={DEFAULT_ENVIRONMENT: env}, path=None)
    return Config(daemon=DaemonConfig(socket=env_socket), environments={DEFAULT_ENVIRONMENT: env}, path=None,
                  socket_from=f"${SOCKET_ENV_VAR}")


def environment_socket() -> str | None:
    """``$RENDERD_SOCKET`` as the daemon's socket (a leading ``~`` expanded, made absolute, as ``--socket``
    is), or None when it is unset or empty. Raises ConfigError naming the variable when it cannot be a socket's
    path (too long, a directory's): the clients could not use it either."""
    value = os.environ.get(SOCKET_ENV_VAR)
    if not value:
        return None
    try:
        path = option_path(value)
        assert path is not None
        return _check_value(_field(DaemonConfig, "socket"), path, "", "")
    except ConfigError as exc:
        raise ConfigError(
            f"{exc.reason}; renderd start listens there when neither --socket nor [daemon] socket names the "
            f"control socket: correct the variable, unset it, or pass --socket",
            key=f"${SOCKET_ENV_VAR}",
        ) from None


# -- documentation -----------------------------------------------------------------------------------
def _doc_default(f: dataclasses.Field) -> str:
    if f.metadata.get("doc_default"):
        return f.metadata["doc_default"]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    if isinstance(default, str):
        return f'`"{default}"`'
    if isinstance(default, list):
        return "`[]`" if not default else f"`{default}`"
    if isinstance(default, dict):
        return "`{}`"
    return f"`{default}`"


def markdown() -> str:
    """The key tables of docs/configuration.md, generated from the definitions above."""
    lines: list[str] = []
    for title, cls in (("[daemon]", DaemonConfig), ("[environments.NAME]", EnvironmentConfig)):
        lines += [f"### `{title}`", "", "| Key | Type | Default | Meaning |", "| --- | --- | --- | --- |"]
        for f in settings(cls):
            tp = f.metadata.get("doc_type") or _type_name(_hints(cls)[f.name])
            help_text = f.metadata["help"].replace("|", "\\|")
            default = _doc_default(f).replace("|", "\\|")
            lines.append(f"| `{f.name}` | {tp} | {default} | {help_text} |")
        lines.append("")
    return "\n".join(lines)


#: Markers around the generated part of docs/configuration.md.
DOC_BEGIN = "<!-- BEGIN GENERATED KEYS (python -m renderd.config --write docs/configuration.md) -->"
DOC_END = "<!-- END GENERATED KEYS -->"


def update_document(text: str) -> str:
    """``text`` (docs/configuration.md) with its generated section replaced by :func:`markdown`."""
    begin = text.index(DOC_BEGIN) + len(DOC_BEGIN)
    end = text.index(DOC_END)
    return text[:begin] + "\n\n" + markdown() + "\n" + text[end:]


# -- renderd validate ----------------------------------------------------------------------------------
def describe(config: Config) -> list[str]:
    """One line per environment, as ``renderd validate`` prints them."""
    lines = []
    for name, env in config.environments.items():
        lines.append(
            f"{name}: {env.instances} x {' '.join(redact_argv(env.argv))} at {env.width}x{env.height}, "
            f"platform {env.platform}, transport {env.transport}, restart {env.restart}"
        )
    return lines


def option_path(value: str | None) -> str | None:
    """A path given on the command line (``--socket``, ``--runtime-dir``), as renderd start and validate take
    it: a leading ``~`` made the user's home directory (a shell leaves it in ``--socket=~/renderd.sock``, and a
    unit file always does), then made absolute; None when not given."""
    return os.path.abspath(os.path.expanduser(value)) if value else None


@click.command("validate")
@click.argument("config_path", metavar="CONFIG", type=str)
@click.option("--socket", metavar="PATH", help="As for renderd start: check the file with this control socket.")
@click.option("--runtime-dir", metavar="DIR", help="As for renderd start: check the file with this runtime directory.")
@click.option("--http", metavar="HOST:PORT", help="As for renderd start: check the file with this HTTP listener.")
def validate_command(config_path: str, socket: str | None = None, runtime_dir: str | None = None,
                     http: str | None = None) -> None:
    """Check a configuration file: every key, type and value, and that executables exist.

    With the overrides renderd start will be given (--socket, --runtime-dir, --http), the file is checked as
    it will run (a transport = "http" environment needs an HTTP listener, from the file or --http; without
    --socket and [daemon] socket, the socket is $RENDERD_SOCKET when set, as for renderd start). Exits 0
    and prints a summary when the file is valid; exits 1 naming the file, the key and why when not, and 2 for a
    bad option value (naming the option).
    """
    if config_path == "":  # an unset variable in `renderd validate ${CONFIG}`
        raise click.BadParameter("an empty path", param_hint="CONFIG")
    for value, hint in ((socket, "--socket"), (runtime_dir, "--runtime-dir"), (http, "--http")):
        if value is not None and not value.strip():
            raise click.BadParameter("an empty value; leave it out to use the file's", param_hint=hint)

    overrides = {"socket": option_path(socket), "runtime_dir": option_path(runtime_dir), "http": http}
    try:
        # (the socket as renderd start takes it: --socket, else the file's, else $RENDERD_SOCKET)
        config = load(config_path, check_cross=False, socket_from_env=socket is None).with_daemon(**overrides)
    except ConfigError as exc:
        from renderd.daemon.commands import command_line_error  # (the daemon's commands import this module)

        usage = command_line_error(exc, {"--socket": socket, "--runtime-dir": runtime_dir, "--http": http})
        if usage is not None:  # a bad option value: a usage error (exit 2), as renderd start says it
            raise usage from None
        raise click.ClickException(error_text(exc)) from None
    from_env = f" (from ${SOCKET_ENV_VAR})" if config.socket_from == f"${SOCKET_ENV_VAR}" else ""
    click.echo(f"{config_path}: valid; socket {config.daemon.socket}{from_env}, "
               f"{len(config.environments)} environment(s)")
    for line in describe(config):
        click.echo(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    """``python -m renderd.config --markdown`` prints the key tables; ``--write FILE`` updates a document."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if len(args) == 2 and args[0] == "--write":
        doc = Path(args[1])
        doc.write_text(update_document(doc.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stderr.write("usage: python -m renderd.config --markdown | --write docs/configuration.md\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
