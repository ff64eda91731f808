"""The dashboard's pure core and its HTTP shell, without a broker: events in, what a person sees out."""
from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, strategies as st

from frenzy import events
from frenzy.config import DashboardSettings
from frenzy.v1 import events_pb2, types_pb2
from frenzy_dashboard import view
from frenzy.security.store import SecurityStore
from frenzy_dashboard.auth import (SESSION_COOKIE, FirstOf, Gate, SecurityTokens, StaticTokens,
                                  load_authenticator, principal_from)
from frenzy_dashboard.service import DASHBOARD, Dashboard, build_app
from frenzy_dashboard.view import DashboardState, Principal

ADMIN = Principal("admin", "admin")
TEAM_A = Principal("team-a")
TEAM_B = Principal("team-b")
GIB = 1024**3


def option(gpu_type="A100-80GB", n=2, rank=0, peak_gib=30) -> types_pb2.PlanOption:
    return types_pb2.PlanOption(gpu_type=gpu_type, num_gpus=n, rank=rank, step_time_s=0.5,
                                duration_s=3600, peak_bytes_per_gpu=peak_gib * GIB,
                                plan=types_pb2.ParallelPlan(dp=n, tp=1, pp=1, micro_batch=1))


def job_record(job_id, state, version, tenant="team-a", **fields) -> events_pb2.Envelope:
    job = types_pb2.Job(id=job_id, state=state, version=version, tenant=tenant,
                        spec=types_pb2.JobSpec(name=job_id, model="gpt2"), **fields)
    job.submitted_at.FromSeconds(1000)
    return events.envelope(events_pb2.JobStatusChanged(
        job_id=job_id, state=state, source=events_pb2.ORCHESTRATOR, job=job, reason=job.reason,
        attempt=job.attempt))


def availability(node_id, free, total=4, gpu_type="A100-80GB") -> events_pb2.Envelope:
    return events.envelope(events_pb2.GpuAvailabilityChanged(
        node_id=node_id, gpu_type=gpu_type, gpus_total=total, free_gpu_indices=free,
        node_state=types_pb2.NODE_READY))


def running_state() -> DashboardState:
    """Two nodes; team-a's job-a holds GPUs 0-1 of n1, team-b's job-b waits."""
    state = DashboardState()
    state.apply(availability("n1", [2, 3]))
    state.apply(availability("n2", [0, 1, 2, 3]))
    state.apply(events.envelope(events_pb2.JobPlanned(job_id="job-a", options=[option(), option("V100", 8, 1)])))
    decision = types_pb2.DecisionRecord(policy="has", chosen=option(), reason="earliest completion",
                                        alternatives=[types_pb2.DecisionAlternative(
                                            option=option("V100", 8, 1), estimated_start_s=0,
                                            estimated_completion_s=9000, verdict="later completion")])
    state.apply(events.envelope(events_pb2.JobPlaced(job_id="job-a", option=option(), decision=decision)))
    state.apply(job_record("job-a", types_pb2.RUNNING, 5, option=option(),
                           assignments=[types_pb2.GpuAssignment(node_id="n1", gpu_indices=[0, 1])]))
    state.apply(job_record("job-b", types_pb2.QUEUED, 3, tenant="team-b", reason="waiting for GPUs"))
    state.apply(events.envelope(events_pb2.JobPlanned(job_id="job-b", options=[option("H100", 8)])))
    return state


def test_gpus_light_up_in_the_holding_jobs_colour_and_other_tenants_stay_anonymous():
    state = running_state()
    (group,) = view.cluster_view(state, ADMIN)["groups"]
    n1 = group["nodes"][0]
    assert [g["job_id"] for g in n1["gpus"]] == ["job-a", "job-a", "", ""]
    assert n1["gpus"][0]["colour"] == view.job_colour("job-a")
    assert group["allocated"] == 2 and group["total"] == 8
    as_b = view.cluster_view(state, TEAM_B)["groups"][0]["nodes"][0]["gpus"][0]
    assert as_b["job_id"] == "" and as_b["label"] == view.HIDDEN_JOB and as_b["busy"]


