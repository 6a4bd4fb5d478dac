//! Roles and privileges over the wire: a superuser creates roles, they
//! authenticate by SCRAM-SHA-256 with their own passwords, and every
//! statement is checked against the session's role (SELECT / INSERT grants,
//! table ownership, engine-wide settings and server files for superusers).
//! Failed logins do not tell an unknown role from a wrong password.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use stride_server::{Auth, ServerConfig};
use tokio_postgres::{Client, SimpleQueryMessage};

/// The bootstrap superuser `stride`'s password.
const ADMIN_PASSWORD: &str = "bootstrap secret";

struct Fixture {
    /// Password authentication, an import directory holding `ok.csv`.
    scram: SocketAddr,
    /// Trust (no password).
    trust: SocketAddr,
}

fn start(config: ServerConfig, import_dir: Option<std::path::PathBuf>) -> SocketAddr {
    let engine = common::test_engine(1);
    if let Some(dir) = import_dir {
        engine
            .runtime()
            .set_file_access(stride_sql::FileAccess::Under(dir));
    }
    common::client::serve(engine, config, 1)
}

fn servers() -> &'static Fixture {
    static SERVERS: OnceLock<Fixture> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let dir = common::scratch_dir("roles");
        std::fs::write(dir.join("ok.csv"), "a,b\n1,x\n2,y\n").unwrap();
        let listen = "127.0.0.1:0".parse().unwrap();
        let scram = start(
            ServerConfig {
                listen,
                auth: Auth::password(ADMIN_PASSWORD),
                ..Default::default()
            },
            Some(dir.canonicalize().unwrap()),
        );
        let trust = start(
            ServerConfig {
                listen,
                ..Default::default()
            },
            None,
        );
        Fixture { scram, trust }
    })
}

use common::client::connect_with_password as try_connect;

async fn connect(user: &str, password: &str) -> Client {
    try_connect(servers().scram, user, password)
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"))
}

async fn admin() -> Client {
    connect("stride", ADMIN_PASSWORD).await
}

/// The SQLSTATE and message of a failed connection.
async fn refused(addr: SocketAddr, user: &str, password: &str) -> (String, String) {
    let Err(err) = try_connect(addr, user, password).await else {
        panic!("{user} must be refused");
    };
    let db = err
        .as_db_error()
        .unwrap_or_else(|| panic!("{user}: no server error: {err}"));
    (db.code().code().to_string(), db.message().to_string())
}

async fn fails_with(client: &Client, sql: &str, sqlstate: &str) {
    let err = client
        .simple_query(sql)
        .await
        .expect_err("the statement must fail");
    assert_eq!(err.code().map(|c| c.code()), Some(sqlstate), "{sql}: {err}");
}

