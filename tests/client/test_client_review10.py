"""launch() and Session, review 10: what a session does when the player refuses part of a reset, what a
broken session reports, and arguments a transport does not use. Real processes, real FIFOs; nothing may
be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import renderd
from renderd.client import SessionState
from renderd.errors import CallOrderError, ConfigError, PlayerCrashed, PlayerTimeout, ProtocolError

from .conftest import START, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")

#: The reference player, small and with no display: it starts in well under a second.
SMALL = dict(width=32, height=24, platform="headless")


@pytest.mark.parametrize("how", ["step", "recv"])
def test_a_timeout_that_broke_the_session_is_the_error_it_keeps_and_names(how):
    # A step that timed out raised a PlayerTimeout naming the action, the deadline and what to do, but the
    # session kept (as session.error, quoted and chained by every later call) the transport's bare one
    # underneath: "the player (pid N) sent no complete message within step_timeout (waited 0.301 s)", its
    # seconds the time waited, not the deadline. A recv(timeout=...) that passed said "within recv timeout =
    # 0.3 s ... or raise recv timeout", naming no argument there is.
    with renderd.launch(peer_argv(), platform="headless", start_timeout=START, step_timeout=0.3) as session:
        with pytest.raises(PlayerTimeout) as info:
            if how == "step":
                session.step("HalfThenHang")
            else:
                session.send("HalfThenHang")
                session.recv(timeout=0.2)
        raised = info.value
        assert session.state is SessionState.BROKEN and session.error is raised
        if how == "step":
            assert "within step_timeout = 0.3 s" in str(raised) and "raise step_timeout" in str(raised)
            assert (raised.deadline, raised.seconds) == ("step_timeout", 0.3)
        else:
            assert "within the recv timeout of 0.2 s" in str(raised) and "recv timeout =" not in str(raised)
            assert "give recv() a longer timeout" in str(raised) and "raise recv timeout" not in str(raised)
            assert (raised.deadline, raised.seconds) == ("recv timeout", 0.2)
        with pytest.raises(CallOrderError, match="HalfThenHang: no answer from the player") as later:
            session.step("Pass")
        assert later.value.__cause__ is raised


@pytest.mark.parametrize("pipe_size", [1 << 16, -5, "big"])
def test_a_pipe_size_with_the_http_transport_is_a_config_error(pipe_size):
    # pipe_size is the buffer of the player -> client named pipe; an HTTP player has no such pipe. With
    # transport="http" it was dropped without a word, a bad one (-5, "big") too, and a player started.
    with pytest.raises(ConfigError) as info:
        renderd.launch(transport="http", pipe_size=pipe_size, **SMALL, start_timeout=START)
    assert info.value.key == "pipe_size"
    expected = "transport='http' uses none" if isinstance(pipe_size, int) and pipe_size > 0 else "greater than 0"
    assert expected in str(info.value)


#: Run in a process of its own: SIGPIPE at its default disposition, as CLI scripts often set it (so that
#: ``| head`` ends them quietly); a player that exited between two steps; the second step writes its action.
SIGPIPE_SCRIPT = textwrap.dedent(
    """
    import signal, sys
    import renderd
    from renderd.errors import PlayerCrashed

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    with renderd.launch(width=32, height=24, platform="headless", start_timeout=30, step_timeout=30) as session:
        session.step(action="RenderdFault", fault="exit", code=3, when="after")  # answered, then it exits
        assert session.process.wait(30) == 3
        try:
            session.step("Pass")
        except PlayerCrashed as exc:
            print("PlayerCrashed:", exc.returncode, "client.pipe" in str(exc))
    print("still here")
    """
)


def test_an_action_written_to_a_player_that_exited_is_a_crash_even_with_sigpipe_at_its_default(private_tmp):
    # Python ignores SIGPIPE, so writing to a pipe nobody reads raises BrokenPipeError, which a step turns into
    # PlayerCrashed. A program that put SIGPIPE back to its default (signal.signal(SIGPIPE, SIG_DFL), a common
    # idiom) was killed by the kernel instead, on the next step after its player died: no error, no log, its
    # pipe directory left behind.
    env = dict(os.environ, TMPDIR=str(private_tmp))
    done = subprocess.run([sys.executable, "-c", SIGPIPE_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split("\n")[:2] == ["PlayerCrashed: 3 True", "still here"], done.stdout


@pytest.mark.parametrize(
    "code, says",
    [
        ("import sys; sys.exit(3)", "the player exited while renderd waited for its first frame"),
        ("import os, sys; os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY); sys.exit(3)",
         "the player closed server.pipe while renderd waited for its first frame"),
    ],
)
def test_a_player_that_ends_before_its_first_frame_is_not_said_to_owe_an_answer(code, says):
    # launch() sends no action before the first frame, but a player that died first was reported as having
    # ended "while renderd waited for its answer (start_timeout)".
    with pytest.raises(PlayerCrashed) as info:
        renderd.launch([sys.executable, "-c", code], platform="headless", start_timeout=START)
    assert says in str(info.value) and "answer" not in str(info.value)
    assert info.value.returncode == 3


@pytest.mark.parametrize("executable", ["~/renderd-no-such-build/player", ["~/renderd-no-such-build/player", "-v"]])
def test_an_executable_under_a_tilde_says_it_is_not_expanded(executable):
    # A path copied from a shell, "~/builds/thor/thor-Linux64", was looked up relative to the working directory
    # (a directory named "~") and said not to exist, with no word of the "~" a shell would have expanded.
    with pytest.raises(ConfigError) as info:
        renderd.launch(executable, **SMALL, start_timeout=START)
    assert info.value.key == "executable"
    assert "a leading '~' is not expanded here; give os.path.expanduser('~/renderd-no-such-build/player')" in str(
        info.value
    )


#: Players that send no first frame, each in its own way, and what the PlayerTimeout then says of it.
#: (Shell scripts: they open the pipe within milliseconds, well inside the short start_timeout.)
SILENT_PLAYERS = [
    ("exec sleep 60", "it has not opened server.pipe"),
    ('exec 3>"$AI2THOR_FIFO_SERVER_PIPE_PATH"; exec sleep 60', "it opened server.pipe but has sent nothing on it"),
    ('exec 3<"$AI2THOR_FIFO_CLIENT_PIPE_PATH"; exec sleep 60',
     "it opened client.pipe to read an action before sending its first message"),
]


@pytest.mark.parametrize("code, says", SILENT_PLAYERS)
def test_a_player_that_sends_no_first_frame_is_told_apart_by_what_it_did_with_the_pipes(code, says):
    # A first frame that does not come is the most common failure with a new build, and the timeout said only
    # "sent no complete message within start_timeout": the same for a build that never opens the pipes (it
    # does not speak the FIFO protocol), one that opened server.pipe and is still loading, and one that opens
    # client.pipe first (the wrong order, which waits for ever).
    with pytest.raises(PlayerTimeout) as info:
        renderd.launch(["/bin/sh", "-c", code], platform="headless", start_timeout=0.5)
    assert says in str(info.value)
    assert info.value.deadline == "start_timeout"


#: A player whose first message carries sequenceId 1 (counting from 1), then waits.
FIRST_FRAME_FROM_ONE = textwrap.dedent(
    """
    import os, struct, time, msgpack
    header = struct.Struct("!BI")
    agent = {"screenWidth": 2, "screenHeight": 2, "lastActionSuccess": True}
    metadata = msgpack.packb({"agents": [agent], "sequenceId": 1, "activeAgentId": 0})
    out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
    os.write(out, header.pack(1, len(metadata)) + metadata + header.pack(255, 0))
    time.sleep(60)
    """
)


def test_a_first_frame_with_another_sequence_id_is_named_as_the_first_frame():
    # It said "the answer to (first frame) carries sequenceId 1, expected 0": no action had been sent.
    with pytest.raises(ProtocolError) as info:
        renderd.launch([sys.executable, "-c", FIRST_FRAME_FROM_ONE], platform="headless", start_timeout=START)
    assert "the player's first frame carries sequenceId 1, expected 0" in str(info.value)
    assert "answer to" not in str(info.value)