def test_a_user_sees_only_their_tenants_jobs():
    state = running_state()
    assert [r["id"] for r in view.jobs_view(state, TEAM_A, 2000)["rows"]] == ["job-a"]
    assert {r["id"] for r in view.jobs_view(state, ADMIN, 2000)["rows"]} == {"job-a", "job-b"}
    assert view.job_view(state, "job-b", TEAM_A, 2000) is None
    assert view.job_view(state, "job-b", TEAM_B, 2000) is not None


def test_waiting_job_says_why_and_how_long():
    row = view.jobs_view(running_state(), ADMIN, 1300)["waiting"][0]
    assert row["id"] == "job-b" and row["waited"] == "5 min"
    assert row["why"] == "waiting for GPUs (none of MARP's options fits this cluster's GPUs)"
    state = running_state()  # 8 A100-80GB in all
    state.apply(events.envelope(events_pb2.JobPlanned(job_id="job-b", options=[
        option("H100", 8), option("A100-80GB", 16, 1), option("A100-80GB", 8, 2)])))
    assert view.jobs_view(state, ADMIN, 1300)["waiting"][0]["why"] == (
        "waiting for GPUs (MARP's best option that fits this cluster: 8×A100-80GB)")


def test_a_hold_decision_gives_the_wait_reason_and_expected_start():
    state = running_state()
    hold = types_pb2.DecisionRecord(policy="has", reason="holding for 8×H100", alternatives=[
        types_pb2.DecisionAlternative(option=option("H100", 8), estimated_start_s=240)])
    hold.decided_at.FromSeconds(1000)
    state.jobs["job-b"].decision = hold
    assert view.wait_reason(state.jobs["job-b"], 1060) == "holding for 8×H100; expected start in 3 min"


def test_job_page_shows_options_decision_and_the_chosen_option():
    page = view.job_view(running_state(), "job-a", TEAM_A, 2000)
    assert [o["gpus"] for o in page["options"]] == ["2×A100-80GB", "8×V100"]
    assert [o["chosen"] for o in page["options"]] == [True, False]
    assert page["options"][0]["gpu_hours"] == "2.00" and page["more_options"] == []


def test_the_chosen_option_stays_in_sight_when_the_rest_fold_away():
    state = running_state()
    many = [option("V100", 8, rank) for rank in range(20)] + [option(rank=20)]
    state.apply(events.envelope(events_pb2.JobPlanned(job_id="job-a", options=many)))
    page = view.job_view(state, "job-a", ADMIN, 2000)
    assert [o["rank"] for o in page["options"]] == [*range(view.OPTIONS_SHOWN), 20]
    assert page["options"][-1]["chosen"] and len(page["more_options"]) == 20 - view.OPTIONS_SHOWN
    decision = page["decision"]
    assert decision["chosen"]["gpus"] == "2×A100-80GB" and decision["reason"] == "earliest completion"
    assert decision["alternatives"][0]["verdict"] == "later completion"
    assert decision["alternatives"][0]["completion"] == "2.5 h"


def test_progress_curve_throughput_and_checkpoints_from_agent_reports():
    state = running_state()
    for i, (step, tokens) in enumerate([(10, 1000), (20, 3000), (20, 3000), (30, 4000)]):
        env = events.envelope(events_pb2.JobStatusChanged(
            job_id="job-a", state=types_pb2.RUNNING, source=events_pb2.AGENT,
            progress=types_pb2.Progress(step=step, loss=5.0 - step / 10, tokens=tokens),
            checkpoint_step=step))
        env.produced_at.FromSeconds(1000 + i)
        state.apply(env)
    steps, loss, throughput = view.curve_series(state, "job-a")["data"]
    assert steps == [10, 20, 30] and loss == [4.0, 3.0, 2.0]
    assert throughput == [None, 2000, 500]  # 1,000 tokens over the 2 s between steps 20 and 30
    assert [c["step"] for c in view.job_view(state, "job-a", ADMIN, 2000)["checkpoints"]] == [10, 20, 30]


