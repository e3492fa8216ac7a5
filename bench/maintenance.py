"""Maintenance benchmark: LLM calls, tokens and time of the daemon's job cycles against store size.

For each store size (default 1k, 10k, 100k memories) a base store is prepared once and cached
under --work: the synthetic memories of bench/corpus.py (the corpus bench/latency.py uses)
through Store.add_memories, plus --traits user traits (preference memories with
``trait: true``) so that the soul mapper's prompt shows a full profile, as in a store the daemon
has maintained for a while. Vectors come from Store.indexer.sync(): the real ONNX model up to
--real-max memories; above it, each text's vector is a normalised mix of two real embeddings
from a pool of --pool generated texts (bench/latency.py's PoolEmbedder), because embedding
100k memories with the model takes hours on two cores. When bench/latency.py has already
prepared the same corpus at that size (bench/.work/latency/n<SIZE>), its store is copied.
The synthetic memories are about other things than LoCoMo's dialogues, so on top of them
--related-share (default 5%) of the size is added as LoCoMo turns that never arrive as logs,
in the form the scripted extractor gives memories (real vectors): the new memories then find
neighbours, near duplicates and events in the base, more of them the bigger the store.
Every job's watermark is then set to the newest memory: the base counts as maintained.

Each measured run works on a fresh copy of the base store, in one namespace, and runs cycles:
each job of secretary.jobs.runner.JOBS in order through ``run_job`` (exactly run_cycle's loop,
timed per job), then ``store.indexer.sync()`` as ``secretary dream`` does.

  N=0        a cycle on the untouched base: nothing is new, so it must make no LLM call
  arrival N  N LoCoMo dialogue turns arrive as conversation log lines, then one cycle
  follow-up  cycles with no new logs until one makes no call (the traits and summaries made in
             the arrival cycle are new memories for the linker and auditor, and work left by
             max_llm_calls_per_run waits for the next run); that last cycle is the N=0 check

The LLM is a scripted OpenAI-compatible server on 127.0.0.1 (tests/helpers/openai_server.py)
that answers each job's schema with a valid reply built from the ids and texts of the request,
and counts tokens itself: prompt tokens with litellm.token_counter(model=COUNT_MODEL) over the
request's messages (the response_format schema is counted apart, not in the prompt), completion
tokens with the same tokenizer over the reply text. The server's counts are compared with the
tokens_in/tokens_out of the maintenance records the runs wrote.

With SECRETARY_LLM_MODEL set (plus SECRETARY_LLM_API_BASE / SECRETARY_LLM_API_KEY as the model
needs), the same cycles run against that model instead; tokens then come from the records
(the provider's usage). This costs real tokens: start with --quick.

LoCoMo (CC BY-NC) is read from outside the repository and never copied into it; results hold
numbers only.

    python bench/maintenance.py --quick                        # 1k store, N in 10,50
    python bench/maintenance.py --sizes 1000,10000,100000      # what results/maintenance.md shows
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "bench"))

import corpus  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from secretary.config import Settings, load_settings  # noqa: E402
from secretary.jobs.runner import JOBS, namespaces_with_work, run_job  # noqa: E402
from secretary.logs import configure as configure_logging  # noqa: E402
from store.db import MIGRATIONS  # noqa: E402
from store.models import ConversationLog, MaintenanceRecord, Memory, MemoryRelation  # noqa: E402
from store.service import Store  # noqa: E402

NAMESPACE = "bench"
BASE_NOW = corpus.START + timedelta(days=corpus.SPAN_DAYS + 1)  # the base store's write time
CYCLE_GAP = timedelta(hours=1)  # the clock moves this much between cycles
BATCH = 1000
BASE_VERSION = 1  # bump when the way a base store is built changes
WORK = ROOT / "bench" / ".work" / "maintenance"
LATENCY_WORK = ROOT / "bench" / ".work" / "latency"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_OUT = ROOT / "bench" / "results" / "maintenance.json"
COUNT_MODEL = "gpt-4o-mini"  # whose tokenizer (via litellm.token_counter) the server counts with
SCRIPTED_MODEL = "openai/scripted"
SCHEMA_JOBS = {
    "ExtractorReply": "extractor",
    "LinkerReply": "linker",
    "AuditorReply": "auditor",
    "SoulMapperReply": "soul_mapper",
    "ConsolidatorReply": "consolidator",
}


def say(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


# -- LoCoMo turns as conversation log lines ------------------------------------------------------


def locomo_logs(data: Path) -> list[dict[str, Any]]:
    """Every LoCoMo turn as a LogIn item, conversation after conversation, in dialogue order.

    The conversation's first speaker is the "user", the other the "assistant"; the text keeps
    the speaker's name ("<speaker>: <text>"), as bench/locomo.py writes it.
    """
    import locomo

    lines: list[dict[str, Any]] = []
    for conv in locomo.load_conversations(data, None):
        first = str(conv.turns[0]["content"]).split(":", 1)[0]
        for turn in conv.turns:
            speaker = str(turn["content"]).split(":", 1)[0]
            lines.append(
                {
                    "session_id": f"{conv.namespace}-{turn['session_id']}",
                    "role": "user" if speaker == first else "assistant",
                    "content": turn["content"],
                    "timestamp": turn["timestamp"],
                    "idempotency_key": f"{conv.namespace}-{turn['external_id']}",
                }
            )
    return lines


# -- the scripted model: valid replies built from the request, with token counts ----------------

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{4,}")
_STOP = frozenset(
    """about after again being could doing going great really right share shares something
    their there these thing things think those though would where which while yeah thanks
    always never still photo years today other""".split()  # noqa: SIM905
)


def _keywords(text: str, count: int = 3) -> list[str]:
    words = [w.lower() for w in _WORD.findall(text)]
    found = list(dict.fromkeys(w for w in words if w not in _STOP))[:count]
    return [*found, *(w for w in ("conversation", "personal", "life") if w not in found)][:count]


def _block(text: str, tag: str) -> Any:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.S)
    return json.loads(match.group(1)) if match else []


def _hash(*parts: object) -> int:
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


def _memory_type(line: Mapping[str, Any]) -> str:
    bucket = _hash(line["id"], line["text"]) % 100
    if bucket < 50:
        return "event"
    if bucket < 75:
        return "fact"
    return "preference" if bucket < 95 else "tool_experience"


def extractor_reply(user: str) -> dict[str, Any]:
    """One memory per log line of six words or more (shorter lines count as small talk)."""
    memories = []
    for line in _block(user, "log"):
        text = str(line["text"])
        if len(text.split()) < 6:
            continue
        memories.append(
            {
                "content": f"On {str(line['time'])[:10]}, {text}",
                "type": _memory_type(line),
                "importance": 3 + _hash(line["id"]) % 5,
                "tags": _keywords(text),
                "source_log_ids": [line["id"]],
            }
        )
    return {"memories": memories}


def linker_reply(user: str) -> dict[str, Any]:
    """One thematic relation per group: the seed's nearest neighbour to the seed."""
    relations = []
    for group in _block(user, "memories"):
        if len(group) < 2:
            continue
        seed, other = group[0], group[1]
        shared = set(_keywords(seed["content"], 6)) & set(_keywords(other["content"], 6))
        topic = sorted(shared)[0] if shared else "the same topic"
        relations.append(
            {
                "source_id": other["id"],
                "target_id": seed["id"],
                "type": "thematic",
                "strength": 0.6,
                "description": f"Both memories are about {topic}.",
            }
        )
    return {"relations": relations}


