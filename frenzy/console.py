"""The rich console every CLI table prints to."""
from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 160


def table_console(stderr: bool = False) -> Console:
    """A terminal's own width; a pipe or log file gets a wide one, so tables do not fold at 80."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)