def test_memory_accuracy_folds_finished_jobs_with_the_error_records_rules():
    state = running_state()
    state.apply(job_record("job-a", types_pb2.SUCCEEDED, 9, option=option(peak_gib=30),
                           progress=types_pb2.Progress(peak_memory_bytes=40 * GIB)))
    memory = view.memory_view(state, ADMIN)
    assert memory["rows"] == [{"model": "gpt2", "gpu_type": "A100-80GB", "jobs": 1,
                               "mean_abs_error": "25.0%", "worst_under": "-25.0%"}]
    assert memory["points"] == [[40.0], [30.0]]
    assert view.memory_view(state, TEAM_B)["rows"] == []


def test_utilisation_is_sampled_per_type_at_each_availability_change():
    state = DashboardState()
    for t, free in [(10, [0, 1, 2, 3]), (20, [2, 3]), (30, [])]:
        env = availability("n1", free)
        env.produced_at.FromSeconds(t)
        state.apply(env)
    assert view.utilisation_series(state) == {"labels": ["A100-80GB"],
                                              "data": [[10, 20, 30], [0.0, 50.0, 100.0]]}


@given(st.permutations(list(range(1, 8))))
def test_replayed_job_records_never_move_a_job_backwards(versions):
    """At-least-once delivery and replays: whatever order records arrive in, the newest stays."""
    state = DashboardState()
    states = [types_pb2.SUBMITTED, types_pb2.PLANNED, types_pb2.QUEUED, types_pb2.PLACED,
              types_pb2.LAUNCHING, types_pb2.RUNNING, types_pb2.SUCCEEDED]
    for v in versions:
        state.apply(job_record("j", states[v - 1], v))
    assert state.jobs["j"].job.version == 7 and state.jobs["j"].job.state == types_pb2.SUCCEEDED


# ---- authentication --------------------------------------------------------------------------

def test_a_login_ticket_works_once_and_api_tokens_open_sessions():
    gate = Gate(StaticTokens({"tok-a": TEAM_A}))
    gate.add_ticket("ticket", ADMIN)
    session = gate.login("ticket")
    assert session and gate.principal(session) == ADMIN
    assert gate.login("ticket") is None
    assert gate.principal(gate.login("tok-a")) == TEAM_A
    assert gate.login("wrong") is None and gate.principal("made-up") is None


def test_sessions_expire():
    now = [0.0]
    gate = Gate(StaticTokens({"tok": TEAM_A}), session_ttl_s=60, clock=lambda: now[0])
    session = gate.login("tok")
    now[0] = 61
    assert gate.principal(session) is None


def test_the_grpc_apis_tokens_log_in_with_their_tenant_and_role_until_revoked(tmp_path):
    store = SecurityStore(tmp_path)
    user, user_token = store.create("api", tenant="team-a")
    _, admin_token = store.create("api", tenant="default", role="admin")
    _, pipeline_key = store.create("pipeline", tenant="team-a")
    gate = Gate(load_authenticator("", "", str(tmp_path)))
    session = gate.login(user_token)
    assert gate.principal(session) == TEAM_A
    assert gate.principal(gate.login(admin_token)) == Principal("default", "admin")
    assert gate.login(pipeline_key) is None, "a pipeline's signing key is no login"
    assert gate.login(user_token.split(".")[0] + ".wrong-secret") is None
    store.revoke(user.id)
    assert gate.principal(session) is None, "a revoked token's session ends at its next request"
    assert gate.login(user_token) is None


def test_every_configured_token_source_is_asked(tmp_path):
    tokens = tmp_path / "dashboard-tokens.json"
    tokens.write_text(json.dumps({"tok-b": {"tenant": "team-b"}}))
    _, api_token = SecurityStore(tmp_path / "security").create("api", tenant="team-a")
    authenticator = load_authenticator("", str(tokens), str(tmp_path / "security"))
    assert isinstance(authenticator, FirstOf)
    assert authenticator.authenticate("tok-b") == TEAM_B
    assert authenticator.authenticate(api_token) == TEAM_A
    assert isinstance(load_authenticator("", "", str(tmp_path)), SecurityTokens)


def test_a_bad_tokens_file_names_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"\.role: must be one of admin, user"):
        principal_from({"tenant": "t", "role": "root"}, "tokens[abcd…]")
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"secret-1": {"tenant": ""}}))
    with pytest.raises(ValueError, match=r"tenant: must be a non-empty string"):
        StaticTokens.from_file(path)


