//! Star Schema Benchmark (SSB) data.
//!
//! Generates the five SSB tables (`date`, `customer`, `supplier`, `part`,
//! `lineorder`) following the specification of O'Neil, O'Neil, Chen and Revilak
//! and its reference generator (`ssb-dbgen`, itself derived from TPC-H's
//! `dbgen`). The random numbers differ from `ssb-dbgen`'s (they come from
//! `rand`'s `SmallRng`), so the rows are not byte-identical to its output, but
//! the row counts, value domains and formulas are the specification's:
//!
//! * **Row counts** at scale factor SF: `customer` 30,000 × SF, `supplier`
//!   2,000 × SF, 1,500,000 × SF orders of 1–7 lines each (so `lineorder` has
//!   about 6,000,000 × SF rows), `part` 200,000 × (1 + ⌊log2 SF⌋) for SF ≥ 1,
//!   `date` 2,556 rows. Counts are rounded and at least 1.
//! * **Nations and regions** are TPC-H's 25 nations and 5 regions. A city is
//!   the first 9 characters of the nation name, padded with blanks to 9,
//!   followed by a digit 0–9 (`'UNITED KI1'`). Phones are TPC-H's
//!   `CC-LLL-LLL-LLLL` with country code 10 + nation key; addresses are random
//!   alphanumeric strings of 10–40 characters; `c_mktsegment` is one of TPC-H's
//!   5 segments; names are `Customer#000000001` / `Supplier#000000001`.
//! * **Parts**: `p_mfgr` is `MFGR#1`–`MFGR#5`, `p_category` the manufacturer
//!   followed by a digit 1–5 (`MFGR#12`), `p_brand1` the category followed by
//!   1–40 without padding (`MFGR#121`, `MFGR#1221`), as `ssb-dbgen` prints it.
//!   `p_name` is two distinct TPC-H colours (the specification shortens TPC-H's
//!   five-word name to two words) and `p_color` is the first of them;
//!   `p_type` (150 values), `p_size` (1–50) and `p_container` (40 values) are
//!   TPC-H's.
//! * **Lineorder**: per order a date, a customer and a priority (TPC-H's five,
//!   `'1-URGENT'` … `'5-LOW'`); `lo_shippriority` is the one-character text `'0'`.
//!   Per line a part and a supplier (uniform), `lo_quantity` 1–50,
//!   `lo_discount` 0–10, `lo_tax` 0–8, `lo_commitdate` = order date + 30–90
//!   days and one of TPC-H's 7 ship modes. Money is integral, exactly as
//!   `ssb-dbgen` computes and prints it (TPC-H's cents, without a decimal
//!   point): the part's retail price is
//!   `90000 + (partkey / 10) mod 20001 + 100 × (partkey mod 1000)`,
//!   `lo_extendedprice` = quantity × price,
//!   `lo_revenue` = extendedprice × (100 − discount) / 100,
//!   `lo_supplycost` = 6 × price / 10 and `lo_ordtotalprice` the order's sum of
//!   extendedprice × (100 − discount) / 100 × (100 + tax) / 100 (integer
//!   division at each step). Order dates are uniform from 1992-01-01 to
//!   1998-08-02 (TPC-H's end date less 151 days), so every commit date lies in
//!   the `date` table; as in `ssb-dbgen`, customers whose key is a multiple of 3
//!   place no orders.
//! * **Date**: one row per day from 1992-01-01, 2,556 rows (the
//!   specification's count; `ssb-dbgen` generates the same days). `d_datekey` is `yyyymmdd`, `d_date` `'December 1, 1997'`,
//!   `d_yearmonth` `'Dec1997'`; weeks start on Sunday (`d_daynuminweek` 1 =
//!   Sunday … 7 = Saturday, `d_lastdayinweekfl` = Saturday, `d_weekdayfl` =
//!   Monday–Friday); `d_weeknuminyear` = 1 + (daynuminyear − 1) / 7; selling
//!   seasons and holidays are `ssb-dbgen`'s (Christmas: November–December,
//!   Summer: May–August, Winter: January–March, Spring: April, Fall:
//!   September–October; holidays on January 1, December 24 and the 20th of
//!   February, April, May, July, August, September, October and November).
//!   Flags are `Int32` 0/1. The `date` table does not depend on the seed.
//!
//! Deviations, all deliberate:
//!
//! * `lo_orderkey` is dense (1 … number of orders) rather than TPC-H's sparse
//!   keys; `lo_orderkey` is `Int64`, every other integer `Int32`, the four
//!   money columns `Int64`.
//! * `part` scales linearly below SF 1 (200,000 × SF rows), so small scale
//!   factors stay proportionate.
//! * Nations and cities of customers and suppliers, and manufacturers,
//!   categories and brands of parts, are drawn *stratified* instead of
//!   independently: counting from the start of each block, every aligned run
//!   of 250 customers or suppliers holds each of the 250 cities once (every
//!   run of 5 each region, every run of 25 each nation), and every aligned run
//!   of 1,000 parts each of the 1,000 brands once (every run of 5 each
//!   manufacturer, of 25 each category), in random order. Each row's value is
//!   still uniformly distributed, but the values the 13 queries name
//!   (`'UNITED KI1'`, `'MFGR#2239'`, …) exist even at small scale factors.
//! * `d_weeknuminyear` is 1 + (daynuminyear − 1) / 7 (seven-day weeks from
//!   January 1); `ssb-dbgen` computes daynuminyear / 7 + 1, whose first week
//!   has six days. `d_lastdayinmonthfl` is 1 on a month's last day
//!   (`ssb-dbgen` inverts it), and Sunday is day 1 of the week, as
//!   `ssb-dbgen`'s comment intends.
//! * The `date` table keeps the specification's 2,556 rows, so it ends on
//!   1998-12-30 rather than 1998-12-31; no order or commit date is that late.
//!
//! The output depends only on `(scale, seed)`: every block of a dimension
//! table and every order has its own random stream derived from the seed, so
//! the number of threads changes nothing. Blocks hold
//! [`DEFAULT_BLOCK_ROWS`] rows (the last one of a table fewer); an order may
//! span two `lineorder` blocks.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::error::{Result, StorageError};
use crate::table::Table;
use crate::DEFAULT_BLOCK_ROWS;

/// The five SSB tables, dimensions first.
pub const TABLES: [&str; 5] = ["date", "customer", "supplier", "part", "lineorder"];

/// Generates all five SSB tables at `scale` (> 0) with `seed`, using up to
/// `threads` threads. The tables come in [`TABLES`] order.
pub fn generate(scale: f64, seed: u64, threads: usize) -> Result<Vec<Table>> {
    let ctx = Context::new(scale, seed, threads)?;
    Ok(vec![
        date_table()?,
        customer_table(&ctx)?,
        supplier_table(&ctx)?,
        part_table(&ctx)?,
        lineorder_table(&ctx)?,
    ])
}

// ---------------------------------------------------------------------------
// Value domains (TPC-H's and the SSB specification's).
// ---------------------------------------------------------------------------

/// TPC-H's regions, by region key.
pub const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];

/// TPC-H's nations with their region keys, by nation key.
pub const NATIONS: [(&str, usize); 25] = [
    ("ALGERIA", 0),
    ("ARGENTINA", 1),
    ("BRAZIL", 1),
    ("CANADA", 1),
    ("EGYPT", 4),
    ("ETHIOPIA", 0),
    ("FRANCE", 3),
    ("GERMANY", 3),
    ("INDIA", 2),
    ("INDONESIA", 2),
    ("IRAN", 4),
    ("IRAQ", 4),
    ("JAPAN", 2),
    ("JORDAN", 4),
    ("KENYA", 0),
    ("MOROCCO", 0),
    ("MOZAMBIQUE", 0),
    ("PERU", 1),
    ("CHINA", 2),
    ("ROMANIA", 3),
    ("SAUDI ARABIA", 4),
    ("VIETNAM", 2),
    ("RUSSIA", 3),
    ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
];

