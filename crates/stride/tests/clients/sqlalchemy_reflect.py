"""SQLAlchemy as an application (or pandas through an engine) uses it:
create_engine, connect (which reads version(), current_schema(), SHOW
TRANSACTION ISOLATION LEVEL), reflection with inspect(), and a query;
then ORM models created with metadata.create_all (a primary key, a
unique varchar(n)), a duplicate refused with its constraint's name, the
keys reflected, a table loaded with autoload and pandas' read_sql_table.

    python3 sqlalchemy_reflect.py HOST PORT

Prints one line per probe for crates/stride/tests/catalogs.rs to check.

The engine has SQLAlchemy's defaults: on its first connection the psycopg
dialect looks up the hstore type inside a SAVEPOINT.
"""
import sys

import pandas as pd
from sqlalchemy import MetaData, String, Table, create_engine, exc, inspect, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

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


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    __table_args__ = {"schema": "sa_reflect"}
    # Stride has no sequences (SERIAL): keys are given by the application.
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    email: Mapped[str] = mapped_column(String(20), unique=True)
    name: Mapped[str] = mapped_column(String(40), nullable=True)


with engine.connect() as conn:
    conn.execute(text("create schema sa_reflect"))
    conn.commit()
Base.metadata.create_all(engine)
with Session(engine) as session:
    session.add_all([Customer(id=1, email="a@x.org", name="Ann"), Customer(id=2, email="b@x.org")])
    session.commit()
    session.add(Customer(id=3, email="a@x.org"))
    try:
        session.commit()
    except exc.IntegrityError as e:
        print("duplicate", e.orig.sqlstate, e.orig.diag.constraint_name)
        session.rollback()
    session.add(Customer(id=4, email="c" * 21))
    try:
        session.commit()
    except exc.DataError as e:
        print("too long", e.orig.sqlstate)
        session.rollback()
insp = inspect(engine)
print("pk", insp.get_pk_constraint("customers", schema="sa_reflect"))
print("unique", [(u["name"], u["column_names"]) for u in insp.get_unique_constraints("customers", schema="sa_reflect")])
print("indexes", [(i["name"], i["unique"], i["column_names"]) for i in insp.get_indexes("customers", schema="sa_reflect")])
loaded = Table("customers", MetaData(), autoload_with=engine, schema="sa_reflect")
print("autoload", [(c.name, str(c.type), c.primary_key) for c in loaded.columns])
df = pd.read_sql_table("customers", engine, schema="sa_reflect")
print("read_sql_table", df.sort_values("id").to_dict("list"))
with engine.connect() as conn:
    conn.execute(text("drop table sa_reflect.customers"))
    conn.execute(text("drop schema sa_reflect"))
    conn.commit()
