"""Tool errors in the tool's own words.

The API names a refused part by where it sits in the HTTP request (``query.q``,
``body.filter.types.0``, ``header.if-match``, ``items.0`` with ``type: ...``); an agent knows
only the tool's arguments, so ``refusals(arguments)`` renames each problem to the argument it
came from (``query``, ``types[0]``, ``version``, ``type``). Arguments the SDK refuses before
the tool runs (a missing or unknown one, a wrong type) are told the same way by ``ToolOfArgs``,
without pydantic's links and echoed input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import ValidationError

from secretary.client.errors import Problem, SecretaryError

# Where in a request the API says a problem sits: the first part of its ``where``.
LOCATIONS = frozenset({"query", "body", "path", "header"})
# A batch's problem names the item (``items.0``) and puts the field in what it says.
_FIELD_SAID = re.compile(r"^([a-z_][a-z0-9_]*(?:\.\d+)*): (.+)$", re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class Arguments:
    """How one tool's arguments sit in the requests it makes.

    ``renamed``: an API field (dotted, after its location) -> the tool's argument; fields not
    named keep their own name. ``items``: for a tool that sends a batch, the argument holding
    its items (``turns``), or ``""`` when the tool sends one item made of its own arguments.
    ``outer``: the items' fields that are the tool's own arguments (a session given once).
    ``said``: a problem's own text replaced, where its words are the API's (forget's selection).
    """

    renamed: Mapping[str, str] = field(default_factory=dict)
    items: str | None = None
    outer: frozenset[str] = frozenset()
    said: Mapping[str, str] = field(default_factory=dict)

    def problem(self, problem: Problem) -> Problem:
        """Given a problem as the API said it, return it named by the tool's arguments."""
        parts = problem.where.split(".") if problem.where else []
        what = problem.what
        if parts and parts[0] in LOCATIONS:
            parts = parts[1:]
        prefix = ""
        if self.items is not None and len(parts) >= 2 and parts[0] == "items":
            index, parts = parts[1], parts[2:]
            told = _FIELD_SAID.match(what)
            if not parts and told:
                parts, what = told.group(1).split("."), told.group(2)
            if self.items and not (parts and parts[0] in self.outer):
                prefix = f"{self.items}[{index}]" if index.isdigit() else self.items
        named = _argument(parts, self.renamed)
        # An item's problem about no one field (its size) is about the tool's call as a whole.
        where = ".".join(filter(None, (prefix, named)))
        return Problem(where=where, what=self.said.get(where, what))


def _argument(parts: list[str], renamed: Mapping[str, str]) -> str:
    """The argument that ``parts`` of an API place name: the longest renamed prefix, then the
    rest (a number as an index: ``types[0]``)."""
    for cut in range(len(parts), 0, -1):
        name = renamed.get(".".join(parts[:cut]))
        if name is not None:
            head, rest = name, parts[cut:]
            break
    else:
        head, rest = (parts[0], parts[1:]) if parts else ("", [])
    for part in rest:
        head += f"[{part}]" if part.isdigit() else f".{part}"
    return head.removeprefix(".")  # a field within a part renamed to nothing (forget's filter)


# Where each tool's arguments sit in its requests.
FILTERS = {"type": "types", "tag": "tags"}
SEARCH = Arguments(renamed={"q": "query", **FILTERS})
ONE_ITEM = Arguments(items="", renamed={"timestamp": "event_time"})
TURNS = Arguments(items="turns", outer=frozenset({"session_id"}))
LISTING = Arguments(renamed={**FILTERS, "status": "statuses"})
EDIT = Arguments(renamed={"if-match": "version"})
FORGET = Arguments(
    renamed={
        "filter": "",
        "filter.types": "types",
        "filter.tags": "tags",
        "filter.since": "since",
        "filter.until": "until",
        "all": "all_memories",
        "dry_run": "confirm",
        "log_filter": "",
        "log_filter.since": "log_since",
        "log_filter.until": "log_until",
        "log_filter.sessions": "sessions",
        "log_filter.keys": "keys",
        "log_filter.match": "match",
    },
    said={
        "selection": "say what to erase: ids, external_ids, types, tags, since, until, "
        "all_memories, or log lines by sessions, log_since, log_until, keys or match"
    },
)


@contextmanager
def refusals(arguments: Arguments = Arguments()) -> Iterator[None]:
    """Turn the API's refusals into tool errors carrying its status and message, and each
    problem under the name of the tool's argument it is about."""
    try:
        yield
    except SecretaryError as exc:
        named = (arguments.problem(problem) for problem in exc.problems)
        problems = "; ".join(f"{p.where}: {p.what}" if p.where else p.what for p in named)
        status = f"{exc.status} " if exc.status is not None else ""
        raise ToolError(f"{status}{exc.message}" + (f" ({problems})" if problems else "")) from None


def arguments_refused(error: ValidationError) -> str:
    """What was wrong with a call's arguments, one ``argument: what`` each."""
    told = []
    for item in error.errors(include_url=False, include_input=False):
        where = _argument([str(part) for part in item["loc"]], {}) or "arguments"
        what = "not an argument of this tool" if item["type"] == "extra_forbidden" else item["msg"]
        told.append(f"{where}: {what}")
    return "invalid arguments (" + "; ".join(told) + ")"


class ToolOfArgs(Tool):
    """A tool whose refused arguments are told briefly, by argument (the SDK prints pydantic's
    whole report: its type codes, the input echoed back and a link per error)."""

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            cause = exc.__cause__
            if (
                not isinstance(cause, ValidationError)
                or cause.title != self.fn_metadata.arg_model.__name__
            ):
                raise
            raise ToolError(
                f"Error executing tool {self.name}: {arguments_refused(cause)}"
            ) from cause
