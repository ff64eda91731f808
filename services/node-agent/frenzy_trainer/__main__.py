"""`python -m frenzy_trainer`: see frenzy_trainer.train and docs/trainer.md."""
import os
import sys

from .train import main

if __name__ == "__main__":
    code = main()  # the process group is already destroyed and the progress file closed
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: destroying torch's C++ statics after gloo (FSDP2 on CPU)
    # occasionally aborts with "terminate called without an active exception" (SIGABRT),
    # which would turn a finished job into a failed one.
    os._exit(code)
