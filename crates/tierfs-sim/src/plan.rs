//! The capacity planner (HybridStore §III, "HybridPlan"): which devices to
//! buy, and how many, for a workload given as a trace.
//!
//! **Classification (§III-B).** The trace's address space is cut into
//! records of 1 MiB (file, offset / 1 MiB). A record some request touched
//! is *hot*; the rest of the data set (`capacity` minus the hot records) is
//! one *cold* class. Hot records are classed by
//! - the median size of the requests that touched them: under 16 KiB
//!   (random), up to 32 KiB (partly random), up to 64 KiB (partly
//!   sequential), larger (sequential);
//! - their read share of the bytes moved: reads at least half, or not;
//! - the quartile of their request count among all hot records.
//!
//! That is 4 x 2 x 4 hot classes and the cold one: the paper's 33. Class
//! `j` has a volume `S_j`, a request count `IO_j`, and read and write
//! volumes `R_j` and `W_j`.
//!
//! **The program (§III-C).** Integers `y_i` count the devices of type `i`;
//! reals `x_ij` are the gigabytes of class `j` on them. Minimise the price
//! of the devices plus their electricity over the lifetime,
//! `sum_i y_i (price_i + kWh price * power_i * lifetime)`, subject to
//! 1. every class is placed: `sum_i x_ij = S_j`;
//! 2. capacity: `sum_j x_ij <= U_i C_i y_i`;
//! 3. performance: `sum_j Diff_ij x_ij <= y_i`, where `Diff_ij = (IT_i
//!    IO_j + R_j / RB_i + W_j / WB_i) / (S_j T)` is the share of one
//!    device's time a gigabyte of class `j` keeps busy (`IT_i` is the
//!    device's access time, `RB_i` and `WB_i` its bandwidths, `T` the
//!    trace's length);
//! 4. and 5. wear, for devices with an erase limit: what class `j` writes
//!    to them over the lifetime, `sum_j W_j / (S_j T) * LIFE * x_ij`, is at
//!    most what `y_i` devices endure, `alpha * erase_i * C_i * y_i`.
//!
//! The paper writes equation 5 in erase units with `alpha` the share of a
//! block an erase frees (from one page's worth to 1); here it is in bytes,
//! with the same `alpha`: a device endures `alpha * erase cycles` writes of
//! its whole capacity. Equation 4 (every device outlives the lifetime)
//! holds for disks and is what equation 5 says for flash.
//!
//! `--iops N` rescales the trace's time so that it issues N requests per
//! second (its bandwidths scale with it): the budget to provision for.

use crate::classify::{Class, Workload};
use good_lp::{constraint, variable, Expression, ProblemVariables, ResolutionError, Solution, SolverModel, Variable};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

const GB: f64 = 1e9;
const MB: f64 = 1e6;
/// No device count above this is considered (the program needs a bound).
const MAX_DEVICES: f64 = 100_000.0;

/// One kind of device one can buy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Name, as printed.
    pub name: String,
    /// `hdd` or `ssd` (only for the reader: the model is in the numbers).
    #[serde(default)]
    pub kind: String,
    /// Capacity, gigabytes (10^9 bytes).
    pub capacity_gb: f64,
    /// Price, dollars per gigabyte.
    pub dollars_per_gb: f64,
    /// Share of the capacity that may hold data (U_i).
    pub utilization: f64,
    /// Read bandwidth, MB/s (10^6 bytes).
    pub read_mb_s: f64,
    /// Write bandwidth, MB/s.
    pub write_mb_s: f64,
    /// Time to start one request, milliseconds (IT_i).
    pub latency_ms: f64,
    /// Average power, watts.
    pub power_w: f64,
    /// Program/erase cycles of the flash (absent for disks).
    #[serde(default)]
    pub erase_cycles: Option<f64>,
}

impl Device {
    /// Purchase price of one.
    pub fn price(&self) -> f64 {
        self.capacity_gb * self.dollars_per_gb
    }

    fn check(&self) -> Result<(), String> {
        let positive = [
            ("capacity_gb", self.capacity_gb),
            ("utilization", self.utilization),
            ("read_mb_s", self.read_mb_s),
            ("write_mb_s", self.write_mb_s),
        ];
        for (what, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("device {:?}: {what} must be a positive number", self.name));
            }
        }
        for (what, v) in
            [("dollars_per_gb", self.dollars_per_gb), ("latency_ms", self.latency_ms), ("power_w", self.power_w)]
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("device {:?}: {what} must not be negative", self.name));
            }
        }
        if self.utilization > 1.0 {
            return Err(format!("device {:?}: utilization is a share, at most 1", self.name));
        }
        if self.erase_cycles.is_some_and(|e| !(e.is_finite() && e > 0.0)) {
            return Err(format!("device {:?}: erase_cycles must be positive", self.name));
        }
        Ok(())
    }
}

