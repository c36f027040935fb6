"""Configuration strings the kernel could not pass to a player (over MAX_ARG_STRLEN, or an env table over
renderd's share of ARG_MAX) are refused where they are written, without quoting them, rather than failing every
start of the player with E2BIG; an unknown key of a megabyte is named cut short. The lease client's pause after a
LeaseBusyError is jittered around LEASE_BUSY_RETRY."""

import pytest

from renderd.config import MAX_ARG_STRLEN, MAX_ENV_BYTES, loads
from renderd.daemon.client import LEASE_BUSY_RETRY, busy_pause
from renderd.errors import ConfigError

HEAD = '[environments.demo]\nexecutable = "renderd-player"\n'


def _refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        loads(text, path="r.toml", resolve=False)
    return str(info.value)


def test_an_env_value_the_kernel_cannot_pass_is_refused_unquoted():
    message = _refused(HEAD + f'env = {{A = "{"v" * MAX_ARG_STRLEN}"}}\n')
    assert "environments.demo.env" in message and "E2BIG" in message and len(message) < 400


def test_an_env_entry_over_the_limit_with_its_name_is_refused_naming_it():
    name, value = "N" * 70000, "v" * 70000
    message = _refused(HEAD + f'env = {{{name} = "{value}"}}\n')
    assert "as NAME=value" in message and "E2BIG" in message and len(message) < 500


def test_an_env_table_over_renderds_share_of_arg_max_is_refused():
    count = MAX_ENV_BYTES // 100000 + 1
    table = ", ".join(f'V{i} = "{"y" * 100000}"' for i in range(count))
    message = _refused(HEAD + f"env = {{{table}}}\n")
    assert f"over the {MAX_ENV_BYTES}" in message and "ARG_MAX" in message and len(message) < 400


def test_an_argument_the_kernel_cannot_pass_is_refused_unquoted():
    message = _refused(f'[environments.demo]\nexecutable = ["renderd-player", "{"a" * MAX_ARG_STRLEN}"]\n')
    assert "environments.demo.executable" in message and "E2BIG" in message and len(message) < 400


def test_an_unknown_key_of_a_megabyte_is_named_cut_short():
    message = _refused(HEAD + f'{"k" * 1_000_000} = 1\n')
    assert "(1000000 characters)" in message and "unknown key" in message and len(message) < 1000


def test_ordinary_env_and_argv_are_taken():
    assert loads(HEAD + 'env = {PATH = "/usr/bin:/bin", OMP_NUM_THREADS = "4"}\n', resolve=False)


def test_the_busy_pause_is_jittered_around_lease_busy_retry():
    pauses = [busy_pause() for _ in range(200)]
    assert all(0.5 * LEASE_BUSY_RETRY <= p <= 1.5 * LEASE_BUSY_RETRY for p in pauses)
    assert len(set(pauses)) > 100 and min(pauses) < LEASE_BUSY_RETRY < max(pauses)
