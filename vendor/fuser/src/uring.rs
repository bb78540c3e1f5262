//! FUSE over io_uring (Linux 6.14+), added for tierfs (see `TIERFS.md`).
//!
//! Over `/dev/fuse` every request costs the server a `read` and a `writev`
//! and the requester a wake-up of whichever server thread sleeps in `read`.
//! Over io_uring the server registers ring entries, a header buffer and a
//! payload buffer each, on one queue per CPU; the kernel puts a request
//! into an entry of the requesting task's CPU and completes the entry's
//! command, and the server answers and asks for the next request in one
//! submission (`COMMIT_AND_FETCH`). The threads of a queue are pinned to
//! its CPU, so a request and its answer stay on one CPU.
//!
//! The server must ask for `FUSE_OVER_IO_URING` in its INIT reply, and from
//! then on the kernel holds every request until each queue has an entry.
//! So the session checks before that reply that io_uring with 128-byte
//! submission entries works here ([`probe`]), and a queue that fails to
//! register ends the process: the mount could not answer anything.
//! FORGET, INTERRUPT and notification replies still go over `/dev/fuse`,
//! which the session's other threads keep reading.
//!
//! The entry layout (`struct fuse_uring_req_header`): 128 bytes for the
//! in or out header, 128 for the operation's first argument (the request
//! only), then `struct fuse_uring_ent_in_out` (flags, commit id, payload
//! size). A request is put back into the `/dev/fuse` layout (in header,
//! first argument, the rest) so that the session's parser and dispatch
//! serve both transports; a reply's out header goes into the header
//! buffer and the rest into the payload buffer.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::debug;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::Channel;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::read_buf::FuseReadBuf;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `FUSE_URING_IN_OUT_HEADER_SZ` and `FUSE_URING_OP_IN_OUT_SZ`.
const IN_OUT_SZ: usize = 128;
const OP_IN_SZ: usize = 128;
/// Where `struct fuse_uring_ent_in_out` starts in the header buffer.
const ENT: usize = IN_OUT_SZ + OP_IN_SZ;
/// `sizeof(struct fuse_uring_req_header)`: the ent_in_out is 32 bytes.
const HEADER_SZ: usize = ENT + 32;
/// `sizeof(struct fuse_in_header)` and `sizeof(struct fuse_out_header)`.
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;
/// `FUSE_MIN_READ_BUFFER`.
const MIN_PAYLOAD: usize = 8192;

/// What the session needs to start the queues, fixed at INIT.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UringSetup {
    /// Bytes of each entry's payload buffer (at least the kernel's
    /// `max_payload_sz`).
    pub(crate) payload: usize,
    /// Threads per queue (one entry each).
    pub(crate) threads_per_queue: usize,
    /// Longest watch for the next request after an answer.
    pub(crate) spin: Duration,
}

impl UringSetup {
    /// The payload the kernel requires of each entry: the largest of
    /// `FUSE_MIN_READ_BUFFER`, `max_write` and `max_pages` pages.
    pub(crate) fn new(max_write: u32, max_pages: u16, threads_per_queue: usize, spin: Duration) -> Self {
        let page = page_size::get();
        let payload = MIN_PAYLOAD
            .max(max_write as usize)
            .max(max_pages as usize * page);
        UringSetup {
            payload,
            threads_per_queue: threads_per_queue.max(1),
            spin,
        }
    }
}

/// Whether this kernel lets a process set up an io_uring with 128-byte
/// submission entries (the FUSE commands need them).
pub(crate) fn probe() -> io::Result<()> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(2)
        .map(drop)
}

/// The kernel's number of queues: one per possible CPU (`nr_cpu_ids`).
pub(crate) fn queues() -> usize {
    if let Ok(s) = std::fs::read_to_string("/sys/devices/system/cpu/possible") {
        if let Some(n) = highest_cpu(s.trim()) {
            return n + 1;
        }
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// The highest CPU of a list such as `0-3,8,10-11`.
fn highest_cpu(list: &str) -> Option<usize> {
    cpu_list(list).into_iter().max()
}

/// The CPUs of a list such as `0-3,8,10-11`.
fn cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for r in list.trim().split(',').filter(|r| !r.is_empty()) {
        let mut ends = r.splitn(2, '-').map(|n| n.trim().parse::<usize>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => cpus.push(a),
            (Some(Ok(a)), Some(Ok(b))) if a <= b => cpus.extend(a..=b),
            _ => {}
        }
    }
    cpus
}

/// The online CPUs (`None` when the kernel does not say: take all).
pub(crate) fn online_cpus() -> Option<Vec<usize>> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|s| cpu_list(&s))
}

