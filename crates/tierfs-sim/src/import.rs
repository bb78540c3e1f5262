//! Block traces into tierfs traces.
//!
//! A block trace names a disk and a byte address, not a file. tierfs
//! places files (or extents of big files), so each disk becomes a directory
//! and its address space is cut into files of `file_size` bytes (64 MiB
//! by default): file `k` of a disk holds its bytes from `k * file_size` to
//! `(k + 1) * file_size`. A request that crosses a file boundary becomes one
//! record per file, all counted as parts of one request by the planner's
//! classification only through their sizes. The files hold data that
//! existed before the trace began: no record creates them, and the trace
//! says they exist, `file_size` bytes each ([`Meta::existing_size`]), so
//! that a replay finds them on the HDD at their first request (a `create`
//! record would make them new files, which the cold-DST policies place on
//! the SSD for nothing).
//!
//! Two formats are read:
//! - the SNIA / MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,
//!   Offset,Size,ResponseTime`, the timestamp in Windows ticks (100 ns);
//! - `blkparse`'s default text output: `MAJ,MIN CPU SEQ SECONDS PID ACTION
//!   RWBS SECTOR + COUNT [PROCESS]`, of which the queue (`Q`) events are
//!   taken (or the issue (`D`) events when the trace has no `Q`), sectors
//!   of 512 bytes.
//!
//! Records are sorted by time before they are written (concatenated
//! traces need not be), so an import holds the whole trace in memory,
//! about 48 bytes per request.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use tierfs_core::trace::{Meta, Record, Writer};

/// The default size of the files a disk's address space is cut into.
pub const DEFAULT_FILE_SIZE: u64 = 64 << 20;

/// The largest request a block trace may hold (a larger one is an error).
pub const MAX_REQUEST: u64 = 1 << 30;

/// The smallest file a disk's address space is cut into.
pub const MIN_FILE_SIZE: u64 = 4096;

/// The size of the files an address space is cut into when `file_size` is
/// asked for (at least [`MIN_FILE_SIZE`]).
pub fn cut_size(file_size: u64) -> u64 {
    file_size.max(MIN_FILE_SIZE)
}

/// One request of a block trace.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockIo {
    /// Nanoseconds, from any origin.
    pub time_ns: u64,
    /// The disk.
    pub disk: String,
    /// A write (else a read).
    pub write: bool,
    /// Byte address.
    pub off: u64,
    /// Bytes.
    pub len: u64,
}

/// Turns disk addresses into files (see the module documentation).
pub struct Chunker {
    file_size: u64,
    disks: HashMap<String, u64>,
    files: HashMap<(u64, u64), u64>,
    out: Vec<Record>,
}

impl Chunker {
    /// Files of `file_size` bytes (see [`cut_size`]).
    pub fn new(file_size: u64) -> Chunker {
        Chunker { file_size: cut_size(file_size), disks: HashMap::new(), files: HashMap::new(), out: Vec::new() }
    }

    /// Adds one request.
    pub fn push(&mut self, io: &BlockIo) {
        let dir = match self.disks.get(&io.disk) {
            Some(&d) => d,
            None => {
                let d = self.disks.len() as u64 + 1;
                self.disks.insert(io.disk.clone(), d);
                d
            }
        };
        let (mut off, end) = (io.off, io.off.saturating_add(io.len.max(1)));
        while off < end {
            let (k, within) = (off / self.file_size, off % self.file_size);
            let piece = (end - off).min(self.file_size - within);
            let n = self.files.len() as u64 + 1;
            let file = *self.files.entry((dir, k)).or_insert(n);
            self.out.push(Record::io(io.time_ns, file, dir, io.write, within, piece));
            off += piece;
        }
    }

    /// The records in time order, starting at 0 (a stable sort: the pieces
    /// of a request stay in address order).
    pub fn finish(mut self) -> Vec<Record> {
        self.out.sort_by_key(|r| r.time_ns);
        let t0 = self.out.first().map_or(0, |r| r.time_ns);
        for r in &mut self.out {
            r.time_ns -= t0;
        }
        self.out
    }
}

/// A line that could not be read, for the message.
fn line_err(format: &str, n: usize, line: &str, why: &str) -> io::Error {
    let shown: String = line.chars().take(80).collect();
    io::Error::new(io::ErrorKind::InvalidData, format!("{format} line {n}: {why}: {shown:?}"))
}

