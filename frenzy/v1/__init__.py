"""Generated from protos/frenzy/v1. Do not edit; run `make proto`."""
