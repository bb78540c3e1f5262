//! HybridStore's data classification (§III-B): a trace's records of 1 MiB,
//! grouped into classes of like behaviour for the capacity planner.
//! See [`crate::plan`] for the classes.

use std::collections::HashMap;
use tierfs_core::trace::{Kind, Record};

/// Bytes of one record.
pub const RECORD: u64 = 1 << 20;

/// The request-size classes, by the median request size of a record.
pub const SIZE_CLASSES: [&str; 4] = ["random", "partly random", "partly sequential", "sequential"];

fn size_class(len: u64) -> usize {
    match len {
        0..16_384 => 0,
        16_384..=32_768 => 1,
        32_769..=65_536 => 2,
        _ => 3,
    }
}

#[derive(Clone, Copy, Default)]
struct Rec {
    ios: u64,
    read: u64,
    write: u64,
    sizes: [u64; 4],
}

impl Rec {
    fn median_class(&self) -> usize {
        let total: u64 = self.sizes.iter().sum();
        let mut seen = 0;
        for (k, n) in self.sizes.iter().enumerate() {
            seen += n;
            if 2 * seen >= total {
                return k;
            }
        }
        3
    }
}

/// Records of like behaviour.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Class {
    /// None for the cold class; else (size class, reads at least half of
    /// the bytes, request-count quartile 0..=3).
    pub key: Option<(usize, bool, usize)>,
    /// Records in it, bytes (S_j).
    pub bytes: u64,
    /// Requests (IO_j).
    pub ios: u64,
    /// Bytes read (R_j).
    pub read_bytes: u64,
    /// Bytes written (W_j).
    pub write_bytes: u64,
}

impl Class {
    /// For people: `cold`, or `random, reads, Q4`.
    pub fn label(&self) -> String {
        match self.key {
            None => "cold (never touched)".into(),
            Some((s, reads, q)) => {
                format!("{}, {}, Q{}", SIZE_CLASSES[s], if reads { "reads" } else { "writes" }, q + 1)
            }
        }
    }
}

/// A trace, classified.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// The cold class first, then the hot ones that have records.
    pub classes: Vec<Class>,
    /// Reads and writes.
    pub ios: u64,
    /// From the first to the last request, seconds.
    pub seconds: f64,
}

impl Workload {
    /// Bytes of data (all records, touched or not).
    pub fn total_bytes(&self) -> u64 {
        self.classes.iter().map(|c| c.bytes).sum()
    }

    /// Bytes of records some request touched.
    pub fn hot_bytes(&self) -> u64 {
        self.classes.iter().filter(|c| c.key.is_some()).map(|c| c.bytes).sum()
    }

    /// Share of the bytes moved that were read.
    pub fn read_share(&self) -> f64 {
        let r: u64 = self.classes.iter().map(|c| c.read_bytes).sum();
        let w: u64 = self.classes.iter().map(|c| c.write_bytes).sum();
        if r + w == 0 {
            0.0
        } else {
            r as f64 / (r + w) as f64
        }
    }

    /// The trace's length, or the length that makes it issue `iops`
    /// requests per second.
    pub fn scaled_seconds(&self, iops: Option<f64>) -> f64 {
        match iops {
            Some(n) if n > 0.0 => self.ios as f64 / n,
            _ => self.seconds,
        }
    }
}

