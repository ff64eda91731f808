import math

from frenzy.convert import option_to_proto
from frenzy.domain import ParallelPlan, PlanOption
from frenzy.v1 import events_pb2, types_pb2
from frenzy_scheduler.livestate import LiveState
from frenzy_scheduler.policies import get_policy

OPTION = PlanOption("A100-80GB", ParallelPlan(dp=2), 10, 1.0, 100.0)


def status(job_id, state, version, attempt=0):
    return events_pb2.JobStatusChanged(job_id=job_id, state=state, attempt=attempt,
                                       source=events_pb2.ORCHESTRATOR,
                                       job=types_pb2.Job(id=job_id, state=state, version=version))


def availability(free, version, jobs=()):
    return events_pb2.GpuAvailabilityChanged(node_id="n1", gpu_type="A100-80GB", gpus_total=4,
                                             free_gpu_indices=free, node_state=types_pb2.NODE_READY,
                                             version=version, allocated_jobs=list(jobs))


def test_job_waits_for_both_plan_and_queued_in_any_order():
    state = LiveState(get_policy("fifo"))
    state.on_availability(availability([0, 1, 2, 3], 1))
    state.on_status(status("a", types_pb2.QUEUED, 3))
    assert state.schedule(0) == []
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(OPTION)]))
    [(placement, attempt)] = state.schedule(0)
    assert placement.job_id == "a" and attempt == 0
    assert state.schedule(0) == []  # pending: not placed twice


def test_pending_gpus_are_hidden_until_orchestrator_shows_them_and_rejection_requeues():
    state = LiveState(get_policy("fifo"))
    state.on_availability(availability([0, 1, 2, 3], 1))
    for job in ("a", "b", "c"):
        state.on_planned(events_pb2.JobPlanned(job_id=job, options=[option_to_proto(OPTION)]))
        state.on_status(status(job, types_pb2.QUEUED, 3))
    placed = [p.job_id for p, _ in state.schedule(0)]
    assert placed == ["a", "b"]
    state.on_availability(availability([0, 1, 2, 3], 2))  # stale: before the orchestrator saw a and b
    assert state.schedule(0) == []
    state.on_status(status("b", types_pb2.QUEUED, 4))  # rejected
    state.on_availability(availability([2, 3], 3, jobs=["a"]))
    assert [p.job_id for p, _ in state.schedule(0)] == ["b"]
    state.on_status(status("a", types_pb2.QUEUED, 2))  # an old version arriving late is ignored
    assert "a" not in [j.job_id for j in state.waiting()]


