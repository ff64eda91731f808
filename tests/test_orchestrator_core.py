"""The orchestrator's pure core: lifecycle legality, optimistic placement, liveness, OOM re-plan."""
from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from frenzy import topics
from frenzy.v1 import events_pb2, types_pb2
from frenzy.v1.types_pb2 import (CANCELLED, FAILED, LAUNCHING, PLACED, PLANNED, QUEUED, RUNNING,
                                 SUBMITTED, SUCCEEDED)
from frenzy_orchestrator import lifecycle
from frenzy_orchestrator.core import OrchestratorCore

STATES = [SUBMITTED, PLANNED, QUEUED, PLACED, LAUNCHING, RUNNING, SUCCEEDED, FAILED, CANCELLED]
SPEC = types_pb2.JobSpec(name="t", model="gpt2", training=types_pb2.TrainingConfig(
    seq_len=1024, global_batch_size=8, steps=10))


@given(st.lists(st.sampled_from(STATES), max_size=30))
def test_only_legal_transitions_are_accepted(targets):
    state = SUBMITTED
    for target in targets:
        if lifecycle.is_legal(state, target):
            lifecycle.check(state, target)
            state = target
        else:
            try:
                lifecycle.check(state, target)
            except lifecycle.IllegalTransition:
                continue
            raise AssertionError(f"{state}->{target} accepted")
    if state in lifecycle.TERMINAL:
        assert all(not lifecycle.is_legal(state, t) for t in STATES)


def test_terminal_states_have_no_exit_and_live_states_can_fail_or_cancel():
    for state in STATES:
        if state in lifecycle.TERMINAL:
            assert not lifecycle.LEGAL[state]
        else:
            assert {FAILED, CANCELLED} <= lifecycle.LEGAL[state]


def heartbeat(node_id: str, gpus: int = 4, gpu_type: str = "A100-80GB") -> events_pb2.NodeHeartbeat:
    return events_pb2.NodeHeartbeat(node_id=node_id, gpus=[
        types_pb2.GpuStatus(index=i, gpu_type=gpu_type, health=types_pb2.HEALTHY) for i in range(gpus)])


def queued_core(*job_ids: str) -> OrchestratorCore:
    core = OrchestratorCore(node_timeout_s=10, max_retries=2)
    for node in ("n1", "n2"):
        core.on_heartbeat(heartbeat(node), now_s=0)
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=2, peak_bytes_per_gpu=10 * 2**30)
    for job_id in job_ids:
        core.submit(job_id, SPEC, 0)
        core.on_planned(events_pb2.JobPlanned(job_id=job_id, options=[option]), 0)
        assert core.jobs[job_id].job.state == QUEUED
    return core


def placed(job_id: str, node: str, gpus: list[int], attempt: int = 0) -> events_pb2.JobPlaced:
    return events_pb2.JobPlaced(job_id=job_id, attempt=attempt,
                                option=types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=len(gpus)),
                                assignments=[types_pb2.GpuAssignment(node_id=node, gpu_indices=gpus)])


def test_double_placement_is_rejected_and_no_gpu_is_double_booked():
    core = queued_core("a", "b")
    out = core.on_placed(placed("a", "n1", [0, 1]), 1)
    assert core.jobs["a"].job.state == LAUNCHING
    assert [o.payload.node_id for o in out if o.topic == topics.AGENT_COMMANDS] == ["n1"]
    out = core.on_placed(placed("b", "n1", [1, 2]), 1)  # GPU 1 is taken: a stale view
    job_b = core.jobs["b"].job
    assert job_b.state == QUEUED and "placement rejected" in job_b.reason and "[1]" in job_b.reason
    assert core.nodes["n1"].allocations == {0: "a", 1: "a"}
    assert any(o.topic == topics.CLUSTER_EVENTS for o in out)  # the scheduler gets the true view
    core.on_placed(placed("b", "n1", [2, 3]), 2)
    assert core.nodes["n1"].allocations == {0: "a", 1: "a", 2: "b", 3: "b"}


def agent_status(job_id, state, node="n1", attempt=0, reason="", peak=0):
    return events_pb2.JobStatusChanged(job_id=job_id, state=state, source=events_pb2.AGENT, node_id=node,
                                       attempt=attempt, reason=reason,
                                       progress=types_pb2.Progress(peak_memory_bytes=peak))


def test_success_releases_gpus():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    out = core.on_agent_status(agent_status("a", SUCCEEDED), 3)
    assert core.jobs["a"].job.state == SUCCEEDED and not core.nodes["n1"].allocations
    freed = [o.payload for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert freed and list(freed[-1].free_gpu_indices) == [0, 1, 2, 3]


def test_lost_node_requeues_then_fails_after_max_retries():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_heartbeat(heartbeat("n2"), 11)
    core.check_liveness(11)  # n1 silent since t=0
    job = core.jobs["a"].job
    assert job.state == QUEUED and job.attempt == 1 and core.nodes["n1"].state == types_pb2.NODE_LOST
    assert core.on_placed(placed("a", "n1", [0, 1], attempt=1), 12)  # lost node: rejected
    assert "lost" in job.reason and job.state == QUEUED
    core.on_placed(placed("a", "n2", [0, 1], attempt=1), 12)
    core.check_liveness(30)
    assert job.state == QUEUED and job.attempt == 2
    assert core.on_agent_status(agent_status("a", SUCCEEDED, node="n2", attempt=1), 31) == []  # stale attempt
    core.on_heartbeat(heartbeat("n2"), 40)
    core.on_placed(placed("a", "n2", [0, 1], attempt=2), 40)
    core.check_liveness(60)
    assert job.state == FAILED and "retries exhausted" in job.reason


def test_oom_replans_once_with_more_memory():
    core = queued_core("a")
    core.jobs["a"].job.option.peak_bytes_per_gpu = 0
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    out = core.on_agent_status(agent_status("a", FAILED, reason="OOM: out of memory", peak=40 * 2**30), 2)
    job = core.jobs["a"].job
    assert job.state == SUBMITTED and job.attempt == 1 and "OOM" in job.reason
    resubmit = [o.payload for o in out if o.topic == topics.JOBS_SUBMITTED]
    assert resubmit and resubmit[0].min_memory_bytes > 40 * 2**30
    assert not core.nodes["n1"].allocations
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=2)
    core.on_planned(events_pb2.JobPlanned(job_id="a", attempt=1, options=[option]), 3)
    core.on_placed(placed("a", "n1", [0, 1], attempt=1), 4)
    core.on_agent_status(agent_status("a", FAILED, attempt=1, reason="OOM: again"), 5)
    assert job.state == FAILED  # only one re-plan


