//! Heat sources: how the statistics learn of the requests the kernel serves
//! by itself. With passthrough I/O the kernel reads and writes a file's
//! backing copy without asking the daemon; a [`HeatSource`] watches those
//! backing files while the kernel holds them and reports what it saw as
//! [`Sample`]s, which a [`Joiner`] turns into [`Request`]s: one per
//! application request, counted as the userspace path would count it (a
//! read of N bytes at offset O is one read of N bytes at O, however many
//! batches of pages the kernel served it in).
//!
//! Without a source that sees the requests ([`NoHeat`]), an open stands for
//! one access to the whole file, and files whose policy splits them into
//! chunks take the userspace path instead of passthrough, so that their
//! requests reach the daemon (see `vfs::file`).

use crate::state::ns::Ino;
use crate::tier::Tier;
use std::collections::HashMap;
use std::os::fd::BorrowedFd;

/// What a sample is. The numbers are the kernel program's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A buffered read, from its first page to its last (the kernel may
    /// report one request several times, each time from where it got to).
    Read = 1,
    /// A piece of a buffered write.
    Write = 2,
    /// A page of a mapping read on a page fault.
    Fault = 3,
    /// A page read into the page cache from the device, during the read
    /// of the same task that follows it.
    Device = 4,
    /// A direct (`O_DIRECT`) read.
    DirectRead = 5,
    /// A direct write.
    DirectWrite = 6,
}

impl Op {
    /// The op of a number the kernel program wrote.
    pub fn from_raw(v: u32) -> Option<Op> {
        Some(match v {
            1 => Op::Read,
            2 => Op::Write,
            3 => Op::Fault,
            4 => Op::Device,
            5 => Op::DirectRead,
            6 => Op::DirectWrite,
            _ => return None,
        })
    }
}

/// One thing a heat source saw on a watched backing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The tierfs file.
    pub ino: Ino,
    /// The tier of the backing file.
    pub tier: Tier,
    /// Offset in bytes.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
    /// The thread that made the request.
    pub task: u32,
    /// That thread's count of read (for reads) or write (for writes) system
    /// calls so far: the same for every piece of one call.
    pub seq: u32,
    /// What it is.
    pub op: Op,
    /// The requests it stands for: the source sampled one call in so many
    /// (see [`sampling_interval`]).
    pub weight: u32,
}

/// One application request, joined from its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The tierfs file.
    pub ino: Ino,
    /// The tier that served it.
    pub tier: Tier,
    /// Offset in bytes.
    pub off: u64,
    /// Length in bytes.
    pub len: u64,
    /// A write.
    pub write: bool,
    /// A read that needed the device (part of it was not in the page cache).
    pub device: bool,
    /// The requests it stands for (its samples' weight).
    pub times: u32,
}

/// What a source sees of a watched file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its reads.
    pub reads: bool,
    /// Its writes (only on backing file systems whose writes the source
    /// knows how to see).
    pub writes: bool,
}

/// What a heat source saw, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeatCounts {
    /// Samples taken from the source.
    pub samples: u64,
    /// Samples the source lost (its buffer was full).
    pub lost: u64,
    /// Reads joined, and of them those that needed the device.
    pub reads: u64,
    /// See `reads`.
    pub device_reads: u64,
    /// Writes joined.
    pub writes: u64,
    /// Files watched now.
    pub watched: u64,
    /// One request in so many is sampled now (1: every one).
    #[serde(default)]
    pub every: u32,
}

/// Samples a second the engine takes in one by one. Past it a source
/// samples one request in N and each sample counts N times, so that the
/// kernel's cost per request and the engine's work stay small however fast
/// the application is (a program per request costs some 200 ns; random
/// 4-KiB writes through passthrough take 2.5 µs).
pub const SAMPLES_PER_SEC: u64 = 50_000;

/// The sampling interval a source should use next, given that it brought
/// `samples` in `secs` seconds while it sampled one request in `every`:
/// enough that the requests at that rate come as at most
/// [`SAMPLES_PER_SEC`] samples a second; 1 (every request) below it. At
/// most 1 024.
pub fn sampling_interval(samples: u64, secs: f64, every: u32) -> u32 {
    if secs <= 0.0 {
        return every.max(1);
    }
    let requests = samples as f64 * f64::from(every.max(1)) / secs;
    (requests / SAMPLES_PER_SEC as f64).ceil().clamp(1.0, 1024.0) as u32
}

