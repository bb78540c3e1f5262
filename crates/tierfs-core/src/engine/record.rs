//! Recording a mount's access events as a trace (`tierfs trace record`):
//! the engine thread hands every event it takes from the queue to the
//! recorder, which writes it in the format of [`crate::trace`].
//!
//! What a trace holds is what the statistics saw: access events the queue
//! dropped under overload are missing from both (the status report counts
//! them). A request the kernel cut into pieces is one record again. The
//! engine's own moves (`Placed`) and directory renames are not recorded:
//! a replay decides placement itself.

use crate::clock::Timestamp;
use crate::event::{Event, EventKind};
use crate::state::ns::Ino;
use crate::trace::{Kind, Meta, Record, Writer};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Pieces of a request more than this apart (ns) are separate requests.
const JOIN_NS: u64 = 1_000_000;

/// What a finished recording wrote.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recorded {
    /// The trace file.
    pub path: String,
    /// Records written.
    pub records: u64,
    /// Records that came out of time order and were written at the time
    /// of the one before.
    pub reordered: u64,
}

/// A recording in progress.
pub struct Recorder {
    out: Writer<File>,
    path: PathBuf,
    start: Timestamp,
    parents: HashMap<Ino, Ino>,
    /// The last read or write, held back in case the next event continues it.
    pending: Option<Record>,
}

impl Recorder {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path, start: Timestamp, start_unix_ns: u64, mountpoint: &str) -> io::Result<Recorder> {
        let f = File::create(path)?;
        let meta =
            Meta { source: format!("mount:{mountpoint}"), start_unix_ns: Some(start_unix_ns), ..Meta::default() };
        // The writer buffers: the file gets whole 60 KiB writes and a flush a tick.
        let out = Writer::new(f, &meta)?;
        Ok(Recorder { out, path: path.to_path_buf(), start, parents: HashMap::new(), pending: None })
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        match self.pending.take() {
            Some(r) => self.out.push(&r),
            None => Ok(()),
        }
    }

    /// Records one event. `parent_of` names the directory of a file the
    /// recording has not seen created or moved.
    pub fn push(&mut self, ev: &Event, parent_of: &dyn Fn(Ino) -> Option<Ino>) -> io::Result<()> {
        let time_ns = ev.time.0.saturating_sub(self.start.0);
        let (kind, off, len, fragment) = match ev.kind {
            EventKind::Read { off, len, fragment, .. } => (Kind::Read, off, len, fragment),
            EventKind::Write { off, len, fragment, .. } => (Kind::Write, off, len, fragment),
            EventKind::Open { write, size, .. } => (Kind::Open, u64::from(write), size, false),
            EventKind::Close { size } => (Kind::Close, 0, size, false),
            EventKind::Create { parent, size, .. } => {
                self.parents.insert(ev.ino, parent);
                (Kind::Create, 0, size, false)
            }
            EventKind::Resize { size } => (Kind::Truncate, 0, size, false),
            EventKind::Remove => (Kind::Remove, 0, 0, false),
            EventKind::Moved { parent } => {
                self.parents.insert(ev.ino, parent);
                (Kind::Move, 0, 0, false)
            }
            EventKind::Placed { .. } | EventKind::DirMoved { .. } => return Ok(()),
        };
        if fragment {
            // Pieces of one request arrive together: a stream of big
            // sequential requests is not one record.
            let joins = |p: &&mut Record| {
                p.file == ev.ino
                    && p.kind == kind
                    && p.off + p.len == off
                    && time_ns.saturating_sub(p.time_ns) <= JOIN_NS
            };
            if let Some(p) = self.pending.as_mut().filter(joins) {
                p.len += len;
                return Ok(());
            }
        }
        self.flush_pending()?;
        let dir = match self.parents.get(&ev.ino) {
            Some(&d) => d,
            None => {
                // Unknown once the file is gone: 0, "no directory".
                let d = parent_of(ev.ino).unwrap_or(0);
                self.parents.insert(ev.ino, d);
                d
            }
        };
        let r = Record { time_ns, file: ev.ino, dir, kind, off, len };
        if kind == Kind::Remove {
            self.parents.remove(&ev.ino);
        }
        if kind.is_io() {
            self.pending = Some(r);
            Ok(())
        } else {
            self.out.push(&r)
        }
    }

    /// Writes what is buffered to the file (not synced).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Writes what is left, syncs the file, and says what was written.
    pub fn finish(mut self) -> io::Result<Recorded> {
        self.flush_pending()?;
        let (records, reordered) = (self.out.records(), self.out.reordered());
        let f = self.out.finish()?;
        f.sync_all()?;
        Ok(Recorded { path: self.path.display().to_string(), records, reordered })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::{Placement, Tier};

    fn ev(ino: Ino, ms: u64, kind: EventKind) -> Event {
        Event::new(ino, Timestamp::from_millis(ms), kind)
    }

    #[test]
    fn events_become_records_with_pieces_of_one_request_joined_and_directories_known() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut r = Recorder::create(&path, Timestamp::from_millis(1000), 7, "/mnt").unwrap();
        let parent_of = |ino: Ino| (ino == 9).then_some(4);
        let rd = |off, len, fragment| EventKind::Read { off, len, tier: Tier::Ssd, fragment };
        let placement = Placement::On(Tier::Hdd);
        r.push(&ev(5, 1000, EventKind::Create { placement, parent: 3, size: 0 }), &parent_of).unwrap();
        r.push(&ev(5, 1001, rd(0, 1 << 20, false)), &parent_of).unwrap();
        r.push(&ev(5, 1001, rd(1 << 20, 4096, true)), &parent_of).unwrap();
        r.push(&ev(9, 1002, rd(0, 100, false)), &parent_of).unwrap();
        r.push(&ev(9, 1003, EventKind::Placed { placement }), &parent_of).unwrap();
        r.push(&ev(5, 1004, EventKind::Remove), &parent_of).unwrap();
        let done = r.finish().unwrap();
        assert_eq!(done.records, 4);
        let rd = crate::trace::open(&path).unwrap();
        assert_eq!(rd.meta().source, "mount:/mnt");
        let recs: Vec<Record> = rd.map(|r| r.unwrap()).collect();
        let short: Vec<_> = recs.iter().map(|r| (r.time_ns / 1_000_000, r.file, r.dir, r.kind, r.off, r.len)).collect();
        assert_eq!(
            short,
            vec![
                (0, 5, 3, Kind::Create, 0, 0),
                (1, 5, 3, Kind::Read, 0, (1 << 20) + 4096),
                (2, 9, 4, Kind::Read, 0, 100),
                (4, 5, 3, Kind::Remove, 0, 0),
            ]
        );
    }
}
