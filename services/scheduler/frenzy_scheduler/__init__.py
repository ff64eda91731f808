"""HAS and its baselines: pure scheduling policies shared by the live service and the simulator."""
from frenzy_scheduler.native import extend as _use_native_build

_use_native_build(__path__, __name__)  # the compiled hot modules, when fresh (native.py)
