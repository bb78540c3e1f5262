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
    /// When, in nanoseconds of `CLOCK_MONOTONIC`.
    pub time: u64,
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
    /// When it began, in nanoseconds of `CLOCK_MONOTONIC`.
    pub time: u64,
}

/// What a source sees of a watched file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its reads.
    pub reads: bool,
    /// Its writes (only on backing file systems whose writes the source
    /// knows how to see).
    pub writes: bool,
    /// Its direct (`O_DIRECT`) reads and writes.
    pub direct: bool,
}

/// A backing file a source watches, as [`HeatSource::watch`] returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watched {
    /// What it sees of the kernel's requests to it.
    pub seen: Seen,
    /// Its tier.
    pub tier: Tier,
    /// Its file system's device (the kernel's encoding), and its inode
    /// there.
    pub dev: u32,
    /// See `dev`.
    pub backing: u64,
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

/// Requests a second the engine takes in one by one. Past it a source
/// samples one request in N and each sample counts N times, so that the
/// kernel's cost per request and the engine's work stay small however fast
/// the application is: a sampled request costs the kernel's program some
/// 150 ns more than one not sampled (it takes the time and writes the
/// ring, and asks which process made it when the thread is new on its
/// CPU), one not sampled some 30 ns more than an empty program on the same
/// tracepoint, and cached random 4-KiB reads through passthrough take
/// about 2 µs (`benches/results/heat-2026-11-29.md`). Twenty thousand
/// samples a second still rank a hot set of thousands of chunks.
pub const SAMPLES_PER_SEC: u64 = 20_000;

/// The sampling interval a source should use next, given that `sampled`
/// requests came in `secs` seconds while it sampled one in `every`: enough
/// that requests at that rate come as at most [`SAMPLES_PER_SEC`] samples
/// a second; 1 (every request) below it. At most 1 024.
pub fn sampling_interval(sampled: u64, secs: f64, every: u32) -> u32 {
    if secs <= 0.0 {
        return every.max(1);
    }
    let requests = sampled as f64 * f64::from(every.max(1)) / secs;
    (requests / SAMPLES_PER_SEC as f64).ceil().clamp(1.0, 1024.0) as u32
}

