"""What every `secretary` command module shares: the context, error handling, store access."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from secretary.config import Settings, load_settings
from secretary.errors import SecretaryError
from secretary.progress import progress

DEFAULT_NAMESPACE = "default"


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


class _Group(click.Group):
    """Turns our errors into a clean message and exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SecretaryError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


pass_context = click.make_pass_decorator(Context)
namespace_option = click.option(
    "--namespace",
    "-n",
    default=DEFAULT_NAMESPACE,
    show_default=True,
    envvar="SECRETARY_NAMESPACE",
    help="Namespace (one agent's or user's memories).",
)


@contextmanager
def _store(ctx: Context, *, create: bool = False) -> Iterator[Any]:
    from store.service import Store

    store = Store.open(ctx.settings, create=create)
    try:
        yield store
    finally:
        store.close()


def _sync(store: Any) -> None:
    pending = store.repository.outbox_size()
    if pending:
        with progress("indexing", pending) as bar:
            done = store.indexer.sync(progress=bar.advance)
        click.echo(f"indexed {done} changes")
