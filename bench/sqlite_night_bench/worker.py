"""One night in a process of its own: `secretary dream` over every namespace, run in-process
through the project's CLI (``secretary.cli.cli``, as an operator types it, with ``--config``),
with the write-lock meter installed on SQLAlchemy's Engine class before the store is opened.

The process does nothing else (the scripted model runs in the parent), so its CPU seconds and
peak RSS are the night's. Writes one JSON file: exit code, wall and CPU seconds, peak RSS, the
meter's transactions.
"""

from __future__ import annotations

import json
import os
import resource
import time
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlite_night_bench.meter import WriteLockMeter


def run(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    meter = WriteLockMeter().install()
    from secretary.cli import cli  # imported before the clock starts (and after the meter)

    argv = ["--config", spec["config"], "--log-level", "WARNING", "dream"]
    started_at = datetime.now(UTC)
    cpu_before = os.times()
    meter.origin = started = time.perf_counter()
    with Path(spec["stdout"]).open("w") as out, redirect_stdout(out):
        try:
            code: Any = cli.main(args=argv, prog_name="secretary", standalone_mode=False)
        except SystemExit as exc:
            code = exc.code
    wall = time.perf_counter() - started
    cpu_after = os.times()
    result = {
        "argv": ["secretary", *argv],
        "exit_code": int(code or 0),
        "started_at": started_at.isoformat(),
        "wall_s": round(wall, 3),
        "cpu_user_s": round(cpu_after.user - cpu_before.user, 2),
        "cpu_system_s": round(cpu_after.system - cpu_before.system, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "meter": meter.dump(),
    }
    Path(spec["out"]).write_text(json.dumps(result))
    return 0
