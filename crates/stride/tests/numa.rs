//! Placements and affinities end to end, on a synthetic two-node topology
//! (logical nodes: this machine has one): answers do not change, and
//! `stride.numa` counts where the morsels lived — Bound all local, OS both
//! local and remote, Target stealing only what its own node lacked.

mod common;

use std::sync::Arc;

use stride_sql::{Engine, EngineConfig, Session, StatementOutput};

fn engine() -> Arc<Engine> {
    let engine = Engine::new(EngineConfig {
        scheduler: stride_sched::SchedulerConfig {
            workers: 2,
            pin_workers: false,
            topology: Arc::new(
                stride_sched::Topology::from_spec("nodes=2,cores-per-node=1").unwrap(),
            ),
            morsels: stride_sched::MorselPolicy::Fixed(500),
            ..Default::default()
        },
        ..Default::default()
    });
    engine.load_tpch(0.01).expect("generate TPC-H SF 0.01");
    engine.set_default_schema("sf0_01").unwrap();
    engine
}

fn rows(session: &mut Session, sql: &str) -> Vec<Vec<String>> {
    match session.execute(sql).unwrap().pop() {
        Some(StatementOutput::Query(q)) => common::rows_as_text(&q.batches),
        other => panic!("{sql}: {other:?}"),
    }
}

/// (local, remote, stolen) morsels over every node so far.
fn places(session: &mut Session) -> [i64; 3] {
    let r = rows(
        session,
        "select sum(local_morsels), sum(remote_morsels), sum(stolen_morsels) from stride.numa",
    );
    [0, 1, 2].map(|i| r[0][i].parse().unwrap())
}

const QUERY: &str = "select l_returnflag, count(*), sum(l_quantity) from lineitem \
                     group by l_returnflag order by l_returnflag";

#[test]
fn every_placement_and_affinity_gives_the_same_answer_and_counts_its_morsels() {
    let engine = engine();
    let mut s = engine.session();
    let expected = rows(&mut s, QUERY);
    for placement in ["first-touch", "interleave", "rr", "pp", "pax"] {
        for affinity in ["os", "target", "bound", "auto"] {
            s.execute(&format!("set stride.placement = '{placement}'"))
                .unwrap();
            s.execute(&format!("set stride.affinity = {affinity}"))
                .unwrap();
            let before = places(&mut s);
            assert_eq!(rows(&mut s, QUERY), expected, "{placement} {affinity}");
            let after = places(&mut s);
            let [local, remote, stolen] = [0, 1, 2].map(|i| after[i] - before[i]);
            assert!(
                local + remote + stolen > 0,
                "{placement} {affinity}: counted"
            );
            match (placement, affinity) {
                ("interleave", _) => assert_eq!(local, 0, "spread over both nodes"),
                ("pp", "bound") => assert_eq!((remote, stolen), (0, 0), "all local"),
                ("pp", "os") => assert!(local > 0 && remote > 0, "about half local"),
                (_, "os") => assert_eq!(stolen, 0),
                (_, "bound") => assert_eq!(remote, 0),
                _ => {}
            }
        }
    }
}

#[test]
fn a_limit_without_order_reads_the_first_rows_under_every_placement() {
    let engine = engine();
    let mut s = engine.session();
    let first = rows(
        &mut s,
        "select l_orderkey, l_linenumber from lineitem limit 5",
    );
    for placement in ["pp", "pax", "rr"] {
        s.execute(&format!("set stride.placement = {placement}"))
            .unwrap();
        s.execute("set stride.affinity = bound").unwrap();
        let got = rows(
            &mut s,
            "select l_orderkey, l_linenumber from lineitem limit 5",
        );
        assert_eq!(got, first, "{placement}");
    }
}

