"""Checkpoint and resume in the reference trainer: real processes, gloo, DCP on disk."""
from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from frenzy.outcomes import RankStatus, read_status  # noqa: E402
from test_trainer import COMMON, _launch, _main_in_process, _progress, _wait  # noqa: E402

# pytest resets warning filters per test: the trainer's own filter for its one-rank saves
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:torch.distributed is disabled")]


def _losses(lines: list[dict]) -> dict[int, float]:
    return {line["step"]: line["loss"] for line in lines if "event" not in line}


def _events(lines: list[dict], event: str) -> list[dict]:
    return [line for line in lines if line.get("event") == event]


def test_resume_reshards_to_another_plan_and_the_loss_continues(tmp_path):
    """dp=2 ZeRO-1 saves at step 2; tp=2 with sequence parallelism resumes: steps 3-6 match an
    uninterrupted single-rank run of the same job (the data is a function of the step)."""
    uri = tmp_path / "ckpt"
    args = ["--model", "tiny-llama", *COMMON, "--checkpoint-uri", str(uri)]
    reference = tmp_path / "reference"
    reference.mkdir()
    assert _main_in_process(reference, ["--model", "tiny-llama", "--steps", "6", *COMMON],
                            {"micro_batch": 2}) == 0
    expected = _losses(_progress(reference))

    first = tmp_path / "first"
    first.mkdir()
    for code, out in _wait(_launch(first, [*args, "--steps", "4", "--checkpoint-every-steps", "2",
                                           "--keep-checkpoints"], {"dp": 2, "zero": 1, "micro_batch": 2})):
        assert code == 0, out
    commits = _events(_progress(first), "checkpoint")
    assert [e["step"] for e in commits] == [2] and commits[0]["save_s"] > 0
    assert (uri / "step-000000002" / "COMMITTED").is_file()

    second = tmp_path / "second"
    second.mkdir()
    plan = {"dp": 1, "tp": 2, "micro_batch": 2, "sequence_parallel": True}
    for code, out in _wait(_launch(second, [*args, "--steps", "6"], plan)):
        assert code == 0, out
    lines = _progress(second)
    assert lines[0] == {"event": "resumed", "step": 2}
    resumed = _losses(lines)
    assert sorted(resumed) == [3, 4, 5, 6]
    for step, loss in resumed.items():
        assert loss == pytest.approx(expected[step], abs=2e-3), (step, resumed, expected)
    assert lines[-1]["event"] == "done" and lines[-1]["resumed_from_step"] == 2
    assert not uri.exists()  # removed at the end: the spec did not ask to keep them


