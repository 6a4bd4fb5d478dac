//! Where a query's latency goes, phase by phase, so that a slowdown under
//! load can be attributed: the driver's send delay (arrival → the query's
//! thread runs), planning (parse, bind, optimize, lower), queueing
//! (submission → first task), running (first task → completion of the last
//! task set), waking (completion → the session thread has the result) and
//! the rest (session set-up, result conversion, the driver's bookkeeping).
//!
//! Phases are known only in-process, where the session reports them; over
//! the wire a sample has none. A sample carries its own phases and those of
//! its query's isolated run of median latency, so a breakdown "under load
//! vs. alone" is computed from a run's JSON without anything else.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// One query's measured phases, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    pub planning_ms: f64,
    pub queued_ms: f64,
    pub running_ms: f64,
    pub waking_ms: f64,
    /// Not a phase (not in [`Self::total_ms`]): worker time in the query's
    /// own tasks and finalization steps, summed over workers. Under load
    /// against alone it separates a query that ran slower (caches, memory
    /// bandwidth, the OS) from one that waited for workers.
    pub cpu_ms: f64,
}

impl Phases {
    /// From the engine's report of one query.
    pub fn of(out: &stride_sql::QueryOutput) -> Phases {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let submitted_to_done = ms(out.stats.latency);
        let queued = ms(out.stats.queue_wait).min(submitted_to_done);
        Phases {
            planning_ms: ms(out.planning),
            queued_ms: queued,
            running_ms: submitted_to_done - queued,
            waking_ms: (ms(out.execution) - submitted_to_done).max(0.0),
            cpu_ms: ms(out.stats.cpu_time + out.stats.finalize_time),
        }
    }

    /// Adds another statement's phases (a request of several statements).
    pub fn add(&mut self, o: &Phases) {
        self.planning_ms += o.planning_ms;
        self.queued_ms += o.queued_ms;
        self.running_ms += o.running_ms;
        self.waking_ms += o.waking_ms;
        self.cpu_ms += o.cpu_ms;
    }

    pub fn total_ms(&self) -> f64 {
        self.planning_ms + self.queued_ms + self.running_ms + self.waking_ms
    }

    pub fn to_json(self) -> Value {
        json!({"planning_ms": self.planning_ms, "queued_ms": self.queued_ms,
            "running_ms": self.running_ms, "waking_ms": self.waking_ms,
            "cpu_ms": self.cpu_ms})
    }

    pub fn from_json(v: &Value) -> Option<Phases> {
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        Some(Phases {
            planning_ms: f("planning_ms")?,
            queued_ms: f("queued_ms")?,
            running_ms: f("running_ms")?,
            waking_ms: f("waking_ms")?,
            // Absent from runs recorded before it was measured.
            cpu_ms: f("cpu_ms").unwrap_or(0.0),
        })
    }
}

/// Mean milliseconds per query in each phase, over a set of samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseMeans {
    pub count: usize,
    pub latency_ms: f64,
    /// Arrival until the driver sent the query.
    pub send_ms: f64,
    pub phases: Phases,
    /// Latency not in any phase above.
    pub other_ms: f64,
}

impl PhaseMeans {
    /// The phases, which sum to the latency, then the worker time
    /// (`cpu`, summed over workers: not part of the sum).
    pub const COLUMNS: [&'static str; 8] = [
        "latency", "send", "planning", "queued", "running", "waking", "other", "cpu",
    ];

    /// One query: its latency, send delay and phases; `other` is the rest.
    pub fn one(latency_ms: f64, send_ms: f64, phases: Phases) -> PhaseMeans {
        PhaseMeans {
            count: 1,
            latency_ms,
            send_ms,
            phases,
            other_ms: latency_ms - send_ms - phases.total_ms(),
        }
    }

    /// The columns of [`Self::COLUMNS`], in order.
    pub fn values(&self) -> [f64; 8] {
        let p = &self.phases;
        [
            self.latency_ms,
            self.send_ms,
            p.planning_ms,
            p.queued_ms,
            p.running_ms,
            p.waking_ms,
            self.other_ms,
            p.cpu_ms,
        ]
    }

    fn from_values(count: usize, v: [f64; 8]) -> PhaseMeans {
        PhaseMeans {
            count,
            latency_ms: v[0],
            send_ms: v[1],
            phases: Phases {
                planning_ms: v[2],
                queued_ms: v[3],
                running_ms: v[4],
                waking_ms: v[5],
                cpu_ms: v[7],
            },
            other_ms: v[6],
        }
    }

    /// Sums of `self` and `o` (counts add up).
    fn sum(&self, o: &PhaseMeans) -> PhaseMeans {
        let (a, b) = (self.values(), o.values());
        PhaseMeans::from_values(self.count + o.count, std::array::from_fn(|i| a[i] + b[i]))
    }

    /// Sums divided by the count.
    fn mean(&self) -> PhaseMeans {
        let n = self.count.max(1) as f64;
        PhaseMeans::from_values(self.count, self.values().map(|x| x / n))
    }

    pub fn to_json(self) -> Value {
        let mut v = json!({"count": self.count, "latency_ms": self.latency_ms,
            "send_ms": self.send_ms, "other_ms": self.other_ms});
        if let (Value::Object(m), Value::Object(p)) = (&mut v, self.phases.to_json()) {
            m.extend(p);
        }
        v
    }
}