/// Reads records and classifies them; see the module documentation.
#[derive(Default)]
pub struct Classifier {
    recs: HashMap<(u64, u64), Rec>,
    ios: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl Classifier {
    /// Takes one record (only reads and writes count).
    pub fn push(&mut self, r: &Record) {
        // A request of more than a gigabyte is not one a device serves
        // (a damaged trace): left out rather than walked record by record.
        if !r.kind.is_io() || r.len == 0 || r.len > 1 << 30 {
            return;
        }
        self.ios += 1;
        self.first_ns.get_or_insert(r.time_ns);
        self.last_ns = self.last_ns.max(r.time_ns);
        let class = size_class(r.len);
        let end = r.off.saturating_add(r.len);
        let mut off = r.off;
        // The request counts once, in the record it starts in (a seek is
        // paid once); every record it touches gets its bytes.
        let mut first = true;
        while off < end {
            let k = off / RECORD;
            let piece = (end - off).min(RECORD - off % RECORD);
            let rec = self.recs.entry((r.file, k)).or_default();
            rec.ios += u64::from(first);
            first = false;
            rec.sizes[class] += 1;
            if r.kind == Kind::Write {
                rec.write += piece;
            } else {
                rec.read += piece;
            }
            off += piece;
        }
    }

    /// The classes. `capacity` is the whole data set's size: what the
    /// trace did not touch of it is the cold class (None: only the touched
    /// records). An error when the trace touches more than `capacity`.
    pub fn finish(self, capacity: Option<u64>) -> Result<Workload, String> {
        let hot = self.recs.len() as u64 * RECORD;
        let cold = match capacity {
            Some(c) if c < hot => {
                return Err(format!(
                    "the trace touches {} MiB, more than the capacity given ({} MiB)",
                    hot >> 20,
                    c >> 20
                ))
            }
            Some(c) => c - hot,
            None => 0,
        };
        let mut counts: Vec<u64> = self.recs.values().map(|r| r.ios).collect();
        counts.sort_unstable();
        let q = |p: f64| counts.get(((counts.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0);
        let quartiles = [q(0.25), q(0.5), q(0.75)];
        let mut by_key: HashMap<(usize, bool, usize), Class> = HashMap::new();
        for r in self.recs.values() {
            let quartile = quartiles.iter().filter(|&&t| r.ios > t).count();
            let key = (r.median_class(), r.read >= r.write, quartile);
            let c = by_key.entry(key).or_insert_with(|| Class { key: Some(key), ..Class::default() });
            c.bytes += RECORD;
            c.ios += r.ios;
            c.read_bytes += r.read;
            c.write_bytes += r.write;
        }
        let mut classes = vec![Class { key: None, bytes: cold, ..Class::default() }];
        let mut hot: Vec<Class> = by_key.into_values().collect();
        hot.sort_by_key(|c| c.key);
        classes.extend(hot);
        let seconds = self.first_ns.map_or(0.0, |f| (self.last_ns - f) as f64 / 1e9);
        Ok(Workload { classes, ios: self.ios, seconds })
    }
}

/// Classifies a whole trace.
pub fn classify<I: IntoIterator<Item = Record>>(records: I, capacity: Option<u64>) -> Result<Workload, String> {
    let mut c = Classifier::default();
    for r in records {
        c.push(&r);
    }
    c.finish(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_classed_by_median_size_read_share_and_request_count() {
        let mut recs = Vec::new();
        // Record 0: 4 small reads. Record 1: one big write and two small
        // ones (median small). Record 2: 8 sequential 128 KiB writes.
        for i in 0..4 {
            recs.push(Record::io(i, 1, 1, false, i * 4096, 4096));
        }
        recs.push(Record::io(10, 1, 1, true, RECORD, 200_000));
        recs.push(Record::io(11, 1, 1, true, RECORD, 4096));
        recs.push(Record::io(12, 1, 1, true, RECORD, 4096));
        for i in 0..8 {
            recs.push(Record::io(20 + i, 1, 1, true, 2 * RECORD + i * 131072, 131072));
        }
        let w = classify(recs, Some(10 * RECORD)).unwrap();
        assert_eq!(w.ios, 15);
        assert_eq!(w.classes[0].key, None);
        assert_eq!(w.classes[0].bytes, 7 * RECORD);
        let keys: Vec<_> = w.classes[1..].iter().map(|c| c.key.unwrap()).collect();
        // Request counts 3, 4, 8: quartile marks 4, 4, 8 (nearest rank);
        // a record is in the quartile of the marks it exceeds.
        assert!(keys.contains(&(0, true, 0)), "{keys:?}");
        assert!(keys.contains(&(0, false, 0)), "{keys:?}");
        assert!(keys.contains(&(3, false, 2)), "{keys:?}");
        assert_eq!(w.hot_bytes(), 3 * RECORD);
        assert_eq!(w.total_bytes(), 10 * RECORD);
    }

    #[test]
    fn a_request_across_records_counts_once_and_gives_each_its_bytes() {
        let w = classify([Record::io(0, 1, 1, false, RECORD - 100, 300)], None).unwrap();
        let hot: Vec<_> = w.classes.iter().filter(|c| c.key.is_some()).collect();
        assert_eq!(hot.iter().map(|c| c.ios).sum::<u64>(), 1);
        assert_eq!(w.hot_bytes(), 2 * RECORD);
        assert_eq!(hot.iter().map(|c| c.read_bytes).sum::<u64>(), 300);
    }

    #[test]
    fn a_capacity_smaller_than_what_the_trace_touches_is_an_error() {
        let e = classify([Record::io(0, 1, 1, false, 0, 3 * RECORD)], Some(RECORD)).unwrap_err();
        assert!(e.contains("more than the capacity"), "{e}");
    }
}
