"""The vectordbbench command line with the streamhnsw command added:
`python -m streamhnsw_vdb streamhnsw --help`."""

from vectordb_bench.cli.vectordbbench import cli

from .cli import StreamHNSW  # noqa: F401  (registers the command on cli)

if __name__ == "__main__":
    cli()
