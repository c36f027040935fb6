"""The lists the user docs give (fields, arguments, flags, signatures) against the code they describe.

Each of these drifts quietly when the code gains or renames something: an Event attribute, a Session
property, a launch() argument, a PlatformRequest field, a command-line option, a benchmark flag.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import click
import pytest

import renderd
from renderd.cli import main as cli_main
from renderd.client import Session
from renderd.event import Event
from renderd.platforms import PlatformRequest
from renderd.process import LeasedPlayer
from renderd.transport.fifo import FifoChannel

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The docs a new user reads for the runnable parts (docs/player.md, vector.md, reliability.md have their own).
USER_DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "examples" / "README.md"] + [
    DOCS / name
    for name in (
        "api.md",
        "client.md",
        "configuration.md",
        "deploy.md",
        "http.md",
        "platforms.md",
        "protocol.md",
        "performance.md",
    )
]


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def _first_column_names(table_text: str) -> set[str]:
    """Every backticked name in the first column of a markdown table (``name``, ``name(...)``)."""
    names: set[str] = set()
    for line in table_text.splitlines():
        if not line.startswith("|") or line.startswith("|--") or line.startswith("| --"):
            continue
        first = line.split("|")[1]
        for code in re.findall(r"`([^`]+)`", first):
            match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", code)
            if match:
                names.add(match.group(1))
    return names


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_docs_client_md_event_table_names_every_public_attribute_of_event():
    table = _section((DOCS / "client.md").read_text(), "## `Event`")
    documented = _first_column_names(table) | {"bool"}
    public = _public(Event)
    assert public - documented == set(), f"Event attributes docs/client.md's Event table leaves out: {sorted(public - documented)}"
    extra = documented - public - {"bool"}
    assert extra == set(), f"docs/client.md's Event table names what Event does not have: {sorted(extra)}"


def test_docs_client_md_session_table_names_every_public_attribute_of_session():
    table = _section((DOCS / "client.md").read_text(), "## `Session`")
    documented = _first_column_names(table)
    public = _public(Session) | {"channel", "process", "stop_grace", "last_event"}  # (set in __init__)
    assert public - documented == set(), f"Session attributes docs/client.md leaves out: {sorted(public - documented)}"
    assert documented - public == set(), f"docs/client.md's Session table names: {sorted(documented - public)}"


def test_docs_client_md_launch_table_is_launchs_signature():
    table = _section((DOCS / "client.md").read_text(), "## `renderd.launch(...)`")
    documented = _first_column_names(table) - {"argument"}
    params = set(inspect.signature(renderd.launch).parameters)
    assert documented == params, (
        f"docs/client.md's launch() table: missing {sorted(params - documented)}, extra {sorted(documented - params)}"
    )


def test_docs_platforms_md_request_table_is_platform_requests_fields():
    table = _section((DOCS / "platforms.md").read_text(), "## The request")
    documented = _first_column_names(table) - {"field"}
    fields = set(inspect.signature(PlatformRequest).parameters)
    assert documented == fields, (
        f"docs/platforms.md's request table: missing {sorted(fields - documented)}, extra {sorted(documented - fields)}"
    )


def _doc_signature(doc: str, qualified: str) -> list[str]:
    """The parameters of ``qualified(...)`` as the doc writes them: names, with ``*`` where it stands."""
    match = re.search(re.escape(qualified) + r"\(((?:[A-Za-z_*])[^)]*)\)", doc)
    assert match, f"docs/client.md no longer writes {qualified}(...)"
    params = []
    for part in re.sub(r"\s+", " ", match.group(1)).split(","):
        part = part.strip()
        params.append(part if part == "*" else re.match(r"[A-Za-z_][A-Za-z0-9_]*", part).group(0))
    return params


def _code_signature(obj) -> list[str]:
    params = []
    for param in inspect.signature(obj).parameters.values():
        if param.kind is param.KEYWORD_ONLY and "*" not in params:
            params.append("*")
        params.append(param.name)
    return params


@pytest.mark.parametrize(
    ("qualified", "obj"),
    [
        ("renderd.client.Session", Session),
        ("renderd.process.LeasedPlayer", LeasedPlayer),
        ("renderd.transport.fifo.FifoChannel", FifoChannel),
        ("renderd.connect", renderd.connect),
    ],
)
def test_docs_client_md_writes_the_building_blocks_signatures_as_the_code_has_them(qualified, obj):
    # Which arguments may be passed by position is part of the signature: the doc once wrote FifoChannel's
    # keyword-only arguments as positional ones.
    doc = (DOCS / "client.md").read_text()
    assert _doc_signature(doc, qualified) == _code_signature(obj)


def _long_options(command: click.Command) -> set[str]:
    return {
        opt
        for param in command.params
        if not getattr(param, "hidden", False)
        for opt in param.opts
        if opt.startswith("--") and opt != "--help"
    }


def _command(name: str) -> click.Command:
    ctx = click.Context(cli_main)
    command = cli_main.get_command(ctx, name)
    assert command is not None, name
    return command


def test_docs_platforms_md_doctor_synopsis_is_doctors_options():
    doc = (DOCS / "platforms.md").read_text()
    synopsis = re.search(r"```\nrenderd doctor (.+?)\n```", doc, re.S).group(1)
    documented = set(re.findall(r"--[a-z][a-z-]*", synopsis))
    options = _long_options(_command("doctor"))
    assert documented == options, f"docs/platforms.md's doctor synopsis: missing {sorted(options - documented)}, extra {sorted(documented - options)}"


@pytest.mark.parametrize("name", ["start", "status", "validate", "doctor"])
def test_every_option_of_each_renderd_command_is_named_in_the_docs(name):
    # `renderd start --log-level` was in no doc. An option counts as named when one of its spellings
    # (`-c` or `--config`) is written in a user doc.
    text = "\n".join(doc.read_text() for doc in USER_DOCS)
    assert f"renderd {name}" in text
    missing = []
    for param in _command(name).params:
        if getattr(param, "hidden", False) or "--help" in param.opts or not isinstance(param, click.Option):
            continue
        if not any(re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) for opt in param.opts):
            missing.append("/".join(param.opts))
    assert missing == [], f"no user doc names `renderd {name}` {missing}"


# -- benchmark commands --------------------------------------------------------------------------------------


def _benchmark_commands() -> list[tuple[Path, str, str]]:
    """(doc, script, options) for every ``python benchmarks/X.py ...`` the user docs give."""
    found = []
    for doc in USER_DOCS:
        prose, fenced, in_fence = [], [], False
        for line in doc.read_text().splitlines():
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            (fenced if in_fence else prose).append(line)
        for line in fenced:
            match = re.search(r"python (?:\.\./)?benchmarks/(\w+)\.py([^#\n]*)", line)
            if match:
                found.append((doc, match.group(1), match.group(2)))
        for match in re.finditer(r"`python (?:\.\./)?benchmarks/(\w+)\.py([^`]*)`", "\n".join(prose)):
            found.append((doc, match.group(1), match.group(2)))
    return found


def test_the_docs_give_benchmark_commands():
    scripts = {script for _doc, script, _options in _benchmark_commands()}
    assert {"transport", "transport_http", "step_cpu", "vector", "player_render", "soak"} <= scripts


def test_every_benchmark_flag_the_docs_give_is_one_the_script_takes():
    wrong = []
    for doc, script, options in _benchmark_commands():
        source = (ROOT / "benchmarks" / f"{script}.py").read_text()
        accepted = set(re.findall(r"add_argument\(\s*\"(--[a-z][a-z0-9-]*)\"", source)) | {"--help"}
        for flag in re.findall(r"--[a-z][a-z0-9-]*", options):
            if flag not in accepted:
                wrong.append(f"{doc.relative_to(ROOT)}: benchmarks/{script}.py {flag}")
    assert wrong == [], wrong


def test_every_benchmark_case_the_docs_give_is_one_the_script_knows():
    wrong = []
    for doc, script, options in _benchmark_commands():
        match = re.search(r"--cases[ =]([\w,]+)", options)
        if not match:
            continue
        source = (ROOT / "benchmarks" / f"{script}.py").read_text()
        for case in match.group(1).split(","):
            if f'"{case}"' not in source:
                wrong.append(f"{doc.relative_to(ROOT)}: benchmarks/{script}.py --cases {case}")
    assert wrong == [], wrong


# -- dotted names ------------------------------------------------------------------------------------------

# Files renderd makes or ships, written like dotted names.
_FILE_NAMES = {"renderd.lock", "renderd.sock", "renderd.toml", "renderd.service"}


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


def test_every_renderd_name_the_docs_write_exists():
    # `renderd.daemon.service.API_READ_TIMEOUT`, `renderd.transport.fifo.FifoPair.create(...)`: a constant or
    # a function the docs point at by its dotted name that was renamed or moved leaves the reader nothing to find.
    names = 0
    wrong = []
    for doc in USER_DOCS:
        for dotted in sorted(set(re.findall(r"`(renderd(?:\.[A-Za-z_][A-Za-z0-9_]*)+)", doc.read_text()))):
            if dotted in _FILE_NAMES:
                continue
            names += 1
            try:
                _resolve(dotted)
            except (ImportError, AttributeError) as exc:
                wrong.append(f"{doc.relative_to(ROOT)}: {dotted} ({exc})")
    assert names > 40
    assert wrong == [], wrong


# -- links -------------------------------------------------------------------------------------------------


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    anchors = set()
    for line in path.read_text().splitlines():
        match = re.match(r"#+ (.*)", line)
        if match:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def test_every_relative_link_of_the_docs_leads_somewhere():
    wrong = []
    links = 0
    for doc in USER_DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            links += 1
            file, _, anchor = target.partition("#")
            path = (doc.parent / file) if file else doc
            if not path.exists():
                wrong.append(f"{doc.relative_to(ROOT)}: ({target}): no such file")
            elif anchor and (not path.is_file() or anchor not in _anchors(path)):
                wrong.append(f"{doc.relative_to(ROOT)}: ({target}): no such heading")
    assert links > 20
    assert wrong == [], wrong
