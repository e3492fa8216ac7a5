"""Refusals and the one JSON error shape every one of them, ours or FastAPI's, is sent in.

``{"error": {"status": 422, "message": "...", "problems": [{"where": "...", "what": "..."}]}}``
"""

from collections.abc import Mapping, Sequence
from typing import cast

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from loguru import logger
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from store.errors import DatabaseUnavailable, ValidationFailed
from store.schemas import problem_message

Problems = Sequence[tuple[str, str]]
# Connection-level failures (a server gone, a file that cannot be opened, a lock held too long):
# the request may succeed later. Other database errors are bugs (500).
DATABASE_GONE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, DatabaseUnavailable)


def database_detail(exc: Exception) -> str:
    """What the driver said about a database that is gone, on one line."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]


class ApiError(Exception):
    """A request we refuse: an HTTP status, a message and the problems found."""

    def __init__(
        self,
        status: int,
        message: str,
        problems: Problems = (),
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.problems = list(problems)
        self.headers = dict(headers or {})


def error_response(
    status: int, message: str, problems: Problems = (), headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {
        "error": {
            "status": status,
            "message": message,
            "problems": [{"where": where, "what": what} for where, what in problems],
        }
    }
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _validation_problems(exc: RequestValidationError) -> list[tuple[str, str]]:
    out = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ())) or "request"
        out.append((where, problem_message(error) if "msg" in error else "invalid"))
    return out


def install_error_handlers(app: FastAPI) -> None:
    """Answer ApiError, invalid requests, HTTP errors and rejected items in the one shape."""

    async def api_error(_: Request, exc: Exception) -> Response:
        err = cast(ApiError, exc)
        return error_response(err.status, err.message, err.problems, err.headers)

    async def invalid_request(_: Request, exc: Exception) -> Response:
        problems = _validation_problems(cast(RequestValidationError, exc))
        return error_response(422, "invalid request", problems)

    async def http_error(request: Request, exc: Exception) -> Response:
        err = cast(StarletteHTTPException, exc)
        problem = (f"{request.method} {request.url.path}", str(err.detail))
        return error_response(err.status_code, str(err.detail), [problem], err.headers)

    async def rejected(_: Request, exc: Exception) -> Response:
        problems = cast(ValidationFailed, exc).problems
        return error_response(422, "rejected, nothing written", problems)

    async def database_gone(request: Request, exc: Exception) -> Response:
        logger.opt(exception=exc).warning(
            "{} {}: the database is unavailable", request.method, request.url.path
        )
        return error_response(
            503,
            "the database is unavailable: try again later",
            [("database", database_detail(exc))],
            {"Retry-After": "5"},
        )

    async def bug(request: Request, exc: Exception) -> Response:
        # Starlette logs the traceback and re-raises after this answer; the client gets the
        # one shape instead of a bare "Internal Server Error".
        return error_response(
            500, "internal error", [(f"{request.method} {request.url.path}", type(exc).__name__)]
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(ValidationFailed, rejected)
    for gone in DATABASE_GONE:
        app.add_exception_handler(gone, database_gone)
    app.add_exception_handler(Exception, bug)
