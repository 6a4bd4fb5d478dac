"""SQLAlchemy as an application (or pandas through an engine) uses it:
create_engine, connect (which reads version(), current_schema(), SHOW
TRANSACTION ISOLATION LEVEL), reflection with inspect(), and a query.

    python3 sqlalchemy_reflect.py HOST PORT

Prints one line per probe for crates/stride/tests/catalogs.rs to check.

The engine has SQLAlchemy's defaults: on its first connection the psycopg
dialect looks up the hstore type inside a SAVEPOINT.
"""
import sys

from sqlalchemy import create_engine, inspect, text

host, port = sys.argv[1], sys.argv[2]
engine = create_engine(f"postgresql+psycopg://stride@{host}:{port}/stride")
with engine.connect() as conn:
    conn.execute(text("create schema sa_reflect"))
    conn.execute(
        text("create table sa_reflect.orders (id int not null, note varchar, total decimal(10,2))")
    )
    conn.execute(text("insert into sa_reflect.orders values (1, 'a', 2.50), (2, 'b', 4.00)"))
    conn.commit()
    print("version", ".".join(str(p) for p in conn.dialect.server_version_info))
    print("isolation", conn.get_isolation_level())
    insp = inspect(conn)
    print("tables", ",".join(insp.get_table_names(schema="sa_reflect")))
    for c in insp.get_columns("orders", schema="sa_reflect"):
        print("column", c["name"], c["type"], "null" if c["nullable"] else "not null")
    total = conn.execute(text("select sum(total) from sa_reflect.orders")).scalar()
    print("query", total)
    conn.execute(text("drop table sa_reflect.orders"))
    conn.execute(text("drop schema sa_reflect"))
    conn.commit()
