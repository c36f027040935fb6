"""Contract checks: the public contract of the design (Python names, command line, configuration, control API,
the player's environment) called exactly as it is written there, against real processes (the reference player,
a real ``renderd start``)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import psutil
import pytest

import renderd
from tests.helpers.leaks import wait_for

RENDERD = [sys.executable, "-c", "from renderd.cli import main; main()"]
PLAYER = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or shutil.which("renderd-player")
DEADLINE = 30.0


# -- helpers ---------------------------------------------------------------------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket, as any outside client (curl --unix-socket) makes one."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=DEADLINE)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(DEADLINE)
        self.sock.connect(self._path)


def _call(sock: str, method: str, path: str, body: object = None) -> tuple[int, dict, bytes]:
    conn = _UnixHTTPConnection(sock)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _json(sock: str, method: str, path: str, body: object = None) -> tuple[int, object]:
    status, _headers, raw = _call(sock, method, path, body)
    return status, json.loads(raw)


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    child = dict(os.environ)
    child.update(env or {})
    return subprocess.run([*RENDERD, *args], capture_output=True, text=True, env=child, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environ(pid: int) -> dict[str, str]:
    return psutil.Process(pid).environ()


def _cmdline(pid: int) -> list[str]:
    return psutil.Process(pid).cmdline()


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- one daemon, as the design starts it -----------------------------------------------------------------------


class _Daemon:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.socket = str(base / "renderd.sock")
        self.runtime_dir = str(base / "run")
        self.config = base / "renderd.toml"
        # The design's keys, as written there (a static-frame player for speed; two environments).
        self.config.write_text(textwrap.dedent(f"""
            [daemon]
            socket = "{base / 'ignored.sock'}"
            runtime_dir = "{base / 'ignored-run'}"

            [environments.demo]
            executable = ["{PLAYER}", "--static-frame"]
            width = 64
            height = 48
            quality = "Ultra"
            platform = "auto"
            x_display = "auto"
            gpus = []
            transport = "fifo"
            instances = 2
            start_timeout = 60.0
            step_timeout = 60.0
            restart = "on-failure"
            env = {{}}
        """))
        self.http = f"127.0.0.1:{_free_port()}"
        self.log = open(base / "daemon.log", "wb")
        env = dict(os.environ)
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "RENDERD_SOCKET"):
            env.pop(name, None)
        # renderd start [-c CONFIG] [--socket PATH] [--runtime-dir DIR] [--http HOST:PORT] [--log-level LEVEL]
        self.proc = subprocess.Popen(
            [*RENDERD, "start", "-c", str(self.config), "--socket", self.socket, "--runtime-dir", self.runtime_dir,
             "--http", self.http, "--log-level", "info"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def output(self) -> str:
        return (self.base / "daemon.log").read_text(errors="replace")

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, self.output()
            try:
                status, body = _json(self.socket, "GET", "/v1/health")
            except OSError:
                return False
            return status == 200 and body["status"] == "ready" and body["environments"]["demo"]["ready"] == 2

        wait_for(ready, DEADLINE, "the daemon to be ready")

    def stop(self) -> None:
        kids = []
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for kid in kids:
            try:
                kid.kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = _Daemon(tmp_path_factory.mktemp("contract"))
    try:
        d.wait_ready()
        yield d
    finally:
        d.stop()
    assert not os.path.exists(d.socket), "the daemon left its socket behind"
    shutil.rmtree(d.base, ignore_errors=True)


# -- Python: renderd.launch, Session, Event --------------------------------------------------------------------


def test_launch_with_every_keyword_of_the_design(tmp_path):
    with renderd.launch("renderd-player", width=64, height=48, platform="auto", x_display=None, transport="fifo",
                        args=(), env=None, start_timeout=60.0, step_timeout=60.0, log_path=None) as env:
        assert isinstance(env, renderd.Session)
        argv = _cmdline(env.pid)
        assert _after(argv, "-screen-fullscreen") == "0"
        assert _after(argv, "-screen-width") == "64" and _after(argv, "-screen-height") == "48"
        assert "-screen-quality" in argv
        assert os.path.isabs(_after(argv, "-logFile"))
        environ = _environ(env.pid)
        assert environ["AI2THOR_SERVER_TYPE"] == "FIFO"
        assert environ["AI2THOR_FIFO_SERVER_PIPE_PATH"].endswith("server.pipe")
        assert environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"].endswith("client.pipe")
        assert environ["AI2THOR_SERVER_SIDE_SCREENSHOT"] in ("True", "False")
        first = env.last_event
        assert isinstance(first, renderd.Event) and first.sequence_id == 0

        e1 = env.step("MoveAhead")
        e2 = env.step(action="RotateLeft", degrees=30)
        e3 = env.step({"action": "RotateRight", "degrees": 30})
        assert [e.metadata["lastAction"] for e in (e1, e2, e3)] == ["MoveAhead", "RotateLeft", "RotateRight"]
        assert [e.sequence_id for e in (e1, e2, e3)] == [1, 2, 3]
        assert env.last_event is e3
        for e in (e1, e2, e3):
            assert isinstance(e.metadata, dict)
            assert bool(e) is True and e.metadata["lastActionSuccess"] is True
            assert e.frame.shape == (48, 64, 3) and e.frame.dtype == np.uint8
            assert (e.screen_width, e.screen_height) == (64, 48)
            assert not e.frame.flags.owndata  # a view of the bytes read, not a copy
        failed = env.step("NoSuchAction")
        assert bool(failed) is False

        ev = env.reset(None, renderDepthImage=True, renderInstanceSegmentation=True, renderNormalsImage=True)
        assert isinstance(ev, renderd.Event)
        ev = env.step("Pass")
        assert ev.depth_frame.shape == (48, 64) and ev.depth_frame.dtype == np.float32
        assert ev.instance_segmentation_frame.shape == (48, 64, 3)
        assert ev.normals_frame.shape == (48, 64, 3)
        assert list(ev.third_party_camera_frames) == []
        ev = env.step("AddThirdPartyCamera", position={"x": 0, "y": 1.5, "z": 0},
                      rotation={"x": 30, "y": 0, "z": 0}, fieldOfView=90)
        assert ev, ev.metadata["errorMessage"]
        assert len(ev.third_party_camera_frames) == 1 and ev.third_party_camera_frames[0].shape == (48, 64, 3)
        pid = env.pid
    assert env.closed
    assert wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                    DEADLINE, "the player to be gone")


def test_launch_executable_as_a_path_an_argv_list_and_a_log_path(tmp_path):
    log = tmp_path / "player.log"
    with renderd.launch(executable=Path(PLAYER), width=32, height=32, log_path=str(log), args=("--static-frame",),
                        env={"MY_VAR": "1"}) as env:
        assert _environ(env.pid)["MY_VAR"] == "1" and "--static-frame" in _cmdline(env.pid)
        assert _after(_cmdline(env.pid), "-logFile") == str(log)
        assert env.step("MoveAhead")
    assert log.exists() and log.stat().st_size > 0  # kept after close
    with renderd.launch([PLAYER, "--static-frame"], width=32, height=32, platform="headless") as env:
        argv = _cmdline(env.pid)
        assert "--static-frame" in argv
        assert "-batchmode" in argv and "-nographics" in argv  # no rendering wanted
        assert env.step("Pass").metadata["lastAction"] == "Pass"
        env.close()
        env.close()  # idempotent


def test_launch_over_http_gives_the_player_the_wsgi_variables():
    with renderd.launch(width=32, height=32, transport="http") as env:
        environ = _environ(env.pid)
        assert environ["AI2THOR_SERVER_TYPE"] == "WSGI"
        import ipaddress

        ipaddress.ip_address(environ["AI2THOR_HOST"])  # an IP literal
        assert int(environ["AI2THOR_PORT"]) > 0
        assert environ.get("AI2THOR_CLIENT_TOKEN")
        assert env.step("MoveAhead").frame.shape == (32, 32, 3)


def test_the_errors_of_the_design_and_their_attributes(tmp_path):
    for name in ("ProtocolError", "PlayerCrashed", "PlayerTimeout", "PlatformError", "ConfigError", "LeaseError"):
        assert issubclass(getattr(renderd, name), renderd.RenderdError), name

    with pytest.raises(renderd.PlayerCrashed) as crashed:
        renderd.launch([PLAYER, "--fault-at-start", "exit"], width=32, height=32, start_timeout=60.0)
    assert crashed.value.returncode is not None and crashed.value.log_tail
    assert "exit code" in str(crashed.value) or "killed by" in str(crashed.value)

    with pytest.raises(renderd.PlayerCrashed) as killed:
        renderd.launch([PLAYER, "--fault-at-start", "segfault"], width=32, height=32, start_timeout=60.0)
    assert "SIGSEGV" in str(killed.value)

    with pytest.raises(renderd.PlayerTimeout) as timed_out:
        renderd.launch([PLAYER, "--fault-at-start", "hang"], width=32, height=32, start_timeout=0.5)
    assert timed_out.value.deadline == "start_timeout" and timed_out.value.seconds == 0.5
    assert "start_timeout" in str(timed_out.value)

    assert "0.5" in str(timed_out.value)

    with renderd.launch([PLAYER, "--static-frame"], width=32, height=32, step_timeout=0.5) as env:
        with pytest.raises(renderd.PlayerTimeout) as step_late:
            env.step("RenderdFault", fault="hang")
        assert step_late.value.deadline == "step_timeout" and "step_timeout" in str(step_late.value)
    with renderd.launch([PLAYER, "--static-frame"], width=32, height=32, step_timeout=600.0) as env:
        with pytest.raises(renderd.PlayerCrashed) as exited:  # EOF is a crash, at once, not a timeout
            env.step("RenderdFault", fault="exit", code=3)
        assert exited.value.returncode == 3 and "exit code 3" in str(exited.value)

    with pytest.raises(renderd.ProtocolError) as garbage:
        renderd.launch([PLAYER, "--fault-at-start", "garbage"], width=32, height=32, start_timeout=60.0)
    assert "offset" in str(garbage.value)

    with pytest.raises(renderd.ConfigError) as bad:
        renderd.launch(width=0)
    assert bad.value.key == "width"

    bad_file = tmp_path / "bad.toml"
    bad_file.write_text("[environments.demo]\nwidht = 3\n")
    from renderd.config import load

    with pytest.raises(renderd.ConfigError) as unknown:
        load(str(bad_file))
    assert unknown.value.path == str(bad_file) and unknown.value.key == "environments.demo.widht"
    assert "widht" in str(unknown.value) and str(bad_file) in str(unknown.value)

    with pytest.raises(renderd.PlatformError) as no_platform:
        renderd.launch(["/bin/true"], platform="Linux64", x_display=":97", start_timeout=5.0)
    assert no_platform.value.reports


# -- the configuration's keys and defaults ----------------------------------------------------------------------


def test_the_design_configuration_block_is_valid_and_its_values_are_the_defaults(tmp_path):
    from renderd.config import loads

    design = Path("/work/shared/design.md")
    text = (design.read_text() if design.exists() else "").split("```toml\n", 1)[-1].split("```", 1)[0]
    block = text or textwrap.dedent("""
        [daemon]
        socket = "/run/renderd/renderd.sock"
        runtime_dir = "/run/renderd"
        http = "127.0.0.1:8200"

        [environments.demo]
        executable = "renderd-player"
        width = 300
        height = 300
        quality = "Ultra"
        platform = "auto"
        x_display = "auto"
        gpus = []
        transport = "fifo"
        instances = 1
        start_timeout = 300.0
        step_timeout = 100.0
        restart = "on-failure"
        env = {}
    """)
    config = loads(block)
    written = loads("[environments.demo]\n").environments["demo"]
    given = config.environments["demo"]
    for key in ("width", "height", "quality", "platform", "x_display", "gpus", "transport", "instances",
                "start_timeout", "step_timeout", "restart", "env"):
        assert getattr(written, key) == getattr(given, key), key
    path = tmp_path / "design.toml"
    path.write_text(block)
    done = _cli("validate", str(path))
    assert done.returncode == 0, done.stdout + done.stderr

    for key, value in (("platform", '"CloudRendering"'), ("platform", '"Linux64"'), ("platform", '"OSXIntel64"'),
                       ("platform", '"headless"'), ("x_display", '":0.0"'), ("x_display", '"managed"'),
                       ("transport", '"http"'), ("restart", '"always"'), ("restart", '"never"'),
                       ("executable", '["renderd-player", "--static-frame"]'), ("gpus", "[0, 1]")):
        daemon = '[daemon]\nhttp = "127.0.0.1:8200"\n' if value == '"http"' else ""
        loads(f"{daemon}[environments.demo]\n{key} = {value}\n")


def test_no_config_serves_demo_on_the_reference_player_and_the_defaults_when_root():
    from renderd.config import Config, default_runtime_dir, default_socket_path

    if os.geteuid() == 0:
        assert default_socket_path() == "/run/renderd/renderd.sock"
        assert default_runtime_dir() == "/run/renderd"
    builtin = Config.default() if hasattr(Config, "default") else None
    if builtin is not None:
        (name,) = builtin.environments
        assert name == "demo"


# -- the command line -------------------------------------------------------------------------------------------


def test_renderd_validate_config(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(f'[environments.demo]\nexecutable = "{PLAYER}"\n')
    done = _cli("validate", str(good))
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[environments.demo]\nwidth = 0\n")
    done = _cli("validate", str(bad))
    assert done.returncode != 0 and "environments.demo.width" in done.stderr


def test_renderd_doctor_with_the_design_flags():
    done = _cli("doctor", "--width", "64", "--height", "48", "--platform", "headless", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    json.loads(done.stdout)
    done = _cli("doctor", "--width", "64", "--height", "48", "--platform", "Linux64", "--x-display", "managed")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr


def test_renderd_status_with_socket_and_with_the_environment_variable(daemon):
    done = _cli("status", "--socket", daemon.socket, "--json")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    done = _cli("status", "--json", env={"RENDERD_SOCKET": daemon.socket})
    assert done.returncode == 0, done.stderr
    done = _cli("status", env={"RENDERD_SOCKET": daemon.socket})
    assert done.returncode == 0 and "demo" in done.stdout, done.stderr


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error", "INFO", "WARNING"])
def test_renderd_start_log_level(level, tmp_path):
    """``--log-level LEVEL``: a level as Python's logging names it is taken too (only the parse is checked)."""
    done = _cli("start", "--log-level", level, "-c", str(tmp_path / "missing.toml"))
    assert "--log-level" not in done.stderr, done.stderr  # (the missing file is the error, not the level)