/// The buffers of the entry whose request a ring thread is serving, where
/// the reply is written straight away (no copy in between).
#[derive(Debug, Clone, Copy)]
struct Dest {
    /// The entry's header area (`HEADER_SZ` bytes).
    header: *mut u8,
    /// The entry's payload buffer, `cap` bytes.
    payload: *mut u8,
    cap: usize,
}

// SAFETY: a `Dest` is in `Out` only while `answer` serves the entry's
// request (set before the dispatch, taken out when `answer` leaves, by
// return or unwinding, under `Out`'s mutex): the entry and its buffers are
// alive then, the kernel does not touch them until the commit that follows,
// and the ring thread does not touch them until the handler has returned.
// `RingSender::send` writes through it only under the mutex, once.
unsafe impl Send for Dest {}

/// The reply of the request a ring thread is serving.
#[derive(Debug, Default)]
struct Out {
    /// Whether the request still waits for its reply.
    open: bool,
    /// The request's id (a late reply to an earlier request is refused).
    unique: u64,
    /// Where its reply goes (`None` outside the handler).
    dest: Option<Dest>,
    /// Why the reply sent could not be put into the entry.
    failed: Option<String>,
}

/// Puts a reply (out header, then its arguments, in pieces) into an entry's
/// header and payload buffers and sets the payload's size.
fn put_reply(header: &mut [u8], payload: &mut [u8], reply: &[IoSlice<'_>]) -> Result<(), String> {
    let len: usize = reply.iter().map(|r| r.len()).sum();
    let Some(rest) = len.checked_sub(OUT_HEADER).filter(|&r| r <= payload.len()) else {
        return Err(format!("a reply of {len} bytes does not fit a ring entry"));
    };
    let mut at = 0;
    for piece in reply {
        let mut piece: &[u8] = piece;
        if at < OUT_HEADER {
            let n = piece.len().min(OUT_HEADER - at);
            header[at..at + n].copy_from_slice(&piece[..n]);
            at += n;
            piece = &piece[n..];
            if piece.is_empty() {
                continue;
            }
        }
        let p = at - OUT_HEADER;
        payload[p..p + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
    header[ENT + 16..ENT + 20].copy_from_slice(&(rest as u32).to_ne_bytes());
    Ok(())
}

/// Sends a reply into the ring entry of its request. The entry is answered
/// when the handler returns, so a reply must be sent before that (a later
/// one is refused with an error; the request was answered EIO).
#[derive(Debug, Clone)]
pub(crate) struct RingSender {
    out: Arc<Mutex<Out>>,
    unique: u64,
    ch: ChannelSender,
}

impl RingSender {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut out = self.out.lock();
        if !out.open || out.unique != self.unique {
            return Err(io::Error::other(
                "the request was answered already: over io_uring a reply must be sent before the handler returns",
            ));
        }
        let Some(d) = out.dest else {
            return Err(io::Error::other("a ring reply without an entry"));
        };
        out.open = false;
        // SAFETY: see `Dest`: the request is open, so the entry's buffers
        // (`HEADER_SZ` and `cap` bytes) are the handler's to fill, and the
        // mutex held keeps every other sender out.
        let (header, payload) = unsafe {
            (
                std::slice::from_raw_parts_mut(d.header, HEADER_SZ),
                std::slice::from_raw_parts_mut(d.payload, d.cap),
            )
        };
        if let Err(why) = put_reply(header, payload, data) {
            out.failed = Some(why);
        }
        Ok(())
    }

    /// The `/dev/fuse` connection, for passthrough's backing files.
    pub(crate) fn channel(&self) -> &ChannelSender {
        &self.ch
    }
}

/// One registered entry: its buffers stay at one address while the ring
/// holds them (the ring is dropped before them, [`Queue`]).
struct Entry {
    header: Box<[u8; HEADER_SZ]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new(payload: usize) -> Self {
        let mut e = Entry {
            header: Box::new([0; HEADER_SZ]),
            payload: vec![0; payload],
            iov: Box::new([libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2]),
        };
        e.iov[0] = libc::iovec {
            iov_base: e.header.as_mut_ptr().cast(),
            iov_len: HEADER_SZ,
        };
        e.iov[1] = libc::iovec {
            iov_base: e.payload.as_mut_ptr().cast(),
            iov_len: e.payload.len(),
        };
        e
    }

    fn commit_id(&self) -> u64 {
        u64::from_ne_bytes(self.header[ENT + 8..ENT + 16].try_into().unwrap_or_default())
    }

    fn payload_size(&self) -> usize {
        u32::from_ne_bytes(self.header[ENT + 16..ENT + 20].try_into().unwrap_or_default()) as usize
    }

    /// The request in the `/dev/fuse` layout, into `buf`; its length.
    fn request_into(&self, buf: &mut [u8]) -> io::Result<usize> {
        let len = u32::from_ne_bytes(self.header[0..4].try_into().unwrap_or_default()) as usize;
        let payload = self.payload_size();
        let first = len
            .checked_sub(IN_HEADER + payload)
            .filter(|&f| f <= OP_IN_SZ && payload <= self.payload.len() && len <= buf.len())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad ring request: length {len}, payload {payload}"),
                )
            })?;
        buf[..IN_HEADER].copy_from_slice(&self.header[..IN_HEADER]);
        buf[IN_HEADER..IN_HEADER + first].copy_from_slice(&self.header[IN_OUT_SZ..IN_OUT_SZ + first]);
        buf[IN_HEADER + first..len].copy_from_slice(&self.payload[..payload]);
        Ok(len)
    }

    /// Where a reply to the entry's request goes: the buffers as the kernel
    /// was given them (the entry's own fields are not borrowed for it).
    fn dest(&self) -> Dest {
        Dest {
            header: self.iov[0].iov_base.cast(),
            payload: self.iov[1].iov_base.cast(),
            cap: self.iov[1].iov_len,
        }
    }

    /// An error reply to request `unique` (`errno` positive).
    fn set_error(&mut self, unique: u64, errno: i32) {
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        self.header[..OUT_HEADER].copy_from_slice(&h);
        self.header[ENT + 16..ENT + 20].copy_from_slice(&0u32.to_ne_bytes());
    }
}

