"""examples/random_agent.py run as its docstring says, against a real ``renderd start`` on a socket of its own."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from tests.daemon.conftest import daemon, fast_config  # noqa: F401 - daemon is a fixture

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "random_agent.py"


def _example():
    spec = importlib.util.spec_from_file_location("random_agent", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _refused(example, capsys, *args: str) -> str:
    started = time.monotonic()
    with pytest.raises(SystemExit) as info:
        example.main(list(args))
    assert info.value.code == 2 and time.monotonic() - started < 5
    return capsys.readouterr().err


def test_leasing_example_takes_the_socket_and_as_many_players_as_the_environment_keeps(daemon, capsys):
    # The example leased 4 players by default (the built-in demo keeps 1) and had no --socket: every slot but
    # one waited the 30 s lease timeout, then a LeaseError that did not say --envs was the problem, and a
    # daemon on another socket could be named only through $RENDERD_SOCKET.
    example = _example()
    config = fast_config(instances=2, extra="width = 32\n    height = 24")
    d = daemon(config.replace('platform = "headless"', 'platform = "auto"'))
    assert example.main(["--environment", "demo", "--socket", d.socket, "--steps", "3"]) == 0
    assert "done: " in capsys.readouterr().out
    # More players than the environment keeps: refused at once, saying what to pass.
    err = _refused(example, capsys, "--environment", "demo", "--socket", d.socket, "--envs", "3")
    assert "--envs 3" in err and "keeps 2 player(s)" in err
    # An environment the daemon does not have: refused at once, naming the ones it has.
    err = _refused(example, capsys, "--environment", "dmeo", "--socket", d.socket)
    assert "no environment named 'dmeo'" in err and "(it has: demo)" in err


@pytest.mark.parametrize(("args", "said"), [
    (["--executable", "/nonexistent/thor-build"], "'/nonexistent/thor-build' does not exist"),
    (["--envs", "0"], "--envs 0: give 1 or more players"),
    (["--envs", "-2", "--environment", "demo"], "--envs -2: give 1 or more players"),
    (["--width", "0"], "width: must be an integer 1..4096, got 0"),
])
def test_the_example_refuses_an_argument_the_env_refuses_as_a_usage_error(capsys, args, said):
    # (`--executable /path/to/thor-build`, its docstring's placeholder, and `--envs 0` raised a traceback through
    # the vector session's launch threads.)
    err = _refused(_example(), capsys, *args, "--steps", "1")
    assert said in err and "Traceback" not in err, err
