"""The security mechanisms as pure functions: signatures, tokens, limits, tenancy, job env."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from frenzy.jobspec import SpecError, inline_model_config, resolve_spec
from frenzy.security import signing
from frenzy.security.clientconfig import ClientConfig, read_client_config, resolve, write_client_config
from frenzy.security.jobenv import clean_environment
from frenzy.security.limits import (MAX_JOB_ID_CHARS, LimitError, check_job_id, check_spec_limits,
                                    job_id_problem)
from frenzy.security.ratelimit import RateLimiter
from frenzy.security.store import SecurityStore, TenantPolicy
from frenzy.security.tenancy import entrypoint_problem, placement_quota_problem, quota_problem
from frenzy.v1 import types_pb2

TOPIC = "frenzy.agent.commands"


def spec(**kw) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name="s", model="gpt2", training=types_pb2.TrainingConfig(
        seq_len=128, global_batch_size=8, steps=5), **kw)


# ----- Ed25519 records ---------------------------------------------------------------------------
def _signed(now_s: float = 1000.0, ttl_s: float = 60.0):
    key = signing.new_private_key()
    signer = signing.Ed25519Signer(key, signing.ORCHESTRATOR_SIGNER, {TOPIC: ttl_s})
    headers = signer.headers(TOPIC, b"n1", b"payload", now_s=now_s)
    return {signing.ORCHESTRATOR_SIGNER: key.public_key()}, headers


def test_a_signed_record_verifies_and_any_change_is_forged():
    keys, headers = _signed()
    assert signing.verify_ed25519(keys, TOPIC, b"n1", b"payload", headers, 1001.0, 60)[0] == "orchestrator"
    for topic, key, value in [("frenzy.jobs.status", b"n1", b"payload"), (TOPIC, b"n2", b"payload"),
                              (TOPIC, b"n1", b"payloaD")]:
        with pytest.raises(signing.VerifyError, match="forged"):
            signing.verify_ed25519(keys, topic, key, value, headers, 1001.0, 60)


def test_expired_unsigned_and_unknown_signers_are_refused():
    keys, headers = _signed(now_s=1000.0, ttl_s=60)
    with pytest.raises(signing.VerifyError, match="expired"):
        signing.verify_ed25519(keys, TOPIC, b"n1", b"payload", headers, 1061.0, 60)
    with pytest.raises(signing.VerifyError, match="unsigned"):
        signing.verify_ed25519(keys, TOPIC, b"n1", b"payload", [], 1001.0, 60)
    other = {signing.ORCHESTRATOR_SIGNER: signing.new_private_key().public_key()}
    with pytest.raises(signing.VerifyError, match="forged"):
        signing.verify_ed25519(other, TOPIC, b"n1", b"payload", headers, 1001.0, 60)
    with pytest.raises(signing.VerifyError, match="unknown signer"):
        signing.verify_ed25519({}, TOPIC, b"n1", b"payload", headers, 1001.0, 60)


def test_a_signer_cannot_extend_its_own_expiry_past_the_limit():
    keys, headers = _signed(now_s=1000.0, ttl_s=10_000)
    with pytest.raises(signing.VerifyError, match="too far"):
        signing.verify_ed25519(keys, TOPIC, b"n1", b"payload", headers, 1001.0, 60)


def test_replay_cache_refuses_a_second_sighting_until_expiry():
    cache = signing.ReplayCache()
    assert cache.first_time("c1", expires_s=100, now_s=10)
    assert not cache.first_time("c1", expires_s=100, now_s=50)
    assert cache.first_time("c2", expires_s=100, now_s=50)
    assert cache.first_time("c1", expires_s=300, now_s=200)  # forgotten after its expiry


def test_pipeline_hmac_verifies_and_tampering_is_forged():
    headers = signing.pipeline_headers("k1", b"secret", "frenzy.jobs.submitted", b"j", b"{}", now_s=1000)
    key_id, _, _ = signing.verify_hmac({"k1": b"secret"}, "frenzy.jobs.submitted", b"j", b"{}", headers, 1001, 600)
    assert key_id == "k1"
    with pytest.raises(signing.VerifyError, match="forged"):
        signing.verify_hmac({"k1": b"other"}, "frenzy.jobs.submitted", b"j", b"{}", headers, 1001, 600)
    with pytest.raises(signing.VerifyError, match="unsigned"):
        signing.verify_hmac({"k1": b"secret"}, "frenzy.jobs.submitted", b"j", b"{}", [], 1001, 600)


# ----- tokens --------------------------------------------------------------------------------------
def test_tokens_are_stored_hashed_authenticate_and_revoke(tmp_path):
    store = SecurityStore(tmp_path)
    rec, token = store.create("api", "team-a", "user")
    text = (tmp_path / "tokens.json").read_text()
    assert token.split(".")[1] not in text  # only the hash is stored
    assert stat.S_IMODE((tmp_path / "tokens.json").stat().st_mode) == 0o600
    who = store.authenticate(token)
    assert (who.tenant, who.role, who.token_id) == ("team-a", "user", rec.id)
    assert store.authenticate(token + "x") is None
    assert store.authenticate("garbage") is None and store.authenticate("") is None
    other = SecurityStore(tmp_path)  # another process (the CLI) revokes; this one notices
    assert other.revoke(rec.id)
    store.refresh(force=True)
    assert store.authenticate(token) is None


def test_pipeline_and_join_keys_are_not_api_tokens(tmp_path):
    store = SecurityStore(tmp_path)
    rec, token = store.create("pipeline", "team-a")
    assert store.authenticate(token) is None
    assert store.secrets_of("pipeline") == {rec.id: token.split(".")[1].encode()}
    assert store.tenant_of_key(rec.id) == "team-a"


# ----- limits --------------------------------------------------------------------------------------
@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_an_accepted_job_id_never_leaves_its_directory(job_id):
    if job_id_problem(job_id):
        return
    base = Path("/srv/agents/node-1").resolve()
    path = (base / f"{job_id}.0").resolve()
    assert path.parent == base and len(job_id) <= MAX_JOB_ID_CHARS


@pytest.mark.parametrize("bad", ["../../x", "a/b", "..", ".hidden", "", "x" * 200, "a\x00b", "/etc"])
def test_unsafe_job_ids_are_refused(bad):
    with pytest.raises(LimitError):
        check_job_id(bad)


def test_oversized_spec_fields_name_the_field():
    with pytest.raises(LimitError, match="^env.BIG"):
        check_spec_limits(spec(env={"BIG": "x" * 100_000}))
    with pytest.raises(LimitError, match=r"^entrypoint\[0\]"):
        check_spec_limits(spec(entrypoint=["x" * 10_000]))
    with pytest.raises(SpecError, match="^name"):
        resolve_spec(types_pb2.JobSpec(name="n" * 1000, model="gpt2"))


# ----- no server-side paths ------------------------------------------------------------------------
LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 688,
                "vocab_size": 1000, "max_position_embeddings": 512}


def test_the_server_never_opens_a_path_a_client_named(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_CONFIG))
    opened: list[str] = []
    real_open = Path.open

    def spy(self, *args, **kwargs):
        opened.append(str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    for model in (str(config), "/etc/shadow", "/no/such/config.json"):
        with pytest.raises(SpecError) as err:
            resolve_spec(spec().__class__(name="s", model=model, training=spec().training))
        # One answer whether or not the file exists: no existence oracle.
        assert "opens no paths" in str(err.value)
    assert not opened


def test_the_client_sends_a_local_config_inline_and_the_server_accepts_it(tmp_path):
    config = tmp_path / "tiny" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA_CONFIG))
    sent = inline_model_config(types_pb2.JobSpec(name="s", model=str(config), training=spec().training))
    assert sent.model == "tiny" and json.loads(sent.model_config_json) == LLAMA_CONFIG
    assert resolve_spec(sent).arch.hidden_size == 256
    bad = types_pb2.JobSpec(name="s", model="x", model_config_json="{not json", training=spec().training)
    with pytest.raises(SpecError, match="^model_config_json"):
        resolve_spec(bad)


# ----- tenancy ---------------------------------------------------------------------------------------
def _job(tenant: str, state: int, gpus: int = 0) -> types_pb2.Job:
    return types_pb2.Job(id=f"{tenant}-{state}-{gpus}", tenant=tenant, state=state,
                         option=types_pb2.PlanOption(num_gpus=gpus))


def test_quotas_count_the_tenants_own_jobs_only():
    jobs = [_job("a", types_pb2.QUEUED), _job("b", types_pb2.QUEUED), _job("a", types_pb2.RUNNING, 4)]
    assert quota_problem("a", TenantPolicy(max_queued_jobs=2), spec(), jobs) == ""
    assert "queued" in quota_problem("a", TenantPolicy(max_queued_jobs=1), spec(), jobs)
    wide = spec(constraints=types_pb2.Constraints(min_gpus=8))
    assert "at least 8" in quota_problem("a", TenantPolicy(max_gpus=4), wide, jobs)
    assert placement_quota_problem("a", TenantPolicy(max_gpus=6), 2, jobs) == ""
    assert "exceeds 6" in placement_quota_problem("a", TenantPolicy(max_gpus=6), 3, jobs)


def test_entrypoints_outside_the_allow_list_are_refused():
    import sys

    policy = TenantPolicy(entrypoints=["/opt/train/bin/run"])
    assert entrypoint_problem([], policy) == ""
    assert entrypoint_problem([sys.executable, "-m", "frenzy_trainer"], policy) == ""
    assert entrypoint_problem(["/opt/train/bin/run", "--x"], policy) == ""
    assert "not allowed" in entrypoint_problem(["sh", "-c", "rm -rf /"], policy)
    assert "not allowed" in entrypoint_problem([sys.executable, "-c", "print(1)"], policy)
    assert entrypoint_problem(["anything"], TenantPolicy(entrypoints=["*"])) == ""


def test_rate_limiter_is_a_token_bucket_per_tenant():
    limiter = RateLimiter()
    assert [limiter.allow("a", 1.0, 2, 0.0) for _ in range(3)] == [True, True, False]
    assert limiter.allow("b", 1.0, 2, 0.0)  # another tenant has its own bucket
    assert limiter.allow("a", 1.0, 2, 1.0)  # refilled after a second


# ----- job environment and client config -------------------------------------------------------------
def test_jobs_get_no_broker_address_or_credentials():
    env = clean_environment({"PATH": "/bin", "KAFKA_BOOTSTRAP": "b:9092", "FRENZY_JOIN_TOKEN": "x.y",
                             "FRENZY_ORCHESTRATOR_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s",
                             "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert env == {"PATH": "/bin", "NCCL_DEBUG": "INFO"}


def test_client_config_is_private_and_env_overrides_the_token(tmp_path, monkeypatch):
    path = tmp_path / "client.json"
    write_client_config(path, ClientConfig("127.0.0.1:1234", "id.secret", "PEM"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_client_config(path).token == "id.secret"
    monkeypatch.setenv("FRENZY_CONFIG", str(path))
    monkeypatch.delenv("FRENZY_ADDR", raising=False)
    monkeypatch.delenv("FRENZY_TOKEN", raising=False)
    assert resolve() == ClientConfig("127.0.0.1:1234", "id.secret", "PEM")
    monkeypatch.setenv("FRENZY_TOKEN", "other.token")
    assert resolve().token == "other.token"
    assert resolve("10.0.0.1:1").ca_pem == ""  # a config for another address is not used


@pytest.mark.parametrize("config,message", [
    ({**LLAMA_CONFIG, "hidden_size": None}, "hidden_size: missing"),
    ({**LLAMA_CONFIG, "num_hidden_layers": [2]}, "num_hidden_layers: must be an integer"),
    ({**LLAMA_CONFIG, "hidden_size": 1 << 40}, "exceeds the limit"),
])
def test_an_inline_config_with_wrong_types_or_absurd_sizes_is_a_spec_error(config, message):
    bad = types_pb2.JobSpec(name="s", model="x", model_config_json=json.dumps(config),
                            training=spec().training)
    with pytest.raises(SpecError, match=message):
        resolve_spec(bad)
