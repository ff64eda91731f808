"""`python -m frenzy_trainer`: see frenzy_trainer.train and docs/trainer.md."""
import sys

from .train import main

if __name__ == "__main__":
    sys.exit(main())
