"""HAS's admission step (`HasPolicy._admit`) skips head jobs that no shrink plan can admit: a
job none of whose types has GPUs to spare, and every job once no running job can spare any.
That never changes an answer: the fast path against the straightforward one
(`shortcuts=False`, which scans every head job's options), decision by decision."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frenzy_scheduler.core import ClusterView, NodeState, QueuedJob, RunningJob
from frenzy_scheduler.policies.has import HasConfig, HasPolicy
from test_has_early_stop import decide_through, option, scenarios

# Admission on (shrink_after_s 0), with and without displacement, and a low bar for a plan
# (small gains pass), so plans are found in some decisions and refused in others
CONFIGS = [HasConfig(), HasConfig(displace=False), HasConfig(min_gain_s=0.0, min_gain_fraction=0.0),
           HasConfig(launch_overhead_s=0.0, restart_floor_s=10.0, min_gain_s=0.0)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(CONFIGS))
def test_admission_skips_decide_like_the_whole_scan(scenario, config) -> None:
    decide_through(scenario, config)


def test_a_shrink_still_admits_after_a_job_with_nothing_to_spare() -> None:
    """Worked by hand. Two head jobs wait: "t4" only runs on T4s, where no running job can
    give a GPU (the one there runs on its narrowest option), so its scan is skipped; "a100"
    runs on the A100s, where "wide" holds all 4 and may shrink to 2 (its option on 2 GPUs is
    barely slower). Shrinking "wide" admits "a100" days earlier than waiting for it to end,
    so admission shrinks it; the straightforward path gives the same answer."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 4, []),
                           "t": NodeState("t", "T4", 1, [])})
    wide_menu = (option("A100-80GB", 4, 2e5), option("A100-80GB", 2, 2.2e5))
    running = [RunningJob("wide", wide_menu[0], (("a", (0, 1, 2, 3)),), 0.0, 2e5, wide_menu),
               RunningJob("slim", option("T4", 1, 3e5), (("t", (0,)),), 0.0, 3e5,
                          (option("T4", 1, 3e5),))]
    queue = [QueuedJob("t4", 0.0, (option("T4", 1, 1e3),)),
             QueuedJob("a100", 0.0, (option("A100-80GB", 2, 2e3),))]
    config = HasConfig(launch_overhead_s=0.0)
    fast = HasPolicy(config).schedule(queue, cluster, 100.0, running)
    assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, 100.0, running)
    assert [(p.job_id, p.kind, p.option.num_gpus) for p in fast] == \
        [("wide", "resize", 2), ("a100", "place", 2)]