def test_rendezvous_failure_retries_on_a_new_port_from_step_0_then_fails_after_max_retries():
    core = queued_core("a")
    job = core.jobs["a"].job
    ports = []
    for attempt in range(3):  # max_retries=2: attempts 0, 1 and 2
        out = core.on_placed(placed("a", "n1", [0, 1], attempt=attempt), 1 + attempt)
        ports += [o.payload.master_port for o in out if o.topic == topics.AGENT_COMMANDS]
        running = agent_status("a", RUNNING, attempt=attempt)
        running.progress.step = 5
        core.on_agent_status(running, 1 + attempt)
        assert job.progress.step == 5  # the new attempt's progress is shown, not hidden by the old
        out = core.on_agent_status(agent_status(
            "a", FAILED, attempt=attempt, reason="RENDEZVOUS: DistNetworkError EADDRINUSE"), 1 + attempt)
        assert not core.nodes["n1"].allocations
        if attempt < 2:
            assert job.state == QUEUED and job.attempt == attempt + 1, job.reason
            assert "RENDEZVOUS" in job.reason and f"retry {attempt + 1}" in job.reason
            assert job.progress.step == 0 and not job.assignments
    assert job.state == FAILED and "retries exhausted" in job.reason
    assert len(ports) == 3 and len(set(ports)) == 3 and all(29500 <= p < 32768 for p in ports), ports


def test_processes_lost_with_their_agent_are_run_again_from_the_checkpoint():
    """LOST: the processes vanished without an exit code (their agent's container was killed).
    Nothing the program did, so a new attempt, like a lost node, resuming from the checkpoint."""
    core = queued_core("a")
    job = core.jobs["a"].job
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    running = agent_status("a", RUNNING)
    running.checkpoint_step = 10
    core.on_agent_status(running, 2)
    core.on_agent_status(agent_status(
        "a", FAILED, reason="LOST: process ended without recording an exit code "
                            "(ended while the agent was down)"), 3)
    assert job.state == QUEUED and job.attempt == 1 and "LOST" in job.reason
    launches = core.on_placed(placed("a", "n1", [0, 1], attempt=1), 4)
    assert [o.payload.resume_from_step for o in launches if o.topic == topics.AGENT_COMMANDS] == [10]


def test_plain_failure_is_not_retried():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", FAILED, reason="exit code 1"), 2)
    assert core.jobs["a"].job.state == FAILED and core.jobs["a"].job.attempt == 0


def test_cancel_sends_stop_and_is_idempotent():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    out = core.cancel("a", 2)
    assert core.jobs["a"].job.state == CANCELLED
    assert any(isinstance(o.payload, events_pb2.StopJob) for o in out)
    assert core.cancel("a", 3) == []


def test_duplicate_submit_is_ignored_and_invalid_spec_fails():
    core = OrchestratorCore()
    assert core.submit("a", SPEC, 0) and core.submit("a", SPEC, 1) == []
    bad = types_pb2.JobSpec(name="b", model="nope", training=SPEC.training)
    core.submit("b", bad, 0)
    assert core.jobs["b"].job.state == FAILED and "model" in core.jobs["b"].job.reason


def test_plan_arriving_before_its_submission_is_applied_on_submit():
    core = OrchestratorCore()
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=1)
    assert core.on_planned(events_pb2.JobPlanned(job_id="early", options=[option]), 0) == []
    core.submit("early", SPEC, 1)
    assert core.jobs["early"].job.state == QUEUED and not core.early_plans


def restarted(core: OrchestratorCore, now_s: float) -> OrchestratorCore:
    """A new core built only from the state records the old one emitted."""
    latest: dict[str, object] = {}
    for out in core.drain_state_records():
        assert out.topic == topics.ORCHESTRATOR_STATE
        latest[out.key] = out.payload
    fresh = OrchestratorCore(node_timeout_s=10, max_retries=2, epoch=core.epoch + 1)
    fresh.restore([v for k, v in latest.items() if k.startswith("job/")],
                  [v for k, v in latest.items() if k.startswith("early/") and v is not None], now_s)
    return fresh


def test_restart_from_state_records_keeps_jobs_and_allocations():
    core = queued_core("run", "wait", "done")
    core.on_placed(placed("run", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("run", RUNNING), 2)
    done = placed("done", "n2", [0])
    done.option.peak_bytes_per_gpu = 10 * 2**30
    core.on_placed(done, 1)
    core.on_agent_status(agent_status("done", SUCCEEDED, node="n2", peak=8 * 2**30), 3)
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=1)
    core.on_planned(events_pb2.JobPlanned(job_id="early", options=[option]), 3)
    old_version = core._availability(core.nodes["n1"], "probe").payload.version

    fresh = restarted(core, now_s=5)
    assert {j: r.job.state for j, r in fresh.jobs.items()} == {"run": RUNNING, "wait": QUEUED,
                                                               "done": SUCCEEDED}
    assert fresh.early_plans.keys() == {"early"}
    assert fresh.nodes["n1"].allocations == {0: "run", 1: "run"} and "n2" not in fresh.nodes
    assert fresh.memory_errors == [("A100-80GB", (10 - 8) / 8)]
    # A placement on the running job's GPUs is rejected; on free ones it is accepted.
    fresh.on_heartbeat(heartbeat("n1"), 6)
    out = fresh.on_placed(placed("wait", "n1", [1, 2]), 6)
    assert fresh.jobs["wait"].job.state == QUEUED and "not free" in fresh.jobs["wait"].job.reason
    versions = [o.payload.version for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert versions and min(versions) > old_version  # the scheduler must not drop them as stale
    fresh.on_placed(placed("wait", "n1", [2, 3]), 7)
    # The running job finishing after the restart frees its GPUs exactly once.
    fresh.on_agent_status(agent_status("run", SUCCEEDED), 8)
    assert fresh.jobs["run"].job.state == SUCCEEDED
    assert fresh.nodes["n1"].allocations == {2: "wait", 3: "wait"}
    assert fresh.on_agent_status(agent_status("run", SUCCEEDED), 9) == []


def test_restored_node_that_never_heartbeats_is_lost_and_its_job_requeued():
    core = queued_core("run")
    core.on_placed(placed("run", "n1", [0, 1]), 1)
    fresh = restarted(core, now_s=100)
    assert fresh.check_liveness(105) == []  # the timeout counts from the restart
    fresh.check_liveness(111)
    job = fresh.jobs["run"].job
    assert job.state == QUEUED and job.attempt == 1 and fresh.nodes["n1"].state == types_pb2.NODE_LOST


def test_state_records_mark_consumed_early_plans_deleted():
    core = OrchestratorCore()
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=1)
    core.on_planned(events_pb2.JobPlanned(job_id="e", options=[option]), 0)
    assert [(o.key, o.payload is None) for o in core.drain_state_records()] == [("early/e", False)]
    core.submit("e", SPEC, 1)
    records = {o.key: o.payload for o in core.drain_state_records()}
    assert records["early/e"] is None and records["job/e"].job.state == QUEUED
    assert core.drain_state_records() == []


