//! The built-in query workloads: the 22 TPC-H queries, the 13 SSB queries and
//! the 99 TPC-DS queries,
//! embedded from `queries/` at the repository root, with their validation
//! parameters or with substitution parameters drawn at random.
//!
//! The files in `queries/` hold each query with the specification's
//! *validation* parameters ([`tpch`], [`ssb`]). An *instance* of a query
//! ([`tpch_instance`], [`ssb_instance`]) has its substitution parameters
//! drawn from a seeded generator and written over the validation literals:
//!
//! * **TPC-H**: every parameter as the specification (clause 2.4.x.3) and its
//!   query generator `qgen` draw it, e.g. Q1's DELTA uniform in [60, 120],
//!   Q3's SEGMENT one of the 5 market segments and DATE a day of March 1995,
//!   Q6's DATE January 1 of a year in [1993, 1997], DISCOUNT in
//!   [0.02, 0.09] and QUANTITY in [24, 25]. Q11's FRACTION is not drawn: it
//!   is 0.0001 / SF in every instance, as the specification requires.
//! * **SSB**: the specification (O'Neil et al.) gives each query's literals
//!   but no generator. Instances vary each literal over the domain of the
//!   column it restricts while keeping the query's selectivity: a year in
//!   [1993, 1997] (ranges of years: starting in [1992, 1993], pairs: the
//!   first in [1992, 1997]), a month or week of such a year, a discount band
//!   `[D − 1, D + 1]` with D in [1, 9], a quantity band as wide as the
//!   validation one, any region, nation, city pair of one nation,
//!   manufacturer, category or brand (brand ranges of 8 brands with
//!   two-digit numbers, so that the range compares as text as it does as a
//!   number). See [`SSB_SPECS`] for each query's parameters.
//!
//! Substitution works on the validation text: each parameter names the
//! literal it replaces (e.g. `interval '90' day`), all parameters are
//! replaced in one pass (so swapping two values, as Q7's nations may, is
//! safe), and every literal must occur. Rendering the validation values
//! reproduces the files exactly (a unit test checks it for every query), so
//! the instances differ from the validation queries only in their literals.
//!
//! Benchmarks draw each submitted query's instance from a stream named by
//! [`instance_seed`] (a seed, a stream name, the schema, the query and the
//! occurrence number), so the `k`-th occurrence of a query in a stream is the
//! same instance in every run, under every policy and in every driver
//! (`stride bench instances` prints them for `scripts/peers.py`).

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};

/// A named query.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
    /// The substitution parameters the text was built with, in the
    /// specification's order (validation values for [`tpch`] and [`ssb`]).
    pub params: Vec<Param>,
}

/// One substitution parameter of a query instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The specification's name, e.g. `DELTA`, `SEGMENT`, `DATE`.
    pub name: &'static str,
    /// The value as the specification writes it (`1995-03-15`, `BUILDING`,
    /// `0.06`), without SQL quotes.
    pub value: String,
}

/// A benchmark and, for TPC-H, the scale factor its queries run at (Q11's
/// FRACTION depends on it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Workload {
    Tpch {
        scale: f64,
    },
    Ssb,
    /// TPC-DS: the 99 queries with the qualification parameters; instances
    /// are the same text (no parameter generator yet).
    Tpcds,
}

impl Workload {
    /// The queries with their validation parameters.
    pub fn queries(self) -> Vec<Query> {
        match self {
            Workload::Tpch { scale } => tpch(scale),
            Workload::Ssb => ssb(),
            Workload::Tpcds => tpcds(),
        }
    }

    /// An instance of query `name` with parameters drawn from `rng`; `None`
    /// when the benchmark has no such query.
    pub fn instance(self, name: &str, rng: &mut dyn RngCore) -> Option<Query> {
        match self {
            Workload::Tpch { scale } => tpch_instance(name, scale, rng),
            Workload::Ssb => ssb_instance(name, rng),
            Workload::Tpcds => tpcds().into_iter().find(|q| q.name == name),
        }
    }
}

/// The 22 TPC-H queries with the specification's validation parameters; Q11's
/// FRACTION is set to 0.0001 / SF as the specification requires.
pub fn tpch(scale: f64) -> Vec<Query> {
    TPCH_SPECS
        .iter()
        .map(|spec| {
            let values: Vec<String> = spec.validation.iter().map(|v| v.to_string()).collect();
            tpch_query(spec, values, scale)
        })
        .collect()
}

/// An instance of TPC-H query `name` (`q1` … `q22`) at scale factor `scale`,
/// its substitution parameters drawn from `rng` as the specification's
/// query generator draws them; `None` for an unknown name.
pub fn tpch_instance(name: &str, scale: f64, rng: &mut dyn RngCore) -> Option<Query> {
    let spec = TPCH_SPECS.iter().find(|s| s.name == name)?;
    let values = (spec.draw)(rng);
    Some(tpch_query(spec, values, scale))
}

/// The 13 SSB queries with the specification's parameters. The table `date`
/// is quoted (`"date"`) because the parser reserves the word.
pub fn ssb() -> Vec<Query> {
    SSB_SPECS
        .iter()
        .map(|spec| {
            let values: Vec<String> = spec.validation.iter().map(|v| v.to_string()).collect();
            ssb_query(spec, values)
        })
        .collect()
}

/// An instance of SSB query `name` (`q1.1` … `q4.3`) with its parameters
/// drawn from `rng` (domains in the module documentation); `None` for an
/// unknown name.
pub fn ssb_instance(name: &str, rng: &mut dyn RngCore) -> Option<Query> {
    let spec = SSB_SPECS.iter().find(|s| s.name == name)?;
    let values = (spec.draw)(rng);
    Some(ssb_query(spec, values))
}

/// The 99 TPC-DS queries (`q01` … `q99`) of `queries/tpcds/` with the
/// specification's qualification parameters, as DuckDB's tpcds extension
/// ships them.
pub fn tpcds() -> Vec<Query> {
    TPCDS_TEXTS
        .iter()
        .enumerate()
        .map(|(i, text)| Query {
            name: format!("q{:02}", i + 1),
            sql: text.to_string(),
            params: Vec::new(),
        })
        .collect()
}

macro_rules! tpcds_texts {
    ($($n:literal)*) => {
        [$(include_str!(concat!("../../../queries/tpcds/q", $n, ".sql"))),*]
    };
}

