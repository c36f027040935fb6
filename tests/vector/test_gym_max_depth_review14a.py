"""``max_depth`` given something that is no number (``max_depth="5"``, a value read from a file or the command
line and never converted) is refused with a TypeError naming max_depth and the type given, before any player
starts; float() took "5" as a bound of 5.0 m. Ints and floats (numpy's too) stay accepted; the error is a
ValueError as well, which such a value raised before."""

from __future__ import annotations

import decimal
import fractions

import numpy as np
import pytest

import renderd
import renderd.gym as rgym
from tests.vector.conftest import player_kwargs

#: No such program: an env that got past its argument checks would fail to launch with a ConfigError instead.
MISSING = "/nonexistent/renderd-player-review14a"

MAKERS = [lambda **kw: rgym.RenderdEnv(**kw), lambda **kw: rgym.RenderdVectorEnv(2, **kw)]


@pytest.mark.parametrize(("value", "type_name"), [
    ("5", "str"), ("far", "str"), (b"5", "bytes"), ([5.0], "list"), (None, "NoneType"),
    (np.array(5.0), "numpy.ndarray"), (5 + 0j, "complex"),
], ids=["str-number", "str-word", "bytes", "list", "None", "0-d-array", "complex"])
@pytest.mark.parametrize("make", MAKERS, ids=["env", "vector-env"])
def test_a_max_depth_that_is_no_number_is_a_type_error_naming_it_and_the_type(no_leaks, make, value, type_name):
    with pytest.raises(TypeError) as info:
        make(depth=True, max_depth=value, executable=MISSING, width=64, height=64)
    message = str(info.value)
    assert message.startswith(f"max_depth must be a positive finite number of metres, got {value!r}: ")
    assert f"a {type_name}, not a real number" in message
    assert isinstance(info.value, ValueError)  # (what it raised before: an `except ValueError` still catches it)


@pytest.mark.parametrize("value", [5, 5.0, np.float32(2.5), np.int64(3), fractions.Fraction(1, 2),
                                   decimal.Decimal("2.5")],
                         ids=["int", "float", "numpy-float32", "numpy-int64", "Fraction", "Decimal"])
def test_a_number_max_depth_is_still_accepted(no_leaks, value):
    env = rgym.RenderdEnv(depth=True, max_depth=value, executable=MISSING, width=64, height=64)
    try:
        assert env.observation_space["depth"].high.max() == np.float32(float(value))
    finally:
        env.close()


def test_a_max_depth_too_large_for_a_float_is_refused_naming_it(no_leaks):
    # (float(10**400) raised OverflowError, uncaught: not a message naming max_depth.)
    with pytest.raises(ValueError, match=r"^max_depth must be a positive finite number of metres, got 1000"):
        rgym.RenderdEnv(depth=True, max_depth=10**400, executable=MISSING, width=64, height=64)


def test_a_string_max_depth_leaves_a_given_vector_session_open(no_leaks):
    vs = renderd.launch_many(1, **player_kwargs())
    try:
        with pytest.raises(TypeError, match=r"max_depth .* got '5': a str"):
            rgym.RenderdVectorEnv(vector_session=vs, depth=True, max_depth="5")
        assert not vs.closed
    finally:
        vs.close()
