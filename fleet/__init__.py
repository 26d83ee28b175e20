"""fleet: keep fleets of NVIDIA GPU hosts conformant, and repair them."""

__version__ = "0.1.0"
