"""How the API's problem places become the MCP tools' argument names (refusals.Arguments)."""

from __future__ import annotations

import pytest

from secretary.client.errors import Problem
from secretary.mcp_server.refusals import EDIT, FORGET, LISTING, ONE_ITEM, SEARCH, TURNS, Arguments


@pytest.mark.parametrize(
    ("arguments", "where", "what", "named", "said"),
    [
        (SEARCH, "query.q", "must not be blank", "query", "must not be blank"),
        (SEARCH, "query.type.1", "bad", "types[1]", "bad"),
        (LISTING, "query.status.0", "bad", "statuses[0]", "bad"),
        (EDIT, "header.if-match", "now at version 3", "version", "now at version 3"),
        (EDIT, "path.memory_id", "too large", "memory_id", "too large"),
        (ONE_ITEM, "items.0", "type: must be a lowercase name", "type", "must be a lowercase name"),
        (ONE_ITEM, "items.0", "tags.2: too long", "tags[2]", "too long"),
        (ONE_ITEM, "items.0", "timestamp: not a time", "event_time", "not a time"),
        (ONE_ITEM, "items.0", "metadata takes 5 bytes", "", "metadata takes 5 bytes"),
        (TURNS, "items.2", "role: bad", "turns[2].role", "bad"),
        (TURNS, "items.3.session_id", "too long", "session_id", "too long"),
        (FORGET, "body.filter.types.0", "bad", "types[0]", "bad"),
        (FORGET, "body.log_filter.since", "bad", "log_since", "bad"),
        (FORGET, "body.filter.metadata.x", "bad", "metadata.x", "bad"),
        (FORGET, "body.all", "not a boolean", "all_memories", "not a boolean"),
        (FORGET, "selection", "name ids, external ids, a filter", "selection", "say what to erase"),
        (Arguments(), "", "whole request", "", "whole request"),
    ],
)
def test_a_problem_is_named_by_the_tools_argument(
    arguments: Arguments, where: str, what: str, named: str, said: str
) -> None:
    problem = arguments.problem(Problem(where=where, what=what))
    assert problem.where == named
    assert problem.what.startswith(said)