def auditor_reply(user: str) -> dict[str, Any]:
    """A verdict for every memory sent: keep, except exact repeats, merged into the first."""
    verdicts = []
    for group in _block(user, "memories"):
        first_of: dict[str, int] = {}
        for memory in group:
            text = str(memory["content"]).strip().lower()
            keeper = first_of.setdefault(text, memory["id"])
            merge = keeper != memory["id"]
            verdicts.append(
                {
                    "id": memory["id"],
                    "action": "merge" if merge else "keep",
                    "superseded_by": None,
                    "merge_into": keeper if merge else None,
                    "merged_content": memory["content"] if merge else None,
                    "category": "duplicate" if merge else None,
                    "reason": "Says the same as another memory."
                    if merge
                    else "Distinct and plausible information.",
                }
            )
    return {"verdicts": verdicts}


def soul_mapper_reply(user: str) -> dict[str, Any]:
    """One trait per ten memories; every other one revises a trait that was shown."""
    memories, traits = _block(user, "memories"), _block(user, "traits")
    proposed = []
    for start in range(0, len(memories), 10):
        chunk = memories[start : start + 10]
        topic = _keywords(" ".join(str(m["content"]) for m in chunk), 1)[0]
        number = start // 10
        revises = (
            traits[_hash(topic, number) % len(traits)]["id"] if traits and number % 2 else None
        )
        proposed.append(
            {
                "trait": f"The user often talks about {topic} and cares about it.",
                "confidence": 0.6,
                "evidence_ids": [m["id"] for m in chunk[:3]],
                "updates_trait_id": revises,
            }
        )
    # Two revisions of one trait in a call would be a conflict: keep the first.
    seen: set[int] = set()
    for trait in proposed:
        if trait["updates_trait_id"] in seen:
            trait["updates_trait_id"] = None
        elif trait["updates_trait_id"] is not None:
            seen.add(trait["updates_trait_id"])
    return {"traits": proposed}


def consolidator_reply(user: str) -> dict[str, Any]:
    """A summary of about 60 words covering every fragment sent."""
    fragments = _block(user, "fragments")
    words = " ".join(str(f["content"]) for f in fragments).split()
    return {
        "summary": "The user's episode: " + " ".join(words[:60]),
        "importance": 5,
        "tags": _keywords(" ".join(words)),
        "source_ids": [f["id"] for f in fragments],
    }


REPLIES = {
    "ExtractorReply": extractor_reply,
    "LinkerReply": linker_reply,
    "AuditorReply": auditor_reply,
    "SoulMapperReply": soul_mapper_reply,
    "ConsolidatorReply": consolidator_reply,
}


@dataclass(frozen=True, kw_only=True)
class Call:
    job: str
    prompt_tokens: int
    completion_tokens: int
    schema_tokens: int
    repair: bool