/// The texts of TPC-DS q01 … q99, in order.
const TPCDS_TEXTS: [&str; 99] = tpcds_texts!(
    "01" "02" "03" "04" "05" "06" "07" "08" "09" "10" "11" "12" "13" "14" "15" "16" "17" "18"
    "19" "20" "21" "22" "23" "24" "25" "26" "27" "28" "29" "30" "31" "32" "33" "34" "35" "36"
    "37" "38" "39" "40" "41" "42" "43" "44" "45" "46" "47" "48" "49" "50" "51" "52" "53" "54"
    "55" "56" "57" "58" "59" "60" "61" "62" "63" "64" "65" "66" "67" "68" "69" "70" "71" "72"
    "73" "74" "75" "76" "77" "78" "79" "80" "81" "82" "83" "84" "85" "86" "87" "88" "89" "90"
    "91" "92" "93" "94" "95" "96" "97" "98" "99"
);

/// The seed of one instance: the `k`-th draw of the stream named by `parts`
/// (e.g. `["arrivals", "sf0_1", "q3"]`) under the benchmark seed `seed`.
/// Stable across runs, platforms and Rust versions (FNV-1a over the parts,
/// then SplitMix64 finalization).
pub fn instance_seed(seed: u64, parts: &[&str], k: u64) -> u64 {
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
    }
    splitmix64(h ^ splitmix64(k))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One query's substitution parameters: their names, their validation
/// values (the literals `queries/` has), how they are drawn and how they are
/// written into the text.
struct Spec {
    name: &'static str,
    text: &'static str,
    params: &'static [&'static str],
    validation: &'static [&'static str],
    /// Draws one value per parameter.
    draw: fn(&mut dyn RngCore) -> Vec<String>,
    /// The replacements for the values: (literal of the validation text,
    /// its replacement).
    render: fn(&[String]) -> Vec<(&'static str, String)>,
}

fn tpch_query(spec: &Spec, values: Vec<String>, scale: f64) -> Query {
    let mut sql = substitute(spec.name, spec.text, &(spec.render)(&values));
    let mut params = named(spec, values);
    if spec.name == "q11" {
        let fraction = format!("{:.10}", 0.0001 / scale);
        sql = substitute(
            spec.name,
            &sql,
            &[(Q11_VALIDATION_FRACTION, fraction.clone())],
        );
        params.push(Param {
            name: "FRACTION",
            value: fraction,
        });
    }
    Query {
        name: spec.name.to_string(),
        sql,
        params,
    }
}

fn ssb_query(spec: &Spec, values: Vec<String>) -> Query {
    let sql = substitute(spec.name, spec.text, &(spec.render)(&values));
    Query {
        name: spec.name.to_string(),
        sql: quote_date_table(&sql),
        params: named(spec, values),
    }
}

fn named(spec: &Spec, values: Vec<String>) -> Vec<Param> {
    spec.params
        .iter()
        .zip(values)
        .map(|(&name, value)| Param { name, value })
        .collect()
}