/// Parses an MSR Cambridge CSV line (None for a header or empty line).
pub fn parse_msr(line: &str) -> Result<Option<BlockIo>, &'static str> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.starts_with("Timestamp") {
        return Ok(None);
    }
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 6 {
        return Err("expected Timestamp,Hostname,DiskNumber,Type,Offset,Size[,ResponseTime]");
    }
    let ticks: u64 = f[0].parse().map_err(|_| "timestamp is not a number")?;
    let write = match f[3].to_ascii_lowercase().as_str() {
        "read" | "r" => false,
        "write" | "w" => true,
        _ => return Err("type is neither Read nor Write"),
    };
    Ok(Some(BlockIo {
        time_ns: ticks.saturating_mul(100),
        disk: format!("{}_{}", f[1], f[2]),
        write,
        off: f[4].parse().map_err(|_| "offset is not a number")?,
        len: f[5].parse().ok().filter(|&l| l <= MAX_REQUEST).ok_or("size is not a number of at most 1 GiB")?,
    }))
}

/// One line of `blkparse` output, with its action letter (None when the
/// line is not a read or write event: summaries, flushes, discards).
pub fn parse_blkparse(line: &str) -> Option<(char, BlockIo)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 10 || f[8] != "+" || !f[0].contains(',') {
        return None;
    }
    let action = f[5].chars().next()?;
    let rwbs = f[6];
    let write = if rwbs.contains('W') {
        true
    } else if rwbs.contains('R') {
        false
    } else {
        return None;
    };
    let secs: f64 = f[3].parse().ok()?;
    let sector: u64 = f[7].parse().ok()?;
    let count: u64 = f[9].parse().ok()?;
    if count == 0 || !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let (off, len) = (sector.checked_mul(512)?, count.checked_mul(512).filter(|&l| l <= MAX_REQUEST)?);
    let io = BlockIo { time_ns: (secs * 1e9).round() as u64, disk: f[0].to_string(), write, off, len };
    Some((action, io))
}

/// Block trace formats [`import`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// SNIA / MSR Cambridge CSV.
    Msr,
    /// `blkparse` text.
    Blkparse,
}

impl Format {
    /// Guesses from the first non-empty line.
    pub fn detect(first_line: &str) -> Option<Format> {
        if parse_msr(first_line).is_ok_and(|x| x.is_some()) || first_line.starts_with("Timestamp,") {
            Some(Format::Msr)
        } else if first_line.split_whitespace().nth(8) == Some("+") {
            Some(Format::Blkparse)
        } else {
            None
        }
    }

    /// Its name in a trace's `source`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Blkparse => "blkparse",
        }
    }
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imported {
    /// Requests read.
    pub requests: u64,
    /// Records written (requests cut at file boundaries count more than once).
    pub records: u64,
    /// Disks (directories).
    pub disks: u64,
    /// Files made.
    pub files: u64,
    /// Lines skipped (headers, other blkparse actions, flushes).
    pub skipped: u64,
}