/// `struct fuse_uring_cmd_req` in the command area of a 128-byte entry.
fn command(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

/// A thread's ring and its entries; the ring is dropped first (closing it
/// cancels its commands, after which the kernel no longer writes into the
/// entries' buffers).
struct Queue {
    ring: Option<IoUring<squeue::Entry128, cqueue::Entry>>,
    entries: Vec<Entry>,
    /// Whether the kernel is done with the entries: their registration
    /// failed, or the connection ended and tore them down. Otherwise the
    /// buffers are leaked at drop: closing a ring cancels its commands
    /// asynchronously, and a request handed to an entry meanwhile would
    /// be copied into freed memory.
    released: bool,
}

impl Drop for Queue {
    fn drop(&mut self) {
        drop(self.ring.take());
        if !self.released {
            std::mem::forget(std::mem::take(&mut self.entries));
        }
    }
}

/// Whether a command's error means the connection ended (an unknown
/// commit id, ENOENT, does not: the kernel checks the connection first).
fn ended(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV
    )
}

/// Whether a submission failed for the moment only.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY | libc::ENOMEM)
    )
}

/// Pins the calling thread to `cpu` (best effort: a CPU that is offline
/// keeps its queue, served from anywhere).
fn pin(cpu: usize) {
    if cpu >= 8 * size_of::<libc::cpu_set_t>() {
        return;
    }
    // SAFETY: the set is initialised by CPU_ZERO before use, and `cpu`
    // is within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!("ring thread not pinned to CPU {cpu}: {}", io::Error::last_os_error());
        }
    }
}

