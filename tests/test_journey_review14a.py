"""examples/random_agent.py refuses arguments the env refuses as a usage error (exit 2, the reason on stderr),
as it refuses a daemon it cannot use, instead of a traceback through the vector session's launch threads:
`--executable /path/to/thor-build` (its docstring's placeholder) and `--envs 0` raised one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "random_agent.py"


def _example():
    spec = importlib.util.spec_from_file_location("random_agent_review14a", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("args", "said"), [
    (["--executable", "/nonexistent/thor-build-review14a"], "'/nonexistent/thor-build-review14a' does not exist"),
    (["--envs", "0"], "--envs 0: give 1 or more players"),
    (["--envs", "-2", "--environment", "demo"], "--envs -2: give 1 or more players"),
    (["--width", "0"], "width: must be an integer 1..4096, got 0"),
])
def test_the_example_refuses_a_bad_argument_as_a_usage_error(capsys, args, said):
    with pytest.raises(SystemExit) as info:
        _example().main([*args, "--steps", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