#[test]
fn placement_settings_are_checked_and_shown() {
    let engine = engine();
    let mut s = engine.session();
    let err = s.execute("set stride.placement = 'numa'").unwrap_err();
    assert!(err.to_string().contains("unknown placement"), "{err}");
    let err = s.execute("set stride.affinity = 'hard'").unwrap_err();
    assert!(err.to_string().contains("unknown affinity"), "{err}");
    assert_eq!(rows(&mut s, "show stride.placement"), [["default"]]);
    s.execute("set stride.placement = PP").unwrap();
    assert_eq!(rows(&mut s, "show stride.placement"), [["pp"]]);
    s.execute("set stride.placement = default").unwrap();
    assert_eq!(rows(&mut s, "show stride.placement"), [["default"]]);
    let nodes = rows(
        &mut s,
        "select node, topology, workers from stride.numa order by node",
    );
    assert_eq!(nodes, [["0", "synthetic", "1"], ["1", "synthetic", "1"]]);
}

#[test]
fn alter_table_places_a_tables_rows_on_its_nodes_and_scans_follow() {
    let engine = engine();
    let mut s = engine.session();
    let expected = rows(&mut s, QUERY);
    let err = s
        .execute("alter table lineitem set (placement = 'numa')")
        .unwrap_err();
    assert!(err.to_string().contains("unknown placement"), "{err}");
    s.execute("alter table lineitem set (placement = 'pp')")
        .unwrap();
    // Pages of every column on both (logical) nodes, about half each.
    let pages = rows(
        &mut s,
        "select \"column\", pages_per_node, logical, pages from stride.placement \
         where \"table\" = 'lineitem' order by \"column\"",
    );
    assert_eq!(pages.len(), 16, "one row per column");
    for r in &pages {
        let per_node: Vec<(usize, i64)> = r[1]
            .split(' ')
            .map(|p| {
                let (n, c) = p.split_once(':').unwrap();
                (n.parse().unwrap(), c.parse().unwrap())
            })
            .collect();
        assert_eq!(
            per_node.iter().map(|p| p.0).collect::<Vec<_>>(),
            [0, 1],
            "{r:?}"
        );
        let total: i64 = r[3].parse().unwrap();
        assert!(per_node.iter().all(|p| p.1 * 4 >= total), "{r:?}");
        assert_eq!(r[2], "true", "a synthetic topology's nodes are logical");
    }
    // The session's default placement is first-touch; the table's own
    // placement decides its scans: bound to their nodes, all local.
    s.execute("set stride.affinity = bound").unwrap();
    let before = places(&mut s);
    assert_eq!(rows(&mut s, QUERY), expected, "placed rows answer alike");
    let after = places(&mut s);
    assert!(after[0] > before[0]);
    assert_eq!(after[1] - before[1], 0, "no remote morsel");
    s.execute("alter table lineitem set (placement = default)")
        .unwrap();
    assert!(rows(&mut s, "select * from stride.placement").is_empty());
    assert_eq!(rows(&mut s, QUERY), expected);
}

#[test]
fn only_the_owner_places_a_table_and_a_rollback_forgets_the_placement() {
    let engine = engine();
    let mut admin = engine.session();
    admin
        .execute("create table owned as select * from nation; create role visitor login")
        .unwrap();
    admin
        .execute("grant usage on schema sf0_01 to visitor; grant select on owned to visitor")
        .unwrap();
    let mut visitor = engine.session_for("visitor");
    visitor.execute("set search_path = sf0_01").unwrap();
    let err = visitor
        .execute("alter table owned set (placement = 'pp')")
        .unwrap_err();
    assert!(err.to_string().contains("must be owner"), "{err}");
    // In a block: the placement is part of the transaction.
    admin.execute("begin").unwrap();
    admin
        .execute("alter table owned set (placement = 'pax')")
        .unwrap();
    assert_eq!(
        rows(
            &mut admin,
            "select count(*) from stride.placement where \"table\" = 'owned'"
        ),
        [["4"]],
        "the block sees its own placement, one row per column"
    );
    admin.execute("rollback").unwrap();
    assert!(rows(
        &mut admin,
        "select * from stride.placement where \"table\" = 'owned'"
    )
    .is_empty());
    let err = admin
        .execute("alter table owned set (placement = 'pp', fillfactor = 70)")
        .unwrap_err();
    assert!(err.to_string().contains("one placement"), "{err}");
    let err = admin
        .execute("alter table no_such_table set (placement = 'pp')")
        .unwrap_err();
    assert!(err.to_string().contains("no_such_table"), "{err}");
}
