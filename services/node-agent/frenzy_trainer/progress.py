"""Progress lines for the node agent, and peak-memory measurement on CUDA and on CPU.

Progress protocol (docs/trainer.md): rank 0 appends one JSON object per line to the file named
by FRENZY_PROGRESS_FILE, flushed at once, so the agent can tail it:

    {"step": 3, "steps": 25, "tokens": 6144, "loss": 6.71, "peak_memory_bytes": 21233664,
     "time_s": 0.41}
    ...
    {"event": "done", "step": 25, "steps": 25, "tokens": 51200, "loss": 2.9, ...}

Peak memory: on CUDA `torch.cuda.max_memory_allocated()`. On CPU torch keeps no allocator
statistics, so `LiveTensorBytes` counts them: a TorchDispatchMode that sees every op's outputs,
adds the bytes of each storage the first time it appears, and subtracts them when the storage
is freed (a weakref callback). It must be entered before the model is built so that parameters
and optimizer states count. It measures tensors only (no allocator rounding or fragmentation),
which is what MARP's `peak_tensor_bytes` predicts. Storages resized in place (FSDP2 frees its
gathered weights that way) are re-measured when next seen, so ZeRO-2/3 peaks on CPU are
approximate.
"""
from __future__ import annotations

import contextlib
import json
import weakref
from pathlib import Path
from typing import Any, TextIO

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class MemoryLimitExceeded(RuntimeError):
    """Raised when tracked memory passes FRENZY_MEMORY_LIMIT_BYTES (an emulated OOM)."""


def _storage(tensor: torch.Tensor) -> torch.UntypedStorage:
    """The storage a tensor's bytes live in. A DTensor (tensor parallelism, FSDP2's
    parameters) is a wrapper whose own storage reports the global shape's bytes: its shard on
    this rank is its local tensor (the mode does not see the ops DTensor runs on it)."""
    local = getattr(tensor, "_local_tensor", None)
    return (local if isinstance(local, torch.Tensor) else tensor).untyped_storage()


class LiveTensorBytes(TorchDispatchMode):
    """Live and peak bytes of all tensor storages created while the mode is active."""

    def __init__(self, limit_bytes: int = 0):
        super().__init__()
        self.limit_bytes = limit_bytes
        self.live_bytes = 0
        self.peak_bytes = 0
        self._counted: dict[int, list[int]] = {}  # live StorageImpl address -> [bytes counted]
        self.paused = False  # new storages go uncounted (PeakMemory.untracked)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        if isinstance(out, torch.Tensor):  # fast path: most ops return one tensor
            self._track(_storage(out))
        elif isinstance(out, (tuple, list)):
            for leaf in tree_leaves(out):
                if isinstance(leaf, torch.Tensor):
                    self._track(_storage(leaf))
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        key = storage._cdata
        nbytes = storage.nbytes()
        cell = self._counted.get(key)
        if cell is None:
            cell = self._counted[key] = [nbytes]
            # The cell is shared with the finalizer, so a later resize is subtracted too.
            weakref.finalize(storage, self._free, key, cell).atexit = False
            added = nbytes
        elif cell[0] != nbytes:  # resized in place
            added, cell[0] = nbytes - cell[0], nbytes
        else:
            return
        self.live_bytes += added
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            if self.limit_bytes and self.peak_bytes > self.limit_bytes:
                raise MemoryLimitExceeded(
                    f"out of memory: tracked tensors reached {self.peak_bytes} bytes, over "
                    f"FRENZY_MEMORY_LIMIT_BYTES={self.limit_bytes}")

    def _free(self, key: int, cell: list[int]) -> None:
        self.live_bytes -= cell[0]
        if self._counted.get(key) is cell:
            del self._counted[key]


class PeakMemory:
    """Peak tensor bytes of this process: CUDA allocator statistics, or LiveTensorBytes on CPU."""

    def __init__(self, device: torch.device, limit_bytes: int = 0):
        self.device, self.limit_bytes = device, limit_bytes
        self.tracker = LiveTensorBytes(limit_bytes) if device.type == "cpu" else None

    def __enter__(self) -> "PeakMemory":
        if self.tracker is not None:
            self.tracker.__enter__()
        else:
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.tracker is not None:
            self.tracker.__exit__(*exc)

    def peak_bytes(self) -> int:
        if self.tracker is not None:
            return self.tracker.peak_bytes
        return int(torch.cuda.max_memory_allocated(self.device))

    def peak_reserved_bytes(self) -> int:
        """CUDA's max_memory_reserved (what MARP's peak_reserved_bytes predicts: the caching
        allocator's segments, allocated or not); 0 on CPU, which has no caching allocator."""
        if self.tracker is not None:
            return 0
        return int(torch.cuda.max_memory_reserved(self.device))

    @contextlib.contextmanager
    def untracked(self):
        """CPU: tensors made inside are not counted. For checkpoint saves, whose copies live in
        host memory on a GPU machine (DCP stages to CPU), so the CPU peak stays comparable with
        CUDA's max_memory_allocated and with MARP."""
        if self.tracker is None:
            yield
            return
        self.tracker.paused = True
        try:
            yield
        finally:
            self.tracker.paused = False

    def reset_peak(self) -> None:
        """Start the peak afresh from what is live now (after restoring a checkpoint, whose
        transient copies are not part of a training step)."""
        if self.tracker is not None:
            self.tracker.peak_bytes = self.tracker.live_bytes
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    def check(self) -> None:
        """On CUDA the limit is checked once per step (on CPU the tracker checks every op)."""
        if self.tracker is None and self.limit_bytes and self.peak_bytes() > self.limit_bytes:
            raise MemoryLimitExceeded(
                f"out of memory: peak {self.peak_bytes()} bytes over "
                f"FRENZY_MEMORY_LIMIT_BYTES={self.limit_bytes}")


class ProgressWriter:
    """Appends JSON lines to FRENZY_PROGRESS_FILE (rank 0 only; None writes nothing)."""

    def __init__(self, path: str | None):
        self._file: TextIO | None = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