# ----- nothing stuck, nothing twice -------------------------------------------------------

def busy_heartbeat(node_id: str, jobs: dict[int, tuple[str, int]], gpus: int = 4) -> events_pb2.NodeHeartbeat:
    """A heartbeat whose agent runs `jobs` (GPU index -> (job id, attempt))."""
    hb = heartbeat(node_id, gpus)
    for index, (job_id, _) in jobs.items():
        hb.gpus[index].job_id = job_id
    hb.running_jobs.extend(sorted({f"{j}:{a}" for j, a in jobs.values()}))
    return hb


def stops(out) -> list[tuple[str, str, int]]:
    return [(o.payload.node_id, o.payload.job_id, o.payload.attempt) for o in out
            if isinstance(o.payload, events_pb2.StopJob)]


def test_a_returning_lost_node_is_fenced_until_its_stale_attempt_is_gone():
    """n1 is cut off while attempt 0 runs there; attempt 1 runs on n2. When n1 comes back still
    running attempt 0, it is told to stop it, and its GPUs are not free until it has."""
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_heartbeat(heartbeat("n2"), 12)
    core.check_liveness(12)  # n1 silent since 0
    assert core.nodes["n1"].state == types_pb2.NODE_LOST and core.jobs["a"].job.attempt == 1
    core.on_placed(placed("a", "n2", [0, 1], attempt=1), 13)

    out = core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 14)
    assert core.nodes["n1"].state == types_pb2.NODE_READY
    assert stops(out) == [("n1", "a", 0)]
    assert core.nodes["n1"].free_gpus == [2, 3]  # 0 and 1 still run attempt 0
    [availability] = [o.payload for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert list(availability.free_gpu_indices) == [2, 3]
    # A placement onto the fenced GPUs is rejected.
    core.submit("b", SPEC, 14)
    core.on_planned(events_pb2.JobPlanned(job_id="b", options=[types_pb2.PlanOption(
        gpu_type="A100-80GB", num_gpus=2)]), 14)
    core.on_placed(placed("b", "n1", [0, 1]), 14)
    assert core.jobs["b"].job.state == QUEUED and "not free" in core.jobs["b"].job.reason
    # The stop is not repeated on every heartbeat, only after a while.
    assert stops(core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 15)) == []
    assert stops(core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 25)) == [("n1", "a", 0)]
    core.on_heartbeat(heartbeat("n1"), 26)  # attempt 0 is gone
    assert core.nodes["n1"].free_gpus == [0, 1, 2, 3]


def test_an_agent_running_a_finished_or_unknown_job_is_told_to_stop_it():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.cancel("a", 3)
    out = core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("ghost", 5)}), 4)
    assert sorted(stops(out)) == [("n1", "a", 0), ("n1", "ghost", 5)]
    assert core.nodes["n1"].free_gpus == [2, 3]


def test_a_running_attempt_its_agent_stops_reporting_is_retried():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 3)
    core.on_heartbeat(heartbeat("n1"), 4)  # e.g. a new agent that did not adopt it
    assert core.jobs["a"].job.state == RUNNING  # a status may still be on its way
    core.on_heartbeat(heartbeat("n1"), 14.5)
    job = core.jobs["a"].job
    assert job.state == QUEUED and job.attempt == 1 and "no longer runs on node n1" in job.reason
    assert core.nodes["n1"].free_gpus == [0, 1, 2, 3]


def test_a_launch_nobody_confirms_is_retried_then_fails_with_a_reason():
    core = queued_core("a")
    core.launch_timeout_s = 30
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_heartbeat(heartbeat("n1"), 20)
    core.on_heartbeat(heartbeat("n2"), 20)
    assert core.check_deadlines(20) == []
    out = core.check_deadlines(32)
    job = core.jobs["a"].job
    assert job.state == QUEUED and job.attempt == 1 and job.reason.startswith("launch timeout")
    assert stops(out) == [("n1", "a", 0)] and not core.nodes["n1"].allocations
    for attempt in (1, 2):
        core.on_placed(placed("a", "n1", [0, 1], attempt=attempt), 40 * attempt)
        core.on_heartbeat(heartbeat("n1"), 40 * attempt + 31)
        core.on_heartbeat(heartbeat("n2"), 40 * attempt + 31)
        core.check_deadlines(40 * attempt + 31)
    assert job.state == FAILED and "launch timeout" in job.reason and "retries exhausted" in job.reason


def test_a_job_without_a_plan_fails_after_the_plan_timeout():
    core = OrchestratorCore(plan_timeout_s=60)
    core.submit("a", SPEC, 0)
    assert core.check_deadlines(59) == []
    core.check_deadlines(61)
    assert core.jobs["a"].job.state == FAILED and "no plan within 60 s" in core.jobs["a"].job.reason


@given(st.sampled_from([("A100-80GB", 9), ("H100-80GB", 1), ("A100-80GB", 64)]))
def test_a_job_no_plan_of_which_fits_the_cluster_is_unschedulable(need):
    core = queued_core()  # two nodes of 4 A100s
    core.submit("big", SPEC, 0)
    core.on_planned(events_pb2.JobPlanned(job_id="big", options=[types_pb2.PlanOption(
        gpu_type=need[0], num_gpus=need[1])]), 0)
    core.check_deadlines(0)
    assert core.jobs["big"].job.state == QUEUED  # nodes may still be joining
    core.on_heartbeat(heartbeat("n1"), 11)
    core.check_deadlines(11)
    job = core.jobs["big"].job
    assert job.state == FAILED and job.reason.startswith("unschedulable") and "8xA100-80GB" in job.reason


def test_a_job_that_fits_across_nodes_or_on_a_lost_node_keeps_waiting():
    core = queued_core("fits")  # needs 2; 8 A100s in all
    core.submit("wide", SPEC, 0)
    core.on_planned(events_pb2.JobPlanned(job_id="wide", options=[types_pb2.PlanOption(
        gpu_type="H100-80GB", num_gpus=16), types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=8)]), 0)
    core.check_deadlines(0)
    core.check_liveness(20)  # both nodes lost: they may come back
    core.check_deadlines(20)
    assert core.jobs["wide"].job.state == QUEUED and core.jobs["fits"].job.state == QUEUED


def test_a_handler_error_ends_the_job_with_the_reason_and_frees_its_gpus():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    out = core.fail("a", "internal error: KeyError 'x'", 2)
    assert core.jobs["a"].job.state == FAILED and core.jobs["a"].job.reason == "internal error: KeyError 'x'"
    assert stops(out) == [("n1", "a", 0)] and not core.nodes["n1"].allocations
    assert core.fail("a", "again", 3) == []


