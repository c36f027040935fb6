"""A managed display that cannot be started for want of file descriptors (EMFILE) leaves none of its own open:
the Xvfb log file made before the pipe that failed is closed at once, not left to the garbage collector. Run in a
subprocess at its descriptor limit, the cyclic collector off."""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import gc, os, resource
    gc.disable()
    from renderd.errors import PlatformError
    from renderd.platforms.xvfb import DisplayManager
    manager = DisplayManager()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for spare in (1, 2):
        before = sorted(os.listdir("/proc/self/fd"))
        lowest = os.dup(0)
        os.close(lowest)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest + spare, hard))
        try:
            manager.acquire(64, 64)
        except PlatformError as exc:
            message = str(exc)
        else:
            raise AssertionError("a managed display started with %d descriptor(s) to spare" % spare)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert "EMFILE" in message, message
        after = sorted(os.listdir("/proc/self/fd"))
        assert after == before, (spare, sorted(set(after) - set(before)))
    manager.shutdown()
    print("ok")
""")


def test_no_descriptor_is_left_open_when_the_pipe_cannot_be_made():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
