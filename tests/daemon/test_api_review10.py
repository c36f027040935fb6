"""The control API and its client on a real daemon: release bodies, lease flows."""

from __future__ import annotations

import pytest

from renderd.errors import LeaseError

from tests.daemon.conftest import fast_config


def test_a_release_body_with_an_unknown_key_is_refused_and_the_lease_kept(daemon):
    # {"clen": false} (a typo of "clean") was taken as {} and released the lease cleanly: the player went
    # back to READY for the next client although its holder asked for it to be recycled.
    d = daemon(fast_config())
    c = d.client
    answer = c.lease("demo", timeout=10)
    path = "/v1/leases/" + answer["lease"]
    with pytest.raises(LeaseError) as caught:
        c.request("DELETE", path, {"clen": False})
    assert caught.value.status == 400
    assert "unknown release request key(s): clen" in str(caught.value)
    assert "clean" in str(caught.value)
    assert c.lease_status(answer["lease"])["ended"] is None  # nothing happened to the lease
    assert c.release(answer["lease"], clean=False) == {"released": True, "recycled": True}