/// Replaces every occurrence of each literal of `subs` in one left-to-right
/// pass (a replacement is never searched again).
///
/// # Panics
///
/// When a literal does not occur in `text`: the embedded queries and their
/// specs disagree, which the unit tests rule out for every query.
fn substitute(query: &str, text: &str, subs: &[(&'static str, String)]) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    let mut used = vec![false; subs.len()];
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match subs.iter().position(|(from, _)| rest.starts_with(from)) {
            Some(i) => {
                out.push_str(&subs[i].1);
                rest = &rest[subs[i].0.len()..];
                used[i] = true;
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if let Some(i) = used.iter().position(|u| !u) {
        panic!(
            "query {query}: the literal {:?} of a substitution parameter is not in its text",
            subs[i].0
        );
    }
    out
}

/// Quotes the table name `date` in an SSB query's FROM list.
fn quote_date_table(sql: &str) -> String {
    sql.replace("from date,", "from \"date\",")
        .replace(", date,", ", \"date\",")
        .replace(", date\n", ", \"date\"\n")
        .replace(", date where", ", \"date\" where")
}

// ---------------------------------------------------------------------------
// Value domains (TPC-H clause 4.2.2.13 and 4.2.3; SSB uses TPC-H's).
// ---------------------------------------------------------------------------

// The vocabulary TPC-H and SSB data are drawn from, shared with the SSB
// generator so that parameters always name values that exist.
use stride_storage::ssb::{
    COLORS, CONTAINER_KINDS as CONTAINER_SYLLABLE_2, CONTAINER_SIZES as CONTAINER_SYLLABLE_1,
    NATIONS, REGIONS, SEGMENTS, SHIP_MODES, TYPE_FINISHES as TYPE_SYLLABLE_2,
    TYPE_METALS as TYPE_SYLLABLE_3, TYPE_SIZES as TYPE_SYLLABLE_1,
};

/// Q13's two words (qgen's `q13a` and `q13b` distributions).
const Q13_WORD_1: [&str; 4] = ["special", "pending", "unusual", "express"];
const Q13_WORD_2: [&str; 4] = ["packages", "requests", "accounts", "deposits"];

/// The months as SSB's `d_yearmonth` abbreviates them (`Dec1997`).
const MONTH_ABBREVIATIONS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Q11's FRACTION in `queries/tpch/q11.sql` (0.0001 / SF at SF 0.1).
const Q11_VALIDATION_FRACTION: &str = "0.0010000000";

fn pick(rng: &mut dyn RngCore, list: &[&str]) -> String {
    list[rng.random_range(0..list.len())].to_string()
}

/// Two different elements of `list`, in draw order (qgen redraws the second
/// until it differs).
fn pick_two(rng: &mut dyn RngCore, list: &[&str]) -> (String, String) {
    let first = rng.random_range(0..list.len());
    let mut second = rng.random_range(0..list.len() - 1);
    if second >= first {
        second += 1;
    }
    (list[first].to_string(), list[second].to_string())
}

fn nation_names() -> Vec<&'static str> {
    NATIONS.iter().map(|(n, _)| *n).collect()
}

/// The region of a nation, by name.
fn region_of(nation: &str) -> &'static str {
    NATIONS
        .iter()
        .find(|(n, _)| *n == nation)
        .map_or(REGIONS[0], |&(_, r)| REGIONS[r])
}

/// `YYYY-MM-DD`.
fn date(year: u32, month: u32, day: u32) -> String {
    format!("{year:04}-{month:02}-{day:02}")
}

/// The first day of month `index` (0 = January 1993), as qgen counts months.
fn month_from_1993(index: u32) -> String {
    date(1993 + index / 12, index % 12 + 1, 1)
}

/// `Brand#MN`, M and N each uniform in [1, 5].
fn tpch_brand(rng: &mut dyn RngCore) -> String {
    format!(
        "Brand#{}{}",
        rng.random_range(1..=5u32),
        rng.random_range(1..=5u32)
    )
}

/// A full part type: one syllable of each list.
fn part_type(rng: &mut dyn RngCore) -> String {
    format!(
        "{} {} {}",
        pick(rng, &TYPE_SYLLABLE_1),
        pick(rng, &TYPE_SYLLABLE_2),
        pick(rng, &TYPE_SYLLABLE_3)
    )
}

/// `k` distinct values of `range`, in random order (qgen permutes the
/// domain and takes the first `k`).
fn distinct(rng: &mut dyn RngCore, range: std::ops::RangeInclusive<u32>, k: usize) -> Vec<String> {
    let mut all: Vec<u32> = range.collect();
    let (chosen, _) = all.partial_shuffle(rng, k);
    chosen.iter().map(u32::to_string).collect()
}

fn quoted(v: &str) -> String {
    format!("'{v}'")
}

fn sql_date(v: &str) -> String {
    format!("date '{v}'")
}

/// A parameter value that the parameter's own draw wrote as a number.
fn number(v: &str) -> i64 {
    v.parse().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// TPC-H (specification clause 2.4.1.3 … 2.4.22.3; qgen's varsub.c).
// ---------------------------------------------------------------------------

const TPCH_SPECS: [Spec; 22] = [
    Spec {
        name: "q1",
        text: include_str!("../../../queries/tpch/q1.sql"),
        params: &["DELTA"],
        validation: &["90"],
        draw: |rng| vec![rng.random_range(60..=120u32).to_string()],
        render: |v| vec![("interval '90' day", format!("interval '{}' day", v[0]))],
    },
    Spec {
        name: "q2",
        text: include_str!("../../../queries/tpch/q2.sql"),
        params: &["SIZE", "TYPE", "REGION"],
        validation: &["15", "BRASS", "EUROPE"],
        draw: |rng| {
            vec![
                rng.random_range(1..=50u32).to_string(),
                pick(rng, &TYPE_SYLLABLE_3),
                pick(rng, &REGIONS),
            ]
        },
        render: |v| {
            vec![
                ("p_size = 15", format!("p_size = {}", v[0])),
                ("'%BRASS'", format!("'%{}'", v[1])),
                ("'EUROPE'", quoted(&v[2])),
            ]
        },
    },
    Spec {
        name: "q3",
        text: include_str!("../../../queries/tpch/q3.sql"),
        params: &["SEGMENT", "DATE"],
        validation: &["BUILDING", "1995-03-15"],
        draw: |rng| {
            vec![
                pick(rng, &SEGMENTS),
                date(1995, 3, rng.random_range(1..=31u32)),
            ]
        },
        render: |v| {
            vec![
                ("'BUILDING'", quoted(&v[0])),
                ("date '1995-03-15'", sql_date(&v[1])),
            ]
        },
    },
    Spec {
        name: "q4",
        text: include_str!("../../../queries/tpch/q4.sql"),
        params: &["DATE"],
        validation: &["1993-07-01"],
        // The first day of a month from January 1993 to October 1997.
        draw: |rng| vec![month_from_1993(rng.random_range(0..=57u32))],
        render: |v| vec![("date '1993-07-01'", sql_date(&v[0]))],
    },
    Spec {
        name: "q5",
        text: include_str!("../../../queries/tpch/q5.sql"),
        params: &["REGION", "DATE"],
        validation: &["ASIA", "1994-01-01"],
        draw: |rng| {
            vec![
                pick(rng, &REGIONS),
                date(rng.random_range(1993..=1997u32), 1, 1),
            ]
        },
        render: |v| {
            vec![
                ("'ASIA'", quoted(&v[0])),
                ("date '1994-01-01'", sql_date(&v[1])),
            ]
        },
    },
    Spec {
        name: "q6",
        text: include_str!("../../../queries/tpch/q6.sql"),
        params: &["DATE", "DISCOUNT", "QUANTITY"],
        validation: &["1994-01-01", "0.06", "24"],
        draw: |rng| {
            vec![
                date(rng.random_range(1993..=1997u32), 1, 1),
                format!("0.{:02}", rng.random_range(2..=9u32)),
                rng.random_range(24..=25u32).to_string(),
            ]
        },
        render: |v| {
            // DISCOUNT ± 0.01, in hundredths so that the text is exact.
            let hundredths = number(v[1].trim_start_matches("0."));
            vec![
                ("date '1994-01-01'", sql_date(&v[0])),
                (
                    "between 0.05 and 0.07",
                    format!(
                        "between 0.{:02} and 0.{:02}",
                        hundredths - 1,
                        hundredths + 1
                    ),
                ),
                ("l_quantity < 24", format!("l_quantity < {}", v[2])),
            ]
        },
    },
    Spec {
        name: "q7",
        text: include_str!("../../../queries/tpch/q7.sql"),
        params: &["NATION1", "NATION2"],
        validation: &["FRANCE", "GERMANY"],
        draw: |rng| {
            let (a, b) = pick_two(rng, &nation_names());
            vec![a, b]
        },
        render: |v| vec![("'FRANCE'", quoted(&v[0])), ("'GERMANY'", quoted(&v[1]))],
    },
    Spec {
        name: "q8",
        text: include_str!("../../../queries/tpch/q8.sql"),
        params: &["NATION", "REGION", "TYPE"],
        validation: &["BRAZIL", "AMERICA", "ECONOMY ANODIZED STEEL"],
        // REGION is the region of NATION.
        draw: |rng| {
            let nation = pick(rng, &nation_names());
            let region = region_of(&nation).to_string();
            vec![nation, region, part_type(rng)]
        },
        render: |v| {
            vec![
                ("'BRAZIL'", quoted(&v[0])),
                ("'AMERICA'", quoted(&v[1])),
                ("'ECONOMY ANODIZED STEEL'", quoted(&v[2])),
            ]
        },
    },
    Spec {
        name: "q9",
        text: include_str!("../../../queries/tpch/q9.sql"),
        params: &["COLOR"],
        validation: &["green"],
        draw: |rng| vec![pick(rng, &COLORS)],
        render: |v| vec![("'%green%'", format!("'%{}%'", v[0]))],
    },
    Spec {
        name: "q10",
        text: include_str!("../../../queries/tpch/q10.sql"),
        params: &["DATE"],
        validation: &["1993-10-01"],
        // The first day of a month from February 1993 to January 1995.
        draw: |rng| vec![month_from_1993(rng.random_range(1..=24u32))],
        render: |v| vec![("date '1993-10-01'", sql_date(&v[0]))],
    },
    Spec {
        name: "q11",
        text: include_str!("../../../queries/tpch/q11.sql"),
        params: &["NATION"],
        validation: &["GERMANY"],
        draw: |rng| vec![pick(rng, &nation_names())],
        render: |v| vec![("'GERMANY'", quoted(&v[0]))],
    },
    Spec {
        name: "q12",
        text: include_str!("../../../queries/tpch/q12.sql"),
        params: &["SHIPMODE1", "SHIPMODE2", "DATE"],
        validation: &["MAIL", "SHIP", "1994-01-01"],
        draw: |rng| {
            let (a, b) = pick_two(rng, &SHIP_MODES);
            vec![a, b, date(rng.random_range(1993..=1997u32), 1, 1)]
        },
        render: |v| {
            vec![
                ("('MAIL', 'SHIP')", format!("('{}', '{}')", v[0], v[1])),
                ("date '1994-01-01'", sql_date(&v[2])),
            ]
        },
    },
    Spec {
        name: "q13",
        text: include_str!("../../../queries/tpch/q13.sql"),
        params: &["WORD1", "WORD2"],
        validation: &["special", "requests"],
        draw: |rng| vec![pick(rng, &Q13_WORD_1), pick(rng, &Q13_WORD_2)],
        render: |v| vec![("'%special%requests%'", format!("'%{}%{}%'", v[0], v[1]))],
    },
    Spec {
        name: "q14",
        text: include_str!("../../../queries/tpch/q14.sql"),
        params: &["DATE"],
        validation: &["1995-09-01"],
        // The first day of a month of 1993 to 1997.
        draw: |rng| vec![month_from_1993(rng.random_range(0..=59u32))],
        render: |v| vec![("date '1995-09-01'", sql_date(&v[0]))],
    },
    Spec {
        name: "q15",
        text: include_str!("../../../queries/tpch/q15.sql"),
        params: &["DATE"],
        validation: &["1996-01-01"],
        // The first day of a month from January 1993 to October 1997.
        draw: |rng| vec![month_from_1993(rng.random_range(0..=57u32))],
        render: |v| vec![("date '1996-01-01'", sql_date(&v[0]))],
    },
    Spec {
        name: "q16",
        text: include_str!("../../../queries/tpch/q16.sql"),
        params: &[
            "BRAND", "TYPE", "SIZE1", "SIZE2", "SIZE3", "SIZE4", "SIZE5", "SIZE6", "SIZE7", "SIZE8",
        ],
        validation: &[
            "Brand#45",
            "MEDIUM POLISHED",
            "49",
            "14",
            "23",
            "45",
            "19",
            "3",
            "36",
            "9",
        ],
        // TYPE: the first two syllables of a type; SIZE1..8: eight
        // different sizes in [1, 50].
        draw: |rng| {
            let mut v = vec![
                tpch_brand(rng),
                format!(
                    "{} {}",
                    pick(rng, &TYPE_SYLLABLE_1),
                    pick(rng, &TYPE_SYLLABLE_2)
                ),
            ];
            v.extend(distinct(rng, 1..=50, 8));
            v
        },
        render: |v| {
            vec![
                ("'Brand#45'", quoted(&v[0])),
                ("'MEDIUM POLISHED%'", format!("'{}%'", v[1])),
                (
                    "(49, 14, 23, 45, 19, 3, 36, 9)",
                    format!("({})", v[2..10].join(", ")),
                ),
            ]
        },
    },
    Spec {
        name: "q17",
        text: include_str!("../../../queries/tpch/q17.sql"),
        params: &["BRAND", "CONTAINER"],
        validation: &["Brand#23", "MED BOX"],
        draw: |rng| {
            let brand = tpch_brand(rng);
            let container = format!(
                "{} {}",
                pick(rng, &CONTAINER_SYLLABLE_1),
                pick(rng, &CONTAINER_SYLLABLE_2)
            );
            vec![brand, container]
        },
        render: |v| vec![("'Brand#23'", quoted(&v[0])), ("'MED BOX'", quoted(&v[1]))],
    },
    Spec {
        name: "q18",
        text: include_str!("../../../queries/tpch/q18.sql"),
        params: &["QUANTITY"],
        // The validation value lies outside the drawn domain (as in the
        // specification).
        validation: &["300"],
        draw: |rng| vec![rng.random_range(312..=315u32).to_string()],
        render: |v| {
            vec![(
                "sum(l_quantity) > 300",
                format!("sum(l_quantity) > {}", v[0]),
            )]
        },
    },
    Spec {
        name: "q19",
        text: include_str!("../../../queries/tpch/q19.sql"),
        params: &[
            "BRAND1",
            "BRAND2",
            "BRAND3",
            "QUANTITY1",
            "QUANTITY2",
            "QUANTITY3",
        ],
        validation: &["Brand#12", "Brand#23", "Brand#34", "1", "10", "20"],
        draw: |rng| {
            vec![
                tpch_brand(rng),
                tpch_brand(rng),
                tpch_brand(rng),
                rng.random_range(1..=10u32).to_string(),
                rng.random_range(10..=20u32).to_string(),
                rng.random_range(20..=30u32).to_string(),
            ]
        },
        // Each quantity band is [QUANTITYi, QUANTITYi + 10].
        render: |v| {
            let band = |q: &str| {
                let q = number(q);
                format!("l_quantity >= {q} and l_quantity <= {}", q + 10)
            };
            vec![
                ("'Brand#12'", quoted(&v[0])),
                ("'Brand#23'", quoted(&v[1])),
                ("'Brand#34'", quoted(&v[2])),
                ("l_quantity >= 1 and l_quantity <= 11", band(&v[3])),
                ("l_quantity >= 10 and l_quantity <= 20", band(&v[4])),
                ("l_quantity >= 20 and l_quantity <= 30", band(&v[5])),
            ]
        },
    },
    Spec {
        name: "q20",
        text: include_str!("../../../queries/tpch/q20.sql"),
        params: &["COLOR", "DATE", "NATION"],
        validation: &["forest", "1994-01-01", "CANADA"],
        draw: |rng| {
            vec![
                pick(rng, &COLORS),
                date(rng.random_range(1993..=1997u32), 1, 1),
                pick(rng, &nation_names()),
            ]
        },
        render: |v| {
            vec![
                ("'forest%'", format!("'{}%'", v[0])),
                ("date '1994-01-01'", sql_date(&v[1])),
                ("'CANADA'", quoted(&v[2])),
            ]
        },
    },
    Spec {
        name: "q21",
        text: include_str!("../../../queries/tpch/q21.sql"),
        params: &["NATION"],
        validation: &["SAUDI ARABIA"],
        draw: |rng| vec![pick(rng, &nation_names())],
        render: |v| vec![("'SAUDI ARABIA'", quoted(&v[0]))],
    },
    Spec {
        name: "q22",
        text: include_str!("../../../queries/tpch/q22.sql"),
        params: &["I1", "I2", "I3", "I4", "I5", "I6", "I7"],
        validation: &["13", "31", "23", "29", "30", "18", "17"],
        // Seven different country codes (10 + nation key).
        draw: |rng| distinct(rng, 10..=34, 7),
        render: |v| {
            let list: Vec<String> = v.iter().map(|c| quoted(c)).collect();
            vec![(
                "('13', '31', '23', '29', '30', '18', '17')",
                format!("({})", list.join(", ")),
            )]
        },
    },
];

// ---------------------------------------------------------------------------
// SSB (O'Neil, O'Neil, Chen, Revilak: Star Schema Benchmark, §3).
// ---------------------------------------------------------------------------

/// A year in [1993, 1997].
fn ssb_year(rng: &mut dyn RngCore) -> String {
    rng.random_range(1993..=1997u32).to_string()
}

/// The centre D of a discount band [D − 1, D + 1], D in [1, 9].
fn ssb_discount(rng: &mut dyn RngCore) -> String {
    rng.random_range(1..=9u32).to_string()
}

fn ssb_discount_band(from: &'static str, centre: &str) -> (&'static str, String) {
    let d = number(centre);
    (from, format!("lo_discount between {} and {}", d - 1, d + 1))
}

/// The lower end Q of a quantity band [Q, Q + 9], Q in [1, 41].
fn ssb_quantity_band(rng: &mut dyn RngCore) -> String {
    rng.random_range(1..=41u32).to_string()
}

fn ssb_quantity_render(low: &str) -> String {
    let q = number(low);
    format!("lo_quantity between {q} and {}", q + 9)
}

/// `MFGR#MC`: manufacturer M and category C each in [1, 5].
fn ssb_category(rng: &mut dyn RngCore) -> String {
    format!(
        "MFGR#{}{}",
        rng.random_range(1..=5u32),
        rng.random_range(1..=5u32)
    )
}

/// A city of `nation`: its first 9 characters padded to 9, then `digit`.
fn ssb_city(nation: &str, digit: u32) -> String {
    let prefix: String = nation.chars().take(9).collect();
    format!("{prefix:<9}{digit}")
}

/// Two different cities of one nation.
fn ssb_city_pair(rng: &mut dyn RngCore) -> (String, String) {
    let nation = pick(rng, &nation_names());
    let first = rng.random_range(0..10u32);
    let mut second = rng.random_range(0..9u32);
    if second >= first {
        second += 1;
    }
    (ssb_city(&nation, first), ssb_city(&nation, second))
}

/// The first of a range of six years, in [1992, 1993].
fn ssb_six_years(rng: &mut dyn RngCore) -> String {
    rng.random_range(1992..=1993u32).to_string()
}

fn ssb_six_years_render(from: &'static str, first: &str) -> (&'static str, String) {
    let y = number(first);
    (from, format!("d_year >= {y} and d_year <= {}", y + 5))
}

/// The first of two consecutive years, in [1992, 1997].
fn ssb_year_pair(rng: &mut dyn RngCore) -> String {
    rng.random_range(1992..=1997u32).to_string()
}

fn ssb_year_pair_render(first: &str) -> (&'static str, String) {
    let y = number(first);
    (
        "(d_year = 1997 or d_year = 1998)",
        format!("(d_year = {y} or d_year = {})", y + 1),
    )
}

/// Two different manufacturers `MFGR#1` … `MFGR#5`, the smaller first.
fn ssb_mfgr_pair(rng: &mut dyn RngCore) -> (String, String) {
    let a = rng.random_range(1..=5u32);
    let mut b = rng.random_range(1..=4u32);
    if b >= a {
        b += 1;
    }
    let (a, b) = (a.min(b), a.max(b));
    (format!("MFGR#{a}"), format!("MFGR#{b}"))
}

fn ssb_mfgr_render(v1: &str, v2: &str) -> (&'static str, String) {
    (
        "(p_mfgr = 'MFGR#1' or p_mfgr = 'MFGR#2')",
        format!("(p_mfgr = '{v1}' or p_mfgr = '{v2}')"),
    )
}

const SSB_SPECS: [Spec; 13] = [
    Spec {
        name: "q1.1",
        text: include_str!("../../../queries/ssb/q1.1.sql"),
        params: &["YEAR", "DISCOUNT", "QUANTITY"],
        validation: &["1993", "2", "25"],
        // QUANTITY: the bound of `lo_quantity < QUANTITY`, in [24, 26].
        draw: |rng| {
            vec![
                ssb_year(rng),
                ssb_discount(rng),
                rng.random_range(24..=26u32).to_string(),
            ]
        },
        render: |v| {
            vec![
                ("d_year = 1993", format!("d_year = {}", v[0])),
                ssb_discount_band("lo_discount between 1 and 3", &v[1]),
                ("lo_quantity < 25", format!("lo_quantity < {}", v[2])),
            ]
        },
    },
    Spec {
        name: "q1.2",
        text: include_str!("../../../queries/ssb/q1.2.sql"),
        params: &["YEARMONTHNUM", "DISCOUNT", "QUANTITY"],
        validation: &["199401", "5", "26"],
        draw: |rng| {
            vec![
                format!(
                    "{}{:02}",
                    rng.random_range(1993..=1997u32),
                    rng.random_range(1..=12u32)
                ),
                ssb_discount(rng),
                ssb_quantity_band(rng),
            ]
        },
        render: |v| {
            vec![
                (
                    "d_yearmonthnum = 199401",
                    format!("d_yearmonthnum = {}", v[0]),
                ),
                ssb_discount_band("lo_discount between 4 and 6", &v[1]),
                ("lo_quantity between 26 and 35", ssb_quantity_render(&v[2])),
            ]
        },
    },
    Spec {
        name: "q1.3",
        text: include_str!("../../../queries/ssb/q1.3.sql"),
        params: &["WEEK", "YEAR", "DISCOUNT", "QUANTITY"],
        validation: &["6", "1994", "6", "26"],
        draw: |rng| {
            vec![
                rng.random_range(1..=52u32).to_string(),
                ssb_year(rng),
                ssb_discount(rng),
                ssb_quantity_band(rng),
            ]
        },
        render: |v| {
            vec![
                ("d_weeknuminyear = 6", format!("d_weeknuminyear = {}", v[0])),
                ("d_year = 1994", format!("d_year = {}", v[1])),
                ssb_discount_band("lo_discount between 5 and 7", &v[2]),
                ("lo_quantity between 26 and 35", ssb_quantity_render(&v[3])),
            ]
        },
    },
    Spec {
        name: "q2.1",
        text: include_str!("../../../queries/ssb/q2.1.sql"),
        params: &["CATEGORY", "REGION"],
        validation: &["MFGR#12", "AMERICA"],
        draw: |rng| vec![ssb_category(rng), pick(rng, &REGIONS)],
        render: |v| vec![("'MFGR#12'", quoted(&v[0])), ("'AMERICA'", quoted(&v[1]))],
    },
    Spec {
        name: "q2.2",
        text: include_str!("../../../queries/ssb/q2.2.sql"),
        params: &["BRAND1", "BRAND2", "REGION"],
        validation: &["MFGR#2221", "MFGR#2228", "ASIA"],
        // Eight consecutive brands MFGR#MCB … MFGR#MC(B+7), B in [10, 33].
        draw: |rng| {
            let category = ssb_category(rng);
            let b = rng.random_range(10..=33u32);
            vec![
                format!("{category}{b}"),
                format!("{category}{}", b + 7),
                pick(rng, &REGIONS),
            ]
        },
        render: |v| {
            vec![
                ("'MFGR#2221'", quoted(&v[0])),
                ("'MFGR#2228'", quoted(&v[1])),
                ("'ASIA'", quoted(&v[2])),
            ]
        },
    },
    Spec {
        name: "q2.3",
        text: include_str!("../../../queries/ssb/q2.3.sql"),
        params: &["BRAND", "REGION"],
        validation: &["MFGR#2239", "EUROPE"],
        draw: |rng| {
            let category = ssb_category(rng);
            vec![
                format!("{category}{}", rng.random_range(1..=40u32)),
                pick(rng, &REGIONS),
            ]
        },
        render: |v| vec![("'MFGR#2239'", quoted(&v[0])), ("'EUROPE'", quoted(&v[1]))],
    },
    Spec {
        name: "q3.1",
        text: include_str!("../../../queries/ssb/q3.1.sql"),
        params: &["REGION", "YEAR"],
        validation: &["ASIA", "1992"],
        // Customers and suppliers of one region; six years from YEAR.
        draw: |rng| vec![pick(rng, &REGIONS), ssb_six_years(rng)],
        render: |v| {
            vec![
                ("'ASIA'", quoted(&v[0])),
                ssb_six_years_render("d_year >= 1992 and d_year <= 1997", &v[1]),
            ]
        },
    },
    Spec {
        name: "q3.2",
        text: include_str!("../../../queries/ssb/q3.2.sql"),
        params: &["NATION", "YEAR"],
        validation: &["UNITED STATES", "1992"],
        draw: |rng| vec![pick(rng, &nation_names()), ssb_six_years(rng)],
        render: |v| {
            vec![
                ("'UNITED STATES'", quoted(&v[0])),
                ssb_six_years_render("d_year >= 1992 and d_year <= 1997", &v[1]),
            ]
        },
    },
    Spec {
        name: "q3.3",
        text: include_str!("../../../queries/ssb/q3.3.sql"),
        params: &["CITY1", "CITY2", "YEAR"],
        validation: &["UNITED KI1", "UNITED KI5", "1992"],
        draw: |rng| {
            let (a, b) = ssb_city_pair(rng);
            vec![a, b, ssb_six_years(rng)]
        },
        render: |v| {
            vec![
                ("'UNITED KI1'", quoted(&v[0])),
                ("'UNITED KI5'", quoted(&v[1])),
                ssb_six_years_render("d_year >= 1992 and d_year <= 1997", &v[2]),
            ]
        },
    },
    Spec {
        name: "q3.4",
        text: include_str!("../../../queries/ssb/q3.4.sql"),
        params: &["CITY1", "CITY2", "YEARMONTH"],
        validation: &["UNITED KI1", "UNITED KI5", "Dec1997"],
        // A month of 1992 to 1997, as `d_yearmonth` writes it.
        draw: |rng| {
            let (a, b) = ssb_city_pair(rng);
            let month = pick(rng, &MONTH_ABBREVIATIONS);
            vec![a, b, format!("{month}{}", rng.random_range(1992..=1997u32))]
        },
        render: |v| {
            vec![
                ("'UNITED KI1'", quoted(&v[0])),
                ("'UNITED KI5'", quoted(&v[1])),
                ("'Dec1997'", quoted(&v[2])),
            ]
        },
    },
    Spec {
        name: "q4.1",
        text: include_str!("../../../queries/ssb/q4.1.sql"),
        params: &["REGION", "MFGR1", "MFGR2"],
        validation: &["AMERICA", "MFGR#1", "MFGR#2"],
        draw: |rng| {
            let region = pick(rng, &REGIONS);
            let (a, b) = ssb_mfgr_pair(rng);
            vec![region, a, b]
        },
        render: |v| vec![("'AMERICA'", quoted(&v[0])), ssb_mfgr_render(&v[1], &v[2])],
    },
    Spec {
        name: "q4.2",
        text: include_str!("../../../queries/ssb/q4.2.sql"),
        params: &["REGION", "YEAR", "MFGR1", "MFGR2"],
        validation: &["AMERICA", "1997", "MFGR#1", "MFGR#2"],
        draw: |rng| {
            let region = pick(rng, &REGIONS);
            let year = ssb_year_pair(rng);
            let (a, b) = ssb_mfgr_pair(rng);
            vec![region, year, a, b]
        },
        render: |v| {
            vec![
                ("'AMERICA'", quoted(&v[0])),
                ssb_year_pair_render(&v[1]),
                ssb_mfgr_render(&v[2], &v[3]),
            ]
        },
    },
    Spec {
        name: "q4.3",
        text: include_str!("../../../queries/ssb/q4.3.sql"),
        params: &["REGION", "NATION", "YEAR", "CATEGORY"],
        validation: &["AMERICA", "UNITED STATES", "1997", "MFGR#14"],
        // NATION (the suppliers') lies in REGION (the customers').
        draw: |rng| {
            let nation = pick(rng, &nation_names());
            let region = region_of(&nation).to_string();
            vec![region, nation, ssb_year_pair(rng), ssb_category(rng)]
        },
        render: |v| {
            vec![
                ("'AMERICA'", quoted(&v[0])),
                ("'UNITED STATES'", quoted(&v[1])),
                ssb_year_pair_render(&v[2]),
                ("'MFGR#14'", quoted(&v[3])),
            ]
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn all_specs() -> impl Iterator<Item = &'static Spec> {
        TPCH_SPECS.iter().chain(SSB_SPECS.iter())
    }

    #[test]
    fn validation_values_reproduce_the_files() {
        for spec in all_specs() {
            assert_eq!(spec.params.len(), spec.validation.len(), "{}", spec.name);
            let values: Vec<String> = spec.validation.iter().map(|v| v.to_string()).collect();
            let subs = (spec.render)(&values);
            assert_eq!(
                substitute(spec.name, spec.text, &subs),
                spec.text,
                "{}",
                spec.name
            );
        }
        // Q11's FRACTION at SF 0.1 is the file's.
        let q11 = &tpch(0.1)[10];
        assert_eq!(q11.sql, TPCH_SPECS[10].text);
        assert!(tpch(1.0)[10].sql.contains("0.0001000000"));
    }

    #[test]
    fn every_parameter_changes_the_text() {
        // Each parameter alone, set to a drawn value other than its
        // validation value, changes the text (a render that ignored a
        // value would not), and every draw has one value per parameter.
        let mut rng = SmallRng::seed_from_u64(1);
        for spec in all_specs() {
            let mut changed = vec![false; spec.params.len()];
            for _ in 0..200 {
                let drawn = (spec.draw)(&mut rng);
                assert_eq!(drawn.len(), spec.params.len(), "{}", spec.name);
                for (i, value) in drawn.iter().enumerate() {
                    if value == spec.validation[i] {
                        continue;
                    }
                    let mut values: Vec<String> =
                        spec.validation.iter().map(|v| v.to_string()).collect();
                    values[i] = value.clone();
                    let text = substitute(spec.name, spec.text, &(spec.render)(&values));
                    assert_ne!(text, spec.text, "{} {}", spec.name, spec.params[i]);
                    changed[i] = true;
                }
            }
            assert!(changed.iter().all(|&c| c), "{}: {changed:?}", spec.name);
        }
    }

    #[test]
    fn instances_are_deterministic_for_a_seed() {
        let draw = |seed: u64| -> Vec<String> {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut out: Vec<String> = tpch(1.0)
                .iter()
                .map(|q| tpch_instance(&q.name, 1.0, &mut rng).unwrap().sql)
                .collect();
            out.extend(
                ssb()
                    .iter()
                    .map(|q| ssb_instance(&q.name, &mut rng).unwrap().sql),
            );
            out
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(tpch_instance("q23", 1.0, &mut SmallRng::seed_from_u64(1)).is_none());
        assert!(ssb_instance("q5.1", &mut SmallRng::seed_from_u64(1)).is_none());
        // Stream seeds: stable values, different per part and occurrence.
        let s = instance_seed(1, &["arrivals", "sf0_1", "q3"], 0);
        assert_eq!(s, instance_seed(1, &["arrivals", "sf0_1", "q3"], 0));
        assert_ne!(s, instance_seed(1, &["arrivals", "sf0_1", "q3"], 1));
        assert_ne!(s, instance_seed(2, &["arrivals", "sf0_1", "q3"], 0));
        assert_ne!(s, instance_seed(1, &["arrivals", "sf1", "q3"], 0));
        assert_ne!(
            instance_seed(1, &["ab", "c"], 0),
            instance_seed(1, &["a", "bc"], 0)
        );
    }

    fn int(v: &str) -> i64 {
        v.parse().unwrap_or_else(|_| panic!("{v} is not a number"))
    }

    /// (year, month, day) of `YYYY-MM-DD`.
    fn ymd(v: &str) -> (i64, i64, i64) {
        let p: Vec<i64> = v.split('-').map(int).collect();
        assert_eq!(p.len(), 3, "{v} is not a date");
        (p[0], p[1], p[2])
    }

    fn brand_digits_in_1_to_5(v: &str) -> bool {
        let d = v.strip_prefix("Brand#").unwrap_or("");
        d.len() == 2 && d.chars().all(|c| ('1'..='5').contains(&c))
    }

    fn nations() -> Vec<&'static str> {
        nation_names()
    }

    /// Whether `value` of TPC-H parameter `param` of query `q` lies in the
    /// specification's domain (clause 2.4.x.3).
    fn tpch_in_domain(q: &str, param: &str, value: &str) -> bool {
        let months = |from: (i64, i64), to: (i64, i64)| {
            let (y, m, d) = ymd(value);
            d == 1 && (y, m) >= from && (y, m) <= to
        };
        let jan1 = || {
            let (y, m, d) = ymd(value);
            (1993..=1997).contains(&y) && m == 1 && d == 1
        };
        match (q, param) {
            ("q1", "DELTA") => (60..=120).contains(&int(value)),
            ("q2", "SIZE") => (1..=50).contains(&int(value)),
            ("q2", "TYPE") => TYPE_SYLLABLE_3.contains(&value),
            ("q2" | "q5", "REGION") => REGIONS.contains(&value),
            ("q3", "SEGMENT") => SEGMENTS.contains(&value),
            ("q3", "DATE") => {
                let (y, m, d) = ymd(value);
                y == 1995 && m == 3 && (1..=31).contains(&d)
            }
            ("q4" | "q15", "DATE") => months((1993, 1), (1997, 10)),
            ("q5" | "q6" | "q12" | "q20", "DATE") => jan1(),
            ("q6", "DISCOUNT") => {
                let h = value.strip_prefix("0.").map(int).unwrap_or(-1);
                value.len() == 4 && (2..=9).contains(&h)
            }
            ("q6", "QUANTITY") => (24..=25).contains(&int(value)),
            ("q7" | "q8" | "q11" | "q20" | "q21", n) if n.starts_with("NATION") => {
                nations().contains(&value)
            }
            ("q8", "REGION") => REGIONS.contains(&value),
            ("q8", "TYPE") => {
                let s: Vec<&str> = value.split(' ').collect();
                s.len() == 3
                    && TYPE_SYLLABLE_1.contains(&s[0])
                    && TYPE_SYLLABLE_2.contains(&s[1])
                    && TYPE_SYLLABLE_3.contains(&s[2])
            }
            ("q9" | "q20", "COLOR") => COLORS.contains(&value),
            ("q10", "DATE") => months((1993, 2), (1995, 1)),
            ("q11", "FRACTION") => true,
            ("q12", _) => SHIP_MODES.contains(&value),
            ("q13", "WORD1") => Q13_WORD_1.contains(&value),
            ("q13", "WORD2") => Q13_WORD_2.contains(&value),
            ("q14", "DATE") => months((1993, 1), (1997, 12)),
            ("q16" | "q17" | "q19", b) if b.starts_with("BRAND") => brand_digits_in_1_to_5(value),
            ("q16", "TYPE") => {
                let s: Vec<&str> = value.split(' ').collect();
                s.len() == 2 && TYPE_SYLLABLE_1.contains(&s[0]) && TYPE_SYLLABLE_2.contains(&s[1])
            }
            ("q16", _) => (1..=50).contains(&int(value)),
            ("q17", "CONTAINER") => {
                let s: Vec<&str> = value.split(' ').collect();
                s.len() == 2
                    && CONTAINER_SYLLABLE_1.contains(&s[0])
                    && CONTAINER_SYLLABLE_2.contains(&s[1])
            }
            ("q18", "QUANTITY") => (312..=315).contains(&int(value)),
            ("q19", "QUANTITY1") => (1..=10).contains(&int(value)),
            ("q19", "QUANTITY2") => (10..=20).contains(&int(value)),
            ("q19", "QUANTITY3") => (20..=30).contains(&int(value)),
            ("q22", _) => (10..=34).contains(&int(value)),
            _ => false,
        }
    }

    #[test]
    fn tpch_parameters_lie_in_the_specification_domains() {
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..300 {
            for q in tpch(1.0) {
                let inst = tpch_instance(&q.name, 1.0, &mut rng).unwrap();
                let names: Vec<&str> = inst.params.iter().map(|p| p.name).collect();
                let expected: Vec<&str> = q.params.iter().map(|p| p.name).collect();
                assert_eq!(names, expected, "{}", q.name);
                for p in &inst.params {
                    assert!(
                        tpch_in_domain(&q.name, p.name, &p.value),
                        "{} {} = {}",
                        q.name,
                        p.name,
                        p.value
                    );
                }
                // Parameters that must differ from each other do.
                let values: Vec<&str> = inst.params.iter().map(|p| p.value.as_str()).collect();
                match q.name.as_str() {
                    "q7" | "q12" => assert_ne!(values[0], values[1], "{}", q.name),
                    "q8" => assert_eq!(region_of(values[0]), values[1]),
                    "q16" | "q22" => {
                        let list = if q.name == "q16" {
                            &values[2..]
                        } else {
                            &values[..]
                        };
                        let mut sorted = list.to_vec();
                        sorted.sort_unstable();
                        sorted.dedup();
                        assert_eq!(sorted.len(), list.len(), "{}: {list:?}", q.name);
                    }
                    _ => {}
                }
            }
        }
        // Every domain value is reachable: e.g. Q1's DELTA takes all 61 values.
        let mut deltas = std::collections::BTreeSet::new();
        for _ in 0..3000 {
            deltas.insert(
                tpch_instance("q1", 1.0, &mut rng).unwrap().params[0]
                    .value
                    .clone(),
            );
        }
        assert_eq!(deltas.len(), 61);
        // The validation values lie in the domains, except Q18's (as in the
        // specification).
        for q in tpch(1.0) {
            for p in &q.params {
                let inside = tpch_in_domain(&q.name, p.name, &p.value);
                assert_eq!(inside, q.name != "q18", "{} {}", q.name, p.name);
            }
        }
    }

    #[test]
    fn ssb_parameters_lie_in_their_domains() {
        let mut rng = SmallRng::seed_from_u64(4);
        let year = |v: &str, lo: i64, hi: i64| (lo..=hi).contains(&int(v));
        let category = |v: &str| {
            let d = v.strip_prefix("MFGR#").unwrap_or("");
            d.len() == 2 && d.chars().all(|c| ('1'..='5').contains(&c))
        };
        let cities: Vec<String> = nations()
            .iter()
            .flat_map(|n| (0..10).map(move |d| ssb_city(n, d)))
            .collect();
        for _ in 0..300 {
            for q in ssb() {
                let inst = ssb_instance(&q.name, &mut rng).unwrap();
                let v: Vec<&str> = inst.params.iter().map(|p| p.value.as_str()).collect();
                match q.name.as_str() {
                    "q1.1" => {
                        assert!(year(v[0], 1993, 1997) && year(v[1], 1, 9) && year(v[2], 24, 26))
                    }
                    "q1.2" => {
                        let ym = int(v[0]);
                        assert!(
                            (1993..=1997).contains(&(ym / 100)) && (1..=12).contains(&(ym % 100))
                        );
                        assert!(year(v[1], 1, 9) && year(v[2], 1, 41));
                    }
                    "q1.3" => assert!(
                        year(v[0], 1, 52)
                            && year(v[1], 1993, 1997)
                            && year(v[2], 1, 9)
                            && year(v[3], 1, 41)
                    ),
                    "q2.1" => assert!(category(v[0]) && REGIONS.contains(&v[1])),
                    "q2.2" => {
                        let (b1, b2) = (&v[0][7..], &v[1][7..]);
                        assert_eq!(v[0][..7], v[1][..7]);
                        assert!(category(&v[0][..7]) && REGIONS.contains(&v[2]));
                        assert!(year(b1, 10, 33) && int(b2) == int(b1) + 7, "{v:?}");
                    }
                    "q2.3" => {
                        assert!(category(&v[0][..7]) && year(&v[0][7..], 1, 40));
                        assert!(REGIONS.contains(&v[1]));
                    }
                    "q3.1" => assert!(REGIONS.contains(&v[0]) && year(v[1], 1992, 1993)),
                    "q3.2" => assert!(nations().contains(&v[0]) && year(v[1], 1992, 1993)),
                    "q3.3" | "q3.4" => {
                        assert!(
                            cities.iter().any(|c| c == v[0]) && cities.iter().any(|c| c == v[1])
                        );
                        assert_ne!(v[0], v[1]);
                        assert_eq!(v[0][..9], v[1][..9], "one nation's cities");
                        if q.name == "q3.3" {
                            assert!(year(v[2], 1992, 1993));
                        } else {
                            assert!(MONTH_ABBREVIATIONS.contains(&&v[2][..3]));
                            assert!(year(&v[2][3..], 1992, 1997));
                        }
                    }
                    "q4.1" | "q4.2" => {
                        assert!(REGIONS.contains(&v[0]));
                        let (m1, m2) = (v[v.len() - 2], v[v.len() - 1]);
                        assert!(m1 < m2 && m1.starts_with("MFGR#") && m2.starts_with("MFGR#"));
                        assert!(year(&m1[5..], 1, 5) && year(&m2[5..], 1, 5));
                        if q.name == "q4.2" {
                            assert!(year(v[1], 1992, 1997));
                        }
                    }
                    "q4.3" => {
                        assert_eq!(region_of(v[1]), v[0]);
                        assert!(year(v[2], 1992, 1997) && category(v[3]));
                    }
                    other => panic!("unexpected query {other}"),
                }
            }
        }
    }
}