/// The first column of the first row, as text.
async fn value(client: &Client, sql: &str) -> String {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

use common::client::runtime;

#[test]
fn a_role_connects_with_its_password_and_is_checked_before_every_statement() {
    runtime().block_on(async {
        let admin = admin().await;
        admin
            .batch_execute(
                "create table facts (a bigint); insert into facts values (1), (2), (3); \
                 create role alice with login password 'alice secret'",
            )
            .await
            .unwrap();
        let alice = connect("alice", "alice secret").await;
        let who = alice
            .simple_query("select current_user, session_user")
            .await
            .unwrap();
        let SimpleQueryMessage::Row(row) = &who[1] else {
            panic!("{who:?}")
        };
        assert_eq!((row.get(0), row.get(1)), (Some("alice"), Some("alice")));
        assert_eq!(value(&alice, "show is_superuser").await, "off");

        // Not hers, not granted: no reading, no server files, no engine-wide
        // settings, no dropping, no roles.
        fails_with(&alice, "select count(*) from facts", "42501").await;
        fails_with(&alice, "select (select max(a) from facts)", "42501").await;
        fails_with(
            &alice,
            "create external table f stored as csv location 'ok.csv'",
            "42501",
        )
        .await;
        fails_with(&alice, "set stride.policy = 'fifo'", "42501").await;
        fails_with(&alice, "drop table facts", "42501").await;
        fails_with(&alice, "create role mallory superuser", "42501").await;
        fails_with(&alice, "grant select on facts to alice", "42501").await;
        // Session settings stay hers to set.
        alice
            .batch_execute("set stride.user_priority = 2")
            .await
            .unwrap();

        // A prepared statement is checked at every execution.
        let prepared = alice.prepare("select count(*) from facts").await.unwrap();
        let err = alice.query(&prepared, &[]).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err}");

        admin
            .batch_execute("grant select on facts to alice")
            .await
            .unwrap();
        assert_eq!(value(&alice, "select count(*) from facts").await, "3");
        let n: i64 = alice.query_one(&prepared, &[]).await.unwrap().get(0);
        assert_eq!(n, 3);
        // SELECT is not INSERT.
        fails_with(&alice, "insert into facts values (4)", "42501").await;
        admin
            .batch_execute("grant insert on table facts to alice")
            .await
            .unwrap();
        alice
            .batch_execute("insert into facts values (4)")
            .await
            .unwrap();

        admin
            .batch_execute("revoke all on facts from alice")
            .await
            .unwrap();
        fails_with(&alice, "select count(*) from facts", "42501").await;
        let err = alice.query(&prepared, &[]).await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err}");

        // Her own table (CREATE on schema public is everyone's).
        alice
            .batch_execute(
                "create table mine (x bigint); insert into mine values (7); \
                 grant select on mine to public",
            )
            .await
            .unwrap();
        assert_eq!(value(&alice, "select sum(x) from mine").await, "7");
        assert_eq!(
            value(
                &admin,
                "select owner from stride.table_privileges where table_name = 'mine'"
            )
            .await,
            "alice"
        );
        // A role that owns a table cannot be dropped.
        fails_with(&admin, "drop role alice", "2BP01").await;
        alice.batch_execute("drop table mine").await.unwrap();

        // The superuser may do what alice may not.
        admin
            .batch_execute(
                "create external table f stored as csv location 'ok.csv'; \
                 set stride.policy = 'srpt'; drop table f",
            )
            .await
            .unwrap();
        assert_eq!(value(&admin, "show is_superuser").await, "on");
        assert_eq!(
            value(
                &admin,
                "select rolname || ' ' || cast(rolsuper as varchar) || ' ' || \
                 cast(rolcanlogin as varchar) || ' ' || rolpassword \
                 from stride.roles where rolname = 'alice'"
            )
            .await,
            "alice false true ********"
        );
        // The query log never shows a password.
        assert_eq!(
            value(
                &admin,
                "select count(*) from stride.queries where query like '%alice' || ' secret%'"
            )
            .await,
            "0"
        );
    });
}

#[test]
fn failed_logins_do_not_tell_unknown_roles_from_wrong_passwords() {
    runtime().block_on(async {
        let admin = admin().await;
        admin
            .batch_execute(
                "create user bob password 'bob secret'; \
                 create role carol nologin password 'carol secret'; \
                 create role dave login",
            )
            .await
            .unwrap();
        let addr = servers().scram;
        connect("bob", "bob secret").await;
        let failed = |user: &str| {
            (
                "28P01".to_string(),
                format!("password authentication failed for user \"{user}\""),
            )
        };
        assert_eq!(refused(addr, "bob", "wrong").await, failed("bob"));
        assert_eq!(refused(addr, "nobody", "wrong").await, failed("nobody"));
        // A role without a password cannot log in by password.
        assert_eq!(refused(addr, "dave", "").await, failed("dave"));
        assert_eq!(refused(addr, "dave", "anything").await, failed("dave"));
        // NOLOGIN is told only to who proved the password.
        assert_eq!(refused(addr, "carol", "wrong").await, failed("carol"));
        let (code, message) = refused(addr, "carol", "carol secret").await;
        assert_eq!(code, "28000", "{message}");
        assert!(message.contains("not permitted to log in"), "{message}");
    });
}

