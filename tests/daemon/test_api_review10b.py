"""docs/api.md against the code and a running daemon: routes, limits, timeouts, answers' fields."""

from __future__ import annotations

import json
import pathlib
import re
import socket

import waitress.adjustments

from renderd.daemon import api, client, leases, metrics, service, supervisor
from renderd.errors import ERROR_TYPES, LeaseBusyError, LeaseError

from tests.daemon.conftest import fast_config

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _doc() -> str:
    return " ".join(DOC.read_text().split())  # (sentences are wrapped anywhere)


def _exchange(path: str, data: bytes, timeout: float = 10.0) -> bytes:
    """``data`` sent on the control socket at ``path`` as it is; the whole answer, until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_request_head_over_the_limit_is_answered_431_as_docs_api_md_says(daemon):
    # docs/api.md said a request head is at most 64 KiB and that "a larger Content-Length is answered 413",
    # which left a reader to take 413 for a head over the limit as well: the server answers 431.
    limit = service.API_MAX_HEADER_SIZE
    doc = _doc()
    assert f"a request head at most {limit >> 10} KiB" in doc
    assert "a larger head 431 (Request Header Fields Too Large)" in doc, "docs/api.md: what a head over the limit gets"
    d = daemon(fast_config(instances=0))
    head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * limit + b"\r\n\r\n"
    answer = _exchange(d.socket, head)
    status, _, rest = answer.partition(b"\r\n")
    assert status.split()[1] == b"431", answer[:300]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body["error"]["type"] == "RenderdError", body
    # Just under the limit, the request is served.
    small = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (limit - 1024) + b"\r\n\r\n"
    assert _exchange(d.socket, small).split()[1] == b"200"


# -- what docs/api.md names, read from the code ------------------------------------------------------------

def _documented_routes() -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for method, path in re.findall(r"^\| `([A-Z]+) (/\S*)` \|", DOC.read_text(), re.M):
        routes.setdefault(path, set()).add(method)
    return routes


def _router(app) -> api._Router:
    """The router inside the application ``make_app`` returns (in its functions' closures)."""
    todo, seen = [app], set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            if isinstance(value, api._Router):
                return value
            if callable(value):
                todo.append(value)
    raise AssertionError("no router in the application")


def test_the_route_table_is_every_route_the_api_serves_and_each_405_allow_says_so():
    documented = _documented_routes()
    app = api.make_app(None)  # (nothing below reaches a handler)
    served = {"/" + "/".join(pattern).replace("{lease_id}", "{id}"): set(methods)
              for pattern, methods in _router(app).routes}
    assert documented == served, "docs/api.md's route table is not what renderd.daemon.api.make_app serves"
    # The module's own list of routes says the same.
    listed: dict[str, set[str]] = {}
    for method, path in re.findall(r"^ {4}([A-Z]+) +(/\S*)", api.__doc__, re.M):
        listed.setdefault(path, set()).add(method)
    assert listed == documented
    # A method a route does not take: 405 with Allow, HEAD wherever GET is.
    for path, methods in documented.items():
        got = {}
        app({"REQUEST_METHOD": "OPTIONS", "PATH_INFO": path.replace("{name}", "demo").replace("{id}", "x")},
            lambda status, headers, exc_info=None: got.update(status=status, headers=dict(headers)))
        assert got["status"].startswith("405"), (path, got)
        allow = set(got["headers"]["Allow"].split(", "))
        assert allow == methods | ({"HEAD"} if "GET" in methods else set()), (path, allow)


def test_the_limits_and_timeouts_docs_api_md_names_are_the_codes():
    doc = _doc()
    connections = waitress.adjustments.Adjustments().connection_limit  # (the control socket leaves it as it is)
    waiting = connections - 2 - service.API_CONNECTION_HEADROOM
    slack = client.REQUEST_SLACK
    for phrase in [
        f"A request body is at most {api.MAX_BODY_SIZE >> 20} MiB (`renderd.daemon.api.MAX_BODY_SIZE`)",
        f"a request head at most {service.API_MAX_HEADER_SIZE >> 10} KiB",
        f"from 0 to {leases.MAX_LEASE_TIMEOUT:g} (`renderd.daemon.leases.MAX_LEASE_TIMEOUT`;",
        f"Ended leases are remembered (the last {supervisor.ENDED_LEASES_KEPT})",
        f"The control socket takes {connections} connections at a time, two of which waitress keeps for itself",
        f"A connection has {service.API_READ_TIMEOUT:g} s (`renderd.daemon.service.API_READ_TIMEOUT`)",
        f"Waiting lease requests leave {service.API_CONNECTION_HEADROOM} of them free "
        "(`renderd.daemon.service.API_CONNECTION_HEADROOM`)",
        f"a lease request that would wait when {waiting} requests wait already is answered 503 `LeaseBusyError`",
        f"send such a request again after a pause of {client.LEASE_BUSY_RETRY:g} s on average",
        f"each pause {client.LEASE_BUSY_RETRY / 2:g}-{client.LEASE_BUSY_RETRY * 1.5:g} s at random",
        f"the request notices within {supervisor.HANG_UP_POLL_INTERVAL:g} s",
        f"gives the requests under way up to {service.API_STOP_TIMEOUT:g} s (`renderd.daemon.service.API_STOP_TIMEOUT`)",
        f"send `deadline` = the moment they send + `timeout` + {slack - client.LEASE_ANSWER_MARGIN:g} s "
        f"(they give up on the answer {slack:g} s after `timeout`)",
        f"ask `GET /v1/leases/{{id}}` (for up to {client.EXIT_STATUS_TIMEOUT:g} s: the daemon reaps at once)",
        f"until {metrics.GONE_SERIES_TTL / 60:g} minutes after it is gone (`renderd.daemon.metrics.GONE_SERIES_TTL`",
        f"control.token` ({service.CONTROL_TOKEN_BYTES} random bytes in hex",
        f"holding at least {service.MIN_CONTROL_TOKEN_LENGTH} characters of printable ASCII",
        f"the request's path in that line is cut to {service.REFUSAL_LOG_PATH_CHARS} characters",
    ]:
        assert phrase in doc, f"docs/api.md does not say: {phrase}"


def test_the_error_types_docs_api_md_names_are_renderds():
    doc = _doc()
    named = set(re.findall(r"`([A-Z][A-Za-z]*Error)`", doc))
    assert {"ConfigError", "LeaseError", "RenderdError", "LeaseBusyError"} <= named
    assert named <= set(ERROR_TYPES), sorted(named - set(ERROR_TYPES))
    assert "`LeaseBusyError` (a `LeaseError`)" in doc and issubclass(LeaseBusyError, LeaseError)


def _section(start: str, end: str) -> str:
    doc = _doc()
    return doc[doc.index(start):doc.index(end, doc.index(start))]


def test_every_field_of_the_answers_is_named_in_docs_api_md(daemon):
    # A field a daemon sends that docs/api.md does not name, or one it names that no answer has.
    d = daemon(fast_config(instances=2))
    c = d.client
    health = c.health()
    health_doc = _section("| `GET /v1/health` |", "| `GET /v1/environments` |")
    for key in [*health, *health["environments"]["demo"]]:
        assert f"`{key}`" in health_doc, key
    answer = c.lease("demo", timeout=10)
    env = c.get("/v1/environments/demo")
    player = next(p for p in env["players"] if p["lease"])
    env_doc = _section("ENV is `{", "Player states:")
    for key in [*env, *player, *player["lease"]]:
        assert f'"{key}"' in env_doc, key
    documented = set(re.findall(r'"([a-z_]+)"[,} ]', env_doc.partition('"players": [PLAYER, ...]}`')[2]))
    assert documented == {*player, *player["lease"]}, documented ^ {*player, *player["lease"]}
    lease_doc = _section("201 {\"lease\"", "`client_pid` is the process")
    assert set(answer) == set(re.findall(r'"([a-z_]+)": ', lease_doc)), answer
    status = c.lease_status(answer["lease"])
    status_doc = _section("| `GET /v1/leases/{id}` |", "| `DELETE /v1/leases/{id}` |")
    shown = re.search(r"`\{(\"[^`]*)\}`", status_doc).group(1)
    assert set(status) == set(re.findall(r'"([a-z_]+)"', shown)), status
    released = c.release(answer["lease"])
    release_doc = _section("| `DELETE /v1/leases/{id}` |", "| `GET /metrics` |")
    assert set(released) <= set(re.findall(r'"([a-z_]+)"', release_doc)) and '`{"released": true, "recycled": bool}`' in release_doc


def test_the_environment_name_rule_is_the_configurations(daemon):
    # docs/api.md left out that a name starts with a letter or digit: "-x" and ".x", which its sentence
    # allowed, are refused by PUT and unknown to every other request.
    from renderd.config import ENVIRONMENT_NAME, ConfigError

    doc = _doc()
    assert ("Environment names are 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit "
            "(as in the configuration)") in doc
    d = daemon(fast_config(instances=0))
    for name in ("-x", ".x", "_x"):
        assert not ENVIRONMENT_NAME.fullmatch(name)
        try:
            d.client.request("PUT", f"/v1/environments/{name}", {"instances": 0})
        except ConfigError as exc:
            assert exc.status == 400 and "starting with a letter or digit" in str(exc), str(exc)
        else:
            raise AssertionError(f"PUT {name} was taken")


def test_an_empty_socket_path_is_a_bad_argument_not_an_invalid_argument_of_the_kernel(tmp_path, monkeypatch):
    # connect(socket=os.environ.get("SOCK", "")) with SOCK unset said "talking to the renderd daemon at :
    # Invalid argument [EINVAL]": a socket path that is empty (as `renderd status --socket ""` is refused).
    import renderd
    from renderd.config import ArgumentError
    from renderd.daemon.client import ControlClient

    monkeypatch.setenv("RENDERD_SOCKET", str(tmp_path / "renderd.sock"))
    for call in (lambda: renderd.connect("demo", socket="", timeout=1), lambda: ControlClient("").health()):
        try:
            call()
        except ArgumentError as exc:
            assert exc.key == "socket", exc
            message = str(exc)
            assert "an empty path" in message and "leave socket= out" in message and "$RENDERD_SOCKET" in message, message
            assert "EINVAL" not in message
        else:
            raise AssertionError("an empty socket path was taken")


def test_an_empty_or_missing_environment_name_is_a_bad_argument(tmp_path):
    # connect(os.environ.get("ENV", "")) with ENV unset was answered "no such route: POST
    # /v1/environments//leases (see docs/api.md)", and connect(None) "no environment named 'None'".
    import renderd
    from renderd.config import ArgumentError
    from renderd.daemon.client import ControlClient

    sock = str(tmp_path / "renderd.sock")  # (nothing is asked of it)
    for call in (lambda name: renderd.connect(name, socket=sock, timeout=1),
                 lambda name: ControlClient(sock).lease(name, timeout=1)):
        for name in ("", None):
            try:
                call(name)
            except ArgumentError as exc:
                assert exc.key == "environment", exc
                assert str(exc) == f"environment: must be the name of an environment (a non-empty string), got {name!r}"
            else:
                raise AssertionError(f"{name!r} was taken as an environment's name")


def test_put_answers_201_for_a_new_environment_and_200_for_one_that_existed(daemon):
    # docs/api.md said "201 when new, 200 when changed", leaving a declaration that changes nothing unsaid.
    assert "201 when new, 200 when it existed (changed or not)" in _doc()
    d = daemon(fast_config(instances=0))
    body = {"instances": 0, "platform": "headless"}
    assert d.client.request("PUT", "/v1/environments/e", body)[0] == 201
    assert d.client.request("PUT", "/v1/environments/e", body)[0] == 200  # unchanged
    assert d.client.request("PUT", "/v1/environments/e", {**body, "width": 64})[0] == 200  # changed