class _Recorder:
    """A policy that places nothing and remembers the running jobs it was shown."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[dict[str, tuple[float, float]]] = []

    def schedule(self, queue, cluster, now_s, running=()):
        self.seen.append({r.job_id: (r.start_time_s, r.expected_end_s) for r in running})
        return []


def test_jobs_holding_gpus_reach_the_policy_as_running() -> None:
    state = LiveState(get_policy("fifo"))
    state.on_availability(availability([0, 1, 2, 3], 1))
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(OPTION)]))
    state.on_status(status("a", types_pb2.QUEUED, 3))
    [(placement, _)] = state.schedule(50.0)
    assert state.running["a"].expected_end_s == 150.0  # our placement: now + predicted duration
    recorder = _Recorder()
    state.policy = recorder
    state.on_planned(events_pb2.JobPlanned(job_id="b", options=[option_to_proto(OPTION)]))
    state.on_status(status("b", types_pb2.QUEUED, 3))
    record = types_pb2.Job(id="a", state=types_pb2.RUNNING, version=5, option=option_to_proto(OPTION),
                           assignments=[types_pb2.GpuAssignment(node_id=n, gpu_indices=g)
                                        for n, g in placement.assignments])
    record.started_at.FromSeconds(60)
    state.on_status(events_pb2.JobStatusChanged(job_id="a", state=types_pb2.RUNNING,
                                                source=events_pb2.ORCHESTRATOR, job=record))
    state.schedule(70.0)
    assert recorder.seen[-1] == {"a": (60.0, 160.0)}  # the orchestrator's start time wins
    state.schedule(170.0)
    assert recorder.seen[-1] == {"a": (60.0, math.inf)}  # overdue: its end is unknown
    state.on_status(status("a", types_pb2.SUCCEEDED, 6))
    state.schedule(200.0)
    assert recorder.seen[-1] == {}


def test_restore_rebuilds_queue_running_jobs_and_nodes_from_latest_records():
    planned = [events_pb2.JobPlanned(job_id=j, options=[option_to_proto(OPTION)])
               for j in ("queued", "running", "done")]
    running = types_pb2.Job(id="running", state=types_pb2.RUNNING, version=6,
                            option=option_to_proto(OPTION),
                            assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=[0, 1])])
    running.started_at.FromSeconds(1000)
    jobs = [types_pb2.Job(id="queued", state=types_pb2.QUEUED, version=3), running,
            types_pb2.Job(id="done", state=types_pb2.SUCCEEDED, version=9)]
    state = LiveState(get_policy("fifo"))
    state.restore(planned, jobs, [availability([2, 3], 7, jobs=["running"])])
    assert [j.job_id for j in state.waiting()] == ["queued"]
    assert set(state.running) == {"running"} and "done" not in state.jobs
    [(placement, _)] = state.schedule(1001)
    assert placement.job_id == "queued" and placement.assignments == (("n1", (2, 3)),)
    state.on_status(status("queued", types_pb2.QUEUED, 2))  # older than the restored record
    assert state.schedule(1001) == []


def test_placement_carries_the_decision_record_and_bad_actions_are_dropped():
    from frenzy_scheduler.core import Placement
    from frenzy_scheduler.service import decision_to_proto

    state = LiveState(get_policy("has", elastic=False))
    state.on_availability(availability([0, 1, 2, 3], 1))
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(OPTION)]))
    state.on_status(status("a", types_pb2.QUEUED, 3))
    [(placement, _)] = state.schedule(0)
    record = decision_to_proto(placement.decision, "has", 0.0, 0.001)
    assert record.policy == "has" and record.reason
    assert record.chosen.gpu_type == "A100-80GB" and record.alternatives[0].verdict == "chosen"

    class DoubleBooker:  # places every queued job on GPU 0, whatever is free
        name, round_s = "bad", 0.0

        def schedule(self, queue, cluster, now_s, running=()):
            return [Placement(j.job_id, OPTION, (("n1", (0, 1)),)) for j in queue]

    bad = LiveState(DoubleBooker())
    bad.on_availability(availability([2, 3], 1))
    bad.on_planned(events_pb2.JobPlanned(job_id="b", options=[option_to_proto(OPTION)]))
    bad.on_status(status("b", types_pb2.QUEUED, 3))
    assert bad.schedule(0) == []  # the shared check refuses busy GPUs: nothing is published


def test_running_view_carries_progress_rate_and_checkpoint_age() -> None:
    """From the orchestrator's job records: the work left at this start (steps after the
    resume), the rate measured from the steps seen (startup excluded), and how old the newest
    committed checkpoint is; a job that never committed one does not save on request."""
    state = LiveState(get_policy("fifo"))
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(OPTION)]))

    def record(step: int, version: int, checkpoint: int | None = None, attempt: int = 1):
        job = types_pb2.Job(id="a", state=types_pb2.RUNNING, version=version, attempt=attempt,
                            option=option_to_proto(OPTION), resumed_from_step=20,
                            progress=types_pb2.Progress(step=step, steps=100),
                            assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=[0, 1])])
        job.started_at.FromSeconds(1000)
        if checkpoint is not None:
            job.checkpoint_step = checkpoint
        return events_pb2.JobStatusChanged(job_id="a", state=types_pb2.RUNNING, attempt=attempt,
                                           source=events_pb2.ORCHESTRATOR, job=job)

    state.on_status(record(0, 1, checkpoint=20), now_s=1002.0)  # launched, restoring
    state.on_status(record(25, 2, checkpoint=20), now_s=1010.0)  # its first steps
    run = state.running["a"]
    assert run.fraction_at_start == 0.8 and run.option.duration_s == 80.0  # 80 of 100 steps left
    assert run.expected_end_s == 1080.0 and run.fraction_per_s == 0.0  # no rate from one report
    assert run.saves_on_request and run.last_checkpoint_s == 0.0  # the restored one: from the start
    state.on_status(record(45, 3, checkpoint=40), now_s=1030.0)
    run = state.running["a"]
    assert run.step == 45 and run.checkpoint_step == 40
    assert math.isclose(run.fraction_per_s, 0.01)  # 20 steps of 100 in 20 s
    assert math.isclose(run.restoring_until_s, 1030.0 - 25.0)  # 25 steps since the resume at that rate
    assert math.isclose(run.remaining_fraction(1030.0), 0.55)
    assert run.checkpoint_age_s(1036.0) == 6.0 and run.redo_s(1036.0) == 0.0

    state.on_status(record(5, 4, attempt=2), now_s=2000.0)  # a fresh attempt, never checkpointed
    run = state.running["a"]
    assert not run.saves_on_request and run.checkpoint_age_s(2000.0) == 1000.0  # since its start
    assert run.redo_s(2000.0) == 1000.0


def test_the_service_runs_the_policy_once_per_batch_and_publishes_its_placements_together():
    """The shell around LiveState: events only change the view; after the batch (before its
    offsets are committed) the policy runs once and every placement goes out in one pipelined
    publish. A batch that changed nothing publishes nothing."""
    import asyncio

    from frenzy import topics
    from frenzy.events import envelope
    from frenzy_scheduler.service import SchedulerService

    class RecordingBus:
        def __init__(self):
            self.published = []

        async def publish_many(self, items, contexts=None, trace_ids=None):
            self.published.append((items, trace_ids))

    bus = RecordingBus()
    service = SchedulerService(bus, "fifo")
    two_nodes = [availability([0, 1, 2, 3], 1)]

    async def scenario():
        for event in two_nodes:
            await service.on_availability(envelope(event), "n1")
        for job in ("a", "b"):
            await service.on_planned(envelope(events_pb2.JobPlanned(
                job_id=job, options=[option_to_proto(OPTION)])), job)
            await service.on_status(envelope(status(job, types_pb2.QUEUED, 3)), job)
        assert bus.published == []  # nothing decided while the batch is handled
        await service.schedule_if_changed()
        await service.schedule_if_changed()  # nothing new since

    asyncio.run(scenario())
    [(items, trace_ids)] = bus.published
    assert [(t, key) for t, key, _ in items] == [(topics.JOBS_PLACED, "a"), (topics.JOBS_PLACED, "b")]
    assert trace_ids == ["a", "b"]
    assert {tuple(a.gpu_indices) for _, _, m in items for a in m.assignments} == {(0, 1), (2, 3)}


def test_a_job_held_for_a_release_is_decided_again_at_the_predicted_end_without_an_event():
    """`has` holds a job for GPUs a running job is predicted to free in two seconds. That job
    overruns and sends nothing: no event comes. The service's timer runs the policy at the
    predicted end, where the job is shown as ending never, so the held job starts on what is
    free. (Before: it waited for some event, possibly the overrunning job's end.)"""
    import asyncio
    import time

    from frenzy.config import ServiceSettings
    from frenzy.events import envelope
    from frenzy_scheduler.service import SchedulerService

    class RecordingBus:
        def __init__(self):
            self.published = []

        async def publish_many(self, items, contexts=None, trace_ids=None):
            self.published.extend(items)

    # r runs on 3 of the 4 GPUs; q's wide option (2 GPUs, its fair share of the 4 beside r)
    # waits for r's end, its narrow one fits the free GPU now
    held = PlanOption("A100-80GB", ParallelPlan(dp=3), 10, 1.0, 2000.0)
    wide = PlanOption("A100-80GB", ParallelPlan(dp=2), 10, 1.0, 1000.0)
    narrow = PlanOption("A100-80GB", ParallelPlan(dp=1), 10, 1.0, 2000.0)
    bus = RecordingBus()
    service = SchedulerService(bus, "has", ServiceSettings(reshape_jobs=False, scheduler_redecide_s=600))

    async def scenario():
        await service.on_availability(envelope(availability([3], 1, jobs=["r"])), "n1")
        record = types_pb2.Job(id="r", state=types_pb2.RUNNING, version=5, option=option_to_proto(held),
                               assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=[0, 1, 2])])
        record.started_at.FromNanoseconds(int((time.time() - held.duration_s + 2.0) * 1e9))
        await service.on_status(envelope(events_pb2.JobStatusChanged(
            job_id="r", state=types_pb2.RUNNING, source=events_pb2.ORCHESTRATOR, job=record)), "r")
        await service.on_planned(envelope(events_pb2.JobPlanned(
            job_id="q", options=[option_to_proto(wide), option_to_proto(narrow)])), "q")
        await service.on_status(envelope(status("q", types_pb2.QUEUED, 3)), "q")
        await service.schedule_if_changed()
        assert bus.published == []  # held: the 2-GPU option is worth the two-second wait
        timer = asyncio.create_task(service.redecide_loop())
        started = time.monotonic()
        try:
            while not bus.published and time.monotonic() - started < 30:
                await asyncio.sleep(0.02)
        finally:
            timer.cancel()
        return time.monotonic() - started

    waited_s = asyncio.run(scenario())
    [(_, key, placed)] = bus.published
    assert key == "q" and placed.option.num_gpus == 1, placed
    assert [tuple(a.gpu_indices) for a in placed.assignments] == [(3,)]
    assert 1.0 < waited_s < 30, waited_s  # just after the predicted end, not the 600 s fallback


