//! Helpers of the core's tests.

use crate::store::mem::MemStore;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

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
