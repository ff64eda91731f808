"""The live reshape rules (frenzy_scheduler.reshapable) and how the live view applies them: a
job that cannot resume reaches the policy without its menu and is never reshaped, whatever the
policy answers; a published reshape blocks further ones and keeps its GPUs taken until the
orchestrator has carried it out; the menu is put in the job's measured seconds."""
from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from frenzy.convert import option_to_proto
from frenzy.domain import ParallelPlan, PlanOption
from frenzy.v1 import events_pb2, types_pb2
from frenzy_scheduler.core import RESIZE, Placement
from frenzy_scheduler.livestate import LiveState
from frenzy_scheduler.reshapable import ReshapeFacts, ReshapeRules, reshape_facts, reshape_veto

RULES = ReshapeRules(min_interval_s=600.0, young_s=120.0)
NARROW = PlanOption("A100-80GB", ParallelPlan(dp=1), 1, 1.0, 200.0)
WIDE = PlanOption("A100-80GB", ParallelPlan(dp=2), 2, 1.0, 100.0)
MOVABLE = ReshapeFacts(running=True, pinned=False, deadline=False, checkpoints=True,
                       committed=True, start_s=1000.0, reshaping=False, reshaped_at_s=0.0)


def test_each_rule_vetoes_on_its_own():
    now_s = 1500.0
    assert reshape_veto(MOVABLE, now_s, RULES) is None
    vetoed = {"pinned": replace(MOVABLE, pinned=True), "deadline": replace(MOVABLE, deadline=True),
              "checkpoints": replace(MOVABLE, checkpoints=False),
              "running": replace(MOVABLE, running=False),
              "in flight": replace(MOVABLE, reshaping=True),
              "interval": replace(MOVABLE, reshaped_at_s=now_s - 599.0),
              "old without a checkpoint": replace(MOVABLE, committed=False, start_s=now_s - 121.0)}
    for name, facts in vetoed.items():
        assert reshape_veto(facts, now_s, RULES), name
    # young enough without a checkpoint, and a reshape long enough ago, are fine
    assert reshape_veto(replace(MOVABLE, committed=False, start_s=now_s - 119.0), now_s, RULES) is None
    assert reshape_veto(replace(MOVABLE, reshaped_at_s=now_s - 600.0), now_s, RULES) is None


@given(pinned=st.booleans(), deadline=st.booleans(), entrypoint=st.booleans(),
       every_steps=st.sampled_from([0, 5]), every_s=st.sampled_from([0.0, 30.0]),
       committed=st.booleans(), state=st.sampled_from([types_pb2.PLACED, types_pb2.RUNNING]),
       reshaping=st.booleans(), age_s=st.floats(0, 10_000), since_reshape_s=st.floats(0, 10_000))
def test_a_job_is_movable_only_if_it_can_resume_and_nothing_forbids_it(
        pinned, deadline, entrypoint, every_steps, every_s, committed, state, reshaping, age_s,
        since_reshape_s):
    now_s = 20_000.0
    spec = types_pb2.JobSpec(
        entrypoint=["python", "-m", "frenzy_trainer"] if entrypoint else [],
        training=types_pb2.TrainingConfig(checkpoint_every_steps=every_steps, checkpoint_every_s=every_s),
        constraints=types_pb2.Constraints(pinned=pinned))
    if deadline:
        spec.constraints.deadline.FromSeconds(30_000)
    record = types_pb2.Job(id="a", spec=spec, state=state, reshaping=reshaping)
    if committed:
        record.checkpoint_step = 5
    record.reshaped_at.FromNanoseconds(int((now_s - since_reshape_s) * 1e9))
    movable = reshape_veto(reshape_facts(record, now_s - age_s), now_s, RULES) is None
    can_resume = entrypoint and (every_steps or every_s) and (committed or age_s < 120.0)
    assert movable == bool(can_resume and not pinned and not deadline and state == types_pb2.RUNNING
                           and not reshaping and since_reshape_s >= 600.0)


class _GrowAll:
    """A policy that resizes every running job it may (those shown with options) to WIDE on
    GPUs 2 and 3, and remembers what it was shown."""

    name, round_s = "grow-all", 0.0

    def __init__(self) -> None:
        self.shown: list[dict] = []

    def schedule(self, queue, cluster, now_s, running=()):
        self.shown.append({r.job_id: r for r in running})
        return [Placement(r.job_id, r.options[-1], (("n1", (2, 3)),), RESIZE)  # WIDE, as shown
                for r in running if r.options]


class _ResizeRegardless(_GrowAll):
    """... and one that ignores the rules: resizes every running job."""

    def schedule(self, queue, cluster, now_s, running=()):
        self.shown.append({r.job_id: r for r in running})
        return [Placement(r.job_id, WIDE, (("n1", (2, 3)),), RESIZE) for r in running]