def _running(job_id, gpus, start_s, version=5):
    record = types_pb2.Job(id=job_id, state=types_pb2.RUNNING, version=version,
                           option=option_to_proto(OPTION),
                           assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=gpus)])
    record.started_at.FromSeconds(start_s)
    return events_pb2.JobStatusChanged(job_id=job_id, state=types_pb2.RUNNING,
                                       source=events_pb2.ORCHESTRATOR, job=record)


def _two_running_one_queued() -> LiveState:
    """n1 full: r (started at t=10) on GPUs 0-1, s (t=50) on 2-3; q queued, waiting for two;
    fifo decides and holds ahead."""
    state = LiveState(get_policy("fifo"), hold_policy=get_policy("fifo"))
    state.on_availability(availability([], 1, jobs=["r", "s"]))
    state.on_status(_running("r", [0, 1], 10))
    state.on_status(_running("s", [2, 3], 50))
    state.on_planned(events_pb2.JobPlanned(job_id="q", options=[option_to_proto(OPTION)]))
    state.on_status(status("q", types_pb2.QUEUED, 3))
    return state


def test_holds_ahead_place_a_waiting_job_on_the_first_job_to_end_and_follow_the_outcome():
    """n1 is full: r ends first (t=110), s later (t=150). The hold is the policy's placement of
    q as if r had just ended, on r's GPUs; unchanged, it is not published again. Carried out by
    the orchestrator (the availability lists q), q no longer waits; dropped by it (the
    availability shows r's GPUs free, q still queued), the usual decision places q."""
    def state_with_queue():
        state = _two_running_one_queued()
        assert state.schedule(100.0) == []
        return state

    state = state_with_queue()
    [(ending, attempt, [(placement, placed_attempt)])] = state.holds_ahead(100.0, 1)
    assert (ending, attempt, placed_attempt) == ("r", 0, 0)
    assert placement.job_id == "q" and placement.assignments == (("n1", (0, 1)),)
    assert state.holds_ahead(100.5, 1) == []  # unchanged
    state.on_availability(availability([], 2, jobs=["q", "s"]))  # launched on r's end
    assert state.waiting() == [] and state.schedule(101.0) == []

    state = state_with_queue()
    state.holds_ahead(100.0, 1)
    state.on_availability(availability([0, 1], 2, jobs=["s"]))  # the hold was stale
    state.on_status(status("r", types_pb2.SUCCEEDED, 6))
    [(placement, _)] = state.schedule(101.0)
    assert placement.job_id == "q" and placement.assignments == (("n1", (0, 1)),)
    # r is gone and q placed: nothing waits, so the hold for s (none was published) stays empty
    assert state.holds_ahead(101.0, 1) == []