# -- Python: renderd.connect, connect_many, launch_many ---------------------------------------------------------


def test_connect_with_the_design_keywords_and_the_environment_variable(daemon, monkeypatch):
    with renderd.connect(environment="demo", socket=daemon.socket, timeout=DEADLINE) as env:
        assert isinstance(env, renderd.Session)
        assert env.step("MoveAhead").frame.shape == (48, 64, 3)
        assert env.pid > 0
    monkeypatch.setenv("RENDERD_SOCKET", daemon.socket)
    with renderd.connect("demo") as env:
        assert env.step(action="RotateLeft", degrees=30)
    with renderd.connect() as env:
        assert env.step({"action": "MoveAhead"})


def test_connect_many_and_launch_many(daemon, monkeypatch):
    monkeypatch.setenv("RENDERD_SOCKET", daemon.socket)
    with renderd.connect_many("demo", 2) as vec:
        assert isinstance(vec, renderd.VectorSession)
        assert len(vec.pids) == 2 and len(set(vec.pids)) == 2
        vec.step(["MoveAhead", {"action": "RotateLeft", "degrees": 30}])
        vec.send(["MoveAhead", "MoveAhead"])
        vec.recv()
    with renderd.launch_many(2, width=32, height=32, replace_on_crash=True) as vec:
        before = list(vec.pids)
        vec.step(["MoveAhead", "MoveAhead"])
        os.kill(before[0], signal.SIGKILL)
        out = vec.step(["MoveAhead", "MoveAhead"])
        info = out.infos if hasattr(out, "infos") else out[-1]
        assert info[0].get("error") is not None or "error" in str(info[0]), info
        assert vec.pids[1] == before[1]


