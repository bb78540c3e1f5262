//! Access traces: the requests a mount saw, a workload generator made or a
//! block trace holds, without file contents. The simulator replays them and
//! the capacity planner analyses them (ARCHITECTURE.md, "Traces").
//!
//! Format version 4 (version 3 without [`Meta::existing_size`], version 2
//! without the kind `stat` either, version 1 without `op` and `phase`
//! either; this build reads them all, and writes version 3 for a trace
//! whose files the trace creates, so that builds that know no files
//! existing before a trace refuse only the traces that have them) is a
//! text header of two lines and then binary records:
//!
//! ```text
//! tierfs-trace 1\n
//! {"source": "...", ...}\n          (Meta, one line of JSON)
//! record*                            (to the end of the file)
//! ```
//!
//! A record is one kind byte followed by five unsigned LEB128 varints:
//! the nanoseconds since the previous record (records are in time order;
//! the first counts from 0), the file, its directory, an offset and a
//! length. A field a kind does not use is 0 and costs one byte. A typical
//! read or write takes 10 to 16 bytes.
//!
//! A file is a number that names the same file for the whole trace;
//! numbers are never reused. A directory is the number of the file's parent
//! directory (1 when the trace has only one).

use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, Write};

/// The first line of every trace, without its version number.
pub const MAGIC: &str = "tierfs-trace";
/// The newest format version this build writes and reads.
pub const VERSION: u32 = 4;
/// The oldest format version this build reads.
pub const OLDEST: u32 = 1;

/// What a trace says about itself (its second line).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Where the requests came from: `mount:/mnt/tier`, `msr:file.csv`,
    /// `blkparse:file.txt`, `synthetic:RW3`, `workload:mail`.
    #[serde(default)]
    pub source: String,
    /// Wall-clock time of the first record, nanoseconds since the Unix
    /// epoch, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_unix_ns: Option<u64>,
    /// Anything else the producer wants a reader to know.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// The directory tree, as `[directory, its parent]` pairs, when the
    /// producer knew it (a workload's recording): a replay needs it to find
    /// the policy directory a file is below.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<[u64; 2]>,
    /// Directories that take a policy of their own in a type-aware
    /// configuration (the mixed workload's `web` and `fs`), with the policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<(u64, String)>,
    /// Application operations the workload counted in its measured phase.
    /// The records of kind `op` hold when each of its steps ended: as many
    /// as this, or more when an operation has several (a mail transaction
    /// reads or appends, then delivers or deletes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    /// The measured run marks where the workload starts its clock
    /// ([`PHASE_RUN`]); a replay times the run from there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub run_clock: bool,
    /// Every file the trace names without a `create` record existed
    /// before it began, this many bytes long, on the HDD (an imported
    /// block trace: its disks' data, cut into files of this size). Without
    /// it such a file is taken to be as long as its requests show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_size: Option<u64>,
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `len` bytes read at `off`.
    Read,
    /// `len` bytes written at `off`.
    Write,
    /// The file was created (or first seen) in `dir`, `len` bytes long.
    Create,
    /// The file's last name is gone.
    Remove,
    /// The size was set to `len` (truncate, fallocate).
    Truncate,
    /// The file was opened; `off` is 1 when for writing.
    Open,
    /// The last handle was closed.
    Close,
    /// The file now lives in directory `dir` (a rename).
    Move,
    /// A step of an application operation ended (a whole-file read, one
    /// half of a mail transaction); file, dir, off and len are 0.
    Op,
    /// A phase of a workload begins: `off` is 0 for the preparation, 1 for
    /// the warm-up, 2 for the measured run, 3 where the measured run's
    /// workload starts its clock ([`PHASE_RUN`]).
    Phase,
    /// The file's attributes were read from its tier (an entry of a
    /// directory listing, which the kernel asks with its attributes, or a
    /// `stat` the kernel had not cached); `len` is its size. Generated
    /// workloads have them; a mount's recording does not (lookups are not
    /// access events).
    Stat,
}

