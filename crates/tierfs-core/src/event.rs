//! Access events: what the file system tells the statistics and the
//! tiering engine. Produced on the request path, consumed off it.

use crate::clock::Timestamp;
use crate::state::ns::Ino;
use crate::tier::{Placement, Tier};

/// One thing that happened to a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The file.
    pub ino: Ino,
    /// When.
    pub time: Timestamp,
    /// What.
    pub kind: EventKind,
    /// How many requests a `Read` or `Write` stands for: 1, but for a heat
    /// source that samples one request in N when the kernel serves more
    /// than the engine should take in one by one (`crate::heat`).
    pub times: u32,
}

impl Event {
    /// One event of `ino` at `time`.
    pub fn new(ino: Ino, time: Timestamp, kind: EventKind) -> Self {
        Event { ino, time, kind, times: 1 }
    }
}

/// See [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Bytes read, served by `tier`.
    Read {
        /// Offset.
        off: u64,
        /// Bytes returned.
        len: u64,
        /// Tier that served it.
        tier: Tier,
        /// The kernel split one application request and this is a later
        /// piece of it (see [`FRAGMENT_MIN`]): its bytes count, it is not a
        /// request of its own.
        fragment: bool,
    },
    /// Bytes written to `tier` (the primary; a cached copy is updated too).
    Write {
        /// Offset.
        off: u64,
        /// Bytes written.
        len: u64,
        /// Tier of the primary copy.
        tier: Tier,
        /// File size after the write.
        size: u64,
        /// A later piece of a split application request.
        fragment: bool,
    },
    /// An open.
    Open {
        /// Opened for writing.
        write: bool,
        /// Tier reads will be served from.
        tier: Tier,
        /// Size at open.
        size: u64,
        /// The kernel does this handle's I/O (passthrough) and no heat
        /// source sees it (`crate::heat`): the open counts as one access to
        /// the whole file.
        unseen: bool,
    },
    /// The last handle was closed.
    Close {
        /// Size at close.
        size: u64,
    },
    /// A new file.
    Create {
        /// Where it was placed.
        placement: Placement,
        /// Its parent directory.
        parent: Ino,
        /// Its size (0 unless adopted).
        size: u64,
    },
    /// The size changed by truncate or fallocate.
    Resize {
        /// New size.
        size: u64,
    },
    /// The file was moved or copied between tiers (by a migration).
    Placed {
        /// New placement.
        placement: Placement,
    },
    /// The file's last name is gone.
    Remove,
    /// The file got a new parent directory (renamed).
    Moved {
        /// New parent.
        parent: Ino,
    },
    /// A directory got a new parent (renamed): its subtree may now inherit
    /// other settings.
    DirMoved {
        /// New parent.
        parent: Ino,
    },
}

/// FUSE direct I/O cuts an application request into pieces of at most
/// 256 user pages; a request of 1 MiB from an unaligned buffer becomes one
/// of 1 MiB minus a few bytes and a small tail. A request that continues
/// the previous one on the same handle, when that one was at least this
/// long (so the kernel may have cut it), is taken as its tail.
pub const FRAGMENT_MIN: u64 = 255 * 4096;

/// Where events go. Must be cheap and must not block.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn record(&self, ev: Event);
}

/// Throws events away (statistics off).
#[derive(Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn record(&self, _ev: Event) {}
}
