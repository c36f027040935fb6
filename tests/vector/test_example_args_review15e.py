"""examples/random_agent.py given odd arguments: each is refused as a usage error (exit 2) naming the option, with no
traceback, and nothing is left running."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

EXAMPLE = Path(__file__).resolve().parent.parent.parent / "examples" / "random_agent.py"
#: Far more than a refusal (or one 16 x 16 player's start and reset) takes: it only catches a hang.
DEADLINE = 60.0


def _example():
    spec = importlib.util.spec_from_file_location("random_agent_review15e", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("args", "said"), [
    # (Ran no step and said "done", exit 0.)
    (["--steps", "-5"], "--steps -5: give 0 or more steps"),
    # (A traceback from numpy: "ValueError: expected non-negative integer".)
    (["--seed", "-1"], "--seed -1: give an integer 0 or more"),
    # (Ran, the empty name resetting a player to its current scene: a typo taken as a scene.)
    (["--scenes", "FloorPlan1,,FloorPlan2"], "--scenes 'FloorPlan1,,FloorPlan2': a scene name is empty"),
    # (A traceback: the players' refusal, raised by the first reset.)
    (["--scenes", "FloorPlan9"], "--scenes 'FloorPlan9': sub-environment 0: reset failed: Reset: no scene named "
                                 "'FloorPlan9'"),
])
def test_the_example_refuses_odd_arguments_as_usage_errors(no_leaks, capsys, args, said):
    started = time.monotonic()
    with pytest.raises(SystemExit) as info:
        _example().main(["--envs", "1", "--steps", "3", "--width", "16", "--height", "16", *args])
    assert time.monotonic() - started < DEADLINE
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert said in err and "Traceback" not in err, err
