//! The planner against HybridStore's Figures 3, 4 and 6: the shape of the
//! choices on the synthetic workloads of Table IV.

use super::*;
use crate::classify::classify;
use crate::synth::by_name;

const TB: u64 = 1_000_000_000_000;
const CHEETAH: &str = "Seagate Cheetah 15K 146GB";
const BARRACUDA: &str = "Seagate Barracuda 7.2K 750GB";
const SLC: &str = "Intel X25-E SLC 32GB";
const MLC: &str = "Intel X25-M MLC 80GB";

/// `secs` seconds of a Table IV workload over `span` bytes of a 1 TB data set.
fn plan_for(name: &str, secs: u64, span: u64, wear: bool) -> Plan {
    let recs = by_name(name).unwrap().generate(secs * 1_000_000_000, span, 1 << 30, 11);
    let w = classify(recs, Some(TB)).unwrap();
    let p = Params { wear, ..Params::default() };
    let plan = plan(&w, &Catalogue::example(), &p).unwrap();
    eprintln!("{name}:\n{}", render(&w, &p, &plan));
    plan
}

fn ssds(p: &Plan) -> u64 {
    p.count(SLC) + p.count(MLC)
}

#[test]
fn the_example_catalogue_is_table_v() {
    let c = Catalogue::example();
    assert_eq!(c.device.len(), 4);
    assert_eq!(c.dollars_per_kwh, 0.10);
    let mlc = c.device.iter().find(|d| d.name == MLC).unwrap();
    assert_eq!((mlc.capacity_gb, mlc.erase_cycles, mlc.utilization), (80.0, Some(10_000.0), 0.5));
    assert!((mlc.price() - 257.6).abs() < 1e-9);
}

#[test]
fn read_dominant_low_intensity_buys_slow_disks_only() {
    // Figure 3, SR1: capacity is all it needs; 2 Barracudas hold 1 TB at
    // 80 %, where 9 Cheetahs would cost ten times more.
    let p = plan_for("SR1", 600, TB, true);
    assert_eq!(p.count(BARRACUDA), 2, "{p:?}");
    assert_eq!(p.devices.len(), 1, "{p:?}");
    let cheetah_only = p.single_type.iter().find(|(n, _)| n == CHEETAH).unwrap().1.unwrap();
    assert!(cheetah_only > 5.0 * p.total, "{cheetah_only} against {}", p.total);
}

#[test]
fn read_dominant_high_intensity_adds_flash() {
    // Figure 3, SR3: 1.25 GB/s of 128 KiB requests needs flash's
    // bandwidth, and the cold data stays on slow disks. (The paper buys
    // MLC only; here MLC and SLC without the wear constraint, SLC with it.)
    for wear in [false, true] {
        let p = plan_for("SR3", 20, TB, wear);
        assert!(ssds(&p) > 0, "{p:?}");
        assert!(p.count(BARRACUDA) > 0, "{p:?}");
        assert_eq!(p.count(CHEETAH), 0, "{p:?}");
    }
}

#[test]
fn random_write_heavy_buys_flash() {
    // RW3: 10 000 random 4 KiB requests a second, 80 % writes, on a
    // working set of 10 GB: flash, where disks would need one spindle per
    // 240 requests a second.
    let p = plan_for("RW3", 20, 10_000_000_000, true);
    assert!(ssds(&p) > 0, "{p:?}");
    let disks_only = p.single_type.iter().find(|(n, _)| n == BARRACUDA).unwrap().1.unwrap();
    assert!(disks_only > 2.0 * p.total, "{disks_only} against {}", p.total);
}

#[test]
fn the_lifetime_constraint_swaps_mlc_for_slc() {
    // Figure 6: without the wear constraint the cheap MLC serves the
    // write-heavy load; with it, MLC wears out within the 5 years and SLC
    // (ten times the erase cycles) takes its place, at a higher price.
    let free = plan_for("RW3", 20, 10_000_000_000, false);
    let worn = plan_for("RW3", 20, 10_000_000_000, true);
    assert!(free.count(MLC) > 0, "{free:?}");
    assert_eq!(worn.count(MLC), 0, "{worn:?}");
    assert!(worn.count(SLC) > 0, "{worn:?}");
    assert!(worn.total > free.total);
}

#[test]
fn the_same_trace_gives_the_same_plan() {
    assert_eq!(plan_for("RR2", 20, TB, true), plan_for("RR2", 20, TB, true));
}

#[test]
fn a_catalogue_with_a_mistake_is_refused_with_the_field_named() {
    let bad = EXAMPLE_CATALOGUE.replace("utilization = 0.5", "utilisation = 0.5");
    let e = Catalogue::parse(&bad).unwrap_err();
    assert!(e.contains("utilisation"), "{e}");
    let bad = EXAMPLE_CATALOGUE.replace("read_mb_s = 125", "read_mb_s = 0");
    assert!(Catalogue::parse(&bad).unwrap_err().contains("read_mb_s"));
}

#[test]
fn a_workload_no_device_can_serve_is_infeasible() {
    // Only MLC, of which almost nothing may hold data: a terabyte would
    // need more devices than the program considers.
    let mut c = Catalogue::example();
    c.device.retain(|d| d.name == MLC);
    c.device[0].utilization = 1e-9;
    let recs = by_name("SR1").unwrap().generate(60_000_000_000, TB, 1 << 30, 1);
    let w = classify(recs, Some(TB)).unwrap();
    assert_eq!(plan(&w, &c, &Params::default()), Err(PlanError::Infeasible));
}
