"""Serve the console at /ui in front of the API's middleware.

The API's body guard wants JSON and a key header on every write; the console's forms are
url-encoded and authenticated by its session cookie, so its requests go straight to the console
app (which has its own checks: session, CSRF, namespaces). Everything else goes on to the API.
A console request's body must declare its length and stay under MAX_FORM_BYTES (a form is
small; an edit's content fits), so no one can make the server read a large body for a form.
"""

from __future__ import annotations

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

PREFIX = "/ui"
MAX_FORM_BYTES = 256 * 1024


def body_refusal(method: str, headers: dict[str, str]) -> tuple[int, str] | None:
    """Given a console request's method and headers, return (status, why) to refuse its body,
    or None if it may be read."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return None
    declared = headers.get("content-length", "")
    if not declared.isdigit():
        return 411, "a form must declare its length"
    if int(declared) > MAX_FORM_BYTES:
        return 413, f"a form may be at most {MAX_FORM_BYTES} bytes"
    return None


class ConsoleMount:
    """An ASGI middleware: requests under /ui go to ``console``, the rest to the API."""

    def __init__(self, app: ASGIApp, *, console: ASGIApp) -> None:
        self.app = app
        self.console = console

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = body_refusal(scope["method"], headers)
        if refusal is not None:
            await PlainTextResponse(refusal[1], status_code=refusal[0])(scope, receive, send)
            return
        await self.console(scope, receive, send)
