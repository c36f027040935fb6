"""A lease request for an environment the daemon does not know is a LeaseError (404): no lease can be granted there,
and `except renderd.LeaseError` around renderd.connect() catches every lease refusal. Other routes' 404s stay
RenderdError."""

from __future__ import annotations

import pytest

import renderd
from renderd.errors import LeaseError, RenderdError

from tests.daemon.conftest import fast_config


def test_connect_to_an_unknown_environment_is_a_lease_error(daemon):
    d = daemon(fast_config())
    with pytest.raises(renderd.LeaseError) as info:  # (it was a plain RenderdError)
        renderd.connect("nosuch", socket=d.socket, timeout=1)
    assert info.value.status == 404 and "no environment named 'nosuch'" in str(info.value)
    with pytest.raises(RenderdError) as info:
        d.client.request("GET", "/v1/environments/nosuch")
    assert type(info.value) is RenderdError and info.value.status == 404
    with pytest.raises(LeaseError) as info:
        d.client.request("POST", "/v1/environments/nosuch/leases", {})
    assert info.value.status == 404
