"""A pre-started rank: an idle interpreter that becomes one rank of a job when the agent says.

The agent starts these ahead of any launch, already in the process group their job will have
(`frenzy_agent.prestart`), so that starting a rank is a write to a pipe rather than a fork and
an exec that wait for a core: on a busy node those waits were most of a launch
(bench/agent_spawn.py, docs/reaction-latency.md). The agent writes one marshalled request
(argv, environment, working directory, log file) and closes the pipe. This program then does
what `subprocess.Popen` does in a child between fork and exec: stdin from /dev/null, stdout and
stderr to the rank's log, the working directory, the signals Python ignores back to their
defaults; and execs the command (the exit-recording `sh` wrapper), so the pid the agent holds
is the rank, as with Popen.

SIGUSR1 (checkpoint-now, sent to the job's group) is caught while it waits: its default would
end the rank before it ran, where the `sh` wrapper outlives it; a caught signal is back at its
default after the exec, as it would have been.

It runs as `python -I -S rank_launcher.py` and imports only built-in modules (no `site`, no
frenzy), so an idle one costs a few milliseconds to start and nothing while it waits. An empty
request (the agent closed the pipe: it stopped, or retired this launcher) ends it.
"""
import _signal  # built in; `signal` would import enum, a few milliseconds for every idle rank
import marshal
import os
import sys

# The exit code for a rank that could not exec its command, as a shell's "cannot execute".
EXEC_FAILED_EXIT = 126


def read_request() -> bytes:
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def become_rank(argv: list, env: dict, cwd: str, log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(cwd)
    # Python ignores these at start-up, and an ignored signal stays ignored across exec;
    # subprocess's restore_signals puts them back the same way.
    for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
        if hasattr(_signal, name):
            _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
    os.execve(argv[0], argv, env)


def main() -> int:
    _signal.signal(_signal.SIGUSR1, lambda *_: None)
    request = read_request()
    if not request:
        return 0
    argv, env, cwd, log_path = marshal.loads(request)
    try:
        become_rank(argv, env, cwd, log_path)
    except OSError as err:  # the log, the directory or the exec: the rank's log says which
        os.write(2, f"frenzy rank launcher: cannot start {argv[0]}: {err}\n".encode())
        return EXEC_FAILED_EXIT
    return EXEC_FAILED_EXIT  # not reached: execve returns only by raising


if __name__ == "__main__":
    sys.exit(main())
