"""Where has's run time goes against elastic Sia's on one benchmark window (issue 9's lead
for alibaba load 0.85, where has barely queues yet runs jobs slower than Sia): per job, run
time (end - first start) under each, the GPU type and width each ended on, restarts and
GPU-seconds, summed by whether has ran the job on a slower option than Sia.

    .venv/bin/python bench/has_runtime.py --cluster alibaba-2026-492 --load 0.85 --window 5000

Not a result: the figures of record come from bench/scheduling.py.
"""
from __future__ import annotations

import collections
import time

from has_windows import parse_config, saved_window_jobs, window_arguments

from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.policies import get_policy
from frenzy_scheduler.policies.has import HasPolicy
from frenzy_scheduler.simulator import SimConfig, simulate


def main() -> None:
    parser = window_arguments(__doc__, "alibaba-2026-492", 5_000, 0.85)
    parser.add_argument("--top", type=int, default=15, help="jobs listed, by run-time gap")
    args = parser.parse_args()
    groups, jobs = saved_window_jobs(args.cluster, args.window, args.load)
    by_id = {j.job_id: j for j in jobs}
    runs = {}
    for name, policy in (("sia", get_policy("sia")), ("has", HasPolicy(parse_config(args.set)))):
        tick = time.process_time()
        result = simulate(jobs, build_cluster(list(groups)), policy, config=SimConfig.realistic())
        runs[name] = {r.job_id: r for r in result.records}
        print(f"{name}: {time.process_time() - tick:.1f} s CPU, {result.restarts} restarts, "
              f"reshapes {dict(result.reshapes)}")
    has, sia = runs["has"], runs["sia"]
    groups_h = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
    rows = []
    for job_id, h in has.items():
        s = sia[job_id]
        run_h = (h.end_time_s - h.first_start_s) / 3600
        run_s = (s.end_time_s - s.first_start_s) / 3600
        q_h = (h.first_start_s - h.submit_time_s) / 3600
        q_s = (s.first_start_s - s.submit_time_s) / 3600
        job = by_id[job_id]
        best_s = min(o.duration_s for o in job.options) if job.options else float("nan")
        key = "has slower" if run_h > run_s * 1.02 else ("has faster" if run_h < run_s / 1.02
                                                         else "level")
        g = groups_h[key]
        g[0] += 1; g[1] += run_h - run_s; g[2] += q_h - q_s
        g[3] += h.gpu_seconds / 3600; g[4] += s.gpu_seconds / 3600
        rows.append((run_h - run_s, job_id, run_h, run_s, h, s, best_s / 3600))
    tot_h = sum(r[2] for r in rows); tot_s = sum(r[3] for r in rows)
    print(f"run time summed: has {tot_h:.1f} h, sia {tot_s:.1f} h; GPU-h has "
          f"{sum(r.gpu_seconds for r in has.values()) / 3600:.0f}, sia "
          f"{sum(r.gpu_seconds for r in sia.values()) / 3600:.0f}")
    for key, (n, run_gap, q_gap, gh, gs) in sorted(groups_h.items()):
        print(f"  {key}: {n} jobs, run has - sia {run_gap:+.1f} h, queue {q_gap:+.1f} h, "
              f"GPU-h {gh:.0f} vs {gs:.0f}")
    head_h = sum(r[2] - r[6] for r in rows)
    head_s = sum(r[3] - r[6] for r in rows)
    print(f"run time over each job's fastest option (launch excluded), summed: has "
          f"{head_h:+.1f} h, sia {head_s:+.1f} h; JCT summed: has "
          f"{sum((r.end_time_s - r.submit_time_s) for r in has.values()) / 3600:.1f} h, sia "
          f"{sum((r.end_time_s - r.submit_time_s) for r in sia.values()) / 3600:.1f} h")
    slack = sorted(rows, key=lambda r: -(r[2] - r[6]))[:args.top]
    print("largest run time over the fastest option under has (h over best; has run h, type x "
          "GPUs, restarts | sia):")
    for gap, job_id, run_h, run_s, h, s, best_h in slack:
        print(f"  {job_id}: {run_h - best_h:+.2f}  has {run_h:.2f} {h.gpu_type} x{h.num_gpus} "
              f"r{h.restarts} | sia {run_s:.2f} {s.gpu_type} x{s.num_gpus} r{s.restarts}  "
              f"best {best_h:.2f}")
    queued = sorted(rows, key=lambda r: -((r[4].first_start_s - r[4].submit_time_s)
                                          - (r[5].first_start_s - r[5].submit_time_s)))
    print("largest queueing gaps (has - sia h; has first start's wait, type x GPUs | sia):")
    for gap, job_id, run_h, run_s, h, s, best_h in queued[:args.top]:
        wait_h = (h.first_start_s - h.submit_time_s) / 3600
        wait_s = (s.first_start_s - s.submit_time_s) / 3600
        print(f"  {job_id}: {wait_h - wait_s:+.2f}  has wait {wait_h:.2f} run {run_h:.2f} "
              f"{h.gpu_type} x{h.num_gpus} r{h.restarts} | sia wait {wait_s:.2f} run {run_s:.2f} "
              f"{s.gpu_type} x{s.num_gpus}  best {best_h:.2f}  submit {h.submit_time_s:.0f}")
    print("largest run-time gaps (has - sia h; has run h, type x GPUs, restarts | sia ...; "
          "best option h):")
    for gap, job_id, run_h, run_s, h, s, best_h in sorted(rows, reverse=True)[:args.top]:
        print(f"  {job_id}: {gap:+.2f}  has {run_h:.2f} {h.gpu_type} x{h.num_gpus} r{h.restarts}"
              f" | sia {run_s:.2f} {s.gpu_type} x{s.num_gpus} r{s.restarts}  best {best_h:.2f}")


if __name__ == "__main__":
    main()
