//! The allocation guard over the wire: with the counting allocator
//! installed (as the `stride` binary installs it), a query whose
//! allocations take the process past `stride.allocation_limit` fails alone
//! with 53200 — memory its operators never charge, here an expression's
//! strings over large morsels — while another client's queries go on; the
//! limit is a superuser's setting and `stride.memory` shows the guard.

mod common;

use stride_exec::alloc_guard::TrackingAllocator;
use tokio_postgres::Client;

#[global_allocator]
static GLOBAL: TrackingAllocator = TrackingAllocator(std::alloc::System);

/// Morsels of 4096 rows, so that one morsel's strings are tens of MB.
fn server() -> common::client::TestServer {
    common::client::tpch_server_morsels(
        stride_sched::MorselPolicy::Fixed(4096),
        1 << 30,
        256 << 20,
        common::scratch_dir("alloc-guard-test"),
        common::client::test_config(),
    )
}

async fn one_i64(client: &Client, sql: &str) -> Option<i64> {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Each of lineitem's 60 175 comments repeated 500 times: about 55 MB of
/// strings per 4096-row morsel, built and dropped inside one task, never
/// charged to the query's share.
const HEAVY: &str = "select max(length(repeat(l_comment, 500))) from lineitem";

#[test]
fn a_query_that_allocates_past_the_allocation_limit_fails_alone_with_53200() {
    let server = server();
    common::client::runtime().block_on(async {
        let admin = common::client::connect(server.addr, "stride").await;
        let other = common::client::connect(server.addr, "stride").await;
        let allocated = one_i64(&admin, "select allocated_bytes from stride.memory")
            .await
            .expect("the counting allocator is installed");
        assert!(
            allocated > 1 << 20,
            "SF 0.01 alone is megabytes: {allocated}"
        );

        // 32 MiB above what the process holds now.
        let limit_mb = allocated / (1 << 20) + 32;
        admin
            .simple_query(&format!("set stride.allocation_limit = '{limit_mb}MB'"))
            .await
            .unwrap();
        let shown: String = admin
            .query_one("show stride.allocation_limit", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(shown, format!("{limit_mb}MB"));

        // The other client's short queries run beside the heavy one.
        let short = async {
            let mut answers = 0;
            for _ in 0..20 {
                let n = one_i64(&other, "select count(*) from nation").await;
                assert_eq!(n, Some(25));
                answers += 1;
            }
            answers
        };
        let (heavy, answers) = tokio::join!(admin.simple_query(HEAVY), short);
        let err = heavy.expect_err("the heavy query passes the allocation limit");
        let db = err.as_db_error().expect("an error from the server");
        assert_eq!(db.code().code(), "53200", "{db}");
        assert!(
            db.message().contains("stride.allocation_limit"),
            "{}",
            db.message()
        );
        assert_eq!(answers, 20);

        let trips = one_i64(&admin, "select allocation_trips from stride.memory").await;
        assert!(trips >= Some(1), "{trips:?}");
        let limit = one_i64(&admin, "select allocation_limit_bytes from stride.memory").await;
        assert_eq!(limit, Some(limit_mb << 20));

        // The server goes on; without the limit the same query completes.
        assert_eq!(
            one_i64(&admin, "select count(*) from region").await,
            Some(5)
        );
        admin
            .simple_query("set stride.allocation_limit = 'unlimited'")
            .await
            .unwrap();
        let longest = one_i64(
            &admin,
            "select max(length(l_comment))::bigint from lineitem",
        )
        .await
        .unwrap();
        let heavy: i32 = admin.query_one(HEAVY, &[]).await.unwrap().get(0);
        assert_eq!(i64::from(heavy), longest * 500);
        let limit = one_i64(&admin, "select allocation_limit_bytes from stride.memory").await;
        assert_eq!(limit, None, "unlimited shows as NULL");
        common::client::back_to_baseline(&server.engine);
    });
}

#[test]
fn only_superusers_set_the_allocation_limit() {
    let server = server();
    common::client::runtime().block_on(async {
        let admin = common::client::connect(server.addr, "stride").await;
        admin
            .simple_query("create role guard_user login")
            .await
            .unwrap();
        let user = common::client::connect(server.addr, "guard_user").await;
        let err = user
            .simple_query("set stride.allocation_limit = '1GB'")
            .await
            .expect_err("not a superuser");
        assert_eq!(err.code().unwrap().code(), "42501");
        let err = admin
            .simple_query("set stride.allocation_limit = 'lots'")
            .await
            .expect_err("not a size");
        assert_eq!(err.code().unwrap().code(), "22023");
    });
}