# -- the control API --------------------------------------------------------------------------------------------


def test_control_api_routes(daemon):
    status, health = _json(daemon.socket, "GET", "/v1/health")
    assert status == 200 and health["status"] == "ready"
    status, envs = _json(daemon.socket, "GET", "/v1/environments")
    assert status == 200 and [e["name"] for e in envs["environments"]] == ["demo"]
    status, one = _json(daemon.socket, "GET", "/v1/environments/demo")
    assert status == 200 and one["name"] == "demo"

    status, put = _json(daemon.socket, "PUT", "/v1/environments/extra",
                        {"executable": [PLAYER, "--static-frame"], "platform": "headless", "instances": 1,
                         "width": 32, "height": 32})
    assert status == 201, put
    status, missing = _json(daemon.socket, "GET", "/v1/environments/nosuch")
    assert status == 404 and set(missing["error"]) >= {"type", "message"}
    status, bad = _json(daemon.socket, "PUT", "/v1/environments/extra2", {"width": 0})
    assert 400 <= status < 500 and bad["error"]["type"] == "ConfigError"
    conn = _UnixHTTPConnection(daemon.socket)
    try:
        conn.request("PUT", "/v1/environments/extra2", body=b"{not json",
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 400 and set(json.loads(resp.read())["error"]) == {"type", "message"}
    finally:
        conn.close()

    status, lease = _json(daemon.socket, "POST", "/v1/environments/demo/leases",
                          {"client_pid": os.getpid(), "timeout": DEADLINE})
    assert status == 201, lease
    for key in ("lease", "server_pipe", "client_pipe", "width", "height", "pid"):
        assert key in lease, key
    assert (lease["width"], lease["height"]) == (64, 48) and psutil.pid_exists(lease["pid"])
    status, released = _json(daemon.socket, "DELETE", f"/v1/leases/{lease['lease']}")
    assert status == 200 and released["released"] is True
    status, gone = _json(daemon.socket, "DELETE", f"/v1/leases/{lease['lease']}")
    assert status == 404 and gone["error"]["type"] == "LeaseError"

    status, deleted = _json(daemon.socket, "DELETE", "/v1/environments/extra")
    assert 200 <= status < 300, deleted

    status, headers, metrics = _call(daemon.socket, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b"# TYPE" in metrics


def test_a_lease_request_with_no_body_on_the_control_socket(daemon):
    """``POST /v1/environments/{name}/leases`` as written: the process asking on the control socket holds it."""
    status, lease = _json(daemon.socket, "POST", "/v1/environments/demo/leases")
    assert status == 201, lease
    status, held = _json(daemon.socket, "GET", f"/v1/leases/{lease['lease']}")
    assert status == 200 and held["client_pid"] == os.getpid() and held["ended"] is None, held
    status, lease2 = _json(daemon.socket, "POST", "/v1/environments/demo/leases", {"timeout": DEADLINE})
    assert status == 201, lease2
    status, released = _json(daemon.socket, "DELETE", f"/v1/leases/{lease2['lease']}")
    assert status == 200, released
    status, released = _json(daemon.socket, "DELETE", f"/v1/leases/{lease['lease']}")
    assert status == 200, released


def test_remote_control_over_the_http_listener_needs_the_token(daemon):
    host, port = daemon.http.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE)
    try:
        conn.request("GET", "/v1/health")
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 401 and set(body["error"]) >= {"type", "message"}
        token = (Path(daemon.runtime_dir) / "control.token").read_text().strip()
        conn.request("GET", "/v1/health", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ready"
        # The HTTP players' routes: GET /ping -> pong; POST /train with a wrong token -> 403; keep-alive HTTP/1.1.
        conn.request("GET", "/ping")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == b"pong" and resp.version == 11
        boundary = "renderdContractBoundary"
        form = (f'--{boundary}\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{{}}\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="token"\r\n\r\nwrong\r\n'
                f"--{boundary}--\r\n").encode()
        conn.request("POST", "/train", body=form,
                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 403
    finally:
        conn.close()


def test_an_http_player_is_bridged_onto_the_same_session(daemon):
    status, put = _json(daemon.socket, "PUT", "/v1/environments/web",
                        {"executable": PLAYER, "transport": "http", "width": 32, "height": 24})
    assert status == 201, put
    try:
        with renderd.connect("web", socket=daemon.socket, timeout=DEADLINE) as env:
            assert env.step("MoveAhead").frame.shape == (24, 32, 3)
    finally:
        status, _ = _json(daemon.socket, "DELETE", "/v1/environments/web")
        assert 200 <= status < 300


def test_a_vector_session_masks_a_resetting_slot(daemon):
    with renderd.connect_many(environment="demo", n=2, socket=daemon.socket) as vec:
        vec.reset_async([0])
        out = vec.step(["MoveAhead", "MoveAhead"])
        assert out.infos[1].get("resetting") in (None, False)
        if out.infos[0].get("resetting"):
            assert out.infos[0]["dropped_action"] is True


def test_renderd_start_with_no_configuration_serves_demo_and_leaves_nothing(tmp_path):
    sock, run = str(tmp_path / "r.sock"), tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env["RENDERD_SOCKET"] = sock  # (the socket of a command that talks to the daemon, without --socket)
    with open(tmp_path / "log", "wb") as log:
        proc = subprocess.Popen([*RENDERD, "start", "--runtime-dir", str(run)], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    player = None
    try:
        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "log").read_text()
            try:
                status, body = _json(sock, "GET", "/v1/health")
            except OSError:
                return False
            return status == 200 and body["status"] == "ready"

        wait_for(ready, DEADLINE, "the daemon to be ready")
        status, demo = _json(sock, "GET", "/v1/environments/demo")
        assert status == 200, demo
        done = _cli("status", env={"RENDERD_SOCKET": sock})
        assert done.returncode == 0 and "demo" in done.stdout, done.stderr
        with renderd.connect("demo", socket=sock, timeout=DEADLINE) as session:
            player = session.pid
            assert os.path.basename(_cmdline(player)[1]) == "renderd-player" or "renderd-player" in str(
                _cmdline(player))
            assert session.step("MoveAhead").frame.shape == (300, 300, 3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE) == 0
        assert not os.path.exists(sock)
        left = [p for p in run.rglob("*") if p.is_fifo() or p.is_socket()] if run.exists() else []
        assert left == []
        assert wait_for(lambda: not any(p.info["ppid"] == proc.pid for p in psutil.process_iter(["ppid"])),
                        DEADLINE, "the players to be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_lease_errors_of_connect(daemon):
    with pytest.raises(renderd.RenderdError) as unknown:  # (a 404, RenderdError as docs/api.md has it)
        renderd.connect("nosuch", socket=daemon.socket, timeout=1.0)
    assert "no environment named 'nosuch'" in str(unknown.value)
    held = [renderd.connect("demo", socket=daemon.socket, timeout=DEADLINE) for _ in range(2)]
    try:
        with pytest.raises(renderd.LeaseError):
            renderd.connect("demo", socket=daemon.socket, timeout=0.5)
    finally:
        for session in held:
            session.close()


# -- the wire, as an AI2-THOR controller speaks it to the reference player -------------------------------------


def _read_message(f) -> list[tuple[int, bytes]]:
    import struct

    fields = []
    while True:
        header = f.read(5)
        assert len(header) == 5, f"short header {header!r}"
        kind, length = struct.unpack("!BI", header)
        if kind == 255:
            assert length == 0
            return fields
        body = f.read(length)
        assert len(body) == length
        fields.append((kind, body))


@pytest.mark.parametrize("screenshot", ["True", "False"])
def test_the_player_speaks_the_fifo_framing_of_the_design(tmp_path, screenshot):
    import msgpack

    server, client = tmp_path / "server.pipe", tmp_path / "client.pipe"
    os.mkfifo(server)
    os.mkfifo(client)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(AI2THOR_SERVER_TYPE="FIFO", AI2THOR_FIFO_SERVER_PIPE_PATH=str(server),
               AI2THOR_FIFO_CLIENT_PIPE_PATH=str(client), AI2THOR_SERVER_SIDE_SCREENSHOT=screenshot)
    proc = subprocess.Popen([PLAYER, "-screen-fullscreen", "0", "-screen-quality", "7", "-screen-width", "8",
                             "-screen-height", "6", "-logFile", str(tmp_path / "log")], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fd = os.open(server, os.O_RDONLY | os.O_NONBLOCK)  # (never blocks; the player opens its end)
        wait_for(lambda: _readable(fd, proc), DEADLINE, "the first message")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as out:
            first = _read_message(out)
            assert first[0][0] == 1  # METADATA first
            meta = msgpack.unpackb(first[0][1])
            assert meta["sequenceId"] == 0 and "activeAgentId" in meta
            agent = meta["agents"][0]
            for key in ("screenWidth", "screenHeight", "lastAction", "lastActionSuccess", "errorMessage",
                        "actionReturn", "depthFormat"):
                assert key in agent, key
            kinds = [k for k, _ in first[1:]]
            assert kinds == ([4] if screenshot == "True" else []), kinds
            if screenshot == "True":
                assert len(first[1][1]) == 8 * 6 * 3
                rows = np.frombuffer(first[1][1], np.uint8).reshape(6, 8, 3)  # rows bottom-up on the wire
                assert not np.array_equal(rows, rows[::-1])
                with renderd.launch(width=8, height=6, platform="headless", args=()) as session:
                    pass  # (headless sends no image: the size is all this checks)
                assert (session.width, session.height) == (8, 6)
                with renderd.launch(width=8, height=6, env={"RENDERD_PLATFORM": "Linux64"}) as session:
                    assert session.last_event.frame.shape == (6, 8, 3)
                    np.testing.assert_array_equal(session.last_event.frame, rows[::-1])  # top row first
            with open(client, "wb") as into:
                action = json.dumps({"action": "MoveAhead", "sequenceId": 1}).encode()
                import struct

                into.write(struct.pack("!BI", 2, len(action)) + action + b"\xff\x00\x00\x00\x00")
                into.flush()
                answer = _read_message(out)
                meta = msgpack.unpackb(answer[0][1])
                assert meta["sequenceId"] == 1 and meta["agents"][0]["lastAction"] == "MoveAhead"
    finally:
        proc.terminate()
        proc.wait(DEADLINE)


def _readable(fd: int, proc: subprocess.Popen) -> bool:
    import select

    assert proc.poll() is None, "the player exited"
    return bool(select.select([fd], [], [], 0.05)[0])


def test_a_daemon_player_gets_the_design_command_line_and_environment(daemon):
    status, put = _json(daemon.socket, "PUT", "/v1/environments/gpu",
                        {"executable": [PLAYER, "--static-frame"], "platform": "CloudRendering", "gpus": [0],
                         "width": 32, "height": 24, "quality": "Ultra", "env": {"MY_VAR": "1"}})
    assert status == 201, put
    try:
        status, lease = _json(daemon.socket, "POST", "/v1/environments/gpu/leases",
                              {"client_pid": os.getpid(), "timeout": DEADLINE})
        assert status == 201, lease
        argv, environ = _cmdline(lease["pid"]), _environ(lease["pid"])
        assert _after(argv, "-screen-fullscreen") == "0" and _after(argv, "-screen-width") == "32"
        assert _after(argv, "-screen-height") == "24" and "-screen-quality" in argv and "-logFile" in argv
        assert _after(argv, "-force-device-index") == "0"
        assert environ["AI2THOR_SERVER_TYPE"] == "FIFO" and environ["MY_VAR"] == "1"
        assert environ["AI2THOR_FIFO_SERVER_PIPE_PATH"] == lease["server_pipe"]
        assert environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"] == lease["client_pipe"]
        for pipe in (lease["server_pipe"], lease["client_pipe"]):
            assert os.stat(os.path.dirname(pipe)).st_mode & 0o077 == 0  # only the service user
        status, _ = _json(daemon.socket, "DELETE", f"/v1/leases/{lease['lease']}", {"clean": False})
        assert status == 200
    finally:
        status, _ = _json(daemon.socket, "DELETE", "/v1/environments/gpu")
        assert 200 <= status < 300


def test_launch_on_a_managed_x_display():
    with renderd.launch(width=32, height=24, platform="Linux64", x_display="managed") as env:
        environ = _environ(env.pid)
        assert environ["DISPLAY"] and environ["RENDERD_PLATFORM"] == "Linux64"
        assert env.step("MoveAhead").frame.shape == (24, 32, 3)

    def no_xvfb() -> bool:
        return not [p for p in psutil.Process().children(recursive=True)
                    if p.name() == "Xvfb" and p.status() != psutil.STATUS_ZOMBIE]

    wait_for(no_xvfb, DEADLINE, "the managed Xvfb to be released at close()")