/// Nations per region (5 in TPC-H) and cities per nation.
const NATIONS_PER_REGION: usize = 5;
const CITIES_PER_NATION: usize = 10;

pub const SEGMENTS: [&str; 5] = [
    "AUTOMOBILE",
    "BUILDING",
    "FURNITURE",
    "MACHINERY",
    "HOUSEHOLD",
];

const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"];

pub const SHIP_MODES: [&str; 7] = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"];

/// TPC-H's 92 colours (part names and `p_color`).
pub const COLORS: [&str; 92] = [
    "almond",
    "antique",
    "aquamarine",
    "azure",
    "beige",
    "bisque",
    "black",
    "blanched",
    "blue",
    "blush",
    "brown",
    "burlywood",
    "burnished",
    "chartreuse",
    "chiffon",
    "chocolate",
    "coral",
    "cornflower",
    "cornsilk",
    "cream",
    "cyan",
    "dark",
    "deep",
    "dim",
    "dodger",
    "drab",
    "firebrick",
    "floral",
    "forest",
    "frosted",
    "gainsboro",
    "ghost",
    "goldenrod",
    "green",
    "grey",
    "honeydew",
    "hot",
    "indian",
    "ivory",
    "khaki",
    "lace",
    "lavender",
    "lawn",
    "lemon",
    "light",
    "lime",
    "linen",
    "magenta",
    "maroon",
    "medium",
    "metallic",
    "midnight",
    "mint",
    "misty",
    "moccasin",
    "navajo",
    "navy",
    "olive",
    "orange",
    "orchid",
    "pale",
    "papaya",
    "peach",
    "peru",
    "pink",
    "plum",
    "powder",
    "puff",
    "purple",
    "red",
    "rose",
    "rosy",
    "royal",
    "saddle",
    "salmon",
    "sandy",
    "seashell",
    "sienna",
    "sky",
    "slate",
    "smoke",
    "snow",
    "spring",
    "steel",
    "tan",
    "thistle",
    "tomato",
    "turquoise",
    "violet",
    "wheat",
    "white",
    "yellow",
];

/// The three syllables of TPC-H's part types.
pub const TYPE_SIZES: [&str; 6] = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"];
pub const TYPE_FINISHES: [&str; 5] = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"];
pub const TYPE_METALS: [&str; 5] = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"];

/// The two syllables of TPC-H's containers.
pub const CONTAINER_SIZES: [&str; 5] = ["SM", "LG", "MED", "JUMBO", "WRAP"];
pub const CONTAINER_KINDS: [&str; 8] = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"];

/// Manufacturers, categories per manufacturer and brands per category.
const MFGRS: usize = 5;
const CATEGORIES_PER_MFGR: usize = 5;
const BRANDS_PER_CATEGORY: usize = 40;

/// Characters of random addresses.
const ADDRESS_CHARS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Day names, Sunday first (weekday 0).
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `ssb-dbgen`'s holidays as (month, day).
const HOLIDAYS: [(u32, u32); 10] = [
    (12, 24),
    (1, 1),
    (2, 20),
    (4, 20),
    (5, 20),
    (7, 20),
    (8, 20),
    (9, 20),
    (10, 20),
    (11, 20),
];

/// Rows of the `date` table, starting on [`FIRST_DAY`].
const DATE_ROWS: usize = 2556;
const FIRST_DAY: (i32, u32, u32) = (1992, 1, 1);
/// The last order date: TPC-H's end date (1998-12-31) less 151 days.
const LAST_ORDER_DAY: (i32, u32, u32) = (1998, 8, 2);
/// Commit dates are 30 to 90 days after the order date.
const COMMIT_DELAY: std::ops::RangeInclusive<usize> = 30..=90;

/// Rows per table at scale factor 1.
const CUSTOMERS_PER_SF: f64 = 30_000.0;
const SUPPLIERS_PER_SF: f64 = 2_000.0;
const PARTS_PER_SF: f64 = 200_000.0;
const ORDERS_PER_SF: f64 = 1_500_000.0;
/// Lines per order.
const MAX_LINES: usize = 7;

/// Orders whose line counts are computed by one task.
const COUNT_TASK_ORDERS: usize = 1 << 16;

/// Random-stream identifiers (mixed with the seed and a block or order number).
const STREAM_CUSTOMER: u64 = 1;
const STREAM_SUPPLIER: u64 = 2;
const STREAM_PART: u64 = 3;
const STREAM_ORDER: u64 = 4;

// ---------------------------------------------------------------------------
// Sizes, randomness and parallelism.
// ---------------------------------------------------------------------------

/// What every table generator needs: sizes, seed and thread count.
struct Context {
    seed: u64,
    threads: usize,
    customers: usize,
    suppliers: usize,
    parts: usize,
    orders: usize,
}

impl Context {
    fn new(scale: f64, seed: u64, threads: usize) -> Result<Self> {
        if !(scale > 0.0 && scale <= 1000.0) {
            return Err(StorageError::InvalidArgument(format!(
                "SSB scale factor must be in (0, 1000], got {scale}"
            )));
        }
        let rows = |per_sf: f64| (per_sf * scale).round().max(1.0) as usize;
        let parts = if scale >= 1.0 {
            // 200,000 × (1 + ⌊log2 SF⌋); log2 is exact for powers of two.
            (PARTS_PER_SF * (1.0 + scale.log2().floor())) as usize
        } else {
            rows(PARTS_PER_SF)
        };
        let ctx = Context {
            seed,
            threads: threads.max(1),
            customers: rows(CUSTOMERS_PER_SF),
            suppliers: rows(SUPPLIERS_PER_SF),
            parts,
            orders: rows(ORDERS_PER_SF),
        };
        // Keys are Int32 (order keys Int64); at SF 1000 they stay far below.
        for (what, n) in [
            ("customers", ctx.customers),
            ("suppliers", ctx.suppliers),
            ("parts", ctx.parts),
        ] {
            if i32::try_from(n).is_err() {
                return Err(StorageError::InvalidArgument(format!(
                    "SSB scale factor {scale} gives {n} {what}, more than Int32 keys allow"
                )));
            }
        }
        Ok(ctx)
    }
}

/// SplitMix64's finaliser: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The random stream of item `index` (a block or an order) of `stream`.
fn stream_rng(seed: u64, stream: u64, index: usize) -> SmallRng {
    SmallRng::seed_from_u64(mix(mix(seed ^ mix(stream)) ^ index as u64))
}

