"""What the console's pages share: its state, the viewer, forms with their CSRF check, pages.

The viewer is the API's ``Principal`` of the key the session logged in with (or anyone, when
the API has no keys). A page or form of a namespace the viewer may not use answers 404, as a
missing one does, so ids leak nothing about other namespaces.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from store.api.auth import OPEN, Principal, principal_of
from store.api.console.ops import ConsoleOps
from store.api.console.session import Session, csrf_ok, csrf_token, fingerprint, seal
from store.api.console.throttle import LoginThrottle
from store.service import Store
from store.status import StatusConfig

HERE = Path(__file__).parent
MAX_FIELD_CHARS = 20_000  # a form field longer than this is refused (an edit's content fits)


class PageNotFound(Exception):
    """Answer 404: missing, or in a namespace the viewer may not use."""

    def __init__(self, what: str = "not found") -> None:
        super().__init__(what)
        self.what = what


class CsrfRefused(Exception):
    """Answer 403: a form without this session's token; nothing was changed."""


class LoginNeeded(Exception):
    """Send the browser to the login form."""


@dataclass(frozen=True, kw_only=True)
class Console:
    """The console's state, kept on its app's ``state.console``."""

    store: Store
    clock: Callable[[], datetime]
    status: StatusConfig
    ops: ConsoleOps | None
    secret: bytes  # signs anonymous sessions' cookies (logged-in ones are rows in SQL)
    templates: Jinja2Templates
    logins: LoginThrottle = field(default_factory=LoginThrottle)  # failed logins per address


def console(request: Request) -> Console:
    return cast(Console, cast(FastAPI, request.app).state.console)


def session_of(request: Request) -> Session:
    return cast(Session, request.state.session)


def viewer(request: Request) -> Principal:
    """The caller: the key the session logged in with. Raise LoginNeeded without one."""
    keys = console(request).store.settings.api.keys
    if not keys:
        return OPEN
    key_id = session_of(request).key_id
    for key in keys:
        if key_id is not None and fingerprint(key.key) == key_id:
            return principal_of(key)
    raise LoginNeeded()


def check_namespace(who: Principal, namespace: str) -> str:
    """Return ``namespace`` if the viewer may use it. Raise PageNotFound otherwise."""
    if not who.allows(namespace):
        raise PageNotFound(f"namespace {namespace!r} does not exist")
    return namespace


def namespaces_of(request: Request, who: Principal) -> list[str]:
    """The namespaces the viewer can pick from."""
    if who.namespaces is not None:
        return list(who.namespaces)
    return console(request).store.db.memories.namespaces() or ["default"]


async def checked_form(request: Request) -> dict[str, str]:
    """Return a posted form's fields. Raise CsrfRefused without this session's token."""
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not csrf_ok(session_of(request), fields.get("csrf")):
        raise CsrfRefused()
    if any(len(value) > MAX_FIELD_CHARS for value in fields.values()):
        raise PageNotFound("a field is too long")
    return fields


def page(
    request: Request, template: str, context: Mapping[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a page with what every page shows (the viewer, the CSRF token, the nav)."""
    here = console(request)
    keyed = bool(here.store.settings.api.keys)
    try:
        who: Principal | None = viewer(request)
    except LoginNeeded:
        who = None
    base = {
        "csrf": csrf_token(session_of(request)),
        "who": who,
        "keyed": keyed,
        "path": request.url.path,
    }
    return here.templates.TemplateResponse(
        request, template, {**base, **context}, status_code=status_code
    )


def see_other(url: str) -> RedirectResponse:
    """After a form: go to ``url`` (a GET), so a reload does not post again."""
    return RedirectResponse(url, status_code=303)


def see_other_saying(request: Request, path: str, message: str, **params: str) -> RedirectResponse:
    """Go to ``path`` showing ``message`` there. The message rides in the URL with a seal of
    this session, so a link made elsewhere cannot put words in the console's mouth."""
    query = urlencode({**params, "said": message, "seal": seal(session_of(request), message)})
    return see_other(f"{path}?{query}")


def said(request: Request) -> str | None:
    """The message a see_other_saying sent along, if its seal is this session's."""
    message, sealed = request.query_params.get("said"), request.query_params.get("seal", "")
    if message is None or not hmac.compare_digest(seal(session_of(request), message), sealed):
        return None
    return message
