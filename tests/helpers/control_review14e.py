"""Talking to renderd from the outside in tests: one HTTP request written by hand on the control socket, and the
``renderd`` command line run as a child process."""

from __future__ import annotations

import os
import socket
import subprocess

import psutil
import pytest

from tests.daemon.conftest import RENDERD

#: Deadline for one ``renderd`` command run by these tests (they never start players).
COMMAND_TIMEOUT = 60.0


def raw_request(path: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request written by hand on the unix socket; returns status, headers, body."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(request)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def run_renderd(*args: str, stdout=subprocess.PIPE, timeout: float = COMMAND_TIMEOUT,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``renderd ARGS`` as a child process; killed (and the test failed) if it outlives ``timeout``."""
    proc = subprocess.Popen([*RENDERD, *args], stdout=stdout, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.communicate()
        pytest.fail(f"renderd {' '.join(args)} still ran after {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err.decode(errors="replace"))
