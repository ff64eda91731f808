"""`frenzy token create|list|revoke` and `frenzy tenant set|list`.

They edit the security directory's files directly: whoever may read that directory is an
administrator already (it holds the orchestrator's signing key). A running orchestrator picks
changes up within a second.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from frenzy.security.bootstrap import SECURITY_DIR
from frenzy.security.store import DEFAULT_TENANT, KINDS, ROLES, SecurityStore, TenantPolicy

_dir_option = click.option(
    "--security-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="default: $FRENZY_SECURITY_DIR, else .frenzy/security")


def _store(security_dir: Path | None) -> SecurityStore:
    directory = security_dir or Path(os.environ.get("FRENZY_SECURITY_DIR") or Path(".frenzy") / SECURITY_DIR)
    if not directory.is_dir():
        raise click.UsageError(f"no security directory at {directory}; run `frenzy up` first or "
                               f"pass --security-dir")
    return SecurityStore(directory)


@click.group("token")
def token() -> None:
    """Manage API tokens, pipeline HMAC keys and agent join tokens."""


@token.command("create")
@click.option("--tenant", default=DEFAULT_TENANT, show_default=True)
@click.option("--role", type=click.Choice(ROLES), default="user", show_default=True)
@click.option("--kind", type=click.Choice(KINDS), default="api", show_default=True,
              help="api: gRPC bearer token; pipeline: HMAC key for records on Kafka; join: agents")
@click.option("--description", default="")
@_dir_option
def create(tenant: str, role: str, kind: str, description: str, security_dir: Path | None) -> None:
    """Create a token and print it (shown once)."""
    from frenzy.security.limits import job_id_problem

    if job_id_problem(tenant):
        raise click.BadParameter(job_id_problem(tenant), param_hint="--tenant")
    rec, text = _store(security_dir).create(kind, tenant, role, description)
    click.echo(text)
    click.echo(f"# {kind} token {rec.id} for tenant {tenant}"
               + (f", role {role}" if kind == "api" else "")
               + ("; pipelines sign with key id and secret (the parts around the '.')"
                  if kind == "pipeline" else ""), err=True)


@token.command("list")
@click.option("--json", "as_json", is_flag=True)
@_dir_option
def list_tokens(as_json: bool, security_dir: Path | None) -> None:
    """List tokens (ids, kinds, tenants, roles; never secrets)."""
    rows = [{"id": t.id, "kind": t.kind, "tenant": t.tenant, "role": t.role,
             "created_at_s": round(t.created_at_s), "description": t.description}
            for t in _store(security_dir).tokens()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['id']}  {r['kind']:<8} {r['tenant']:<16} {r['role']:<6} {r['description']}")


@token.command("revoke")
@click.argument("token_id")
@_dir_option
def revoke(token_id: str, security_dir: Path | None) -> None:
    """Revoke a token by its id (the part before the '.')."""
    if not _store(security_dir).revoke(token_id.split(".")[0]):
        raise click.UsageError(f"no token {token_id!r}")
    click.echo(f"revoked {token_id.split('.')[0]}")


@click.group("tenant")
def tenant() -> None:
    """Tenants' weights, quotas and entrypoint allow-lists."""


@tenant.command("set")
@click.argument("name")
@click.option("--weight", type=click.FloatRange(min=0, min_open=True), default=None)
@click.option("--max-gpus", type=click.IntRange(min=0), default=None, help="0: unlimited")
@click.option("--max-queued-jobs", type=click.IntRange(min=0), default=None, help="0: unlimited")
@click.option("--allow-entrypoint", "entrypoints", multiple=True,
              help="an executable (argv[0]) this tenant's jobs may run; repeat; '*' for any")
@click.option("--requests-per-s", type=click.FloatRange(min=0), default=None, help="0: unlimited")
@_dir_option
def set_tenant(name: str, weight: float | None, max_gpus: int | None, max_queued_jobs: int | None,
               entrypoints: tuple[str, ...], requests_per_s: float | None,
               security_dir: Path | None) -> None:
    """Create or change a tenant; options not given keep their value."""
    store = _store(security_dir)
    policy = store.tenants().get(name, TenantPolicy())
    if weight is not None:
        policy.weight = weight
    if max_gpus is not None:
        policy.max_gpus = max_gpus
    if max_queued_jobs is not None:
        policy.max_queued_jobs = max_queued_jobs
    if entrypoints:
        policy.entrypoints = list(entrypoints)
    if requests_per_s is not None:
        policy.requests_per_s = requests_per_s
    store.set_tenant(name, policy)
    click.echo(json.dumps({name: policy.__dict__}))


@tenant.command("list")
@_dir_option
def list_tenants(security_dir: Path | None) -> None:
    click.echo(json.dumps({n: p.__dict__ for n, p in _store(security_dir).tenants().items()}, indent=2))


@click.group("security")
def security() -> None:
    """Set up keys, certificates and tokens for a cluster not started by `frenzy up`."""


@security.command("init")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="the orchestrator's security directory")
@click.option("--address", required=True, help="the gRPC address clients dial, host:port")
@click.option("--tls-name", "tls_names", multiple=True, help="extra DNS name or IP for the certificate")
@click.option("--bootstrap-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="where to put the join token and the orchestrator's public key for agents")
def init(directory: Path, address: str, tls_names: tuple[str, ...], bootstrap_dir: Path | None) -> None:
    """Idempotent: a second run keeps what exists. Writes <dir>/client.json (admin)."""
    from frenzy.security.bootstrap import init_security

    done = init_security(directory, address, directory / "client.json", list(tls_names), bootstrap_dir)
    click.echo(f"security directory {done.directory}; admin client config {done.client_config_path}")