/// Runs `task(0) … task(tasks - 1)` on up to `threads` threads and returns
/// the results in task order.
pub(crate) fn run_tasks<T, F>(tasks: usize, threads: usize, task: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(usize) -> Result<T> + Sync,
{
    let threads = threads.clamp(1, tasks.max(1));
    if threads == 1 {
        return (0..tasks).map(task).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut slots: Vec<Option<T>> = std::iter::repeat_with(|| None).take(tasks).collect();
    std::thread::scope(|scope| -> Result<()> {
        let (task, next, failed) = (&task, &next, &failed);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(move || -> Result<Vec<(usize, T)>> {
                    let mut done = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= tasks {
                            break;
                        }
                        match task(i) {
                            Ok(value) => done.push((i, value)),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        let mut first_error = None;
        for worker in workers {
            match worker.join() {
                Ok(Ok(done)) => {
                    for (i, value) in done {
                        slots[i] = Some(value);
                    }
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert(StorageError::Internal(
                        "SSB generator thread panicked".into(),
                    ));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    })?;
    slots
        .into_iter()
        .map(|slot| slot.ok_or_else(|| StorageError::Internal("SSB task produced nothing".into())))
        .collect()
}

/// A random arrangement of all `a × b × c` value triples for
/// `radices = [a, b, c]`, such that every aligned run of `a` triples holds each
/// first value once, every aligned run of `a × b` each pair of first and second
/// values once, and the whole arrangement each triple once. Each position is
/// uniformly distributed over the triples.
fn stratified(rng: &mut SmallRng, [a, b, c]: [usize; 3]) -> Vec<[usize; 3]> {
    let shuffled = |rng: &mut SmallRng, n: usize| {
        let mut values: Vec<usize> = (0..n).collect();
        values.shuffle(rng);
        values
    };
    // `rows[i][j]` becomes `[j][i]`; every row has `width` values.
    let transpose = |rows: Vec<Vec<usize>>, width: usize| {
        let mut columns = vec![vec![0; rows.len()]; width];
        for (i, row) in rows.iter().enumerate() {
            for (j, &value) in row.iter().enumerate() {
                columns[j][i] = value;
            }
        }
        columns
    };
    // For each of the `c` runs of `a × b`: the third value of each pair
    // (pair index `first × b + second`); over the runs each pair gets every
    // third value once.
    let thirds_by_run = transpose((0..a * b).map(|_| shuffled(rng, c)).collect(), c);
    let mut out = Vec::with_capacity(a * b * c);
    for thirds in &thirds_by_run {
        // For each of the `b` groups of `a`: the second value of each first
        // value; over the groups each first value gets every second value once.
        let seconds_by_group = transpose((0..a).map(|_| shuffled(rng, b)).collect(), b);
        for seconds in &seconds_by_group {
            for first in shuffled(rng, a) {
                let second = seconds[first];
                out.push([first, second, thirds[first * b + second]]);
            }
        }
    }
    out
}

/// Rows `[start, end)` of block `block` of a table of `rows` rows.
fn block_range(block: usize, rows: usize) -> (usize, usize) {
    let start = block * DEFAULT_BLOCK_ROWS;
    (start, rows.min(start + DEFAULT_BLOCK_ROWS))
}

/// Number of [`DEFAULT_BLOCK_ROWS`]-row blocks of a table of `rows` rows.
fn block_count(rows: usize) -> usize {
    rows.div_ceil(DEFAULT_BLOCK_ROWS)
}

/// A schema of non-nullable fields.
fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(name, data_type)| Field::new(*name, data_type.clone(), false))
            .collect::<Vec<_>>(),
    ))
}

/// Replaces `buf`'s contents with formatted text.
fn format_into(buf: &mut String, args: std::fmt::Arguments<'_>) {
    buf.clear();
    // Writing to a String cannot fail.
    let _ = buf.write_fmt(args);
}

/// A random alphanumeric string of 10 to 40 characters (TPC-H's v-string of
/// average length 25).
fn random_address(rng: &mut SmallRng, buf: &mut String) {
    buf.clear();
    let len = rng.random_range(10..=40);
    for _ in 0..len {
        buf.push(char::from(
            ADDRESS_CHARS[rng.random_range(0..ADDRESS_CHARS.len())],
        ));
    }
}

/// A TPC-H phone number `CC-LLL-LLL-LLLL` for `nation`.
fn random_phone(rng: &mut SmallRng, nation: usize, buf: &mut String) {
    let area = rng.random_range(100..=999);
    let exchange = rng.random_range(100..=999);
    let number = rng.random_range(1000..=9999);
    format_into(
        buf,
        format_args!("{}-{area}-{exchange}-{number}", 10 + nation),
    );
}

// ---------------------------------------------------------------------------
// Date.
// ---------------------------------------------------------------------------

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil((year, month, day): (i32, u32, u32)) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// One day of the `date` table.
#[derive(Debug, Clone, Copy)]
struct Day {
    year: i32,
    /// 1–12.
    month: u32,
    /// 1–31.
    day: u32,
    /// 0 = Sunday … 6 = Saturday.
    weekday: u32,
    /// 1–366.
    day_of_year: u32,
}

impl Day {
    fn datekey(&self) -> i32 {
        self.year * 10_000 + (self.month * 100 + self.day) as i32
    }
}

/// The [`DATE_ROWS`] days of the `date` table.
fn calendar() -> Vec<Day> {
    let (mut year, mut month, mut day) = FIRST_DAY;
    let mut weekday = (days_from_civil(FIRST_DAY) + 4).rem_euclid(7) as u32; // 1970-01-01: Thursday
    let mut day_of_year = 1;
    let mut days = Vec::with_capacity(DATE_ROWS);
    for _ in 0..DATE_ROWS {
        days.push(Day {
            year,
            month,
            day,
            weekday,
            day_of_year,
        });
        weekday = (weekday + 1) % 7;
        day_of_year += 1;
        day += 1;
        if day > days_in_month(year, month) {
            day = 1;
            month += 1;
            if month > 12 {
                month = 1;
                year += 1;
                day_of_year = 1;
            }
        }
    }
    days
}

/// `ssb-dbgen`'s selling season of a month.
fn selling_season(month: u32) -> &'static str {
    match month {
        11 | 12 => "Christmas",
        5..=8 => "Summer",
        1..=3 => "Winter",
        4 => "Spring",
        _ => "Fall",
    }
}

fn date_schema() -> SchemaRef {
    use DataType::{Int32, Utf8};
    schema(&[
        ("d_datekey", Int32),
        ("d_date", Utf8),
        ("d_dayofweek", Utf8),
        ("d_month", Utf8),
        ("d_year", Int32),
        ("d_yearmonthnum", Int32),
        ("d_yearmonth", Utf8),
        ("d_daynuminweek", Int32),
        ("d_daynuminmonth", Int32),
        ("d_daynuminyear", Int32),
        ("d_monthnuminyear", Int32),
        ("d_weeknuminyear", Int32),
        ("d_sellingseason", Utf8),
        ("d_lastdayinweekfl", Int32),
        ("d_lastdayinmonthfl", Int32),
        ("d_holidayfl", Int32),
        ("d_weekdayfl", Int32),
    ])
}

fn date_table() -> Result<Table> {
    let days = calendar();
    let ints = |f: &dyn Fn(&Day) -> i32| -> ArrayRef {
        Arc::new(days.iter().map(f).collect::<Int32Array>())
    };
    let strings = |f: &dyn Fn(&Day) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(days.iter().map(f)))
    };
    let month_name = |d: &Day| MONTHS[d.month as usize - 1];
    let flag = |b: bool| i32::from(b);
    let columns = vec![
        ints(&|d| d.datekey()),
        strings(&|d| format!("{} {}, {}", month_name(d), d.day, d.year)),
        strings(&|d| WEEKDAYS[d.weekday as usize].to_string()),
        strings(&|d| month_name(d).to_string()),
        ints(&|d| d.year),
        ints(&|d| d.year * 100 + d.month as i32),
        strings(&|d| format!("{}{}", &month_name(d)[..3], d.year)),
        ints(&|d| d.weekday as i32 + 1),
        ints(&|d| d.day as i32),
        ints(&|d| d.day_of_year as i32),
        ints(&|d| d.month as i32),
        ints(&|d| 1 + (d.day_of_year as i32 - 1) / 7),
        strings(&|d| selling_season(d.month).to_string()),
        ints(&|d| flag(d.weekday == 6)),
        ints(&|d| flag(d.day == days_in_month(d.year, d.month))),
        ints(&|d| flag(HOLIDAYS.contains(&(d.month, d.day)))),
        ints(&|d| flag((1..=5).contains(&d.weekday))),
    ];
    let schema = date_schema();
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Table::new("date", schema, vec![batch])
}

// ---------------------------------------------------------------------------
// Customer and supplier.
// ---------------------------------------------------------------------------

/// Nations and cities: names and nation keys by (region, slot in region).
struct Geography {
    /// Nation keys by region and slot within the region.
    nations_by_region: [[usize; NATIONS_PER_REGION]; REGIONS.len()],
    /// City names by nation key × 10 + digit.
    cities: Vec<String>,
}

impl Geography {
    fn new() -> Result<Self> {
        let mut nations_by_region = [[0; NATIONS_PER_REGION]; REGIONS.len()];
        for (region, slots) in nations_by_region.iter_mut().enumerate() {
            let mut members = NATIONS
                .iter()
                .enumerate()
                .filter(|(_, (_, r))| *r == region)
                .map(|(key, _)| key);
            for slot in slots.iter_mut() {
                *slot = members.next().ok_or_else(|| {
                    StorageError::Internal(format!("region {region} has too few nations"))
                })?;
            }
        }
        let cities = NATIONS
            .iter()
            .flat_map(|(name, _)| {
                let prefix: String = name.chars().take(9).collect();
                (0..CITIES_PER_NATION).map(move |digit| format!("{prefix:<9}{digit}"))
            })
            .collect();
        Ok(Geography {
            nations_by_region,
            cities,
        })
    }
}

/// The columns customers and suppliers share: key, name, address, city,
/// nation, region, phone.
struct PartyColumns {
    keys: Vec<i32>,
    names: StringBuilder,
    addresses: StringBuilder,
    cities: StringBuilder,
    nations: StringBuilder,
    regions: StringBuilder,
    phones: StringBuilder,
}

impl PartyColumns {
    /// Generates rows `[start, end)` with name prefix `tag` (`Customer`),
    /// calling `extra` once per row after the shared columns.
    fn generate(
        geo: &Geography,
        rng: &mut SmallRng,
        (start, end): (usize, usize),
        tag: &str,
        mut extra: impl FnMut(&mut SmallRng),
    ) -> Self {
        let rows = end - start;
        let mut columns = PartyColumns {
            keys: Vec::with_capacity(rows),
            names: StringBuilder::with_capacity(rows, rows * 18),
            addresses: StringBuilder::with_capacity(rows, rows * 25),
            cities: StringBuilder::with_capacity(rows, rows * 10),
            nations: StringBuilder::with_capacity(rows, rows * 10),
            regions: StringBuilder::with_capacity(rows, rows * 7),
            phones: StringBuilder::with_capacity(rows, rows * 15),
        };
        let radices = [REGIONS.len(), NATIONS_PER_REGION, CITIES_PER_NATION];
        let stratum = radices.iter().product::<usize>();
        let mut places = Vec::new();
        let mut buf = String::new();
        for (i, row) in (start..end).enumerate() {
            if i % stratum == 0 {
                places = stratified(rng, radices);
            }
            let [region, slot, digit] = places[i % stratum];
            let nation = geo.nations_by_region[region][slot];
            let key = row + 1;
            columns.keys.push(key as i32);
            format_into(&mut buf, format_args!("{tag}#{key:09}"));
            columns.names.append_value(&buf);
            random_address(rng, &mut buf);
            columns.addresses.append_value(&buf);
            columns
                .cities
                .append_value(&geo.cities[nation * CITIES_PER_NATION + digit]);
            columns.nations.append_value(NATIONS[nation].0);
            columns.regions.append_value(REGIONS[region]);
            random_phone(rng, nation, &mut buf);
            columns.phones.append_value(&buf);
            extra(rng);
        }
        columns
    }

    fn into_arrays(mut self) -> Vec<ArrayRef> {
        vec![
            Arc::new(Int32Array::from(self.keys)),
            Arc::new(self.names.finish()),
            Arc::new(self.addresses.finish()),
            Arc::new(self.cities.finish()),
            Arc::new(self.nations.finish()),
            Arc::new(self.regions.finish()),
            Arc::new(self.phones.finish()),
        ]
    }
}

fn customer_schema() -> SchemaRef {
    use DataType::{Int32, Utf8};
    schema(&[
        ("c_custkey", Int32),
        ("c_name", Utf8),
        ("c_address", Utf8),
        ("c_city", Utf8),
        ("c_nation", Utf8),
        ("c_region", Utf8),
        ("c_phone", Utf8),
        ("c_mktsegment", Utf8),
    ])
}

fn customer_table(ctx: &Context) -> Result<Table> {
    let geo = Geography::new()?;
    let schema = customer_schema();
    let blocks = run_tasks(block_count(ctx.customers), ctx.threads, |block| {
        let mut rng = stream_rng(ctx.seed, STREAM_CUSTOMER, block);
        let range = block_range(block, ctx.customers);
        let mut segments =
            StringBuilder::with_capacity(range.1 - range.0, 10 * (range.1 - range.0));
        let party = PartyColumns::generate(&geo, &mut rng, range, "Customer", |rng| {
            segments.append_value(SEGMENTS[rng.random_range(0..SEGMENTS.len())]);
        });
        let mut columns = party.into_arrays();
        columns.push(Arc::new(segments.finish()));
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })?;
    Table::new("customer", schema, blocks)
}

fn supplier_schema() -> SchemaRef {
    use DataType::{Int32, Utf8};
    schema(&[
        ("s_suppkey", Int32),
        ("s_name", Utf8),
        ("s_address", Utf8),
        ("s_city", Utf8),
        ("s_nation", Utf8),
        ("s_region", Utf8),
        ("s_phone", Utf8),
    ])
}

fn supplier_table(ctx: &Context) -> Result<Table> {
    let geo = Geography::new()?;
    let schema = supplier_schema();
    let blocks = run_tasks(block_count(ctx.suppliers), ctx.threads, |block| {
        let mut rng = stream_rng(ctx.seed, STREAM_SUPPLIER, block);
        let range = block_range(block, ctx.suppliers);
        let party = PartyColumns::generate(&geo, &mut rng, range, "Supplier", |_| {});
        Ok(RecordBatch::try_new(schema.clone(), party.into_arrays())?)
    })?;
    Table::new("supplier", schema, blocks)
}

// ---------------------------------------------------------------------------
// Part.
// ---------------------------------------------------------------------------

fn part_schema() -> SchemaRef {
    use DataType::{Int32, Utf8};
    schema(&[
        ("p_partkey", Int32),
        ("p_name", Utf8),
        ("p_mfgr", Utf8),
        ("p_category", Utf8),
        ("p_brand1", Utf8),
        ("p_color", Utf8),
        ("p_type", Utf8),
        ("p_size", Int32),
        ("p_container", Utf8),
    ])
}

/// Manufacturer, category, brand, type and container names.
struct PartVocabulary {
    mfgrs: Vec<String>,
    /// By mfgr × 5 + category digit − 1.
    categories: Vec<String>,
    /// By (mfgr × 5 + category) × 40 + brand number − 1.
    brands: Vec<String>,
    types: Vec<String>,
    containers: Vec<String>,
}

impl PartVocabulary {
    fn new() -> Self {
        let mfgrs: Vec<String> = (1..=MFGRS).map(|m| format!("MFGR#{m}")).collect();
        let categories: Vec<String> = mfgrs
            .iter()
            .flat_map(|m| (1..=CATEGORIES_PER_MFGR).map(move |c| format!("{m}{c}")))
            .collect();
        let brands = categories
            .iter()
            .flat_map(|c| (1..=BRANDS_PER_CATEGORY).map(move |b| format!("{c}{b}")))
            .collect();
        let types = TYPE_SIZES
            .iter()
            .flat_map(|s| {
                TYPE_FINISHES
                    .iter()
                    .flat_map(move |f| TYPE_METALS.iter().map(move |m| format!("{s} {f} {m}")))
            })
            .collect();
        let containers = CONTAINER_SIZES
            .iter()
            .flat_map(|s| CONTAINER_KINDS.iter().map(move |k| format!("{s} {k}")))
            .collect();
        PartVocabulary {
            mfgrs,
            categories,
            brands,
            types,
            containers,
        }
    }
}

fn part_table(ctx: &Context) -> Result<Table> {
    let vocab = PartVocabulary::new();
    let schema = part_schema();
    let radices = [MFGRS, CATEGORIES_PER_MFGR, BRANDS_PER_CATEGORY];
    let stratum = radices.iter().product::<usize>();
    let blocks = run_tasks(block_count(ctx.parts), ctx.threads, |block| {
        let mut rng = stream_rng(ctx.seed, STREAM_PART, block);
        let (start, end) = block_range(block, ctx.parts);
        let rows = end - start;
        let mut keys = Vec::with_capacity(rows);
        let mut names = StringBuilder::with_capacity(rows, rows * 14);
        let mut mfgrs = StringBuilder::with_capacity(rows, rows * 6);
        let mut categories = StringBuilder::with_capacity(rows, rows * 7);
        let mut brands = StringBuilder::with_capacity(rows, rows * 9);
        let mut colors = StringBuilder::with_capacity(rows, rows * 6);
        let mut types = StringBuilder::with_capacity(rows, rows * 20);
        let mut sizes = Vec::with_capacity(rows);
        let mut containers = StringBuilder::with_capacity(rows, rows * 8);
        let mut labels = Vec::new();
        let mut buf = String::new();
        for (i, row) in (start..end).enumerate() {
            if i % stratum == 0 {
                labels = stratified(&mut rng, radices);
            }
            let [mfgr, category, brand] = labels[i % stratum];
            let category = mfgr * CATEGORIES_PER_MFGR + category;
            keys.push((row + 1) as i32);
            let first = rng.random_range(0..COLORS.len());
            let mut second = rng.random_range(0..COLORS.len() - 1);
            if second >= first {
                second += 1;
            }
            format_into(
                &mut buf,
                format_args!("{} {}", COLORS[first], COLORS[second]),
            );
            names.append_value(&buf);
            mfgrs.append_value(&vocab.mfgrs[mfgr]);
            categories.append_value(&vocab.categories[category]);
            brands.append_value(&vocab.brands[category * BRANDS_PER_CATEGORY + brand]);
            colors.append_value(COLORS[first]);
            types.append_value(&vocab.types[rng.random_range(0..vocab.types.len())]);
            sizes.push(rng.random_range(1..=50));
            containers.append_value(&vocab.containers[rng.random_range(0..vocab.containers.len())]);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(keys)),
            Arc::new(names.finish()),
            Arc::new(mfgrs.finish()),
            Arc::new(categories.finish()),
            Arc::new(brands.finish()),
            Arc::new(colors.finish()),
            Arc::new(types.finish()),
            Arc::new(Int32Array::from(sizes)),
            Arc::new(containers.finish()),
        ];
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    })?;
    Table::new("part", schema, blocks)
}

