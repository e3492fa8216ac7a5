"""bench/forget.py: a small run prepares its store once, forgets on copies and reports."""

from __future__ import annotations

import json
from pathlib import Path

from forget import main


def test_a_small_run_forgets_on_copies_and_writes_its_results(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"

    assert main(["--sizes", "30", "--trials", "2", "--work", str(work), "--out", str(out)]) == 0

    entry = json.loads((out / "forget.json").read_text())["30"]
    assert entry["memories"] == 30
    assert entry["record_images"] >= 30  # one per ingested memory, and the forget's own
    assert 0 < entry["forget_s"]["min"] <= entry["forget_s"]["median"] <= entry["forget_s"]["max"]
    assert "| 30 | " in (out / "forget.md").read_text()
    # The prepared store is kept whole (each trial forgot on a copy of it) and reused.
    prepared = work / "forget" / "n30"
    assert (prepared / "prepared.json").exists()
    assert main(["--sizes", "30", "--trials", "1", "--work", str(work), "--out", str(out)]) == 0
    assert json.loads((out / "forget.json").read_text())["30"]["trials"] == 1
