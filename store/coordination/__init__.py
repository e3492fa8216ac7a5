"""What processes share besides memories and records, each table with its own reads and writes:
the daemon lease (``leases``), schedule overrides (``schedules``), the dream-now queue and its
worker (``dream_requests``, ``dream_worker``), vector index rebuilds in progress (``rebuilds``),
the console's logins (``console_sessions``) and the key that signs its anonymous sessions, a
file in the data directory (``console_key``).

Imports only ``store.db``, ``store.models`` and the kernel.
"""
