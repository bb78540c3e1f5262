//! Lingering: a request thread that has answered watches the FUSE device a
//! little before it goes back to sleep in `read`.
//!
//! A client such as `tar` or a mail server sends one request, waits for the
//! answer, and sends the next a few microseconds later. Over `/dev/fuse` the
//! next request goes to a sleeping request thread, and waking a sleeping
//! thread on another CPU costs far more than the request itself on a
//! virtual machine whose idle CPUs halt (measured: `tar x` of 20 000 files
//! through the mount took 5.6 s, and 3.5 s with the client and the daemon
//! on one CPU). A thread that polls the device for up to `window` after its
//! answer sees the next request at once and its `read` returns without a
//! sleep; the kernel still wakes a sleeping reader for the request, which
//! finds nothing and sleeps again, so lingering shortens the client's wait
//! rather than saving the wake-up. The poll yields the CPU between looks,
//! so a client on the same CPU is not held up; an idle mount costs nothing
//! (no request, no lingering).
//!
//! Each thread adapts its watch as `haltpoll` does for idle CPUs: when its
//! watch gave up and its next request then came within the longest watch,
//! the watch doubles (a longer one would have caught it); when it came
//! later, the watch halves, down to none. So a client whose requests come
//! more than the longest watch apart costs a few watches, not one per
//! request ([`adapt`]).
//!
//! The state is per thread, which measured better than one state for the
//! mount (postmark through the default mount on 2 cores: 16.3 s against
//! 18.3 s, the latter level with no lingering; `benches/results/
//! io-2026-11-25-linger.md`): the kernel hands a request to the reader that
//! slept longest, so a thread's own watch is judged only when it gets the
//! request after its give-up, and a long pause halves one thread's watch,
//! not everyone's. With many request threads that happens seldom, and their
//! watches shrink towards none: lingering then turns itself off rather
//! than costing CPU.

use std::cell::Cell;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Watches one descriptor of the mount's FUSE connection (every descriptor
/// of a connection, clones included, shares its queue of requests).
pub struct Linger {
    dev: OnceLock<OwnedFd>,
    longest: Duration,
}

/// A request thread's watch: how long, and when the last one gave up
/// (`None`: it found a request, or there was none yet).
#[derive(Clone, Copy)]
struct Watch {
    window: Option<Duration>,
    gave_up: Option<Instant>,
}

thread_local! {
    static WATCH: Cell<Watch> = const { Cell::new(Watch { window: None, gave_up: None }) };
}

/// The next watch (pure): the rule the ring threads of the patched fuser
/// use too, kept there once (`vendor/fuser/src/uring.rs`).
pub use fuser::adapt_watch as adapt;

impl Linger {
    /// Lingers up to `longest` (zero: never) once [`Linger::attach`]ed.
    pub fn new(longest: Duration) -> Self {
        Linger { dev: OnceLock::new(), longest }
    }

    /// The connection to watch: a duplicate of its descriptor. A second
    /// call changes nothing.
    pub fn attach(&self, dev: OwnedFd) {
        let _ = self.dev.set(dev);
    }