def test_an_oversized_spec_fails_and_is_not_carried_on_status_records():
    spec = types_pb2.JobSpec()
    spec.CopyFrom(SPEC)
    spec.env["BIG"] = "x" * 100_000
    core = OrchestratorCore()
    out = core.submit("big", spec, 0)
    job = core.jobs["big"].job
    assert job.state == FAILED and "more than" in job.reason
    assert all(o.payload.ByteSize() < 10_000 for o in out)


def test_a_reused_job_id_with_another_spec_is_a_conflict():
    core = queued_core("a")
    other = types_pb2.JobSpec()
    other.CopyFrom(SPEC)
    other.name = "another"
    assert core.conflicting_spec("a", other) and not core.conflicting_spec("a", SPEC)
    assert core.submit("a", other, 5) == [] and core.jobs["a"].job.spec == SPEC


# ----- checkpoint-now and resume ----------------------------------------------------------

def running_core(job_id: str = "a") -> OrchestratorCore:
    core = queued_core(job_id)
    core.on_placed(placed(job_id, "n1", [0, 1]), 1)
    core.on_agent_status(agent_status(job_id, RUNNING), 2)
    return core


def checkpoint_status(job_id, step, attempt=0, node="n1"):
    status = agent_status(job_id, RUNNING, node=node, attempt=attempt)
    status.checkpoint_step = step
    return status


def test_every_new_attempt_resumes_from_the_last_committed_checkpoint():
    core = running_core()
    job = core.jobs["a"].job
    assert not job.HasField("checkpoint_step") and job.resumed_from_step == 0
    core.on_agent_status(checkpoint_status("a", 20), 3)
    core.on_agent_status(checkpoint_status("a", 10), 4)  # out of order: commits only move forward
    assert job.checkpoint_step == 20
    core.on_heartbeat(heartbeat("n2"), 11)
    core.check_liveness(11)  # n1 lost: a new attempt
    assert job.state == QUEUED and job.attempt == 1 and job.checkpoint_step == 20
    out = core.on_placed(placed("a", "n2", [0, 1], attempt=1), 12)
    launches = [o.payload for o in out if o.topic == topics.AGENT_COMMANDS]
    assert [launch.resume_from_step for launch in launches] == [20]
    assert job.resumed_from_step == 20
    # the OOM re-plan path keeps the checkpoint too
    core.on_agent_status(agent_status("a", FAILED, node="n2", attempt=1, reason="OOM: x"), 13)
    assert job.state == SUBMITTED and job.checkpoint_step == 20


def reshape(kind, attempt=0, node="n2", gpus=(0,)):
    r = events_pb2.ReshapeJob(job_id="a", kind=kind, attempt=attempt)
    if kind != events_pb2.PREEMPT:
        r.option.CopyFrom(types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=len(gpus)))
        r.assignments.append(types_pb2.GpuAssignment(node_id=node, gpu_indices=list(gpus)))
    return r


def test_resize_checkpoints_releases_and_relaunches_on_the_new_gpus_surviving_a_restart():
    core = running_core()
    core.on_agent_status(checkpoint_status("a", 8), 3)
    resize = reshape(events_pb2.RESIZE)
    resize.decision.CopyFrom(types_pb2.DecisionRecord(policy="has", reason="resize: faster"))
    out = core.on_reshape(resize, 4)
    stops = [o.payload for o in out if o.topic == topics.AGENT_COMMANDS]
    assert [(s.node_id, s.checkpoint_first) for s in stops] == [("n1", True)]
    # the job record says so (the scheduler moves it no further), and since when
    statuses = [o.payload for o in out if o.topic == topics.JOBS_STATUS]
    assert statuses[-1].job.reshaping and statuses[-1].job.reshaped_at.ToNanoseconds() == 4 * 10**9
    assert core.on_reshape(reshape(events_pb2.RESIZE), 5) == []  # already under way: idempotent
    core = restarted(core, 6)  # the pending reshape is in the saved record
    assert core.jobs["a"].job.reshaping
    core.on_heartbeat(heartbeat("n1"), 6)
    core.on_heartbeat(heartbeat("n2"), 6)
    preempted = agent_status("a", FAILED, reason="PREEMPTED: checkpoint at step 11")
    preempted.checkpoint_step = 11
    out = core.on_agent_status(preempted, 7)
    job = core.jobs["a"].job
    assert job.state == LAUNCHING and job.attempt == 1 and job.checkpoint_step == 11
    assert [a.node_id for a in job.assignments] == ["n2"] and job.option.num_gpus == 1
    launches = [o.payload for o in out if o.topic == topics.AGENT_COMMANDS]
    assert [(l.node_id, l.resume_from_step) for l in launches] == [("n2", 11)]
    assert not core.nodes["n1"].allocations and core.nodes["n2"].allocations == {0: "a"}
    assert core.jobs["a"].pending_reshape is None and not job.reshaping
    assert job.decision.reason == "resize: faster"  # the job record explains its new shape
    assert job.reshaped_at.ToNanoseconds() == 4 * 10**9
    assert core.on_agent_status(preempted, 8) == []  # a redelivered report of the old attempt


def test_preempt_requeues_without_spending_a_retry_and_stale_reshapes_are_ignored():
    core = running_core()
    assert core.on_reshape(reshape(events_pb2.PREEMPT, attempt=3), 3) == []  # stale attempt
    core.on_reshape(reshape(events_pb2.PREEMPT), 3)
    core.on_agent_status(agent_status("a", FAILED, reason="PREEMPTED: checkpoint at step 5"), 4)
    rec = core.jobs["a"]
    assert rec.job.state == QUEUED and rec.job.attempt == 1 and rec.free_attempts == 1
    assert not rec.job.reshaping
    assert not core.nodes["n1"].allocations
    # max_retries=2 still allows two failures' worth of retries after the preemption
    core.on_placed(placed("a", "n1", [0, 1], attempt=1), 5)
    core.on_agent_status(agent_status("a", FAILED, attempt=1, reason="RENDEZVOUS: port"), 6)
    assert rec.job.state == QUEUED and rec.job.attempt == 2

def test_an_attempt_whose_end_is_reported_but_not_yet_received_is_not_taken_for_lost():
    """Under load the status consumer lags the heartbeat consumer by more than a node timeout;
    the heartbeat's ended list keeps that from re-running a job that already finished."""
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    hb = heartbeat("n1")
    hb.ended_jobs.append("a:0")
    for t in (3, 20, 40):
        core.on_heartbeat(hb, t)
    assert core.jobs["a"].job.state == RUNNING and core.jobs["a"].job.attempt == 0
    core.on_agent_status(agent_status("a", SUCCEEDED), 41)
    assert core.jobs["a"].job.state == SUCCEEDED


