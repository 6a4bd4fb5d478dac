//! The built-in query workloads: the 22 TPC-H queries and the 13 SSB queries,
//! embedded from `queries/` at the repository root.

/// A named query.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
}

const TPCH: [(&str, &str); 22] = [
    ("q1", include_str!("../../../queries/tpch/q1.sql")),
    ("q2", include_str!("../../../queries/tpch/q2.sql")),
    ("q3", include_str!("../../../queries/tpch/q3.sql")),
    ("q4", include_str!("../../../queries/tpch/q4.sql")),
    ("q5", include_str!("../../../queries/tpch/q5.sql")),
    ("q6", include_str!("../../../queries/tpch/q6.sql")),
    ("q7", include_str!("../../../queries/tpch/q7.sql")),
    ("q8", include_str!("../../../queries/tpch/q8.sql")),
    ("q9", include_str!("../../../queries/tpch/q9.sql")),
    ("q10", include_str!("../../../queries/tpch/q10.sql")),
    ("q11", include_str!("../../../queries/tpch/q11.sql")),
    ("q12", include_str!("../../../queries/tpch/q12.sql")),
    ("q13", include_str!("../../../queries/tpch/q13.sql")),
    ("q14", include_str!("../../../queries/tpch/q14.sql")),
    ("q15", include_str!("../../../queries/tpch/q15.sql")),
    ("q16", include_str!("../../../queries/tpch/q16.sql")),
    ("q17", include_str!("../../../queries/tpch/q17.sql")),
    ("q18", include_str!("../../../queries/tpch/q18.sql")),
    ("q19", include_str!("../../../queries/tpch/q19.sql")),
    ("q20", include_str!("../../../queries/tpch/q20.sql")),
    ("q21", include_str!("../../../queries/tpch/q21.sql")),
    ("q22", include_str!("../../../queries/tpch/q22.sql")),
];

const SSB: [(&str, &str); 13] = [
    ("q1.1", include_str!("../../../queries/ssb/q1.1.sql")),
    ("q1.2", include_str!("../../../queries/ssb/q1.2.sql")),
    ("q1.3", include_str!("../../../queries/ssb/q1.3.sql")),
    ("q2.1", include_str!("../../../queries/ssb/q2.1.sql")),
    ("q2.2", include_str!("../../../queries/ssb/q2.2.sql")),
    ("q2.3", include_str!("../../../queries/ssb/q2.3.sql")),
    ("q3.1", include_str!("../../../queries/ssb/q3.1.sql")),
    ("q3.2", include_str!("../../../queries/ssb/q3.2.sql")),
    ("q3.3", include_str!("../../../queries/ssb/q3.3.sql")),
    ("q3.4", include_str!("../../../queries/ssb/q3.4.sql")),
    ("q4.1", include_str!("../../../queries/ssb/q4.1.sql")),
    ("q4.2", include_str!("../../../queries/ssb/q4.2.sql")),
    ("q4.3", include_str!("../../../queries/ssb/q4.3.sql")),
];

/// The 22 TPC-H queries with the specification's validation parameters; Q11's
/// FRACTION is set to 0.0001 / SF as the specification requires.
pub fn tpch(scale: f64) -> Vec<Query> {
    TPCH.iter()
        .map(|(name, sql)| {
            let mut sql = sql.to_string();
            if *name == "q11" {
                sql = sql.replace("0.0010000000", &format!("{:.10}", 0.0001 / scale));
            }
            Query {
                name: name.to_string(),
                sql,
            }
        })
        .collect()
}

/// The 13 SSB queries. The table `date` is quoted (`"date"`) because the
/// parser reserves the word.
pub fn ssb() -> Vec<Query> {
    SSB.iter()
        .map(|(name, sql)| Query {
            name: name.to_string(),
            sql: quote_date_table(sql),
        })
        .collect()
}

/// Quotes the table name `date` in an SSB query's FROM list.
fn quote_date_table(sql: &str) -> String {
    sql.replace("from date,", "from \"date\",")
        .replace(", date,", ", \"date\",")
        .replace(", date\n", ", \"date\"\n")
        .replace(", date where", ", \"date\" where")
}
