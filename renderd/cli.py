"""The ``renderd`` command line. Each subcommand lives with the code it drives and is imported on use."""

from __future__ import annotations

import importlib
import os
import sys
from types import TracebackType
from typing import Any

import click
import click.utils

# command name -> "module:attribute" of its click command (a registry: adding a command is one line).
COMMANDS = {
    "start": "renderd.daemon.commands:start",
    "status": "renderd.daemon.commands:status",
    "validate": "renderd.config:validate_command",
    "doctor": "renderd.platforms.doctor:doctor_command",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's, with output that cannot be written (``renderd status > /dev/full``) a one-line error and
        exit 1 rather than a traceback (click itself quiets only a closed pipe, EPIPE, as a plain exit 1)."""
        try:
            try:
                result = super().main(*args, **kwargs)
            except SystemExit:
                _flush_stdout()
                raise
            _flush_stdout()
            return result
        except OSError as exc:
            stream = _output_stream(exc.__traceback__)
            if stream is None:
                raise
            _output_failed(stream, exc)


def _flush_stdout() -> None:
    """What a command wrote and Python would flush only at exit, where a failure is a traceback too."""
    if sys.stdout is not None:
        sys.stdout.flush()


def _output_stream(tb: TracebackType | None) -> str | None:
    """Which stream failed, when the error came from writing a command's output (click.echo, or the flush
    above); None for any other error."""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is _flush_stdout.__code__:
            return "standard output"
        if frame.f_code is click.utils.echo.__code__:
            err = frame.f_locals.get("err") or frame.f_locals.get("file") is sys.stderr
            return "standard error" if err else "standard output"
        tb = tb.tb_next
    return None


def _output_failed(stream: str, exc: OSError) -> None:
    from renderd.errors import os_error_message

    # The output's unwritten rest would fail again when Python flushes it at exit: it goes nowhere instead.
    for f in (sys.stdout, sys.stderr) if stream == "standard error" else (sys.stdout,):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, f.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # (a stream with no descriptor: a test's capture)
            pass
    if stream == "standard output":
        try:
            click.echo(f"Error: {os_error_message(exc, 'cannot write to standard output')}", err=True)
        except OSError:
            pass
    sys.exit(1)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="renderd")
def main() -> None:
    """renderd: a rendering daemon for Unity-built simulators on headless servers."""