def test_a_launch_its_agent_already_runs_is_not_timed_out_while_its_status_lags():
    core = queued_core("a")
    core.launch_timeout_s = 30
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 20)
    core.on_heartbeat(heartbeat("n2"), 20)
    core.check_deadlines(40)
    assert core.jobs["a"].job.state == LAUNCHING and core.jobs["a"].job.attempt == 0


# ----- checkpoint cleanup -----------------------------------------------------------------

def deletes(out) -> list[tuple[str, str]]:
    return [(o.payload.node_id, o.payload.job_id) for o in out
            if o.topic == topics.AGENT_COMMANDS and isinstance(o.payload, events_pb2.DeleteCheckpoints)]


def test_every_node_that_ran_an_attempt_removes_the_checkpoints_when_the_job_ends_for_good():
    """Not while a retry may still resume (a lost node, a preemption); once the job ended,
    every node that ran an attempt, remembered across an orchestrator restart."""
    core = running_core()
    core.on_agent_status(checkpoint_status("a", 8), 3)
    core.on_heartbeat(heartbeat("n2"), 11)
    out = core.check_liveness(11)  # n1 lost: the retry needs the checkpoint
    assert core.jobs["a"].job.state == QUEUED and deletes(out) == []
    out = core.on_placed(placed("a", "n2", [0, 1], attempt=1), 12)
    assert deletes(out) == []
    core = restarted(core, 13)
    core.on_heartbeat(heartbeat("n2"), 13)
    core.on_agent_status(agent_status("a", RUNNING, node="n2", attempt=1), 14)
    out = core.on_agent_status(agent_status("a", FAILED, node="n2", attempt=1, reason="exit code 1"), 15)
    assert core.jobs["a"].job.state == FAILED
    assert deletes(out) == [("n1", "a"), ("n2", "a")]
    assert core.on_agent_status(agent_status("a", FAILED, node="n2", attempt=1), 16) == []


def test_cancel_and_success_remove_checkpoints_unless_the_spec_keeps_them():
    core = running_core()
    out = core.cancel("a", 3)
    assert deletes(out) == [("n1", "a")]
    # the stop goes to the same node; the agent stops the processes before removing
    assert ("n1", "a", 0) in stops(out)
    core = running_core()
    out = core.on_agent_status(agent_status("a", SUCCEEDED), 3)
    assert core.jobs["a"].job.state == SUCCEEDED and deletes(out) == [("n1", "a")]

    core = queued_core()
    kept = types_pb2.JobSpec()
    kept.CopyFrom(SPEC)
    kept.training.keep_checkpoints = True
    core.submit("k", kept, 0)
    core.on_planned(events_pb2.JobPlanned(job_id="k", options=[types_pb2.PlanOption(
        gpu_type="A100-80GB", num_gpus=2)]), 0)
    core.on_placed(placed("k", "n1", [0, 1]), 1)
    assert deletes(core.cancel("k", 2)) == []
    # a job that never ran anywhere has nothing to remove
    core.submit("q", SPEC, 3)
    assert deletes(core.cancel("q", 4)) == []


def ack(job_id: str, node: str, uri: str = "") -> events_pb2.CheckpointsDeleted:
    return events_pb2.CheckpointsDeleted(job_id=job_id, node_id=node, checkpoint_uri=uri)


def saved_cleanup(core: OrchestratorCore, job_id: str) -> list[str]:
    """The pending deletes as the job's latest state record holds them."""
    records = [o.payload for o in core.drain_state_records() if o.key == f"job/{job_id}"]
    return list(records[-1].cleanup_nodes) if records else None


def test_a_delete_stays_pending_per_node_until_that_agent_acknowledges_it():
    core = running_core()
    core.on_agent_status(checkpoint_status("a", 8), 3)
    core.on_heartbeat(heartbeat("n2"), 11)
    core.check_liveness(11)  # n1 lost: a retry needs the checkpoint, nothing is pending
    assert core.jobs["a"].cleanup == {}
    core.on_placed(placed("a", "n2", [0, 1], attempt=1), 12)
    core.on_agent_status(agent_status("a", RUNNING, node="n2", attempt=1), 13)
    core.on_heartbeat(heartbeat("n1"), 13)  # n1 back, before the job ends: nothing to send
    assert deletes(core.on_agent_status(agent_status("a", SUCCEEDED, node="n2", attempt=1), 14)) \
        == [("n1", "a"), ("n2", "a")]
    assert saved_cleanup(core, "a") == ["n1", "n2"]
    assert core.on_checkpoints_deleted(ack("a", "n2"), 15) == []
    assert saved_cleanup(core, "a") == ["n1"]
    core.on_checkpoints_deleted(ack("a", "n2"), 15)  # a duplicate ack changes nothing
    core.on_checkpoints_deleted(ack("a", "n1", uri="/elsewhere"), 15)  # not this job's directory
    core.on_checkpoints_deleted(ack("zz", "n1"), 15)  # no such job
    assert saved_cleanup(core, "a") is None and set(core.jobs["a"].cleanup) == {"n1"}
    core.on_checkpoints_deleted(ack("a", "n1"), 16)
    assert saved_cleanup(core, "a") == [] and core.retry_cleanup(10_000) == []


def test_a_node_that_was_down_at_the_job_end_gets_the_delete_again_when_it_comes_back():
    """The first command expired on the broker while the agent was down; the node's return
    (its heartbeat after being lost) re-sends it, and nothing goes to it while it is lost."""
    core = running_core()
    core.on_heartbeat(heartbeat("n2"), 11)
    core.check_liveness(11)  # n1 lost with the job
    core.on_placed(placed("a", "n2", [0, 1], attempt=1), 12)
    core.on_heartbeat(heartbeat("n2"), 20)
    core.cancel("a", 20)
    core.on_checkpoints_deleted(ack("a", "n2"), 21)
    for t in (40, 100, 1000):
        core.on_heartbeat(heartbeat("n2"), t)
        assert deletes(core.retry_cleanup(t)) == []  # n1 is still lost
    out = core.on_heartbeat(heartbeat("n1"), 1001)  # "node recovered"
    assert deletes(out) == [("n1", "a")]
    assert deletes(core.on_heartbeat(heartbeat("n1"), 1002)) == []  # once per return
    core.on_checkpoints_deleted(ack("a", "n1"), 1003)
    assert core.jobs["a"].cleanup == {}


def test_an_agent_restart_within_the_node_timeout_also_gets_the_delete_again():
    core = running_core()
    core.cancel("a", 3)
    assert deletes(core.on_heartbeat(heartbeat("n1"), 4)) == []
    restarted_agent = heartbeat("n1")
    restarted_agent.agent_restarts = 1
    assert deletes(core.on_heartbeat(restarted_agent, 5)) == [("n1", "a")]


