"""The configurations a run measures, by name (``--only`` picks some), and --quick's."""

from __future__ import annotations

from dataclasses import replace

from fleet_bench.content import Sizes
from fleet_bench.night import Night

MEMORIES = 300  # per namespace at 100 and 1,000 namespaces
BIG_MEMORIES = 100  # per namespace at 10,000 (1M memories: a store prepared in about an hour)
THROUGHPUT_RPM = 3000  # above 3 daemons x 16 calls x 60 s at 1 s: checked, never binding
LIMITED_RPM = 600  # 3 daemons could ask for 2,880 a minute (on two cores they make ~430)
BINDING_RPM = 240  # binding on two cores too: 3 daemons there make ~430 calls a minute unlimited
PROVIDER_RPM = 400  # a provider stricter than the configuration: 429s and Retry-After


def full(lines: tuple[int, int], seed: int = 0) -> list[Night]:
    def sizes(n: int, m: int = MEMORIES) -> Sizes:
        return Sizes(namespaces=n, memories=m, lines_lo=lines[0], lines_hi=lines[1], seed=seed)

    base = {"rpm": THROUGHPUT_RPM, "provider_rpm": THROUGHPUT_RPM}
    return [
        Night(name="n100-d1-l1", sizes=sizes(100), **base),
        # One, two and three daemons, and a kill, at a size a two-core machine runs in minutes.
        Night(name="n100-d2-l1", sizes=sizes(100), daemons=2, **base),
        Night(name="n100-d3-l1", sizes=sizes(100), daemons=3, **base),
        Night(name="n100-d3-l1-kill", sizes=sizes(100), daemons=3, kill_at=0.5, **base),
        # The same with a model answering in 5 s, as hosted models often do: the night is then
        # bound by the model, not by two cores, and more daemons can show what they add.
        Night(name="n100-d1-l5", sizes=sizes(100), latency=5.0, **base),
        Night(name="n100-d2-l5", sizes=sizes(100), daemons=2, latency=5.0, **base),
        Night(name="n100-d3-l5", sizes=sizes(100), daemons=3, latency=5.0, **base),
        # 100 units fill 48 slots in about two waves of ~30 s, which hides what a third daemon
        # adds; 300 namespaces make enough waves.
        Night(name="n300-d1-l5", sizes=sizes(300), latency=5.0, **base),
        Night(name="n300-d2-l5", sizes=sizes(300), daemons=2, latency=5.0, **base),
        Night(name="n300-d3-l5", sizes=sizes(300), daemons=3, latency=5.0, **base),
        Night(name="n1000-d1-l1", sizes=sizes(1000), **base),
        Night(name="n1000-d2-l1", sizes=sizes(1000), daemons=2, **base),
        Night(name="n1000-d3-l1", sizes=sizes(1000), daemons=3, **base),
        Night(name="n1000-d3-l1-kill", sizes=sizes(1000), daemons=3, kill_at=0.5, **base),
        Night(name="n1000-d1-l5", sizes=sizes(1000), latency=5.0, timeout=7200, **base),
        # The size with a model that, not two cores, bounds one daemon's night.
        Night(name="n1000-d2-l5", sizes=sizes(1000), daemons=2, latency=5.0, **base),
        Night(name="n1000-d3-l5", sizes=sizes(1000), daemons=3, latency=5.0, **base),
        Night(
            name="n1000-d3-l1-rpm600",
            sizes=sizes(1000),
            daemons=3,
            rpm=LIMITED_RPM,
            provider_rpm=LIMITED_RPM,
            timeout=3 * 3600,
        ),
        # The same limit held across daemons where two cores can reach it.
        Night(
            name="n300-d3-l1-rpm240",
            sizes=sizes(300),
            daemons=3,
            rpm=BINDING_RPM,
            provider_rpm=BINDING_RPM,
            timeout=3600,
        ),
        Night(
            name="n200-d2-l1-provider429",
            sizes=sizes(200),
            daemons=2,
            rpm=0,
            provider_rpm=PROVIDER_RPM,
        ),
        # 10,000 namespaces: one daemon shows what the night costs when the claims, the
        # request's progress and the outbox are 10x the 1,000 nights'; three show the sharing.
        Night(
            name="n10000-d1-l1",
            sizes=sizes(10_000, BIG_MEMORIES),
            timeout=4 * 3600,
            **base,
        ),
        Night(
            name="n10000-d3-l1",
            sizes=sizes(10_000, BIG_MEMORIES),
            daemons=3,
            timeout=4 * 3600,
            **base,
        ),
    ]


def quick(lines: tuple[int, int], seed: int = 0) -> list[Night]:
    """About a minute once the small pool is cached: 20 namespaces, a 0.2 s model, two
    daemons sharing the units under a shared limit."""
    sizes = Sizes(namespaces=20, memories=100, lines_lo=lines[0], lines_hi=lines[1], seed=seed)
    common = Night(name="quick", sizes=sizes, concurrency=8, latency=0.2, timeout=300.0)
    return [replace(common, name="quick-d2", daemons=2, rpm=120, provider_rpm=120)]


# Run only when named with --only (the store takes about an hour to prepare).
BIG = {"n10000-d1-l1", "n10000-d3-l1"}
