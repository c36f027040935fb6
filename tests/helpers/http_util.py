"""Helpers for the HTTP transport tests: hand-built multipart bodies, raw HTTP over real sockets, real
player processes. Every wait has a deadline. (The fixtures are in tests/http_players/conftest.py.)"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from typing import Any, Callable, Iterable, Iterator, Sequence

from renderd.process import PlayerProcess, player_env
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

#: Deadline for one HTTP answer, a player's first frame or exit in these tests (a test that hits it failed).
DEADLINE = 20.0
BOUNDARY = b"renderdTestBoundary1234567890abcdefABCDEF"


def part(name: str, body: bytes, *, filename: str | None = None, content_type: str | None = None) -> bytes:
    """One multipart part as Unity's WWWForm writes it (Content-Type first, "Content-disposition")."""
    if content_type is None:
        content_type = "application/octet-stream" if filename else 'text/plain; charset="utf-8"'
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return (
        b"--" + BOUNDARY + b"\r\nContent-Type: " + content_type.encode() + b"\r\nContent-disposition: "
        + disposition.encode() + b"\r\n\r\n" + body + b"\r\n"
    )


def form(parts: Iterable[bytes]) -> bytes:
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


def metadata(width: int = 4, height: int = 3, seq: int = 0, **agent: Any) -> dict[str, Any]:
    base = {"screenWidth": width, "screenHeight": height, "lastAction": "", "lastActionSuccess": True,
            "errorMessage": "", "actionReturn": None, "thirdPartyCameras": []}
    base.update(agent)
    return {"agents": [base], "sequenceId": seq, "activeAgentId": 0, "thirdPartyCameras": []}


def frame_body(token: str | None, *, width: int = 4, height: int = 3, seq: int = 0, rgb: bytes | None = None,
               extra: Sequence[bytes] = (), md: dict | None = None) -> bytes:
    """A /train body: one RGB image, metadata, token (in Unity's order)."""
    if rgb is None:
        rgb = bytes(range(256))[: width * height * 3] * 1
        rgb = (rgb * (width * height * 3 // max(1, len(rgb)) + 1))[: width * height * 3]
    parts = [part("image", rgb, filename="file.dat"), *extra,
             part("metadata", json.dumps(md if md is not None else metadata(width, height, seq)).encode())]
    if token is not None:
        parts.append(part("token", token.encode()))
    return form(parts)


def request_bytes(body: bytes, *, path: str = "/train", method: str = "POST", headers: Sequence[str] = (),
                  boundary: bytes = BOUNDARY) -> bytes:
    """A request exactly as a Unity build writes it: Content-Length, Content-Type, nothing else."""
    lines = [f"{method} {path} HTTP/1.1", f"Content-Length: {len(body)}",
             f'Content-Type: multipart/form-data; boundary="{boundary.decode()}"', *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.body[:200]!r}>"


class RawClient:
    """One TCP connection to the server, spoken by hand."""

    def __init__(self, port: int, timeout: float = DEADLINE) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buf += data

    def response(self) -> Response:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return Response(status, headers, body)

    def closed_by_server(self) -> bool:
        """True when the server closed its end (reads return end of file within the deadline)."""
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def connect(served_fixture, timeout: float = DEADLINE) -> RawClient:
    _, server, clients = served_fixture
    client = RawClient(server.port, timeout)
    clients.append(client)
    return client


@contextlib.contextmanager
def small_server(max_connections: int) -> Iterator[tuple[PlayerBridgeRegistry, PlayerHttpServer, list[RawClient]]]:
    """(registry, server, clients) as the ``served`` fixture gives, for a server of ``max_connections`` connections;
    the clients (see :func:`connect`) are closed and the server stopped afterwards."""
    registry = PlayerBridgeRegistry(max_request_size=1 << 20)
    server = PlayerHttpServer(registry, max_connections=max_connections).start()
    clients: list[RawClient] = []
    try:
        yield registry, server, clients
    finally:
        for client in clients:
            client.close()
        server.stop()


def spawn_player(port: int, token: str | None, args: Sequence[str] = (), log_path: str | None = None,
                 width: int = 64, height: int = 48) -> PlayerProcess:
    """The reference player (``python -m renderd.player``) speaking HTTP to 127.0.0.1:port."""
    env = player_env(None, server_type="WSGI", host="127.0.0.1", port=port, token=token)
    argv = [sys.executable, "-m", "renderd.player", "-screen-width", str(width), "-screen-height", str(height),
            *args]
    if log_path is not None:
        argv += ["-logFile", log_path]
    return PlayerProcess.spawn(argv, env, log_path)


@contextlib.contextmanager
def serving(server: socket.socket, answer: Callable[[bytes], bytes]) -> Iterator[None]:
    """Serve the bound, listening ``server`` on a thread while the block runs: each connection's request
    (its first read) gets ``answer(request)``, the whole HTTP response, and is closed. The thread is joined
    and the socket closed at the end of the block."""
    server.settimeout(0.05)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.sendall(answer(conn.recv(65536)))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
        server.close()


def json_response(value: Any) -> bytes:
    """A 200 answer carrying ``value`` as JSON, closing the connection."""
    body = json.dumps(value).encode()
    return (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body)
