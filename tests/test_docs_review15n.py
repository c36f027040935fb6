"""Numbers and lists that docs/protocol.md, docs/player.md and docs/http.md quote, against the code.

Each drifts quietly when the code changes: a constant's value, a limit's name, the arguments an action of
the reference player takes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from renderd import protocol
from renderd.player import core
from renderd.transport import http, multipart

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def _outside_parentheses(text: str) -> str:
    while True:
        stripped = re.sub(r"\([^()]*\)", "", text)
        if stripped == text:
            return text
        text = stripped


def _names(text: str) -> list[str]:
    return re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text)


@pytest.mark.parametrize(
    "quoted, value",
    [
        ("`DEFAULT_MAX_FIELDS` | 1024 fields", protocol.DEFAULT_MAX_FIELDS == 1024),
        ("`MAX_ACTION_SIZE` (16 MiB)", protocol.MAX_ACTION_SIZE == 16 << 20),
        ("`MAX_ACTION_DEPTH` (512)", protocol.MAX_ACTION_DEPTH == 512),
        ("`METADATA_UNCOUNTED_SIZE` (1 MiB)", protocol.METADATA_UNCOUNTED_SIZE == 1 << 20),
        ("one map or array per 8 bytes of body", protocol.METADATA_BYTES_PER_CONTAINER == 8),
        ("Bodies up to 16 KiB are copied out of a 64 KiB scratch buffer",
         (protocol.SMALL_BODY, protocol.SCRATCH_SIZE) == (16 << 10, 64 << 10)),
        ("`Decoder(pool_bytes=64 MiB)`, at most 16", (protocol.POOL_BYTES, protocol.POOL_BUFFERS) == (64 << 20, 16)),
        ("`POOL_IDLE_MESSAGES` (64) messages is forgotten (checked every 16 messages)",
         (protocol.POOL_IDLE_MESSAGES, protocol.POOL_BUFFERS) == (64, 16)),
    ],
)
def test_protocol_md_quotes_the_codec_constants_as_they_are(quoted, value):
    text = " ".join((DOCS / "protocol.md").read_text().split())
    assert quoted in text, f"docs/protocol.md no longer says {quoted!r}"
    assert value, f"docs/protocol.md says {quoted!r}, which renderd/protocol.py no longer holds"


def test_player_md_actions_table_lists_each_action_with_the_arguments_it_takes():
    table = _section((DOCS / "player.md").read_text(), "## Actions").split("\nArguments are checked")[0]
    documented: dict[str, tuple[str, str, str]] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split("|")]
        assert len(cells) == 4, f"docs/player.md: an Actions row that is not 4 cells: {line[:80]}"
        for name in _names(cells[0]):
            documented[name] = (cells[1], cells[2], cells[0])
    assert set(documented) == set(core.ACTION_ARGUMENTS), (
        f"docs/player.md's Actions table and ACTION_ARGUMENTS differ: only in the doc "
        f"{sorted(set(documented) - set(core.ACTION_ARGUMENTS))}, only in the code "
        f"{sorted(set(core.ACTION_ARGUMENTS) - set(documented))}"
    )
    for name, (arguments, other, _) in documented.items():
        takes = core.ACTION_ARGUMENTS[name]
        if other.startswith("any: lenient"):
            assert takes is None, f"docs/player.md calls {name} lenient; ACTION_ARGUMENTS has {takes}"
            continue
        assert takes is not None, f"docs/player.md calls {name} strict; ACTION_ARGUMENTS takes any key"
        if other.startswith("strict: none"):
            assert takes == ((),), f"docs/player.md says {name} takes no argument; ACTION_ARGUMENTS has {takes}"
            continue
        if other.startswith("strict (this player's own):"):
            listed = set(_names(_outside_parentheses(other)))
        else:
            listed = set(_names(_outside_parentheses(arguments)))
            also = other.split("also taken, with no effect here:", 1)
            if len(also) == 2:
                listed |= set(_names(_outside_parentheses(also[1])))
        assert listed == set(takes[0]), (
            f"docs/player.md lists {sorted(listed)} for {name}; ACTION_ARGUMENTS has {sorted(takes[0])}"
        )


def test_http_md_limits_table_names_constants_that_exist():
    table = _section((DOCS / "http.md").read_text(), "## Limits")
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names.update(n for n in _names(line.split(" | ")[0]) if n.isupper())
    assert names, "docs/http.md's Limits table lists no constant"
    missing = {n for n in names if not any(hasattr(m, n) for m in (http, multipart, protocol))}
    assert missing == set(), f"docs/http.md's Limits table names constants renderd does not have: {sorted(missing)}"


@pytest.mark.parametrize(
    "quoted, value",
    [
        ("256 MiB (four 4096 x 4096 RGBA frames)", http.MAX_REQUEST_SIZE == 4 * 4096 * 4096 * 4),
        ("| `MAX_UNATTRIBUTED_BODY_BYTES`, `BODY_ROOM_TIMEOUT` | 1 GiB at once, a 30 s wait",
         (http.MAX_UNATTRIBUTED_BODY_BYTES, http.BODY_ROOM_TIMEOUT) == (1 << 30, 30.0)),
        ("| `BODY_START_SIZE` | 1 MiB", http.BODY_START_SIZE == 1 << 20),
        ("| `MAX_JSON_PART_SIZE` | 32 MiB", http.MAX_JSON_PART_SIZE == 32 << 20),
        ("| `MAX_HEAD_SIZE` | 16 KiB", http.MAX_HEAD_SIZE == 16 << 10),
        ("| `MAX_PARTS` | 512", multipart.MAX_PARTS == 512),
        ("| `MAX_PART_HEADER_SIZE` | 8 KiB", multipart.MAX_PART_HEADER_SIZE == 8 << 10),
        ("| `MAX_PADDING` | 1024 bytes", multipart.MAX_PADDING == 1024),
        ("| `MAX_BOUNDARY_LENGTH` | 70 characters", multipart.MAX_BOUNDARY_LENGTH == 70),
        ("| `MAX_CONNECTIONS` | 256", http.MAX_CONNECTIONS == 256),
        ("| `REQUEST_TIMEOUT` | 30 s", http.REQUEST_TIMEOUT == 30.0),
        ("at 64 KiB/s", http.MIN_BODY_RATE == 64 * 1024),
        ("| `IDLE_TIMEOUT` | 1 h", http.IDLE_TIMEOUT == 3600.0),
        ("| `FIRST_REQUEST_TIMEOUT` | 60 s", http.FIRST_REQUEST_TIMEOUT == 60.0),
        ("| `LINGER_TIMEOUT`, `LINGER_MAX_BYTES` | 2 s, 4 MiB",
         (http.LINGER_TIMEOUT, http.LINGER_MAX_BYTES) == (2.0, 4 << 20)),
        ("| `MAX_REFUSED_LINGERING` | 64", http.MAX_REFUSED_LINGERING == 64),
        ("| 10 s, 5 s, 4 probes",
         (http.KEEPALIVE_IDLE, http.KEEPALIVE_INTERVAL, http.KEEPALIVE_COUNT) == (10, 5, 4)),
        ("| `DISCONNECT_POLL_INTERVAL` | 0.25 s", http.DISCONNECT_POLL_INTERVAL == 0.25),
        ("| `EXIT_DRAIN_TIMEOUT` | 1 s", http.EXIT_DRAIN_TIMEOUT == 1.0),
        ("`RETIRED_TOKENS`, 4096", http.RETIRED_TOKENS == 4096),
        ("`REFUSAL_LOG_INTERVAL` (10 s)", http.REFUSAL_LOG_INTERVAL == 10.0),
    ],
)
def test_http_md_quotes_the_listener_limits_as_they_are(quoted, value):
    text = (DOCS / "http.md").read_text()
    assert quoted in text, f"docs/http.md no longer says {quoted!r}"
    assert value, f"docs/http.md says {quoted!r}, which renderd/transport/http.py no longer holds"
