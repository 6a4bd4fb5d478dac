//! `statement_timeout` for in-process sessions (`Session::execute`, no
//! server and no timer of the caller's): set with PostgreSQL's units, it
//! stops a long query while it runs on the scheduler with SQLSTATE 57014,
//! and the session stays usable. (Over the wire: `tests/server.rs`.)

use std::time::{Duration, Instant};

use stride_server::sqlstate;
use stride_sql::{Session, SqlError, StatementOutput};

mod common;

/// Runs for minutes unless stopped: ~500 million joined rows at SF 0.01.
const ENDLESS: &str =
    "select count(*) from lineitem a join lineitem b on a.l_linenumber = b.l_linenumber";

fn session() -> Session {
    let engine = common::test_engine(2);
    let schema = engine.load_tpch(0.01).unwrap();
    let mut s = engine.session();
    s.set_default_schema(&schema).unwrap();
    s
}

fn show(s: &mut Session, name: &str) -> String {
    let mut out = s.execute(&format!("show {name}")).unwrap();
    let Some(StatementOutput::Query(q)) = out.pop() else {
        panic!("SHOW returned no rows");
    };
    common::rows_as_text(&q.batches)[0][0].clone()
}

#[test]
fn a_timeout_with_units_stops_a_running_query_in_process() {
    let mut s = session();
    for (given, ms) in [("'60s'", "60000"), ("'1min'", "60000"), ("'500ms'", "500")] {
        s.execute(&format!("set statement_timeout = {given}"))
            .unwrap();
        assert_eq!(show(&mut s, "statement_timeout"), ms, "{given}");
    }
    s.execute("set statement_timeout = '300ms'").unwrap();
    let start = Instant::now();
    let err = s.query(ENDLESS).expect_err("timed out");
    let took = start.elapsed();
    assert!(matches!(err, SqlError::Timeout), "{err}");
    assert_eq!(sqlstate::of(&err), sqlstate::QUERY_CANCELED);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(20), "stopped late: {took:?}");
    // Short statements run; with the timeout off the session is as before.
    assert_eq!(
        s.query("select count(*) from nation").unwrap().num_rows(),
        1
    );
    s.execute("set statement_timeout = 0").unwrap();
    let q = s.query("select count(*) from nation").unwrap();
    assert_eq!(common::rows_as_text(&q.batches), [["25"]]);
}