/// Where the statistics learn of passthrough requests.
pub trait HeatSource: Send + Sync {
    /// Its name in reports and the log.
    fn name(&self) -> &'static str;
    /// What it sees of passthrough files in general (a file's own answer
    /// comes from [`HeatSource::watch`]).
    fn sees(&self) -> Seen;
    /// Starts counting the kernel's requests to the backing file `fd` of
    /// `ino` on `tier`. Returns what it will see of them.
    fn watch(&self, ino: Ino, tier: Tier, fd: BorrowedFd<'_>) -> Seen;
    /// Stops counting requests to the backing file `fd` (the kernel let it
    /// go).
    fn unwatch(&self, fd: BorrowedFd<'_>);
    /// Moves the samples gathered since the last call into `out`.
    fn drain(&self, out: &mut Vec<Sample>);
    /// Samples one request in `n` from now on (1: every one).
    fn set_every(&self, _n: u32) {}
    /// Samples lost so far (the source's buffer was full) and files
    /// watched now.
    fn lost_and_watched(&self) -> (u64, u64);
}

/// No source: the daemon sees opens only.
#[derive(Debug, Default)]
pub struct NoHeat;

impl HeatSource for NoHeat {
    fn name(&self) -> &'static str {
        "opens"
    }
    fn sees(&self) -> Seen {
        Seen::default()
    }
    fn watch(&self, _ino: Ino, _tier: Tier, _fd: BorrowedFd<'_>) -> Seen {
        Seen::default()
    }
    fn unwatch(&self, _fd: BorrowedFd<'_>) {}
    fn drain(&self, _out: &mut Vec<Sample>) {}
    fn lost_and_watched(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// What the joiner remembers of one thread.
#[derive(Clone, Copy, Debug, Default)]
struct Task {
    /// The read last reported: its file, call and last byte's end. A later
    /// sample of the same call that ends there is the same request.
    read: Option<(Ino, u32, u64)>,
    /// A write whose pieces are still coming, and whether one came since
    /// the last [`Joiner::end_of_drain`].
    write: Option<(Request, u32, bool)>,
    /// The device read pages for this call of the thread's (file, call).
    device: Option<(Ino, u32)>,
    /// Drains since this thread was last heard of.
    idle: u8,
}

/// Drains after which a thread with nothing pending is forgotten.
const FORGET_AFTER: u8 = 50;

/// Joins samples into requests. Pure: no clock, no I/O.
///
/// - A read is reported at its first sample, with its whole range; the
///   later samples of the same call (same thread, file and call count,
///   same end, a later start) are the kernel's next batches of it.
/// - The pieces of one write call (same thread, file and call count, each
///   starting where the last ended, or again where one began: a retry) are
///   one write, reported when another
///   sample of the thread shows the call is over, or at the end of the
///   second drain that brought none of its pieces.
/// - A page read from the device marks the thread's next read of the same
///   file and call as one that needed the device.
/// - Faults and direct reads and writes are requests of their own.
#[derive(Debug, Default)]
pub struct Joiner {
    tasks: HashMap<u32, Task>,
    counts: HeatCounts,
}

impl Joiner {
    /// A joiner that remembers nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one sample; requests it completes go to `out`.
    pub fn push(&mut self, s: &Sample, out: &mut Vec<Request>) {
        self.counts.samples += 1;
        let t = self.tasks.entry(s.task).or_default();
        t.idle = 0;
        let req = Request {
            ino: s.ino,
            tier: s.tier,
            off: s.off,
            len: s.len,
            write: false,
            device: false,
            times: s.weight.max(1),
        };
        match s.op {
            Op::Read => {
                let end = s.off.saturating_add(s.len);
                let same = t.read.is_some_and(|(ino, seq, e)| ino == s.ino && seq == s.seq && e == end);
                if same {
                    return;
                }
                let device = t.device.take().is_some_and(|(ino, seq)| ino == s.ino && seq == s.seq);
                t.read = Some((s.ino, s.seq, end));
                Self::finish(&mut self.counts, out, Request { device, ..req });
            }
            Op::Device => t.device = Some((s.ino, s.seq)),
            Op::Fault | Op::DirectRead => {
                let device = s.op == Op::DirectRead;
                Self::finish(&mut self.counts, out, Request { device, ..req });
            }
            Op::DirectWrite => Self::finish(&mut self.counts, out, Request { write: true, ..req }),
            Op::Write => {
                if let Some((w, seq, touched)) = &mut t.write {
                    // The next piece, or the same piece again (the kernel
                    // retries a piece whose copy from the caller's memory
                    // came up short).
                    if w.ino == s.ino && *seq == s.seq && (w.off..=w.off + w.len).contains(&s.off) {
                        w.len = w.len.max(s.off + s.len - w.off);
                        *touched = true;
                        return;
                    }
                }
                if let Some((w, _, _)) = t.write.take() {
                    Self::finish(&mut self.counts, out, w);
                }
                t.write = Some((Request { write: true, ..req }, s.seq, true));
            }
        }
    }

    /// The end of one drain of the source: writes none of whose pieces came
    /// in this drain nor the last are over; threads long unheard of are
    /// forgotten.
    pub fn end_of_drain(&mut self, out: &mut Vec<Request>) {
        let counts = &mut self.counts;
        self.tasks.retain(|_, t| {
            if let Some((w, _, touched)) = &mut t.write {
                if *touched {
                    *touched = false;
                } else {
                    let w = *w;
                    t.write = None;
                    Self::finish(counts, out, w);
                }
            }
            t.idle = t.idle.saturating_add(1);
            t.write.is_some() || t.idle < FORGET_AFTER
        });
    }

    /// Every write still pending, now (at unmount).
    pub fn flush(&mut self, out: &mut Vec<Request>) {
        for t in self.tasks.values_mut() {
            if let Some((w, _, _)) = t.write.take() {
                Self::finish(&mut self.counts, out, w);
            }
        }
    }

    /// What was joined so far (`lost` and `watched` are the source's).
    pub fn counts(&self) -> HeatCounts {
        self.counts
    }

    fn finish(counts: &mut HeatCounts, out: &mut Vec<Request>, r: Request) {
        let n = u64::from(r.times);
        if r.write {
            counts.writes += n;
        } else {
            counts.reads += n;
            counts.device_reads += if r.device { n } else { 0 };
        }
        out.push(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(task: u32, seq: u32, op: Op, off: u64, len: u64) -> Sample {
        Sample { ino: 7, tier: Tier::Hdd, off, len, task, seq, op, weight: 1 }
    }

    #[test]
    fn a_sampled_request_counts_as_many_as_it_stands_for() {
        let mut j = Joiner::new();
        let mut out = Vec::new();
        j.push(&Sample { weight: 8, ..s(1, 1, Op::Read, 0, 4096) }, &mut out);
        j.push(&Sample { weight: 8, ..s(1, 2, Op::Device, 0, 4096) }, &mut out);
        j.push(&Sample { weight: 8, ..s(1, 2, Op::Read, 0, 4096) }, &mut out);
        assert_eq!(out.iter().map(|r| r.times).collect::<Vec<_>>(), vec![8, 8]);
        let c = j.counts();
        assert_eq!((c.reads, c.device_reads), (16, 8));
    }

    #[test]
    fn sampling_starts_past_the_rate_the_engine_takes_and_follows_the_load() {
        // Below the rate: every request.
        assert_eq!(sampling_interval(4_000, 0.1, 1), 1);
        // 400 000 requests a second, all sampled: one in eight.
        assert_eq!(sampling_interval(40_000, 0.1, 1), 8);
        // The same load seen through one in eight: still one in eight.
        assert_eq!(sampling_interval(5_000, 0.1, 8), 8);
        // The load stops: every request again.
        assert_eq!(sampling_interval(0, 0.1, 8), 1);
        assert_eq!(sampling_interval(u64::MAX / 2048, 0.1, 1024), 1024);
        assert_eq!(sampling_interval(10, 0.0, 4), 4);
    }

    fn run(samples: &[Sample]) -> Vec<Request> {
        let mut j = Joiner::new();
        let mut out = Vec::new();
        for x in samples {
            j.push(x, &mut out);
        }
        j.end_of_drain(&mut out);
        j.end_of_drain(&mut out);
        out
    }

    #[test]
    fn the_batches_of_one_read_are_one_request() {
        // A 1-MiB read the kernel served in three batches of folios.
        let out = run(&[
            s(1, 5, Op::Read, 0, 1 << 20),
            s(1, 5, Op::Read, 128 << 10, (1 << 20) - (128 << 10)),
            s(1, 5, Op::Read, 512 << 10, 512 << 10),
        ]);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].off, out[0].len, out[0].write), (0, 1 << 20, false));
    }

    #[test]
    fn a_reread_of_the_same_page_by_the_next_call_is_a_request_of_its_own() {
        let out = run(&[s(1, 5, Op::Read, 4096, 4096), s(1, 6, Op::Read, 4096, 4096)]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn the_pieces_of_one_write_are_one_request_and_the_next_call_starts_another() {
        let mut j = Joiner::new();
        let mut out = Vec::new();
        for off in (0..64).map(|i| i * 4096) {
            j.push(&s(3, 9, Op::Write, off, 4096), &mut out);
        }
        assert!(out.is_empty(), "the write may go on");
        // The next call of the same thread, continuing where it ended.
        j.push(&s(3, 10, Op::Write, 64 * 4096, 4096), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].off, out[0].len, out[0].write), (0, 64 * 4096, true));
        j.end_of_drain(&mut out);
        assert_eq!(out.len(), 1, "a write that had a piece in this drain may go on");
        j.end_of_drain(&mut out);
        assert_eq!(out.len(), 2);
        assert_eq!((out[1].off, out[1].len), (64 * 4096, 4096));
    }

    #[test]
    fn a_retried_piece_of_a_write_is_not_counted_twice() {
        // A 256-KiB write whose second piece's copy came up short and was
        // tried again from its start, with a smaller length.
        let out = run(&[
            s(1, 4, Op::Write, 0, 64 << 10),
            s(1, 4, Op::Write, 64 << 10, 64 << 10),
            s(1, 4, Op::Write, 64 << 10, 4096),
            s(1, 4, Op::Write, (64 << 10) + 4096, (192 << 10) - 4096),
        ]);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!((out[0].off, out[0].len), (0, 256 << 10));
    }

    #[test]
    fn a_page_from_the_device_marks_the_read_of_the_same_call() {
        let out = run(&[
            s(1, 5, Op::Device, 0, 4096),
            s(1, 5, Op::Read, 0, 8192),
            s(1, 6, Op::Read, 0, 8192),
            s(2, 1, Op::Device, 0, 4096),
            s(1, 7, Op::Read, 0, 8192),
        ]);
        assert_eq!(out.iter().map(|r| r.device).collect::<Vec<_>>(), vec![true, false, false]);
    }

    #[test]
    fn threads_are_joined_apart_and_forgotten_when_idle() {
        let mut j = Joiner::new();
        let mut out = Vec::new();
        j.push(&s(1, 1, Op::Write, 0, 10), &mut out);
        j.push(&s(2, 1, Op::Write, 10, 10), &mut out);
        j.push(&s(1, 1, Op::Write, 10, 10), &mut out);
        j.flush(&mut out);
        let mut got: Vec<_> = out.iter().map(|r| (r.off, r.len)).collect();
        got.sort();
        assert_eq!(got, vec![(0, 20), (10, 10)]);
        for _ in 0..FORGET_AFTER {
            j.end_of_drain(&mut out);
        }
        assert!(j.tasks.is_empty());
        let c = j.counts();
        assert_eq!((c.samples, c.writes, c.reads), (3, 2, 0));
    }

    /// One application call, as the model has it.
    #[derive(Clone, Debug)]
    struct Call {
        task: u32,
        write: bool,
        off: u64,
        pages: u64,
        batch: u64,
    }

    fn call() -> impl Strategy<Value = Call> {
        (0u32..3, any::<bool>(), 0u64..64, 1u64..40, 1u64..8).prop_map(|(task, write, off, pages, batch)| Call {
            task,
            write,
            off: off * 4096,
            pages,
            batch,
        })
    }

    proptest! {
        /// Whatever the calls of several threads, however the kernel cut
        /// them into batches and however the threads' samples interleave,
        /// the joiner reports each call once, with its range.
        #[test]
        fn each_call_is_one_request_with_its_range(
            calls in proptest::collection::vec(call(), 1..40),
            picks in proptest::collection::vec(0usize..3, 0..400),
        ) {
            let mut seqs: HashMap<(u32, bool), u32> = HashMap::new();
            let mut per_task: Vec<std::collections::VecDeque<Sample>> = vec![Default::default(); 3];
            let mut want = Vec::new();
            for c in &calls {
                let seq = seqs.entry((c.task, c.write)).or_default();
                *seq += 1;
                let len = c.pages * 4096;
                want.push((c.off, len, c.write));
                let mut at = 0;
                while at < c.pages {
                    let n = c.batch.min(c.pages - at);
                    let sample = if c.write {
                        s(c.task, *seq, Op::Write, c.off + at * 4096, n * 4096)
                    } else {
                        // A read's batch reports from where it got to, to the end.
                        s(c.task, *seq, Op::Read, c.off + at * 4096, len - at * 4096)
                    };
                    per_task[c.task as usize].push_back(sample);
                    at += n;
                }
            }
            let mut samples = Vec::new();
            for p in picks {
                if let Some(x) = per_task[p].pop_front() {
                    samples.push(x);
                }
            }
            for q in &mut per_task {
                samples.extend(q.drain(..));
            }
            let mut j = Joiner::new();
            let mut out = Vec::new();
            for x in &samples {
                j.push(x, &mut out);
            }
            j.flush(&mut out);
            let mut got: Vec<_> = out.iter().map(|r| (r.off, r.len, r.write)).collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
