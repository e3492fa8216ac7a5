"""What processes share besides memories and records, each table with its own reads and writes:
the daemon lease (``leases``), schedule overrides (``schedules``), the dream-now queue and its
worker (``dream_requests``, ``dream_worker``), vector index rebuilds in progress (``rebuilds``),
the console's logins (``console_sessions``).

Imports only ``store.db``, ``store.models`` and the kernel.
"""
