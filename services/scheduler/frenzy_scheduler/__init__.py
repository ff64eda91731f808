"""HAS and its baselines: pure scheduling policies shared by the live service and the simulator."""