// ---------------------------------------------------------------------------
// Lineorder.
// ---------------------------------------------------------------------------

fn lineorder_schema() -> SchemaRef {
    use DataType::{Int32, Int64, Utf8};
    schema(&[
        ("lo_orderkey", Int64),
        ("lo_linenumber", Int32),
        ("lo_custkey", Int32),
        ("lo_partkey", Int32),
        ("lo_suppkey", Int32),
        ("lo_orderdate", Int32),
        ("lo_orderpriority", Utf8),
        ("lo_shippriority", Utf8),
        ("lo_quantity", Int32),
        ("lo_extendedprice", Int64),
        ("lo_ordtotalprice", Int64),
        ("lo_discount", Int32),
        ("lo_revenue", Int64),
        ("lo_supplycost", Int64),
        ("lo_tax", Int32),
        ("lo_commitdate", Int32),
        ("lo_shipmode", Utf8),
    ])
}

/// TPC-H's retail price of a part (in dbgen's integral units).
fn retail_price(partkey: i64) -> i64 {
    90_000 + (partkey / 10) % 20_001 + 100 * (partkey % 1_000)
}

/// One generated line of an order.
#[derive(Debug, Default, Clone, Copy)]
struct Line {
    partkey: i32,
    suppkey: i32,
    quantity: i32,
    discount: i32,
    tax: i32,
    extended_price: i64,
    revenue: i64,
    supply_cost: i64,
    commit_date: i32,
    ship_mode: u8,
}

