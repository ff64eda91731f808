"""Where each policy leaves GPUs idle on one benchmark window: per GPU type, the busy share over
the window's span and the idle GPU-hours split by whether any job was waiting at the time
(waiting: submitted and not yet started for the first time). Idle GPUs while jobs wait are the
policy's choice or a fit problem; idle GPUs with nothing waiting are GPUs the running jobs could
have grown into. Issue 9's diagnosis (docs/has-experiments.md, s22): where has loses most to
Sia, the fastest type idles with nothing waiting.

    .venv/bin/python bench/has_idle.py --cluster frenzy-288 --window 25000          # trace rate
    .venv/bin/python bench/has_idle.py --cluster frenzy-288 --window 25000 --load 0.85

Not a result: the figures of record come from bench/scheduling.py.
"""
from __future__ import annotations

import math
import statistics

from has_windows import parse_config, saved_window_jobs, window_arguments

from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator import SimConfig, SimResult, simulate


def idle_gpu_s(result: SimResult, gpu_type: str) -> tuple[float, float]:
    """(idle GPU-seconds of the type while some job waited, ... while none did), from the
    first submit to the last end: every change lies between them, so the span needs no bounds
    of its own (a job that never started has no start time, nan, and waits to the end)."""
    changes: dict[float, list[int]] = {}  # time -> [busy GPUs change, waiting jobs change]
    for begin, end, gpus in result.segments_by_type.get(gpu_type, []):
        changes.setdefault(begin, [0, 0])[0] += gpus
        changes.setdefault(end, [0, 0])[0] -= gpus
    for record in result.records:
        changes.setdefault(record.submit_time_s, [0, 0])[1] += 1
        changes.setdefault(record.first_start_s, [0, 0])[1] -= 1
    capacity = result.capacity_by_type[gpu_type]
    busy = waiting = 0
    idle_waiting_s = idle_none_s = 0.0
    times = sorted(t for t in changes if not math.isnan(t))
    for time_s, next_s in zip(times, times[1:]):
        busy += changes[time_s][0]
        waiting += changes[time_s][1]
        idle_s = (capacity - busy) * (next_s - time_s)
        if waiting > 0:
            idle_waiting_s += idle_s
        else:
            idle_none_s += idle_s
    return idle_waiting_s, idle_none_s


def main() -> None:
    args = window_arguments(__doc__, "frenzy-288", 25_000, 0.0).parse_args()
    groups, jobs = saved_window_jobs(args.cluster, args.window, args.load)
    for name, policy in (("sia", get_policy("sia")), ("has", HasPolicy(parse_config(args.set)))):
        result = simulate(jobs, build_cluster(list(groups)), policy, config=SimConfig.realistic())
        span_s = max(r.end_time_s for r in result.records) - min(r.submit_time_s for r in result.records)
        avg_jct_s = statistics.mean(r.end_time_s - r.submit_time_s for r in result.records)
        print(f"{name}: avg JCT {avg_jct_s:,.0f} s, span {span_s / 3600:.1f} h")
        for gpu_type, capacity in sorted(result.capacity_by_type.items()):
            waiting_s, none_s = idle_gpu_s(result, gpu_type)
            busy = result.busy_gpu_s_by_type.get(gpu_type, 0.0) / (capacity * span_s)
            print(f"  {gpu_type:>10} x{capacity:<4} busy {busy:5.3f}   idle GPU-h while jobs "
                  f"waited {waiting_s / 3600:7.1f}, with none waiting {none_s / 3600:7.1f}")


if __name__ == "__main__":
    main()