def test_holds_ahead_are_withdrawn_when_nothing_waits_and_off_without_a_hold_policy():
    state = _two_running_one_queued()
    assert [h[0] for h in state.holds_ahead(100.0, 2)] == ["r", "s"]  # q held on each
    state.on_status(status("q", types_pb2.CANCELLED, 4))
    assert sorted((ending, kept) for ending, _, kept in state.holds_ahead(101.0, 2)) == \
        [("r", []), ("s", [])]
    assert LiveState(get_policy("fifo")).holds_ahead(100.0, 2) == []


def test_our_placement_of_a_job_a_hold_placed_elsewhere_does_not_hide_its_gpus():
    state = LiveState(get_policy("fifo"))
    state.on_availability(availability([2, 3], 1, jobs=["r"]))
    state.on_status(_running("r", [0, 1], 10))
    state.on_planned(events_pb2.JobPlanned(job_id="q", options=[option_to_proto(OPTION)]))
    state.on_status(status("q", types_pb2.QUEUED, 3))
    [(placement, _)] = state.schedule(100.0)
    assert placement.assignments == (("n1", (2, 3)),) and "q" in state.pending
    # The orchestrator had launched q from a hold on r's GPUs: ours was ignored.
    state.on_status(status("r", types_pb2.SUCCEEDED, 6))
    state.on_availability(availability([2, 3], 2, jobs=["q"]))
    state.on_status(_running("q", [0, 1], 101, version=6))
    assert "q" not in state.pending and state.effective_cluster().nodes["n1"].free_gpus == [2, 3]


