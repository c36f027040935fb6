"""Platforms: a PlatformRequest's gpus that are not a list of distinct indices are refused, naming the value."""

from __future__ import annotations

import pytest

from renderd.errors import ConfigError
from renderd.platforms import PlatformRequest


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        # A single number was a TypeError ("'int' object is not iterable"), not a ConfigError naming gpus.
        (0, "must be a list of GPU indices such as [0, 1], got 0"),
        # A string was taken apart character by character: "got '0'" for "01", which the caller never wrote.
        ("01", "must be a list of GPU indices such as [0, 1], got '01'"),
        (b"0", "must be a list of GPU indices such as [0, 1], got b'0'"),
        # A repeated GPU was accepted here though the configuration's gpus key and doctor --gpus refuse it.
        ((0, 0), "[0, 0] lists GPU 0 twice"),
        ([1, 0, 1], "[1, 0, 1] lists GPU 1 twice"),
    ],
)
def test_gpus_that_are_not_a_list_of_distinct_indices_are_a_config_error(gpus, said):
    with pytest.raises(ConfigError) as caught:
        PlatformRequest(gpus=gpus)
    assert caught.value.key == "gpus"
    assert said in str(caught.value), str(caught.value)
    assert str(caught.value).startswith("gpus: ")


def test_none_is_no_gpus():
    # (was a TypeError: "'NoneType' object is not iterable")
    assert PlatformRequest(gpus=None).gpus == ()


def test_a_bad_entry_is_named_with_the_list_it_is_in():
    with pytest.raises(ConfigError) as caught:
        PlatformRequest(gpus=[0, "1"])
    assert "got '1' in [0, '1']" in str(caught.value)


def test_distinct_indices_of_any_sequence_are_kept_in_order():
    # guard: what was right stays right
    assert PlatformRequest(gpus=[2, 0, 1]).gpus == (2, 0, 1)
    assert PlatformRequest(gpus=range(3)).gpus == (0, 1, 2)
    assert PlatformRequest().gpus == ()