/// The phases a workload's trace marks with [`Kind::Phase`].
pub const PHASE_PREPARE: u64 = 0;
/// See [`PHASE_PREPARE`].
pub const PHASE_WARMUP: u64 = 1;
/// See [`PHASE_PREPARE`].
pub const PHASE_MEASURE: u64 = 2;
/// Within the measured run, the workload's own clock starts (after what
/// it does first, such as listing its files): its time counts from here.
/// A trace without one counts from [`PHASE_MEASURE`].
pub const PHASE_RUN: u64 = 3;

impl Kind {
    /// Every kind, in the order of their bytes on disk.
    pub const ALL: [Kind; 11] = [
        Kind::Read,
        Kind::Write,
        Kind::Create,
        Kind::Remove,
        Kind::Truncate,
        Kind::Open,
        Kind::Close,
        Kind::Move,
        Kind::Op,
        Kind::Phase,
        Kind::Stat,
    ];

    /// Its name, lower case, for people and JSON.
    pub fn name(self) -> &'static str {
        ["read", "write", "create", "remove", "truncate", "open", "close", "move", "op", "phase", "stat"][self as usize]
    }

    fn byte(self) -> u8 {
        // The discriminants are the on-disk bytes: keep ALL in this order.
        self as u8
    }

    fn from_byte(b: u8) -> Option<Kind> {
        Kind::ALL.get(b as usize).copied()
    }

    /// Reads and writes carry data.
    pub fn is_io(self) -> bool {
        matches!(self, Kind::Read | Kind::Write)
    }

    /// Marks of a workload's structure, not requests to a file.
    pub fn is_mark(self) -> bool {
        matches!(self, Kind::Op | Kind::Phase)
    }
}

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since the start of the trace.
    pub time_ns: u64,
    /// The file.
    pub file: u64,
    /// Its directory.
    pub dir: u64,
    /// What happened.
    pub kind: Kind,
    /// Offset (see [`Kind`]).
    pub off: u64,
    /// Length or size (see [`Kind`]).
    pub len: u64,
}

impl Record {
    /// A read or write.
    pub fn io(time_ns: u64, file: u64, dir: u64, write: bool, off: u64, len: u64) -> Record {
        let kind = if write { Kind::Write } else { Kind::Read };
        Record { time_ns, file, dir, kind, off, len }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes a trace. Records must come in time order; one that is earlier
/// than the one before (threads of a live mount race to report) is written
/// at the earlier record's time, and counted in [`Writer::reordered`].
pub struct Writer<W: Write> {
    out: W,
    buf: Vec<u8>,
    last_ns: u64,
    records: u64,
    reordered: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the header.
    pub fn new(mut out: W, meta: &Meta) -> io::Result<Self> {
        let json = serde_json::to_string(meta).map_err(io::Error::other)?;
        // Version 4 only adds the files that exist before the trace.
        let version = if meta.existing_size.is_some() { VERSION } else { 3 };
        writeln!(out, "{MAGIC} {version}")?;
        writeln!(out, "{json}")?;
        Ok(Writer { out, buf: Vec::with_capacity(64 * 1024), last_ns: 0, records: 0, reordered: 0 })
    }

    /// Appends one record.
    pub fn push(&mut self, r: &Record) -> io::Result<()> {
        let t = if r.time_ns < self.last_ns {
            self.reordered += 1;
            self.last_ns
        } else {
            r.time_ns
        };
        self.buf.push(r.kind.byte());
        put_varint(&mut self.buf, t - self.last_ns);
        for v in [r.file, r.dir, r.off, r.len] {
            put_varint(&mut self.buf, v);
        }
        self.last_ns = t;
        self.records += 1;
        if self.buf.len() >= 60 * 1024 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Records that came earlier than the one before them.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Writes what is buffered to the output and flushes it.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }

    /// Writes what is buffered and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads a trace: the header at [`Reader::new`], then the records as an
/// iterator. An error ends the iteration.
pub struct Reader<R: BufRead> {
    inp: R,
    meta: Meta,
    version: u32,
    time_ns: u64,
    index: u64,
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// Reads and checks the header.
    pub fn new(mut inp: R) -> io::Result<Self> {
        let mut first = Vec::new();
        io::Read::take(&mut inp, 64).read_until(b'\n', &mut first)?;
        let first = String::from_utf8_lossy(&first);
        let Some(version) = first.trim_end().strip_prefix(MAGIC).map(str::trim) else {
            return Err(bad("not a tierfs trace (it does not start with \"tierfs-trace\")".into()));
        };
        let version = match version.parse::<u32>() {
            Ok(v) if (OLDEST..=VERSION).contains(&v) => v,
            Ok(v) => {
                return Err(bad(format!(
                    "trace format version {v}; this tierfs reads versions {OLDEST} to {VERSION} (use a tierfs of that version)"
                )))
            }
            Err(_) => return Err(bad(format!("bad trace header {:?}", first.trim_end()))),
        };
        let mut line = Vec::new();
        io::Read::take(&mut inp, 1 << 20).read_until(b'\n', &mut line)?;
        let line = String::from_utf8(line).map_err(|_| bad("bad trace header line 2: not UTF-8".into()))?;
        let meta: Meta =
            serde_json::from_str(line.trim_end()).map_err(|e| bad(format!("bad trace header line 2: {e}")))?;
        Ok(Reader { inp, meta, version, time_ns: 0, index: 0, failed: false })
    }

    /// The format version of the file.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The header.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    fn byte(&mut self) -> io::Result<Option<u8>> {
        let buf = self.inp.fill_buf()?;
        let Some(&b) = buf.first() else { return Ok(None) };
        self.inp.consume(1);
        Ok(Some(b))
    }

    fn varint(&mut self) -> io::Result<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b =
                self.byte()?.ok_or_else(|| bad(format!("the trace ends inside record {} (cut short?)", self.index)))?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad(format!("record {}: a number longer than 64 bits", self.index)))
    }

