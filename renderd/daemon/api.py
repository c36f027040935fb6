"""The control API: a plain WSGI application over the supervisor, served on the daemon's unix socket.

Routes (JSON in and out; errors are ``{"error": {"type", "message"}}`` with a 4xx/5xx status, never a
traceback page)::

    GET    /v1/health                          daemon status, pid, uptime, per-environment counts
    GET    /v1/environments                    every environment with its configuration and players
    GET    /v1/environments/{name}             one environment
    PUT    /v1/environments/{name}             declare its wanted state (body: the environment's keys)
    DELETE /v1/environments/{name}             remove it (its leases end, its players stop)
    POST   /v1/environments/{name}/leases      {"client_pid": int, "timeout": float, "deadline": float} -> a lease
    GET    /v1/leases/{id}                     how a lease stands or ended, and how its player exited
    DELETE /v1/leases/{id}                     end a lease ({"clean": false} to have the player recycled)
    GET    /metrics                            Prometheus text
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import urllib.parse
from typing import Any, Callable, Iterable

from renderd.config import ConfigError, parse_environment
from renderd.daemon.leases import MAX_LEASE_TIMEOUT, open_client_pidfd
from renderd.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from renderd.daemon.supervisor import NotFound, Supervisor
from renderd.errors import LeaseError, RenderdError, error_to_dict, json_kind

__all__ = ["make_app", "MAX_BODY_SIZE", "MAX_LEASE_TIMEOUT", "API_VERSION", "PEER_PID_KEY", "REMOTE_KEY"]

log = logging.getLogger(__name__)

API_VERSION = "v1"
#: Largest request body accepted (an environment declaration is a few hundred bytes).
MAX_BODY_SIZE = 1 << 20

_REASONS = {
    200: "OK", 201: "Created", 202: "Accepted", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 411: "Length Required", 413: "Content Too Large", 415: "Unsupported Media Type",
    500: "Internal Server Error", 503: "Service Unavailable",
}

#: The WSGI environ key under which the control socket's server puts the pid of the process that connected
#: (``SO_PEERCRED``, in the daemon's pid namespace; 0 when that process is in a pid namespace the daemon
#: cannot see). Absent where the server knows no peer process (the HTTP listener).
PEER_PID_KEY = "renderd.peer_pid"
#: The WSGI environ key the HTTP listener's control API sets (True) on the requests it passes on: their peer is a
#: TCP client, whose process the daemon cannot know. Lease requests are refused there.
REMOTE_KEY = "renderd.remote"
#: Most processes looked at, among the connecting process's ancestors and among its descendants, to find the
#: one a lease request's ``client_pid`` names.
MAX_CLIENT_PROCESSES = 4096

StartResponse = Callable[..., Any]


class HTTPError(Exception):
    """An error answer: a status and the renderd error it carries."""

    def __init__(self, status: int, error: BaseException, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(str(error))
        self.status = status
        self.error = error
        self.headers = headers or []


def _json_response(start_response: StartResponse, status: int, body: Any,
                   headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    data = json.dumps(body, separators=(",", ":"), default=str).encode("utf-8") + b"\n"
    start_response(
        f"{status} {_REASONS.get(status, 'Unknown')}",
        [("Content-Type", "application/json"), ("Content-Length", str(len(data))), ("Cache-Control", "no-store"),
         *(headers or [])],
    )
    return [data]


#: Where a request's environ gets the id of the lease its answer grants (a 201 to POST .../leases).
LEASE_GRANTED_KEY = "renderd.lease_granted"


class _DuplicateKey(Exception):
    """A JSON object of a request body holds a key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (``json.loads`` would keep the last one silently:
    ``{"clean": false, "clean": true}``, or two ``width``s in a declaration, would then mean whichever came last)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _read_json(environ: dict[str, Any]) -> dict[str, Any]:
    """The request body as a JSON object ({} when empty). Raises HTTPError 400/413."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise HTTPError(400, RenderdError("Content-Length is not a number")) from None
    if length > MAX_BODY_SIZE:
        raise HTTPError(413, RenderdError(f"request body of {length} bytes is over the limit of {MAX_BODY_SIZE}"))
    if length <= 0:
        return {}
    raw = environ["wsgi.input"].read(length)
    try:
        body = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise HTTPError(400, RenderdError(
            f"request body holds the key {str(exc.args[0])[:100]!r} twice in one object: say it once"
        )) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPError(400, RenderdError(f"request body is not UTF-8 JSON: {exc}")) from None
    except ValueError:  # (valid JSON: an integer of more digits than Python turns into a number)
        raise HTTPError(400, RenderdError(
            f"request body holds an integer of more than {sys.get_int_max_str_digits()} digits, too long to read: "
            "no value of the API's has more than a few")) from None
    except RecursionError:  # (arrays or objects nested some thousand deep: no request of the API's has that)
        raise HTTPError(400, RenderdError("request body is JSON nested too deep to read")) from None
    if not isinstance(body, dict):
        raise HTTPError(400, RenderdError(f"request body must be a JSON object ({{...}}), got {json_kind(body)}"))
    return body


#: Characters of a value from a request body quoted in an error answer (a body may be a megabyte of it).
SHOWN_VALUE_CHARS = 100


def _shown(value: Any) -> str:
    """``value`` from a request body as an error answer quotes it: its repr, cut to SHOWN_VALUE_CHARS characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[:SHOWN_VALUE_CHARS] + f"... ({len(text)} characters)"