/// The devices to choose from, and the price of electricity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalogue {
    /// Dollars per kilowatt-hour.
    #[serde(default = "default_kwh")]
    pub dollars_per_kwh: f64,
    /// The devices.
    pub device: Vec<Device>,
}

fn default_kwh() -> f64 {
    0.10
}

/// HybridStore's Table V, as `examples/devices.toml` holds it.
pub const EXAMPLE_CATALOGUE: &str = include_str!("../../../examples/devices.toml");

impl Catalogue {
    /// Parses and checks a catalogue.
    pub fn parse(text: &str) -> Result<Catalogue, String> {
        let c: Catalogue = toml::from_str(text).map_err(|e| e.to_string())?;
        if c.device.is_empty() {
            return Err("the catalogue has no [[device]]".into());
        }
        if !(c.dollars_per_kwh.is_finite() && c.dollars_per_kwh >= 0.0) {
            return Err("dollars_per_kwh must not be negative".into());
        }
        for d in &c.device {
            d.check()?;
        }
        Ok(c)
    }

    /// Reads a catalogue file.
    pub fn load(path: &Path) -> Result<Catalogue, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Catalogue::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// HybridStore's four devices.
    pub fn example() -> Catalogue {
        // The file is part of the source tree and checked by a test.
        Catalogue::parse(EXAMPLE_CATALOGUE).unwrap_or_else(|e| panic!("examples/devices.toml: {e}"))
    }
}

/// What to plan for.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// How long the devices must serve, seconds.
    pub lifetime_s: f64,
    /// Requests per second to provision for (None: the trace's own rate).
    pub iops: Option<f64>,
    /// Apply the wear constraint (equation 5).
    pub wear: bool,
    /// Share of a block one erase frees (equation 5's alpha), in (0, 1].
    pub alpha: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params { lifetime_s: 5.0 * tierfs_core::config::YEAR_SECS, iops: None, wear: true, alpha: 0.5 }
    }
}

/// How many of one device, and what holds it there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chosen {
    /// The device.
    pub name: String,
    /// How many.
    pub count: u64,
    /// Their purchase price.
    pub purchase: f64,
    /// Their electricity over the lifetime.
    pub electricity: f64,
    /// Share of their usable capacity the data fills.
    pub capacity_used: f64,
    /// Share of their time the requests keep them busy.
    pub busy: f64,
    /// Share of their endurance the writes wear out over the lifetime (0
    /// for disks; above 1 when the wear constraint was not applied and
    /// they would wear out early).
    pub wear: f64,
    /// Gigabytes placed on them.
    pub gigabytes: f64,
}

impl Chosen {
    /// The constraint that sets the count: the one closest to full (wear
    /// only when it was applied).
    pub fn bound_by(&self, wear_applied: bool) -> &'static str {
        let wear = if wear_applied { self.wear } else { 0.0 };
        let m = self.capacity_used.max(self.busy).max(wear);
        if m == self.capacity_used {
            "capacity"
        } else if m == self.busy {
            "performance"
        } else {
            "wear"
        }
    }
}

/// The planner's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Devices with a count above zero, in catalogue order.
    pub devices: Vec<Chosen>,
    /// Purchase plus electricity.
    pub total: f64,
    /// Where each class went: class label, then (device, gigabytes).
    pub placement: Vec<(String, Vec<(String, f64)>)>,
    /// The cheapest plan with one device type only, for each type (None:
    /// that type alone cannot serve the workload).
    pub single_type: Vec<(String, Option<f64>)>,
    /// Whether equation 5 was applied.
    pub wear: bool,
}

impl Plan {
    /// How many of the device named `name`.
    pub fn count(&self, name: &str) -> u64 {
        self.devices.iter().filter(|d| d.name == name).map(|d| d.count).sum()
    }
}

/// Why there is no plan.
#[derive(Debug, PartialEq)]
pub enum PlanError {
    /// No combination of the catalogue's devices serves the workload.
    Infeasible,
    /// The inputs are wrong.
    Input(String),
    /// The solver failed.
    Solver(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Infeasible => write!(
                f,
                "no set of at most {MAX_DEVICES} devices of each type serves this workload \
                 (is some class written faster than any device endures, or requested faster than \
                 the devices serve? try a shorter --lifetime or a lower --iops)"
            ),
            PlanError::Input(s) => f.write_str(s),
            PlanError::Solver(s) => write!(f, "the solver failed: {s}"),
        }
    }
}

impl std::error::Error for PlanError {}

