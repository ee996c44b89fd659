"""VectorDBBench client for streamhnsw, a PostgreSQL index access method.

The table, loading and search statements are those of VectorDBBench's
pgvector client, so that the two engines are measured on the same SQL:

    CREATE TABLE t (id bigint PRIMARY KEY, embedding vector(dim) [, label varchar(64)])
    COPY t FROM STDIN (FORMAT BINARY)
    CREATE INDEX ... USING streamhnsw (embedding vector_l2_ops) WITH (m = .., ef_construction = ..)
    SELECT id FROM t [WHERE id >= n | WHERE label = 'x'] ORDER BY embedding <-> $1 LIMIT $2

The search statement is prepared and exchanged in binary, as pgvector's
client does.  Each search process opens its own connection (init()), and
sets the session's streamhnsw settings there.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from contextlib import contextmanager
from copy import copy
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from vectordb_bench.backend.clients.api import VectorDB
from vectordb_bench.backend.filter import Filter, FilterOp, non_filter

from .config import StreamHNSWIndexConfig

log = logging.getLogger(__name__)


class StreamHNSW(VectorDB):
    """One table with one streamhnsw index on its embedding column."""

    # psycopg connections are not shared between search threads
    thread_safe: bool = False
    supported_filter_types: list[FilterOp] = [FilterOp.NonFilter, FilterOp.NumGE, FilterOp.StrEqual]

    def __init__(
        self,
        dim: int,
        db_config: dict,
        db_case_config: StreamHNSWIndexConfig,
        drop_old: bool = False,
        with_scalar_labels: bool = False,
        **kwargs: Any,
    ):
        self.name = "StreamHNSW"
        self.dim = dim
        self.case_config = db_case_config
        self.connect_config = db_config["connect_config"]
        self.table_name = db_config["table_name"]
        self.index_name = f"{self.table_name}_streamhnsw"
        self.with_scalar_labels = with_scalar_labels
        self.conn: psycopg.Connection | None = None
        self._search: sql.Composed | None = None

        if not (db_case_config.create_index_before_load or db_case_config.create_index_after_load):
            msg = f"{self.name}: set create_index_before_load or create_index_after_load"
            raise RuntimeError(msg)

        # vector's types and streamhnsw's operator classes; CASCADE brings pgvector
        with psycopg.connect(**self.connect_config, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS streamhnsw CASCADE")
        with self._connect() as conn:
            if drop_old:
                self._drop_table(conn)
                self._create_table(conn)
                if db_case_config.create_index_before_load:
                    self._create_index(conn)
            conn.commit()

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(**self.connect_config)
        register_vector(conn)
        return conn

    def copy_for_thread(self) -> StreamHNSW:
        # an open connection cannot be copied; init() opens one in the thread
        db = copy(self)
        db.conn = None
        return db

    @contextmanager
    def init(self) -> Generator[None, None, None]:
        """Open this process's connection and apply the session settings."""
        self.conn = self._connect()
        try:
            for name, value in self.case_config.session_param().items():
                self.conn.execute("SELECT set_config(%s, %s, false)", (name, value))
            self.conn.commit()
            yield
        finally:
            self.conn.close()
            self.conn = None

    # --- schema -------------------------------------------------------------

    def _drop_table(self, conn: psycopg.Connection) -> None:
        log.info("%s: drop table %s", self.name, self.table_name)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table_name)))

    def _create_table(self, conn: psycopg.Connection) -> None:
        label = sql.SQL(", label varchar(64)") if self.with_scalar_labels else sql.SQL("")
        conn.execute(
            sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, embedding vector({}){})").format(
                sql.Identifier(self.table_name), sql.Literal(self.dim), label
            )
        )
        # vectors stay in the heap page, as in pgvector's client
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE PLAIN").format(
                sql.Identifier(self.table_name)
            )
        )

    def _indexed_expr(self) -> sql.Composable:
        """The indexed expression, which the ORDER BY must repeat for the planner."""
        if self.case_config.quantization_type == "halfvec":
            return sql.SQL("(embedding::halfvec({}))").format(sql.Literal(self.dim))
        return sql.SQL("embedding")

    def _create_index(self, conn: psycopg.Connection) -> None:
        p = self.case_config.index_param()
        if p["maintenance_work_mem"] is not None:
            conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (p["maintenance_work_mem"],))
        if p["max_parallel_workers"] is not None:
            conn.execute(
                "SELECT set_config('max_parallel_maintenance_workers', %s, false)",
                (str(p["max_parallel_workers"]),),
            )
        with_clause = sql.SQL("")
        if p["with_options"]:
            with_clause = sql.SQL(" WITH ({})").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in p["with_options"].items()
                )
            )
        stmt = sql.SQL("CREATE INDEX {} ON {} USING streamhnsw ({} {}){}").format(
            sql.Identifier(self.index_name),
            sql.Identifier(self.table_name),
            self._indexed_expr(),
            sql.Identifier(p["opclass"]),
            with_clause,
        )
        log.info("%s: %s", self.name, stmt.as_string(conn))
        conn.execute(stmt)

    def optimize(self, data_size: int | None = None) -> None:
        """Build the index once the rows are loaded (create_index_after_load)."""
        if not self.case_config.create_index_after_load:
            return
        assert self.conn is not None, "init() first"
        self.conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(self.index_name)))
        self._create_index(self.conn)
        self.conn.commit()

    # --- load ---------------------------------------------------------------

    def insert_embeddings(
        self,
        embeddings: list[list[float]],
        metadata: list[int],
        labels_data: list[str] | None = None,
        **kwargs: Any,
    ) -> tuple[int, Exception | None]:
        assert self.conn is not None, "init() first"
        if self.with_scalar_labels and labels_data is None:
            return 0, ValueError("labels_data is required when the case has scalar labels")
        types = ["bigint", "vector", "varchar"] if self.with_scalar_labels else ["bigint", "vector"]
        try:
            stmt = sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(sql.Identifier(self.table_name))
            with self.conn.cursor() as cur, cur.copy(stmt) as cp:
                cp.set_types(types)
                for i, row_id in enumerate(metadata):
                    v = np.asarray(embeddings[i], dtype=np.float32)
                    if self.with_scalar_labels:
                        cp.write_row((int(row_id), v, labels_data[i]))
                    else:
                        cp.write_row((int(row_id), v))
            self.conn.commit()
        except Exception as e:  # the runner retries and reports the error
            self.conn.rollback()
            log.warning("%s: insert into %s failed: %s", self.name, self.table_name, e)
            return 0, e
        return len(metadata), None

    # --- search -------------------------------------------------------------

    def prepare_filter(self, filters: Filter) -> None:
        """Compose the search statement for this case's filter, once."""
        if filters.type == FilterOp.NonFilter:
            where = sql.SQL("")
        elif filters.type == FilterOp.NumGE:
            where = sql.SQL("WHERE id >= {}").format(sql.Literal(int(filters.int_value)))
        elif filters.type == FilterOp.StrEqual:
            where = sql.SQL("WHERE label = {}").format(sql.Literal(filters.label_value))
        else:
            msg = f"{self.name} does not support filter {filters}"
            raise ValueError(msg)
        query = sql.Placeholder()
        if self.case_config.quantization_type == "halfvec":
            query = sql.SQL("{}::halfvec({})").format(query, sql.Literal(self.dim))
        self._search = sql.SQL("SELECT id FROM {} {} ORDER BY {} {} {} LIMIT {}").format(
            sql.Identifier(self.table_name),
            where,
            self._indexed_expr(),
            sql.SQL(self.case_config.search_param()["metric_fun_op"]),
            query,
            sql.Placeholder(),
        )

    def search_embedding(self, query: list[float], k: int = 100, timeout: int | None = None, **kwargs: Any) -> list[int]:
        assert self.conn is not None, "init() first"
        if self._search is None:
            self.prepare_filter(non_filter)
        rows = self.conn.execute(
            self._search, (np.asarray(query, dtype=np.float32), k), prepare=True, binary=True
        ).fetchall()
        return [int(r[0]) for r in rows]
