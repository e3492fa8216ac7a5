"""memory-secretary: a maintenance daemon and read API for an agent's long-term memory."""

__version__ = "0.1.0"
