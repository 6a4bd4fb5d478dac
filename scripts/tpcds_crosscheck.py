#!/usr/bin/env python3
"""Cross-check of the 99 TPC-DS queries against DuckDB.

Stride generates TPC-DS (`stride --tpcds SF export`, the `tpcdsgen` crate),
DuckDB reads the exported Parquet files and runs the queries of
`queries/tpcds/`, and each answer is written as CSV (with a header row) to
`--out` (default `crates/stride/tests/tpcds-answers/<query>.csv`, the expected
results of `crates/stride/tests/tpcds.rs` at SF 0.01). That test compares
Stride's answers with them; pointed at other answers it repeats the comparison
at another scale factor (see the README).

Usage:
    pip install -r scripts/requirements.txt
    python3 scripts/tpcds_crosscheck.py [--sf 0.01]            # write the answers
    python3 scripts/tpcds_crosscheck.py --sf 1 --out /tmp/tpcds-sf1    # SF 1 answers
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from ssb_crosscheck import ROOT, binary_arguments, schema_name, stride_binary, to_csv

QUERIES = ROOT / "queries" / "tpcds"
ANSWERS = ROOT / "crates" / "stride" / "tests" / "tpcds-answers"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.01, help="TPC-DS scale factor (default 0.01)")
    binary_arguments(parser, ANSWERS)
    args = parser.parse_args()
    stride = stride_binary(parser, args)

    print(f"duckdb {duckdb.__version__}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="tpcds_crosscheck_") as tmp:
        data_dir = args.keep if args.keep else Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(stride), "--tpcds", repr(args.sf), "--no-pin", "export", "--dir", str(data_dir)],
                       check=True, stdout=subprocess.DEVNULL)
        folder = data_dir / schema_name(args.sf, "tpcds_")
        con = duckdb.connect()
        for path in sorted(folder.glob("*.parquet")):
            literal = str(path).replace("'", "''")
            con.execute(f'create view "{path.stem}" as select * from read_parquet(\'{literal}\')')

        args.out.mkdir(parents=True, exist_ok=True)
        for path in sorted(QUERIES.glob("q*.sql")):
            name = path.stem
            sql = path.read_text()
            t = time.time()
            result = con.execute(sql)
            columns = [d[0] for d in result.description]
            text = to_csv(columns, result.fetchall())
            duck_s = time.time() - t
            (args.out / f"{name}.csv").write_text(text)
            print(f"{name}: {text.count(chr(10)) - 1} rows, DuckDB {duck_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