/// The next watch after an answer (pure; also what tierfs's `/dev/fuse`
/// threads use, `tierfs-fuse::linger`): `window` now, `longest` at most,
/// and `slept`, how long the thread slept between its last watch giving
/// up and its next request (`None`: the watch caught it). A wait within
/// `longest` doubles the watch, at least to an eighth of `longest`; a
/// longer one halves it, and below a sixteenth of `longest` there is none.
pub fn adapt_watch(window: Duration, longest: Duration, slept: Option<Duration>) -> Duration {
    match slept {
        None => window,
        Some(s) if s <= longest => (window * 2).clamp(longest / 8, longest),
        Some(_) if window / 2 < longest / 16 => Duration::ZERO,
        Some(_) => window / 2,
    }
}

/// Serves queue `qid` with one entry until the connection ends. `ready`
/// gets the registration's outcome. After an answer the thread watches its
/// ring for up to `spin` (adapted as [`adapt_watch`]) before it sleeps, yielding
/// the CPU between looks: a client that sends one request after another
/// finds the thread awake.
pub(crate) fn serve<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    ch: &Channel,
    qid: u16,
    setup: UringSetup,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
) -> io::Result<()> {
    pin(qid as usize);
    // Requests may come as soon as the last queue registers: the first
    // completions can arrive with the registration. `ready` is dropped at
    // once, so that the session sees a thread that dies before it says.
    let registered = register(ch, qid, setup);
    let _ = ready.send(match &registered {
        Ok(_) => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    });
    drop(ready);
    let (mut q, mut done) = registered?;
    let sender = ch.sender();
    let out = Arc::new(Mutex::new(Out::default()));
    let mut buf = FuseReadBuf::new();
    let buf = buf.as_mut();
    let fd = types::Fd(ch.as_fd_raw());
    let longest = setup.spin;
    let mut window = longest;
    let mut gave_up: Option<Instant> = None;
    loop {
        let Some(ring) = q.ring.as_mut() else {
            return Ok(());
        };
        for &(i, res) in &done {
            if res < 0 {
                if ended(-res) {
                    debug!("ring queue {qid}: connection ended ({})", io::Error::from_raw_os_error(-res));
                    q.released = true;
                    return Ok(());
                }
                let e = io::Error::from_raw_os_error(-res);
                error!("ring queue {qid}: a ring command failed, this thread stops serving: {e}");
                return Err(e);
            }
            let Some(e) = q.entries.get_mut(i) else {
                return Err(io::Error::other(format!("ring completion for unknown entry {i}")));
            };
            answer(se, e, buf, &out, &sender, qid);
            let sqe = opcode::UringCmd80::new(fd, CMD_COMMIT_AND_FETCH)
                .cmd(command(e.commit_id(), qid))
                .build()
                .user_data(i as u64);
            // SAFETY: the entry's buffers outlive the ring (`Queue`), and
            // the command carries no pointer.
            unsafe { push(ring, &sqe)? };
        }
        let answered = !done.is_empty();
        done.clear();
        if answered && window.is_zero() {
            // No watch: the next request's wait still tells whether one
            // would have caught it.
            gave_up = Some(Instant::now());
        } else if answered {
            // A failed submission is tried again below.
            let _ = ring.submit();
            let start = Instant::now();
            while ring.completion().is_empty() {
                if start.elapsed() >= window {
                    gave_up = Some(Instant::now());
                    break;
                }
                // SAFETY: no preconditions. The system call's return runs
                // the ring's task work, which posts the completions.
                unsafe { libc::sched_yield() };
            }
        }
        // Never sleeps with an answer not submitted, and never leaves
        // with one: the entry's request would wait for ever.
        while ring.completion().is_empty() {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if transient(&e) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => {
                    error!("ring queue {qid}: cannot submit to the ring, this thread stops serving: {e}");
                    return Err(e);
                }
            }
        }
        done.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
        // How long the thread slept counts to the request's arrival, not
        // to the end of its handling.
        window = adapt_watch(window, longest, gave_up.take().map(|t| t.elapsed()));
    }
}

