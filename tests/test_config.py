"""The configuration: one definition per key feeding the parser, validation, overrides and the docs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from renderd import config as cfg
from renderd.config import ConfigError, load, loads, parse_environment, validate_command

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def test_defaults_match_the_design():
    c = loads("[environments.demo]\n", path="t.toml")
    env = c.environments["demo"]
    assert os.path.isabs(env.executable) and os.path.basename(env.executable) == "renderd-player"
    assert (env.width, env.height, env.quality, env.platform, env.x_display) == (300, 300, "Ultra", "auto", "auto")
    assert (env.gpus, env.transport, env.instances, env.restart, env.env) == ([], "fifo", 1, "on-failure", {})
    assert (env.start_timeout, env.step_timeout) == (300.0, 100.0)
    assert c.daemon.http == ""
    assert c.daemon.socket == cfg.default_socket_path()
    assert c.daemon.runtime_dir == cfg.default_runtime_dir()


def test_default_paths_by_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert cfg.default_socket_path() == "/run/renderd/renderd.sock"
    assert cfg.default_runtime_dir() == "/run/renderd"
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    assert cfg.default_socket_path() == "/run/user/1234/renderd/renderd.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert cfg.default_runtime_dir() == "/tmp/renderd-1234"


def test_the_design_example_loads(tmp_path):
    text = DOCS.read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    c = loads(example, path="design.toml")
    assert c.daemon.http == "127.0.0.1:8200"
    assert c.environments["demo"].restart == "on-failure"


@pytest.mark.parametrize(
    "text, key, why",
    [
        ("[environments.demo]\nwidth = 0", "environments.demo.width", "must be an integer 1..4096, got 0"),
        ("[environments.demo]\nheight = -3", "environments.demo.height", "must be an integer 1..4096, got -3"),
        ("[environments.demo]\nheight = 4097", "environments.demo.height", "must be an integer 1..4096, got 4097"),
        ("[environments.demo]\nwidth = 300.5", "environments.demo.width", "expected an integer, got number"),
        ('[environments.demo]\nwidth = "300"', "environments.demo.width", "got string"),
        ("[environments.demo]\ninstances = -1", "environments.demo.instances", "0 or more"),
        ("[environments.demo]\ninstances = true", "environments.demo.instances", "got boolean"),
        ('[environments.demo]\nplatform = "Windows"', "environments.demo.platform", "not one of"),
        ('[environments.demo]\nrestart = "sometimes"', "environments.demo.restart", "not one of"),
        ('[environments.demo]\ntransport = "tcp"', "environments.demo.transport", "not one of"),
        ('[environments.demo]\nquality = "Best"', "environments.demo.quality", "not one of"),
        ('[environments.demo]\nx_display = "nowhere"', "environments.demo.x_display", "not auto, managed"),
        ("[environments.demo]\ngpus = [0, 0]", "environments.demo.gpus", "twice"),
        ("[environments.demo]\ngpus = [-1]", "environments.demo.gpus", "0 or more"),
        ("[environments.demo]\nstart_timeout = 0", "environments.demo.start_timeout", "greater than 0"),
        ("[environments.demo]\nstep_timeout = nan", "environments.demo.step_timeout", "nan"),
        ("[environments.demo]\nenv = {A = 1}", "environments.demo.env", "table of string to string"),
        ('[environments.demo]\nexecutable = "no-such-player-anywhere"', "environments.demo.executable",
         "not found"),
        ("[environments.demo]\nexecutable = []", "environments.demo.executable", "empty"),
        ("[environments.demo]\nwidht = 3", "environments.demo.widht", "unknown key"),
        ('[environments.demo]\ntransport = "http"', "environments.demo.transport", "[daemon] http"),
        ('[environments."a b"]', "environments.a b", "environment name"),
        ('[daemon]\nhttp = "localhost:8200"', "daemon.http", "not an IP address"),
        ('[daemon]\nhttp = "127.0.0.1:99999"', "daemon.http", "port"),
        ('[daemon]\nhttp = "127.0.0.1"', "daemon.http", "HOST:PORT"),
        ('[daemon]\nhttp = "127.0.0.1:\u0663\u0663"', "daemon.http", "port"),  # Arabic-Indic digits
        ('[daemon]\nhttp = "[127.0.0.1]:8200"', "daemon.http", "brackets are for an IPv6 address"),
        ('[daemon]\nhttp = "::1:8200"', "daemon.http", "goes in brackets, as [::1]:8200"),
        ('[daemon]\nhttp = "[::1]:008200"', "daemon.http", "port"),
        ('[daemon]\nsocket = "relative.sock"', "daemon.socket", "absolute"),
        ('[daemon]\nsocket = "/run/x/"', "daemon.socket", "names a directory; give the socket's own path"),
        (f'[daemon]\nsocket = "/{"x" * 120}"', "daemon.socket", "at most 107"),
        ("[daemon]\nbackoff_initial = 5.0\nbackoff_max = 1.0", "daemon.backoff_max", "less than"),
        ("[daemon]\nmax_boot_failures = 0", "daemon.max_boot_failures", "greater than 0"),
        ("[daemon]\napi_threads = 1000000000", "daemon.api_threads", "at most 1024"),
        ('[environments.demo]\nenv = {A = "x\\u0000y"}', "environments.demo.env", "NUL byte"),
        ('[environments.demo]\nexecutable = ["renderd-player", "--x\\u0000"]', "environments.demo.executable",
         "NUL byte"),
        ('[environments."demo\\n"]', "environments.demo\n", "environment name"),
        ('[environments.demo]\nx_display = ":0\\n"', "environments.demo.x_display", "not auto, managed"),
        ('[environments.demo]\nenv = {DISPLAY = "garbage"}', "environments.demo.env", "not an X display name"),
        ('[environments.demo]\nenv = {DISPLAY = ":1\\n"}', "environments.demo.env", "not an X display name"),
        ('[environments.demo]\nx_display = ":2"\nenv = {DISPLAY = ":1"}', "environments.demo.env",
         "conflicts with x_display ':2'"),
        ('[environments.demo]\nx_display = "managed"\nenv = {DISPLAY = ":1"}', "environments.demo.env",
         "conflicts with x_display 'managed'"),
        ('[daemon]\nsocket_group = "wheel\\n"', "daemon.socket_group", "not a group name"),
        ("[daemon]\nnope = 1", "daemon.nope", "unknown key"),
        ("[deamon]\n", "deamon", "unknown table"),
        ("environments = 3", "environments", "expected a table"),
    ],
)
def test_bad_values_name_the_file_key_and_why(text, key, why):
    with pytest.raises(ConfigError) as info:
        loads(text, path="bad.toml")
    err = info.value
    assert err.path == "bad.toml" and err.key == key, str(err)
    assert why in err.reason
    assert str(err).startswith(f"bad.toml: {key}: ")


def test_a_display_in_env_that_names_a_display():
    # env.DISPLAY names the player's display as x_display does (with x_display auto); empty is allowed.
    text = '[environments.a]\nenv = {DISPLAY = "%s"}\nx_display = "%s"'
    assert loads(text % (":1", "auto"), resolve=False).environments["a"].env == {"DISPLAY": ":1"}
    assert loads(text % ("host:1.0", "auto"), resolve=False).environments["a"].env == {"DISPLAY": "host:1.0"}
    assert loads(text % ("", ":2"), resolve=False).environments["a"].x_display == ":2"


def test_not_toml_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        loads("[daemon\n", path="x.toml")
    with pytest.raises(ConfigError, match="cannot read the file") as info:
        load(tmp_path / "missing.toml")
    assert info.value.path == str(tmp_path / "missing.toml")


RENDERD = [sys.executable, "-c", "from renderd.cli import main; main()"]


def test_only_regular_files_are_read(tmp_path):
    # A FIFO without a writer (it would block forever) and an endless device (it would eat memory) are
    # refused without reading, by a real `renderd validate` with a deadline.
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    for path, kind in ((str(fifo), "a FIFO"), ("/dev/zero", "a device")):
        out = subprocess.run([*RENDERD, "validate", path], capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and f"{path}: not a regular file ({kind})" in out.stderr, out
    with pytest.raises(ConfigError, match="not a regular file"):
        load(tmp_path)


def test_config_files_have_a_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(cfg, "MAX_CONFIG_BYTES", 1024)
    path = tmp_path / "c.toml"
    text = "[environments.demo]\r\ninstances = 2\r\n"
    path.write_bytes((text + "#" * (1024 - len(text) - 1) + "\n").encode())
    assert load(path, resolve=False).environments["demo"].instances == 2  # CRLF line ends read as in text mode
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(ConfigError, match="larger than") as info:
        load(path)
    assert info.value.path == str(path)


def test_executables_resolve_to_absolute_paths(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "player"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tool.parent))
    c = loads('[environments.a]\nexecutable = "player"\n[environments.b]\nexecutable = ["player", "-x"]')
    assert c.environments["a"].executable == str(tool)
    assert c.environments["b"].executable == [str(tool), "-x"] and c.environments["b"].argv == [str(tool), "-x"]
    monkeypatch.chdir(tmp_path)
    assert loads('[environments.a]\nexecutable = "bin/player"').environments["a"].executable == str(tool)
    # Loading without resolving touches nothing on disk (how docs and tests can inspect a file).
    assert loads('[environments.a]\nexecutable = "absent"', resolve=False).environments["a"].executable == "absent"


def test_constructing_has_no_side_effects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg.DaemonConfig(socket=str(tmp_path / "s" / "x.sock"), runtime_dir=str(tmp_path / "r"))
    cfg.EnvironmentConfig(name="x")
    cfg.default_config()
    assert list(tmp_path.iterdir()) == []


def test_put_bodies_use_the_same_definitions():
    env = parse_environment("web", {"width": 64, "height": 48, "instances": 2}, source="PUT /v1/environments/web")
    assert (env.name, env.width, env.instances) == ("web", 64, 2)
    with pytest.raises(ConfigError, match=r"^PUT /v1/environments/web: environments\.web\.width: "):
        parse_environment("web", {"width": 64.0}, source="PUT /v1/environments/web")


def test_http_addresses():
    assert cfg.parse_http_address("127.0.0.1:8200") == ("127.0.0.1", 8200)
    assert cfg.parse_http_address("[::1]:0") == ("::1", 0)
    assert cfg.parse_http_address("0.0.0.0:65535") == ("0.0.0.0", 65535)


def test_overrides_are_checked_like_the_file():
    c = loads("")
    assert c.with_daemon(socket="/tmp/x.sock", http=None).daemon.socket == "/tmp/x.sock"
    with pytest.raises(ConfigError, match="command line: daemon.http: "):
        c.with_daemon(http="nowhere")


@pytest.mark.parametrize(
    "body, key",
    [
        ({"env": {"FOO": "\ud800"}}, "environments.web.env"),
        ({"env": {"\udfff": "x"}}, "environments.web.env"),
        ({"executable": ["renderd-player", "--log-level=\ud800"]}, "environments.web.executable"),
        ({"executable": "\ud800player"}, "environments.web.executable"),
    ],
)
def test_strings_the_os_cannot_take_are_refused(body, key):
    # JSON carries a lone surrogate; accepted, it would make Popen raise UnicodeEncodeError in the daemon.
    with pytest.raises(ConfigError, match="surrogate") as info:
        parse_environment("web", body, source="PUT /v1/environments/web")
    assert info.value.key == key and "\ud800" not in str(info.value)
    with pytest.raises(ConfigError, match="surrogate"):
        cfg.Config().with_daemon(log_dir="/tmp/\ud800")
    # Bytes that are not UTF-8 arrive as surrogateescape characters, which os.fsencode takes back: kept.
    assert parse_environment("web", {"env": {"FOO": "\udc80"}}).env == {"FOO": "\udc80"}


def test_the_cross_checks_run_after_the_overrides():
    # `renderd start -c FILE --http ADDR` (and its SIGHUP reload): the file's transport = "http" environment
    # relies on the override.
    text = '[environments.h]\ntransport = "http"\n'
    with pytest.raises(ConfigError, match="HTTP listener"):
        loads(text, path="f.toml", resolve=False)
    c = loads(text, path="f.toml", resolve=False, check_cross=False).with_daemon(http="127.0.0.1:0")
    assert c.daemon.http == "127.0.0.1:0" and c.environments["h"].transport == "http"
    with pytest.raises(ConfigError, match=r"^f\.toml: environments\.h\.transport: .*HTTP listener"):
        loads(text, path="f.toml", resolve=False, check_cross=False).with_daemon(http=None)
    with pytest.raises(ConfigError, match=r"^command line: environments\.h\.transport: "):
        loads('[daemon]\nhttp = "127.0.0.1:0"\n' + text, resolve=False, check_cross=False).with_daemon(http="")


def test_what_needs_new_players():
    a = parse_environment("e", {})
    assert not parse_environment("e", {"instances": 5, "step_timeout": 1.0}).replaces_players(a)
    assert parse_environment("e", {"width": 10}).replaces_players(a)
    assert parse_environment("e", {"env": {"A": "b"}}).replaces_players(a)


def test_platform_names_match_the_platform_registry():
    from renderd.platforms import PLATFORM_NAMES

    assert tuple(cfg.PLATFORMS) == tuple(PLATFORM_NAMES)


def test_quality_names_match_the_player_command_line():
    from renderd.process import QUALITY_SETTINGS

    assert set(cfg.QUALITIES) <= set(QUALITY_SETTINGS)


def test_validate_command(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text("[environments.demo]\ninstances = 2\n")
    result = CliRunner().invoke(validate_command, [str(good)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "demo: 2 x" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[environments.demo]\nrestart = 1\n")
    result = CliRunner().invoke(validate_command, [str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:2: environments.demo.restart: expected a string, got integer 1" in result.output


def test_a_config_path_that_is_a_directory_is_a_bad_config_not_a_usage_error(tmp_path):
    # Exit 1 naming the file, as for any configuration that does not load (click's own check said 2).
    from renderd.daemon.commands import start

    result = CliRunner().invoke(validate_command, [str(tmp_path)])
    assert result.exit_code == 1 and f"{tmp_path}: not a regular file (a directory)" in result.output
    result = CliRunner().invoke(start, ["-c", str(tmp_path), "--socket", str(tmp_path / "s.sock"),
                                        "--runtime-dir", str(tmp_path / "rt")])
    assert result.exit_code == 1 and f"{tmp_path}: not a regular file (a directory)" in result.output
    result = CliRunner().invoke(validate_command, [""])
    assert result.exit_code == 2 and "an empty path" in result.output


def test_docs_key_tables_are_generated_from_the_definitions():
    text = DOCS.read_text()
    assert cfg.update_document(text) == text, "run: python -m renderd.config --write docs/configuration.md"
    for cls in (cfg.DaemonConfig, cfg.EnvironmentConfig):
        for f in cfg.settings(cls):
            assert f"| `{f.name}` |" in text


def test_markdown_entry_point(capsys):
    assert cfg.main(["--markdown"]) == 0
    assert "### `[environments.NAME]`" in capsys.readouterr().out
    assert cfg.main(["--bogus"]) == 2
    assert sys.modules["renderd.config"] is cfg


def test_status_refuses_an_empty_socket_as_start_does(tmp_path):
    # `renderd status --socket "$RENDERD_SOCKET"` with the variable unset: an empty path is a usage error
    # naming the option, as for `renderd start`, not "talking to the renderd daemon at : Invalid argument".
    from renderd.daemon.commands import status

    result = CliRunner().invoke(status, ["--socket", ""])
    assert result.exit_code == 2, result.output
    assert "--socket" in result.output and "empty path" in result.output, result.output


def test_unit_device_allow_names_device_classes_or_nodes_only():
    # systemd grants DeviceAllow= only for a device class (char-drm) or a device node: a directory such as
    # /dev/dri is skipped with "/dev/dri is not a device." (or "Couldn't stat device" where it is absent).
    unit = Path(__file__).resolve().parent.parent / "systemd" / "renderd.service"
    directories = {"/dev/dri", "/dev/nvidia-caps", "/dev/input", "/dev/snd"}  # directories on machines that have them
    for line in unit.read_text().splitlines():
        if not line.startswith("DeviceAllow="):
            continue
        target = line.partition("=")[2].split()[0]
        if target.startswith(("char-", "block-")):
            continue
        assert target.startswith("/dev/") and target.rstrip("/") not in directories, line
        assert not os.path.isdir(target), line


@pytest.mark.parametrize("name", ["0", "1.0", "10.2"])
def test_a_display_number_without_a_colon_is_an_x_display_as_ai2thor_takes_it(name):
    assert loads(f'[environments.a]\nx_display = "{name}"', resolve=False).environments["a"].x_display == name


@pytest.mark.parametrize("name", ["1.", ".1", "1.0.0", "1:", "-1"])
def test_other_bare_x_displays_are_refused(name):
    with pytest.raises(ConfigError, match="not auto, managed"):
        loads(f'[environments.a]\nx_display = "{name}"', resolve=False)


def test_a_file_saved_with_a_utf8_byte_order_mark_is_read(tmp_path):
    # As some Windows editors save UTF-8: the mark is not TOML ("Invalid statement at line 1, column 1").
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf[environments.demo]\r\ninstances = 2\r\n")
    assert load(path, resolve=False).environments["demo"].instances == 2
    out = subprocess.run([*RENDERD, "validate", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
