"""The built-in synthetic workload: a real process that "trains" for the predicted duration.

It sleeps in steps for FRENZY_PREDICTED_DURATION_S x FRENZY_TIME_SCALE seconds, writes one
progress line per step (rank 0), and exits 0. SIGTERM ends it with 143, like a real trainer.
"""
from __future__ import annotations

import json
import math
import os
import signal
import sys
import time

from frenzy import jobvars


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    duration_s = float(os.environ.get(jobvars.PREDICTED_DURATION_S, "1")) * float(
        os.environ.get(jobvars.TIME_SCALE, "1"))
    steps = max(1, int(os.environ.get(jobvars.STEPS, "20")))
    tokens_per_step = int(os.environ.get(jobvars.TOKENS_PER_STEP, "0"))
    peak_bytes = int(os.environ.get(jobvars.PREDICTED_PEAK_BYTES, "0"))
    progress_path = os.environ.get(jobvars.PROGRESS_FILE, "")
    writes_progress = os.environ.get("RANK", "0") == "0" and progress_path
    shown_steps = min(steps, 50)
    started = time.monotonic()
    with open(progress_path, "a") if writes_progress else open(os.devnull, "w") as progress:
        for i in range(1, shown_steps + 1):
            time.sleep(max(0.0, started + duration_s * i / shown_steps - time.monotonic()))
            step = steps * i // shown_steps
            line = {"step": step, "steps": steps, "tokens": step * tokens_per_step,
                    "loss": round(10.0 * math.exp(-3.0 * i / shown_steps) + 1.5, 4),
                    "peak_memory_bytes": peak_bytes, "time_s": round(time.monotonic() - started, 3)}
            progress.write(json.dumps(line) + "\n")
            progress.flush()
            # What `frenzy logs` shows for the synthetic workload: one line per step, every rank.
            print(f"step {step}/{steps} loss {line['loss']:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
