"""Dependencies point one way, read from the source (ast), function-local imports included.

    tools (frenzy.tools.*)        the `frenzy` command, `frenzy up`, broker, demo, fuzz, protogen
      |           \\
      |            SDK (frenzy.client, frenzy.pipeline)
      |           /
    services (frenzy_agent, ...)  reach the runtime only
      |
    runtime (every other frenzy.* module)  the contract: domain, events, topics, bus, config, ...

The runtime imports neither the SDK, the tools nor a service (its one exception: `frenzy.Client`,
the SDK's public name, loaded lazily by frenzy/__init__.py). The SDK imports no tool and no
service. A service imports no tool and no SDK. A tool imports no service package: it runs services
as processes, and the `frenzy` command finds the services' own subcommands by name
(frenzy.tools.cli.LAZY_COMMANDS), which is not an import.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICE_DIRS = sorted(p for p in (ROOT / "services").glob("*/*") if (p / "__init__.py").exists())
SERVICES = frozenset(p.name for p in SERVICE_DIRS)
SDK = frozenset({"frenzy.client", "frenzy.pipeline"})
ALLOWED = {("frenzy", "frenzy.client"), ("frenzy", "frenzy.client.Client")}  # frenzy.Client, lazily


def imported_modules(source: str) -> set[str]:
    """Absolute module names an import statement names, wherever it stands (relative imports stay
    inside their own package and are skipped). `from a import b` yields `a` and `a.b`, since b may
    be a module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    top = module.split(".")[0]
    if top in SERVICES:
        return "service"
    if top != "frenzy":
        return "other"
    if module == "frenzy.tools" or module.startswith("frenzy.tools."):
        return "tools"
    if any(module == sdk or module.startswith(sdk + ".") for sdk in SDK):
        return "sdk"
    return "runtime"


FORBIDDEN = {"runtime": {"tools", "sdk", "service"}, "sdk": {"tools", "service"},
             "service": {"tools", "sdk"}, "tools": {"service"}}


def violations(module: str, source: str) -> list[str]:
    here = part_of(module)
    return sorted(f"{module} ({here}) imports {name} ({part_of(name)})"
                  for name in imported_modules(source)
                  if part_of(name) in FORBIDDEN.get(here, ()) and (module, name) not in ALLOWED)


def all_modules() -> dict[str, str]:
    found = {module_name(p, ROOT): p.read_text() for p in (ROOT / "frenzy").rglob("*.py")
             if "v1" not in p.relative_to(ROOT).parts}
    for service_dir in SERVICE_DIRS:
        found.update({module_name(p, service_dir.parent): p.read_text()
                      for p in service_dir.rglob("*.py")})
    return found


def test_every_part_is_represented():
    parts = {part_of(m) for m in all_modules()}
    assert parts == {"runtime", "sdk", "service", "tools"}
    assert {"frenzy_agent", "frenzy_scheduler", "frenzy_orchestrator", "frenzy_predictor"} <= SERVICES


def test_dependencies_point_one_way():
    found = [v for module, source in sorted(all_modules().items()) for v in violations(module, source)]
    assert not found, "\n".join(found)


def test_the_checker_sees_nested_and_from_imports():
    """The rule above would pass vacuously if imports were missed: show it catches each form."""
    assert violations("frenzy.bus", "def f():\n    from frenzy.tools import broker\n") == [
        "frenzy.bus (runtime) imports frenzy.tools (tools)",
        "frenzy.bus (runtime) imports frenzy.tools.broker (tools)"]
    assert violations("frenzy.tools.localcluster", "import frenzy_scheduler.policies") == [
        "frenzy.tools.localcluster (tools) imports frenzy_scheduler.policies (service)"]
    assert violations("frenzy_agent.executor", "from frenzy import client") == [
        "frenzy_agent.executor (service) imports frenzy.client (sdk)"]
    assert violations("frenzy_trainer.train", "from . import checkpoint\nimport torch") == []
