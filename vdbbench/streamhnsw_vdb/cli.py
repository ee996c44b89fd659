"""`streamhnsw` command of the vectordbbench CLI, beside `pgvectorhnsw`.

    python -m streamhnsw_vdb streamhnsw --host /tmp/sock --port 5432 --db-name postgres \
        --user-name postgres --m 16 --ef-construction 64 --ef-search 40 \
        --case-type PerformanceCustomDataset --custom-case-name ... (see --help)

Takes the same connection options as pgvectorhnsw and the same HNSW options
(--m, --ef-construction, --ef-search), so one set of arguments runs both.
"""

from __future__ import annotations

import os
from typing import Annotated, Unpack

import click
from pydantic import SecretStr
from vectordb_bench.cli.cli import (
    CommonTypedDict,
    HNSWFlavor1,
    cli,
    click_parameter_decorators_from_typed_dict,
    get_custom_case_config,
    run,
)

from . import member


class StreamHNSWTypedDict(CommonTypedDict, HNSWFlavor1):
    user_name: Annotated[str, click.option("--user-name", type=str, help="Db username", default="postgres")]
    password: Annotated[
        str,
        click.option(
            "--password",
            type=str,
            help="Postgres database password (none for trust or peer authentication)",
            default=lambda: os.environ.get("POSTGRES_PASSWORD", ""),
            show_default="$POSTGRES_PASSWORD",
        ),
    ]
    host: Annotated[str, click.option("--host", type=str, help="Db host or Unix socket directory", required=True)]
    port: Annotated[int, click.option("--port", type=int, help="Postgres database port", default=5432)]
    db_name: Annotated[str, click.option("--db-name", type=str, help="Db name", required=True)]
    iterative_scan: Annotated[
        str,
        click.option(
            "--iterative-scan",
            type=click.Choice(["strict_order", "relaxed_order"]),
            help="streamhnsw.iterative_scan for filtered searches",
            default="relaxed_order",
            show_default=True,
        ),
    ]
    max_scan_tuples: Annotated[
        int | None,
        click.option("--max-scan-tuples", type=int, help="streamhnsw.max_scan_tuples for filtered searches"),
    ]
    quantization_type: Annotated[
        str,
        click.option(
            "--quantization-type",
            type=click.Choice(["vector", "halfvec"]),
            help="index the column as it is, or cast to halfvec",
            default="vector",
            show_default=True,
        ),
    ]
    maintenance_work_mem: Annotated[
        str | None,
        click.option("--maintenance-work-mem", type=str, help="maintenance_work_mem for CREATE INDEX, e.g. '2GB'"),
    ]
    max_parallel_workers: Annotated[
        int | None,
        click.option("--max-parallel-workers", type=int, help="max_parallel_maintenance_workers for CREATE INDEX"),
    ]


@cli.command(name="streamhnsw")
@click_parameter_decorators_from_typed_dict(StreamHNSWTypedDict)
def StreamHNSW(**parameters: Unpack[StreamHNSWTypedDict]):
    from .config import StreamHNSWConfig, StreamHNSWIndexConfig

    parameters["custom_case"] = get_custom_case_config(parameters)
    run(
        db=member(),
        db_config=StreamHNSWConfig(
            db_label=parameters["db_label"],
            user_name=SecretStr(parameters["user_name"]),
            password=SecretStr(parameters["password"]),
            host=parameters["host"],
            port=parameters["port"],
            db_name=parameters["db_name"],
        ),
        db_case_config=StreamHNSWIndexConfig(
            m=parameters["m"],
            ef_construction=parameters["ef_construction"],
            ef_search=parameters["ef_search"],
            iterative_scan=parameters["iterative_scan"],
            max_scan_tuples=parameters["max_scan_tuples"],
            quantization_type=parameters["quantization_type"],
            maintenance_work_mem=parameters["maintenance_work_mem"],
            max_parallel_workers=parameters["max_parallel_workers"],
        ),
        **parameters,
    )
