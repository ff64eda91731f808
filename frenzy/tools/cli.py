"""The `frenzy` command line. Subcommands load lazily so `frenzy status` starts fast."""
from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click.Command. Each service owns the commands for its domain.
LAZY_COMMANDS: dict[str, str] = {
    "up": "frenzy.tools.localcluster:up_command",
    "demo": "frenzy.tools.demo:demo_command",
    "submit": "frenzy.tools.cli_jobs:submit",
    "status": "frenzy.tools.cli_jobs:status",
    "watch": "frenzy.tools.cli_jobs:watch",
    "cancel": "frenzy.tools.cli_jobs:cancel",
    "nodes": "frenzy.tools.cli_jobs:nodes",
    "cluster": "frenzy.tools.cli_jobs:cluster",
    "explain": "frenzy.tools.cli_explain:explain",
    "logs": "frenzy.tools.cli_logs:logs",
    "top": "frenzy.tools.cli_top:top",
    "predict": "frenzy_predictor.cli_predict:predict",
    "profile": "frenzy_predictor.cli_profile:profile",
    "simulate": "frenzy_scheduler.cli_simulate:simulate",
    "token": "frenzy.tools.cli_token:token",
    "tenant": "frenzy.tools.cli_token:tenant",
    "security": "frenzy.tools.cli_token:security",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(LAZY_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in LAZY_COMMANDS:
            return None
        module_name, attribute = LAZY_COMMANDS[name].split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup)
def cli() -> None:
    """Frenzy: serverless LLM training on heterogeneous GPU clusters."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
