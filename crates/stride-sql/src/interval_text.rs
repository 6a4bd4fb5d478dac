//! PostgreSQL's interval input, read into the form Arrow's interval parser
//! takes.
//!
//! Arrow reads `N unit` pairs (`1 year 2 mons 3 days`, abbreviations
//! included). PostgreSQL also writes — and its clients send back — a clock
//! part and the verbose form:
//!
//! | PostgreSQL                 | read as                                    |
//! |----------------------------|--------------------------------------------|
//! | `1 day 02:03:04.5`         | `1 day 2 hours 3 minutes 4.5 seconds`      |
//! | `-1 days +02:00`           | `-1 days 2 hours 0 minutes`                |
//! | `-02:03`                   | `-2 hours -3 minutes`                      |
//! | `@ 1 day 2 hours ago`      | `-1 day -2 hours`                          |
//!
//! A clock part is `[+|-]H:MM[:SS[.f]]`; its sign applies to each of its
//! fields. `ago` negates every field. Text Arrow cannot read either way is
//! an error of its own (PostgreSQL's SQLSTATE 22007), never a wrong value.

use arrow::compute::kernels::cast_utils::parse_interval_month_day_nano;

/// `text` as Arrow's parser is to read it: unchanged when it reads it
/// already, else [`normalize`]d. The one entry point for interval text
/// (literals in `pg_compat`, parameters and COPY data in the server).
pub fn for_arrow(text: &str) -> Result<std::borrow::Cow<'_, str>, String> {
    if needs_normalizing(text) {
        normalize(text).map(std::borrow::Cow::Owned)
    } else {
        Ok(std::borrow::Cow::Borrowed(text))
    }
}

/// `text` in the form Arrow's parser reads, checked by that parser; the
/// error is PostgreSQL's message.
pub fn normalize(text: &str) -> Result<String, String> {
    let invalid = || format!("invalid input syntax for type interval: \"{text}\"");
    let mut words: Vec<&str> = text.split_whitespace().collect();
    if words.first() == Some(&"@") {
        words.remove(0);
    } else if let Some(rest) = words.first().and_then(|w| w.strip_prefix('@')) {
        words[0] = rest;
    }
    let ago = words.last().is_some_and(|w| w.eq_ignore_ascii_case("ago"));
    if ago {
        words.pop();
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        if word.contains(':') {
            fields.extend(clock(word).ok_or_else(invalid)?);
            i += 1;
        } else {
            // A number and its unit, as two words or one (`3days`).
            let split = word
                .find(|c: char| c.is_ascii_alphabetic())
                .filter(|&at| at > 0);
            match split {
                Some(at) => {
                    fields.push((word[..at].to_string(), word[at..].to_string()));
                    i += 1;
                }
                None => {
                    let unit = words.get(i + 1).ok_or_else(invalid)?;
                    fields.push((word.to_string(), unit.to_string()));
                    i += 2;
                }
            }
        }
    }
    if fields.is_empty() {
        return Err(invalid());
    }
    let out = fields
        .into_iter()
        .map(|(number, unit)| {
            // Arrow reads no `+` (PostgreSQL prints one after a negative
            // field: `-1 mons +2 days`).
            let number = number.strip_prefix('+').unwrap_or(&number);
            let number = if ago {
                negated(number)
            } else {
                number.to_string()
            };
            format!("{number} {unit}")
        })
        .collect::<Vec<_>>()
        .join(" ");
    parse_interval_month_day_nano(&out).map_err(|_| invalid())?;
    Ok(out)
}

/// Whether `text` needs [`normalize`] (Arrow's parser does not read it as
/// it is).
fn needs_normalizing(text: &str) -> bool {
    parse_interval_month_day_nano(text).is_err()
}

/// `[+|-]H:MM[:SS[.f]]` as hours, minutes and seconds, each with the
/// clock's sign.
fn clock(word: &str) -> Option<Vec<(String, String)>> {
    let (sign, rest) = match word.as_bytes().first()? {
        b'-' => ("-", &word[1..]),
        b'+' => ("", &word[1..]),
        _ => ("", word),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let whole = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !whole(parts[0]) || !whole(parts[1]) {
        return None;
    }
    let mut out = vec![
        (format!("{sign}{}", parts[0]), "hours".to_string()),
        (format!("{sign}{}", parts[1]), "minutes".to_string()),
    ];
    if let Some(seconds) = parts.get(2) {
        let (int, frac) = seconds.split_once('.').unwrap_or((seconds, ""));
        if !whole(int) || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        out.push((format!("{sign}{seconds}"), "seconds".to_string()));
    }
    Some(out)
}

fn negated(number: &str) -> String {
    match number.strip_prefix('-') {
        Some(positive) => positive.to_string(),
        None => format!("-{number}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::IntervalMonthDayNano;

    fn value(text: &str) -> IntervalMonthDayNano {
        parse_interval_month_day_nano(&normalize(text).unwrap()).unwrap()
    }

    const HOUR: i64 = 3_600_000_000_000;
    const MINUTE: i64 = 60_000_000_000;
    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn reads_postgres_output_back() {
        // What Stride (and PostgreSQL) print, read back to the same value.
        assert_eq!(
            value("1 year 2 mons 3 days 04:05:06.5"),
            IntervalMonthDayNano::new(14, 3, 4 * HOUR + 5 * MINUTE + 6 * SECOND + SECOND / 2)
        );
        assert_eq!(
            value("-1 days +02:00:00"),
            IntervalMonthDayNano::new(0, -1, 2 * HOUR)
        );
        assert_eq!(
            value("-3 days -04:05:06"),
            IntervalMonthDayNano::new(0, -3, -(4 * HOUR + 5 * MINUTE + 6 * SECOND))
        );
        assert_eq!(value("00:00:00"), IntervalMonthDayNano::new(0, 0, 0));
        assert_eq!(
            value("-00:00:01.000007"),
            IntervalMonthDayNano::new(0, 0, -SECOND - 7_000)
        );
        assert_eq!(
            value("12:30"),
            IntervalMonthDayNano::new(0, 0, 12 * HOUR + 30 * MINUTE)
        );
    }

    #[test]
    fn reads_the_verbose_form_and_ago() {
        assert_eq!(
            value("@ 1 day 2 hours ago"),
            IntervalMonthDayNano::new(0, -1, -2 * HOUR)
        );
        assert_eq!(value("@1 day"), IntervalMonthDayNano::new(0, 1, 0));
        assert_eq!(value("-2 days ago"), IntervalMonthDayNano::new(0, 2, 0));
        assert_eq!(value("3days"), IntervalMonthDayNano::new(0, 3, 0));
        assert_eq!(
            value("-1 mons +2 days"),
            IntervalMonthDayNano::new(-1, 2, 0)
        );
        assert_eq!(value("+2 days ago"), IntervalMonthDayNano::new(0, -2, 0));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "ago",
            "1",
            "1 fortnight",
            "1:2:3:4",
            "a:b",
            "1:30:xx",
            "1 day 1:",
        ] {
            let e = normalize(bad).unwrap_err();
            assert!(
                e.starts_with("invalid input syntax for type interval"),
                "{bad}: {e}"
            );
        }
        assert!(needs_normalizing("1 day 02:00:00"));
        assert!(!needs_normalizing("1 day 2 hours"));
        assert_eq!(for_arrow("1 day 2 hours").unwrap(), "1 day 2 hours");
        assert!(for_arrow("1 fortnight").is_err());
    }
}
