"""/ui/login and /ui/logout: a key posted once, then kept as a session (never in a URL)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from store.api.auth import authenticate
from store.api.console.session import fingerprint, new_session
from store.api.console.web import checked_form, console, page, see_other
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
    try:
        authenticate(keys, key or None)
    except ApiError:
        context = {"title": "Log in", "error": "unknown key"}
        return page(request, "login.html", context, status_code=401)
    # A new nonce on login: a session fixed before it cannot ride on it.
    request.state.session = new_session(here.clock(), fingerprint(key))
    return see_other("/ui/overnight")


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    await checked_form(request)
    request.state.session = new_session(console(request).clock())
    return see_other("/ui/login")
