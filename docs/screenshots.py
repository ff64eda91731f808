"""Take the dashboard screenshots in docs/images/ from a real local cluster running the demo
workload (the same ten jobs `make run` submits), in Debian's chromium.

    .venv/bin/python docs/screenshots.py     # about a minute; needs chromium and chromium-driver
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver

from frenzy.client import FrenzyClient
from frenzy.ports import free_port
from frenzy.tools.demo import sample_specs
from frenzy.tools.localcluster import DEFAULT_CLUSTER, start_cluster
from frenzy.v1 import types_pb2

OUT = Path(__file__).parent / "images"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1100"]


def browser(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS + [f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService("/usr/bin/chromedriver"))


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        cluster = start_cluster(DEFAULT_CLUSTER, free_port(), Path(workdir), "has",
                                extra_env={"FRENZY_TIME_SCALE": "0.004"})
        driver = browser(str(Path(workdir) / "chromium"))
        try:
            base = cluster.dashboard_link.split("/login")[0]
            driver.get(cluster.dashboard_link)
            with FrenzyClient(cluster.grpc_address) as client:
                ids = [client.submit(spec) for spec in sample_specs()]
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    jobs = [client.get(i) for i in ids]
                    running = [j for j in jobs if j.state == types_pb2.RUNNING and j.progress.step > 3]
                    if len(running) >= 3:
                        break
                    time.sleep(0.3)
                time.sleep(2)
                driver.save_screenshot(str(OUT / "dashboard-cluster.png"))
                driver.get(f"{base}/jobs")
                time.sleep(1)
                driver.save_screenshot(str(OUT / "dashboard-jobs.png"))
                driver.get(f"{base}/jobs/{running[0].id}")
                time.sleep(3)
                driver.execute_script("document.querySelector('[data-chart=curve]').scrollIntoView()")
                driver.save_screenshot(str(OUT / "dashboard-job-curve.png"))
                driver.execute_script("window.scrollTo(0, 0)")
                driver.save_screenshot(str(OUT / "dashboard-job.png"))
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and sum(
                        client.get(i).state == types_pb2.SUCCEEDED for i in ids) < 5:
                    time.sleep(0.5)
                driver.get(f"{base}/memory")
                time.sleep(1)
                driver.save_screenshot(str(OUT / "dashboard-memory.png"))
        finally:
            driver.quit()
            cluster.stop()
    print(f"screenshots in {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
