"""Fuzzing configuration files through :func:`renderd.config.loads` / :func:`renderd.config.load` and
``renderd validate``: random text, random bytes, mutated valid files, and structurally plausible TOML
with wrong keys, types and values. The only error ever raised is :class:`ConfigError`, and it names the
file; ``renderd validate`` exits 1 with that message, never a traceback."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderd.config import (
    MAX_INSTANCES,
    MAX_SECONDS,
    ArgumentError,
    Config,
    ConfigError,
    DaemonConfig,
    EnvironmentConfig,
    check_seconds,
    load,
    loads,
    parse_environment,
    validate_command,
)
from renderd.config import settings as config_keys

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PATH = "fuzz.toml"

VALID = """\
[daemon]
socket = "/run/renderd/renderd.sock"
runtime_dir = "/run/renderd"
http = "127.0.0.1:8200"
stop_grace = 2.0

[environments.demo]
executable = "renderd-player"
width = 300
height = 300
quality = "Ultra"
platform = "auto"
x_display = "auto"
gpus = [0, 1]
transport = "fifo"
instances = 2
start_timeout = 300.0
step_timeout = 100.0
restart = "on-failure"
env = {FOO = "bar"}

[environments.web]
executable = ["renderd-player", "--static-frame"]
transport = "http"
"""

DAEMON_KEYS = [f.name for f in config_keys(DaemonConfig)]
ENV_KEYS = [f.name for f in config_keys(EnvironmentConfig)]


def load_text(text: str, *, resolve: bool = False) -> Config | None:
    """``loads``; returns the config, or None after a ConfigError naming the file (anything else fails)."""
    try:
        return loads(text, path=PATH, resolve=resolve)
    except ConfigError as exc:
        assert exc.path == PATH and str(exc).startswith(f"{PATH}: "), str(exc)
        assert exc.reason
        return None


def test_the_valid_file_loads() -> None:
    config = load_text(VALID, resolve=True)
    assert config is not None and set(config.environments) == {"demo", "web"}


# -- TOML written from plausible values -----------------------------------------------------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_table(header: str, table: dict[str, Any]) -> str:
    return f"[{header}]\n" + "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


_scalar = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=30))
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_plausible = st.one_of(
    _value, st.integers(-3, 20000), st.floats(-10, 1e5),
    st.sampled_from([
        "renderd-player", "sh", "/bin/sh", "./player", "~/player", "", "auto", "managed", ":0", ":1.0", "host:0",
        "headless", "Linux64", "CloudRendering", "http", "fifo", "Ultra", "always", "on-failure",
        "127.0.0.1:0", "[::1]:8200", "0.0.0.0:8200", "localhost:80", "/run/x.sock", "/" + "x" * 120, "relative",
        [], ["/bin/sh", "-c", "true"], [""], [0, 1], [1, 1], [-1], {"A": "b"}, {"A=B": "c"}, {"": "x"},
    ]),
)
_names = st.sampled_from(["demo", "web", "a.b-c_1", "x" * 64, "x" * 65, "-bad", "é", "a b"]) | st.text(max_size=10)


@FUZZ
@given(
    st.dictionaries(st.sampled_from(DAEMON_KEYS) | st.text(max_size=8), _plausible, max_size=5),
    st.dictionaries(_names, st.dictionaries(st.sampled_from(ENV_KEYS) | st.text(max_size=8), _plausible,
                                            max_size=6), max_size=3),
    st.dictionaries(st.text(max_size=8), _scalar, max_size=2),
    st.booleans(),
)
def test_plausible_files_raise_only_config_error(daemon, environments, top, resolve) -> None:
    parts = [toml_table("daemon", daemon)] if daemon else []
    parts += [toml_table(f"environments.{json.dumps(name)}", table) for name, table in environments.items()]
    text = "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in top.items()) + "\n".join(parts)
    config = load_text(text, resolve=resolve)
    if config is not None and resolve:
        for env in config.environments.values():
            assert os.path.isabs(env.argv[0]), env.argv


# -- random and mutated text ---------------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=400))
def test_random_text(text: str) -> None:
    load_text(text)


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.sampled_from(["delete", "insert", "replace"]),
                       st.text(min_size=1, max_size=6)), min_size=1, max_size=6),
    st.booleans(),
)
def test_mutated_valid_text(edits, resolve: bool) -> None:
    text = VALID
    for pos, op, chunk in edits:
        pos = min(pos, len(text))
        if op == "delete":
            text = text[:pos] + text[pos + len(chunk):]
        elif op == "insert":
            text = text[:pos] + chunk + text[pos:]
        else:
            text = text[:pos] + chunk + text[pos + len(chunk):]
    load_text(text, resolve=resolve)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_bytes_through_load(flips) -> None:
    """Files, not strings: invalid UTF-8 and NUL bytes included."""
    data = bytearray(VALID.encode())
    for pos, value in flips:
        data[pos] = value
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "renderd.toml"
        path.write_bytes(bytes(data))
        try:
            load(path, resolve=False)
        except ConfigError as exc:
            assert exc.path == str(path), str(exc)


@FUZZ
@given(st.dictionaries(st.sampled_from(["socket", "runtime_dir", "http"]),
                       st.text(max_size=40) | st.sampled_from(["/a.sock", "127.0.0.1:1", "/" + "y" * 200]),
                       max_size=3))
def test_command_line_overrides(overrides) -> None:
    config = load_text(VALID)
    assert config is not None
    try:
        config.with_daemon(**overrides)
    except ConfigError as exc:
        assert exc.path == "command line" and exc.key, str(exc)  # the override's key, or what it breaks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300) | st.sampled_from([VALID.encode()[:n] for n in (1, 40, 200, 400)]))
def test_validate_command_never_shows_a_traceback(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "renderd.toml"
        path.write_bytes(data)
        result = CliRunner().invoke(validate_command, [str(path)])
    assert result.exit_code in (0, 1), (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert result.output.startswith("Error: ") and str(path) in result.output, result.output


# -- named limits: every number of seconds, and instances ------------------------------------------------
@pytest.mark.parametrize("text", [
    "[environments.demo]\nstart_timeout = inf", "[environments.demo]\nstep_timeout = inf",
    "[environments.demo]\nstart_timeout = 1e308", "[environments.demo]\nstep_timeout = -inf",
    "[daemon]\nstop_grace = inf", "[daemon]\nlease_timeout = inf", "[daemon]\nbackoff_max = inf",
    "[daemon]\nbackoff_initial = 1e9", "[daemon]\nlease_timeout = 604801",
])
def test_non_finite_or_absurd_seconds_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="finite|at most") as info:
        loads(text, resolve=False)
    assert info.value.key is not None and info.value.key.split(".")[-1] in text


def test_the_limit_itself_is_accepted() -> None:
    config = loads(f"[daemon]\nstop_grace = {MAX_SECONDS}\nlease_timeout = 0\n"
                   f"[environments.demo]\nstart_timeout = {MAX_SECONDS}\nstep_timeout = {int(MAX_SECONDS)}",
                   resolve=False)
    assert config.environments["demo"].start_timeout == MAX_SECONDS == config.daemon.stop_grace


def test_a_huge_integer_in_a_request_body_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="environments.x.start_timeout: must be a finite"):
        parse_environment("x", json.loads('{"start_timeout": 1' + "0" * 400 + "}"), resolve=False)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 0, -1, MAX_SECONDS * 2, "10", True])
def test_check_seconds_for_python_arguments(value: Any) -> None:
    with pytest.raises(ArgumentError, match="^step_timeout: ") as info:
        check_seconds(value, "step_timeout")
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)
    assert info.value.key == "step_timeout"


def test_instances_have_an_upper_limit() -> None:
    with pytest.raises(ConfigError, match="environments.demo.instances: must be at most 1024"):
        loads("[environments.demo]\ninstances = 1000000000", resolve=False)
    with pytest.raises(ConfigError, match="environments.demo.instances"):
        loads(f"[environments.demo]\ninstances = {MAX_INSTANCES + 1}", resolve=False)
    assert loads(f"[environments.demo]\ninstances = {MAX_INSTANCES}", resolve=False).environments[
        "demo"].instances == MAX_INSTANCES
