"""The compiled build of the scheduler's hot modules (frenzy_scheduler/native.py): used only
when it matches the source, and making exactly the decisions the source makes."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from frenzy_scheduler import native

ROOT = Path(__file__).resolve().parent.parent


def fake_build(tmp_path: Path, source: str, built_from: str, python: str | None = None
               ) -> tuple[list[str], Path]:
    """A package `pkg` with module `mod`, and a build of it from `built_from`."""
    source_dir = tmp_path / "src" / "pkg"
    source_dir.mkdir(parents=True)
    (source_dir / "mod.py").write_text(source)
    build = tmp_path / "native"
    (build / "pkg").mkdir(parents=True)
    digest = hashlib.sha256(built_from.encode()).hexdigest()
    (build / native.MANIFEST).write_text(json.dumps(
        {"python": python or native.python_tag(), "modules": {"pkg.mod": digest}}))
    return [str(source_dir)], build


@pytest.fixture
def native_on(monkeypatch, tmp_path):
    monkeypatch.setenv("FRENZY_NATIVE", "1")
    monkeypatch.setenv("FRENZY_NATIVE_DIR", str(tmp_path / "native"))


def test_a_fresh_build_goes_ahead_of_the_source(native_on, tmp_path) -> None:
    path, build = fake_build(tmp_path, "x = 1\n", "x = 1\n")
    assert native.extend(path, "pkg")
    assert path == [str(build / "pkg"), str(tmp_path / "src" / "pkg")]


def test_a_build_older_than_its_source_is_not_used(native_on, tmp_path) -> None:
    path, _ = fake_build(tmp_path, "x = 2\n", "x = 1\n")
    with pytest.warns(RuntimeWarning, match="pkg.mod.*older than the source"):
        assert not native.extend(path, "pkg")
    assert path == [str(tmp_path / "src" / "pkg")]


def test_one_stale_module_anywhere_rules_the_whole_build_out(native_on, tmp_path) -> None:
    """The compiled modules import each other's compiled code, so a build that is fresh for
    one package but stale in another is not used for either (else the fresh one imports a
    compiled module that is not on the path)."""
    source_dir = tmp_path / "src" / "pkg"
    (source_dir / "sub").mkdir(parents=True)
    (source_dir / "mod.py").write_text("x = 1\n")
    (source_dir / "sub" / "other.py").write_text("y = 2\n")  # edited since the build
    build = tmp_path / "native"
    (build / "pkg" / "sub").mkdir(parents=True)
    (build / native.MANIFEST).write_text(json.dumps({"python": native.python_tag(), "modules": {
        "pkg.mod": hashlib.sha256(b"x = 1\n").hexdigest(),
        "pkg.sub.other": hashlib.sha256(b"y = 1\n").hexdigest()}}))
    for package, path in (("pkg", [str(source_dir)]), ("pkg.sub", [str(source_dir / "sub")])):
        with pytest.warns(RuntimeWarning, match="pkg.sub.other is older than the source"):
            assert not native.extend(path, package)
    (source_dir / "sub" / "other.py").write_text("y = 1\n")  # as built: both are used
    assert native.extend([str(source_dir)], "pkg")
    assert native.extend([str(source_dir / "sub")], "pkg.sub")


def test_a_build_for_another_interpreter_is_not_used(native_on, tmp_path) -> None:
    path, _ = fake_build(tmp_path, "x = 1\n", "x = 1\n", python="cpython-39-linux")
    assert not native.extend(path, "pkg")


def test_frenzy_native_0_turns_the_build_off(native_on, monkeypatch, tmp_path) -> None:
    path, _ = fake_build(tmp_path, "x = 1\n", "x = 1\n")
    monkeypatch.setenv("FRENZY_NATIVE", "0")
    assert not native.extend(path, "pkg")


def test_a_package_with_nothing_built_is_left_alone(native_on, tmp_path) -> None:
    path, _ = fake_build(tmp_path, "x = 1\n", "x = 1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not native.extend(path, "other")
    assert path == [str(tmp_path / "src" / "pkg")]


def test_the_suite_runs_the_python_source() -> None:
    """conftest turns the build off: the tests below patch internals of these modules."""
    for name in native.MODULES:
        importlib.import_module(name)
    assert native.compiled_modules() == []


# has's decisions in a window of the Philly trace (admission, growth, reservations) and after
# each of 100 events at a sweep point (the per-event walk), hashed (bench/has_digest.py)
DRIVER = r"""
import json, random, sys
sys.path.insert(0, "bench")
import has_digest as d
from frenzy_scheduler import native
trace = d.load_trace(d.PHILLY)
groups = d.load_cluster_file(d.CLUSTERS["frenzy-288"])
jobs = d.prepare_jobs(trace, groups, start_s=trace[5000].submit_time_s, count=200, seed=0)
out = {"window": d.simulated(jobs, groups, True)}
queue, cluster, running = d.sweep_inputs(trace, 1000, 500, random.Random(0))
out["events"] = d.evented(trace, queue, cluster, running, 1000, 500, True)
out["compiled"] = native.compiled_modules()
# Every policy builds its placements and records (frenzy_scheduler.actions, compiled) from its
# own values, and a compiled class checks their types: each policy's window, records read
from frenzy_scheduler.policies import get_policy, policy_names
from frenzy_scheduler.simulator import SimConfig, simulate
out["policies"] = {}
class Reading:  # the policy, its answers' records read as the live scheduler reads them
    def __init__(self, policy):
        self.policy, self.records = policy, []
        self.name, self.round_s = policy.name, policy.round_s
    def __getattr__(self, attribute):
        return getattr(self.policy, attribute)
    def schedule(self, *args):
        actions = self.policy.schedule(*args)
        self.records.extend(repr((p.job_id, p.kind, p.assignments, p.decision.reason,
                                  [(a.option.gpu_type, a.option.num_gpus, a.start_s, a.verdict)
                                   for a in p.decision.alternatives]))
                            for p in actions if p.decision is not None)
        return actions
