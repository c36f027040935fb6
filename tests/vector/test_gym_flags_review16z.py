"""The envs' image flags are booleans: a string such as "false" (read from a file or a command line) is a
TypeError naming the flag, not taken as true; refused before any player is started."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

import renderd.gym as rgym
from tests.vector.conftest import player_kwargs


@pytest.mark.parametrize("flag", ["depth", "normals", "instance_segmentation", "semantic_segmentation"])
@pytest.mark.parametrize("make", [rgym.RenderdEnv, lambda **kw: rgym.RenderdVectorEnv(num_envs=2, **kw)])
def test_a_flag_that_is_not_a_bool_is_refused_naming_it(no_leaks, make, flag):
    with pytest.raises(TypeError, match=rf"^{flag} must be True or False, got 'false' \(a str\)"):
        make(**{flag: "false"}, **player_kwargs())


def test_numpy_bools_are_taken(no_leaks):
    env = rgym.RenderdEnv(depth=np.bool_(False), normals=np.bool_(False), **player_kwargs())
    env.close()
