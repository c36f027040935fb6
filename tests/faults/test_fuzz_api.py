"""Fuzzing the control API's request bodies (and routes) through its WSGI application, called in-process
with hand-built environs over a real :class:`Supervisor` whose loop is not running (so nothing is
spawned): random JSON, JSON of the right shape with wrong values, and garbage bytes. Every answer is
JSON; an error is ``{"error": {"type", "message"}}`` with a 4xx status (503 only when a well-formed lease
request finds no player), never a 500.
"""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from renderd.config import EnvironmentConfig, default_config
from renderd.config import settings as config_keys
from renderd.daemon.api import make_app
from renderd.daemon.supervisor import Supervisor
from renderd.errors import ERROR_TYPES

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
ENV_KEYS = [f.name for f in config_keys(EnvironmentConfig)]


class _NoPlatforms:
    """Platforms are only consulted when a player is spawned, which never happens here."""

    def select(self, config: Any) -> Any:
        raise AssertionError("the supervisor loop is not running: nothing may be spawned")


def _supervisor(base) -> Supervisor:
    (base / "players").mkdir()
    (base / "logs").mkdir()
    return Supervisor(default_config(), players_dir=str(base / "players"), log_dir=str(base / "logs"),
                      platforms=_NoPlatforms())


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    """Two applications: one to declare environments on, one whose only environment ("demo") is being
    removed, so that a well-formed lease request is answered at once (503) instead of waiting."""
    declare = _supervisor(tmp_path_factory.mktemp("api-declare"))
    lease = _supervisor(tmp_path_factory.mktemp("api-lease"))
    lease.delete_environment("demo")
    try:
        yield make_app(declare), make_app(lease)
    finally:
        declare.close()
        lease.close()


def request(app, method: str, path: str, body: bytes = b"", *, content_length: str | None = None
            ) -> tuple[int, dict[str, Any]]:
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_TYPE": "application/json", "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)) if content_length is None else content_length,
    }
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    data = b"".join(app(environ, start_response))
    assert got["headers"]["Content-Type"].startswith(("application/json", "text/plain")), got
    if method == "HEAD":  # the status and headers of the GET, no body
        assert data == b"", data
        return got["status"], {}
    if got["headers"]["Content-Type"].startswith("text/plain"):  # /metrics
        assert got["status"] == 200 and path == "/metrics"
        return got["status"], {}
    return got["status"], json.loads(data)


def check_error(status: int, payload: dict[str, Any], *, allow: tuple[int, ...] = ()) -> None:
    if status < 300 or status in allow:
        return
    assert 400 <= status < 500, (status, payload)
    error = payload["error"]
    assert set(error) == {"type", "message"}, error
    assert error["type"] in ERROR_TYPES and isinstance(error["message"], str) and error["message"]


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20))
_json = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=10)
_plausible = st.one_of(
    _json, st.integers(-5, 5000), st.floats(-1e3, 1e4), st.sampled_from([
        "renderd-player", "/bin/sh", "sh", "", ":0", "managed", "auto", "headless", "http", "fifo", "Ultra",
        "always", "never", "Linux64", ["/bin/sh", "-c", "true"], [], [0, 1], [0, 0], [-1], {"A": "b"},
        {"A=B": "c"}, {"": "x"}, float("nan"), float("inf"), -0.0, 2**63,
    ]),
)
_env_body = st.dictionaries(st.sampled_from(ENV_KEYS) | st.text(max_size=10), _plausible, max_size=6)
_name = st.sampled_from(["demo", "x", "a.b-c_1", "", "-x", "x" * 65, "é", "..", "%2e%2e"]) | st.text(max_size=12)


def encode(body: Any) -> bytes:
    return json.dumps(body).encode()  # NaN and Infinity as JSON5-ish literals, which json.loads accepts


@FUZZ
@given(_name, _env_body | _json)
def test_put_environment_bodies(apps, name: str, body: Any) -> None:
    declare, _ = apps
    status, payload = request(declare, "PUT", f"/v1/environments/{name}", encode(body))
    check_error(status, payload)
    event(f"PUT {status}")
    if status in (200, 201):
        assert payload["name"] == name and os.path.isabs(payload["config"]["executable"]
                                                         if isinstance(payload["config"]["executable"], str)
                                                         else payload["config"]["executable"][0])