/// Per class: the mean phases under load and, for the same queries, alone
/// (the isolated run of median latency; its send delay is 0 by definition).
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    pub classes: BTreeMap<String, (PhaseMeans, PhaseMeans)>,
}

impl Breakdown {
    /// From a run's JSON: measured, successful samples that carry phases
    /// (and isolated phases) only.
    pub fn of_run(run: &Value) -> Breakdown {
        // Per class: sums under load and alone.
        let mut sums: BTreeMap<String, (PhaseMeans, PhaseMeans)> = BTreeMap::new();
        for s in run
            .get("samples")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if s.get("warmup").and_then(Value::as_bool).unwrap_or(false)
                || s.get("error").is_some_and(|e| !e.is_null())
            {
                continue;
            }
            let (Some(class), Some(lat), Some(arrival), Some(start)) = (
                s.get("class").and_then(Value::as_str),
                s.get("latency_ms").and_then(Value::as_f64),
                s.get("arrival_s").and_then(Value::as_f64),
                s.get("start_s").and_then(Value::as_f64),
            ) else {
                continue;
            };
            let (Some(load), Some(iso), Some(iso_lat)) = (
                s.get("phases").and_then(Phases::from_json),
                s.get("isolated_phases").and_then(Phases::from_json),
                s.get("isolated_ms").and_then(Value::as_f64),
            ) else {
                continue;
            };
            let send = ((start - arrival) * 1e3).max(0.0);
            let (l, i) = (
                PhaseMeans::one(lat, send, load),
                PhaseMeans::one(iso_lat, 0.0, iso),
            );
            sums.entry(class.to_string())
                .and_modify(|(sl, si)| (*sl, *si) = (sl.sum(&l), si.sum(&i)))
                .or_insert((l, i));
        }
        Breakdown {
            classes: sums
                .into_iter()
                .map(|(c, (l, i))| (c, (l.mean(), i.mean())))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (c, (load, iso)) in &self.classes {
            m.insert(
                c.clone(),
                json!({"under_load": load.to_json(), "isolated": iso.to_json()}),
            );
        }
        Value::Object(m)
    }

    /// A plain-text table: per class, mean ms under load, alone, and the
    /// difference, one column per phase.
    pub fn print(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        write!(out, "{:<20}", "mean ms per query")?;
        for c in PhaseMeans::COLUMNS {
            write!(out, " {c:>9}")?;
        }
        writeln!(out)?;
        for (class, (load, iso)) in &self.classes {
            let (l, i) = (load.values(), iso.values());
            for (label, v) in [
                (format!("{class} (n={})", load.count), l),
                (format!("{class} alone"), i),
                (
                    format!("{class} +load"),
                    std::array::from_fn(|k| l[k] - i[k]),
                ),
            ] {
                write!(out, "{label:<20}")?;
                for x in v {
                    write!(out, " {x:>9.2}")?;
                }
                writeln!(out)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(class: &str, lat: f64, send_ms: f64, p: Phases, iso: Phases, warm: bool) -> Value {
        json!({"class": class, "query": "q1", "latency_ms": lat, "arrival_s": 1.0,
            "start_s": 1.0 + send_ms / 1e3, "isolated_ms": iso.total_ms() + 1.0,
            "phases": p.to_json(), "isolated_phases": iso.to_json(),
            "warmup": warm, "error": null})
    }

    #[test]
    fn breakdown_attributes_the_extra_latency_to_phases() {
        let iso = Phases {
            planning_ms: 4.0,
            queued_ms: 0.1,
            running_ms: 15.0,
            waking_ms: 0.1,
            cpu_ms: 28.0,
        };
        let loaded = Phases {
            planning_ms: 5.0,
            queued_ms: 3.0,
            running_ms: 20.0,
            waking_ms: 1.0,
            cpu_ms: 31.0,
        };
        let run = json!({"samples": [
            sample("short", 31.5, 1.5, loaded, iso, false),
            sample("short", 31.5, 1.5, loaded, iso, false),
            // Warm-up samples and samples without phases are left out.
            sample("short", 900.0, 0.0, loaded, iso, true),
            {"class": "short", "query": "q1", "latency_ms": 500.0, "arrival_s": 1.0,
             "start_s": 1.0, "isolated_ms": 10.0, "warmup": false, "error": null},
        ]});
        let b = Breakdown::of_run(&run);
        let (load, alone) = b.classes["short"];
        assert_eq!(load.count, 2);
        assert!((load.send_ms - 1.5).abs() < 1e-9);
        assert!((load.phases.queued_ms - 3.0).abs() < 1e-9);
        // 31.5 = 1.5 send + 29 in phases + 1 other.
        assert!((load.other_ms - 1.0).abs() < 1e-9);
        // Worker time is reported beside the phases, not among them.
        assert!((load.phases.cpu_ms - 31.0).abs() < 1e-9);
        assert!((alone.phases.cpu_ms - 28.0).abs() < 1e-9);
        assert_eq!(alone.send_ms, 0.0);
        assert!((alone.other_ms - 1.0).abs() < 1e-9);
        let mut text = Vec::new();
        b.print(&mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("short +load"), "{text}");
        assert!(Breakdown::of_run(&json!({})).is_empty());
    }
}