def test_unacknowledged_deletes_to_a_live_node_are_retried_with_backoff():
    from frenzy_orchestrator.core import CLEANUP_RETRY_FIRST_S, CLEANUP_RETRY_MAX_S

    core = running_core()
    core.cancel("a", 0)
    sent_at = []
    for t in range(0, 4000):
        core.on_heartbeat(heartbeat("n1"), t)
        core.on_heartbeat(heartbeat("n2"), t)
        if deletes(core.retry_cleanup(t)):
            sent_at.append(t)
    gaps = [b - a for a, b in zip([0, *sent_at], sent_at)]
    assert gaps[:4] == [CLEANUP_RETRY_FIRST_S, 2 * CLEANUP_RETRY_FIRST_S,
                        4 * CLEANUP_RETRY_FIRST_S, 8 * CLEANUP_RETRY_FIRST_S]
    assert max(gaps) == CLEANUP_RETRY_MAX_S and gaps[-1] == CLEANUP_RETRY_MAX_S


def test_a_restarted_orchestrator_keeps_the_pending_deletes_and_sends_them_on_the_nodes_heartbeat():
    core = running_core()
    core.cancel("a", 3)
    core = restarted(core, 5)
    assert set(core.jobs["a"].cleanup) == {"n1"}
    assert deletes(core.retry_cleanup(6)) == []  # n1 not heard from yet
    assert deletes(core.on_heartbeat(heartbeat("n1"), 6)) == [("n1", "a")]
    core.on_checkpoints_deleted(ack("a", "n1"), 7)
    core = restarted(core, 8)
    assert core.jobs["a"].cleanup == {}
    assert deletes(core.on_heartbeat(heartbeat("n1"), 9)) == []


def test_a_delete_to_a_node_gone_for_good_is_dropped():
    core = running_core()
    core.cancel("a", 3)
    core.on_heartbeat(heartbeat("n2"), 20)
    core.check_liveness(20)  # n1 lost
    core.cleanup_forget_s = 100.0
    core.retry_cleanup(100)
    assert set(core.jobs["a"].cleanup) == {"n1"}  # not long enough
    core.drain_state_records()
    core.retry_cleanup(104)
    assert core.jobs["a"].cleanup == {} and saved_cleanup(core, "a") == []
    assert deletes(core.on_heartbeat(heartbeat("n1"), 105)) == []


def test_a_delete_waits_while_a_live_job_names_the_same_checkpoint_directory():
    shared = types_pb2.JobSpec()
    shared.CopyFrom(SPEC)
    shared.training.checkpoint_uri = "/data/ckpt"
    core = queued_core()
    option = types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=2)
    for job_id in ("a", "b"):
        core.submit(job_id, shared, 0)
        core.on_planned(events_pb2.JobPlanned(job_id=job_id, options=[option]), 0)
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_placed(placed("b", "n1", [2, 3]), 1)
    assert deletes(core.cancel("a", 2)) == []  # b still runs out of /data/ckpt
    core.on_heartbeat(heartbeat("n1"), 50)
    assert deletes(core.retry_cleanup(50)) == []
    assert deletes(core.cancel("b", 60)) == [("n1", "b")]
    core.on_heartbeat(heartbeat("n1"), 100)
    # a's delete goes with its next retry (b's, unacknowledged, is retried too)
    assert sorted(deletes(core.retry_cleanup(100))) == [("n1", "a"), ("n1", "b")]


OPS = st.lists(st.tuples(st.sampled_from(["hb1", "hb2", "restart_agent1", "liveness", "place",
                                          "run", "fail", "succeed", "cancel", "ack1", "ack2",
                                          "retry", "restart"]),
                         st.integers(min_value=0, max_value=30)), max_size=40)


@given(OPS)
def test_deletes_go_only_to_jobs_that_ended_for_good_and_stop_once_acknowledged(ops):
    """Whatever happens between (nodes lost and back, retries, restarts of the agent or the
    orchestrator), a DeleteCheckpoints is only ever for a job in a terminal state, only to a
    node that ran it, and none goes once each node acknowledged."""
    from frenzy_orchestrator import lifecycle as lc

    core, now, agent_starts, saved = running_core(), 2.0, 0, {}
    for op, step_s in ops:
        now += step_s
        rec = core.jobs["a"]
        job = rec.job
        if op in ("hb1", "hb2", "restart_agent1"):
            hb = heartbeat("n1" if op != "hb2" else "n2")
            agent_starts += op == "restart_agent1"
            hb.agent_restarts = agent_starts if hb.node_id == "n1" else 0
            out = core.on_heartbeat(hb, now)
        elif op == "liveness":
            out = core.check_liveness(now)
        elif op == "place" and job.state == QUEUED:
            free = [n for n in ("n1", "n2") if core.nodes.get(n) is not None
                    and len(core.nodes[n].free_gpus) >= 2]
            out = core.on_placed(placed("a", free[0], core.nodes[free[0]].free_gpus[:2],
                                        attempt=job.attempt), now) if free else []
        elif op in ("run", "fail", "succeed") and job.assignments:
            state = {"run": RUNNING, "fail": FAILED, "succeed": SUCCEEDED}[op]
            out = core.on_agent_status(agent_status("a", state, node=job.assignments[0].node_id,
                                                    attempt=job.attempt, reason="exit code 1"), now)
        elif op == "cancel":
            out = core.cancel("a", now)
        elif op in ("ack1", "ack2"):
            out = core.on_checkpoints_deleted(ack("a", "n1" if op == "ack1" else "n2"), now)
        elif op == "retry":
            out = core.retry_cleanup(now)
        elif op == "restart":  # from everything saved so far, as the compacted topic holds it
            saved.update((o.key, o.payload) for o in core.drain_state_records())
            core, out = OrchestratorCore(node_timeout_s=10, max_retries=2), []
            core.restore([v for k, v in saved.items() if k.startswith("job/")], [], now)
        else:
            out = []
        saved.update((o.key, o.payload) for o in core.drain_state_records())
        rec = core.jobs["a"]
        sent = deletes(out)
        if sent or rec.cleanup:
            assert rec.job.state in lc.TERMINAL, (op, rec.job.state)
        assert set(rec.cleanup) <= set(rec.checkpoint_nodes)
        assert {n for n, _ in sent} <= set(rec.checkpoint_nodes)
    for node in list(core.jobs["a"].cleanup):
        core.on_checkpoints_deleted(ack("a", node), now)
    for t in (now + 1, now + 1000, now + 10_000):
        core.on_heartbeat(heartbeat("n1"), t)
        assert deletes(core.retry_cleanup(t)) == []


