"""The console's app: its state, the session cookie on every response, errors as pages.

``create_console`` builds it over the API's store; ``store.api.app`` serves it at /ui (see
``store.api.console.mount``). It writes nothing itself: its pages call the same store functions
as the API's routes (edit, delete, forget, undo, the schedule table) and the secretary's
``ConsoleOps`` (approval, cron).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from loguru import logger
from starlette.exceptions import HTTPException as StarletteHTTPException

from store.api.console import pages_login, pages_memories, pages_runs, pages_status
from store.api.console.ops import ConsoleOps
from store.api.console.render import install_filters
from store.api.console.session import (
    COOKIE,
    MAX_AGE,
    Session,
    decode,
    encode,
    logged_in_nonce,
    new_session,
    session_id,
)
from store.api.console.web import (
    HERE,
    Console,
    CsrfRefused,
    LoginNeeded,
    PageNotFound,
    console,
    page,
    see_other,
)
from store.api.errors import DATABASE_GONE, database_detail
from store.coordination.console_key import console_key
from store.service import Store
from store.status import StatusConfig

Next = Callable[[Request], Awaitable[Response]]


def create_console(
    store: Store,
    *,
    clock: Callable[[], datetime],
    status: StatusConfig,
    ops: ConsoleOps | None = None,
    secret: bytes | None = None,
) -> FastAPI:
    """Build the console over ``store``; ``secret`` signs its anonymous sessions (default: the
    key kept in the data directory, made on first use); logged-in ones are rows of the store's
    ``console_sessions``."""
    templates = Jinja2Templates(directory=HERE / "templates")
    install_filters(templates.env)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.console = Console(
        store=store,
        clock=clock,
        status=status,
        ops=ops,
        secret=secret or console_key(store.settings.data_dir),
        templates=templates,
    )
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="static")
    for module in (pages_login, pages_runs, pages_memories, pages_status):
        app.include_router(module.router)
    _install_session(app)
    _install_errors(app)
    return app


def _install_session(app: FastAPI) -> None:
    @app.middleware("http")
    async def session(request: Request, call_next: Next) -> Response:
        here: Console = app.state.console
        now = here.clock()
        found = await run_in_threadpool(_found, here, request.cookies.get(COOKIE), now)
        request.state.session = found or new_session(now)
        response = await call_next(request)
        current: Session = request.state.session
        if found is None or current != found:
            response.set_cookie(
                COOKIE,
                encode(here.secret, current),
                max_age=int(MAX_AGE.total_seconds()),
                path="/ui",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return _protected(response)


def _protected(response: Response) -> Response:
    """Pages show memories: no caching by the browser or a proxy, no framing."""
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault(
        "Content-Security-Policy",
        # Bars are drawn with a width in a style attribute; no inline script runs.
        "default-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'",
    )
    return response


def _found(here: Console, value: str | None, now: datetime) -> Session | None:
    """The session a cookie names: a logged-in one if its row is live (ended, expired or
    unknown: None), else an anonymous one if its signature holds."""
    nonce = logged_in_nonce(value)
    if nonce is None:
        return decode(here.secret, value, now)
    row = here.store.db.console_sessions.live(session_id(nonce), now=now)
    if row is None:
        return None
    return Session(nonce=nonce, key_id=row.key_id, issued=row.created_at)


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(PageNotFound)
    async def not_found(request: Request, exc: Exception) -> Response:
        what = exc.what if isinstance(exc, PageNotFound) else "not found"
        return page(request, "error.html", {"title": "Not found", "what": what}, status_code=404)

    @app.exception_handler(CsrfRefused)
    async def refused(request: Request, _: Exception) -> Response:
        what = "this form is out of date or came from another site: nothing was changed"
        return page(request, "error.html", {"title": "Refused", "what": what}, status_code=403)

    @app.exception_handler(LoginNeeded)
    async def login(request: Request, _: Exception) -> Response:
        if request.method == "GET":
            return see_other("/ui/login")
        what = "log in first: nothing was changed"
        return page(request, "error.html", {"title": "Log in", "what": what}, status_code=401)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, _: Exception) -> Response:
        # A path id that is not a number names nothing: the same page as a missing one.
        what = "no such page (a malformed address)"
        return page(request, "error.html", {"title": "Not found", "what": what}, status_code=404)

    async def database_gone(request: Request, exc: Exception) -> Response:
        logger.opt(exception=exc).warning(
            "{} {}: the database is unavailable", request.method, request.url.path
        )
        if not hasattr(request.state, "session"):  # reading the session itself failed
            request.state.session = new_session(console(request).clock())
        what = (
            f"the database is unavailable ({database_detail(exc)}): try again in a moment. "
            "A change commits whole or not at all: once the database is back, reload the "
            "page to see whether it was made"
        )
        shown = page(
            request, "error.html", {"title": "Database unavailable", "what": what}, status_code=503
        )
        shown.headers["Retry-After"] = "5"
        return _protected(shown)

    for gone in DATABASE_GONE:
        app.add_exception_handler(gone, database_gone)

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> Response:
        if isinstance(exc, DATABASE_GONE):  # raised outside the routes: by the session's read
            return await database_gone(request, exc)
        # Starlette logs the traceback after this page is sent; the page keeps the look.
        what = (
            "the console failed on this page (the server log says why); a change commits "
            "whole or not at all: reload the page to see which"
        )
        # Sent from outside the session middleware: the headers are set here.
        return _protected(
            page(request, "error.html", {"title": "Error", "what": what}, status_code=500)
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
        what = str(exc.detail) if isinstance(exc, StarletteHTTPException) else "error"
        return page(request, "error.html", {"title": str(code), "what": what}, status_code=code)
