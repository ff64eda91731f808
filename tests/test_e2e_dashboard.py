"""The dashboard in a real browser (Debian's chromium, driven by Selenium) against a real cluster:
what a person sees when they submit a job. Screenshots go to $FRENZY_TEST_ARTIFACTS
(default test-artifacts/) so a failed run can be looked at. `frenzy explain` runs against the
same cluster."""
from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from click.testing import CliRunner

from frenzy.client import FrenzyClient
from frenzy.security.store import SecurityStore
from frenzy.tools.cli import cli
from frenzy.v1 import types_pb2

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("FRENZY_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
TEAM_TOKEN = "team-a-token-for-the-browser-test"
# Flags for a headless browser run as root in a sandboxed container, quiet on the network.
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]

NO_BROWSER = ("no browser: install Debian's chromium and chromium-driver (.ci/run does) to run "
              "the dashboard's browser tests")


@pytest.fixture(scope="module")
def cluster(local_cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("frenzy")
    tokens = workdir / "dashboard-tokens.json"
    tokens.write_text(json.dumps({TEAM_TOKEN: {"tenant": "team-a", "role": "user"}}))
    return local_cluster("dashboard", workdir=workdir,
                         extra_env={"FRENZY_DASHBOARD_TOKENS_FILE": str(tokens)})


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(NO_BROWSER)
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def wait_for(driver, what, timeout_s: float = 30.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(lambda d: what(d))


def snapshot(driver, css: str) -> list[dict]:
    """Class and text of every match, read in one go: the live part is replaced under us, so
    element handles go stale between two reads."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => ({cls: e.className, text: e.textContent.trim()}));", css)


def text_of(driver, css: str) -> str:
    return " ".join(item["text"] for item in snapshot(driver, css))


def mark_page(driver) -> None:
    """A flag that a reload would wipe: the page must change under it by itself."""
    driver.execute_script("window.__notReloaded = true;")


def not_reloaded(driver) -> bool:
    return driver.execute_script("return window.__notReloaded === true;")


def spec(name: str) -> types_pb2.JobSpec:
    return types_pb2.JobSpec(name=name, model="gpt2", training=types_pb2.TrainingConfig(
        seq_len=1024, global_batch_size=8, tokens=40_000_000))


def test_a_submitted_job_lights_up_its_gpus_and_its_page_follows_it_live(cluster, browser):
    browser.get(cluster.dashboard_link)
    wait_for(browser, lambda d: snapshot(d, ".node .gpu"))
    assert browser.current_url.endswith("/"), "the login link should land on the cluster view"
    assert "token" not in browser.current_url
    assert len(snapshot(browser, ".gpu")) == 12  # 1×4 A100 + 2×4 T4
    mark_page(browser)

    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec("browser-job"))
        lit = wait_for(browser, lambda d: snapshot(d, f'.gpu[data-job="{job_id}"]'))
        browser.save_screenshot(str(ARTIFACTS / "cluster.png"))
        assert not_reloaded(browser)
        assert all("busy" in gpu["cls"] for gpu in lit)

        browser.get(f"{cluster.dashboard_link.split('/login')[0]}/jobs/{job_id}")
        options = snapshot(browser, "#options tbody tr")
        assert options and "MARP has not planned" not in options[0]["text"]
        assert snapshot(browser, "#options tr.chosen"), "the chosen option is marked, in sight"
        decision = text_of(browser, "#decision")
        job = client.get(job_id)
        if job.HasField("decision") or "No decision record" not in decision:
            assert job.option.gpu_type in decision  # the scheduler's record names what it chose
        else:
            assert "No decision record yet" in decision  # a scheduler that publishes none
        mark_page(browser)
        state = lambda d: text_of(d, "#job-state")  # noqa: E731
        first = state(browser)
        assert first in {"PLACED", "LAUNCHING", "RUNNING", "SUCCEEDED"}
        wait_for(browser, lambda d: state(d) == "SUCCEEDED", timeout_s=60)
        assert not_reloaded(browser), "the state changed without a reload"
        # The synthetic workload's step lines, shipped by the agent, in the page's log tail.
        wait_for(browser, lambda d: "] step " in text_of(d, "#log-tail"), timeout_s=30)
        browser.save_screenshot(str(ARTIFACTS / "job.png"))
        assert client.get(job_id).state == types_pb2.SUCCEEDED

    base = cluster.dashboard_link.split("/login")[0]
    browser.get(f"{base}/jobs")
    wait_for(browser, lambda d: snapshot(d, f'tr.job[data-job="{job_id}"]'))
    browser.save_screenshot(str(ARTIFACTS / "jobs.png"))
    browser.get(f"{base}/memory")
    browser.save_screenshot(str(ARTIFACTS / "memory.png"))


def test_a_tenant_sees_only_their_jobs_and_the_login_link_works_once(cluster, browser):
    browser.delete_all_cookies()
    browser.get(cluster.dashboard_link)  # already used by the test above
    assert "not valid" in text_of(browser, "body")
    base = cluster.dashboard_link.split("/login")[0]
    browser.get(f"{base}/login?token={TEAM_TOKEN}")
    wait_for(browser, lambda d: snapshot(d, ".node"))
    assert "team-a (user)" in text_of(browser, "nav")
    browser.get(f"{base}/jobs")
    assert "No jobs yet." in text_of(browser, "#jobs")  # jobs so far have no tenant


def test_explain_shows_the_decision_and_marps_options_with_the_held_one_marked(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec("explained"))
        deadline = time.monotonic() + 60
        while client.get(job_id).state not in {types_pb2.SUCCEEDED, types_pb2.FAILED} and time.monotonic() < deadline:
            time.sleep(0.2)
        job = client.get(job_id)
    assert job.state == types_pb2.SUCCEEDED
    env = {"FRENZY_ADDR": cluster.grpc_address}
    shown = CliRunner().invoke(cli, ["explain", job_id], env=env)
    assert shown.exit_code == 0, shown.output
    assert "MARP's options for this spec" in shown.output and "→" in shown.output
    assert job.option.gpu_type in shown.output
    record = json.loads(CliRunner().invoke(cli, ["explain", job_id, "--json"], env=env).output)
    held = [o for o in record["options"] if o["gpu_type"] == job.option.gpu_type
            and o["num_gpus"] == job.option.num_gpus]
    assert record["state"] == "SUCCEEDED" and held, "the option the job holds is among MARP's"
    if record["decision"] is not None:
        assert record["decision"]["chosen"]["gpu_type"] == job.option.gpu_type
    missing = CliRunner().invoke(cli, ["explain", "job-nope"], env=env)
    assert missing.exit_code == 2 and "job_id: no job 'job-nope'" in missing.output


def test_the_orchestrator_answers_health_checks_and_reflection(cluster):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    # The local cluster serves TLS (frenzy/security); probes carry no token, reflection needs one.
    credentials = grpc.ssl_channel_credentials(root_certificates=cluster.security.ca_pem.encode())
    with grpc.secure_channel(cluster.grpc_address, credentials) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "frenzy.v1.JobService", "frenzy.v1.ClusterService"):
            assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status == \
                health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            list(reflect.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        (answer,) = reflect.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10,
            metadata=(("authorization", f"Bearer {cluster.security.admin_token}"),))
        names = {s.name for s in answer.list_services_response.service}
        assert {"frenzy.v1.JobService", "frenzy.v1.PredictorService", "grpc.health.v1.Health"} <= names


def test_the_grpc_apis_tokens_log_in_and_scope_the_jobs_by_tenant(cluster):
    """One login for the API and the dashboard: a tenant-b token does not see tenant-a's job, an
    admin token does, a bad token is refused, and a revoked token's session ends."""
    store = SecurityStore(cluster.security.directory)
    _, token_a = store.create("api", tenant="tenant-a")
    b_record, token_b = store.create("api", tenant="tenant-b")
    with FrenzyClient(cluster.grpc_address, token=token_a, ca_pem=cluster.security.ca_pem) as client:
        job_id = client.submit(spec("scoped"))
    base = cluster.dashboard_link.split("/login")[0]
    admin, as_b, stranger = dashboard_login(base, cluster.security.admin_token), dashboard_login(base, token_b), None
    deadline = time.monotonic() + 60
    while job_id not in fetch(admin, f"{base}/jobs")[2] and time.monotonic() < deadline:
        time.sleep(0.5)
    status, _, page = fetch(admin, f"{base}/jobs/{job_id}")
    assert status == 200 and "tenant-a" in page, "the admin sees every tenant's jobs"
    status, url, page = fetch(as_b, f"{base}/jobs")
    assert status == 200 and url.endswith("/jobs") and job_id not in page
    assert fetch(as_b, f"{base}/jobs/{job_id}")[0] == 404
    with pytest.raises(PermissionError):
        stranger = dashboard_login(base, token_b.split(".")[0] + ".not-the-secret")
    assert stranger is None
    store.revoke(b_record.id)
    assert fetch(as_b, f"{base}/jobs")[1].endswith("/login"), "a revoked token's session must end"


def dashboard_login(base: str, token: str) -> urllib.request.OpenerDirector:
    """A cookie-keeping HTTP client logged in with `token`; PermissionError if refused."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    status, _, _ = fetch(opener, f"{base}/login", {"token": token})
    if status != 200:
        raise PermissionError(f"login refused: HTTP {status}")
    return opener


def fetch(opener: urllib.request.OpenerDirector, url: str,
          form: dict | None = None) -> tuple[int, str, str]:
    """Status, the URL landed on after redirects, and the body."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    try:
        with opener.open(url, data=data, timeout=10) as response:
            return response.status, response.url, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, url, error.read().decode()
