//! tierfs integration tests: real FUSE mounts of the built binary. One test
//! binary (so the crate graph is linked once); each module is a topic.

mod adopt;
mod badinput;
mod bench;
mod cache;
mod cli;
mod crash;
mod devices;
mod extents;
mod hardening;
mod harness;
mod heat;
mod killloop;
mod linger;
mod measured;
mod multiuser;
mod ops;
mod persist;
mod plan;
mod policy;
mod posix;
mod quiet;
mod stats;
mod tiering;
mod torture;
mod uring;