def _state(policy) -> LiveState:
    state = LiveState(policy, rules=RULES)
    state.on_availability(events_pb2.GpuAvailabilityChanged(
        node_id="n1", gpu_type="A100-80GB", gpus_total=4, free_gpu_indices=[2, 3],
        node_state=types_pb2.NODE_READY, version=1, allocated_jobs=["a"]))
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(NARROW),
                                                                option_to_proto(WIDE)]))
    return state


def _running(version: int, step: int, *, attempt: int = 0, checkpoint: int | None = 5,
             every_steps: int = 5, reshaping: bool = False, state=types_pb2.RUNNING):
    job = types_pb2.Job(
        id="a", state=state, version=version, attempt=attempt, option=option_to_proto(NARROW),
        spec=types_pb2.JobSpec(entrypoint=["python", "-m", "frenzy_trainer"],
                               training=types_pb2.TrainingConfig(checkpoint_every_steps=every_steps)),
        progress=types_pb2.Progress(step=step, steps=100), reshaping=reshaping,
        assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=[0])])
    job.placed_at.FromSeconds(997)
    job.started_at.FromSeconds(1000)
    if checkpoint is not None:
        job.checkpoint_step = checkpoint
    return events_pb2.JobStatusChanged(job_id="a", state=state, attempt=attempt,
                                       source=events_pb2.ORCHESTRATOR, job=job)


def test_a_job_that_cannot_resume_is_shown_without_its_menu_and_never_reshaped():
    for policy in (_GrowAll(), _ResizeRegardless()):
        state = _state(policy)
        state.on_status(_running(1, 10, checkpoint=None, every_steps=0), now_s=1010.0)
        assert state.schedule(1010.0) == []  # nothing queued and nothing movable: no decision
        state.on_planned(events_pb2.JobPlanned(job_id="q", options=[option_to_proto(NARROW)]))
        state.on_status(events_pb2.JobStatusChanged(
            job_id="q", state=types_pb2.QUEUED, source=events_pb2.ORCHESTRATOR,
            job=types_pb2.Job(id="q", state=types_pb2.QUEUED, version=1)))
        assert state.schedule(1011.0) == []  # the resize of `a` is dropped whatever the policy
        assert policy.shown[-1]["a"].options == ()
        # the same job with a checkpoint interval and a committed checkpoint is resized
        state.on_status(_running(2, 20), now_s=1020.0)
        assert [(p.job_id, p.kind) for p, _ in state.schedule(1020.0)] == [("a", RESIZE)]


def test_a_published_reshape_blocks_further_ones_and_holds_its_gpus_until_carried_out():
    state = _state(_GrowAll())
    state.on_status(_running(1, 10), now_s=1010.0)
    state.on_status(_running(2, 30), now_s=1030.0)
    [(resize, attempt)] = state.schedule(1030.0)
    assert resize.kind == RESIZE and attempt == 0
    assert resize.option == WIDE  # as MARP planned it, not in the job's measured seconds
    assert state.effective_cluster().nodes["n1"].free_gpus == []  # GPUs 2, 3 wait for it
    state.on_status(_running(3, 32), now_s=1031.0)  # the orchestrator has not taken it yet
    assert state.schedule(1031.0) == []
    state.on_status(_running(4, 33, reshaping=True), now_s=1032.0)  # it is checkpointing
    assert state.schedule(1032.0) == []
    # carried out: the new attempt runs; the orchestrator's record of the reshape now holds it
    new = _running(5, 40, attempt=1, checkpoint=35)
    new.job.reshaped_at.FromSeconds(1032)
    state.on_status(new, now_s=1040.0)
    assert "a" not in state.reshaping and state.schedule(1040.0) == []
    assert state.veto("a", 1040.0).startswith("reshaped 8 s ago")
    assert state.veto("a", 1032.0 + 600.0) is None


def test_the_menu_is_put_in_the_jobs_measured_seconds_with_its_measured_restart():
    """MARP predicts 200 s for all the work on NARROW; the job does a step a second (100 s for
    all of it): every option of its menu is halved, and the restart a move would cost is what
    its own start cost (from its placement, 3 s before it ran, to its first step: 11 s)."""
    state = _state(_GrowAll())
    state.on_status(_running(1, 2), now_s=1010.0)  # its first steps, 10 s after the start
    run = state.running["a"]
    assert run.restart_s == 0.0 and [o.duration_s for o in run.options] == [200.0, 100.0]
    state.on_status(_running(2, 22), now_s=1030.0)
    run = state.running["a"]
    assert math.isclose(run.fraction_per_s, 0.01)
    assert [o.duration_s for o in run.options] == [100.0, 50.0]
    assert math.isclose(run.option.duration_s, 100.0)  # fresh start: all its work
    assert math.isclose(run.restart_s, 11.0)


