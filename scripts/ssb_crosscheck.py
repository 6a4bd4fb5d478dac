#!/usr/bin/env python3
"""Cross-check of the 13 Star Schema Benchmark queries against DuckDB.

Stride generates the SSB data (`stride --ssb SF --seed 42 export`), DuckDB
reads the exported Parquet files and runs the queries of `queries/ssb/`, and
the answers are written as CSV (with a header row) to
`crates/stride/tests/ssb-answers/<query>.csv`, the expected results of
`crates/stride/tests/ssb.rs`.

Usage:
    pip install -r scripts/requirements.txt
    python3 scripts/ssb_crosscheck.py [--sf 0.1] [--seed 42] [--stride PATH]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import decimal
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ROOT / "queries" / "ssb"
ANSWERS = ROOT / "crates" / "stride" / "tests" / "ssb-answers"
TABLES = ["date", "customer", "supplier", "part", "lineorder"]


def default_stride() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    target = Path(target) if target else ROOT / "target"
    return target / "debug" / "stride"


def build_stride() -> None:
    """Builds the debug binary (a no-op when it is up to date)."""
    print("building stride (cargo build -p stride)", file=sys.stderr)
    subprocess.run(["cargo", "build", "-p", "stride"], cwd=ROOT, check=True)


def schema_name(sf: float, prefix: str = "ssb_") -> str:
    """The schema Stride loads a benchmark into: `<prefix>sf<SF>` with `.`
    replaced by `_` (`ssb_sf0_1`, `tpcds_sf0_01`)."""
    text = repr(float(sf))
    if text.endswith(".0"):
        text = text[:-2]
    return prefix + "sf" + text.replace(".", "_")


def binary_arguments(parser: argparse.ArgumentParser, answers: Path) -> None:
    """Adds --stride, --out and --keep (shared by the cross-check scripts)."""
    parser.add_argument("--stride", type=Path, help="stride binary (default: built with cargo into "
                        "$CARGO_TARGET_DIR/debug/stride or target/debug/stride)")
    parser.add_argument("--out", type=Path, default=answers, help=f"answer folder (default {answers})")
    parser.add_argument("--keep", type=Path, help="export the Parquet files here instead of a temporary folder")


def stride_binary(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The binary --stride names, else the debug build (built first)."""
    stride = args.stride
    if stride is None:
        build_stride()
        stride = default_stride()
    if not stride.is_file():
        parser.error(f"no stride binary at {stride}")
    return stride


def quote_date(sql: str) -> str:
    """Quotes the table name `date` (a type name in DuckDB)."""
    return re.sub(r'(?<!")\bdate\b(?!")', '"date"', sql)


def query_names() -> list[str]:
    def key(path: Path) -> tuple[int, ...]:
        return tuple(int(p) for p in path.stem[1:].split("."))

    return [p.stem for p in sorted(QUERIES.glob("q*.sql"), key=key)]


def cell(value: object) -> str:
    """Formats a value exactly: integers as integers, NULL as `NULL`."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def to_csv(columns: list[str], rows: list[tuple]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(v) for v in row])
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.1, help="SSB scale factor (default 0.1)")
    parser.add_argument("--seed", type=int, default=42, help="seed of Stride's SSB generator (default 42)")
    binary_arguments(parser, ANSWERS)
    args = parser.parse_args()
    stride = stride_binary(parser, args)

    print(f"duckdb {duckdb.__version__}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ssb_crosscheck_") as tmp:
        data_dir = args.keep if args.keep else Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [str(stride), "--ssb", repr(args.sf), "--seed", str(args.seed), "--no-pin",
             "export", "--dir", str(data_dir)],
            check=True,
        )
        folder = data_dir / schema_name(args.sf)
        con = duckdb.connect()
        for table in TABLES:
            path = folder / f"{table}.parquet"
            if not path.is_file():
                print(f"missing {path}", file=sys.stderr)
                return 1
            literal = str(path).replace("'", "''")
            con.execute(f'create view "{table}" as select * from read_parquet(\'{literal}\')')
            (count,) = con.execute(f'select count(*) from "{table}"').fetchone()
            print(f"{table}: {count} rows", file=sys.stderr)

        args.out.mkdir(parents=True, exist_ok=True)
        for name in query_names():
            sql = quote_date((QUERIES / f"{name}.sql").read_text())
            result = con.execute(sql)
            columns = [d[0] for d in result.description]
            rows = result.fetchall()
            (args.out / f"{name}.csv").write_text(to_csv(columns, rows))
            print(f"{name}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
