//! Helpers of the core's tests.

use crate::store::mem::MemStore;
use std::cell::RefCell;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// A volume over two in-memory stores, its new files on the HDD, with a
/// manual clock and no engine; and its HDD store.
pub(crate) fn hdd_volume() -> (crate::vfs::Volume<MemStore>, MemStore) {
    crate::lockcheck::watch();
    let hdd = MemStore::new();
    let v = crate::vfs::Volume::new(
        MemStore::new(),
        hdd.clone(),
        crate::state::ns::Namespace::new(Arc::new(crate::state::MemKv::new())),
        crate::vfs::VolumeConfig::default(),
        Arc::new(crate::event::NoEvents),
        Arc::new(crate::clock::ManualClock::new(crate::clock::Timestamp::from_secs(1))),
    )
    .expect("a volume over empty stores");
    (v, hdd)
}

/// Runs `f` on another thread and fails if it does not return in time.
pub(crate) fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} hung for {secs} s"))
}

/// Holds the store operation `op` on the entry `name`, made by the thread
/// named `thread`, until the test releases it (at most 10 s). Returns a
/// receiver told when the operation is held, and the release.
pub(crate) fn hold(
    store: &MemStore,
    op: &'static str,
    name: &'static str,
    thread: &'static str,
) -> (Receiver<()>, SyncSender<()>) {
    let (held_tx, held) = std::sync::mpsc::sync_channel(1);
    let (release, release_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let release_rx = Arc::new(parking_lot::Mutex::new(release_rx));
    store.set_gate(Some(Arc::new(move |o, n| {
        if o == op && n == name && std::thread::current().name() == Some(thread) {
            let _ = held_tx.try_send(());
            let _ = release_rx.lock().recv_timeout(Duration::from_secs(10));
        }
    })));
    (held, release)
}

/// Like [`hold`], for the first `op` of thread `thread` whatever its entry.
pub(crate) fn hold_any(store: &MemStore, op: &'static str, thread: &'static str) -> (Receiver<()>, SyncSender<()>) {
    let (held_tx, held) = std::sync::mpsc::sync_channel(1);
    let (release, release_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let release_rx = Arc::new(parking_lot::Mutex::new(release_rx));
    let once = std::sync::atomic::AtomicBool::new(false);
    store.set_gate(Some(Arc::new(move |o, _| {
        if o == op
            && std::thread::current().name() == Some(thread)
            && !once.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let _ = held_tx.try_send(());
            let _ = release_rx.lock().recv_timeout(Duration::from_secs(10));
        }
    })));
    (held, release)
}

/// A test point's name and its action (out while it runs).
type Point = (&'static str, Option<Box<dyn FnMut()>>);

thread_local! {
    /// The actions of this thread's test points (see [`point`]).
    static POINTS: RefCell<Vec<Point>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` each time this thread passes the test point `name` (a
/// `#[cfg(test)] testutil::point(name)` in the code), until the returned
/// guard is dropped: a race between two reads of one request, which no
/// store gate can hold, made to happen. Per thread, so tests running in
/// parallel do not see each other's points.
pub(crate) fn on_point(name: &'static str, f: impl FnMut() + 'static) -> PointGuard {
    POINTS.with(|p| p.borrow_mut().push((name, Some(Box::new(f)))));
    PointGuard(name)
}

/// Removes a test point's action when dropped.
pub(crate) struct PointGuard(&'static str);

impl Drop for PointGuard {
    fn drop(&mut self) {
        let name = self.0;
        POINTS.with(|p| p.borrow_mut().retain(|(n, _)| *n != name));
    }
}

/// The test point `name`: runs its action if this thread set one. The
/// action is taken out while it runs, so it may pass the point again
/// without running twice.
pub(crate) fn point(name: &'static str) {
    let f = POINTS.with(|p| p.borrow_mut().iter_mut().find(|(n, _)| *n == name).and_then(|(_, f)| f.take()));
    let Some(mut f) = f else { return };
    f();
    POINTS.with(|p| {
        if let Some((_, slot)) = p.borrow_mut().iter_mut().find(|(n, _)| *n == name) {
            *slot = Some(f);
        }
    });
}
