"""The control API's answer to a lease request for an environment of instances = 0 (docs/api.md)."""

from __future__ import annotations

import os
import time

import pytest

from renderd.errors import LeaseBusyError, LeaseError
from tests.daemon.conftest import fast_config


def test_a_lease_request_for_an_environment_of_0_instances_is_answered_503_at_once(daemon):
    # It was answered 503 too, but only once its whole timeout had passed.
    d = daemon(fast_config(instances=0))
    started = time.monotonic()
    with pytest.raises(LeaseError) as caught:
        d.client.request("POST", "/v1/environments/demo/leases", {"client_pid": os.getpid(), "timeout": 5})
    assert time.monotonic() - started < 2.0
    assert caught.value.status == 503 and not isinstance(caught.value, LeaseBusyError)
    assert "wants 0 instances" in str(caught.value) and "PUT" in str(caught.value), str(caught.value)