/// One generated order with its lines.
#[derive(Debug, Default, Clone, Copy)]
struct Order {
    key: i64,
    custkey: i32,
    order_date: i32,
    priority: u8,
    total_price: i64,
    line_count: usize,
    lines: [Line; MAX_LINES],
}

/// What orders are drawn from: table sizes and dates.
struct OrderDomain<'a> {
    seed: u64,
    /// Customers that place orders (keys not divisible by 3).
    live_customers: usize,
    parts: usize,
    suppliers: usize,
    /// `d_datekey` by day number from [`FIRST_DAY`].
    datekeys: &'a [i32],
    /// Day number of the last order date.
    last_order_day: usize,
}

impl OrderDomain<'_> {
    /// The random stream of order `index` (0-based) and its line count, the
    /// stream's first draw.
    fn order_stream(&self, index: usize) -> (SmallRng, usize) {
        let mut rng = stream_rng(self.seed, STREAM_ORDER, index);
        let lines = rng.random_range(1..=MAX_LINES);
        (rng, lines)
    }

    /// Generates order `index` (0-based; its key is `index + 1`).
    fn order(&self, index: usize, order: &mut Order) {
        let (mut rng, line_count) = self.order_stream(index);
        let day = rng.random_range(0..=self.last_order_day);
        // The k-th customer key not divisible by 3: 1, 2, 4, 5, 7, …
        let live = rng.random_range(0..self.live_customers);
        order.key = index as i64 + 1;
        order.custkey = (live / 2 * 3 + live % 2 + 1) as i32;
        order.order_date = self.datekeys[day];
        order.priority = rng.random_range(0..PRIORITIES.len()) as u8;
        order.line_count = line_count;
        order.total_price = 0;
        for line in &mut order.lines[..line_count] {
            let partkey = rng.random_range(1..=self.parts) as i64;
            let price = retail_price(partkey);
            line.partkey = partkey as i32;
            line.suppkey = rng.random_range(1..=self.suppliers) as i32;
            line.quantity = rng.random_range(1..=50);
            line.discount = rng.random_range(0..=10);
            line.tax = rng.random_range(0..=8);
            line.commit_date = self.datekeys[day + rng.random_range(COMMIT_DELAY)];
            line.ship_mode = rng.random_range(0..SHIP_MODES.len()) as u8;
            line.extended_price = price * i64::from(line.quantity);
            line.revenue = line.extended_price * (100 - i64::from(line.discount)) / 100;
            line.supply_cost = 6 * price / 10;
            order.total_price += line.revenue * (100 + i64::from(line.tax)) / 100;
        }
    }
}

/// Where `lineorder`'s blocks start: every block but the last holds exactly
/// [`DEFAULT_BLOCK_ROWS`] lines, so an order may span two blocks.
struct LineorderLayout {
    /// Per block: its first order and how many of that order's lines the
    /// previous block holds.
    block_starts: Vec<(usize, usize)>,
    total_lines: usize,
}

impl LineorderLayout {
    fn new(ctx: &Context, domain: &OrderDomain<'_>) -> Result<Self> {
        let tasks = ctx.orders.div_ceil(COUNT_TASK_ORDERS);
        let counts = run_tasks(tasks, ctx.threads, |task| {
            let start = task * COUNT_TASK_ORDERS;
            let end = ctx.orders.min(start + COUNT_TASK_ORDERS);
            Ok((start..end)
                .map(|o| domain.order_stream(o).1 as u8)
                .collect::<Vec<u8>>())
        })?;
        let mut block_starts = vec![(0, 0)];
        let mut total_lines = 0;
        for (o, &lines) in counts.iter().flatten().enumerate() {
            let lines = usize::from(lines);
            let next_boundary = block_starts.len() * DEFAULT_BLOCK_ROWS;
            if total_lines + lines > next_boundary {
                block_starts.push((o, next_boundary - total_lines));
            }
            total_lines += lines;
        }
        Ok(LineorderLayout {
            block_starts,
            total_lines,
        })
    }
}