#[test]
fn role_statements_answer_postgres_sqlstates() {
    runtime().block_on(async {
        let admin = admin().await;
        fails_with(&admin, "drop role ghost", "42704").await;
        admin
            .batch_execute("drop role if exists ghost; create role erin")
            .await
            .unwrap();
        fails_with(&admin, "create role erin", "42710").await;
        fails_with(&admin, "create user erin", "42710").await;
        fails_with(&admin, "grant select on nothing_here to erin", "42P01").await;
        fails_with(&admin, "grant usage on schema public to ghost", "42704").await;
        fails_with(&admin, "create role public", "42939").await;
        fails_with(&admin, "drop role stride", "55006").await;

        // A role may change its own password, nothing else of itself.
        admin
            .batch_execute("create role frank login password 'one'")
            .await
            .unwrap();
        let frank = connect("frank", "one").await;
        fails_with(&frank, "alter role frank superuser", "42501").await;
        fails_with(&frank, "alter role erin password 'x'", "42501").await;
        frank
            .batch_execute("alter role frank password 'two'")
            .await
            .unwrap();
        connect("frank", "two").await;
        let (code, _) = refused(servers().scram, "frank", "one").await;
        assert_eq!(code, "28P01");
        // psql's \password sends a verifier, not the password.
        let v = stride_sql::scram::Verifier::with_salt("three", b"0123456789abcdef", 4096);
        let text = v.to_pg_text();
        frank
            .batch_execute(&format!("alter user frank with password '{text}'"))
            .await
            .unwrap();
        connect("frank", "three").await;
        // NOLOGIN takes effect at the next connection; DROP ROLE goes.
        admin
            .batch_execute("alter role frank nologin")
            .await
            .unwrap();
        let (code, _) = refused(servers().scram, "frank", "three").await;
        assert_eq!(code, "28000");
        admin.batch_execute("drop role frank").await.unwrap();
        let (code, _) = refused(servers().scram, "frank", "three").await;
        assert_eq!(code, "28P01");
        // Sessions of a dropped role keep no privileges.
        fails_with(&frank, "create table t_frank (x bigint)", "42501").await;
    });
}

#[test]
fn trust_connects_roles_as_themselves_and_other_names_as_the_bootstrap_superuser() {
    runtime().block_on(async {
        let addr = servers().trust;
        let someone = common::client::connect(addr, "someone").await;
        assert_eq!(value(&someone, "show is_superuser").await, "on");
        assert_eq!(value(&someone, "select current_user").await, "stride");
        someone
            .batch_execute(
                "create table secrets (s varchar); create role gina login; \
                 create role hank nologin",
            )
            .await
            .unwrap();
        let gina = common::client::connect(addr, "gina").await;
        assert_eq!(value(&gina, "select current_user").await, "gina");
        fails_with(&gina, "select * from secrets", "42501").await;
        let (code, _) = refused(addr, "hank", "").await;
        assert_eq!(code, "28000");
    });
}

#[test]
fn other_roles_query_texts_are_hidden_from_non_superusers() {
    runtime().block_on(async {
        let admin = admin().await;
        admin
            .batch_execute(
                "create role quinn with login password 'quinn secret'; \
                 create role rosa with login password 'rosa secret'",
            )
            .await
            .unwrap();
        let quinn = connect("quinn", "quinn secret").await;
        let rosa = connect("rosa", "rosa secret").await;
        value(&quinn, "select 'quinn''s secret literal'").await;
        // A failed query's error text can hold data too.
        fails_with(&quinn, "select 1 / (length('boom') - 4)", "22012").await;
        value(&rosa, "select 'rosa''s own'").await;

        let texts = |rows: Vec<SimpleQueryMessage>| -> Vec<(String, String, String)> {
            rows.iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(r) => Some((
                        r.get(0).unwrap_or_default().to_string(),
                        r.get(1).unwrap_or_default().to_string(),
                        r.get(2).unwrap_or_default().to_string(),
                    )),
                    _ => None,
                })
                .collect()
        };
        let sql = "select usename, query, coalesce(error, '') from stride.queries \
                   where usename in ('quinn', 'rosa') order by query_id";
        let seen_by_rosa = texts(rosa.simple_query(sql).await.unwrap());
        let quinn_rows: Vec<_> = seen_by_rosa.iter().filter(|r| r.0 == "quinn").collect();
        assert_eq!(quinn_rows.len(), 2, "{seen_by_rosa:?}");
        for (_, query, error) in quinn_rows {
            assert_eq!(query, "<insufficient privilege>");
            assert!(
                error.is_empty() || error == "<insufficient privilege>",
                "{error}"
            );
        }
        // Whether some row of `user` holds `needle` in column `col` (1: the
        // query, 2: the error).
        let has = |rows: &[(String, String, String)], user: &str, col: usize, needle: &str| {
            rows.iter()
                .any(|r| r.0 == user && [&r.1, &r.2][col - 1].contains(needle))
        };
        assert!(
            has(&seen_by_rosa, "rosa", 1, "rosa''s own"),
            "{seen_by_rosa:?}"
        );
        // The superuser reads every text.
        let seen_by_admin = texts(admin.simple_query(sql).await.unwrap());
        assert!(
            has(&seen_by_admin, "quinn", 1, "quinn''s secret literal"),
            "{seen_by_admin:?}"
        );
        assert!(has(&seen_by_admin, "quinn", 2, "zero"), "{seen_by_admin:?}");
    });
}