    fn next_record(&mut self) -> io::Result<Option<Record>> {
        let Some(kb) = self.byte()? else { return Ok(None) };
        let kind = Kind::from_byte(kb)
            .filter(|&k| k != Kind::Stat || self.version >= 3)
            .ok_or_else(|| bad(format!("record {}: unknown kind {kb}", self.index)))?;
        let dt = self.varint()?;
        let [file, dir, off, len] = [self.varint()?, self.varint()?, self.varint()?, self.varint()?];
        self.time_ns = self.time_ns.saturating_add(dt);
        self.index += 1;
        Ok(Some(Record { time_ns: self.time_ns, file, dir, kind, off, len }))
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = io::Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = self.next_record().transpose();
        if matches!(r, Some(Err(_))) {
            self.failed = true;
        }
        r
    }
}

/// Opens a trace file.
pub fn open(path: &std::path::Path) -> io::Result<Reader<io::BufReader<std::fs::File>>> {
    let f = std::fs::File::open(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Reader::new(io::BufReader::with_capacity(256 * 1024, f))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(meta: &Meta, recs: &[Record]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), meta).unwrap();
        for r in recs {
            w.push(r).unwrap();
        }
        w.finish().unwrap()
    }

    fn decode(bytes: &[u8]) -> io::Result<(Meta, Vec<Record>)> {
        let r = Reader::new(bytes)?;
        let meta = r.meta().clone();
        let recs = r.collect::<io::Result<Vec<_>>>()?;
        Ok((meta, recs))
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        (0u64..1 << 40, any::<u64>(), any::<u64>(), 0usize..Kind::ALL.len(), any::<u64>(), any::<u64>())
            .prop_map(|(time_ns, file, dir, k, off, len)| Record { time_ns, file, dir, kind: Kind::ALL[k], off, len })
    }

    proptest! {
        #[test]
        fn records_in_time_order_come_back_unchanged(mut recs in proptest::collection::vec(arb_record(), 0..200)) {
            recs.sort_by_key(|r| r.time_ns);
            let meta = Meta {
                source: "test".into(),
                start_unix_ns: Some(5),
                note: "n".into(),
                dirs: vec![[5, 1]],
                policies: vec![(5, "on-demand-cache".into())],
                ops: Some(3),
                run_clock: true,
                existing_size: Some(1 << 20),
            };
            let (m, back) = decode(&encode(&meta, &recs)).unwrap();
            prop_assert_eq!(m, meta);
            prop_assert_eq!(back, recs);
        }

        #[test]
        fn a_trace_cut_anywhere_inside_a_record_is_an_error_not_a_short_trace(
            mut recs in proptest::collection::vec(arb_record(), 1..20), cut in 1usize..40,
        ) {
            recs.sort_by_key(|r| r.time_ns);
            let bytes = encode(&Meta::default(), &recs);
            let last = encode(&Meta::default(), &recs[..recs.len() - 1]).len();
            // Strictly inside the last record (every record is at least 6 bytes).
            let cut = last + 1 + cut % (bytes.len() - last - 1);
            prop_assert!(decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn an_earlier_record_is_written_at_the_time_of_the_one_before() {
        let a = Record::io(100, 1, 1, false, 0, 4096);
        let b = Record::io(50, 1, 1, true, 0, 4096);
        let mut w = Writer::new(Vec::new(), &Meta::default()).unwrap();
        w.push(&a).unwrap();
        w.push(&b).unwrap();
        assert_eq!(w.reordered(), 1);
        let (_, back) = decode(&w.finish().unwrap()).unwrap();
        assert_eq!(back[1].time_ns, 100);
    }

    #[test]
    fn a_read_takes_few_bytes() {
        let recs: Vec<_> =
            (0..1000).map(|i| Record::io(i * 100_000, 7 + i % 50, 3, i % 3 == 0, i * 4096, 4096)).collect();
        let body = encode(&Meta::default(), &recs).len() - encode(&Meta::default(), &[]).len();
        assert!(body <= 1000 * 12, "{body} bytes for 1000 records");
    }

    #[test]
    fn a_trace_with_files_that_exist_before_it_is_version_4_and_others_stay_version_3() {
        // A build that reads version 3 only refuses what it would replay
        // wrongly, and reads the rest.
        let with = Meta { existing_size: Some(1 << 20), ..Meta::default() };
        assert!(encode(&with, &[]).starts_with(b"tierfs-trace 4\n"));
        assert!(encode(&Meta::default(), &[]).starts_with(b"tierfs-trace 3\n"));
        assert_eq!(decode(&encode(&with, &[])).unwrap().0, with);
    }

    #[test]
    fn other_files_and_versions_are_refused_with_a_reason() {
        let e = decode(b"hello\n{}\n").unwrap_err();
        assert!(e.to_string().contains("not a tierfs trace"), "{e}");
        let e = decode(b"tierfs-trace 9\n{}\n").unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
        let e = decode(b"tierfs-trace 2\n{}\n\x0b\x00\x00\x00\x00\x00").unwrap_err();
        assert!(e.to_string().contains("unknown kind 11"), "{e}");
        assert!(decode(b"tierfs-trace 2\n{\"source\":\"x\"}\n").unwrap().1.is_empty());
        // Version 1 traces (no marks) are still read.
        let (m, recs) = decode(b"tierfs-trace 1\n{\"source\":\"x\"}\n\x00\x01\x02\x03\x04\x05").unwrap();
        assert_eq!(m.source, "x");
        assert_eq!(recs, vec![Record { time_ns: 1, file: 2, dir: 3, kind: Kind::Read, off: 4, len: 5 }]);
    }

    #[test]
    fn a_stat_record_needs_version_3() {
        let stat = Record { time_ns: 1, file: 2, dir: 3, kind: Kind::Stat, off: 0, len: 5 };
        let bytes = encode(&Meta::default(), &[stat]);
        assert!(bytes.starts_with(b"tierfs-trace 3\n"));
        assert_eq!(decode(&bytes).unwrap().1, vec![stat]);
        // A version 2 trace knows no such kind.
        let e = decode(b"tierfs-trace 2\n{}\n\x0a\x01\x02\x03\x00\x05").unwrap_err();
        assert!(e.to_string().contains("unknown kind 10"), "{e}");
    }
}
