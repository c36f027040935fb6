"""A lease request whose ``deadline`` lies absurdly far in the past (a finite number, so no 400: a clock of another
host, a bug) is refused with a message of readable size: the number of seconds it came late in short form, not
the 300 digits of its fixed-point form. Real daemon, real control socket."""

from __future__ import annotations

import os

import pytest

from renderd.daemon.client import ControlClient
from renderd.errors import LeaseError
from tests.daemon.conftest import fast_config


def test_a_deadline_far_in_the_past_is_refused_in_a_message_of_readable_size(daemon):
    d = daemon(fast_config())
    client = ControlClient(d.socket)
    with pytest.raises(LeaseError) as caught:
        client.request("POST", "/v1/environments/demo/leases",
                       {"client_pid": os.getpid(), "timeout": 1, "deadline": -1e308})
    message = str(caught.value)
    assert "after the client's deadline" in message and "1e+308 s after" in message, message
    assert len(message) < 400, message
    line = [ln for ln in d.output().splitlines() if "after the client's deadline" in ln][-1]
    assert len(line) < 400, line