/// Per gigabyte of class `c` on device `d`: (busy share, bytes worn over the lifetime).
fn per_gb(c: &Class, d: &Device, t: f64, p: &Params) -> (f64, f64) {
    let gb = c.bytes as f64 / GB;
    let busy = (d.latency_ms / 1e3 * c.ios as f64
        + c.read_bytes as f64 / (d.read_mb_s * MB)
        + c.write_bytes as f64 / (d.write_mb_s * MB))
        / (gb * t);
    let wear = c.write_bytes as f64 / GB / (gb * t) * p.lifetime_s;
    (busy, wear)
}

fn endurance(d: &Device, p: &Params) -> Option<f64> {
    d.erase_cycles.filter(|_| p.wear).map(|e| p.alpha * e * d.capacity_gb)
}

fn cost_per_device(d: &Device, kwh: f64, p: &Params) -> (f64, f64) {
    (d.price(), kwh * d.power_w / 1e3 * p.lifetime_s / 3600.0)
}

/// Solves the program over the devices `which` of the catalogue.
fn solve(w: &Workload, cat: &Catalogue, which: &[usize], p: &Params) -> Result<Plan, PlanError> {
    let t = w.scaled_seconds(p.iops);
    let classes: Vec<&Class> = w.classes.iter().filter(|c| c.bytes > 0).collect();
    let mut vars = ProblemVariables::new();
    let y: Vec<Variable> = which.iter().map(|_| vars.add(variable().integer().min(0).max(MAX_DEVICES))).collect();
    let x: Vec<Vec<Variable>> =
        which.iter().map(|_| classes.iter().map(|_| vars.add(variable().min(0))).collect()).collect();
    let mut objective = Expression::from(0.0);
    for (k, &i) in which.iter().enumerate() {
        let (buy, power) = cost_per_device(&cat.device[i], cat.dollars_per_kwh, p);
        objective += (buy + power) * y[k];
    }
    // Per gigabyte of class j on device k: (busy share, bytes worn).
    let coef: Vec<Vec<(f64, f64)>> =
        which.iter().map(|&i| classes.iter().map(|c| per_gb(c, &cat.device[i], t, p)).collect()).collect();
    let mut model = vars.minimise(objective).using(good_lp::microlp);
    for (j, c) in classes.iter().enumerate() {
        let placed: Expression = x.iter().map(|xk| xk[j]).sum();
        model = model.with(constraint!(placed == c.bytes as f64 / GB));
    }
    for (k, &i) in which.iter().enumerate() {
        let d = &cat.device[i];
        let used: Expression = x[k].iter().sum();
        model = model.with(constraint!(used <= d.utilization * d.capacity_gb * y[k]));
        let mut busy = Expression::from(0.0);
        let mut worn = Expression::from(0.0);
        for (&(b, wr), &xj) in coef[k].iter().zip(&x[k]) {
            busy += b * xj;
            worn += wr * xj;
        }
        model = model.with(constraint!(busy <= y[k]));
        if let Some(e) = endurance(d, p) {
            model = model.with(constraint!(worn <= e * y[k]));
        }
    }
    let sol = model.solve().map_err(|e| match e {
        ResolutionError::Infeasible => PlanError::Infeasible,
        e => PlanError::Solver(e.to_string()),
    })?;
    let mut plan =
        Plan { devices: Vec::new(), total: 0.0, placement: Vec::new(), single_type: Vec::new(), wear: p.wear };
    for (k, &i) in which.iter().enumerate() {
        let d = &cat.device[i];
        let count = sol.value(y[k]).round().max(0.0) as u64;
        if count >= MAX_DEVICES as u64 {
            return Err(PlanError::Infeasible);
        }
        let gbs: Vec<f64> = x[k].iter().map(|&v| sol.value(v).max(0.0)).collect();
        let gigabytes: f64 = gbs.iter().sum();
        if count == 0 {
            continue;
        }
        let (buy, power) = cost_per_device(d, cat.dollars_per_kwh, p);
        let n = count as f64;
        let (mut busy, mut worn) = (0.0, 0.0);
        for (&(b, wr), g) in coef[k].iter().zip(&gbs) {
            busy += b * g;
            worn += wr * g;
        }
        let wear = d.erase_cycles.map_or(0.0, |e| worn / (p.alpha * e * d.capacity_gb * n));
        plan.devices.push(Chosen {
            name: d.name.clone(),
            count,
            purchase: buy * n,
            electricity: power * n,
            capacity_used: gigabytes / (d.utilization * d.capacity_gb * n),
            busy: busy / n,
            wear,
            gigabytes,
        });
        plan.total += (buy + power) * n;
    }
    for (j, c) in classes.iter().enumerate() {
        let on: Vec<(String, f64)> = which
            .iter()
            .enumerate()
            .map(|(k, &i)| (cat.device[i].name.clone(), sol.value(x[k][j]).max(0.0)))
            .filter(|(_, g)| *g > 1e-6)
            .collect();
        plan.placement.push((c.label(), on));
    }
    Ok(plan)
}

