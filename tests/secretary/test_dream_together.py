"""Two `secretary dream` processes started together on one namespace do the work of one run.

Each job's run on a namespace holds a lease in the database; the second process waits for the
job the first is running and then runs it, finding nothing left to do, so nothing is extracted,
consolidated or mapped twice and the jobs keep their order (the soul mapper reads what the
auditor kept). Compared with one
process doing it alone on a copy of the same store, through litellm against one scripted model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from secretary.config import load_settings
from store.service import Store
from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer
from tests.helpers.scripted_model import ScriptedModel

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NS = "maya"


@pytest.fixture
def model() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, ScriptedModel())
        yield server


def seed(data_dir: Path) -> None:
    store = Store.open(load_settings(None, {}, data_dir=data_dir), create=True)
    try:
        lines = [
            ("user", f"I went hiking in the Alps with Tom on day {n}.", T0 - timedelta(hours=n))
            for n in range(1, 9)
        ]
        store.add_logs(
            NS,
            [
                {"session_id": "s1", "role": role, "content": text, "timestamp": at.isoformat()}
                for role, text, at in lines
            ],
            now=T0,
        )
        store.add_memories(
            NS,
            [
                {"content": "The user lives in Paris.", "type": "fact"},
                {"content": "The user lives in Paris.", "type": "fact", "session_id": "b"},
            ],
            now=T0,
        )
    finally:
        store.close()


def dream(data_dir: Path, server: ScriptedOpenAIServer) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SECRETARY_LLM_MODEL": "openai/test-model",
        "SECRETARY_LLM_API_BASE": server.api_base,
        "SECRETARY_LLM_API_KEY": "x",
        "SECRETARY_LLM_MAX_ATTEMPTS": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    for name in ("SECRETARY_CONFIG", "SECRETARY_DATA_DIR"):
        env.pop(name, None)
    secretary = Path(sys.executable).parent / "secretary"  # the installed console script
    command = [str(secretary), "--data-dir", str(data_dir), "dream"]
    return subprocess.Popen(
        [*command, "--namespace", NS],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(data_dir: Path) -> tuple[Counter[tuple[str, str, str]], Counter[str]]:
    """What the store holds, ids aside: memories by (content, type, status), and the records
    of job runs that changed something, by job."""
    store = Store.open(load_settings(None, {}, data_dir=data_dir))
    try:
        lines = [json.loads(line) for line in store.db.memories.export(NS)]
        records = store.db.records.find(namespaces=[NS], limit=1000)
    finally:
        store.close()
    memories = Counter(
        (m["content"], m["type"], m["status"]) for m in lines if m["kind"] == "memory"
    )
    changed = Counter(r.job for r in records if r.job != "ingest" and r.stats.get("operations"))
    return memories, changed


def cited_lines(data_dir: Path) -> Counter[int]:
    store = Store.open(load_settings(None, {}, data_dir=data_dir))
    try:
        lines = [json.loads(line) for line in store.db.memories.export(NS)]
    finally:
        store.close()
    return Counter(
        log_id
        for m in lines
        if m["kind"] == "memory"
        for log_id in m["metadata"].get("source_log_ids", [])
    )


@pytest.mark.slow
def test_two_dream_processes_together_do_the_work_of_one(
    tmp_path: Path, model: ScriptedOpenAIServer
) -> None:
    alone, together = tmp_path / "alone", tmp_path / "together"
    seed(alone)
    shutil.copytree(alone, together)

    # The lone run works on its own copy, so it may run beside the two (the suite's time).
    single, first, second = dream(alone, model), dream(together, model), dream(together, model)
    assert single.wait(300) == 0, single.stderr.read() if single.stderr else ""
    codes = (first.wait(300), second.wait(300))

    assert codes == (0, 0), [p.stderr.read() if p.stderr else "" for p in (first, second)]
    outputs = (first.stdout.read() if first.stdout else "") + (
        second.stdout.read() if second.stdout else ""
    )
    # No line was extracted twice, and no outcome claims a change twice.
    cited = cited_lines(together)
    assert cited
    assert max(cited.values()) == 1
    assert result(together)[1]["extractor"] == 1
    claimed = [line for line in outputs.splitlines() if re.search(r"changes? applied", line)]
    assert len(claimed) == len(set(claimed))
    # Whatever a skipped run left is done by the next cycle: the same memories as one run.
    for again in [dream(data_dir, model) for data_dir in (alone, together)]:
        assert again.wait(300) == 0, again.stderr.read() if again.stderr else ""
    memories, changed = result(alone)
    assert sum(n for (_, _, status), n in memories.items() if status == "active") > 3
    assert changed["extractor"] == 1  # the work to compare was done
    assert result(together)[0] == memories
