"""/ui/login and /ui/logout: a key posted once, then kept as a session (never in a URL).

A login is a row of ``console_sessions`` (by its token's hash); logging out deletes it, so the
old cookie and every form token of that session are refused from then on, by every process.
After ``throttle.LIMIT`` failed logins in a minute an address gets 429 with Retry-After.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from store.api.auth import authenticate
from store.api.console.session import MAX_AGE, Session, fingerprint, new_session, session_id
from store.api.console.web import Console, checked_form, console, page, see_other, session_of
from store.api.errors import ApiError

router = APIRouter()


@router.get("/ui")
@router.get("/ui/")
def home() -> Response:
    return see_other("/ui/overnight")


@router.get("/ui/login")
def login_form(request: Request) -> Response:
    return page(request, "login.html", {"title": "Log in", "error": None})


@router.post("/ui/login")
async def login(request: Request) -> Response:
    form = await checked_form(request)
    here = console(request)
    keys = here.store.settings.api.keys
    if not keys:
        return see_other("/ui/overnight")
    key = form.get("key", "").strip()
    now = here.clock()
    client = request.client.host if request.client is not None else "unknown"
    wait = here.logins.retry_after(client, now)
    if wait is not None:
        said = f"too many failed logins from this address: try again in {wait} s"
        context = {"title": "Log in", "error": said}
        response = page(request, "login.html", context, status_code=429)
        response.headers["Retry-After"] = str(wait)
        return response
    try:
        authenticate(keys, key or None)
    except ApiError:
        here.logins.failed(client, now)
        context = {"title": "Log in", "error": "unknown key"}
        return page(request, "login.html", context, status_code=401)
    # A new nonce on login: a session fixed before it cannot ride on it.
    session = new_session(now, fingerprint(key))
    await run_in_threadpool(_switch, here, session_of(request), session, now)
    request.state.session = session
    return see_other("/ui/overnight")


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    await checked_form(request)
    here = console(request)
    now = here.clock()
    session = new_session(now)
    await run_in_threadpool(_switch, here, session_of(request), session, now)
    request.state.session = session
    return see_other("/ui/login")


def _switch(here: Console, old: Session, new: Session, now: datetime) -> None:
    """End the browser's logged-in session ``old``, if it is one; store ``new`` if it is one."""
    sessions = here.store.db.console_sessions
    if old.key_id is not None:
        sessions.end(session_id(old.nonce))
    if new.key_id is not None:
        sessions.start(session_id(new.nonce), key_id=new.key_id, now=now, expires_at=now + MAX_AGE)
