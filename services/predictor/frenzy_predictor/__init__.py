"""MARP: memory-aware resource prediction. Memory model, plan enumeration and cost model."""
