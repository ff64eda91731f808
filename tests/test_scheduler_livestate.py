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
