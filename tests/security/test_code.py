"""No shell anywhere in renderd: every process is started from an argv list, never through ``/bin/sh``
(so no configuration value, environment name or path can be interpreted as shell syntax)."""

from __future__ import annotations

import ast
from pathlib import Path

import renderd

RENDERD_SOURCE = Path(renderd.__file__).parent
#: Calls that run a command line through a shell, whatever their arguments.
SHELL_CALLS = {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput", "commands.getoutput"}
#: Calls that take a command as their first argument.
COMMAND_CALLS = {"subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
                 "subprocess.check_output", "Popen", "run"}


def sources() -> list[Path]:
    files = sorted(RENDERD_SOURCE.rglob("*.py"))
    assert len(files) > 30, files  # the whole package, not an empty glob
    return files


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(RENDERD_SOURCE.parent)}:{node.lineno}"


def test_no_shell_true_anywhere() -> None:
    found = []
    for path in sources():
        for node, _name in calls(path):
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{where(path, node)}: shell={ast.unparse(kw.value)}")
    assert not found, found


def test_no_shell_command_helpers() -> None:
    found = [f"{where(path, node)}: {name}" for path in sources() for node, name in calls(path)
             if name in SHELL_CALLS or name.startswith(("os.exec", "os.spawn", "os.posix_spawn"))]
    assert not found, found


def test_commands_are_argv_lists_not_strings() -> None:
    found = []
    for path in sources():
        for node, name in calls(path):
            if name in COMMAND_CALLS and node.args:
                first = node.args[0]
                if isinstance(first, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                    found.append(f"{where(path, node)}: {name}({ast.unparse(first)[:60]}, ...)")
    assert not found, found
