"""The ``renderd`` command line. Each subcommand lives with the code it drives and is imported on use."""

from __future__ import annotations

import importlib

import click

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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="renderd")
def main() -> None:
    """renderd: a rendering daemon for Unity-built simulators on headless servers."""
