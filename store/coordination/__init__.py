"""What processes share besides memories and records, each table with its own reads and writes:
the daemon lease (``leases``), schedule overrides (``schedules``), the dream-now queue and its
worker (``dream_requests``, ``dream_worker``), vector index rebuilds in progress (``rebuilds``),
the console's logins (``console_sessions``) and the key that signs its anonymous sessions, a
file in the data directory (``console_key``), the night's work the daemons share (``firings``:
firings cut into units, claimed under leases) and the model's rate limit that every daemon
shares (``rate_limits``).

Imports only ``store.db``, ``store.models`` and the kernel.
"""