def _keys(keys: list[str]) -> str:
    """Unknown keys of a request body, as an error answer names them (each cut, at most 10 of them)."""
    named = ", ".join(key if len(key) <= SHOWN_VALUE_CHARS else _shown(key) for key in keys[:10])
    return named + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")


def _number(body: dict[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise HTTPError(400, LeaseError(f"{key} must be a number of seconds, got {_shown(value)}"))
    if not 0 <= value <= MAX_LEASE_TIMEOUT:
        raise HTTPError(400, LeaseError(
            f"{key} must be between 0 and {MAX_LEASE_TIMEOUT:g} seconds, got {_shown(value)}"))
    return float(value)


def _deadline(body: dict[str, Any]) -> float | None:
    """The lease request's optional ``deadline``: a finite number, in seconds on this host's CLOCK_MONOTONIC
    (``time.monotonic()`` on Linux), after which the client no longer takes the answer."""
    value = body.get("deadline")
    if value is None:
        return None
    number = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            pass
    if not math.isfinite(number):
        raise HTTPError(400, LeaseError(
            f"deadline must be a finite number of seconds on this host's CLOCK_MONOTONIC, got {str(value)[:40]}"))
    return number


def _text(raw: bytes) -> str:
    """Bytes of a request's path as the text the client percent-encoded in UTF-8 (as they came, as latin-1
    characters, when they are not UTF-8), so that an error names the environment as the client wrote it."""
    try:
        return raw.decode("utf-8")
    except UnicodeError:
        return raw.decode("latin-1")


def _path_text(path: str) -> str:
    """A WSGI ``PATH_INFO`` (its bytes as latin-1 characters, PEP 3333) as the text the client percent-encoded
    in UTF-8."""
    try:
        return _text(path.encode("latin-1"))
    except UnicodeError:  # not bytes as latin-1: as it came
        return path


def _segments(environ: dict[str, Any], path_info: str) -> list[str] | None:
    """The request path's segments, each percent-decoded on its own, from the request target as sent
    (waitress's ``REQUEST_URI``): ``PATH_INFO`` is decoded as a whole, so a name holding '/' (sent as %2F)
    could not be told from two segments there. None when the target is not at hand or does not decode to
    ``PATH_INFO`` (a server that rewrote it)."""
    target = environ.get("REQUEST_URI")
    if not isinstance(target, str) or not target:
        return None
    raw = target.partition("?")[0].partition("#")[0]
    if not raw.startswith("/"):  # absolute form: http://host/path
        raw = urllib.parse.urlsplit(raw).path
    raw = "/" + raw.lstrip("/")  # (as waitress makes PATH_INFO)
    try:
        if urllib.parse.unquote_to_bytes(raw).decode("latin-1") != path_info:
            return None
    except UnicodeError:
        return None
    return [_text(urllib.parse.unquote_to_bytes(part)) for part in raw[1:].split("/")]


def _pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[INODE]``), which a lease's answer names: a client in another one
    (a container) cannot use the player's pid. None when /proc does not tell."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _proc_ids(pid: int) -> tuple[int, list[int], int] | None:
    """``pid``'s parent, its pids in each pid namespace it is in (the daemon's first) and its real user id
    (``PPid``, ``NSpid`` and ``Uid`` of /proc/PID/status); None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    ppid, nspids, uid = 0, [pid], -1
    for line in text.splitlines():
        key, _, value = line.partition(":")
        try:
            if key == "PPid":
                ppid = int(value)
            elif key == "NSpid":  # (Linux 4.1 and later: without it, one namespace is all there is)
                nspids = [int(v) for v in value.split()] or [pid]
            elif key == "Uid":
                uid = int(value.split()[0])
        except (ValueError, IndexError):
            return None
    return ppid, nspids, uid


def _children(pid: int) -> list[int]:
    """``pid``'s children, from the kernel's per-thread ``children`` lists."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return found


def _client_process(client_pid: int, peer_pid: int) -> int:
    """The process a lease request's ``client_pid`` names, as the daemon numbers it: the process that sent the
    request (``peer_pid``, from the socket's credentials), or one of its ancestors (a shell script whose ``curl``
    asks for it) or descendants that runs as the same user and is not init, named by its pid in the daemon's
    pid namespace or in the sender's (a client in a container sends the pid its own namespace gives it, which
    in the daemon's is another process, or none). Raises HTTPError 400 for any other process: the daemon would
    watch a process unrelated to the client, and end the lease when that one exits, or never."""
    if client_pid == peer_pid:
        return peer_pid
    if peer_pid <= 0:
        raise HTTPError(400, LeaseError(
            f"client_pid {client_pid} cannot be watched: the process asking is in a pid namespace the daemon "
            "cannot see (run the client in the daemon's pid namespace, or one nested in it)"))
    peer = _proc_ids(peer_pid)
    depth = len(peer[1]) if peer is not None else 1

    def names(pid: int, ids: tuple[int, list[int], int]) -> bool:
        if pid == 1 or (peer is not None and ids[2] != peer[2]):
            return False  # (init never exits; another user's process is not the client's)
        return pid == client_pid or (len(ids[1]) == depth and ids[1][-1] == client_pid)

    pid, ids, seen = peer_pid, peer, 0
    while ids is not None and seen < MAX_CLIENT_PROCESSES:  # the sender and its ancestors, nearest first
        if names(pid, ids):
            return pid
        seen += 1
        pid = ids[0]
        ids = _proc_ids(pid) if pid > 0 else None
    todo, seen = _children(peer_pid), 0
    while todo and seen < MAX_CLIENT_PROCESSES:  # its descendants
        pid = todo.pop(0)
        seen += 1
        ids = _proc_ids(pid)
        if ids is not None and names(pid, ids):
            return pid
        todo += _children(pid)
    shown = f"pid {peer_pid}" + (f", {peer[1][-1]} in its own pid namespace" if peer and len(peer[1]) > 1 else "")
    if _proc_ids(client_pid) is None:
        what = (f"is not a running process, nor the process asking for the lease ({shown}) or one of its "
                "ancestors or descendants in the asker's pid namespace")
    else:
        what = (f"is neither the process asking for the lease ({shown}) nor one of its ancestors or "
                "descendants of the same user (init excluded): the daemon watches client_pid to end the lease "
                "when the client exits, so it must be the client's own process (os.getpid())")
    raise HTTPError(400, LeaseError(f"client_pid {client_pid} {what}"))


class _Router:
    """Routes ``(method, path)`` to handlers; a path that matches with another method is a 405.

    A route is matched segment by segment, each ``{param}`` one whole non-empty segment."""

    def __init__(self) -> None:
        self.routes: list[tuple[list[str], dict[str, Callable[..., Any]]]] = []

    def add(self, pattern: str, **methods: Callable[..., Any]) -> None:
        self.routes.append((pattern[1:].split("/"), methods))

    @staticmethod
    def _params(pattern: list[str], segments: list[str]) -> dict[str, str] | None:
        if len(pattern) != len(segments):
            return None
        params = {}
        for part, segment in zip(pattern, segments):
            if part.startswith("{"):
                if not segment:
                    return None
                params[part[1:-1]] = segment
            elif part != segment:
                return None
        return params

    def match(self, method: str, path: str, segments: list[str] | None = None
              ) -> tuple[Callable[..., Any], dict[str, str]]:
        """The handler of ``method`` on ``path`` (the decoded path) and its parameters; ``segments``: the
        path's segments decoded one by one (see :func:`_segments`), else the decoded path is split."""
        split = segments is None
        if segments is None:
            segments = path[1:].split("/") if path.startswith("/") else [path]
        for pattern, methods in self.routes:
            params = self._params(pattern, segments)
            if params is None:
                continue
            handler = methods.get(method)
            if handler is None and method == "HEAD":
                handler = methods.get("GET")
            if handler is None:
                allowed = ", ".join(sorted({*methods, *(["HEAD"] if "GET" in methods else [])}))
                raise HTTPError(
                    405, RenderdError(f"{method} is not allowed on {path} (allowed: {allowed})"),
                    [("Allow", allowed)],
                )
            return handler, params
        hint = ""
        if split and path.startswith(("/v1/environments/", "/v1/leases/")) and path.count("/") > 3:
            # (only where the segments were not at hand: an environment name or lease id holding '/', sent
            # as %2F, reads as two segments here)
            hint = "; environment names and lease ids never hold '/'"
        raise HTTPError(404, RenderdError(f"no such route: {method} {path} (see docs/api.md{hint})"))


def make_app(supervisor: Supervisor, *, http_listener: str = "", control_socket: str = "") -> Callable[
        [dict[str, Any], StartResponse], Iterable[bytes]]:
    """The control API as a WSGI application over ``supervisor``.

    ``http_listener`` is the daemon's ``[daemon] http`` address ("" when off): declaring an environment
    with ``transport = "http"`` needs it. ``control_socket`` is the daemon's control socket, named to a lease
    request made over the HTTP listener (refused: see :data:`REMOTE_KEY`).
    """
    router = _Router()
    pid_namespace = _pid_namespace()

    def health(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        from renderd import __version__

        return _json_response(start_response, 200, {"version": __version__, **supervisor.health()})

    def list_environments(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        return _json_response(start_response, 200, {"environments": supervisor.describe()})

    def get_environment(environ: dict[str, Any], start_response: StartResponse, name: str) -> list[bytes]:
        return _json_response(start_response, 200, supervisor.describe(name))

    def put_environment(environ: dict[str, Any], start_response: StartResponse, name: str) -> list[bytes]:
        body = _read_json(environ)
        source = f"PUT /v1/environments/{name}"
        program = parse_environment(name, body, source=source, resolve=False).argv[0]
        if os.sep in program and not os.path.isabs(program) and not program.startswith("~"):
            # (a file's relative path is taken from the process that loads it; a request's would be taken from
            # the daemon's working directory, which is not its client's)
            raise ConfigError(
                f"{program!r} is a relative path, which the daemon would take from its own working directory, "
                "not the client's: give an absolute path (or a bare command name, looked up next to the daemon's "
                "Python, then on its PATH)",
                path=source, key=f"environments.{name}.executable",
            )
        config = parse_environment(name, body, source=source)
        if config.transport == "http" and not http_listener:
            raise ConfigError(
                "transport 'http' needs the daemon's HTTP listener ([daemon] http)",
                path=source, key=f"environments.{name}.transport",
            )
        state = supervisor.put_environment(config)
        # (201: a declaration of its own, including one that replaces a removal under way; 200: a new version of one)
        return _json_response(start_response, 201 if state["declared"] in ("created", "redeclared") else 200, state)

    def delete_environment(environ: dict[str, Any], start_response: StartResponse, name: str) -> list[bytes]:
        return _json_response(start_response, 202, supervisor.delete_environment(name))

    def create_lease(environ: dict[str, Any], start_response: StartResponse, name: str) -> list[bytes]:
        if environ.get(REMOTE_KEY):
            where = f" ({control_socket})" if control_socket else ""
            raise HTTPError(403, LeaseError(
                f"leases are granted on the daemon's control socket{where} only, not over the HTTP listener: a "
                "lease ends when its client process exits, and over TCP the daemon cannot know that process (nor "
                "would a client elsewhere reach the players' pipes, which are files on the daemon's host); lease "
                "with renderd.connect() on that host"
            ))
        body = _read_json(environ)
        unknown = sorted(set(body) - {"client_pid", "timeout", "deadline"})
        if unknown:
            raise HTTPError(400, LeaseError(f"unknown lease request key(s): {_keys(unknown)}"))
        peer_pid = environ.get(PEER_PID_KEY)
        if "client_pid" not in body and peer_pid is not None and peer_pid > 0:
            # (the control socket: without a client_pid, the process asking holds the lease, as when it names itself)
            body["client_pid"] = peer_pid
        pid = body.get("client_pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise HTTPError(400, LeaseError(f"client_pid must be the client's process id (an integer), got {_shown(pid)}"))
        timeout = _number(body, "timeout", None)
        deadline = _deadline(body)
        try:
            supervisor.describe(name)  # 404 before anything else
        except NotFound as exc:  # (a LeaseError: no lease can be granted there, as renderd.connect() reports it)
            raise HTTPError(404, LeaseError(str(exc))) from None
        if peer_pid is not None:  # (the control socket: the process asking is known)
            pid = _client_process(pid, peer_pid)
        try:
            pidfd = open_client_pidfd(pid)  # a client that cannot be watched is a 400, not a 503
        except LeaseError as exc:
            raise HTTPError(400, exc) from None
        if peer_pid is not None and pid != peer_pid:
            # (``pid`` may have exited and been reused between the check and the pidfd: the pidfd's process
            # must still be the one found)
            try:
                again = _client_process(body["client_pid"], peer_pid)
            except HTTPError:
                again = None
            if again != pid:
                os.close(pidfd)
                raise HTTPError(400, LeaseError(f"client_pid {body['client_pid']} exited while it was checked"))
        try:
            _lease, answer = supervisor.acquire(
                name, pid, timeout, pidfd=pidfd, deadline=deadline,
                # Set by the control API's servers (waitress with channel_request_lookahead; renderd's own).
                hung_up=environ.get("waitress.client_disconnected") or environ.get("renderd.client_disconnected"),
                # The control socket's server: a thread more while the request waits (see Supervisor.acquire).
                on_wait=environ.get("renderd.lease_waiting"),
            )
        except NotFound as exc:  # (removed while the request waited)
            raise HTTPError(404, LeaseError(str(exc))) from None
        except LeaseError as exc:
            raise HTTPError(503, exc, [("Retry-After", "1")]) from None
        if pid_namespace is not None:  # (the player's pid is this namespace's: see renderd.daemon.client.connect)
            answer = {**answer, "pid_namespace": pid_namespace}
        # (for the server: the control socket's ends the lease if its client never reads this answer)
        environ[LEASE_GRANTED_KEY] = answer["lease"]
        return _json_response(start_response, 201, answer)

    def delete_lease(environ: dict[str, Any], start_response: StartResponse, lease_id: str) -> list[bytes]:
        body = _read_json(environ)
        unknown = sorted(set(body) - {"clean"})
        if unknown:  # (a misspelt "clean" must not release the lease cleanly)
            raise HTTPError(400, LeaseError(
                f"unknown release request key(s): {_keys(unknown)} (the only key is clean: true or false)"))
        clean = body.get("clean", True)
        if not isinstance(clean, bool):
            raise HTTPError(400, LeaseError(f"clean must be true or false, got {_shown(clean)}"))
        try:
            return _json_response(start_response, 200, supervisor.release(lease_id, clean=clean))
        except NotFound as exc:
            raise HTTPError(404, LeaseError(str(exc))) from None

    def get_lease(environ: dict[str, Any], start_response: StartResponse, lease_id: str) -> list[bytes]:
        try:
            return _json_response(start_response, 200, supervisor.lease_status(lease_id))
        except NotFound as exc:
            raise HTTPError(404, LeaseError(str(exc))) from None

    def metrics(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        data = supervisor.metrics.render()
        start_response("200 OK", [("Content-Type", METRICS_CONTENT_TYPE), ("Content-Length", str(len(data)))])
        return [data]

    router.add("/v1/health", GET=health)
    router.add("/v1/environments", GET=list_environments)
    router.add("/v1/environments/{name}", GET=get_environment, PUT=put_environment, DELETE=delete_environment)
    router.add("/v1/environments/{name}/leases", POST=create_lease)
    router.add("/v1/leases/{lease_id}", GET=get_lease, DELETE=delete_lease)
    router.add("/metrics", GET=metrics)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        body = answer(environ, start_response)
        # HEAD: the GET's status and headers (Content-Length included), never its body, which the client
        # would read as the start of the next answer on the connection.
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else body

    def answer(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path_info = environ.get("PATH_INFO", "") or "/"
        path = _path_text(path_info)
        try:
            handler, params = router.match(method, path, _segments(environ, path_info))
            return handler(environ, start_response, **params)
        except HTTPError as exc:
            return _json_response(start_response, exc.status, {"error": error_to_dict(exc.error)}, exc.headers)
        except NotFound as exc:
            return _json_response(start_response, 404, {"error": error_to_dict(exc)})
        except ConfigError as exc:
            return _json_response(start_response, 400, {"error": error_to_dict(exc)})
        except LeaseError as exc:
            return _json_response(start_response, 503, {"error": error_to_dict(exc)})
        except RenderdError as exc:
            return _json_response(start_response, 503 if supervisor.stopping else 500, {"error": error_to_dict(exc)})
        except Exception as exc:  # never a traceback page: log it, answer JSON
            # (a lease id in the path is its holder's secret: never logged)
            log.exception("control API: %s %s failed", method, re.sub(r"^/v1/leases/[^/]+", "/v1/leases/ID", path))
            return _json_response(
                start_response, 500,
                {"error": {"type": "RenderdError", "message": f"internal error: {type(exc).__name__}: {exc}"}},
            )

    return app
