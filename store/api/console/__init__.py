"""The web console at /ui: the morning review of what the secretary did, with undo.

Server-rendered pages (Jinja2 templates and one stylesheet, shipped in the package) over the same
store functions as the API's routes; a session cookie after a one-time key login; CSRF tokens
on every form. ``store.api.console.app.create_console`` builds it; docs/console.md tells more.

It has no write path of its own: it imports no SQL, tables or writer internals, only the calls
the API's routes make (the import-linter contract "console-no-writes").
"""
