//! Traces and what is done with them off line: the trace formats tierfs
//! imports (`import`), HybridStore's synthetic workloads (`synth`), and
//! the capacity planner (`classify`, `plan`). The trace format itself is
//! `tierfs_core::trace`, so that the mount can record one.

pub mod classify;
pub mod generate;
pub mod import;
pub mod plan;
pub mod sim;
pub mod synth;
