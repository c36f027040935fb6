"""``max_depth`` given a bool (``max_depth=True``, a flag put where the bound goes) is refused naming it, as
the envs' other numbers refuse bools, before any player starts; float(True) made it a bound of 1.0 m."""

from __future__ import annotations

import numpy as np
import pytest

import renderd
import renderd.gym as rgym
from tests.vector.conftest import player_kwargs

#: No such program: an env that got past its argument checks would fail to launch with a ConfigError instead.
MISSING = "/nonexistent/renderd-player-review13f"


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)], ids=["True", "False", "numpy-True"])
@pytest.mark.parametrize("make", [
    lambda **kw: rgym.RenderdEnv(**kw),
    lambda **kw: rgym.RenderdVectorEnv(2, **kw),
], ids=["env", "vector-env"])
def test_a_bool_max_depth_is_refused_naming_it(no_leaks, make, flag):
    with pytest.raises(TypeError, match=r"^max_depth must be a positive finite number of metres, not a bool"):
        make(depth=True, max_depth=flag, executable=MISSING, width=64, height=64)


def test_a_bool_max_depth_leaves_a_given_vector_session_open(no_leaks):
    vs = renderd.launch_many(1, **player_kwargs())
    try:
        with pytest.raises(TypeError, match="max_depth"):
            rgym.RenderdVectorEnv(vector_session=vs, depth=True, max_depth=True)
        assert not vs.closed
        envs = rgym.RenderdVectorEnv(vector_session=vs, depth=True, max_depth=1.5)  # a number still works
        try:
            assert envs.single_observation_space["depth"].high.max() == np.float32(1.5)
        finally:
            envs.close()
    finally:
        vs.close()