def test_a_heartbeat_older_than_the_jobs_end_report_does_not_fence_the_freed_gpus():
    """Heartbeats come through their own, slower consumer: one the agent sent while the job still
    ran often arrives after the job's SUCCEEDED. It must not take the freed GPUs back (they were
    fenced until the next heartbeat, a second later) nor send a stop; a heartbeat of a node
    whose agent has not reported the end still fences."""
    core = queued_core("a", "b")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_placed(placed("b", "n2", [0, 1]), 1)
    for job, node in (("a", "n1"), ("b", "n2")):
        core.on_agent_status(agent_status(job, RUNNING, node), 2)
    core.on_agent_status(agent_status("a", SUCCEEDED), 3)
    assert core.nodes["n1"].free_gpus == [0, 1, 2, 3]
    out = core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 3.1)  # sent at 2.9
    assert core.nodes["n1"].free_gpus == [0, 1, 2, 3] and stops(out) == []
    assert not [o for o in out if o.topic == topics.CLUSTER_EVENTS]  # nothing changed
    core.on_heartbeat(heartbeat("n1"), 4)  # the agent's next heartbeat: the entry is forgotten
    assert core.nodes["n1"].reported_ended == set()

    core.cancel("b", 5)  # no end report: the agent is told to stop; until then it is fenced
    out = core.on_heartbeat(busy_heartbeat("n2", {0: ("b", 0), 1: ("b", 0)}), 5.1)
    assert stops(out) == [("n2", "b", 0)] and core.nodes["n2"].free_gpus == [2, 3]


def test_a_cancelled_jobs_gpus_stay_fenced_until_a_heartbeat_shows_its_process_gone():
    """The agent reports no end for a job it stopped; its heartbeats list it until the process
    exits. Freed at the cancel, its GPUs went free -> fenced (next heartbeat) -> free, and a
    placement made in between was rejected (CI: a job grown onto the cancelled job's GPU was
    rejected, then placed on one GPU). They stay fenced from the cancel until then."""
    core = queued_core("a", "b")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 2.5)
    out = core.cancel("a", 3)
    assert core.nodes["n1"].free_gpus == [2, 3] and core.nodes["n1"].allocations == {}
    assert [list(o.payload.free_gpu_indices) for o in out if o.topic == topics.CLUSTER_EVENTS] == [[2, 3]]
    core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 3.1)  # sent before the stop
    out = core.on_placed(placed("b", "n1", [0, 1]), 3.2)
    assert core.jobs["b"].job.state == QUEUED and "placement rejected" in core.jobs["b"].job.reason
    out = core.on_heartbeat(heartbeat("n1"), 3.3)  # the process is gone
    events = [o.payload for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert [list(e.free_gpu_indices) for e in events] == [[0, 1, 2, 3]], events
    assert events[0].cause == "stopped attempt's GPUs released"
    core.on_placed(placed("b", "n1", [0, 1]), 3.4)
    assert core.jobs["b"].job.state == LAUNCHING


def test_a_job_that_ended_releases_its_gpus_at_once_even_if_the_last_heartbeat_ran_it():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 0)}), 2)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_agent_status(agent_status("a", SUCCEEDED), 3)  # the agent saw its processes exit
    assert core.nodes["n1"].free_gpus == [0, 1, 2, 3]


def test_an_end_report_of_one_attempt_does_not_unfence_another_attempt_of_the_job():
    core = queued_core("a")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_agent_status(agent_status("a", FAILED, reason="x"), 3)  # attempt 0 ends for good
    # The agent says attempt 0 ended, yet its heartbeat shows a later attempt it was never given.
    out = core.on_heartbeat(busy_heartbeat("n1", {0: ("a", 0), 1: ("a", 7)}), 3.1)
    assert stops(out) == [("n1", "a", 7)] and core.nodes["n1"].free_gpus == [2, 3]


AGENT_OPS = st.lists(st.sampled_from(["place", "end_ok", "end_fail", "end_rendezvous", "cancel",
                                      "hb_send", "hb_deliver", "status_deliver", "stop_deliver"]),
                     max_size=60)


@settings(max_examples=400, deadline=None)
@given(AGENT_OPS)
@example(["place", "status_deliver", "cancel", "hb_send", "hb_deliver"])  # a stop still on its way
@example(["place", "status_deliver", "hb_send", "end_ok", "status_deliver", "hb_deliver"])  # late hb
@example(["place", "status_deliver", "hb_send", "end_rendezvous", "status_deliver", "place",
          "hb_deliver", "hb_send", "hb_deliver"])  # the next attempt on the freed GPUs
def test_no_gpu_is_free_while_the_latest_heartbeat_shows_an_unreported_attempt_on_it(ops):
    """An agent that behaves as ours does (it reports an attempt's end only once its processes
    are gone, stops a cancelled one silently, and sends heartbeats that arrive late, in order,
    on their own consumer), statuses and heartbeats in any interleaving: once a heartbeat is
    handled, no GPU it shows a truly running process on is free. (Between heartbeats a release
    frees GPUs at once, and the next heartbeat fences those a process still holds, as before.)
    So skipping the fence for attempts whose end the agent reported frees nothing in use."""
    from frenzy.outcomes import RENDEZVOUS_REASON

    core = queued_core("a", "b")
    running: dict[tuple[str, int], list[int]] = {}  # what the agent truly runs: attempt -> GPUs
    heartbeats: list[events_pb2.NodeHeartbeat] = []  # sent, not yet delivered
    statuses: list[events_pb2.JobStatusChanged] = []
    stops_pending: list[tuple[str, int]] = []
    last_delivered = heartbeat("n1")
    now = 1.0

    def deliver(out) -> None:
        for o in out:
            if isinstance(o.payload, events_pb2.StopJob) and o.payload.node_id == "n1":
                stops_pending.append((o.payload.job_id, o.payload.attempt))
            elif isinstance(o.payload, events_pb2.LaunchJob) and o.payload.node_id == "n1":
                running[(o.payload.job_id, o.payload.attempt)] = list(o.payload.gpu_indices)
                statuses.append(agent_status(o.payload.job_id, RUNNING, attempt=o.payload.attempt))

    for op in ops:
        now += 0.1
        if op == "place":
            free = core.nodes["n1"].free_gpus
            waiting = [r for r in core.jobs.values() if r.job.state == QUEUED]
            if waiting and len(free) >= 2:
                rec = waiting[0]
                deliver(core.on_placed(placed(rec.id, "n1", free[:2], attempt=rec.job.attempt), now))
        elif op.startswith("end_") and running:
            job_id, attempt = sorted(running)[0]
            del running[(job_id, attempt)]  # the processes are gone, then the agent reports
            state, reason = {"end_ok": (SUCCEEDED, ""), "end_fail": (FAILED, "exit code 1"),
                             "end_rendezvous": (FAILED, f"{RENDEZVOUS_REASON}: timeout")}[op]
            statuses.append(agent_status(job_id, state, attempt=attempt, reason=reason))
        elif op == "cancel":
            live = [r for r in core.jobs.values() if r.job.state in (LAUNCHING, RUNNING)]
            if live:
                deliver(core.cancel(live[0].id, now))
        elif op == "hb_send":
            heartbeats.append(busy_heartbeat("n1", {g: key for key, gpus in running.items()
                                                    for g in gpus}))
        elif op == "hb_deliver" and heartbeats:
            last_delivered = heartbeats.pop(0)
            deliver(core.on_heartbeat(last_delivered, now))
        elif op == "status_deliver" and statuses:
            deliver(core.on_agent_status(statuses.pop(0), now))
        elif op == "stop_deliver" and stops_pending:
            running.pop(stops_pending.pop(0), None)  # stopped: no report
        if op != "hb_deliver":
            continue
        shown = {(g.index, f"{g.job_id}:{a}") for g in last_delivered.gpus
                 for e in last_delivered.running_jobs
                 if g.job_id and e.rpartition(":")[0] == g.job_id
                 for a in [e.rpartition(":")[2]]}
        for gpu in core.nodes["n1"].free_gpus:
            for (job_id, attempt), gpus in running.items():
                if gpu in gpus:
                    assert (gpu, f"{job_id}:{attempt}") not in shown, (op, gpu, job_id, attempt)


