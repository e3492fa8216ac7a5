"""Schema migrations: they build exactly the models, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from store.db import (
    HEAD_REVISION,
    check_schema,
    current_revision,
    head_revision,
    make_engine,
    upgrade,
)
from store.errors import SchemaError
from store.models import Base


def test_migrations_match_models(engine: Engine) -> None:
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    assert current_revision(engine) == head_revision() == HEAD_REVISION


def test_serving_a_store_does_not_import_alembic(tmp_path: object) -> None:
    # Alembic costs ~9 MB per process; only `db upgrade` and `init` need it.
    code = (
        "import sys; from secretary.config import Settings; from store.service import Store;"
        f"Store.open(Settings(data_dir={str(tmp_path)!r})).close();"
        "print('alembic' in sys.modules)"
    )
    upgrade(make_engine(f"sqlite:///{tmp_path}/secretary.db"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_upgrade_twice_is_harmless(engine: Engine) -> None:
    upgrade(engine)
    check_schema(engine)


def test_check_schema_empty_database_says_how_to_fix(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/empty.db")
    with pytest.raises(SchemaError, match="secretary db upgrade"):
        check_schema(engine)
