"""The compiled build of the scheduler's hot modules: used when it matches their source.

Why: HAS's decision is a Python walk over the queue, and the goal is a p99 under 10 ms at
10,000 GPUs with 5,000 queued (docs/has-performance.md). The same modules compiled with mypyc
(C extensions built from the unchanged, type-annotated Python) make the same decisions in
about 0.6x the CPU time. The Python source stays the reference: it is what the tests run,
what a reader reads, and what runs wherever no compiler is at hand.

`frenzy_scheduler.native_build` builds `MODULES` into `native_dir()`, with a manifest of each
source's SHA-256. A package that holds one of them calls `extend(__path__, __name__)` first
thing: the build goes ahead of the source on the package's search path only when every module
in the manifest matches its source byte for byte, so an edited module is never shadowed by a
stale build (all of them run as Python, with a warning, until rebuilt).

Settings: FRENZY_NATIVE=0 turns the build off (the test suite does, except where
tests/test_native_build.py runs tests on the build; tests patch the policies' internals, which
compiled classes do not allow), FRENZY_NATIVE_DIR moves it."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from pathlib import Path

# The modules worth compiling: the policy walk and what it calls per job (profile,
# docs/has-performance.md). Order: dependencies first.
MODULES = (
    "frenzy_scheduler.actions",
    # The policy's inputs (`NodeState`, `QueuedJob`, `RunningJob`): compiled, the policies
    # read their fields directly, where an interpreted dataclass's are generic attribute
    # reads (the free-GPU index reads every node's free list at every decision). A compiled
    # class checks the types it is given: tests/test_native_build.py runs the live
    # scheduler, which builds them from the contract's messages, on the build.
    "frenzy_scheduler.core",
    "frenzy_scheduler.progress",
    "frenzy_scheduler.queuediff",
    "frenzy_scheduler.placement",
    "frenzy_scheduler.policies.releases",
    "frenzy_scheduler.policies.elastic",
    "frenzy_scheduler.policies.has",
)
MANIFEST = "manifest.json"


def enabled() -> bool:
    return os.environ.get("FRENZY_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def native_dir() -> Path:
    configured = os.environ.get("FRENZY_NATIVE_DIR", "").strip()
    return Path(configured) if configured else Path(__file__).resolve().parent / "_native"


def source_digest(source: Path) -> str | None:
    """SHA-256 of a module's source; None when it has none."""
    try:
        return hashlib.sha256(source.read_bytes()).hexdigest()
    except OSError:
        return None


def python_tag() -> str:
    """A build is for one interpreter (its C API): the manifest records which."""
    return f"{sys.implementation.cache_tag}-{sys.platform}"


def read_manifest(root: Path) -> dict[str, str] | None:
    """module -> SHA-256 of the source it was built from; None without a usable build."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("python") != python_tag():
        return None
    modules = manifest.get("modules")
    return modules if isinstance(modules, dict) else None


def extend(path: list[str], package: str) -> bool:
    """Put the build of `package`'s compiled modules ahead of their source on the package's
    search path (`path`: its `__path__`, source directory first), when it is fresh. True when
    it did."""
    if not enabled():
        return False
    root = native_dir()
    built = read_manifest(root)
    if not built:
        return False
    if not any(m.rpartition(".")[0] == package for m in built):
        return False
    # The build is one unit: its modules import each other's compiled code (mypyc's shared
    # group), so one stale module anywhere in it, not only in this package, rules all of it
    # out (an edited placement.py once left the compiled policies importing a compiled
    # placement that was not on the path)
    depth = package.count(".")
    top_dir = Path(path[0]).parents[depth - 1] if depth else Path(path[0])
    top = package.partition(".")[0]
    stale = [m for m in built if m.partition(".")[0] != top or source_digest(
        top_dir.joinpath(*m.split(".")[1:]).with_suffix(".py")) != built[m]]
    if stale:
        warnings.warn(f"the compiled build of {', '.join(stale)} is older than the source; "
                      f"running it as Python (rebuild: make native)", RuntimeWarning, stacklevel=3)
        return False
    path.insert(0, str(root.joinpath(*package.split("."))))
    return True


def is_compiled(module_file: str) -> bool:
    """Is the module with this `__file__` the compiled build? A module with a loop that mypyc
    compiles to a few instructions an item, where Python runs a chain of C builtins faster,
    asks it once at import (`queuediff._COMPILED`, `placement._COMPILED`)."""
    return not module_file.endswith(".py")


def compiled_modules() -> list[str]:
    """Which of `MODULES` this process runs compiled (benchmarks print it beside their figures)."""
    return [name for name in MODULES
            if (module := sys.modules.get(name)) is not None
            and is_compiled(str(getattr(module, "__file__", "")))]


def build_name() -> str:
    """One phrase for a benchmark's output: which build of `MODULES` this process runs."""
    compiled = compiled_modules()
    if not compiled:
        return "Python source"
    if len(compiled) == len(MODULES):
        return "compiled (mypyc)"
    return "compiled (mypyc): " + ", ".join(name.rpartition(".")[2] for name in compiled)