for name in policy_names():
    policy = Reading(get_policy(name))
    result = simulate(jobs[:60], d.build_cluster(list(groups)), policy,
                      config=SimConfig.realistic())
    out["policies"][name] = [len(policy.records), policy.records[:40],
                             [(r.job_id, r.start_time_s, r.end_time_s) for r in result.records]]
print(json.dumps(out))
"""


def driven(driver: str, native_setting: str, build: Path) -> dict:
    """What a driver script prints as its last line (JSON), run on the build or the source."""
    env = {**os.environ, "FRENZY_NATIVE": native_setting, "FRENZY_NATIVE_DIR": str(build)}
    done = subprocess.run([sys.executable, "-c", driver], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """This checkout's compiled build, made once for the tests below."""
    pytest.importorskip("mypyc", reason="the dev extra installs mypy, which carries mypyc")
    build = tmp_path_factory.mktemp("build") / "native"
    made = subprocess.run([sys.executable, "-m", "frenzy_scheduler.native_build",
                           "--out", str(build)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    assert set(json.loads((build / native.MANIFEST).read_text())["modules"]) == \
        set(native.MODULES)
    return build


def test_the_compiled_build_decides_exactly_as_the_source(build) -> None:
    compiled, source = driven(DRIVER, "1", build), driven(DRIVER, "0", build)
    assert compiled["compiled"] == list(native.MODULES)
    assert source["compiled"] == []
    assert compiled["window"] == source["window"]
    assert compiled["events"] == source["events"]
    assert set(compiled["policies"]) >= {"fifo", "frenzy", "frenzy-narrow", "sia", "sia-static",
                                         "has"}
    for name, (records, _, _) in compiled["policies"].items():
        assert records > 0, f"{name} placed nothing: the check below would be empty"
    assert compiled["policies"] == source["policies"]


# The live scheduler builds the policy's inputs (frenzy_scheduler.core, compiled) from the
# contract's messages, where a compiled class refuses a value of another type (a repeated
# field where a list or tuple is declared, say). These tests patch nothing, so they run on
# the build as they run on the source: its state from the messages, and the real services on
# the embedded broker (every process they start inherits the build); the driver first checks
# that the build is in use.
ON_BUILD = r"""
import sys
import pytest
from frenzy_scheduler import native
import frenzy_scheduler.core, frenzy_scheduler.livestate, frenzy_scheduler.policies.has
missing = sorted(set(native.MODULES) - set(native.compiled_modules()))
if missing:
    sys.exit(f"not compiled: {missing}")
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


def test_the_live_scheduler_runs_on_the_compiled_build(build) -> None:
    env = {**os.environ, "FRENZY_TEST_ON_BUILD": str(build), "FRENZY_NATIVE": "1",
           "FRENZY_NATIVE_DIR": str(build)}
    done = subprocess.run([sys.executable, "-c", ON_BUILD, "tests/test_scheduler_livestate.py",
                           "tests/test_scheduler_reshapable.py", "tests/test_e2e_foundation.py",
                           "tests/test_e2e_held.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-1000:]


# has's per-job caches (`_JobFacts`, their `_Row`s and entry tuples) after a batch call and a
# full collection: which of them the cyclic GC still tracks (docs/has-performance.md,
# thirty-fourth round: a collection that walks them evicts the next call's data)
TRACKED = r"""
import gc, json, random, sys
sys.path.insert(0, "bench")
import has_digest as d
from frenzy_scheduler import native
from frenzy_scheduler.policies.has import HasPolicy
trace = d.load_trace(d.PHILLY)
queue, cluster, running = d.sweep_inputs(trace, 1000, 500, random.Random(0))
policy = HasPolicy()
policy.schedule(queue, cluster, 0.0, running)
gc.collect()
facts = [f for f in policy._facts.values() if f is not None]
rows = [row for f in facts for row in f.by_rank]
print(json.dumps({"compiled": native.compiled_modules(), "facts": len(facts), "rows": len(rows),
                  "tracked": [sum(map(gc.is_tracked, facts)), sum(map(gc.is_tracked, rows)),
                              sum(gc.is_tracked(f.entries) for f in facts)]}))
"""


def test_has_caches_are_invisible_to_the_cyclic_gc_on_the_build(build) -> None:
    compiled, source = driven(TRACKED, "1", build), driven(TRACKED, "0", build)
    assert compiled["compiled"] == list(native.MODULES) and source["compiled"] == []
    assert compiled["facts"] > 100 and compiled["rows"] > 1000
    assert compiled["tracked"] == [0, 0, 0]  # facts, rows, entry tuples
    # The source's classes are tracked (what the check would see if a build lost the mark);
    # its entry tuples, numbers and strings only, are untracked by the collection all the same
    assert source["tracked"][:2] == [source["facts"], source["rows"]]
    assert source["tracked"][2] == 0
