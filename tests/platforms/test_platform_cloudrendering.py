"""CloudRendering against the real Vulkan loader and lavapipe, and the probe runner's crash and hang handling."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import signal
import threading
import time

import pytest

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, check, select, vulkan
from renderd.platforms.probe import run_probe

BAD_ICD = {"VK_ICD_FILENAMES": "/nonexistent.json"}


def require_vulkan() -> None:
    probe = vulkan.probe_vulkan(dict(os.environ))
    if not probe.ok or not probe.devices:
        pytest.skip(f"no Vulkan device here: {probe.error}")


def cloud(request: PlatformRequest):
    return next(r for r in check(request) if r.name == "CloudRendering")


@pytest.mark.vulkan
def test_lavapipe_is_valid():
    require_vulkan()
    report = cloud(PlatformRequest(system="Linux"))
    assert report.valid, report.reasons
    assert report.details["devices"], report.details
    assert report.details["vulkan_devices"][0]["uuid"]
    with select(PlatformRequest(platform="CloudRendering", system="Linux")) as selection:
        assert selection.env == {"RENDERD_PLATFORM": "CloudRendering"}
        assert selection.args == [] and selection.for_instance(3) == (selection.env, [])


@pytest.mark.vulkan
def test_missing_icd_is_invalid_with_the_reason():
    require_vulkan()
    report = cloud(PlatformRequest(system="Linux", env=BAD_ICD))
    assert not report.valid
    (reason,) = report.reasons
    assert "VK_ERROR_INCOMPATIBLE_DRIVER" in reason
    assert "VK_ICD_FILENAMES=/nonexistent.json" in reason and "does not exist" in reason
    assert "fix: point VK_ICD_FILENAMES at an existing ICD manifest" in reason
    with pytest.raises(PlatformError) as info:
        select(PlatformRequest(platform="CloudRendering", system="Linux", env=BAD_ICD))
    assert "VK_ICD_FILENAMES=/nonexistent.json" in str(info.value)
    assert info.value.reports[0].name == "CloudRendering"


@pytest.mark.vulkan
def test_probe_results_are_cached_per_environment():
    env = dict(os.environ, **BAD_ICD)
    first = vulkan.probe_vulkan(env)
    assert vulkan.probe_vulkan(env) is first  # (the same report object: no second probe)
    assert vulkan.probe_vulkan(dict(env, VK_ICD_FILENAMES="/other.json")) is not first


def test_not_linux():
    report = cloud(PlatformRequest(system="Darwin"))
    assert not report.valid and "Linux only" in report.reasons[0]


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "probe.py"
    path.write_text(body, encoding="utf-8")
    return str(path)


def test_probe_runner_reports_a_crash(tmp_path):
    script = _script(
        tmp_path,
        "import os, signal, sys\nsys.stderr.write('driver exploded\\n')\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    outcome = run_probe(script, [], marker="M", env=os.environ, timeout=10)
    assert outcome.answer is None and "SIGSEGV" in outcome.failure and "driver exploded" in outcome.stderr


def test_probe_runner_kills_a_hang(tmp_path):
    script = _script(tmp_path, "import time\ntime.sleep(60)\n")
    started = time.monotonic()
    outcome = run_probe(script, [], marker="M", env=os.environ, timeout=0.5)
    assert time.monotonic() - started < 5
    assert outcome.answer is None and "did not finish within 0.5 s" in outcome.failure


def test_probe_runner_finds_the_answer_among_driver_noise(tmp_path):
    script = _script(tmp_path, "print('noise from a driver')\nprint('M {\"ok\": true}')\n")
    outcome = run_probe(script, [], marker="M", env=os.environ, timeout=10)
    assert outcome.answer == {"ok": True}


@pytest.mark.vulkan
@pytest.mark.parametrize("var", ["VK_ICD_FILENAMES", "VK_DRIVER_FILES"])
def test_an_empty_icd_variable_is_named_not_a_missing_driver(var):
    # Set but empty (`VAR=`, or an unset variable in a unit file), the loader takes it as a list of no
    # drivers and hides the installed ones: unsetting it is the fix, not installing a driver.
    require_vulkan()
    env = {k: v for k, v in os.environ.items() if k not in vulkan.ICD_ENV_VARS}
    env[var] = ""
    report = cloud(PlatformRequest(system="Linux", env=env))
    assert not report.valid
    (reason,) = report.reasons
    assert f"{var} is set but empty" in reason and f"fix: unset {var}" in reason, reason
    assert "mesa-vulkan-drivers" not in reason


@pytest.mark.vulkan
def test_a_malformed_or_broken_icd_manifest_is_named(tmp_path):
    # The loader (libvulkan1 1.3.239) answers a manifest that is not JSON with VK_ERROR_OUT_OF_HOST_MEMORY,
    # even next to a good one, and one whose library is missing with VK_ERROR_INCOMPATIBLE_DRIVER: the
    # reason must say which file is wrong and how, not suggest memory or a missing driver package.
    require_vulkan()
    good = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"file_format_version": "1.0.0", "ICD": {')
    no_library = tmp_path / "no_library.json"
    no_library.write_text('{"file_format_version": "1.0.0", "ICD": {"library_path": "./libgone.so", '
                          '"api_version": "1.3.0"}}')
    base = {k: v for k, v in os.environ.items() if k not in vulkan.ICD_ENV_VARS}
    cases = [
        (str(malformed), f"{malformed} is not valid JSON"),
        (os.pathsep.join([str(malformed), good]) if os.path.exists(good) else str(malformed),
         f"{malformed} is not valid JSON"),
        (str(no_library), f"{no_library} names the driver library {tmp_path / 'libgone.so'}, which does not exist"),
    ]
    for value, expected in cases:
        report = cloud(PlatformRequest(system="Linux", env=dict(base, VK_ICD_FILENAMES=value)))
        assert not report.valid
        (reason,) = report.reasons
        assert expected in reason, reason
        assert "fix: correct or remove" in reason, reason


def _run_probe_in_thread(script: str, timeout: float, join: float) -> tuple[threading.Thread, list]:
    results: list = []
    thread = threading.Thread(
        target=lambda: results.append(run_probe(script, [], marker="M", env=os.environ, timeout=timeout)),
        daemon=True,
    )
    thread.start()
    thread.join(join)
    return thread, results


def _kill_pid_in(path, deadline: float = 5.0) -> None:
    end = time.monotonic() + deadline
    while not path.exists() or not path.read_text().strip():
        if time.monotonic() > end:
            return
        time.sleep(0.02)
    try:
        os.kill(int(path.read_text()), signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_probe_runner_is_not_held_by_a_helper_that_left_its_process_group(tmp_path, monkeypatch):
    # A driver that starts a helper in a session of its own (out of reach of the probe's process-group
    # kill) which inherits the probe's stdout: the pipe never reaches EOF while the helper runs. (What the
    # killed probe left is read for PROBE_DRAIN_TIMEOUT: 0.2 s here, as nothing more ever comes.)
    from renderd.platforms import probe

    monkeypatch.setattr(probe, "PROBE_DRAIN_TIMEOUT", 0.2, raising=False)  # (the code before the fix has none)
    pid_file = tmp_path / "helper.pid"
    script = _script(
        tmp_path,
        "import subprocess, sys, time\n"
        "helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
        "time.sleep(60)\n",
    )
    try:
        started = time.monotonic()
        thread, results = _run_probe_in_thread(script, timeout=0.5, join=5)
        assert not thread.is_alive(), "run_probe blocked past its deadline on a helper holding its stdout"
        assert time.monotonic() - started < 5
        assert results[0].answer is None and "did not finish within 0.5 s" in results[0].failure
    finally:
        _kill_pid_in(pid_file)
        thread.join(5)


@pytest.mark.vulkan
@pytest.mark.parametrize(
    "var, value", [("VK_LOADER_DRIVERS_SELECT", "*nvidia*"), ("VK_LOADER_DRIVERS_DISABLE", "*")]
)
def test_drivers_hidden_by_the_loader_filters_are_named_not_a_missing_driver(var, value):
    # The installed drivers are there, but the loader's driver filter hides them all: the fix is the
    # variable, not installing a driver.
    require_vulkan()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}
    env[var] = value
    vulkan.clear_cache()
    try:
        report = cloud(PlatformRequest(system="Linux", env=env))
    finally:
        vulkan.clear_cache()
    assert not report.valid
    (reason,) = report.reasons
    assert f"{var}={value!r}" in reason and "lvp_icd.x86_64.json" in reason, reason
    assert f"fix: unset {var}" in reason, reason
    assert "apt-get install" not in reason, reason


@pytest.mark.vulkan
def test_a_probe_that_timed_out_is_not_remembered():
    # A driver that is slow once (first initialisation after boot, a loaded machine) must not make
    # Vulkan unusable for the whole cache period: only answers are cached, not a missed deadline.
    require_vulkan()
    env = dict(os.environ)
    vulkan.clear_cache()
    try:
        slow = vulkan.probe_vulkan(env, timeout=0.001)
        assert not slow.ok and "did not finish within" in slow.error
        again = vulkan.probe_vulkan(env)
        assert again.ok and again.devices, again.error
    finally:
        vulkan.clear_cache()


def test_probe_runner_keeps_an_answer_given_before_a_hang_at_exit(tmp_path):
    # A driver whose library hangs as the process exits (a destructor waiting on its threads): the
    # answer was complete; the deadline still bounds the wait and the child is killed.
    script = _script(tmp_path, "import sys, time\nprint('M {\"ok\": true}', flush=True)\ntime.sleep(60)\n")
    started = time.monotonic()
    outcome = run_probe(script, [], marker="M", env=os.environ, timeout=0.5)
    assert time.monotonic() - started < 5
    assert outcome.answer == {"ok": True} and outcome.failure is None, outcome


def test_a_probe_that_could_not_start_for_want_of_descriptors_is_not_remembered():
    # Out of file descriptors, the probe cannot even start: that says nothing of Vulkan, so it is not cached
    # (platform=auto would pass CloudRendering over for five minutes), and the fix names the limit.
    script = textwrap.dedent("""
        import os, resource
        from renderd.platforms import vulkan
        env = dict(os.environ)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 1, hard))
        try:
            starved = vulkan.probe_vulkan(env)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        again = vulkan.probe_vulkan(env)
        print(starved.ok, "|", starved.error, "|", starved.fix, "|", again.ok)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    starved_ok, error, fix, again_ok = (part.strip() for part in out.stdout.split("|"))
    assert starved_ok == "False" and "Too many open files" in error and "ulimit -n" in fix
    assert again_ok == "True", out.stdout  # probed again (lavapipe is installed here)