/// Serves the request in entry `e` and puts its reply into the entry (EIO
/// when the request is malformed or its handler sent no reply).
fn answer<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    e: &mut Entry,
    buf: &mut [u8],
    out: &Arc<Mutex<Out>>,
    sender: &ChannelSender,
    qid: u16,
) {
    let unique = u64::from_ne_bytes(e.header[8..16].try_into().unwrap_or_default());
    let len = match e.request_into(buf) {
        Ok(len) => len,
        Err(err) => {
            error!("ring queue {qid}: {err}");
            e.set_error(unique, libc::EIO);
            return;
        }
    };
    // The entry's buffers are the handler's until this returns or unwinds;
    // `e`'s buffers are not touched meanwhile.
    let _lent = Lent::new(out, unique, e.dest());
    let rs = ReplySender::Ring(RingSender {
        out: out.clone(),
        unique,
        ch: sender.clone(),
    });
    match RequestWithSender::new(rs, &buf[..len]) {
        Some(req) => {
            if let Ok(Operation::Destroy(_)) = req.request.operation() {
                req.reply::<crate::ReplyEmpty>().ok();
            } else {
                // A handler that panics must not take the thread with it:
                // its entry holds the request, whose client and the
                // unmount would wait for ever. The dropped reply answered
                // EIO, as over /dev/fuse.
                let run = std::panic::AssertUnwindSafe(|| req.dispatch(se));
                if std::panic::catch_unwind(run).is_err() {
                    error!("ring queue {qid}: the handler of request {unique} panicked");
                }
            }
        }
        None => error!("ring queue {qid}: a request that does not parse"),
    }
    let mut o = out.lock();
    if o.open {
        o.open = false;
        warn!("ring queue {qid}: request {unique} had no reply when its handler returned: EIO");
        e.set_error(unique, libc::EIO);
    } else if let Some(err) = o.failed.take() {
        error!("ring queue {qid}: {err}");
        e.set_error(unique, libc::EIO);
    }
}

/// An entry's buffers lent to the senders of its request: taken back when
/// `answer` leaves, by return or by unwinding, so that nothing writes them
/// once the reply is committed.
struct Lent<'a>(&'a Mutex<Out>);

impl<'a> Lent<'a> {
    /// Opens request `unique`, whose reply goes to `dest`.
    fn new(out: &'a Mutex<Out>, unique: u64, dest: Dest) -> Self {
        let mut o = out.lock();
        o.open = true;
        o.unique = unique;
        o.dest = Some(dest);
        o.failed = None;
        drop(o);
        Lent(out)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let mut o = self.0.lock();
        o.dest = None;
        o.open = false;
    }
}

/// Sets up the ring of one thread of queue `qid` and registers its entry.
/// Also returns the completions that came with the registration: once the
/// last queue registers, a request can arrive at once.
fn register(ch: &Channel, qid: u16, setup: UringSetup) -> io::Result<(Queue, Vec<(usize, i32)>)> {
    let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(2)?;
    let mut q = Queue {
        ring: Some(ring),
        entries: vec![Entry::new(setup.payload)],
        released: false,
    };
    let fd = types::Fd(ch.as_fd_raw());
    // The kernel accepts registrations once the INIT reply is processed;
    // it answers EAGAIN before that.
    for attempt in 0.. {
        let Some(ring) = q.ring.as_mut() else {
            return Err(io::Error::other("no ring"));
        };
        for (i, e) in q.entries.iter_mut().enumerate() {
            let sqe = opcode::UringCmd80::new(fd, CMD_REGISTER)
                .cmd(command(0, qid))
                .addr(Some(e.iov.as_mut_ptr() as u64))
                .build()
                .user_data(i as u64);
            let sqe = with_len(sqe, 2);
            // SAFETY: the iovecs and the buffers they point to outlive the
            // ring (`Queue`).
            unsafe { push(ring, &sqe)? };
        }
        ring.submit()?;
        // A registration that fails completes at once; one that succeeds
        // completes only with a request.
        let came: Vec<(usize, i32)> = ring.completion().map(|c| (c.user_data() as usize, c.result())).collect();
        match came.iter().map(|&(_, r)| r).find(|&r| r < 0) {
            None => return Ok((q, came)),
            Some(r) if -r == libc::EAGAIN && attempt < 100 => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Some(r) => {
                // The kernel refused the entry: it holds none of it.
                q.released = true;
                let e = io::Error::from_raw_os_error(-r);
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot register a FUSE ring entry for queue {qid}: {e}"),
                ));
            }
        }
    }
    Err(io::Error::other("unreachable"))
}

