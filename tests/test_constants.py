"""One place for each constant that used to be written several times (the source is read with ast):
job-state groups (frenzy.jobstates), MAX_SEQ_LEN and the optimizer's bytes per parameter
(frenzy.domain), and the FRENZY_* variables between a node agent and its job processes
(frenzy.jobvars). Each check also runs on a snippet holding a copy, so it cannot pass vacuously.
"""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from frenzy import jobvars

ROOT = Path(__file__).resolve().parent.parent
EVERYWHERE = ("frenzy", "services", "tests", "bench", "examples", "docs")
STATE_GROUPS = {"TERMINAL": {"SUCCEEDED", "FAILED", "CANCELLED"},
                "HOLDING": {"PLACED", "LAUNCHING", "RUNNING"},
                "WAITING": {"SUBMITTED", "PLANNED", "QUEUED"}}


@cache
def parsed() -> dict[str, ast.AST]:
    """Every Python file of the repository but the generated protobuf modules, parsed once."""
    found = {}
    for root in EVERYWHERE:
        for path in (ROOT / root).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith("frenzy/v1/"):
                found[rel] = ast.parse(path.read_text())
    return found


def state_group_copies(tree: ast.AST) -> list[str]:
    """Set, tuple or list literals naming exactly the states of a group (types_pb2.SUCCEEDED, ...);
    a longer list (the lifecycle's order in a test) is not a copy."""
    copies = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            named = {e.attr for e in node.elts if isinstance(e, ast.Attribute)}
            copies += [f"line {node.lineno}: {group}" for group, states in STATE_GROUPS.items()
                       if states == named]
    return copies


def max_seq_len_copies(tree: ast.AST) -> list[str]:
    return [f"line {node.lineno}" for node in ast.walk(tree)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name) and target.id == "MAX_SEQ_LEN"]


def optimizer_bytes_copies(tree: ast.AST) -> list[str]:
    """{"adamw": 8, ...} literals, and `8 if optimizer == "adamw" else 4` expressions."""
    copies = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value in ("adamw", "sgd")
                and isinstance(v, ast.Constant) and isinstance(v.value, int)
                for k, v in zip(node.keys, node.values)):
            copies.append(f"line {node.lineno}: dict")
        if (isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant)
                and isinstance(node.body.value, int)
                and any(isinstance(c, ast.Constant) and c.value in ("adamw", "sgd")
                        for c in ast.walk(node.test))):
            copies.append(f"line {node.lineno}: conditional")
    return copies


def job_variable_literals(tree: ast.AST) -> list[str]:
    names = set(jobvars.names().values())
    return [f"line {node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names]


def test_job_state_groups_are_written_once():
    found = {path: copies for path, tree in parsed().items()
             if path != "frenzy/jobstates.py" and (copies := state_group_copies(tree))}
    assert not found, f"import them from frenzy.jobstates: {found}"


def test_max_seq_len_and_optimizer_bytes_are_written_once():
    found = {path: copies for path, tree in parsed().items()
             if path != "frenzy/domain.py"
             and (copies := max_seq_len_copies(tree) + optimizer_bytes_copies(tree))}
    assert not found, f"import them from frenzy.domain: {found}"


def test_agent_and_job_processes_name_their_variables_through_jobvars():
    """Both sides of the agent-job contract: the runtime and the services (the trainer included).
    Tools and tests may spell a variable out: they set agent settings (FRENZY_TIME_SCALE is also
    the agent's setting) or play a job's part."""
    found = {path: lits for path, tree in parsed().items()
             if path.startswith(("frenzy/", "services/")) and not path.startswith("frenzy/tools/")
             and path != "frenzy/jobvars.py"
             and (lits := job_variable_literals(tree))}
    assert not found, f"use frenzy.jobvars: {found}"


def test_jobvars_lists_distinct_frenzy_variables():
    values = list(jobvars.names().values())
    assert len(values) == len(set(values)) >= 20
    assert jobvars.names()["STATUS_FILE"] == "FRENZY_STATUS_FILE"


def test_each_check_finds_a_planted_copy():
    planted = ast.parse(
        "TERMINAL = {types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED}\n"
        "held = (t.PLACED, t.LAUNCHING, t.RUNNING)\n"
        "MAX_SEQ_LEN = 1 << 20\n"
        "BYTES = {'adamw': 8, 'sgd': 4}\n"
        "b = 8 if recipe.optimizer == 'adamw' else 4\n"
        "env = {'FRENZY_PLAN': '{}'}\n")
    assert state_group_copies(planted) == ["line 1: TERMINAL", "line 2: HOLDING"]
    assert max_seq_len_copies(planted) == ["line 3"]
    assert optimizer_bytes_copies(planted) == ["line 4: dict", "line 5: conditional"]
    assert job_variable_literals(planted) == ["line 6: FRENZY_PLAN"]
