"""The ``renderd`` command line as an operator meets it: odd answers, odd text, exit codes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from renderd.daemon.commands import format_status
from tests.helpers.http_util import json_response, serving

RENDERD = [sys.executable, "-c", "from renderd.cli import main; main()"]


def _serve_json(path: str, answers: dict[str, object]):
    """A unix socket answering ``GET <path>`` with 200 and ``answers[path]`` as JSON (else {})."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def answer(request: bytes) -> bytes:
        text = request.decode("latin-1")
        return json_response(answers.get(text.split(" ")[1] if " " in text else "", {}))

    return serving(server, answer)


def _status(path: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RENDERD, "status", "--socket", path, *extra], capture_output=True, text=True, timeout=30)


HEALTH = {"version": "9.9", "status": "ready", "pid": 1, "uptime": 1.0, "environments": {}}


def test_status_of_an_answer_with_missing_fields_is_an_error_not_a_traceback(tmp_path):
    # (A daemon of another version, or another program answering the same paths with other JSON.)
    path = str(tmp_path / "other.sock")
    with _serve_json(path, {"/v1/health": HEALTH, "/v1/environments": {"environments": [{"name": "x"}]}}):
        out = _status(path)
        as_json = _status(path, "--json")
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr, out.stderr
    assert path in out.stderr and "not a renderd daemon" in out.stderr and "'players'" in out.stderr, out.stderr
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["environments"] == [{"name": "x"}]


def test_status_shows_control_characters_of_a_reason_as_text():
    # A FAILED player's reason quotes the last line of its log: escape sequences in it (colours, a terminal
    # title) must not reach the operator's terminal, and must not be half-removed in a pipe either.
    reason = "exited before readiness: exit code 3; last log line: \x1b[31mred\x1b[0m \x1b]0;pwned\x07 \x9b2J end"
    envs = [{"name": "bad", "removing": False, "wanted": 1, "players": [
        {"index": 0, "state": "FAILED", "pid": None, "uptime": None, "restarts": 1, "reason": reason,
         "lease": None},
        {"index": 1, "state": "STARTING\x1b[2J", "pid": 5, "uptime": None, "restarts": 0, "reason": "",
         "lease": None},
    ]}]
    text = format_status({"version": "0.1.0", "pid": 2, "status": "ready\x07", "uptime": 1.0}, envs)
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F for c in text), repr(text)
    assert "\\x1b[31mred\\x1b[0m \\x1b]0;pwned\\x07 \\x9b2J end" in text
    lines = text.splitlines()
    assert lines[0] == "renderd 0.1.0 pid 2 ready\\x07, up 1.0s"
    assert lines[1].index("PID") == lines[3].index("5 ") and "STARTING\\x1b[2J" in lines[3]


def test_status_keeps_a_multi_line_reason_on_lines_of_its_own():
    envs = [{"name": "e", "removing": False, "wanted": 1, "players": [
        {"index": 0, "state": "FAILED", "pid": None, "uptime": None, "restarts": 0,
         "reason": "no platform can run it\nLinux64: no display\tat all", "lease": None},
    ]}]
    lines = format_status({"version": "0.1.0", "pid": 2, "status": "ready", "uptime": 1.0}, envs).splitlines()
    assert lines[-2:] == ["e[0] FAILED: no platform can run it", "Linux64: no display\\tat all"]


def test_status_of_a_real_daemon_through_a_pipe(tmp_path):
    # The table through a pipe (not a terminal) keeps the reason as the daemon tells it, escapes included.
    player = tmp_path / "player.sh"
    player.write_text(
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -logFile ] && LOG=\"$2\"; shift; done\n"
        "printf 'boot\\n\\033[31mred\\033[0m \\033]0;title\\007 end\\n' >> \"$LOG\"\nexit 3\n"
    )
    player.chmod(0o755)
    sock = str(tmp_path / "r.sock")
    config = tmp_path / "r.toml"
    config.write_text(
        f'[daemon]\nsocket = "{sock}"\nruntime_dir = "{tmp_path / "run"}"\nbackoff_initial = 0.05\n'
        f'backoff_max = 0.05\nmax_boot_failures = 1\n[environments.bad]\nexecutable = "{player}"\n'
        'platform = "headless"\n'
    )
    daemon = subprocess.Popen([*RENDERD, "start", "-c", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        import time

        deadline = time.monotonic() + 20
        out = None
        while time.monotonic() < deadline:
            out = _status(sock)
            if out.returncode == 0 and "FAILED:" in out.stdout:
                break
            time.sleep(0.1)
        assert out is not None and "FAILED:" in out.stdout, out
        note = next(line for line in out.stdout.splitlines() if line.startswith("bad[0] FAILED:"))
        assert note.endswith("last log line: \\x1b[31mred\\x1b[0m \\x1b]0;title\\x07 end"), note
    finally:
        daemon.terminate()
        daemon.wait(30)