/// `io_uring`'s `UringCmd80` has no setter for the submission's `len`,
/// which the FUSE registration uses for the number of iovecs.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `#[repr(C)]`, a 64-byte `io_uring_sqe` followed
    // by 64 bytes: 128 bytes without padding, in which `len` is the u32 at
    // byte 24 of `struct io_uring_sqe`.
    unsafe {
        let mut b: [u8; 128] = std::mem::transmute(sqe);
        b[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute(b)
    }
}

/// Queues one submission (the ring has room: each entry has at most one
/// command outstanding and the ring two slots per entry).
unsafe fn push(ring: &mut IoUring<squeue::Entry128, cqueue::Entry>, sqe: &squeue::Entry128) -> io::Result<()> {
    // SAFETY: the caller keeps what the submission points to alive.
    unsafe { ring.submission().push(sqe) }.map_err(|_| io::Error::other("ring submission queue full"))
}

impl Channel {
    fn as_fd_raw(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_possible_cpu_is_read_from_a_range_list() {
        assert_eq!(highest_cpu("0-1"), Some(1));
        assert_eq!(highest_cpu("0"), Some(0));
        assert_eq!(highest_cpu("0-3,8,10-11"), Some(11));
        assert_eq!(highest_cpu(""), None);
        assert_eq!(cpu_list("0-2,5,7-8\n"), [0, 1, 2, 5, 7, 8]);
        assert_eq!(cpu_list(""), Vec::<usize>::new());
    }

    #[test]
    fn a_ring_request_is_put_back_into_the_dev_fuse_layout() {
        let mut e = Entry::new(MIN_PAYLOAD);
        // An in header of 40 + 8 (first argument) + 5 (payload) bytes.
        e.header[0..4].copy_from_slice(&53u32.to_ne_bytes());
        e.header[4..8].copy_from_slice(&16u32.to_ne_bytes());
        e.header[8..16].copy_from_slice(&7u64.to_ne_bytes());
        e.header[IN_OUT_SZ..IN_OUT_SZ + 8].copy_from_slice(b"firstarg");
        e.payload[..5].copy_from_slice(b"name\0");
        e.header[ENT + 16..ENT + 20].copy_from_slice(&5u32.to_ne_bytes());
        let mut buf = vec![0u8; 4096];
        assert_eq!(e.request_into(&mut buf).unwrap(), 53);
        assert_eq!(&buf[..16], &e.header[..16]);
        assert_eq!(&buf[40..48], b"firstarg");
        assert_eq!(&buf[48..53], b"name\0");
        // A length that does not add up is refused.
        e.header[0..4].copy_from_slice(&300u32.to_ne_bytes());
        assert!(e.request_into(&mut buf).is_err());
    }

    #[test]
    fn a_reply_goes_to_the_header_and_the_payload() {
        let mut e = Entry::new(MIN_PAYLOAD);
        let mut head = [0u8; OUT_HEADER];
        head[8..16].copy_from_slice(&9u64.to_ne_bytes());
        // In pieces that straddle the header's end, as replies come.
        let (a, b) = head.split_at(10);
        let mut b = b.to_vec();
        b.extend_from_slice(b"attr");
        let reply = [IoSlice::new(a), IoSlice::new(&b), IoSlice::new(b"ibutes")];
        put_reply(&mut e.header[..], &mut e.payload, &reply).unwrap();
        assert_eq!(&e.header[8..16], &9u64.to_ne_bytes());
        assert_eq!(e.payload_size(), 10);
        assert_eq!(&e.payload[..10], b"attributes");
        e.set_error(9, libc::ENOENT);
        assert_eq!(e.payload_size(), 0);
        assert_eq!(&e.header[4..8], &(-libc::ENOENT).to_ne_bytes());
        // Empty pieces, and a reply that fills the payload exactly.
        let full = vec![3u8; MIN_PAYLOAD];
        let reply = [IoSlice::new(&[]), IoSlice::new(&head), IoSlice::new(&[]), IoSlice::new(&full)];
        put_reply(&mut e.header[..], &mut e.payload, &reply).unwrap();
        assert_eq!(e.payload_size(), MIN_PAYLOAD);
        assert!(e.payload.iter().all(|&b| b == 3));
        // Too big for the payload buffer.
        let big = vec![0u8; OUT_HEADER + MIN_PAYLOAD + 1];
        assert!(put_reply(&mut e.header[..], &mut e.payload, &[IoSlice::new(&big)]).is_err());
    }

    /// A sender on a channel that goes nowhere (the ring tests send no
    /// reply over it).
    fn null_sender() -> ChannelSender {
        let dev = Arc::new(crate::dev_fuse::DevFuse(std::fs::File::open("/dev/null").unwrap()));
        Channel::new(dev).sender()
    }

    #[test]
    fn a_reply_is_taken_once_and_only_for_its_own_request() {
        let ch = null_sender();
        let e = Entry::new(MIN_PAYLOAD);
        let out = Arc::new(Mutex::new(Out::default()));
        let lent = Lent::new(&out, 2, e.dest());
        let late = RingSender { out: out.clone(), unique: 1, ch: ch.clone() };
        let own = RingSender { out: out.clone(), unique: 2, ch };
        let head = [7u8; OUT_HEADER];
        assert!(late.send(&[IoSlice::new(&head), IoSlice::new(b"late")]).is_err(), "a reply to request 1 taken for request 2");
        own.send(&[IoSlice::new(&head), IoSlice::new(b"ab"), IoSlice::new(b"cd")]).unwrap();
        assert!(own.send(&[IoSlice::new(&head), IoSlice::new(b"again")]).is_err(), "a second reply taken");
        assert!(out.lock().failed.is_none());
        drop(lent);
        assert_eq!(e.payload_size(), 4);
        assert_eq!(&e.payload[..4], b"abcd");
        assert_eq!(&e.header[..OUT_HEADER], &head);
    }

    #[test]
    fn an_entry_is_taken_back_from_the_senders_when_its_answer_unwinds() {
        let e = Entry::new(MIN_PAYLOAD);
        let out = Mutex::new(Out::default());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _lent = Lent::new(&out, 4, e.dest());
            {
                let o = out.lock();
                assert!(o.dest.is_some() && o.open);
            }
            panic!("a panic outside the handler's own catch");
        }));
        assert!(r.is_err());
        let o = out.lock();
        assert!(o.dest.is_none() && !o.open);
    }

    #[test]
    fn a_reply_too_big_for_the_entry_is_refused_not_cut() {
        let e = Entry::new(MIN_PAYLOAD);
        let out = Arc::new(Mutex::new(Out::default()));
        let _lent = Lent::new(&out, 3, e.dest());
        let own = RingSender { out: out.clone(), unique: 3, ch: null_sender() };
        let big = vec![1u8; OUT_HEADER + MIN_PAYLOAD + 1];
        own.send(&[IoSlice::new(&big)]).unwrap();
        assert!(out.lock().failed.is_some());
        assert_eq!(e.payload_size(), 0);
    }

    #[test]
    fn the_watch_grows_on_a_near_miss_and_fades_when_requests_come_seldom() {
        let l = Duration::from_micros(200);
        let us = Duration::from_micros;
        assert_eq!(adapt_watch(us(50), l, None), us(50));
        assert_eq!(adapt_watch(us(50), l, Some(us(100))), us(100));
        assert_eq!(adapt_watch(us(150), l, Some(us(10))), l);
        assert_eq!(adapt_watch(Duration::ZERO, l, Some(us(10))), l / 8);
        assert_eq!(adapt_watch(us(100), l, Some(us(5000))), us(50));
        assert_eq!(adapt_watch(us(20), l, Some(us(5000))), Duration::ZERO);
    }

    #[test]
    fn a_submissions_len_is_set_at_byte_24() {
        let sqe = opcode::UringCmd80::new(types::Fd(3), CMD_REGISTER).addr(Some(0x1234)).build();
        let b: [u8; 128] = unsafe { std::mem::transmute(with_len(sqe, 2)) };
        assert_eq!(&b[24..28], &2u32.to_ne_bytes());
        assert_eq!(&b[16..24], &0x1234u64.to_ne_bytes());
        assert_eq!(&b[4..8], &3i32.to_ne_bytes());
    }
}
