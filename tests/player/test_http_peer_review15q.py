"""The HTTP link against a server that misbehaves (a real player process, a real socket server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

#: Catches a hang only.
HANG = 15.0


def _read_request(conn: socket.socket) -> bytes | None:
    """One request's first line, its headers and Content-Length body read in full (None at end of input)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(1 << 20)
        if not chunk:
            return None
        rest += chunk
    return head.split(b"\r\n", 1)[0]


class _Server:
    """Answers GET /ping with pong, then the first POST /train with ``answer`` (raw bytes), then closes."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(HANG)
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(HANG)
            while True:
                try:
                    line = _read_request(conn)
                except OSError:
                    return
                if line is None:
                    return
                self.requests.append(line)
                if line.startswith(b"GET /ping"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong")
                    continue
                conn.sendall(self.answer)
                return  # the with block closes the connection

    def close(self) -> None:
        self.listener.close()
        self.thread.join(HANG)


def _run_player(tmp_path, answer: bytes) -> tuple[int, str, list[bytes]]:
    server = _Server(answer)
    log = tmp_path / "player.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(AI2THOR_SERVER_TYPE="WSGI", AI2THOR_HOST="127.0.0.1", AI2THOR_PORT=str(server.port),
               AI2THOR_CLIENT_TOKEN="t", AI2THOR_SERVER_SIDE_SCREENSHOT="True", RENDERD_PLAYER_PING_TIMEOUT="5")
    proc = subprocess.Popen(
        [sys.executable, "-m", "renderd.player", "-screen-width", "32", "-screen-height", "32", "-logFile", str(log)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        code = proc.wait(HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the player did not exit within {HANG} s; log:\n{log.read_text(errors='replace')}")
    finally:
        server.close()
    return code, log.read_text(errors="replace"), server.requests


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nContent-Len",                        # inside a header line
    b"HTTP/1.1 200 OK\r\n",                                   # after the status line
    b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n",             # before the blank line
], ids=["mid-line", "after-status", "before-blank-line"])
def test_server_hanging_up_inside_its_headers_is_an_io_error_not_a_bad_action(tmp_path, answer):
    code, log, requests = _run_player(tmp_path, answer)
    assert [r.split(b" ")[:2] for r in requests] == [[b"GET", b"/ping"], [b"POST", b"/train"]]
    assert code == 1, log
    assert "POST /train failed: HeadersCutShort: the server closed the connection inside the headers of its " \
           "answer (200 OK)" in log
    assert "not valid UTF-8 JSON" not in log


def test_server_hanging_up_inside_its_body_is_an_io_error(tmp_path):
    # Guard (already right before): a body cut short of its Content-Length.
    code, log, _ = _run_player(tmp_path, b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"action":')
    assert code == 1, log
    assert "body cut short: the server closed the connection after 10 of its 100 bytes" in log


def test_redirect_is_not_followed(tmp_path):
    # Guard (already right before): a build posts to its one address; a 3xx ends the player, named.
    code, log, requests = _run_player(
        tmp_path, b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/train\r\nContent-Length: 0\r\n\r\n")
    assert code == 1, log
    assert "POST /train answered 302" in log
    assert len(requests) == 2