# ---- the HTTP shell --------------------------------------------------------------------------

@pytest.fixture()
async def http():
    gate = Gate(StaticTokens({"tok-b": TEAM_B}))
    gate.add_ticket("ticket", ADMIN)
    dashboard = Dashboard(DashboardSettings(kafka_bootstrap="unused:1"), gate)
    dashboard.state = running_state()
    dashboard.following = True
    client = TestClient(TestServer(build_app(dashboard)))
    await client.start_server()
    yield client
    await client.close()


async def test_pages_need_a_login_and_the_ticket_becomes_a_session_cookie(http):
    response = await http.get("/", allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/login"
    response = await http.get("/login?token=ticket", allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/"
    assert "HttpOnly" in response.headers["Set-Cookie"] and SESSION_COOKIE in response.cookies
    page = await (await http.get("/jobs/job-a")).text()
    assert 'id="options"' in page and "earliest completion" in page and "2×A100-80GB" in page
    again = await http.get("/login?token=ticket", allow_redirects=False)
    assert again.status == 401


async def test_a_user_cannot_open_another_tenants_job(http):
    await http.post("/login", data={"token": "tok-b"}, allow_redirects=False)
    assert (await http.get("/jobs/job-a")).status == 404
    assert "job-b" in await (await http.get("/jobs")).text()


async def test_live_part_arrives_as_a_server_sent_event(http):
    await http.get("/login?token=ticket", allow_redirects=False)
    response = await http.get("/events/cluster")
    assert response.headers["Content-Type"] == "text/event-stream"
    first = await response.content.readuntil(b"\n\n")
    assert first.startswith(b"event: update\ndata: ")
    update = json.loads(first.split(b"data: ", 1)[1])
    assert 'data-job="job-a"' in update["html"] and "utilisation" in update["charts"]
    response.close()


async def test_health_answers_without_login(http):
    assert (await http.get("/healthz")).status == 200


async def test_event_data_cannot_inject_markup(http):
    """Names come from the event stream (agents declare GPU types, users name jobs)."""
    await http.get("/login?token=ticket", allow_redirects=False)
    evil = "</script><script>alert(1)</script>"
    dashboard = http.server.app[DASHBOARD]
    dashboard.state.apply(availability("n9", [0], total=1, gpu_type=evil))
    dashboard.state.apply(job_record("job-x", types_pb2.QUEUED, 1, reason=evil))
    for path in ("/", "/jobs", "/jobs/job-x"):
        page = await (await http.get(path)).text()
        assert "<script>alert" not in page, path


def log_chunk(job_id, rank, offset, data, attempt=1) -> events_pb2.Envelope:
    return events.envelope(types_pb2.LogChunk(job_id=job_id, attempt=attempt, rank=rank, node_id="n1",
                                              offset=offset, data=data))


def test_the_job_page_shows_the_log_tail_once_per_line_whole_lines_only():
    state = running_state()
    state.apply(log_chunk("job-a", 0, 0, b"step 1\nstep"))
    state.apply(log_chunk("job-a", 1, 0, b"hello from 1\n"))
    state.apply(log_chunk("job-a", 0, 0, b"step 1\nstep"))  # a restarted agent ships again
    state.apply(log_chunk("job-a", 0, 11, b" 2\n"))
    assert view.job_view(state, "job-a", TEAM_A, 2000)["log_tail"] == [
        "[rank 0] step 1", "[rank 1] hello from 1", "[rank 0] step 2"]
    for i in range(view.LOG_TAIL_LINES + 5):
        state.apply(log_chunk("job-a", 0, 14 + i * 2, b"x\n"))
    assert len(view.job_view(state, "job-a", TEAM_A, 2000)["log_tail"]) == view.LOG_TAIL_LINES


async def test_the_log_tail_is_on_the_job_page_escaped(http):
    await http.get("/login?token=ticket", allow_redirects=False)
    http.server.app[DASHBOARD].state.apply(log_chunk("job-a", 0, 0, b"<b>loss</b> 2.5\n"))
    page = await (await http.get("/jobs/job-a")).text()
    assert 'id="log-tail"' in page and "[rank 0] &lt;b&gt;loss&lt;/b&gt; 2.5" in page
