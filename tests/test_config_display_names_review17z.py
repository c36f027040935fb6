"""The configuration (file and PUT bodies) takes every X display name the platform probe, launch() and renderd doctor
take (``tcp/host:N``, ``inet6/[::1]:N``, IPv6 hosts...), with one message for the rest: one check, not two."""

from __future__ import annotations

import pytest

from renderd.config import ConfigError, loads, parse_environment, x_display_problem
from renderd.platforms import x11

ACCEPTED = ["tcp/localhost:0", "inet/127.0.0.1:3", "inet6/[::1]:4", "[::1]:0", "::1:0.1", "unix/:2.1", "host:10.0",
            ":1", "1.0", "auto", "managed"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_x_display_takes_every_form_the_probe_takes(name):
    text = f'[environments.a]\nx_display = "{name}"'
    assert loads(text, resolve=False).environments["a"].x_display == name  # (refused before: not [A-Za-z0-9_.-]*:N)
    env = parse_environment("a", {"x_display": name}, source="PUT /v1/environments/a")
    assert env.x_display == name


@pytest.mark.parametrize("name", ["tcp/localhost:0", "[::1]:0", "inet6/[::1]:4", "host:10.0", ":1"])
def test_env_display_takes_them_too(name):
    text = f'[environments.a]\nenv = {{DISPLAY = "{name}"}}'
    assert loads(text, resolve=False).environments["a"].env == {"DISPLAY": name}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("tcp/:0", "protocol 'tcp' needs a host"),
        ("ftp/host:0", "'ftp' before the '/' is not a protocol"),
        ("nowhere", "it does not end with ':NUMBER'"),
        (":0\n", "white space around it"),
    ],
)
def test_other_names_are_refused_as_doctor_refuses_them(name, why):
    with pytest.raises(ConfigError) as info:
        loads(f'[environments.a]\nx_display = "{name.encode("unicode_escape").decode()}"', path="bad.toml")
    assert info.value.key == "environments.a.x_display"
    assert why in info.value.reason and x11.DISPLAY_NAME_FORMS in info.value.reason, info.value.reason
    assert info.value.reason == x_display_problem(name)


def test_a_display_variable_needs_its_colon():
    # x_display = "0" is AI2-THOR's form of ":0"; DISPLAY=0 is no display an X client opens.
    with pytest.raises(ConfigError, match=r"DISPLAY '0' is not an X display name: it has no ':NUMBER'"):
        loads('[environments.a]\nenv = {DISPLAY = "0"}', path="bad.toml")
    with pytest.raises(ConfigError, match="'ftp' before the '/' is not a protocol"):
        loads('[environments.a]\nenv = {DISPLAY = "ftp/h:0"}', path="bad.toml")