def test_the_live_has_plans_moves_under_the_orchestrators_reshape_interval():
    """The orchestrator refuses a reshape within FRENZY_RESHAPE_MIN_INTERVAL_S of a job's last
    start; the live has (its deciding and its holds-ahead instance) must use the same interval,
    or it plans growth the orchestrator vetoes. The default is the one constant both share."""
    from frenzy.config import ServiceSettings
    from frenzy.domain import RESHAPE_MIN_INTERVAL_S
    from frenzy_scheduler.service import SchedulerService

    for interval_s in (RESHAPE_MIN_INTERVAL_S, 900.0):
        service = SchedulerService(object(), "has", ServiceSettings(reshape_min_interval_s=interval_s,
                                                                    scheduler_holds_ahead=2))
        for wrapped in (service.state.policy, service.state.hold_policy):
            assert wrapped.inner.config.reshape_interval_s == interval_s


class Failing:
    """A policy with a bug: it raises on every call."""

    name = "failing"
    round_s = 0.0

    def schedule(self, queue, cluster, now_s, running=()):
        raise ZeroDivisionError("float division by zero")


def test_a_policy_that_raises_does_not_stop_the_scheduler_and_fifo_places_the_decision(caplog):
    """Restarted, a scheduler whose policy raised would read the same state back and raise
    again: the decision falls back to FIFO instead (checked as any), and the error is logged
    with its traceback. A what-if run of the holds ahead gives nothing."""
    state = LiveState(Failing())
    state.on_availability(availability([0, 1, 2, 3], 1))
    state.on_planned(events_pb2.JobPlanned(job_id="a", options=[option_to_proto(OPTION)]))
    state.on_status(status("a", types_pb2.QUEUED, 3))
    with caplog.at_level("ERROR", logger="scheduler"):
        [(placement, attempt)] = state.schedule(0)
    assert (placement.job_id, placement.option, attempt) == ("a", OPTION, 0)
    assert placement.decision.policy == "fifo"
    failed = [r for r in caplog.records if r.getMessage().startswith("policy failed")]
    assert failed and failed[0].exc_info is not None and failed[0].policy == "failing"
    assert LiveState._answer(Failing(), [], state.effective_cluster(), 0.0, [],
                             fallback=False) == []
