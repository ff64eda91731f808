"""Instructions a warm `has` call costs at a sweep point, batch or per event, counted by
valgrind's callgrind: the before/after measure of a performance round that this machine's
clock cannot give (the same code's CPU time moves by 1.5x within minutes here; an
instruction count does not).

    apt-get install -y valgrind   # Debian: valgrind and callgrind_control
    .venv/bin/python bench/has_callgrind.py --point 10000x500 --calls 5
    # paired with another checkout (a worktree with its own compiled build), per event:
    .venv/bin/python bench/has_callgrind.py --before /tmp/before --point 10000x5000 \\
        --events --calls 100

The child process builds the sweep's input for the point (bench/scheduling.py's draws), makes
the cold call (with `--events`, the per-event measurement's fill), then waits while the
parent switches collection on (`callgrind_control -i on`), so only the warm calls (and the
`gc.collect()` before each, as the sweep's harness does) are counted. The figure reported
is `HasPolicy.schedule`'s own inclusive count per call, with its largest callees. Counts
instructions, not time: cache misses and branch mispredictions are not in it. The compiled
build only (the function names are mypyc's).

The child runs with a fixed `PYTHONHASHSEED` (`--hash-seed`, default 0). String hashes are
otherwise drawn anew for each process, which changes dict layouts and so the count: the same
code counted 17.18 M and 17.50 M a call at 10,000 x 5,000 per event, in two runs. Compare
counts taken with the same seed; draw a second seed to see how far a difference reaches.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchio import other_checkout_env, use_other_checkout

HERE = Path(__file__).resolve().parent
SCHEDULE = "CPyDef_frenzy_scheduler___policies___has___HasPolicy___schedule "


def child(point: str, calls: int, events: bool) -> None:
    """Runs under valgrind: the cold call, a pause for the parent, then `calls` warm ones;
    with `events`, the per-event measurement's fill and then its first `calls` events, each
    followed by one counted call (bench/scheduling.py `time_events`)."""
    use_other_checkout()  # the other checkout's packages, when this child runs them
    sys.path.insert(0, str(HERE))
    from frenzy_scheduler import native
    from frenzy_scheduler.policies.has import HasPolicy
    from frenzy_scheduler.simulator.trace import load_trace
    from has_decision_time import wanted_sweep_inputs
    from scheduling import (FILL_MAX_CALLS, PHILLY, EventState, draw_events, fill,
                            sweep_groups)

    if not native.compiled_modules():
        sys.exit("has_callgrind: the compiled build is needed (make native)")
    trace = load_trace(PHILLY)
    ((gpus, queued, queue, cluster, running),) = wanted_sweep_inputs(trace, point)
    policy = HasPolicy()
    if not events:
        gc.collect()
        gc.freeze()
        policy.schedule(queue, cluster, 0.0, running)
        print("READY", flush=True)
        sys.stdin.readline()  # the parent has switched collection on
        for _ in range(calls):
            gc.collect()
            policy.schedule(queue, cluster, 0.0, running)
        return
    drawn, top_up = draw_events(trace, queue, running, sweep_groups(gpus),
                                random.Random(f"events:{gpus}:{queued}"),
                                len(queue) * FILL_MAX_CALLS)
    state = EventState.of(queue, cluster, running)
    fill(policy, state, top_up)  # as time_events makes it
    gc.collect()
    gc.freeze()
    print("READY", flush=True)
    sys.stdin.readline()
    for event in drawn[:calls]:
        state.happen(event)
        queue_now, running_now = list(state.queue.values()), list(state.running.values())
        gc.collect()
        state.apply(policy.schedule(queue_now, state.cluster, event.time_s, running_now),
                    event.time_s)


def counted(point: str, calls: int, checkout: str, events: bool, hash_seed: int
            ) -> tuple[float, list[tuple[float, str]]]:
    """(instructions a call in `HasPolicy.schedule`, its largest callees per call)."""
    env = other_checkout_env(Path(checkout)) if checkout else dict(os.environ)
    env["PYTHONHASHSEED"] = str(hash_seed)
    with tempfile.TemporaryDirectory(prefix="has-callgrind-") as work:
        out = str(Path(work) / "callgrind.out")
        log = Path(work) / "child.log"  # valgrind's and the child's stderr, shown on failure
        with log.open("w") as stderr:
            proc = subprocess.Popen(
                ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                 f"--callgrind-out-file={out}", sys.executable, __file__, "--child",
                 "--point", point, "--calls", str(calls)] + (["--events"] if events else []),
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
            assert proc.stdin is not None and proc.stdout is not None
            ready = False
            while not ready and (line := proc.stdout.readline()):
                ready = line.strip() == "READY"
            if ready:
                subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True,
                               capture_output=True)
                proc.stdin.write("go\n")
            proc.stdin.close()
            if proc.wait() != 0 or not ready:
                sys.exit(f"has_callgrind: the child failed (rc {proc.returncode}):\n"
                         + log.read_text()[-2000:])
        tree = subprocess.run(["callgrind_annotate", "--tree=calling", "--inclusive=yes",
                               "--threshold=100", out], check=True, capture_output=True,
                              text=True).stdout
    return parse(tree, calls)


def parse(tree: str, calls: int) -> tuple[float, list[tuple[float, str]]]:
    """`schedule`'s block of callgrind_annotate's calling tree: its own line (`*`) and its
    callees (`>`), per call."""
    for block in tree.split("\n\n"):
        lines = block.strip().splitlines()
        own = [line for line in lines if "*  " in line and SCHEDULE in line]
        if not own:
            continue
        total = int(own[0].split()[0].replace(",", "")) / calls
        callees = []
        for line in lines:
            match = re.match(r"\s*([\d,]+) \(.*?\)\s+>\s+\S*?:(\S+)", line)
            if match:
                name = match.group(2).replace("CPyDef_frenzy_scheduler___", "")
                callees.append((int(match.group(1).replace(",", "")) / calls, name))
        return total, sorted(callees, reverse=True)
    sys.exit("has_callgrind: no HasPolicy.schedule in the profile (not the compiled build?)")


def report(label: str, total: float, callees: list[tuple[float, str]], top: int) -> None:
    print(f"{label}: {total / 1e6:.2f}M instructions a warm call in HasPolicy.schedule")
    for count, name in callees[:top]:
        print(f"  {count / 1e6:8.2f}M  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--point", default="10000x500", help="GPUsxqueued, from the sweep's grid")
    parser.add_argument("--calls", type=int, default=5, help="warm calls counted")
    parser.add_argument("--before", default="", help="another checkout's root (a worktree, "
                        "compiled there), counted first on the same input")
    parser.add_argument("--events", action="store_true",
                        help="per event: the fill, then one counted call after each of the "
                        "first --calls events (the sweep's per-event measurement)")
    parser.add_argument("--top", type=int, default=12, help="callees shown")
    parser.add_argument("--hash-seed", type=int, default=0,
                        help="the child's PYTHONHASHSEED (counts differ by seed)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.point, args.calls, args.events)
        return
    if args.before:
        report(f"before ({args.before})",
               *counted(args.point, args.calls, args.before, args.events, args.hash_seed),
               args.top)
    report("this checkout",
           *counted(args.point, args.calls, "", args.events, args.hash_seed), args.top)


if __name__ == "__main__":
    main()
