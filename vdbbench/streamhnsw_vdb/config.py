"""Connection and index settings of the streamhnsw client.

StreamHNSWConfig says where the server is; StreamHNSWIndexConfig says how the
index is built and searched.  The names follow VectorDBBench's pgvector
client (m, ef_construction, ef_search, iterative_scan, maintenance_work_mem,
max_parallel_workers) so that the two can be run with the same numbers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, SecretStr
from vectordb_bench.backend.clients.api import DBCaseConfig, DBConfig, MetricType


class StreamHNSWConfig(DBConfig):
    """Where to connect.  `host` may be a Unix socket directory; `password`
    may be left out where the server trusts local connections."""

    user_name: SecretStr = SecretStr("postgres")
    password: SecretStr | None = None
    host: str = "localhost"
    port: int = 5432
    db_name: str = "postgres"
    table_name: str = "vdbbench_streamhnsw"

    def to_dict(self) -> dict:
        connect = {
            "host": self.host,
            "port": self.port,
            "dbname": self.db_name,
            "user": self.user_name.get_secret_value(),
        }
        if self.password is not None and self.password.get_secret_value():
            connect["password"] = self.password.get_secret_value()
        return {"connect_config": connect, "table_name": self.table_name}


# operator class per stored type and metric, as the extension names them
_OPCLASSES = {
    "vector": {MetricType.L2: "vector_l2_ops", MetricType.IP: "vector_ip_ops",
               MetricType.COSINE: "vector_cosine_ops"},
    "halfvec": {MetricType.L2: "halfvec_l2_ops", MetricType.IP: "halfvec_ip_ops",
                MetricType.COSINE: "halfvec_cosine_ops"},
}
_OPERATORS = {MetricType.L2: "<->", MetricType.IP: "<#>", MetricType.COSINE: "<=>"}


class StreamHNSWIndexConfig(BaseModel, DBCaseConfig):
    """How the index is built and searched.

    m, ef_construction and ef_search are the index's own options (WITH ...);
    a value left at None keeps the access method's default.  ef_search is
    also set as streamhnsw.ef_search in every search session, so that a
    search-only run (--skip-load) with another ef_search searches with it
    rather than with the value stored in the index.

    iterative_scan and max_scan_tuples apply to filtered searches, where
    rows the WHERE clause rejects make the scan look further; the default
    relaxed_order is what VectorDBBench's pgvector client sets for hnsw.

    quantization_type "halfvec" indexes the column cast to halfvec (an
    expression index) and searches with the query cast the same way.
    """

    metric_type: MetricType | None = None
    m: int | None = None
    ef_construction: int | None = None
    ef_search: int | None = None
    iterative_scan: str | None = "relaxed_order"
    max_scan_tuples: int | None = None
    quantization_type: str = "vector"
    maintenance_work_mem: str | None = None
    max_parallel_workers: int | None = None
    create_index_before_load: bool = False
    create_index_after_load: bool = True

    def opclass(self) -> str:
        if self.quantization_type not in _OPCLASSES:
            msg = f"streamhnsw: quantization_type must be vector or halfvec, not {self.quantization_type!r}"
            raise ValueError(msg)
        if self.metric_type not in _OPERATORS:
            msg = f"streamhnsw supports L2, IP and COSINE, not {self.metric_type}"
            raise ValueError(msg)
        return _OPCLASSES[self.quantization_type][self.metric_type]

    def index_param(self) -> dict[str, Any]:
        options = {"m": self.m, "ef_construction": self.ef_construction, "ef_search": self.ef_search}
        return {
            "opclass": self.opclass(),
            "quantization_type": self.quantization_type,
            "with_options": {k: v for k, v in options.items() if v is not None},
            "maintenance_work_mem": self.maintenance_work_mem,
            "max_parallel_workers": self.max_parallel_workers,
        }

    def search_param(self) -> dict[str, Any]:
        return {"metric_fun_op": _OPERATORS[self.metric_type]}

    def session_param(self) -> dict[str, str]:
        settings = {
            "streamhnsw.ef_search": self.ef_search,
            "streamhnsw.iterative_scan": self.iterative_scan,
            "streamhnsw.max_scan_tuples": self.max_scan_tuples,
        }
        return {k: str(v) for k, v in settings.items() if v is not None}
