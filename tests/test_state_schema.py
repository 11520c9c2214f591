"""recrawler.state.schema (the SQLAlchemy Core tables) describes exactly what the migrations build."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.defer import deferred_f_from_coro_f
from sqlalchemy import create_engine, inspect

from recrawler.state.schema import metadata
from recrawler.state.sqlite import SQLiteStateStore

if TYPE_CHECKING:
    from pathlib import Path


@deferred_f_from_coro_f
async def test_core_tables_match_the_migrated_sqlite_schema(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStateStore(str(db))
    await store.open()
    await store.close()
    engine = create_engine(f"sqlite:///{db}")
    try:
        found = inspect(engine)
        # the FTS5 keyword index (a virtual table and its shadow tables) is not a Core table
        tables = {t for t in found.get_table_names() if not t.startswith("chunks_fts")}
        assert tables == set(metadata.tables)
        for name, table in metadata.tables.items():
            columns = {c["name"]: c for c in found.get_columns(name)}
            assert list(columns) == [c.name for c in table.columns], name
            # SQLite reports primary-key columns as nullable (a rowid table's quirk): compare the rest
            for col in table.columns:
                if not col.primary_key:
                    assert columns[col.name]["nullable"] == col.nullable, (name, col.name)
            pk = found.get_pk_constraint(name)["constrained_columns"]
            assert pk == [c.name for c in table.primary_key.columns], name
            indexes = {i["name"]: i["column_names"] for i in found.get_indexes(name)}
            assert indexes == {i.name: [c.name for c in i.columns] for i in table.indexes}, name
    finally:
        engine.dispose()