@dataclass
class Meter:
    """The scripted model's answers and its count of every call, by job."""

    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: Any) -> Any:
        from tests.helpers.openai_server import ScriptedReply, chat_completion_body

        litellm = _litellm()
        body = request.body
        schema = body["response_format"]["json_schema"]
        messages = body["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        content = json.dumps(REPLIES[schema["name"]](user), ensure_ascii=False)
        call = Call(
            job=SCHEMA_JOBS[schema["name"]],
            prompt_tokens=int(litellm.token_counter(model=COUNT_MODEL, messages=messages)),
            completion_tokens=int(litellm.token_counter(model=COUNT_MODEL, text=content)),
            schema_tokens=int(litellm.token_counter(model=COUNT_MODEL, text=json.dumps(schema))),
            repair=len(messages) > 2,
        )
        with self.lock:
            self.calls.append(call)
        return ScriptedReply(
            body=chat_completion_body(
                content,
                model="scripted",
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
            )
        )

    def mark(self) -> int:
        with self.lock:
            return len(self.calls)

    def since(self, mark: int) -> dict[str, Any]:
        with self.lock:
            calls = self.calls[mark:]
        return {
            "requests": len(calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "schema_tokens": sum(c.schema_tokens for c in calls),
            "repairs": sum(c.repair for c in calls),
        }


def _litellm() -> Any:
    from secretary.llm import _import_litellm

    return _import_litellm()


@contextmanager
def scripted_llm(*, start: bool = True) -> Iterator[tuple[Meter, str]]:
    """Start the scripted server (unless ``start`` is false); yield its meter and api_base."""
    from tests.helpers.openai_server import CHAT_COMPLETIONS, ScriptedOpenAIServer

    meter = Meter()
    if not start:
        yield meter, ""
        return
    with ScriptedOpenAIServer() as server:
        server.set_default(CHAT_COMPLETIONS, meter.answer)
        yield meter, server.api_base


# -- settings ------------------------------------------------------------------------------------


def bench_settings(data_dir: Path, *, api_base: str | None) -> Settings:
    """Default settings, SECRETARY_JOBS_* / SECRETARY_GUARDRAILS_* overrides, and the LLM.

    The LLM is the scripted server at ``api_base``, or (api_base None) SECRETARY_LLM_* from the
    environment. No other SECRETARY_* variable changes what is measured.
    """
    wanted = ("SECRETARY_JOBS_", "SECRETARY_GUARDRAILS_")
    if api_base is None:
        wanted += ("SECRETARY_LLM_",)
    environ = {k: v for k, v in os.environ.items() if k.startswith(wanted)}
    settings = load_settings(None, environ, data_dir=data_dir)
    if api_base is not None:
        llm = settings.llm.model_copy(
            update={"model": SCRIPTED_MODEL, "api_base": api_base, "api_key": "bench"}
        )
        settings = settings.model_copy(update={"llm": llm})
    return settings


def store_settings(data_dir: Path, **index: Any) -> Settings:
    """Default settings for preparing a base store (no LLM is involved)."""
    settings = load_settings(None, {}, data_dir=data_dir)
    if index:
        settings = settings.model_copy(update={"index": settings.index.model_copy(update=index)})
    return settings


# -- the base store (cached) ---------------------------------------------------------------------


def base_fingerprint(size: int, args: argparse.Namespace) -> str:
    digest = hashlib.sha256(
        f"v{BASE_VERSION}:{size}:{args.seed}:{args.traits}:{args.real_max}:{args.pool}".encode()
    )
    for migration in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(migration.read_bytes())
    return digest.hexdigest()[:16]


def base_store(size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Prepare (or reuse) the base store of ``size`` memories; return what was done."""
    base = args.work / f"base-n{size}"
    state_path = base / "state.json"
    fingerprint = base_fingerprint(size, args)
    if state_path.exists() and not args.fresh:
        state = json.loads(state_path.read_text())
        if state.get("fingerprint") == fingerprint and state.get("complete"):
            return dict(state)
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    state: dict[str, Any] = {"fingerprint": fingerprint, "size": size, "seed": args.seed}
    mode = "real" if size <= args.real_max else "pool"
    state["vectors"] = mode
    started = time.perf_counter()
    copied = copy_latency_store(size, args.seed, mode, base / "data")
    if copied is not None:
        state["source"] = copied
    else:
        state["source"] = {"built": True, **build_base(size, args, base / "data", mode)}
    state |= finish_base(base / "data", args)
    state["seconds"] = round(time.perf_counter() - started, 1)
    state["complete"] = True
    state_path.write_text(json.dumps(state, indent=2))
    return state


def copy_latency_store(size: int, seed: int, mode: str, target: Path) -> dict[str, Any] | None:
    """Copy bench/latency.py's prepared store of the same corpus, if there is a complete one."""
    source = LATENCY_WORK / f"n{size}"
    try:
        state = json.loads((source / "state.json").read_text())
    except (OSError, ValueError):
        return None
    index = state.get("index", {})
    complete = (
        state.get("ingest", {}).get("memories") == size
        and index.get("memories") == size
        and index.get("mode") == mode
    )
    if not complete or not schema_matches(source / "data" / "secretary.db"):
        return None
    say(f"n={size}: copying bench/latency.py's prepared store {source}")
    shutil.copytree(source / "data", target)
    store = Store.open(store_settings(target), create=True)
    try:
        same = store.repository.outbox_size() == 0 and count(store, Memory) == size
        expected = list(islice(corpus.memories(size, seed=seed), 20))
        with store.repository.reading() as session:
            found = dict(
                session.execute(
                    select(Memory.external_id, Memory.content).where(
                        Memory.external_id.in_([item["external_id"] for item in expected])
                    )
                ).all()
            )
        same = same and all(found.get(i["external_id"]) == i["content"] for i in expected)
    finally:
        store.close()
    if not same:
        say(f"n={size}: the latency store is another corpus or incomplete; building instead")
        shutil.rmtree(target)
        return None
    return {
        "copied_from": f"bench/.work/latency/n{size}",
        "ingest_seconds": round(state["ingest"].get("seconds", 0.0), 1),
        "index_seconds": round(index.get("seconds", 0.0), 1),
        "pool": index.get("pool"),
    }


def schema_matches(path: Path) -> bool:
    """Tell whether a database has every table and column of the current models.

    The initial migration may still change in place before a release, so a store built by an
    older checkout can be at "head" and still lack a column.
    """
    from sqlalchemy import inspect

    from store.db import make_engine
    from store.models import Base

    if not path.exists():
        return False
    engine = make_engine(f"sqlite:///{path}")
    try:
        found = inspect(engine)
        tables = set(found.get_table_names())
        return all(
            table.name in tables
            and {c["name"] for c in found.get_columns(table.name)} == set(table.columns.keys())
            for table in Base.metadata.sorted_tables
        )
    finally:
        engine.dispose()


def build_base(size: int, args: argparse.Namespace, data_dir: Path, mode: str) -> dict[str, Any]:
    """Ingest the corpus and index it (real model, or pool vectors above --real-max)."""
    store = Store.open(store_settings(data_dir), create=True)
    info: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        items = corpus.memories(size, seed=args.seed)
        done = 0
        while batch := list(islice(items, BATCH)):
            store.add_memories(NAMESPACE, batch, now=BASE_NOW, source="bench")
            done += len(batch)
            if done % 10_000 == 0 or done == size:
                say(f"  n={size}: ingested {done}/{size}")
        info["ingest_seconds"] = round(time.perf_counter() - started, 1)
        if mode == "real":
            info["index_seconds"] = index_outbox(store, size)
            return info
        import latency  # bench/latency.py: the pool of real embeddings and its mixer

        pool = latency.vector_pool(args.pool, store.embedder)
        model_id = store.embedder.model_id
    finally:
        store.close()
    filler = Store.open(
        store_settings(data_dir, batch_size=2000),
        embedder=latency.PoolEmbedder(pool, model_id),
    )
    try:
        info["index_seconds"] = index_outbox(filler, size)
        info["pool"] = {"texts": args.pool, "seed": latency.POOL_SEED}
    finally:
        filler.close()
    return info


def index_outbox(store: Store, size: int) -> float:
    started = time.perf_counter()
    done = 0
    while applied := store.indexer.sync(limit=5000):
        done += applied
        say(f"  n={size}: indexed {done} ({done / (time.perf_counter() - started):.1f}/s)")
    return round(time.perf_counter() - started, 1)


def trait_items(count_: int) -> list[dict[str, Any]]:
    """``count_`` distinct user traits over the corpus's activities, as the soul mapper makes."""
    verbs = ("enjoys", "makes time for", "often talks about", "is getting better at")
    items = []
    for number in range(count_):
        verb = verbs[number % len(verbs)]
        activity = corpus.ACTIVITIES[number // len(verbs) % len(corpus.ACTIVITIES)]
        items.append(
            {
                "content": f"The user {verb} {activity[1]} ({activity[2]}).",
                "type": "preference",
                "timestamp": (BASE_NOW - timedelta(days=number)).isoformat(),
                "tags": ["trait"],
                "importance": 7,
                "metadata": {"trait": True, "confidence": 0.7, "evidence_ids": []},
                "external_id": f"bench-trait-{number}",
            }
        )
    return items


def finish_base(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Add the traits (real vectors), then mark every memory as seen by every job."""
    store = Store.open(store_settings(data_dir), create=True)
    try:
        store.add_memories(NAMESPACE, trait_items(args.traits), now=BASE_NOW, source="bench")
        store.indexer.sync()
        return {"traits": args.traits, **mark_maintained(store)}
    finally:
        store.close()


def mark_maintained(store: Store) -> dict[str, Any]:
    """Set every job's watermark to the newest memory and log line: nothing counts as new."""
    newest = max_id(store, Memory)
    newest_log = max_id(store, ConversationLog)
    # The watermark keys each job reads (secretary/jobs/*.py).
    states = {
        "extractor": {"watermark": newest_log},
        "linker": {"watermark": newest, "typed_watermark": newest},
        "auditor": {"watermark": newest, "exact_watermark": newest},
        "soul_mapper": {"watermark": newest},
        "consolidator": {"watermark": newest},
    }
    repository = store.repository
    with repository.changing(NAMESPACE, "bench", BASE_NOW) as (session, _changes):
        for job, job_state in states.items():
            repository.save_job_state(session, job, NAMESPACE, job_state, now=BASE_NOW)
    with repository.reading() as session:
        by_type = dict(
            session.execute(select(Memory.type, func.count()).group_by(Memory.type)).all()
        )
    return {"memories": count(store, Memory), "by_type": by_type, "watermark": newest}


def related_items(
    lines: Sequence[Mapping[str, Any]], start: int, wanted: int
) -> list[dict[str, Any]]:
    """LoCoMo lines from ``start`` as the scripted extractor would have made them memories."""
    items = []
    for number, line in enumerate(lines[start:], start=start):
        if len(items) == wanted:
            break
        text = str(line["content"])
        if len(text.split()) < 6:  # the scripted extractor's small-talk rule
            continue
        when = line["timestamp"]
        items.append(
            {
                "content": f"On {when.date().isoformat()}, {text}",
                "type": _memory_type({"id": number, "text": text}),
                "timestamp": when.isoformat(),
                "tags": _keywords(text),
                "importance": 3 + _hash(number) % 5,
                "session_id": line["session_id"],
                "external_id": f"bench-related-{number}",
            }
        )
    return items


def related_store(
    size: int, args: argparse.Namespace, logs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The base store plus LoCoMo memories related to the new logs (cached); return its state.

    ``--related-share`` of ``size`` LoCoMo turns that never arrive as logs (the rest of the
    conversation the logs come from first, then the next conversations) are added as memories
    in the scripted extractor's form, with real vectors, before the watermarks are set.
    """
    base = base_store(size, args)
    base["dir"] = str(args.work / f"base-n{size}")
    wanted = round(args.related_share * size)
    if not wanted:
        return base | {"related": 0}
    first = sum(args.new)
    items = related_items(logs, first, wanted)
    target = args.work / f"base-n{size}-related{len(items)}"
    state_path = target / "state.json"
    if state_path.exists() and not args.fresh:
        state = json.loads(state_path.read_text())
        if state.get("fingerprint") == base["fingerprint"] and state.get("first") == first:
            return dict(state)
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(args.work / f"base-n{size}" / "data", target / "data")
    store = Store.open(store_settings(target / "data"), create=True)
    try:
        for start in range(0, len(items), BATCH):
            batch = items[start : start + BATCH]
            store.add_memories(NAMESPACE, batch, now=BASE_NOW, source="bench")
        index_seconds = index_outbox(store, size)
        state = {**base, **mark_maintained(store)}
    finally:
        store.close()
    state |= {
        "dir": str(target),
        "first": first,
        "related": len(items),
        "related_index_seconds": index_seconds,
        "related_seconds": round(time.perf_counter() - started, 1),
    }
    state_path.write_text(json.dumps(state, indent=2))
    return state


def count(store: Store, table: Any) -> int:
    with store.repository.reading() as session:
        return int(session.scalar(select(func.count()).select_from(table)) or 0)


def max_id(store: Store, table: Any) -> int:
    with store.repository.reading() as session:
        return int(session.scalar(select(func.max(table.id))) or 0)


# -- cycles --------------------------------------------------------------------------------------


def run_cycle_measured(
    store: Store, settings: Settings, *, now: datetime, meter: Meter | None
) -> dict[str, Any]:
    """run_cycle's loop (every job on every namespace with work), timed per job, then a sync."""
    first_record = max_id(store, MaintenanceRecord)
    first_memory = max_id(store, Memory)
    jobs: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for namespace in namespaces_with_work(store):
        for name in JOBS:
            mark = meter.mark() if meter else 0
            job_started = time.perf_counter()
            outcome = run_job(store, settings, name, namespace, now=now)
            entry = jobs.setdefault(name, {"calls": 0, "seconds": 0.0, "status": []})
            entry["seconds"] += time.perf_counter() - job_started
            entry["calls"] += int(outcome.stats.get("llm_calls", 0))
            entry["status"].append(outcome.status)
            entry["work"] = {
                k: v
                for k, v in outcome.stats.items()
                if isinstance(v, int | float | str) and k not in ("llm_calls", "cutoff")
            }
            if outcome.status == "failed":
                entry["error"] = outcome.message
            if meter:
                server = meter.since(mark)
                entry["server"] = server
    sync_started = time.perf_counter()
    store.indexer.sync()
    sync_seconds = time.perf_counter() - sync_started
    records = record_tokens(store, first_record)
    for name, entry in jobs.items():
        entry["seconds"] = round(entry["seconds"], 2)
        entry["status"] = "/".join(entry["status"])
        entry["tokens_in"], entry["tokens_out"] = records.get(name, (0, 0))
    created = new_memories(store, first_memory)
    totals = {
        "calls": sum(e["calls"] for e in jobs.values()),
        "tokens_in": sum(e["tokens_in"] for e in jobs.values()),
        "tokens_out": sum(e["tokens_out"] for e in jobs.values()),
        "seconds": round(time.perf_counter() - started, 2),
        "index_sync_seconds": round(sync_seconds, 2),
    }
    if meter:
        servers = [e["server"] for e in jobs.values()]
        totals["server_requests"] = sum(s["requests"] for s in servers)
        totals["server_prompt_tokens"] = sum(s["prompt_tokens"] for s in servers)
        totals["server_completion_tokens"] = sum(s["completion_tokens"] for s in servers)
        totals["records_match_server"] = (
            totals["server_prompt_tokens"] == totals["tokens_in"]
            and totals["server_completion_tokens"] == totals["tokens_out"]
            and totals["server_requests"] == totals["calls"]
        )
    return {"jobs": jobs, "totals": totals, "new_memories": created}


def record_tokens(store: Store, after: int) -> dict[str, tuple[int, int]]:
    query = (
        select(
            MaintenanceRecord.job,
            func.sum(MaintenanceRecord.tokens_in),
            func.sum(MaintenanceRecord.tokens_out),
        )
        .where(MaintenanceRecord.id > after)
        .group_by(MaintenanceRecord.job)
    )
    with store.repository.reading() as session:
        return {
            job: (int(t_in or 0), int(t_out or 0)) for job, t_in, t_out in session.execute(query)
        }


def new_memories(store: Store, after: int) -> dict[str, int]:
    """Memories created since ``after``, by the job that made them."""
    with store.repository.reading() as session:
        rows = session.execute(
            select(Memory.source, func.count()).where(Memory.id > after).group_by(Memory.source)
        ).all()
    return {str(source): int(n) for source, n in rows}


def measure_size(
    size: int, args: argparse.Namespace, logs: Sequence[Mapping[str, Any]], llm: LlmTarget
) -> dict[str, Any]:
    """Copy the base store, then run the N=0, arrival and follow-up cycles on it."""
    base = related_store(size, args, logs)
    run_dir = args.work / f"run-n{size}"
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    shutil.copytree(Path(base["dir"]) / "data", run_dir / "data")
    copy_seconds = time.perf_counter() - started
    settings = bench_settings(run_dir / "data", api_base=llm.api_base)
    store = Store.open(settings, create=True)
    try:
        # Load the model, Chroma (HNSW into memory), litellm and its tokenizer before timing.
        store.index.query(NAMESPACE, store.embedder.embed(["warm up"])[0], 1)
        _litellm().token_counter(model=COUNT_MODEL, text="warm up")
        now = BASE_NOW
        cycles: list[dict[str, Any]] = []

        def cycle(kind: str, new_logs: int) -> dict[str, Any]:
            nonlocal now
            now += CYCLE_GAP
            result = run_cycle_measured(store, settings, now=now, meter=llm.meter)
            result |= {"kind": kind, "new_logs": new_logs, "store_memories": count(store, Memory)}
            cycles.append(result)
            t = result["totals"]
            say(f"n={size} {kind}: {t['calls']} calls, {t['tokens_in']}+{t['tokens_out']} "
                f"tokens, {t['seconds']:.1f} s, new memories {result['new_memories']}")  # fmt: skip
            return result

        cycle("nothing new", 0)
        cursor = 0
        for n in args.new:
            store.add_logs(NAMESPACE, logs[cursor : cursor + n], now=now)
            cursor += n
            cycle("arrival", n)
            for _ in range(args.max_follow_ups):
                if cycle("follow-up", 0)["totals"]["calls"] == 0:
                    break
        reach = base_reach(store, base["watermark"])
    finally:
        store.close()
    return {
        "memories": base["memories"],
        "base_reach": reach,
        "base": base,
        "copy_seconds": round(copy_seconds, 1),
        "cycles": cycles,
        "per_n": per_n(cycles),
        "zero_checks": zero_checks(cycles),
    }


def base_reach(store: Store, watermark: int) -> dict[str, Any]:
    """How much of the base the cycles touched: relations made to it, base memories retired."""
    made = select(MemoryRelation.type, func.count()).where(
        (MemoryRelation.source_id > watermark) | (MemoryRelation.target_id > watermark)
    )
    to_base = made.where(
        (MemoryRelation.source_id <= watermark) | (MemoryRelation.target_id <= watermark)
    )
    retired = select(func.count()).where(Memory.id <= watermark, Memory.status != "active")
    with store.repository.reading() as session:
        return {
            "relations_made": dict(session.execute(made.group_by(MemoryRelation.type)).all()),
            "relations_to_base": dict(session.execute(to_base.group_by(MemoryRelation.type)).all()),
            "base_memories_retired": int(session.scalar(retired) or 0),
        }


def per_n(cycles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each arrival with its follow-ups: calls, tokens, time and tokens per new memory."""
    out: list[dict[str, Any]] = []
    for cycle in cycles:
        if cycle["kind"] == "arrival":
            out.append({"new_logs": cycle["new_logs"], "cycles": [cycle]})
        elif cycle["kind"] == "follow-up" and out:
            out[-1]["cycles"].append(cycle)
    rows = []
    for group in out:
        arrival, follow = group["cycles"][0], group["cycles"][1:]
        extracted = arrival["new_memories"].get("extractor", 0)
        made: Counter[str] = Counter()
        for c in group["cycles"]:
            made.update(c["new_memories"])
        tokens = sum(c["totals"]["tokens_in"] + c["totals"]["tokens_out"] for c in group["cycles"])
        rows.append(
            {
                "new_logs": group["new_logs"],
                "extracted_memories": extracted,
                "memories_made": dict(made),
                "arrival_calls": arrival["totals"]["calls"],
                "follow_up_calls": sum(c["totals"]["calls"] for c in follow),
                "follow_up_cycles": len(follow),
                "settled": group["cycles"][-1]["totals"]["calls"] == 0,
                "tokens_in": sum(c["totals"]["tokens_in"] for c in group["cycles"]),
                "tokens_out": sum(c["totals"]["tokens_out"] for c in group["cycles"]),
                "tokens_per_new_memory": round(tokens / extracted, 1) if extracted else None,
                "tokens_per_log_line": round(tokens / group["new_logs"], 1),
                "seconds": round(sum(c["totals"]["seconds"] for c in group["cycles"]), 1),
                "calls_by_job": {
                    job: sum(c["jobs"][job]["calls"] for c in group["cycles"]) for job in JOBS
                },
                "tokens_by_job": {
                    job: sum(
                        c["jobs"][job]["tokens_in"] + c["jobs"][job]["tokens_out"]
                        for c in group["cycles"]
                    )
                    for job in JOBS
                },
            }
        )
    return rows


def zero_checks(cycles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Cycles with nothing new: the first one and every follow-up that ended a settling run."""
    checks = []
    for position, cycle in enumerate(cycles):
        follows_settling = cycle["kind"] == "follow-up" and cycle["totals"]["calls"] == 0
        if cycle["kind"] == "nothing new" or follows_settling:
            checks.append(
                {
                    "cycle": position,
                    "kind": cycle["kind"],
                    "calls": cycle["totals"]["calls"],
                    "server_requests": cycle["totals"].get("server_requests"),
                    "tokens": cycle["totals"]["tokens_in"] + cycle["totals"]["tokens_out"],
                    "seconds": cycle["totals"]["seconds"],
                }
            )
    return checks


@dataclass(frozen=True, kw_only=True)
class LlmTarget:
    label: str
    api_base: str | None  # None: the real model from SECRETARY_LLM_*
    meter: Meter | None


# -- results -------------------------------------------------------------------------------------


def _git(*command: str) -> str:
    try:
        return subprocess.run(
            ["git", *command], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_info(settings: Settings, label: str) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return {
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "--short", "HEAD") or "uncommitted",
        "worktree_dirty": bool(_git("status", "--porcelain", "--", "store", "secretary")),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {n: ver(n) for n in ("litellm", "tiktoken", "chromadb", "onnxruntime")},
        "llm": label,
        "token_counting": (
            f"scripted server: litellm.token_counter(model={COUNT_MODEL!r}) over the request's "
            "messages (prompt) and over the reply text (completion); the response_format schema "
            "is counted apart (schema_tokens), not in the prompt"
            if label == "scripted"
            else "the provider's usage, as stored in the maintenance records"
        ),
        "settings": {
            "jobs": settings.jobs.model_dump(),
            "guardrails": settings.guardrails.model_dump(),
            "llm": {
                k: v
                for k, v in settings.llm.model_dump().items()
                if k not in ("api_key", "api_base")
            },
        },
    }


def merge_results(
    path: Path, section: str, info: Mapping[str, Any], sizes: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge one run into the results file: a section per LLM and base variant, a row per size."""
    results: dict[str, Any] = {}
    if path.exists():
        results = json.loads(path.read_text())
    entry = results.setdefault("sections", {}).setdefault(section, {"sizes": {}})
    entry["run"] = dict(info)
    for size, data in sizes.items():
        entry["sizes"][size] = {
            **data,
            "measured_at": info["date_utc"],
            "commit": info["git_commit"],
        }
    results["notes"] = NOTES
    return results


NOTES = [
    "Base store: synthetic memories of bench/corpus.py (the corpus of bench/latency.py), plus "
    "user traits, plus (related share) LoCoMo turns that never arrive as logs, written as the "
    "scripted extractor writes memories (the rest of conversation 0, then conversations 1, "
    "2, ...); every job's watermark set to the newest memory, so the base counts as "
    "maintained. Store sizes in the tables are the synthetic part. Sizes above --real-max hold "
    "pool vectors (mixes of real embeddings of "
    "generated texts); new memories and every job's own embeddings use the real ONNX model.",
    "New logs: LoCoMo turns in dialogue order, the same turns for every size (conversation 0 "
    "first); the clock moves one hour per cycle.",
    "Scripted extractor: one memory per log line of six words or more (shorter lines are small "
    "talk); types by a hash of the line: 50% event, 25% fact, 20% preference, 5% tool "
    "experience. Linker: one thematic relation per group. Auditor: a verdict per memory, keep "
    "unless two memories of a group have the same text. Soul mapper: one trait per ten "
    "memories, every other one revising a trait shown. Consolidator: a 60-word summary of all "
    "fragments sent. Completion tokens are those of these replies: a real model's differ.",
    "A cycle is run_cycle's loop (each job in JOBS order via run_job) followed by "
    "store.indexer.sync(), as `secretary dream` does. Wall times include the local HTTP round "
    "trips and the scripted server's token counting, and the machine was shared with other work.",
]


def render_markdown(results: Mapping[str, Any]) -> str:
    lines = ["# Maintenance benchmark: LLM calls and tokens per cycle", ""]
    lines += [f"- {note}" for note in results.get("notes", [])]
    for section, entry in results.get("sections", {}).items():
        run = entry["run"]
        machine = run["machine"]
        lines += [
            "",
            f"## {section}",
            "",
            f"- measured {run['date_utc']} at commit {run['git_commit']}"
            f"{' (worktree changed)' if run.get('worktree_dirty') else ''}; {machine['platform']}, "
            f"{machine['cpu_count']} CPUs, Python {machine['python']}, load average at the end "
            f"{machine['load_average']}",
            f"- versions: {', '.join(f'{k} {v}' for k, v in run['versions'].items())}",
            f"- tokens: {run['token_counting']}",
            "",
        ]
        sizes = sorted(entry["sizes"].items(), key=lambda item: int(item[0]))
        lines += _summary_table(sizes)
        lines += _reach_table(sizes)
        lines += _zero_table(sizes)
        lines += _job_tables(sizes)
        lines += _base_table(sizes)
        lines += ["### Settings", "", "```json", json.dumps(run["settings"], indent=2), "```"]
    return "\n".join(lines) + "\n"


def _summary_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Per arrival of N log lines (the arrival cycle plus its follow-ups)",
        "",
        "| store | N logs | memories extracted | made (all jobs) | calls arrival + follow-ups "
        "| prompt tokens | completion tokens | tokens / new memory | tokens / log line "
        "| wall s | records = server |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for size, data in sizes:
        checked = [c["totals"].get("records_match_server") for c in data["cycles"]]
        matches = "n/a" if None in checked else "yes" if all(checked) else "NO"
        for row in data["per_n"]:
            made = sum(row["memories_made"].values())
            lines.append(
                f"| {int(size):,} | {row['new_logs']} | {row['extracted_memories']} | {made} | "
                f"{row['arrival_calls']} + {row['follow_up_calls']} "
                f"({row['follow_up_cycles']} cycles) | {row['tokens_in']:,} | "
                f"{row['tokens_out']:,} | {row['tokens_per_new_memory']} | "
                f"{row['tokens_per_log_line']} | {row['seconds']} | {matches} |"
            )
    return [*lines, ""]


def _reach_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### What the cycles touched in the base store (all arrivals together)",
        "",
        "| store | related LoCoMo memories in base | relations made (to base) "
        "| base memories retired |",
        "|---:|---:|---|---:|",
    ]
    for size, data in sizes:
        reach = data["base_reach"]
        made = ", ".join(
            f"{kind} {n} ({reach['relations_to_base'].get(kind, 0)})"
            for kind, n in sorted(reach["relations_made"].items())
        )
        lines.append(
            f"| {int(size):,} | {data['base'].get('related', 0):,} | {made} | "
            f"{reach['base_memories_retired']} |"
        )
    return [*lines, ""]


def _zero_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Cycles with nothing new (must make no LLM call)",
        "",
        "| store | cycle | kind | LLM calls | server requests | tokens | wall s |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for size, data in sizes:
        for check in data["zero_checks"]:
            lines.append(
                f"| {int(size):,} | {check['cycle']} | {check['kind']} | {check['calls']} | "
                f"{check['server_requests']} | {check['tokens']} | {check['seconds']} |"
            )
    return [*lines, ""]


def _job_tables(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Per job and cycle (calls / prompt+completion tokens / wall s)",
        "",
        "| store | cycle | N logs | " + " | ".join(JOBS) + " | index sync s |",
        "|---:|---|---:|" + "---|" * len(JOBS) + "---:|",
    ]
    for size, data in sizes:
        for number, cycle in enumerate(data["cycles"]):
            cells = []
            for job in JOBS:
                e = cycle["jobs"].get(job)
                cells.append(
                    "-"
                    if e is None
                    else f"{e['calls']} / {e['tokens_in']:,}+{e['tokens_out']:,} / {e['seconds']}"
                )
            lines.append(
                f"| {int(size):,} | {number} {cycle['kind']} | {cycle['new_logs']} | "
                + " | ".join(cells)
                + f" | {cycle['totals']['index_sync_seconds']} |"
            )
    return [*lines, ""]


def _base_table(sizes: Sequence[tuple[str, Any]]) -> list[str]:
    lines = [
        "### Base stores",
        "",
        "| store | memories (with traits) | vectors | prepared how | prepared s "
        "| copied per run s |",
        "|---:|---:|---|---|---:|---:|",
    ]
    for size, data in sizes:
        base = data["base"]
        source = base["source"]
        how = f"copied from {source['copied_from']}" if "copied_from" in source else "built here"
        how += f" (ingest {source.get('ingest_seconds')} s, index {source.get('index_seconds')} s)"
        lines.append(
            f"| {int(size):,} | {base['memories']:,} | {base['vectors']} | {how} | "
            f"{base['seconds']} | {data['copy_seconds']} |"
        )
    return [*lines, ""]


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=None,
                        help="comma-separated base store sizes "
                        "(default 1000,10000,100000)")  # fmt: skip
    parser.add_argument("--new", default=None,
                        help="log lines arriving before each measured cycle (default "
                        "10,50,200); a cycle with nothing new always runs first")  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: --sizes 1000 --new 10,50, results under --work",
    )
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON, merged per LLM and size, Markdown beside it "
                        f"(default {DEFAULT_OUT.relative_to(ROOT)}; with --quick "
                        "<work>/quick.json)")  # fmt: skip
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="LoCoMo locomo10.json (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--work",
        type=Path,
        default=WORK,
        help="cached base stores and run copies (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--traits", type=int, default=50,
                        help="user traits in the base store (default 50 = "
                        "jobs.soul_mapper_max_traits)")  # fmt: skip
    parser.add_argument(
        "--real-max",
        type=int,
        default=10_000,
        help="largest base indexed with the real model (default %(default)s)",
    )
    parser.add_argument(
        "--pool",
        type=int,
        default=20_000,
        help="texts in the vector pool above --real-max (default %(default)s)",
    )
    parser.add_argument(
        "--max-follow-ups",
        type=int,
        default=5,
        help="follow-up cycles after an arrival at most (default %(default)s)",
    )
    parser.add_argument("--related-share", type=float, default=0.05,
                        help="LoCoMo memories related to the new logs added to the base, as a "
                        "share of the size (default %(default)s; 0 = synthetic only)")  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="rebuild the base stores")
    args = parser.parse_args(argv)
    if args.quick:
        args.out = args.out or args.work / "quick.json"
    args.sizes = args.sizes or ("1000" if args.quick else "1000,10000,100000")
    args.new = args.new or ("10,50" if args.quick else "10,50,200")
    args.out = args.out or DEFAULT_OUT
    args.sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    args.new = [int(s) for s in args.new.split(",") if s.strip()]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("WARNING")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    logs = locomo_logs(args.data)
    if sum(args.new) > len(logs):
        raise SystemExit(f"--new asks for {sum(args.new)} log lines; LoCoMo has {len(logs)}")
    real_model = os.environ.get("SECRETARY_LLM_MODEL", "")
    measured: dict[str, Any] = {}
    with scripted_llm(start=not real_model) as (meter, api_base):
        target = (
            LlmTarget(label=real_model, api_base=None, meter=None)
            if real_model
            else LlmTarget(label="scripted", api_base=api_base, meter=meter)
        )
        for size in args.sizes:
            say(f"n={size}: LLM {target.label}")
            measured[str(size)] = measure_size(size, args, logs, target)
            write(args, target, measured)
    failed = [
        (size, check)
        for size, data in measured.items()
        for check in data["zero_checks"]
        if check["calls"] or check["server_requests"]
    ]
    unsettled = [
        (size, row["new_logs"])
        for size, data in measured.items()
        for row in data["per_n"]
        if not row["settled"]
    ]
    assert not failed, f"a cycle with nothing new made LLM calls: {failed}"
    assert not unsettled, f"follow-up cycles still made calls after {args.max_follow_ups}"
    return 0


def write(args: argparse.Namespace, target: LlmTarget, measured: Mapping[str, Any]) -> None:
    settings = bench_settings(args.work, api_base=target.api_base)
    section = f"LLM {target.label}, related share {args.related_share:g}"
    info = run_info(settings, target.label) | {"related_share": args.related_share}
    results = merge_results(args.out, section, info, measured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(render_markdown(results))
    say(f"wrote {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    sys.exit(main())