    /// A guard to hold for a request's handling, from the handler's first
    /// line: it adapts the thread's watch to how long the request took to
    /// come, and lingers when dropped, after the answer was sent.
    #[must_use = "the guard lingers when dropped: hold it for the whole handler"]
    pub fn guard(&self) -> Guard<'_> {
        // Unattached (the mount's requests come over io_uring rings, which
        // watch on their own) there is nothing to adapt.
        if !self.longest.is_zero() && self.dev.get().is_some() {
            WATCH.with(|w| {
                let mut v = w.get();
                let slept = v.gave_up.map(|t| t.elapsed());
                v.window = Some(adapt(v.window.unwrap_or(self.longest), self.longest, slept));
                v.gave_up = None;
                w.set(v);
            });
        }
        Guard(self)
    }

    fn wait(&self) {
        let Some(dev) = self.dev.get() else { return };
        if self.longest.is_zero() {
            return;
        }
        let window = WATCH.with(|w| w.get().window).unwrap_or(self.longest);
        let start = Instant::now();
        let found = loop {
            let mut p = libc::pollfd { fd: dev.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, timeout 0 (never blocks).
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Ready, or an error the next read reports (an unmounted
            // connection polls as an error); a failed poll ends the watch
            // too, and the thread goes back to its read.
            if n != 0 {
                break true;
            }
            if start.elapsed() >= window {
                break false;
            }
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        };
        WATCH.with(|w| {
            let mut v = w.get();
            v.gave_up = (!found).then(Instant::now);
            w.set(v);
        });
    }
}

/// See [`Linger::guard`].
#[must_use = "the guard lingers when dropped: hold it for the whole handler"]
pub struct Guard<'a>(&'a Linger);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::FromRawFd;

    fn pipe() -> (OwnedFd, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: valid out array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned here.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
    }

    /// Runs `f` in a thread of its own: the watch is per thread, and the
    /// test harness may run tests one after another in one thread.
    fn fresh(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    /// A linger of `longest` watching a pipe with nothing in it yet, and
    /// the pipe's writing end.
    fn watching(longest: Duration) -> (Linger, std::fs::File) {
        let (r, w) = pipe();
        let l = Linger::new(longest);
        l.attach(r);
        (l, w)
    }

    fn timed(l: &Linger) -> Duration {
        let t = Instant::now();
        drop(l.guard());
        t.elapsed()
    }

    #[test]
    fn with_nothing_to_read_it_watches_for_the_window_and_no_longer() {
        fresh(|| {
            let (l, _w) = watching(Duration::from_millis(20));
            let t = timed(&l);
            assert!(t >= Duration::from_millis(20), "returned after {t:?}");
            assert!(t < Duration::from_secs(2), "returned after {t:?}");
        });
    }

    #[test]
    fn a_request_already_waiting_ends_the_watch_at_once() {
        fresh(|| {
            let (l, mut w) = watching(Duration::from_secs(30));
            w.write_all(b"x").unwrap();
            assert!(timed(&l) < Duration::from_secs(5));
        });
    }

    #[test]
    fn a_request_arriving_during_the_watch_ends_it() {
        fresh(|| {
            let (l, mut w) = watching(Duration::from_secs(30));
            let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = sent.clone();
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                w.write_all(b"x").unwrap();
                w
            });
            let t = timed(&l);
            assert!(sent.load(std::sync::atomic::Ordering::SeqCst), "the watch ended before anything came ({t:?})");
            assert!(t < Duration::from_secs(5), "returned after {t:?}");
            drop(writer.join().unwrap());
        });
    }

    #[test]
    fn a_closed_connection_ends_the_watch_at_once() {
        fresh(|| {
            // An unmounted FUSE connection polls as an error; a pipe whose
            // writer is gone polls as hung up.
            let (l, w) = watching(Duration::from_secs(30));
            drop(w);
            assert!(timed(&l) < Duration::from_secs(5));
        });
    }

    #[test]
    fn requests_that_come_later_than_the_longest_watch_end_the_watching() {
        let longest = Duration::from_micros(200);
        let mut w = longest;
        let mut steps = 0;
        while !w.is_zero() {
            w = adapt(w, longest, Some(Duration::from_millis(5)));
            steps += 1;
        }
        assert_eq!(steps, 5, "100, 50, 25, 12.5, then none");
        // A request found by the watch changes nothing.
        assert_eq!(adapt(Duration::from_micros(50), longest, None), Duration::from_micros(50));
        assert_eq!(adapt(Duration::ZERO, longest, None), Duration::ZERO);
    }

    #[test]
    fn a_request_that_a_longer_watch_would_have_caught_doubles_the_watch() {
        let longest = Duration::from_micros(200);
        let quick = Some(Duration::from_micros(30));
        let w = adapt(Duration::ZERO, longest, quick);
        assert_eq!(w, Duration::from_micros(25), "from none to an eighth");
        let w = adapt(w, longest, quick);
        assert_eq!(w, Duration::from_micros(50));
        let w = adapt(adapt(w, longest, quick), longest, quick);
        assert_eq!(w, longest, "never past the longest");
        assert_eq!(adapt(w, longest, quick), longest);
    }

    #[test]
    fn a_thread_whose_watch_gave_up_watches_less_after_a_long_sleep() {
        fresh(|| {
            let (l, _w) = watching(Duration::from_millis(400));
            // Long enough that a busy machine's scheduling delays (tests
            // run in parallel) stay well within the margins.
            assert!(timed(&l) >= Duration::from_millis(400), "the first watch is the longest");
            // The next request comes 600 ms after the watch gave up: half.
            std::thread::sleep(Duration::from_millis(600));
            let t = timed(&l);
            assert!(t >= Duration::from_millis(200) && t < Duration::from_millis(400), "watched {t:?}");
        });
    }

    #[test]
    fn off_when_the_window_is_zero_or_nothing_is_attached() {
        fresh(|| {
            let (zero, _w) = watching(Duration::ZERO);
            assert!(timed(&zero) < Duration::from_secs(5));
            let detached = Linger::new(Duration::from_secs(30));
            assert!(timed(&detached) < Duration::from_secs(5));
        });
    }
}