/// Where the statistics learn of passthrough requests.
pub trait HeatSource: Send + Sync {
    /// Its name in reports and the log.
    fn name(&self) -> &'static str;
    /// What it sees of passthrough files on `tier` (a file's own answer
    /// comes from [`HeatSource::watch`]).
    fn sees(&self, tier: Tier) -> Seen;
    /// Starts counting the kernel's requests to the backing file `fd` of
    /// `ino` on `tier`; `None` if it cannot. Cheap: it runs in the open
    /// that gives the kernel the file, under the file's I/O lock.
    fn watch(&self, ino: Ino, tier: Tier, fd: BorrowedFd<'_>) -> Option<Watched>;
    /// Stops counting requests to a watched file (the kernel let it go).
    fn unwatch(&self, w: &Watched);
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
    fn sees(&self, _tier: Tier) -> Seen {
        Seen::default()
    }
    fn watch(&self, _ino: Ino, _tier: Tier, _fd: BorrowedFd<'_>) -> Option<Watched> {
        None
    }
    fn unwatch(&self, _w: &Watched) {}
    fn drain(&self, _out: &mut Vec<Sample>) {}
    fn lost_and_watched(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of [`Sample::time`]
/// (a kernel program's `bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the joiner remembers of one thread.
#[derive(Clone, Copy, Debug, Default)]
struct Task {
    /// The read last reported: its file, call, start and end. A later
    /// sample of the same call that starts after that start and ends at
    /// that end is the kernel's next batch of it.
    read: Option<(Ino, u32, u64, u64)>,
    /// A write whose pieces may still come, and the drains since its last
    /// piece.
    write: Option<(Request, u32, u8)>,
    /// The direct request last reported: file, call, offset, end, write.
    direct: Option<(Ino, u32, u64, u64, bool)>,
    /// The first page this call of the thread's read from the device:
    /// file, call, offset.
    device: Option<(Ino, u32, u64)>,
    /// Drains since this thread was last heard of.
    idle: u8,
}

/// Drains after which a thread with nothing pending is forgotten.
const FORGET_AFTER: u8 = 50;

/// Drains without a piece after which a write is over: a writer the
/// kernel holds back for its dirty pages (a slow disk) pauses for up to
/// 200 ms between pieces; the engine drains every 100 ms.
const WRITE_OVER_AFTER: u8 = 5;

/// Joins samples into requests. Pure: no clock, no I/O.
///
/// - A read is reported at its first sample, with its whole range; a later
///   sample of the same call (same thread, file and call count, same end,
///   a later start) is the kernel's next batch of it.
/// - The pieces of one write call (same thread, file and call count, each
///   starting at a page where the last ended, or again within what came: a
///   retry) are one write, reported when another sample of the thread
///   shows the call over, or after [`WRITE_OVER_AFTER`] drains without a
///   piece. (Writes that make no system call, io_uring's and AIO's, start
///   at the page where the last ended only if they append whole pages:
///   those are joined too.)
/// - A direct request is one sample, but the kernel tries some again (an
///   unaligned direct write, or one that falls back to the page cache):
///   the same offset in the same call, or a buffered piece of the same
///   range, is not another request.
/// - A page read from the device, within a read of the same call, marks
///   that read as one that needed the device.
/// - Faults are requests of their own.
#[derive(Debug, Default)]
pub struct Joiner {
    tasks: HashMap<u32, Task>,
    counts: HeatCounts,
    /// Requests begun since [`Joiner::take_begun`] (the sampling rate).
    begun: u64,
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
            time: s.time,
        };
        let end = s.off.saturating_add(s.len);
        match s.op {
            Op::Read => {
                let next_batch = t
                    .read
                    .is_some_and(|(ino, seq, start, e)| ino == s.ino && seq == s.seq && e == end && s.off > start);
                if next_batch {
                    return;
                }
                let device = t.device.take().is_some_and(|(ino, seq, at)| {
                    ino == s.ino && seq == s.seq && (s.off..end.max(s.off + 1)).contains(&at)
                });
                t.read = Some((s.ino, s.seq, s.off, end));
                self.begun += 1;
                Self::finish(&mut self.counts, out, Request { device, ..req });
            }
            Op::Device => t.device = Some((s.ino, s.seq, s.off)),
            Op::Fault => {
                self.begun += 1;
                Self::finish(&mut self.counts, out, req);
            }
            Op::DirectRead | Op::DirectWrite => {
                let write = s.op == Op::DirectWrite;
                let again = t
                    .direct
                    .is_some_and(|(ino, seq, off, _, w)| ino == s.ino && seq == s.seq && off == s.off && w == write);
                t.direct = Some((s.ino, s.seq, s.off, end, write));
                if again {
                    return;
                }
                self.begun += 1;
                Self::finish(&mut self.counts, out, Request { write, device: !write, ..req });
            }
            Op::Write => {
                // A direct write that went to the page cache after all.
                let fell_back = t
                    .direct
                    .is_some_and(|(ino, seq, off, e, w)| w && ino == s.ino && seq == s.seq && s.off >= off && end <= e);
                if fell_back {
                    return;
                }
                if let Some((w, seq, idle)) = &mut t.write {
                    let w_end = w.off + w.len;
                    let same_call = w.ino == s.ino && *seq == s.seq;
                    let next = s.off == w_end && s.off.is_multiple_of(4096);
                    let again = (w.off..w_end).contains(&s.off);
                    if same_call && (next || again) {
                        w.len = w.len.max(end - w.off);
                        *idle = 0;
                        return;
                    }
                }
                if let Some((w, _, _)) = t.write.take() {
                    Self::finish(&mut self.counts, out, w);
                }
                self.begun += 1;
                t.write = Some((Request { write: true, ..req }, s.seq, 0));
            }
        }
    }

    /// The end of one drain of the source: writes none of whose pieces came
    /// for [`WRITE_OVER_AFTER`] drains are over; threads long unheard of
    /// are forgotten.
    pub fn end_of_drain(&mut self, out: &mut Vec<Request>) {
        let counts = &mut self.counts;
        self.tasks.retain(|_, t| {
            if let Some((w, _, idle)) = &mut t.write {
                *idle += 1;
                if *idle >= WRITE_OVER_AFTER {
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

    /// What was joined so far (`lost`, `watched` and `every` are the
    /// source's).
    pub fn counts(&self) -> HeatCounts {
        self.counts
    }

    /// Requests begun (sampled ones, each once) since the last call.
    pub fn take_begun(&mut self) -> u64 {
        std::mem::take(&mut self.begun)
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
        Sample { ino: 7, tier: Tier::Hdd, off, len, task, seq, op, weight: 1, time: 0 }
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
        assert_eq!(sampling_interval(1_500, 0.1, 1), 1);
        // 400 000 requests a second, all sampled: one in twenty.
        assert_eq!(sampling_interval(40_000, 0.1, 1), 20);
        // The same load seen through one in twenty: still one in twenty.
        assert_eq!(sampling_interval(2_000, 0.1, 20), 20);
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
        j.flush(&mut out);
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
        for _ in 1..WRITE_OVER_AFTER {
            j.end_of_drain(&mut out);
        }
        assert_eq!(out.len(), 1, "a writer held back for its dirty pages may go on");
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
            // A page an append made, in the call count of the thread's reads:
            // not within the read that follows.
            s(1, 7, Op::Device, 1 << 20, 4096),
            s(1, 8, Op::Read, 0, 8192),
        ]);
        assert_eq!(out.iter().map(|r| r.device).collect::<Vec<_>>(), vec![true, false, false, false]);
    }

    #[test]
    fn requests_without_a_system_call_of_their_own_are_still_told_apart() {
        // io_uring reads of one block, one after the other: no call is
        // counted between them, yet each is a request.
        let out = run(&[s(1, 3, Op::Read, 8192, 8192), s(1, 3, Op::Read, 8192, 8192)]);
        assert_eq!(out.len(), 2);
        // Appends of log lines (not whole pages) without a call between.
        let out = run(&[s(1, 3, Op::Write, 100, 60), s(1, 3, Op::Write, 160, 60), s(1, 3, Op::Write, 220, 60)]);
        assert_eq!(out.len(), 3, "{out:?}");
    }

    #[test]
    fn a_direct_request_tried_again_or_done_through_the_page_cache_is_one() {
        let out = run(&[
            // Tried again after EAGAIN.
            s(1, 2, Op::DirectWrite, 4096, 8192),
            s(1, 2, Op::DirectWrite, 4096, 8192),
            // Fell back to the page cache for its end.
            s(1, 3, Op::DirectWrite, 0, 8192),
            s(1, 3, Op::Write, 4096, 4096),
            s(1, 4, Op::DirectRead, 0, 4096),
        ]);
        let got: Vec<_> = out.iter().map(|r| (r.off, r.len, r.write)).collect();
        assert_eq!(got, vec![(4096, 8192, true), (0, 8192, true), (0, 4096, false)]);
    }

    #[test]
    fn threads_are_joined_apart_and_forgotten_when_idle() {
        let mut j = Joiner::new();
        let mut out = Vec::new();
        j.push(&s(1, 1, Op::Write, 0, 4096), &mut out);
        j.push(&s(2, 1, Op::Write, 4096, 10), &mut out);
        j.push(&s(1, 1, Op::Write, 4096, 4096), &mut out);
        j.flush(&mut out);
        let mut got: Vec<_> = out.iter().map(|r| (r.off, r.len)).collect();
        got.sort();
        assert_eq!(got, vec![(0, 8192), (4096, 10)]);
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
