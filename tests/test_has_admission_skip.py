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


def test_admission_charges_each_victim_its_own_restart() -> None:
    """Worked by hand. "wide" runs on all 4 A100s (1,000 s on 4, 1,100 s on 2) and at t = 700
    has 300 s left; "quick" needs 2 A100s for 50 s. Waiting for "wide" to end, "quick" is done
    in 350 s; admitted by shrinking "wide" to 2, in 50 s: a gain of 300 s. The loss is "wide"'s
    slowdown over those 50 s (50 x (1 - 1000 / 1100) = 4.5 s) plus what touching it costs
    (`elastic.touch_cost_s`), and the gain must beat the loss by 30 % (`min_gain_fraction`):
    * the policy's own restart (120 s, no launch here), twice: 1.3 x 244.5 = 318 > 300, wait;
    * its own measured restart, 30 s (live, `RunningJob.restart_s`): 1.3 x 64.5 = 84, admit;
    * the same, but "wide" does not save on request and committed no checkpoint in its 700 s
      of run, which the shrink throws away: 1.3 x 764.5 > 300, wait.
    The straightforward path, which prunes by no bound, agrees each time."""
    cluster = ClusterView({"a": NodeState("a", "A100-80GB", 4, [])})
    wide_menu = (option("A100-80GB", 4, 1000.0), option("A100-80GB", 2, 1100.0))
    queue = [QueuedJob("quick", 650.0, (option("A100-80GB", 2, 50.0),))]
    config = HasConfig(launch_overhead_s=0.0, restart_floor_s=120.0)

    def decide(**measured: object) -> list[tuple[str, str, int]]:
        wide = RunningJob("wide", wide_menu[0], (("a", (0, 1, 2, 3)),), 0.0, 1000.0, wide_menu,
                          **measured)  # type: ignore[arg-type]
        fast = HasPolicy(config).schedule(queue, cluster, 700.0, [wide])
        assert fast == HasPolicy(config, shortcuts=False).schedule(queue, cluster, 700.0, [wide])
        return [(p.job_id, p.kind, p.option.num_gpus) for p in fast]

    assert decide() == []
    assert decide(restart_s=30.0) == [("wide", "resize", 2), ("quick", "place", 2)]
    assert decide(restart_s=30.0, saves_on_request=False) == []