def test_before_any_move_the_restart_adds_the_save_its_trainer_reported():
    """Placement to first step leaves out a move's save; the trainer reports how long its last
    checkpoint took (start to commit): 11 s + 4 s."""
    state = _state(_GrowAll())
    for version, step, now_s in ((1, 2, 1010.0), (2, 22, 1030.0)):
        status = _running(version, step)
        status.job.progress.checkpoint_write_s = 4.0
        state.on_status(status, now_s=now_s)
    assert math.isclose(state.running["a"].restart_s, 11.0 + 4.0)


def test_after_a_move_of_ours_the_restart_is_measured_from_its_decision():
    """A first start measures placement to first step (11 s here); after a reshape the scheduler
    published, the new attempt's restart is measured from that decision, so it holds the save
    on request and the stop too (1030 -> its first productive step at 1060: 30 s)."""
    state = _state(_GrowAll())
    state.on_status(_running(1, 10), now_s=1010.0)
    state.on_status(_running(2, 30), now_s=1030.0)
    [(resize, _)] = state.schedule(1030.0)
    assert resize.kind == RESIZE
    for version, step, now_s in ((5, 40, 1055.0), (6, 50, 1060.0), (7, 60, 1065.0)):
        new = _running(version, step, attempt=1, checkpoint=35)
        new.job.reshaped_at.FromSeconds(1031)
        new.job.resumed_from_step = 35
        new.job.placed_at.FromSeconds(1045)
        new.job.started_at.FromSeconds(1046)
        new.job.progress.checkpoint_write_s = 4.0  # inside the measure already: not added
        state.on_status(new, now_s=now_s)
    # from step 40 at 1055 to 60 at 1065: 2 steps/s, so step 35 was productive from 1052.5
    assert math.isclose(state.running["a"].restart_s, 1052.5 - 1030.0)
    # another attempt (a node lost, say) is measured from its own placement again
    later = _running(8, 70, attempt=2, checkpoint=65)
    later.job.resumed_from_step = 65
    later.job.placed_at.FromSeconds(1100)
    later.job.started_at.FromSeconds(1101)
    later.job.progress.checkpoint_write_s = 4.0
    state.on_status(later, now_s=1105.0)
    state.on_status(_with(later, 9, 80), now_s=1110.0)
    assert math.isclose(state.running["a"].restart_s, 1105.0 - 5 / 2 - 1100.0 + 4.0)


def _with(status: events_pb2.JobStatusChanged, version: int, step: int) -> events_pb2.JobStatusChanged:
    copy = events_pb2.JobStatusChanged()
    copy.CopyFrom(status)
    copy.job.version, copy.job.progress.step = version, step
    return copy


def test_has_weighs_a_growth_against_the_restart_the_job_measured():
    """A lone job with 100 s left on NARROW could take WIDE (50 s): has grows it when its own
    measured restart costs less than the 50 s saved, and not when it costs more; unmeasured,
    has's configured restart (120 s + a 60 s launch) decides, and that is more."""
    from frenzy_scheduler.core import ClusterView, NodeState, RunningJob
    from frenzy_scheduler.policies import get_policy

    cluster = ClusterView({"n1": NodeState("n1", "A100-80GB", 4, [1, 2, 3])})

    def moves(restart_s: float) -> list[str]:
        run = RunningJob("a", NARROW, (("n1", (0,)),), 1000.0, 1200.0, (NARROW, WIDE),
                         restoring_until_s=1000.0, fraction_per_s=1 / 200, restart_s=restart_s)
        policy = get_policy("has", min_gain_s=0.0, min_gain_fraction=0.0)
        return [p.kind for p in policy.schedule([], cluster, 1100.0, [run])]

    assert moves(10.0) == [RESIZE]
    assert moves(60.0) == []
    assert moves(0.0) == []


def test_a_spec_pins_its_job_with_constraints_pinned():
    from frenzy.jobspec import JobSpecModel

    def spec(**constraints) -> types_pb2.JobSpec:
        return JobSpecModel.model_validate({
            "name": "p", "model": "tiny-gpt2", "entrypoint": "python -m frenzy_trainer",
            "training": {"seq_len": 64, "global_batch_size": 8, "steps": 10, "checkpoint_every_steps": 5},
            "constraints": constraints}).to_proto()

    for pinned in (False, True):
        record = types_pb2.Job(id="a", spec=spec(pinned=pinned), state=types_pb2.RUNNING,
                               checkpoint_step=5)
        veto = reshape_veto(reshape_facts(record, 0.0), 10.0, RULES)
        assert (veto == "pinned by its spec") if pinned else veto is None
