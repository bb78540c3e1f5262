//! tierfs-fuse: the FUSE adapter. [`fs::TierFs`] turns kernel requests into
//! calls of [`tierfs_core::vfs::Volume`]; [`mount`] validates nothing (the
//! CLI does), opens the state, recovers, mounts and serves until unmounted.
#![warn(missing_docs)]

pub mod control;
pub mod errno;
pub mod fs;
pub mod linger;
pub mod metrics;
pub mod mount;
pub mod owner;
pub mod passthrough;
pub use tierfs_core::runtime;

use std::ffi::OsStr;
use tierfs_core::state::ns::Ino;
use tierfs_core::vfs::Ctx;
use tierfs_core::Result;

/// Extended attributes computed by tierfs rather than stored (the
/// `user.tierfs.*` settings). `None` means "not mine, use the stored ones".
pub trait VirtualXattrs: Send + Sync {
    /// getxattr.
    fn get(&self, ino: Ino, name: &OsStr) -> Option<Result<Vec<u8>>>;
    /// setxattr.
    fn set(&self, ctx: &Ctx, ino: Ino, name: &OsStr, value: &[u8], flags: i32) -> Option<Result<()>>;
    /// removexattr.
    fn remove(&self, ctx: &Ctx, ino: Ino, name: &OsStr) -> Option<Result<()>>;
    /// Names to add to listxattr, each NUL-terminated.
    fn list(&self, ino: Ino) -> Vec<u8>;
}
