"""Tokens and secret-looking environment values (names with TOKEN, SECRET, PASSWORD, KEY) are never
logged, by the daemon or by the players, at debug level; HTTP player tokens, lease ids and the daemon's
own environment never appear in ``renderd status`` or an API answer."""

from __future__ import annotations

import glob
import logging
import os
import sys

import psutil
from click.testing import CliRunner

import renderd
from renderd.config import REDACTED, parse_environment, redact_argv, redact_env, validate_command
from renderd.daemon.client import connect

from .conftest import CONFIG_ENV_SECRETS, DAEMON_ENV_SECRETS, SECRETS, api_outputs


def http_tokens(d) -> dict[str, str]:
    """The tokens the daemon gave its HTTP players (read from the players' environments)."""
    tokens = {}
    for env in d.client.environments():
        for p in env["players"]:
            value = psutil.Process(p["pid"]).environ().get("AI2THOR_CLIENT_TOKEN")
            if value:
                tokens[f"{env['name']}[{p['index']}] AI2THOR_CLIENT_TOKEN"] = value
    assert tokens, "the HTTP player has no token"
    return tokens


def logs(d) -> dict[str, str]:
    texts = {"daemon log (debug)": d.output()}
    for path in glob.glob(os.path.join(d.runtime_dir, "logs", "*")):
        with open(path, errors="replace") as f:
            texts[path] = f.read()
    assert len(texts) >= 3, texts.keys()  # the daemon's and both players'
    return texts


def leaks(texts: dict[str, str], values: dict[str, str]) -> list[str]:
    return [f"{name} appears in {where}" for where, text in texts.items() for name, value in values.items()
            if value in text]


def test_players_did_get_their_secrets(secure_daemon) -> None:
    """The precondition of the other tests: the secrets are really in play."""
    (demo,) = secure_daemon.players("demo")
    env = psutil.Process(demo["pid"]).environ()
    for name, value in SECRETS.items():
        assert env.get(name) == value, name


def test_secrets_and_tokens_never_logged(secure_daemon) -> None:
    d = secure_daemon
    answer = d.client.lease("demo", timeout=10)  # granting and ending a lease must not log its id
    d.client.release(answer["lease"])
    for name in ("demo", "web"):
        with connect(name, socket=d.socket, timeout=10) as session:
            session.step("MoveAhead")
    values = {**SECRETS, **http_tokens(d), "lease id": answer["lease"]}
    assert "lease of demo" in d.output()
    assert not leaks(logs(d), values)
    assert "DEBUG " in d.output()  # debug logging was really on


def test_tokens_lease_ids_and_daemon_env_never_in_status_or_api(secure_daemon) -> None:
    d = secure_daemon
    answer = d.client.lease("demo", timeout=10)
    try:
        values = {**DAEMON_ENV_SECRETS, **http_tokens(d), "lease id": answer["lease"]}
        assert not leaks(api_outputs(d), values)
    finally:
        d.client.release(answer["lease"])


def test_launch_never_logs_secrets(tmp_path, caplog, nothing_left) -> None:
    caplog.set_level(logging.DEBUG, logger="renderd")
    log_path = tmp_path / "player.log"
    with renderd.launch(["renderd-player", "--static-frame", "--log-level", "debug"], width=32, height=24,
                        platform="headless", env=CONFIG_ENV_SECRETS, start_timeout=20,
                        log_path=log_path) as session:
        env = psutil.Process(session.pid).environ()
        assert all(env[k] == v for k, v in CONFIG_ENV_SECRETS.items())
        session.step("MoveAhead")
    texts = {"renderd log records (debug)": caplog.text, "player log (debug)": log_path.read_text()}
    assert "spawned player" in caplog.text  # the debug records were captured
    assert not leaks(texts, CONFIG_ENV_SECRETS)


def test_launch_http_never_logs_its_token(tmp_path, caplog, nothing_left) -> None:
    caplog.set_level(logging.DEBUG, logger="renderd")
    log_path = tmp_path / "player.log"
    with renderd.launch(["renderd-player", "--static-frame", "--log-level", "debug"], transport="http",
                        width=32, height=24, platform="headless", start_timeout=20, log_path=log_path) as session:
        token = psutil.Process(session.pid).environ()["AI2THOR_CLIENT_TOKEN"]
        session.step("MoveAhead")
    texts = {"renderd log records (debug)": caplog.text, "player log (debug)": log_path.read_text()}
    assert "client token set" in texts["player log (debug)"]
    assert not leaks(texts, {"AI2THOR_CLIENT_TOKEN": token})



def test_secret_looking_env_values_never_in_status_or_api(secure_daemon) -> None:
    found = leaks(api_outputs(secure_daemon), CONFIG_ENV_SECRETS)
    assert not found, found
    (demo,) = [e for e in secure_daemon.client.environments() if e["name"] == "demo"]
    assert demo["config"]["env"] == {name: REDACTED for name in CONFIG_ENV_SECRETS}  # the names stay visible


def test_redaction_rules() -> None:
    env = {"DB_PASSWORD": "p", "api_key": "k", "GITHUB_TOKEN": "t", "AWS_CREDENTIALS": "c", "HOME": "/h",
           "LANG": "C"}
    assert redact_env(env) == {"DB_PASSWORD": REDACTED, "api_key": REDACTED, "GITHUB_TOKEN": REDACTED,
                               "AWS_CREDENTIALS": REDACTED, "HOME": "/h", "LANG": "C"}
    assert redact_argv(["/bin/player-token", "--token=abc", "--password", "hunter2", "-apiKey", "k", "--width",
                        "3"]) == ["/bin/player-token", f"--token={REDACTED}", "--password", REDACTED, "-apiKey",
                                  REDACTED, "--width", "3"]
    config = parse_environment("x", {"executable": ["/bin/sh", "--secret=s3"], "env": {"MY_SECRET": "s3"}},
                               resolve=False)
    shown = config.redacted()
    assert "s3" not in str(shown) and shown["env"] == {"MY_SECRET": REDACTED}
    assert config.to_dict()["env"] == {"MY_SECRET": "s3"}  # kept for the daemon's own use


def test_validate_does_not_print_secret_options(tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[environments.demo]\nexecutable = ["{sys.executable}", "--api-token=s3cr3t"]\n'
                    'env = {SERVICE_PASSWORD = "s3cr3t"}\n')
    result = CliRunner().invoke(validate_command, [str(path)])
    assert result.exit_code == 0, result.output
    assert "s3cr3t" not in result.output and f"--api-token={REDACTED}" in result.output


def test_launch_never_logs_secret_looking_options(caplog, nothing_left) -> None:
    # A secret passed on the player's command line (better passed in env: /proc/PID/cmdline is readable by
    # every local user) is not copied into renderd's own debug log either.
    caplog.set_level(logging.DEBUG, logger="renderd")
    with renderd.launch(["renderd-player", "--static-frame", "--api-token=SEKRIT-ONE", "-password", "SEKRIT-TWO"],
                        width=32, height=24, platform="headless", start_timeout=20) as session:
        session.step("Pass")
    assert "spawned player" in caplog.text
    assert "SEKRIT-ONE" not in caplog.text and "SEKRIT-TWO" not in caplog.text
    assert f"--api-token={REDACTED}" in caplog.text
