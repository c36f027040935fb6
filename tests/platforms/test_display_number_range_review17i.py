"""A display reached over TCP listens on port 6000 + its number: a number beyond 59535 names no port, and X clients
(libxcb keeps the port in 16 bits) and the probe would reach port 6000 + N - 65536, another display's
(``localhost:65536`` is display 0's port). Such a name is refused, saying why; a local display's number is not
bounded so (its socket is /tmp/.X11-unix/XN)."""

from __future__ import annotations

import pytest

from renderd.config import x_display_problem
from renderd.platforms import x11


@pytest.mark.parametrize("name", ["localhost:65536", "tcp/[::1]:70000", "inet/127.0.0.1:59536.0", "::1:99999999999"])
def test_a_tcp_display_number_beyond_the_port_range_is_refused(name):
    assert x11.parse_display_name(name) is None
    why = x11.display_name_error(name)
    assert why is not None and "59535" in why and "6000" in why, why
    problem = x_display_problem(name)
    assert problem is not None and "59535" in problem, problem


@pytest.mark.parametrize("name", ["localhost:59535", "tcp/host:0", ":70000", "unix:70000.1", "unix/:65536"])
def test_names_within_range_or_local_are_taken(name):
    assert x11.parse_display_name(name) is not None, x11.display_name_error(name)