/// The cheapest set of the catalogue's devices for the workload, with the
/// single-type alternatives for comparison.
pub fn plan(w: &Workload, cat: &Catalogue, p: &Params) -> Result<Plan, PlanError> {
    if !(p.lifetime_s.is_finite() && p.lifetime_s > 0.0) {
        return Err(PlanError::Input("the lifetime must be positive".into()));
    }
    if !(p.alpha > 0.0 && p.alpha <= 1.0) {
        return Err(PlanError::Input("alpha must be in (0, 1]".into()));
    }
    if p.iops.is_some_and(|n| !(n.is_finite() && n > 0.0)) {
        return Err(PlanError::Input("--iops must be positive".into()));
    }
    if w.ios == 0 || w.seconds <= 0.0 {
        return Err(PlanError::Input(
            "the trace has no reads or writes spread over time: nothing to provision for".into(),
        ));
    }
    let all: Vec<usize> = (0..cat.device.len()).collect();
    let mut best = solve(w, cat, &all, p)?;
    for i in all {
        let alone = match solve(w, cat, &[i], p) {
            Ok(s) => Some(s.total),
            Err(PlanError::Infeasible) => None,
            Err(e) => return Err(e),
        };
        best.single_type.push((cat.device[i].name.clone(), alone));
    }
    Ok(best)
}

fn money(v: f64) -> String {
    let whole = v.round() as u64;
    let s = whole.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    format!("${out}")
}

/// The plan for people: the choice, its cost, and why.
pub fn render(w: &Workload, p: &Params, plan: &Plan) -> String {
    let mut o = String::new();
    let t = w.scaled_seconds(p.iops);
    let years = p.lifetime_s / tierfs_core::config::YEAR_SECS;
    let _ = writeln!(
        o,
        "workload: {} requests in {:.1} s ({:.0} per second{}), {:.0} % of the bytes read; {:.1} GB of data, {:.1} GB of it touched",
        w.ios,
        t,
        w.ios as f64 / t,
        if p.iops.is_some() { ", as --iops asks" } else { "" },
        100.0 * w.read_share(),
        w.total_bytes() as f64 / GB,
        w.hot_bytes() as f64 / GB,
    );
    let _ = writeln!(o, "\nbuy:");
    for d in &plan.devices {
        let _ = writeln!(
            o,
            "  {:>4} x {:<28} {:>10} + {:>8} electricity   bound by {}",
            d.count,
            d.name,
            money(d.purchase),
            money(d.electricity),
            d.bound_by(plan.wear)
        );
    }
    let _ = writeln!(o, "  total over {years:.1} years: {}", money(plan.total));
    let _ = writeln!(o, "\nwhy (share of what the devices bought can give):");
    let _ = writeln!(o, "  {:<28} {:>9} {:>9} {:>9} {:>10}", "device", "capacity", "busy", "wear", "GB placed");
    for d in &plan.devices {
        let wear = if d.wear > 0.0 { format!("{:.0} %", 100.0 * d.wear) } else { "-".into() };
        let _ = writeln!(
            o,
            "  {:<28} {:>7.0} % {:>7.0} % {:>9} {:>10.1}",
            d.name,
            100.0 * d.capacity_used,
            100.0 * d.busy,
            wear,
            d.gigabytes
        );
    }
    if !plan.wear {
        let _ = writeln!(o, "  (the wear constraint was not applied: --no-wear)");
    }
    let _ = writeln!(o, "\none device type only:");
    for (name, cost) in &plan.single_type {
        let c = cost.map_or("cannot serve it".into(), |c| format!("{} ({:.1}x)", money(c), c / plan.total.max(1e-9)));
        let _ = writeln!(o, "  {name:<28} {c}");
    }
    let _ = writeln!(o, "\nclasses (median request, reads, request-count quartile) and where they go:");
    for ((label, on), c) in plan.placement.iter().zip(w.classes.iter().filter(|c| c.bytes > 0)) {
        let places: Vec<String> = on.iter().map(|(n, g)| format!("{g:.1} GB on {n}")).collect();
        let _ = writeln!(o, "  {label:<34} {:>9.2} GB {:>9} req  {}", c.bytes as f64 / GB, c.ios, places.join(", "));
    }
    o
}

#[cfg(test)]
mod tests;