_lease_body = st.dictionaries(
    st.sampled_from(["client_pid", "timeout"]) | st.text(max_size=8),
    st.one_of(_scalar, st.just(os.getpid()), st.just(1), st.floats(0, 3600), st.integers(2**22, 2**31)),
    max_size=3,
)


@FUZZ
@given(st.sampled_from(["demo", "nope"]) | _name, _lease_body | _json)
@example("demo", {"client_pid": os.getpid(), "timeout": 1.0})
@example("demo", {"client_pid": os.getpid(), "timeout": float("nan")})
def test_lease_request_bodies(apps, name: str, body: Any) -> None:
    _, lease = apps
    status, payload = request(lease, "POST", f"/v1/environments/{name}/leases", encode(body))
    # 503: a well-formed request for a live client found no player (the environment is being removed).
    check_error(status, payload, allow=(503,))
    if status == 503:
        assert payload["error"]["type"] == "LeaseError" and "removed" in payload["error"]["message"]
    assert status != 201
    event(f"POST {status}")


@FUZZ
@given(st.text(max_size=40), _json | st.dictionaries(st.just("clean"), _scalar, max_size=1))
def test_release_bodies(apps, lease_id: str, body: Any) -> None:
    _, lease = apps
    status, payload = request(lease, "DELETE", f"/v1/leases/{lease_id}", encode(body))
    check_error(status, payload)
    assert status in (400, 404, 405), (status, payload)


@FUZZ
@given(st.sampled_from(["PUT", "POST", "DELETE"]),
       st.sampled_from(["/v1/environments/demo", "/v1/environments/demo/leases", "/v1/leases/abc"]),
       st.binary(max_size=200),
       st.none() | st.sampled_from(["", "-1", "abc", "1e3", str(2**64), str(2 * 1024 * 1024)]))
def test_garbage_bytes_and_lengths(apps, method: str, path: str, body: bytes, length: str | None) -> None:
    _, lease = apps
    status, payload = request(lease, method, path, body, content_length=length)
    check_error(status, payload, allow=(503,))


@FUZZ
@given(st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS", ""]),
       st.sampled_from(["/v1/health", "/v1/environments", "/metrics", "/", "", "/v1", "/v1/leases",
                        "/v1/environments/"]) | st.text(max_size=30).map(lambda t: "/" + quote(t, safe="/")))
def test_methods_and_paths(apps, method: str, path: str) -> None:
    _, lease = apps
    status, payload = request(lease, method, path)
    if method == "HEAD":
        assert 200 <= status < 600
        return
    check_error(status, payload, allow=(503,))


def test_nothing_was_logged_as_an_internal_error(apps, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="renderd")
    declare, lease = apps
    for app, method, path, body in [
        (declare, "PUT", "/v1/environments/z", b'{"width": 1e400}'),
        (declare, "PUT", "/v1/environments/z", b'{"env": {"A": 1}}'),
        (lease, "POST", "/v1/environments/demo/leases", b'{"client_pid": 1, "timeout": NaN}'),
        (lease, "DELETE", "/v1/leases/x", b"\xff"),
    ]:
        check_error(*request(app, method, path, body))
    assert not caplog.records, caplog.text


@pytest.mark.parametrize("body", [b'{"start_timeout": Infinity}', b'{"step_timeout": 1e308}',
                                  b'{"step_timeout": 1' + b"0" * 400 + b"}",
                                  b'{"instances": 1000000000}', b'{"instances": 1025}'])
def test_put_refuses_unbounded_numbers(apps, body: bytes) -> None:
    declare, _ = apps
    status, answer = request(declare, "PUT", "/v1/environments/bounded", body)
    assert status == 400 and answer["error"]["type"] == "ConfigError", answer
    assert "at most" in answer["error"]["message"] or "finite" in answer["error"]["message"]