/// Column buffers of one `lineorder` block.
struct LineorderColumns {
    orderkey: Vec<i64>,
    linenumber: Vec<i32>,
    custkey: Vec<i32>,
    partkey: Vec<i32>,
    suppkey: Vec<i32>,
    orderdate: Vec<i32>,
    orderpriority: Vec<u8>,
    quantity: Vec<i32>,
    extendedprice: Vec<i64>,
    ordtotalprice: Vec<i64>,
    discount: Vec<i32>,
    revenue: Vec<i64>,
    supplycost: Vec<i64>,
    tax: Vec<i32>,
    commitdate: Vec<i32>,
    shipmode: Vec<u8>,
}

impl LineorderColumns {
    fn with_capacity(rows: usize) -> Self {
        LineorderColumns {
            orderkey: Vec::with_capacity(rows),
            linenumber: Vec::with_capacity(rows),
            custkey: Vec::with_capacity(rows),
            partkey: Vec::with_capacity(rows),
            suppkey: Vec::with_capacity(rows),
            orderdate: Vec::with_capacity(rows),
            orderpriority: Vec::with_capacity(rows),
            quantity: Vec::with_capacity(rows),
            extendedprice: Vec::with_capacity(rows),
            ordtotalprice: Vec::with_capacity(rows),
            discount: Vec::with_capacity(rows),
            revenue: Vec::with_capacity(rows),
            supplycost: Vec::with_capacity(rows),
            tax: Vec::with_capacity(rows),
            commitdate: Vec::with_capacity(rows),
            shipmode: Vec::with_capacity(rows),
        }
    }

    fn push(&mut self, order: &Order, line_index: usize) {
        let line = &order.lines[line_index];
        self.orderkey.push(order.key);
        self.linenumber.push(line_index as i32 + 1);
        self.custkey.push(order.custkey);
        self.partkey.push(line.partkey);
        self.suppkey.push(line.suppkey);
        self.orderdate.push(order.order_date);
        self.orderpriority.push(order.priority);
        self.quantity.push(line.quantity);
        self.extendedprice.push(line.extended_price);
        self.ordtotalprice.push(order.total_price);
        self.discount.push(line.discount);
        self.revenue.push(line.revenue);
        self.supplycost.push(line.supply_cost);
        self.tax.push(line.tax);
        self.commitdate.push(line.commit_date);
        self.shipmode.push(line.ship_mode);
    }

    fn into_batch(self, schema: &SchemaRef) -> Result<RecordBatch> {
        let rows = self.orderkey.len();
        let pick = |values: &[u8], names: &[&'static str]| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(
                values.iter().map(|&v| names[usize::from(v)]),
            ))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(self.orderkey)),
            Arc::new(Int32Array::from(self.linenumber)),
            Arc::new(Int32Array::from(self.custkey)),
            Arc::new(Int32Array::from(self.partkey)),
            Arc::new(Int32Array::from(self.suppkey)),
            Arc::new(Int32Array::from(self.orderdate)),
            pick(&self.orderpriority, &PRIORITIES),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                "0", rows,
            ))),
            Arc::new(Int32Array::from(self.quantity)),
            Arc::new(Int64Array::from(self.extendedprice)),
            Arc::new(Int64Array::from(self.ordtotalprice)),
            Arc::new(Int32Array::from(self.discount)),
            Arc::new(Int64Array::from(self.revenue)),
            Arc::new(Int64Array::from(self.supplycost)),
            Arc::new(Int32Array::from(self.tax)),
            Arc::new(Int32Array::from(self.commitdate)),
            pick(&self.shipmode, &SHIP_MODES),
        ];
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

