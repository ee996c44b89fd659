"""streamhnsw for VectorDBBench (vectordb-bench 2.0.0).

VectorDBBench picks a client through a closed enum, DB, whose properties
init_cls, config_cls and case_config_cls map each member to its classes; it
has no plugin mechanism.  Importing this package adds a member
DB.StreamHNSW and teaches those three lookups about it, so that VectorDBBench's
own task and case runners (TaskConfig(db=DB.StreamHNSW, ...)) run this
client, and its result files go to results/StreamHNSW/ as any other client's.

Offered upstream, the registration disappears: config.py, client.py and
cli.py move to vectordb_bench/backend/clients/streamhnsw/, the enum gains
`StreamHNSW = "StreamHNSW"` with one branch in each of the three lookups, and
cli/vectordbbench.py adds the StreamHNSW command.

The benchmark runs each task in a spawned process.  The new member pickles
as a call to member() here, so unpickling a task in that process imports
this package, and so registers the member, before anything looks it up.
"""

from __future__ import annotations

from vectordb_bench.backend.clients import DB

NAME = "StreamHNSW"

__all__ = ["NAME", "member", "register"]


def member() -> DB:
    """DB.StreamHNSW, registering it first where needed."""
    register()
    return DB._value2member_map_[NAME]


def register() -> None:
    """Add DB.StreamHNSW and its three class lookups (idempotent)."""
    if NAME in DB._value2member_map_:
        return

    m = object.__new__(DB)
    m._name_ = NAME
    m._value_ = NAME
    m.__objclass__ = DB
    m.__reduce_ex__ = lambda proto: (member, ())
    DB._member_map_[NAME] = m
    DB._value2member_map_[NAME] = m
    DB._member_names_.append(NAME)
    type.__setattr__(DB, NAME, m)

    init_cls, config_cls, case_config_cls = DB.init_cls, DB.config_cls, DB.case_config_cls

    def _init_cls(self):
        if self is m:
            from .client import StreamHNSW

            return StreamHNSW
        return init_cls.fget(self)

    def _config_cls(self):
        if self is m:
            from .config import StreamHNSWConfig

            return StreamHNSWConfig
        return config_cls.fget(self)

    def _case_config_cls(self, index_type=None):
        if self is m:
            from .config import StreamHNSWIndexConfig

            return StreamHNSWIndexConfig
        return case_config_cls(self, index_type)

    type.__setattr__(DB, "init_cls", property(_init_cls, doc=init_cls.__doc__))
    type.__setattr__(DB, "config_cls", property(_config_cls, doc=config_cls.__doc__))
    type.__setattr__(DB, "case_config_cls", _case_config_cls)


register()
