"""RenderdEnv.reset takes a numpy integer seed, as RenderdVectorEnv.reset does (a seed drawn from a numpy
generator), and it seeds the same as the Python int. A keyword argument neither RenderdEnv nor renderd.launch
takes is a TypeError when the env is made, not at its first reset."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from renderd.gym import RenderdEnv  # noqa: E402


def test_a_numpy_integer_seed_is_the_same_seed():
    env = RenderdEnv(width=32, height=24, scene=["FloorPlan1", "FloorPlan2", "FloorPlan3"])
    try:
        env.reset(seed=np.int64(5))
        drawn = env.np_random.integers(1 << 30)
        env.reset(seed=5)
        assert env.np_random.integers(1 << 30) == drawn
    finally:
        env.close()


def test_an_unknown_keyword_argument_is_refused_when_the_env_is_made():
    with pytest.raises(TypeError, match=r"^RenderdEnv\(\) got an unexpected keyword argument 'scenes'; did you mean "
                                        r"'scene'\?"):
        RenderdEnv(scenes=["FloorPlan1"])
    with pytest.raises(TypeError, match="'widht'; did you mean 'width'"):
        gymnasium.make("renderd/Unity-v0", widht=32)
    env = RenderdEnv(width=32, height=24, platform="headless", step_timeout=30)  # launch's own arguments pass
    env.close()
