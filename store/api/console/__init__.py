"""The web console at /ui: the morning review of what the secretary did, with undo.

Server-rendered pages (Jinja2 templates and one stylesheet, shipped in the package) over the same
store functions as the API's routes; a session cookie after a one-time key login; CSRF tokens
on every form. ``store.api.console.app.create_console`` builds it; docs/console.md tells more.
"""
