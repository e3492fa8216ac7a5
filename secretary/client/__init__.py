"""A Python client of the memory-secretary API, sync and async, on httpx.

    from secretary.client import SecretaryClient

    with SecretaryClient("http://127.0.0.1:8765", api_key="...", namespace="maya") as client:
        client.add_memory("Maya adopted a cat named Pepper", tags=["pets"])
        for hit in client.search("what pets does Maya have?").hits:
            print(hit.score, hit.breakdown.relevance, hit.content)
        print(client.recall("what pets does Maya have?").lines())  # for an agent's prompt

It talks HTTP only (no store code: an import-linter contract holds it to that). Every refusal
raises a ``SecretaryError`` subclass carrying the API's status, message and problem list.
"""

from secretary.client.aio import AsyncSecretaryClient
from secretary.client.calls import (
    Call,
    Calls,
    ForgetFilter,
    ListOptions,
    LogFilter,
    MemoryChanges,
    MemoryFields,
    RecordOptions,
    SearchOptions,
)
from secretary.client.errors import (
    AuthError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Invalid,
    NotFound,
    Problem,
    SecretaryError,
    ServerError,
    StaleVersion,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from secretary.client.models import (
    AddResult,
    Breakdown,
    Deleted,
    DreamAccepted,
    DreamRequest,
    Edited,
    ForgetResult,
    Forgotten,
    Health,
    Hit,
    Memory,
    Namespace,
    Page,
    Recall,
    Recalled,
    Record,
    RecordDetail,
    RecordDiff,
    RecordRef,
    Relation,
    SearchResult,
    Status,
    UndoResult,
    UnexpectedAnswer,
)
from secretary.client.sync import SecretaryClient

__all__ = [
    "AddResult",
    "AsyncSecretaryClient",
    "AuthError",
    "Breakdown",
    "Call",
    "Calls",
    "Conflict",
    "ConnectionFailed",
    "Deleted",
    "DreamAccepted",
    "DreamRequest",
    "Edited",
    "Forbidden",
    "ForgetFilter",
    "ForgetResult",
    "Forgotten",
    "Health",
    "Hit",
    "Invalid",
    "ListOptions",
    "LogFilter",
    "Memory",
    "MemoryChanges",
    "MemoryFields",
    "Namespace",
    "NotFound",
    "Page",
    "Problem",
    "Recall",
    "Recalled",
    "Record",
    "RecordDetail",
    "RecordDiff",
    "RecordOptions",
    "RecordRef",
    "Relation",
    "SearchOptions",
    "SearchResult",
    "SecretaryClient",
    "SecretaryError",
    "ServerError",
    "StaleVersion",
    "Status",
    "TooLarge",
    "Unauthorized",
    "Unavailable",
    "UndoResult",
    "UnexpectedAnswer",
]
