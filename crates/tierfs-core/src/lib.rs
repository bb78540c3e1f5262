//! tierfs-core: everything tierfs is made of except the FUSE adapter.
//!
//! - [`store`]: the tier trait and its implementations (real directory,
//!   in-memory with crash simulation).
//! - [`state`]: the state database (sled, or in memory) and its schema.
//! - [`vfs`]: the file system operations over two stores and the state.
//! - [`migrate`]: the migration protocol and recovery.
//! - [`event`]: access events from the file system to the statistics.
//! - [`heat`]: heat sources, which see the requests passthrough I/O keeps
//!   from the daemon.
#![warn(missing_docs)]

pub mod clock;
pub mod config;
pub mod device;
pub mod engine;
pub mod error;
pub mod event;
pub mod extent;
pub mod heat;
pub mod lockcheck;
pub mod migrate;
pub mod planner;
pub mod policy;
pub mod quiet;
pub mod regulator;
pub mod report;
pub mod runtime;
pub mod settings;
pub mod state;
pub mod stats;
pub mod store;
pub mod tier;
pub mod trace;
pub mod vfs;

#[cfg(test)]
mod testutil;

pub use error::{Error, Result};