/// Reads a block trace and writes a tierfs trace.
pub fn import<R: BufRead, W: Write>(
    inp: R,
    format: Format,
    file_size: u64,
    source: &str,
    out: W,
) -> io::Result<Imported> {
    let mut chunker = Chunker::new(file_size);
    let mut stats = Imported::default();
    let mut issued = Vec::new();
    let mut queued = 0u64;
    for (i, line) in inp.lines().enumerate() {
        let line = line?;
        match format {
            Format::Msr => match parse_msr(&line) {
                Ok(Some(io)) => {
                    stats.requests += 1;
                    chunker.push(&io);
                }
                Ok(None) => stats.skipped += 1,
                Err(why) => return Err(line_err("MSR CSV", i + 1, &line, why)),
            },
            Format::Blkparse => match parse_blkparse(&line) {
                Some(('Q', io)) => {
                    queued += 1;
                    stats.requests += 1;
                    chunker.push(&io);
                }
                Some(('D', io)) if queued == 0 => issued.push(io),
                _ => stats.skipped += 1,
            },
        }
    }
    if format == Format::Blkparse && queued == 0 {
        stats.requests = issued.len() as u64;
        for io in &issued {
            chunker.push(io);
        }
    } else {
        stats.skipped += issued.len() as u64;
    }
    stats.disks = chunker.disks.len() as u64;
    stats.files = chunker.files.len() as u64;
    let records = chunker.finish();
    let note = format!("{} bytes per file; one directory per disk", cut_size(file_size));
    let meta = Meta {
        source: format!("{}:{source}", format.name()),
        note,
        existing_size: Some(cut_size(file_size)),
        ..Meta::default()
    };
    let mut w = Writer::new(out, &meta)?;
    for r in &records {
        w.push(r)?;
    }
    stats.records = w.records();
    w.finish()?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_core::trace::{Kind, Reader};

    fn read_back(bytes: &[u8]) -> (Meta, Vec<Record>) {
        let r = Reader::new(bytes).unwrap();
        let m = r.meta().clone();
        (m, r.map(|r| r.unwrap()).collect())
    }

    #[test]
    fn msr_lines_become_reads_and_writes_of_files_in_one_directory_per_disk() {
        let csv = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                   128166372003061629,hm,1,Write,4096,8192,100\n\
                   128166372002061629,hm,0,Read,1048576,4096,50\n\
                   128166372004061629,hm,1,Read,67104768,8192,50\n";
        let mut out = Vec::new();
        let s = import(csv.as_bytes(), Format::Msr, DEFAULT_FILE_SIZE, "x.csv", &mut out).unwrap();
        assert_eq!((s.requests, s.disks, s.skipped), (3, 2, 1));
        let (meta, recs) = read_back(&out);
        assert_eq!(meta.source, "msr:x.csv");
        let io: Vec<_> = recs.iter().filter(|r| r.kind.is_io()).collect();
        // Sorted by time: disk 0's read first, 100 ms before disk 1's write.
        assert_eq!((io[0].kind, io[0].off, io[0].len, io[0].time_ns), (Kind::Read, 1 << 20, 4096, 0));
        assert_eq!((io[1].kind, io[1].time_ns), (Kind::Write, 100_000_000));
        assert_ne!(io[0].dir, io[1].dir);
        // The last request crosses the first 64 MiB boundary: two files.
        assert_eq!((io[2].off, io[2].len, io[3].off, io[3].len), (67104768, 4096, 0, 4096));
        assert_ne!(io[2].file, io[3].file);
        assert_eq!(recs.len(), io.len());
    }

    #[test]
    fn imported_files_exist_before_the_trace_and_are_not_created_by_it() {
        // A `create` before each file's first request made the disks' data
        // look newly written: the cold-DST policies put it on the SSD for
        // nothing and scored 5 to 17 points above every other policy.
        let csv = "1,hm,0,Read,0,4096,1\n2,hm,0,Write,1048576,4096,1\n3,hm,0,Read,0,4096,1\n";
        let mut out = Vec::new();
        let s = import(csv.as_bytes(), Format::Msr, 256 << 10, "x.csv", &mut out).unwrap();
        let (meta, recs) = read_back(&out);
        assert!(recs.iter().all(|r| r.kind.is_io()), "{recs:?}");
        assert_eq!((s.records, s.files), (3, 2));
        assert_eq!(meta.existing_size, Some(256 << 10));
    }

    #[test]
    fn a_bad_msr_line_is_reported_with_its_number() {
        let e = import("1,h,0,Read,0,4096,1\n2,h,0,Erase,0,1,1\n".as_bytes(), Format::Msr, 1 << 20, "x", Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn blkparse_queue_events_are_taken_and_others_skipped() {
        let txt = "  8,0    3        1     0.000000000  697  Q   W 223490 + 8 [kjournald]\n\
                   \x20 8,0    3        2     0.000001000  697  G   W 223490 + 8 [kjournald]\n\
                   \x20 8,0    3        3     0.000002000  697  D   W 223490 + 8 [kjournald]\n\
                   \x20 8,0    0        4     0.500000000  700  Q   R 100 + 16 [cat]\n\
                   \x20 8,0    0        5     0.600000000  700  Q  FN [cat]\n\
                   CPU0 (8,0):\n";
        assert_eq!(Format::detect(txt.lines().next().unwrap()), Some(Format::Blkparse));
        let mut out = Vec::new();
        let s = import(txt.as_bytes(), Format::Blkparse, DEFAULT_FILE_SIZE, "b", &mut out).unwrap();
        assert_eq!(s.requests, 2);
        let (_, recs) = read_back(&out);
        let io: Vec<_> = recs.iter().filter(|r| r.kind.is_io()).collect();
        assert_eq!((io[0].kind, io[0].off, io[0].len), (Kind::Write, 223490 * 512 % DEFAULT_FILE_SIZE, 4096));
        assert_eq!((io[1].kind, io[1].off, io[1].len, io[1].time_ns), (Kind::Read, 51200, 8192, 500_000_000));
    }

    #[test]
    fn blkparse_without_queue_events_uses_the_issue_events() {
        let txt = "  8,0    0        1     0.1  1  D   R 8 + 8 [a]\n  8,0    0        2     0.2  1  C   R 8 + 8 [a]\n";
        let s = import(txt.as_bytes(), Format::Blkparse, DEFAULT_FILE_SIZE, "b", Vec::new()).unwrap();
        assert_eq!((s.requests, s.skipped), (1, 1));
    }
}
