"""``rootcause-reader``: read a task attempt's error files from the command line.

Exit codes: 0 when a result was read (the task failed or not; see ``is_error``), 2 on usage
errors (click's convention), 1 when the store cannot be read (permission, missing bucket, network
after retries) or anything else went wrong: then one line on stderr says what and where, never a
traceback (``-v`` logs details).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click

from backend_reader.reader import RemoteFileOutputReader
from backend_reader.render import print_table, table_console, to_json_dict, to_proto_bytes
from backend_reader.settings import DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_PAYLOAD_BYTES
from backend_reader.storage import ReaderError
from backend_reader.strategy import ErrorAggregationStrategy

EXIT_OK = 0
EXIT_STORAGE_ERROR = 1


def _parse_storage_options(values: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--storage-option")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


@click.group()
@click.option("--verbose", "-v", is_flag=True, help="Show the storage libraries' log messages.")
def main(verbose: bool) -> None:
    """Read the error files of a distributed Flyte task and report its root cause."""
    # gcsfs logs every exhausted retry with a traceback; the CLI reports errors itself in one line.
    if verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    else:
        logging.getLogger().addHandler(logging.NullHandler())


@main.command()
@click.argument("output_prefix")
@click.option("--raw-output-prefix", default=None, help="Also read <P>/errors/*.pb (the RFC's layout).")
@click.option(
    "--strategy",
    type=click.Choice([s.value for s in ErrorAggregationStrategy]),
    default=ErrorAggregationStrategy.EARLIEST.value,
    show_default=True,
    help="default: only error.pb; earliest: every error*.pb, root cause first.",
)
@click.option(
    "--expected-workers",
    type=click.IntRange(min=1),
    default=None,
    help="Wait until this many error files exist (or the settle timeout passes).",
)
@click.option(
    "--settle-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for --expected-workers files.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "proto"]),
    default="table",
    show_default=True,
    help="table for people, json for scripts, proto: serialized flyteidl ExecutionError on stdout.",
)
@click.option(
    "--max-payload-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_PAYLOAD_BYTES,
    show_default=True,
    help="Skip error files larger than this, before downloading them.",
)
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONCURRENCY,
    show_default=True,
    help="Requests in flight at once.",
)
@click.option(
    "--storage-option",
    "-o",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="fsspec storage option (VALUE parsed as JSON when it is JSON), e.g. -o endpoint_url=http://...",
)
def read(
    output_prefix: str,
    raw_output_prefix: str | None,
    strategy: str,
    expected_workers: int | None,
    settle_timeout: float,
    output_format: str,
    max_payload_bytes: int,
    max_concurrency: int,
    storage_options: tuple[str, ...],
) -> None:
    """Read the error files under OUTPUT_PREFIX (a gs://, s3:// URL or a local folder)."""
    reader = RemoteFileOutputReader(
        output_prefix,
        strategy=ErrorAggregationStrategy(strategy),
        raw_output_prefix=raw_output_prefix,
        max_payload_bytes=max_payload_bytes,
        storage_options=_parse_storage_options(storage_options),
        max_concurrency=max_concurrency,
        expected_workers=expected_workers,
        settle_timeout=settle_timeout,
    )
    try:
        # proto answers propeller's question only (the root cause), which needs far fewer downloads.
        result = reader.read_root_cause() if output_format == "proto" else reader.read_all()
    except ReaderError as error:
        click.echo(f"rootcause-reader: {error}", err=True)
        sys.exit(EXIT_STORAGE_ERROR)
    except Exception as error:  # a bug of ours or a library's: still one line, details with -v
        logging.getLogger(__name__).info("unexpected error", exc_info=True)
        click.echo(f"rootcause-reader: unexpected error ({type(error).__name__}): {error}", err=True)
        sys.exit(EXIT_STORAGE_ERROR)
    if output_format == "json":
        click.echo(json.dumps(to_json_dict(result), indent=2, ensure_ascii=False))
    elif output_format == "proto":
        sys.stdout.buffer.write(to_proto_bytes(result))
        sys.stdout.buffer.flush()
    else:
        print_table(result, table_console())
    sys.exit(EXIT_OK)
