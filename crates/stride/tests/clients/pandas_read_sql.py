"""pandas as an analyst uses it against Stride: read_sql through a
SQLAlchemy engine (with bound parameters and parsed dates), to_sql to
write a DataFrame back, and read_sql_query over a plain psycopg
connection. The engine runs with SQLAlchemy's defaults: psycopg's hstore
detection runs inside a SAVEPOINT.

read_sql_table, which reflects the table's keys first, is in
sqlalchemy_reflect.py.

    python3 pandas_read_sql.py HOST PORT

Prints one line per probe for crates/stride/tests/catalogs.rs to check.
"""
import sys
import warnings

import pandas as pd
import psycopg
from sqlalchemy import create_engine, text

host, port = sys.argv[1], sys.argv[2]
engine = create_engine(f"postgresql+psycopg://stride@{host}:{port}/stride")

with engine.begin() as conn:
    conn.execute(text("create schema pd_read"))
    conn.execute(
        text(
            "create table pd_read.sales (id int not null, region text, amount decimal(10,2),"
            " day date, ratio double precision)"
        )
    )
    conn.execute(
        text(
            "insert into pd_read.sales values (1, 'north', 10.50, '2024-01-02', 0.5),"
            " (2, 'south', 20.00, '2024-01-03', null), (3, 'north', 5.25, '2024-02-01', 1.5)"
        )
    )

df = pd.read_sql(
    text("select region, sum(amount) as total, count(*) as n from pd_read.sales"
         " where day >= :since group by region order by region"),
    engine,
    params={"since": "2024-01-01"},
)
print("grouped", df.to_dict("list"))
print("dtypes", ",".join(str(t) for t in df.dtypes))

df = pd.read_sql(text("select * from pd_read.sales order by id"), engine, parse_dates=["day"])
print("table", len(df), ",".join(df.columns), str(df["day"].dtype), df["ratio"].isna().sum())

written = pd.DataFrame({"k": [1, 2, 3], "label": ["a", "b", None], "v": [0.25, 0.5, 0.75]})
written.to_sql("written", engine, schema="pd_read", index=False)
back = pd.read_sql(text("select k, label, v from pd_read.written order by k"), engine)
print("to_sql", back.to_dict("list"))

with psycopg.connect(f"host={host} port={port} user=stride dbname=stride") as raw:
    with warnings.catch_warnings():
        # pandas warns that a DBAPI connection is not SQLAlchemy; that is the point.
        warnings.simplefilter("ignore", UserWarning)
        df = pd.read_sql_query("select id, ratio from pd_read.sales order by id", raw)
    print("psycopg", df["id"].tolist(), df["ratio"].tolist()[:1])

with engine.begin() as conn:
    conn.execute(text("drop table pd_read.written"))
    conn.execute(text("drop table pd_read.sales"))
    conn.execute(text("drop schema pd_read"))
