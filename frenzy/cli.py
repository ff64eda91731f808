"""The `frenzy` command line. Subcommands load lazily so `frenzy status` starts fast."""
from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of a click.Command. Each service owns the commands for its domain.
LAZY_COMMANDS: dict[str, str] = {
    "up": "frenzy.localcluster:up_command",
    "demo": "frenzy.demo:demo_command",
    "submit": "frenzy.cli_jobs:submit",
    "status": "frenzy.cli_jobs:status",
    "watch": "frenzy.cli_jobs:watch",
    "cancel": "frenzy.cli_jobs:cancel",
    "nodes": "frenzy.cli_jobs:nodes",
    "cluster": "frenzy.cli_jobs:cluster",
    "explain": "frenzy.cli_explain:explain",
    "logs": "frenzy.cli_logs:logs",
    "top": "frenzy.cli_top:top",
    "predict": "frenzy_predictor.cli_predict:predict",
    "profile": "frenzy_predictor.cli_profile:profile",
    "simulate": "frenzy_scheduler.cli_simulate:simulate",
    "token": "frenzy.security.cli_token:token",
    "tenant": "frenzy.security.cli_token:tenant",
    "security": "frenzy.security.cli_token:security",
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