fn lineorder_table(ctx: &Context) -> Result<Table> {
    let datekeys: Vec<i32> = calendar().iter().map(Day::datekey).collect();
    let last_order_day =
        usize::try_from(days_from_civil(LAST_ORDER_DAY) - days_from_civil(FIRST_DAY))
            .map_err(|_| StorageError::Internal("last order date precedes the first".into()))?;
    if last_order_day + COMMIT_DELAY.end() >= datekeys.len() {
        return Err(StorageError::Internal(
            "commit dates would fall outside the date table".into(),
        ));
    }
    let domain = OrderDomain {
        seed: ctx.seed,
        live_customers: ctx.customers - ctx.customers / 3,
        parts: ctx.parts,
        suppliers: ctx.suppliers,
        datekeys: &datekeys,
        last_order_day,
    };
    let layout = LineorderLayout::new(ctx, &domain)?;
    let schema = lineorder_schema();
    let blocks = run_tasks(layout.block_starts.len(), ctx.threads, |block| {
        let (start, end) = block_range(block, layout.total_lines);
        let rows = end - start;
        let (mut index, mut skip) = layout.block_starts[block];
        let mut columns = LineorderColumns::with_capacity(rows);
        let mut order = Order::default();
        while columns.orderkey.len() < rows {
            if index >= ctx.orders {
                return Err(StorageError::Internal(
                    "lineorder block runs past the last order".into(),
                ));
            }
            domain.order(index, &mut order);
            let take = order.line_count.min(skip + rows - columns.orderkey.len());
            for line in skip..take {
                columns.push(&order, line);
            }
            index += 1;
            skip = 0;
        }
        columns.into_batch(&schema)
    })?;
    Table::new("lineorder", schema, blocks)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Int32Type, Int64Type};

    use super::*;

    const SEED: u64 = 42;

    fn table<'a>(tables: &'a [Table], name: &str) -> &'a Table {
        tables
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no table {name}"))
    }

    fn column_index(t: &Table, column: &str) -> usize {
        t.schema()
            .index_of(column)
            .unwrap_or_else(|_| panic!("no column {column} in {}", t.name()))
    }

    fn ints(t: &Table, column: &str) -> Vec<i32> {
        let i = column_index(t, column);
        t.blocks()
            .iter()
            .flat_map(|b| b.column(i).as_primitive::<Int32Type>().values().to_vec())
            .collect()
    }

    fn longs(t: &Table, column: &str) -> Vec<i64> {
        let i = column_index(t, column);
        t.blocks()
            .iter()
            .flat_map(|b| b.column(i).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    fn strings(t: &Table, column: &str) -> Vec<String> {
        let i = column_index(t, column);
        t.blocks()
            .iter()
            .flat_map(|b| {
                b.column(i)
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.expect("no NULLs").to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn small() -> Vec<Table> {
        generate(0.01, SEED, 2).expect("generate SF 0.01")
    }

    #[test]
    fn tables_and_row_counts() {
        let tables = small();
        let names: Vec<&str> = tables.iter().map(|t| t.name()).collect();
        assert_eq!(names, TABLES);
        assert_eq!(table(&tables, "date").num_rows(), 2556);
        assert_eq!(table(&tables, "customer").num_rows(), 300);
        assert_eq!(table(&tables, "supplier").num_rows(), 20);
        assert_eq!(table(&tables, "part").num_rows(), 2000);
        let lineorder = table(&tables, "lineorder");
        let orders: HashSet<i64> = longs(lineorder, "lo_orderkey").into_iter().collect();
        assert_eq!(orders.len(), 15_000);
        assert_eq!(orders.iter().min(), Some(&1));
        assert_eq!(orders.iter().max(), Some(&15_000));
        // 1–7 lines per order, about 4 on average.
        let rows = lineorder.num_rows();
        assert!((57_000..63_000).contains(&rows), "{rows} lineorder rows");
        for t in &tables {
            for field in t.schema().fields() {
                assert!(!field.is_nullable(), "{}.{}", t.name(), field.name());
            }
            assert!(t
                .blocks()
                .iter()
                .all(|b| b.num_rows() <= DEFAULT_BLOCK_ROWS));
        }
    }

    #[test]
    fn scale_factor_sizes() {
        let sizes = |sf: f64| {
            let c = Context::new(sf, 0, 1).expect("valid scale");
            (c.customers, c.suppliers, c.parts, c.orders)
        };
        assert_eq!(sizes(1.0), (30_000, 2_000, 200_000, 1_500_000));
        assert_eq!(sizes(2.0), (60_000, 4_000, 400_000, 3_000_000));
        assert_eq!(sizes(3.0), (90_000, 6_000, 400_000, 4_500_000));
        assert_eq!(sizes(10.0), (300_000, 20_000, 800_000, 15_000_000));
        assert_eq!(sizes(0.1), (3_000, 200, 20_000, 150_000));
        assert_eq!(sizes(1e-9), (1, 1, 1, 1));
    }

    #[test]
    fn invalid_scale_factors_are_rejected() {
        for sf in [0.0, -1.0, f64::NAN, f64::INFINITY, 1000.5] {
            assert!(
                matches!(generate(sf, SEED, 1), Err(StorageError::InvalidArgument(_))),
                "scale {sf}"
            );
        }
    }

    #[test]
    fn lineorder_blocks_are_full_and_orders_complete() {
        // SF 0.05: about 300,000 lines, several blocks.
        let ctx = Context::new(0.05, SEED, 3).expect("valid scale");
        let lineorder = lineorder_table(&ctx).expect("lineorder");
        let blocks = lineorder.blocks();
        assert!(blocks.len() > 3);
        for b in &blocks[..blocks.len() - 1] {
            assert_eq!(b.num_rows(), DEFAULT_BLOCK_ROWS);
        }
        let keys = longs(&lineorder, "lo_orderkey");
        let lines = ints(&lineorder, "lo_linenumber");
        let total = longs(&lineorder, "lo_ordtotalprice");
        let revenue = longs(&lineorder, "lo_revenue");
        let tax = ints(&lineorder, "lo_tax");
        let custkey = ints(&lineorder, "lo_custkey");
        let orderdate = ints(&lineorder, "lo_orderdate");
        let mut i = 0;
        let mut expected_key = 1;
        while i < keys.len() {
            assert_eq!(keys[i], expected_key, "orders are dense and in order");
            let mut j = i;
            let mut sum = 0;
            while j < keys.len() && keys[j] == keys[i] {
                assert_eq!(lines[j] as usize, j - i + 1, "line numbers are 1, 2, …");
                assert_eq!(total[j], total[i]);
                assert_eq!(custkey[j], custkey[i]);
                assert_eq!(orderdate[j], orderdate[i]);
                sum += revenue[j] * (100 + i64::from(tax[j])) / 100;
                j += 1;
            }
            assert!((1..=7).contains(&(j - i)));
            assert_eq!(total[i], sum, "lo_ordtotalprice of order {}", keys[i]);
            expected_key += 1;
            i = j;
        }
        assert_eq!(expected_key - 1, ctx.orders as i64);
    }

    #[test]
    fn value_domains() {
        let tables = small();
        let lineorder = table(&tables, "lineorder");
        let quantity = ints(lineorder, "lo_quantity");
        let discount = ints(lineorder, "lo_discount");
        let tax = ints(lineorder, "lo_tax");
        let partkey = ints(lineorder, "lo_partkey");
        let extended = longs(lineorder, "lo_extendedprice");
        let revenue = longs(lineorder, "lo_revenue");
        let supplycost = longs(lineorder, "lo_supplycost");
        assert!(quantity.iter().all(|q| (1..=50).contains(q)));
        assert!(discount.iter().all(|d| (0..=10).contains(d)));
        assert!(tax.iter().all(|t| (0..=8).contains(t)));
        // Every value of each domain occurs.
        for (values, domain) in [(&quantity, 1..=50), (&discount, 0..=10), (&tax, 0..=8)] {
            let seen: HashSet<i32> = values.iter().copied().collect();
            assert_eq!(seen.len(), domain.count());
        }
        for i in 0..partkey.len() {
            let price = retail_price(i64::from(partkey[i]));
            assert_eq!(extended[i], price * i64::from(quantity[i]));
            assert_eq!(
                revenue[i],
                extended[i] * (100 - i64::from(discount[i])) / 100
            );
            assert_eq!(supplycost[i], 6 * price / 10);
        }
        let priorities: HashSet<String> =
            strings(lineorder, "lo_orderpriority").into_iter().collect();
        assert_eq!(
            priorities,
            PRIORITIES.iter().map(|s| s.to_string()).collect()
        );
        let modes: HashSet<String> = strings(lineorder, "lo_shipmode").into_iter().collect();
        assert_eq!(modes, SHIP_MODES.iter().map(|s| s.to_string()).collect());
        assert!(strings(lineorder, "lo_shippriority")
            .iter()
            .all(|s| s == "0"));
        assert!(ints(lineorder, "lo_custkey").iter().all(|c| c % 3 != 0));

        let part = table(&tables, "part");
        assert!(ints(part, "p_size").iter().all(|s| (1..=50).contains(s)));
        let mfgr = strings(part, "p_mfgr");
        let category = strings(part, "p_category");
        let brand = strings(part, "p_brand1");
        let name = strings(part, "p_name");
        let color = strings(part, "p_color");
        for i in 0..mfgr.len() {
            assert!(category[i].starts_with(&mfgr[i]));
            assert!(brand[i].starts_with(&category[i]));
            let n: u32 = brand[i][category[i].len()..].parse().expect("brand number");
            assert!((1..=40).contains(&n));
            assert!(name[i].starts_with(&format!("{} ", color[i])));
        }
        assert_eq!(mfgr.iter().collect::<HashSet<_>>().len(), 5);
        assert_eq!(category.iter().collect::<HashSet<_>>().len(), 25);
        assert_eq!(brand.iter().collect::<HashSet<_>>().len(), 1000);

        let customer = table(&tables, "customer");
        let nations: HashMap<&str, &str> = NATIONS.iter().map(|(n, r)| (*n, REGIONS[*r])).collect();
        let cities = strings(customer, "c_city");
        let c_nation = strings(customer, "c_nation");
        let c_region = strings(customer, "c_region");
        let phones = strings(customer, "c_phone");
        for i in 0..cities.len() {
            assert_eq!(nations[c_nation[i].as_str()], c_region[i]);
            assert_eq!(cities[i].len(), 10);
            assert!(c_nation[i].starts_with(cities[i][..9].trim_end()));
            assert_eq!(phones[i].len(), 15);
        }
        assert!(strings(customer, "c_address")
            .iter()
            .all(|a| (10..=40).contains(&a.len())));
        assert_eq!(strings(customer, "c_name")[0], "Customer#000000001");
        assert_eq!(
            strings(table(&tables, "supplier"), "s_name")[19],
            "Supplier#000000020"
        );
    }

    #[test]
    fn foreign_keys_reference_existing_rows() {
        let tables = small();
        let lineorder = table(&tables, "lineorder");
        let keys =
            |t: &str, c: &str| -> HashSet<i32> { ints(table(&tables, t), c).into_iter().collect() };
        let checks = [
            ("lo_custkey", keys("customer", "c_custkey")),
            ("lo_partkey", keys("part", "p_partkey")),
            ("lo_suppkey", keys("supplier", "s_suppkey")),
            ("lo_orderdate", keys("date", "d_datekey")),
            ("lo_commitdate", keys("date", "d_datekey")),
        ];
        for (column, referenced) in &checks {
            let values = ints(lineorder, column);
            assert!(values.iter().all(|v| referenced.contains(v)), "{column}");
        }
        // Commit dates are 30–90 days after the order date, orders end 1998-08-02.
        let index: HashMap<i32, usize> = ints(table(&tables, "date"), "d_datekey")
            .into_iter()
            .enumerate()
            .map(|(i, k)| (k, i))
            .collect();
        let order = ints(lineorder, "lo_orderdate");
        let commit = ints(lineorder, "lo_commitdate");
        for (o, c) in order.iter().zip(&commit) {
            assert!(COMMIT_DELAY.contains(&(index[c] - index[o])));
            assert!(*o <= 19980802 && *o >= 19920101);
        }
        let years: HashSet<i32> = order.iter().map(|d| d / 10_000).collect();
        assert_eq!(years, (1992..=1998).collect());
    }

    #[test]
    fn date_table_follows_the_calendar() {
        let date = date_table().expect("date");
        let keys = ints(&date, "d_datekey");
        assert_eq!(keys.first(), Some(&19920101));
        assert_eq!(keys.last(), Some(&19981230));
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let row = keys
            .iter()
            .position(|&k| k == 19971201)
            .expect("1997-12-01");
        assert_eq!(strings(&date, "d_date")[row], "December 1, 1997");
        assert_eq!(strings(&date, "d_dayofweek")[row], "Monday");
        assert_eq!(strings(&date, "d_month")[row], "December");
        assert_eq!(strings(&date, "d_yearmonth")[row], "Dec1997");
        assert_eq!(strings(&date, "d_sellingseason")[row], "Christmas");
        assert_eq!(ints(&date, "d_year")[row], 1997);
        assert_eq!(ints(&date, "d_yearmonthnum")[row], 199712);
        assert_eq!(ints(&date, "d_daynuminweek")[row], 2);
        assert_eq!(ints(&date, "d_daynuminmonth")[row], 1);
        assert_eq!(ints(&date, "d_daynuminyear")[row], 335);
        assert_eq!(ints(&date, "d_monthnuminyear")[row], 12);
        assert_eq!(ints(&date, "d_weeknuminyear")[row], 48);
        assert_eq!(ints(&date, "d_weekdayfl")[row], 1);
        assert_eq!(ints(&date, "d_lastdayinweekfl")[row], 0);
        assert_eq!(ints(&date, "d_lastdayinmonthfl")[row], 0);
        assert_eq!(ints(&date, "d_holidayfl")[row], 0);
        assert_eq!(strings(&date, "d_dayofweek")[0], "Wednesday");
        // 1992-02-29 (leap day) is the last of its month.
        let leap = keys.iter().position(|&k| k == 19920229).expect("leap day");
        assert_eq!(ints(&date, "d_lastdayinmonthfl")[leap], 1);
        assert_eq!(keys[leap + 1], 19920301);
        // Saturdays end weeks; weekdays are Monday to Friday.
        let dow = strings(&date, "d_dayofweek");
        let last_in_week = ints(&date, "d_lastdayinweekfl");
        let weekday = ints(&date, "d_weekdayfl");
        for i in 0..dow.len() {
            assert_eq!(last_in_week[i] == 1, dow[i] == "Saturday");
            assert_eq!(weekday[i] == 0, dow[i] == "Saturday" || dow[i] == "Sunday");
        }
        // Week 6 of 1994 has seven days (Q1.3).
        let weeks = ints(&date, "d_weeknuminyear");
        let years = ints(&date, "d_year");
        let week6 = (0..keys.len())
            .filter(|&i| years[i] == 1994 && weeks[i] == 6)
            .count();
        assert_eq!(week6, 7);
        let holidays = ints(&date, "d_holidayfl")
            .iter()
            .filter(|&&h| h == 1)
            .count();
        assert_eq!(holidays, 7 * 10);
    }

    #[test]
    fn query_literals_occur() {
        let tables = small();
        let has = |t: &str, c: &str, v: &str| strings(table(&tables, t), c).iter().any(|s| s == v);
        for city in ["UNITED KI1", "UNITED KI5", "UNITED ST0", "PERU     9"] {
            assert!(has("customer", "c_city", city), "c_city {city}");
        }
        for region in REGIONS {
            assert!(has("customer", "c_region", region));
            assert!(has("supplier", "s_region", region));
        }
        assert!(has("customer", "c_nation", "UNITED STATES"));
        for brand in [
            "MFGR#2239",
            "MFGR#2221",
            "MFGR#2228",
            "MFGR#121",
            "MFGR#5540",
        ] {
            assert!(has("part", "p_brand1", brand), "p_brand1 {brand}");
        }
        assert!(has("part", "p_category", "MFGR#12"));
        assert!(has("part", "p_category", "MFGR#14"));
        assert!(has("part", "p_mfgr", "MFGR#1"));
        assert!(has("date", "d_yearmonth", "Dec1997"));

        // With 250 suppliers every city occurs.
        let ctx = Context::new(0.125, SEED, 2).expect("valid scale");
        let supplier = supplier_table(&ctx).expect("supplier");
        let cities: HashSet<String> = strings(&supplier, "s_city").into_iter().collect();
        assert_eq!(cities.len(), 250);
        assert!(cities.contains("UNITED KI1") && cities.contains("UNITED KI5"));

        // The flight 1 predicates select rows.
        let lineorder = table(&tables, "lineorder");
        let quantity = ints(lineorder, "lo_quantity");
        let discount = ints(lineorder, "lo_discount");
        let date = ints(lineorder, "lo_orderdate");
        let q11 = (0..quantity.len())
            .filter(|&i| {
                date[i] / 10_000 == 1993 && (1..=3).contains(&discount[i]) && quantity[i] < 25
            })
            .count();
        assert!(q11 > 500, "Q1.1 selects {q11} rows");
        let q12 = (0..quantity.len())
            .filter(|&i| {
                date[i] / 100 == 199401
                    && (4..=6).contains(&discount[i])
                    && (26..=35).contains(&quantity[i])
            })
            .count();
        assert!(q12 > 0, "Q1.2 selects no rows");
    }

    #[test]
    fn stratification_covers_every_combination() {
        let mut rng = SmallRng::seed_from_u64(7);
        let radices = [5, 5, 10];
        let triples = stratified(&mut rng, radices);
        assert_eq!(triples.len(), 250);
        assert_eq!(triples.iter().collect::<HashSet<_>>().len(), 250);
        for group in triples.chunks(5) {
            assert_eq!(group.iter().map(|t| t[0]).collect::<HashSet<_>>().len(), 5);
        }
        for run in triples.chunks(25) {
            assert_eq!(
                run.iter()
                    .map(|t| (t[0], t[1]))
                    .collect::<HashSet<_>>()
                    .len(),
                25
            );
        }
        let geo = Geography::new().expect("geography");
        let mut all: Vec<usize> = geo.nations_by_region.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..25).collect::<Vec<_>>());
        assert_eq!(COLORS.iter().collect::<HashSet<_>>().len(), 92);
        assert_eq!(PartVocabulary::new().types.len(), 150);
        assert_eq!(PartVocabulary::new().containers.len(), 40);
    }

    #[test]
    fn deterministic_for_a_seed_and_independent_of_threads() {
        let a = generate(0.02, SEED, 1).expect("generate");
        let b = generate(0.02, SEED, 4).expect("generate");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.name(), y.name());
            assert_eq!(x.blocks().len(), y.blocks().len());
            for (bx, by) in x.blocks().iter().zip(y.blocks().iter()) {
                assert_eq!(bx, by, "table {}", x.name());
            }
        }
        let c = generate(0.02, SEED + 1, 4).expect("generate");
        for name in ["customer", "supplier", "part", "lineorder"] {
            assert_ne!(
                table(&a, name).blocks()[0],
                table(&c, name).blocks()[0],
                "table {name} ignores the seed"
            );
        }
        // The date table does not depend on the seed.
        assert_eq!(table(&a, "date").blocks()[0], table(&c, "date").blocks()[0]);
    }

    /// Generation time at SF 1: `cargo test -p stride-storage ssb -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn timing_sf1() {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let start = std::time::Instant::now();
        let tables = generate(1.0, SEED, threads).expect("generate SF 1");
        let elapsed = start.elapsed();
        for t in &tables {
            println!(
                "{:>10}: {:>9} rows, {:>6} MiB",
                t.name(),
                t.num_rows(),
                t.memory_size() >> 20
            );
        }
        println!("SSB SF 1 with {threads} threads: {elapsed:?}");
        assert!(table(&tables, "lineorder").num_rows() > 5_900_000);
        assert!(table(&tables, "lineorder")
            .blocks()
            .first()
            .is_some_and(|b| b.column(0).len() == DEFAULT_BLOCK_ROWS));
    }
}
