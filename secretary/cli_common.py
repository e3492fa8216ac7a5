"""What every `secretary` command module shares: the context, error handling, store access."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from loguru import logger

from secretary.config import Settings, load_settings
from secretary.progress import progress
from store.errors import SecretaryError, UnknownNamespace
from store.requests import lone_surrogate
from store.settings import DEFAULT_NAMESPACE, check_host

F = TypeVar("F", bound=Callable[..., Any])  # a command, as click's decorators take it


@dataclass
class Context:
    config: Path | None
    data_dir: Path | None
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config, data_dir=self.data_dir)
        return self._settings


class ServerCannotStart(SecretaryError):
    """uvicorn could not start (it logged why just before)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"the API server could not start on {host}:{port}; the lines above say why (most"
            " often a port another program holds, or a host address this machine does not have)"
        )


@contextmanager
def listening(host: str, port: int) -> Iterator[None]:
    """Run uvicorn inside: its exit when it cannot listen (code 3) becomes ServerCannotStart."""
    try:
        yield
    except SystemExit as exc:
        if exc.code:
            raise ServerCannotStart(host, port) from None
        raise


class _Group(click.Group):
    """Turns every failure into one or two lines on stderr and a non-zero exit code.

    Our errors carry their message and exit code; a failing database, a file that cannot be
    opened and the index or embedder are described with what to do. Anything else is a bug:
    one line too. The traceback is logged only at ``--log-level debug``.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            # `secretary export | head`: the reader left; nothing more to say to it.
            sys.stderr.close()
            ctx.exit(1)
        except Exception as exc:  # noqa: BLE001 - the CLI's boundary: every failure, one message
            message, code = describe_failure(exc, ctx.find_object(Context))
            _log_traceback(ctx, exc)
            click.echo(f"error: {message}", err=True)
            ctx.exit(code)


def describe_failure(exc: Exception, context: Context | None) -> tuple[str, int]:
    """Given what a command raised, return the message to print and the exit code."""
    settings = context._settings if context is not None else None
    if isinstance(exc, SecretaryError):
        return str(exc) + _index_hint(exc, settings), exc.exit_code
    db = sys.modules.get("store.db")  # loaded if the command reached the database
    if db is not None and isinstance(exc, db.DatabaseError):
        url = settings.database_url if settings is not None else "sqlite://"
        return str(db.describe_database_error(exc, url)), 1
    if isinstance(exc, PermissionError):
        return (
            f"permission denied: {exc.filename}: run secretary as the user who owns it "
            "(the service's user for the daemon's store), or choose another --data-dir",
            1,
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}", 1
    if _is(exc, "store.vector.embedder", "EmbedderError"):
        return f"the embedder failed: {exc} (check the [index] embedder options)", 1
    return (
        f"unexpected {type(exc).__name__}: {exc} (a bug: --log-level debug shows the traceback)",
        1,
    )


def _is(exc: Exception, module: str, name: str) -> bool:
    """Tell whether ``exc`` is a ``module.name``, without importing a module not yet loaded
    (then it cannot have raised it)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, getattr(loaded, name))


def _index_hint(exc: SecretaryError, settings: Settings | None) -> str:
    url = settings.index.chroma_url if settings is not None else ""
    if url and "cannot reach" in str(exc) and _is(exc, "store.vector.index", "VectorIndexError"):
        return (
            f"\nis a Chroma server running at {url}? Start one (`chroma run --path DIR "
            "--port PORT`) or fix index.chroma_url (SECRETARY_INDEX_CHROMA_URL)"
        )
    return ""


def _log_traceback(ctx: click.Context, exc: Exception) -> None:
    level = str(ctx.params.get("log_level", "INFO")).upper()
    if level in {"DEBUG", "TRACE"}:
        logger.opt(exception=exc).debug("the command failed")


def _unicode(
    _ctx: click.Context | None,
    _param: click.Parameter | None,
    value: str | None,
    *,
    hint: str | None = None,
) -> str | None:
    """Refuse an argument holding a lone surrogate (a byte that is not UTF-8), which no
    database could store, as a usage error naming the option."""
    problem = lone_surrogate(value) if value is not None else None
    if problem is not None:
        raise click.BadParameter(problem, param_hint=hint)
    return value


def _bind_host(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_host(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def host_option(help: str) -> Callable[[F], F]:
    """``--host``: an IP address or a host name to bind (checked as ``api.host`` is)."""
    return click.option("--host", callback=_bind_host, help=help)


def port_option(help: str) -> Callable[[F], F]:
    """``--port``: a TCP port, 1-65535 (a usage error otherwise, as for ``api.port``)."""
    return click.option("--port", type=click.IntRange(1, 65535), help=help)


pass_context = click.make_pass_decorator(Context)
namespace_option = click.option(
    "--namespace",
    "-n",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    envvar="SECRETARY_NAMESPACE",
    callback=_unicode,
    help="Namespace (one agent's or user's memories).",
)


@contextmanager
def _store(ctx: Context, *, create: bool = False, namespace: str | None = None) -> Iterator[Any]:
    """Open the store; without ``create`` it must exist (StoreMissing names the directory and
    `secretary init`), and ``namespace``, if given, must hold something (UnknownNamespace)."""
    from store.service import Store

    if namespace is not None:  # from any command's --namespace, not only namespace_option's
        _unicode(None, None, namespace, hint="'--namespace'")
    store = Store.open(ctx.settings, create=create)
    try:
        if namespace is not None:
            require_namespace(store, namespace)
        yield store
    finally:
        store.close()


def require_namespace(store: Any, namespace: str) -> None:
    """Raise UnknownNamespace unless ``namespace`` holds memories, logs or records."""
    known = store.db.work.namespaces_with_work()
    if namespace in known or store.db.records.find(namespaces=(namespace,), limit=1):
        return
    raise UnknownNamespace(namespace, known)


def _sync(store: Any, *, strict: bool = False, quiet: bool = False) -> None:
    """Apply the pending outbox now. After a write (not ``strict``) an index that cannot be
    reached only warns: the change is stored, and the next sync, daemon or serve indexes it."""
    pending = store.db.work.outbox_size()
    if not pending:
        return
    try:
        with progress("indexing", pending) as bar:
            done = store.indexer.sync(progress=bar.advance)
    except SecretaryError as exc:
        if strict or not _index_failure(exc):
            raise
        click.echo(
            f"warning: done, but {pending} change(s) wait for the vector index ({exc}): "
            "`secretary index sync`, the daemon or `secretary serve` applies them",
            err=True,
        )
        return
    if not quiet:
        click.echo(f"indexed {done} changes")


def _index_failure(exc: Exception) -> bool:
    """Tell whether ``exc`` is the vector index or its embedder failing (SQL is fine)."""
    return _is(exc, "store.vector.chroma", "VectorIndexError") or _is(
        exc, "store.vector.embedder", "EmbedderError"
    )


def hint_types(store: Any, namespace: str, types: Sequence[str]) -> None:
    """Say on stderr which type was meant by a --type no memory of the namespace has, when it
    is close to a known one. A hint, not a refusal: the type column is open."""
    if not types:
        return
    from difflib import get_close_matches

    from store.kinds import MemoryType

    present = set(store.db.memories.types(namespace))
    for wanted in dict.fromkeys(types):
        if wanted in present:
            continue
        known = sorted((present | {kind.value for kind in MemoryType}) - {wanted})
        close = get_close_matches(wanted, known, n=1)
        if close:
            click.echo(f"note: no memory has type {wanted!r}; did you mean {close[0]!r}?", err=True)
