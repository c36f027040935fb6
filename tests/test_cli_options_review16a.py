"""Bad command-line values are usage errors (exit 2, naming the option, the value and what is accepted),
wherever renderd finds them; what is found later (the file's contents, a daemon that cannot be reached) keeps
exit 1. Real `renderd` processes."""

from __future__ import annotations

import contextlib
import os

from click.testing import CliRunner

from renderd.cli import main
from tests.helpers.daemon_cli_review15m import DEADLINE, renderd_start, short_home

LONG = "/tmp/" + "x" * 120  # (a unix socket path holds at most 107 bytes)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RENDERD_SOCKET", "NOTIFY_SOCKET", "JOURNAL_STREAM")}


def _starts(runs: list[list[str]]) -> list[tuple[int, str]]:
    """``renderd start ARGS`` for each ARGS, at the same time: (exit status, stderr) of each."""
    with contextlib.ExitStack() as stack:
        daemons = [stack.enter_context(renderd_start(args, env=_env(), text=True)) for args in runs]
        return [(d.wait(DEADLINE), d.stderr.read()) for d in daemons]


def test_bad_values_of_renderd_start_options_are_usage_errors():
    with short_home("ra16-") as home:
        rt = os.path.join(home, "rt")
        bad_file = os.path.join(home, "bad.toml")
        with open(bad_file, "w") as f:
            f.write('[daemon]\nhttp = "bogus"\n[environments.demo]\nexecutable = "renderd-player"\n')
        results = _starts([
            ["--runtime-dir", rt, "--http", "bogus"],
            ["--runtime-dir", rt, "--http", "127.0.0.1:99999"],
            ["--runtime-dir", rt, "--socket", rt],
            ["--runtime-dir", rt, "--socket", LONG],
            # Found in the file, or no file: not the command line's values, exit 1 as before.
            ["--runtime-dir", rt, "-c", bad_file],
            ["--runtime-dir", rt, "-c", os.path.join(home, "missing.toml")],
        ])
        assert not os.path.exists(rt)  # (nothing was started)
    (http, http_out), (port, port_out), (same, same_out), (long, long_out), (file, file_out), (missing, _) = results
    assert http == 2 and "Invalid value for --http: 'bogus' is not HOST:PORT" in http_out, http_out
    assert port == 2 and "Invalid value for --http: '127.0.0.1:99999': port '99999' is not a number" in port_out
    assert same == 2 and "Invalid value for --socket:" in same_out and "is runtime_dir itself" in same_out
    assert long == 2 and "Invalid value for --socket:" in long_out and "bytes long" in long_out, long_out
    assert "Usage: renderd start" in http_out and "Traceback" not in "".join(o for _, o in results)
    assert file == 1 and "bad.toml:2: daemon.http: 'bogus' is not HOST:PORT" in file_out, file_out
    assert missing == 1


def _status(*args: str, **env: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["status", *args], env={"RENDERD_SOCKET": None, **env})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_bad_values_of_renderd_status_socket_are_usage_errors(tmp_path):
    code, out = _status("--socket", LONG)
    assert code == 2 and "Invalid value for --socket:" in out and "is 125 bytes long" in out, out
    code, out = _status("--socket", str(tmp_path))
    assert code == 2 and f"Invalid value for --socket: '{tmp_path}' names a directory" in out, out
    assert f"{tmp_path}/renderd.sock" in out
    # No daemon there, or a variable (not an option) too long: not a usage error.
    code, out = _status("--socket", str(tmp_path / "renderd.sock"))
    assert code == 1 and "cannot reach the renderd daemon" in out, out
    code, out = _status(RENDERD_SOCKET=LONG)
    assert code == 1 and "cannot reach the renderd daemon" in out, out


def test_status_takes_a_short_relative_socket_as_a_path_like_any(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _status("--socket", "r.sock")
    assert code == 1 and "cannot reach the renderd daemon at r.sock" in out, out