def test_truncated_uncommitted_checkpoint_is_never_loaded(tmp_path):
    uri = tmp_path / "ckpt"
    args = ["--model", "tiny-gpt2", *COMMON, "--checkpoint-uri", str(uri),
            "--checkpoint-every-steps", "2", "--keep-checkpoints"]
    assert _main_in_process(tmp_path, [*args, "--steps", "3"], {"micro_batch": 2}) == 0
    assert sorted(p.name for p in uri.iterdir()) == ["step-000000002"]
    # A later save cut short: DCP files copied, one truncated, no commit marker.
    torn = uri / "step-000000005"
    shutil.copytree(uri / "step-000000002", torn)
    (torn / "COMMITTED").unlink()
    data = next(torn.glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    (tmp_path / "progress.jsonl").unlink()
    assert _main_in_process(tmp_path, [*args, "--steps", "7"], {"micro_batch": 2}) == 0
    lines = _progress(tmp_path)
    assert lines[0] == {"event": "resumed", "step": 2}
    assert [e["step"] for e in _events(lines, "checkpoint")] == [4, 6]
    # the torn directory is older than the newest commit (6) by now, so it was pruned
    assert sorted(p.name for p in uri.iterdir()) == ["step-000000004", "step-000000006"]


def test_checkpoint_now_signal_saves_exits_preempted_and_the_job_finishes_later(tmp_path):
    uri = tmp_path / "ckpt"
    args = ["--model", "tiny-gpt2", *COMMON, "--checkpoint-uri", str(uri), "--steps", "100000"]
    status_file = tmp_path / "status.0.json"
    (proc,) = _launch(tmp_path, args, {"micro_batch": 2}, world=1,
                      FRENZY_STATUS_FILE=str(status_file))
    progress = tmp_path / "progress.jsonl"
    deadline = time.monotonic() + 60
    while not (progress.exists() and progress.read_text().count("\n") >= 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    lines = _progress(tmp_path)
    last = lines[-1]
    assert last["event"] == "preempted" and last["checkpoint_step"] == last["step"] >= 3
    # The per-rank status file the agent reads (frenzy.outcomes), naming the committed step.
    assert read_status(status_file) == RankStatus(
        "PREEMPTED", f"checkpoint at step {last['step']}", last["step"])
    assert _events(lines, "checkpoint")[-1]["step"] == last["step"]

    progress.unlink()
    finish = last["step"] + 2
    assert _main_in_process(tmp_path, [*args[:-2], "--steps", str(finish)], {"micro_batch": 2}) == 0
    lines = _progress(tmp_path)
    assert lines[0] == {"event": "resumed", "step": last["step"]}
    assert lines[-1]["event"] == "done" and lines[-1]["step"] == finish


def test_commit_markers_decide_what_counts_and_prune_keeps_the_newest(tmp_path):
    from frenzy_trainer.checkpoint import (COMMIT_MARKER, committed_steps, latest_committed,
                                           prune, step_dir)

    assert latest_committed(tmp_path / "none") == 0
    for step in (2, 4, 6, 8):
        step_dir(tmp_path, step).mkdir(parents=True)
        if step != 8:
            (step_dir(tmp_path, step) / COMMIT_MARKER).write_text("{}")
    step_dir(tmp_path, 3).mkdir()  # torn, older than the newest commit
    (tmp_path / "unrelated").mkdir()
    assert committed_steps(tmp_path) == [2, 4, 6] and latest_committed(tmp_path) == 6
    prune(tmp_path, keep=2)
    # 8 may still be in flight (newer than the newest commit): kept
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == [
        "step-000000004", "step-000000006", "step-000000008", "unrelated"]


class _Weights:
    """The smallest Checkpointable: one tensor."""

    def __init__(self, value: float):
        self.weight = torch.full((1000,), value)

    def checkpoint_state(self):
        return {"model": {"weight": self.weight}}

    def load_checkpoint_state(self, state):
        self.weight.copy_(state["model"]["weight"])


def test_async_save_commits_only_after_its_write_and_keeps_one_in_flight(tmp_path, monkeypatch):
    """The commit marker waits for the write; a second save first finishes the first; a failed
    write raises and never commits."""
    from concurrent.futures import Future

    from frenzy_trainer import checkpoint
    from frenzy_trainer.checkpoint import Checkpointer, CheckpointPolicy, committed_steps

    writes: list[Future] = []

    def fake_start(trainer, uri, step, group):
        checkpoint.step_dir(uri, step).mkdir(parents=True)
        writes.append(Future())
        return writes[-1]

    monkeypatch.setattr(checkpoint, "start_async_save", fake_start)
    saver = Checkpointer(CheckpointPolicy(str(tmp_path), every_steps=2), torch.device("cpu"))
    assert saver.asynchronous
    assert saver.save(_Weights(1.0), 2) == []  # in flight
    assert saver.collect() == [] and committed_steps(tmp_path) == []
    writes[0].set_result(None)
    (commit,) = saver.collect()
    assert commit.step == 2 and committed_steps(tmp_path) == [2]

    assert saver.save(_Weights(1.0), 4) == []
    # the next save cannot start before step 4's write is done: it waits for it
    writes[1].set_result(None)
    assert [c.step for c in saver.save(_Weights(1.0), 6)] == [4]
    assert committed_steps(tmp_path) == [2, 4]
    writes[2].set_exception(OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        saver.collect(wait=True)
    assert committed_steps(tmp_path) == [2, 4]


def test_async_save_writes_the_state_of_its_step_while_training_changes_it(tmp_path):
    """Real dcp.async_save: the state is copied at the save, so later in-place updates (the
    next steps) do not leak into the checkpoint; the sync setting saves and commits at once."""
    from frenzy_trainer import checkpoint
    from frenzy_trainer.checkpoint import Checkpointer, CheckpointPolicy, committed_steps

    weights = _Weights(1.0)
    saver = Checkpointer(CheckpointPolicy(str(tmp_path), every_steps=1), torch.device("cpu"))
    saver.save(weights, 1)
    weights.weight.add_(1.0)  # step 2 trains on while step 1 is written
    assert [c.step for c in saver.collect(wait=True)] == [1]
    restored = _Weights(0.0)
    checkpoint.load(restored, str(tmp_path), 1)
    assert torch.equal(restored.weight, torch.full((1000,), 1.0))

    sync = Checkpointer(CheckpointPolicy(str(tmp_path), every_steps=1, asynchronous=False),
                        torch.device("cpu"))
    assert not sync.asynchronous
    (commit,) = sync.save(weights, 2)
    assert commit.step == 2 and commit.write_s == commit.save_s and committed_steps(tmp_path) == [1, 2]


@pytest.mark.parametrize("flag, env, expected", [
    ([], {}, True),
    (["--checkpoint-sync"], {}, False),
    ([], {"FRENZY_CHECKPOINT_ASYNC": "0"}, False),
    ([], {"FRENZY_JOB_SPEC": '{"training": {"checkpoint_async": false}}'}, False),
])
def test_the_sync_setting_forces_synchronous_saves(flag, env, expected):
    from frenzy_trainer.train import load_config

    config, _ = load_config(["--model", "tiny-gpt2", *COMMON, "--steps", "2", *flag], env)
    assert config.checkpoint.asynchronous is expected
