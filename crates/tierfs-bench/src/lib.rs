//! tierfs-bench: the evaluation harness. Workload generators modelled on
//! the papers' benchmarks ([`workload`]), the sweep over architectures,
//! SSD sizes and workloads on emulated devices ([`sweep`]), and its
//! results: CSV, Markdown tables, SVG charts and the check of the expected
//! findings ([`report`]); what a simulated run is measured against:
//! the offline optimum and the online cache policies ([`reference`]);
//! modelled devices under the kernel for the same sweep without
//! in-process emulation, and the peers it compares there ([`devices`],
//! [`peers`]).
#![warn(missing_docs)]

pub mod blocks;
pub mod capture;
pub mod devices;
pub mod peers;
pub mod reference;
pub mod report;
pub mod rng;
pub mod stream;
pub mod sweep;
pub mod workload;
