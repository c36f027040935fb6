"""The reference player's gl renderer and X servers that do not answer, stop answering, or turn it away."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

PROMPT = 10.0
#: X11 over TCP: display N listens on port 6000 + N.
X_TCP_PORT = 6000


def _silent_x_server() -> tuple[socket.socket, int]:
    """A TCP listener on 127.0.0.1 at an X display's port that accepts connections and never answers (a
    stopped or hung X server). Returns it and its display number."""
    for number in range(40, 100):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", X_TCP_PORT + number))
        except OSError:
            sock.close()
            continue
        sock.listen(8)
        return sock, number
    pytest.skip("no free X display port on 127.0.0.1")


def test_sigterm_ends_a_gl_player_whose_x_server_does_not_answer(spawn):
    # The GLX context was created first, in C (XOpenDisplay), which waits for the server's answer and
    # retries the read a signal interrupts: a SIGTERM to a player whose X server accepted the connection
    # but never answered did nothing, and the player stayed until it was killed. The X server is now first
    # reached from Python (the connection the renderer keeps to notice a lost server), where the signal
    # ends the wait: exit 0, "received SIGTERM" in the log.
    pytest.importorskip("moderngl")
    pytest.importorskip("Xlib")
    listener, number = _silent_x_server()
    accepted: list[socket.socket] = []
    try:
        p = spawn(["--renderer", "gl"], platform="Linux64", env={"DISPLAY": f"127.0.0.1:{number}"})
        ready, _, _ = select.select([listener], [], [], PROMPT)
        assert ready, f"the player never connected to the X server: {p.stderr_text()[-500:]}"
        accepted.append(listener.accept()[0])
        # Waiting for the server's answer to the connection setup, it blocks in a read.
        conn = accepted[0]
        ready, _, _ = select.select([conn], [], [], PROMPT)
        assert ready, "the player sent no connection setup"
        assert conn.recv(4096)
        p.proc.send_signal(signal.SIGTERM)
        try:
            code = p.wait(PROMPT)
        except Exception:
            pytest.fail("the player did not end on SIGTERM while its X server did not answer")
        assert code == 0, p.stderr_text()[-500:]
        assert "received SIGTERM; exiting" in p.log_text()
    finally:
        for sock in accepted:
            sock.close()
        listener.close()


def test_a_gl_player_whose_x_server_is_stopped_still_exits_when_its_client_leaves(spawn):
    # Releasing the GLX context on the way out makes round trips to the X server. With the server stopped
    # (SIGSTOP, or hung) the player that its client had left waited for it for ever, with SIGTERM ignored
    # (its exit code was decided): only SIGKILL ended it. It now asks the server first and, without an
    # answer within a second, leaves the context to the process's exit: exit 0 at once.
    pytest.importorskip("moderngl")
    pytest.importorskip("Xlib")
    from tests.helpers.xvfb_review14e import _Xvfb

    server = _Xvfb()
    try:
        p = spawn(["-screen-width", "16", "-screen-height", "16", "--renderer", "gl"], platform="Linux64",
                  env={"DISPLAY": server.name})
        p.start_session()
        assert p.step("MoveBack")
        os.killpg(server.proc.pid, signal.SIGSTOP)
        p.close_client_pipe()
        try:
            code = p.wait(PROMPT)
        except subprocess.TimeoutExpired:
            pytest.fail("the player did not exit while its X server was stopped")
        assert code == 0, p.stderr_text()[-500:]
        assert "does not answer" in p.log_text() and "the client closed client.pipe" in p.log_text()
    finally:
        server.kill()


FAMILY_LOCAL = 256  # Xauthority's family of local (Unix socket) entries


@contextlib.contextmanager
def _xvfb_wanting_a_cookie(tmp_path):
    """An Xvfb (-displayfd) that lets in only clients with a cookie nobody has; yields its display name."""
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb is not installed")

    def counted(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    auth = tmp_path / "Xauthority"
    auth.write_bytes(struct.pack(">H", FAMILY_LOCAL) + counted(socket.gethostname().encode()) + counted(b"")
                     + counted(b"MIT-MAGIC-COOKIE-1") + counted(os.urandom(16)))
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        [binary, "-displayfd", str(write_fd), "-auth", str(auth), "-nolisten", "tcp", "-screen", "0", "64x64x24",
         "+extension", "GLX"],
        pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        process_group=0,
    )
    os.close(write_fd)
    try:
        data = b""
        deadline = time.monotonic() + PROMPT
        while b"\n" not in data:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the test Xvfb did not announce its display"
            chunk = os.read(read_fd, 64)
            assert chunk, "the test Xvfb exited"
            data += chunk
        yield f":{int(data.strip())}"
    finally:
        os.close(read_fd)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(PROMPT)


def test_a_gl_renderer_refused_by_its_x_server_leaves_no_socket_open(tmp_path, monkeypatch):
    # The renderer reaches the X server through python-xlib first, which leaves the socket of a connection
    # the server refused (it wants a cookie) to the garbage collector: in a process that goes on after the
    # GLUnavailable, a socket stayed open until then (a ResourceWarning). It is closed with the error.
    import gc

    pytest.importorskip("moderngl")
    pytest.importorskip("Xlib")
    from renderd.player.gl import GLRenderer, GLUnavailable

    with _xvfb_wanting_a_cookie(tmp_path) as name:
        monkeypatch.setenv("DISPLAY", name)
        monkeypatch.setenv("XAUTHORITY", str(tmp_path / "no-such-Xauthority"))
        with pytest.raises(GLUnavailable, match="Authorization required"):
            GLRenderer(platform="Linux64")
        gc.collect()  # (an unclosed socket collected here is a ResourceWarning: an error in this suite)


def test_a_gl_player_refused_by_its_x_server_says_so_in_words(spawn, tmp_path):
    # The X server's refusal came into the log as python-xlib's bytes ("... b'Authorization required, but
    # no authorization protocol specified\\n'"), which renderd quotes when the player fails to start.
    pytest.importorskip("moderngl")
    pytest.importorskip("Xlib")
    with _xvfb_wanting_a_cookie(tmp_path) as name:
        p = spawn(["--renderer", "gl"], platform="Linux64",
                  env={"DISPLAY": name, "XAUTHORITY": str(tmp_path / "no-such-Xauthority")})
        assert p.wait(PROMPT) == 2
    log = p.log_text()
    line = next(line for line in log.splitlines() if "cannot start the gl renderer" in line)
    assert f"cannot connect to the X display {name}: the X server refused the connection (Authorization required" \
        in line, line
    assert "b'" not in line and "\\n" not in line, line