def held(ending: str, *placements: events_pb2.JobPlaced, attempt: int = 0) -> events_pb2.HeldPlacements:
    return events_pb2.HeldPlacements(releasing_job_id=ending, releasing_attempt=attempt,
                                     placements=placements)


def test_a_held_placement_launches_on_the_release_and_a_stale_one_does_not():
    """Held for a's GPUs: b launches in the step that releases them (its LaunchJob before the
    availability, which shows them taken). A newer hold replaces the older; in it, d's placement
    is stale (d was placed on n2 since) and is not carried out, c's is."""
    core = queued_core("a", "b", "c", "d", "e")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_placed(placed("e", "n1", [2, 3]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_held(held("a", placed("b", "n1", [0, 1])), 3)
    assert core.jobs["b"].job.state == QUEUED and core.nodes["n1"].allocations[0] == "a"
    out = core.on_agent_status(agent_status("a", SUCCEEDED), 4)
    job_b = core.jobs["b"].job
    assert job_b.state == LAUNCHING and "held for a" in core.jobs["b"].history[-2][1]
    assert job_b.placed_at.ToNanoseconds() == core.jobs["a"].job.finished_at.ToNanoseconds()
    kinds = [type(o.payload).__name__ for o in out]
    assert kinds.index("LaunchJob") < kinds.index("GpuAvailabilityChanged")
    freed = [o.payload for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert len(freed) == 1 and list(freed[0].free_gpu_indices) == [] and "b" in freed[0].allocated_jobs
    assert freed[0].cause == "job a finished"
    assert core.nodes["n1"].allocations == {0: "b", 1: "b", 2: "e", 3: "e"}

    core.on_agent_status(agent_status("e", RUNNING), 5)
    core.on_held(held("e", placed("c", "n1", [2, 3])), 5)
    core.on_placed(placed("d", "n2", [0, 1]), 6)
    core.on_held(held("e", placed("c", "n1", [2, 3]), placed("d", "n1", [2, 3])), 6)  # replaces
    out = core.on_agent_status(agent_status("e", SUCCEEDED), 7)
    assert core.jobs["c"].job.state == LAUNCHING and core.jobs["d"].job.assignments[0].node_id == "n2"
    assert core.nodes["n1"].allocations == {0: "b", 1: "b", 2: "c", 3: "c"}
    assert [o.payload.job_id for o in out if isinstance(o.payload, events_pb2.LaunchJob)] == ["c"]


def test_a_hold_that_no_longer_fits_is_dropped_and_the_gpus_announced_free():
    core = queued_core("a", "b", "c")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_agent_status(agent_status("a", RUNNING), 2)
    core.on_held(held("a", placed("b", "n1", [0, 1, 2])), 3)  # GPU 2 ...
    core.on_placed(placed("c", "n1", [2, 3]), 3)  # ... is taken since
    out = core.on_agent_status(agent_status("a", SUCCEEDED), 4)
    assert core.jobs["b"].job.state == QUEUED and not any(isinstance(o.payload, events_pb2.LaunchJob) for o in out)
    freed = [o.payload for o in out if o.topic == topics.CLUSTER_EVENTS]
    assert list(freed[-1].free_gpu_indices) == [0, 1] and "a" not in core.held


def test_holds_for_other_attempts_ended_jobs_or_failures_are_not_carried_out():
    core = queued_core("a", "b")
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    assert core.on_held(held("a", placed("b", "n1", [0, 1]), attempt=1), 2) == []  # not a's attempt
    assert "a" not in core.held
    core.on_held(held("a", placed("b", "n1", [0, 1])), 2)
    core.on_held(held("a"), 3)  # withdrawn
    assert "a" not in core.held
    core.on_held(held("a", placed("b", "n1", [0, 1])), 3)
    core.on_agent_status(agent_status("a", FAILED, reason="exit 1"), 4)  # not the end it waited for
    assert core.jobs["b"].job.state == QUEUED and "a" not in core.held
    core.on_held(held("a", placed("b", "n1", [0, 1])), 5)  # late: a has ended
    assert "a" not in core.held


def test_a_hold_is_saved_so_an_end_redelivered_after_a_restart_launches_the_same_placement():
    """The orchestrator published a's end and b's launch from the hold, then died before saving
    the state: restored from the records saved before, the redelivered end report launches b
    on the same GPUs (the agent ignores the second LaunchJob of the attempt it runs)."""
    core = queued_core("a", "b")
    core.on_heartbeat(heartbeat("n1"), 1)
    core.on_placed(placed("a", "n1", [0, 1]), 1)
    core.on_held(held("a", placed("b", "n1", [0, 1])), 2)
    saved = {o.key: o.payload for o in core.drain_state_records()}
    assert saved["job/a"].held.placements[0].job_id == "b"
    first = core.on_agent_status(agent_status("a", SUCCEEDED), 4)
    again = OrchestratorCore()
    again.on_heartbeat(heartbeat("n1"), 3)
    again.on_heartbeat(heartbeat("n2"), 3)
    again.restore([r for r in saved.values() if isinstance(r, events_pb2.JobRecordState)], [], 3)
    assert set(again.held) == {"a"}
    second = again.on_agent_status(agent_status("a", SUCCEEDED), 5)  # redelivered
    launches = [[(o.payload.job_id, list(o.payload.gpu_indices)) for o in out
                 if isinstance(o.payload, events_pb2.LaunchJob)] for out in (first, second)]
    assert launches[0] == launches[1] == [("b", [0, 1])]
    assert core.on_agent_status(agent_status("a", SUCCEEDED), 6) == []  # no restart: nothing
    withdrawn = OrchestratorCore()
    withdrawn.restore([core.record_state(j) for j in core.jobs], [], 7)
    assert withdrawn.held == {}  # spent holds are not saved
