//! The sweep's results: a CSV of every run, Markdown tables normalised to
//! the HDD-only and SSD-only baselines, one SVG chart per workload in the
//! style of the Loris figures, and the check of the design brief's expected
//! findings.

use crate::sweep::Row;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The CSV of every run.
pub fn csv(rows: &[Row]) -> String {
    let mut o = String::from(
        "workload,arch,ssd_pct,ssd_capacity_bytes,working_set_bytes,ops,secs,ops_per_sec,txn_time_secs,bytes_read,bytes_written,p50_us,p99_us,ssd_hit_ratio,moves,evictions,bytes_moved,run_hit_ratio,hdd_busy_secs,run_moves,run_evictions,run_bytes_moved,run_hdd_requests,run_promotions,run_evacuations,flush_secs,ssd_busy_secs,ssd_requests,hdd_requests,hdd_block_reads,hdd_block_writes,hdd_spinups,hdd_standby_secs,mover_moved\n",
    );
    for r in rows {
        let x = &r.report;
        let _ = writeln!(
            o,
            "{},{},{},{},{},{},{:.3},{:.2},{},{},{},{},{},{:.4},{},{},{},{},{},{},{},{}",
            r.workload,
            r.arch,
            r.pct,
            r.ssd_capacity,
            r.working_set,
            x.ops,
            x.secs,
            x.ops_per_sec,
            x.txn_time_secs.map(|t| format!("{t:.3}")).unwrap_or_default(),
            x.bytes_read,
            x.bytes_written,
            x.latency.p50_us,
            x.latency.p99_us,
            r.ssd_hit_ratio,
            r.moves,
            r.evictions,
            r.bytes_moved,
            r.run_hit_ratio.map(|h| format!("{h:.4}")).unwrap_or_default(),
            r.hdd_busy_secs.map(|b| format!("{b:.3}")).unwrap_or_default(),
            r.run_moves
                .as_ref()
                .map(|m| format!(
                    "{},{},{},{},{},{}",
                    m.moves, m.evictions, m.bytes_moved, m.hdd_requests, m.promotions, m.evacuations
                ))
                .unwrap_or_else(|| ",,,,,".into()),
            devices_csv(r),
            r.mover.map(|m| m.moved.to_string()).unwrap_or_default()
        );
    }
    o
}

/// The devices' columns of a row (empty without devices).
fn devices_csv(r: &Row) -> String {
    let Some(d) = &r.devices else { return ",,,,,,,".into() };
    let (ssd, hdd) = (d.disk("ssd"), d.disk("hdd"));
    let f = |x: Option<String>| x.unwrap_or_default();
    format!(
        "{:.3},{},{},{},{},{},{},{}",
        d.flush_secs,
        f(ssd.map(|s| format!("{:.3}", s.model.busy_secs))),
        f(ssd.map(|s| s.model.requests.to_string())),
        f(hdd.map(|h| h.model.requests.to_string())),
        f(hdd.map(|h| h.block.reads.to_string())),
        f(hdd.map(|h| h.block.writes.to_string())),
        f(hdd.map(|h| h.model.spinups.to_string())),
        f(hdd.map(|h| format!("{:.1}", h.model.standby_secs))),
    )
}

/// Whether a row's architecture is one of tierfs's peers.
pub fn is_peer(arch: &str) -> bool {
    crate::peers::Peer::all(std::time::Duration::ZERO).iter().any(|p| p.label() == arch)
}

/// Rows of one workload: baselines and (arch, pct) -> ops/s.
pub struct Table<'a> {
    /// Workload.
    pub workload: &'a str,
    /// HDD-only ops/s.
    pub hdd: f64,
    /// SSD-only ops/s.
    pub ssd: f64,
    /// The other systems run once (the peers that do not depend on the
    /// SSD size), in order: label and ops/s.
    pub others: Vec<(String, f64)>,
    /// Architectures in order.
    pub archs: Vec<String>,
    /// SSD sizes in order.
    pub sizes: Vec<u32>,
    /// The runs.
    pub cells: BTreeMap<(String, u32), &'a Row>,
    /// The mail workload reports transaction time.
    pub txn: bool,
}

/// Splits the rows by workload, in the order they ran.
pub fn tables(rows: &[Row]) -> Vec<Table<'_>> {
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.workload.as_str()) {
            order.push(&r.workload);
        }
    }
    order
        .into_iter()
        .map(|w| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.workload == w).collect();
            let base = |a: &str| mine.iter().find(|r| r.arch == a).map(|r| r.report.ops_per_sec).unwrap_or(0.0);
            let mut archs: Vec<String> = Vec::new();
            let mut sizes: Vec<u32> = Vec::new();
            let mut cells = BTreeMap::new();
            for r in mine.iter().filter(|r| r.pct > 0) {
                if !archs.contains(&r.arch) {
                    archs.push(r.arch.clone());
                }
                if !sizes.contains(&r.pct) {
                    sizes.push(r.pct);
                }
                cells.insert((r.arch.clone(), r.pct), *r);
            }
            sizes.sort_unstable();
            let others = mine
                .iter()
                .filter(|r| r.pct == 0 && r.arch != "hdd-only" && r.arch != "ssd-only")
                .map(|r| (r.arch.clone(), r.report.ops_per_sec))
                .collect();
            Table {
                workload: w,
                hdd: base("hdd-only"),
                ssd: base("ssd-only"),
                others,
                archs,
                sizes,
                cells,
                txn: mine.iter().any(|r| r.report.txn_time_secs.is_some()),
            }
        })
        .collect()
}

impl Table<'_> {
    /// ops/s of a system run once (a peer), by label.
    pub fn other(&self, label: &str) -> Option<f64> {
        self.others.iter().find(|(l, _)| l == label).map(|(_, v)| *v)
    }

    /// ops/s of an architecture at a size.
    pub fn get(&self, arch: &str, pct: u32) -> Option<f64> {
        self.cells.get(&(arch.to_string(), pct)).map(|r| r.report.ops_per_sec)
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// The Markdown tables: per workload, each architecture at each SSD size,
/// as operations per second and as a ratio to HDD-only and to SSD-only.
pub fn markdown(rows: &[Row]) -> String {
    let mut o = String::new();
    for t in tables(rows) {
        let unit = if t.txn { "transactions/s (higher is better; time = transactions / rate)" } else { "operations/s" };
        let ws = rows.iter().find(|r| r.workload == t.workload).map(|r| r.working_set).unwrap_or(0);
        let _ = writeln!(
            o,
            "### {}\n\n{unit}; working set {:.1} MB; baselines: HDD-only {:.1}, SSD-only {:.1}\n",
            t.workload,
            ws as f64 / 1e6,
            t.hdd,
            t.ssd
        );
        let alone = t.other("hdd-alone");
        if !t.others.is_empty() {
            let peers: Vec<String> = t
                .others
                .iter()
                .map(|(a, v)| {
                    let by_alone = alone.map(|h| format!(", ×{} HDD alone", ratio(*v, h))).unwrap_or_default();
                    format!("{a} {v:.1} (×{} HDD, ×{} SSD{by_alone})", ratio(*v, t.hdd), ratio(*v, t.ssd))
                })
                .collect();
            let _ = writeln!(o, "run once, on the same devices: {}\n", peers.join(", "));
        }
        let _ = write!(o, "| architecture |");
        for s in &t.sizes {
            let _ = write!(o, " {s}% of working set |");
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "|---|{}", "---|".repeat(t.sizes.len()));
        for a in &t.archs {
            let _ = write!(o, "| {a} |");
            for s in &t.sizes {
                match t.cells.get(&(a.clone(), *s)) {
                    Some(r) => {
                        let v = r.report.ops_per_sec;
                        // The run's own hit ratio where it was kept, else
                        // the mount's (warm-up included).
                        let hit = match r.run_hit_ratio {
                            Some(h) => format!("hit {:.0}% in the run", h * 100.0),
                            None => format!("hit {:.0}%", r.ssd_hit_ratio * 100.0),
                        };
                        let by_alone = alone.map(|h| format!(", ×{} HDD alone", ratio(v, h))).unwrap_or_default();
                        let hit = if r.run_hit_ratio.is_none() && is_peer(&r.arch) {
                            match r.mover {
                                Some(m) => format!("{} files moved", m.moved),
                                None => "no hit ratio".into(),
                            }
                        } else {
                            hit
                        };
                        let _ = write!(
                            o,
                            " {v:.1} (×{} HDD, ×{} SSD{by_alone}; {hit}) |",
                            ratio(v, t.hdd),
                            ratio(v, t.ssd)
                        );
                    }
                    None => {
                        let _ = write!(o, " - |");
                    }
                }
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(o);
    }
    o
}

/// The runs against the offline optimum and the online cache policies
/// over the same requests (simulated runs, [`crate::reference`]): per
/// workload, each architecture's hit ratio in the measured run at each SSD
/// size, as a share of the optimum's, in points above (or below) the
/// better of LRU and S3-FIFO, and the bytes it moved (both ways, in the
/// measured run); then the baselines' own (and the best fixed set's), with
/// the bytes they copy to the SSD. None if no run has them.
pub fn reference_markdown(rows: &[Row]) -> Option<String> {
    use tierfs_core::config::format_size;
    rows.iter().find(|r| r.reference.is_some())?;
    let pct = |h: f64| format!("{:.1}", h * 100.0);
    let mut o = String::new();
    for t in tables(rows) {
        let ws = rows.iter().find(|r| r.workload == t.workload).map(|r| r.working_set).unwrap_or(0);
        let _ = writeln!(
            o,
            "### {}

hit ratio in % of the requests (reads and writes) of the measured run; SSD sizes in % of the footprint ({}); \"of opt.\": the hit ratio over the optimum's; \"vs online\": points above the better of LRU and S3-FIFO; moved: bytes between the tiers in the run (promotions and demotions; for the baselines, bytes copied to the SSD)
",
            t.workload,
            format_size(ws)
        );
        let _ = write!(o, "| architecture |");
        for s in &t.sizes {
            let _ = write!(o, " {s}%: hit | of opt. | vs online | moved |");
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "|---|{}", "---|---|---|---|".repeat(t.sizes.len()));
        // The baselines at each size: those of the first run there (the
        // same for every run of a trace replayed at its recorded times).
        let first = |s: u32| t.archs.iter().find_map(|a| t.cells.get(&(a.clone(), s)).and_then(|r| r.reference));
        let mut line = |name: &str, cell: &dyn Fn(&crate::reference::Reference) -> String| {
            let _ = write!(o, "| {name} |");
            for &s in &t.sizes {
                match first(s) {
                    Some(b) => {
                        let _ = write!(o, " {} |", cell(&b));
                    }
                    None => {
                        let _ = write!(o, " - | - | - | - |");
                    }
                }
            }
            let _ = writeln!(o);
        };
        line("**optimum**", &|b| {
            let o = &b.opt;
            let hit = if o.exact() {
                pct(o.hit_ratio())
            } else {
                format!("≤ {} (≥ {})", pct(o.hit_ratio()), pct(o.best.hit_ratio()))
            };
            format!("{hit} | 100 | - | {}", format_size(o.best.bytes_admitted))
        });
        let of = |h: f64, b: &crate::reference::Reference| {
            if b.opt.hit_ratio() > 0.0 {
                format!("{:.1}", 100.0 * h / b.opt.hit_ratio())
            } else {
                "-".into()
            }
        };
        line("LRU", &|b| {
            format!(
                "{} | {} | - | {}",
                pct(b.lru.hit_ratio()),
                of(b.lru.hit_ratio(), b),
                format_size(b.lru.bytes_admitted)
            )
        });
        line("S3-FIFO", &|b| {
            let h = b.s3_fifo.hit_ratio();
            format!("{} | {} | - | {}", pct(h), of(h, b), format_size(b.s3_fifo.bytes_admitted))
        });
        line("best fixed set", &|b| {
            let h = b.fixed.hit_ratio();
            format!("{} | {} | - | {}", pct(h), of(h, b), format_size(b.fixed.bytes_admitted))
        });
        for a in &t.archs {
            let _ = write!(o, "| {a} |");
            for s in &t.sizes {
                match t.cells.get(&(a.clone(), *s)) {
                    Some(r) => {
                        let h = r.run_hit_ratio.unwrap_or(r.ssd_hit_ratio);
                        let moved = r.run_moves.as_ref().map_or(r.bytes_moved, |m| m.bytes_moved);
                        let (of_opt, online) = match &r.reference {
                            Some(b) => (of(h, b), format!("{:+.1}", 100.0 * (h - b.best_online()))),
                            None => ("-".into(), "-".into()),
                        };
                        let _ = write!(o, " {} | {of_opt} | {online} | {} |", pct(h), format_size(moved));
                    }
                    None => {
                        let _ = write!(o, " - | - | - | - |");
                    }
                }
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(o);
    }
    Some(o)
}

const COLORS: &[&str] =
    &["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A grouped bar chart of one workload: a group per SSD size, a bar per
/// architecture, lines for the baselines.
pub fn svg(t: &Table<'_>) -> String {
    let (w, h) = (760.0, 380.0);
    let (left, right, top, bottom) = (70.0, 200.0, 40.0, 50.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let max = t
        .cells
        .values()
        .map(|r| r.report.ops_per_sec)
        .chain([t.hdd, t.ssd])
        .chain(t.others.iter().map(|x| x.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let y = |v: f64| top + plot_h - v / max * plot_h;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let unit = if t.txn { "transactions/s" } else { "operations/s" };
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{} ({unit})</text>"#,
        left + plot_w / 2.0,
        esc(t.workload)
    );
    // Axes and grid.
    for i in 0..=5 {
        let v = max / 5.0 * i as f64;
        let yy = y(v);
        let _ =
            writeln!(o, r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/>"##, left + plot_w);
        let _ = writeln!(o, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"#, left - 6.0, yy + 4.0);
    }
    let _ = writeln!(o, r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="black"/>"#, top + plot_h);
    let groups = t.sizes.len().max(1) as f64;
    let gw = plot_w / groups;
    let bars = t.archs.len().max(1) as f64;
    let bw = gw * 0.8 / bars;
    for (gi, s) in t.sizes.iter().enumerate() {
        let gx = left + gw * gi as f64 + gw * 0.1;
        for (ai, a) in t.archs.iter().enumerate() {
            if let Some(v) = t.get(a, *s) {
                let x = gx + bw * ai as f64;
                let _ = writeln!(
                    o,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} at {s}%: {v:.1}</title></rect>"#,
                    y(v),
                    bw * 0.92,
                    top + plot_h - y(v),
                    COLORS[ai % COLORS.len()],
                    esc(a)
                );
            }
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">SSD = {s}% of working set</text>"#,
            gx + gw * 0.4,
            top + plot_h + 20.0
        );
    }
    // The baselines: dashed lines across the plot, named in the legend
    // below the architectures (a label at the line would collide with it).
    let below = top + 40.0 + 18.0 * t.archs.len() as f64 + 10.0;
    // The peers run once: dotted lines, named below the baselines.
    const OTHER_COLORS: &[&str] = &["#7f7f7f", "#bcbd22", "#17becf", "#e377c2", "#8c564b"];
    let lines = [(t.hdd, "HDD-only", "#d62728"), (t.ssd, "SSD-only", "#2ca02c")]
        .into_iter()
        .chain(t.others.iter().enumerate().map(|(i, (a, v))| (*v, a.as_str(), OTHER_COLORS[i % OTHER_COLORS.len()])));
    for (i, (v, label, color)) in lines.enumerate() {
        let yy = y(v);
        let dash = if i < 2 {
            r#"stroke-width="2" stroke-dasharray="6,4""#
        } else {
            r#"stroke-width="2" stroke-dasharray="2,3""#
        };
        let _ = writeln!(
            o,
            r#"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="{color}" {dash}/>"#,
            left + plot_w
        );
        let (lx, ly) = (left + plot_w + 10.0, below + 18.0 * i as f64);
        let _ = writeln!(
            o,
            r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" {dash}/>"#,
            ly - 4.0,
            lx + 12.0,
            ly - 4.0
        );
        let _ = writeln!(o, r#"<text x="{:.1}" y="{ly:.1}" fill="{color}">{} {v:.0}</text>"#, lx + 18.0, esc(label));
    }
    for (ai, a) in t.archs.iter().enumerate() {
        let ly = top + 40.0 + 18.0 * ai as f64;
        let lx = left + plot_w + 10.0;
        let _ = writeln!(
            o,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/>"#,
            ly - 10.0,
            COLORS[ai % COLORS.len()]
        );
        let _ = writeln!(o, r#"<text x="{:.1}" y="{ly:.1}">{}</text>"#, lx + 18.0, esc(a));
    }
    o.push_str("</svg>\n");
    o
}

/// The verdict on one expected finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The measurements show it.
    Holds,
    /// They do not.
    DoesNotHold,
    /// Not measured by this preset.
    NotMeasured,
}

/// One expected finding and what the sweep showed.
#[derive(Clone, Debug)]
pub struct Finding {
    /// Number in the design brief.
    pub n: u32,
    /// The claim.
    pub claim: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// The numbers behind it.
    pub evidence: String,
}

fn verdict(ok: bool) -> Verdict {
    if ok {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    }
}

/// Checks the design brief's expected findings against the runs (of
/// tierfs's architectures: the peers are left out).
pub fn findings(rows: &[Row]) -> Vec<Finding> {
    let own: Vec<Row> = rows.iter().filter(|r| !is_peer(&r.arch)).cloned().collect();
    let rows = own.as_slice();
    let ts = tables(rows);
    let table = |w: &str| ts.iter().find(|t| t.workload == w);
    let mut out = Vec::new();
    let na = |n, claim| Finding { n, claim, verdict: Verdict::NotMeasured, evidence: "not in this preset".into() };

    let c1 = "With Zipf locality every hybrid architecture beats HDD-only, even at 25 %.";
    out.push(match table("webserver-zipf") {
        Some(t) if !t.sizes.is_empty() => {
            let s = t.sizes[0];
            let vals: Vec<(String, f64)> = t.archs.iter().filter_map(|a| t.get(a, s).map(|v| (a.clone(), v))).collect();
            let ok = vals.iter().all(|(_, v)| *v > t.hdd);
            Finding {
                n: 1,
                claim: c1,
                verdict: verdict(ok),
                evidence: format!(
                    "at {s}%: {} against HDD-only {:.1}",
                    vals.iter().map(|(a, v)| format!("{a} {v:.1}")).collect::<Vec<_>>().join(", "),
                    t.hdd
                ),
            }
        }
        _ => na(1, c1),
    });

    let c2 = "A short migration interval thrashes on uniform workloads; a long one does not.";
    out.push(match table("webserver") {
        Some(t) => {
            let mut iv: Vec<(&String, std::time::Duration)> = t
                .archs
                .iter()
                .filter_map(|a| {
                    let d = a.strip_prefix("interval-hot-dst-")?;
                    Some((a, tierfs_core::config::parse_duration(d).ok()?))
                })
                .collect();
            iv.sort_by_key(|x| x.1);
            let short = iv.first().map(|x| x.0);
            let long = iv.last().map(|x| x.0).filter(|l| Some(*l) != short);
            match (short, long) {
                (Some(sh), Some(lo)) => {
                    let pairs: Vec<(u32, f64, f64)> =
                        t.sizes.iter().filter_map(|s| Some((*s, t.get(sh, *s)?, t.get(lo, *s)?))).collect();
                    let ok = !pairs.is_empty() && pairs.iter().all(|(_, a, b)| a < b);
                    Finding {
                        n: 2,
                        claim: c2,
                        verdict: verdict(ok),
                        evidence: pairs
                            .iter()
                            .map(|(s, a, b)| format!("{s}%: {sh} {a:.1}, {lo} {b:.1}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                    }
                }
                _ => na(2, c2),
            }
        }
        None => na(2, c2),
    });

    let c3 = "Plain cold-DST collapses under shifting locality; dynamic cold-DST recovers.";
    out.push(match table("shifting") {
        Some(t) => {
            let pairs: Vec<(u32, f64, f64)> = t
                .sizes
                .iter()
                .filter_map(|s| Some((*s, t.get("plain-cold-dst", *s)?, t.get("dynamic-cold-dst", *s)?)))
                .collect();
            let ok = !pairs.is_empty() && pairs.iter().all(|(_, p, d)| p < d);
            Finding {
                n: 3,
                claim: c3,
                verdict: verdict(ok),
                evidence: pairs
                    .iter()
                    .map(|(s, p, d)| format!("{s}%: plain {p:.1}, dynamic {d:.1}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        }
        None => na(3, c3),
    });

    let c4 = "Caching wins on read-heavy work at small SSD sizes; DST wins on append-heavy work.";
    out.push(match (table("webserver"), table("fileserver")) {
        (Some(web), Some(fsv)) => {
            let s = web.sizes.first().copied().unwrap_or(25);
            let wc = web.get("on-demand-cache", s);
            let wd = web.get("dynamic-hot-dst", s);
            let fd: Vec<(u32, f64, f64)> = fsv
                .sizes
                .iter()
                .filter_map(|s| Some((*s, fsv.get("dynamic-hot-dst", *s)?, fsv.get("on-demand-cache", *s)?)))
                .collect();
            let read_ok = matches!((wc, wd), (Some(c), Some(d)) if c > d);
            let append_ok = !fd.is_empty() && fd.iter().all(|(_, d, c)| d > c);
            Finding {
                n: 4,
                claim: c4,
                verdict: verdict(read_ok && append_ok),
                evidence: format!(
                    "webserver at {s}%: on-demand-cache {:.1}, dynamic-hot-dst {:.1}; fileserver: {}",
                    wc.unwrap_or(0.0),
                    wd.unwrap_or(0.0),
                    fd.iter().map(|(s, d, c)| format!("{s}% DST {d:.1} / cache {c:.1}")).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        _ => na(4, c4),
    });

    let c5 = "Per-directory policies beat every single architecture on the mixed workload.";
    out.push(match table("mixed") {
        Some(t) => {
            let per: Vec<String> = t
                .sizes
                .iter()
                .map(|s| {
                    let ta = t.get("type-aware", *s).unwrap_or(0.0);
                    let best = t
                        .archs
                        .iter()
                        .filter(|a| *a != "type-aware")
                        .filter_map(|a| t.get(a, *s).map(|v| (a, v)))
                        .fold(None::<(&String, f64)>, |m, x| if m.is_none_or(|m| x.1 > m.1) { Some(x) } else { m });
                    match best {
                        Some((a, v)) => format!("{s}%: type-aware {ta:.1}, best single {a} {v:.1}"),
                        None => format!("{s}%: type-aware {ta:.1}"),
                    }
                })
                .collect();
            let ok = t.sizes.iter().all(|s| {
                let ta = t.get("type-aware", *s).unwrap_or(0.0);
                t.archs.iter().filter(|a| *a != "type-aware").all(|a| t.get(a, *s).is_none_or(|v| ta > v))
            });
            Finding {
                n: 5,
                claim: c5,
                verdict: verdict(ok && t.archs.contains(&"type-aware".to_string())),
                evidence: per.join("; "),
            }
        }
        None => na(5, c5),
    });

    let c6 = "Hystor: postmark time falls steadily with SSD size, and a write-back area cuts it further.";
    out.push(finding_6(&tables(rows), c6).unwrap_or_else(|| na(6, c6)));

    let c7 = "On big files with hot blocks, sub-file extents beat every file-level architecture, which the sieve keeps off the SSD (hystor at least 5x HDD-only and 3x the best file-level one).";
    out.push(match table("db") {
        Some(t) if !t.sizes.is_empty() && t.archs.iter().any(|a| a == "hystor") => {
            let s = t.sizes[0];
            let h = t.get("hystor", s).unwrap_or(0.0);
            let best = t
                .archs
                .iter()
                .filter(|a| *a != "hystor")
                .filter_map(|a| t.get(a, s).map(|v| (a.clone(), v)))
                .fold(None::<(String, f64)>, |m, x| if m.as_ref().is_none_or(|m| x.1 > m.1) { Some(x) } else { m });
            let (ba, bv) = best.unwrap_or_default();
            let ok = t.hdd > 0.0 && h >= 5.0 * t.hdd && bv > 0.0 && h >= 3.0 * bv;
            Finding {
                n: 7,
                claim: c7,
                verdict: verdict(ok),
                evidence: format!(
                    "at {s}%: hystor {h:.1} = {:.1}x HDD-only {:.1}, {:.1}x the best file-level ({ba} {bv:.1})",
                    h / t.hdd.max(f64::MIN_POSITIVE),
                    t.hdd,
                    h / bv.max(f64::MIN_POSITIVE)
                ),
            }
        }
        _ => na(7, c7),
    });

    let c8 = "When the SSD is slowed by write load, measurement-driven placement (measured) beats a policy that assumes the SSD is always faster (dynamic-hot-dst): a lower mean response time.";
    out.push(match table("updates") {
        Some(t) if t.archs.iter().any(|a| a == "measured") && t.archs.iter().any(|a| a == "dynamic-hot-dst") => {
            let mean = |a: &str, s: u32| t.cells.get(&(a.to_string(), s)).map(|r| r.report.latency.mean_us);
            let pairs: Vec<(u32, u64, u64)> =
                t.sizes.iter().filter_map(|&s| Some((s, mean("measured", s)?, mean("dynamic-hot-dst", s)?))).collect();
            let ok = !pairs.is_empty() && pairs.iter().all(|(_, m, d)| m < d);
            Finding {
                n: 8,
                claim: c8,
                verdict: verdict(ok),
                evidence: pairs
                    .iter()
                    .map(|(s, m, d)| format!("{s}%: measured {m} µs, dynamic-hot-dst {d} µs"))
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        }
        _ => na(8, c8),
    });
    out
}

/// Finding 6 from the mail and postmark tables that have `hystor` and
/// `hystor+wbN` columns: hystor's transaction time falls with each larger
/// SSD, and at every size the best write-back area beats no area.
fn finding_6(tables: &[Table<'_>], claim: &'static str) -> Option<Finding> {
    let txn = |t: &Table<'_>, a: &str, s: u32| t.cells.get(&(a.to_string(), s)).and_then(|r| r.report.txn_time_secs);
    let mut evidence = Vec::new();
    let mut ok = true;
    let mut any = false;
    for t in tables.iter().filter(|t| t.workload == "mail" || t.workload == "postmark") {
        let wbs: Vec<&String> = t.archs.iter().filter(|a| a.starts_with("hystor+wb")).collect();
        if wbs.is_empty() || !t.archs.iter().any(|a| a == "hystor") {
            continue;
        }
        any = true;
        let plain: Vec<(u32, f64)> = t.sizes.iter().filter_map(|&s| txn(t, "hystor", s).map(|x| (s, x))).collect();
        let falls = plain.len() >= 2 && plain.windows(2).all(|w| w[1].1 < w[0].1);
        ok &= falls;
        let mut per = Vec::new();
        for &(s, x) in &plain {
            let best = wbs
                .iter()
                .filter_map(|a| txn(t, a, s).map(|y| (a.as_str(), y)))
                .fold(None::<(&str, f64)>, |m, y| if m.is_none_or(|m| y.1 < m.1) { Some(y) } else { m });
            match best {
                Some((a, y)) => {
                    ok &= y < x;
                    per.push(format!("{s}%: {x:.2} s, {a} {y:.2} s ({:+.0}%)", (y / x - 1.0) * 100.0));
                }
                None => {
                    ok = false;
                    per.push(format!("{s}%: {x:.2} s, no write-back run"));
                }
            }
        }
        evidence.push(format!(
            "{}: hystor {} with SSD size; {}",
            t.workload,
            if falls { "falls" } else { "does not fall steadily" },
            per.join(", ")
        ));
    }
    any.then(|| Finding { n: 6, claim, verdict: verdict(ok), evidence: evidence.join("; ") })
}

/// Reads notes: one line "N: sentence" per finding.
pub fn parse_notes(text: &str) -> BTreeMap<u32, String> {
    text.lines()
        .filter_map(|l| {
            let (n, s) = l.split_once(':')?;
            Some((n.trim().trim_start_matches('-').trim().parse().ok()?, s.trim().to_string()))
        })
        .collect()
}

/// The findings as a Markdown table, with the note on each: why one does
/// not hold (asked for when missing), and how one that holds was set up.
pub fn findings_markdown(f: &[Finding], notes: &BTreeMap<u32, String>) -> String {
    let mut o =
        String::from("| # | expected finding | verdict | measured | note (why not, or how) |\n|---|---|---|---|---|\n");
    for x in f {
        let v = match x.verdict {
            Verdict::Holds => "**holds**",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotMeasured => "not measured",
        };
        let why = match notes.get(&x.n) {
            Some(n) => n.as_str(),
            None if x.verdict == Verdict::Holds => "",
            None => "(no note yet)",
        };
        let _ = writeln!(o, "| {} | {} | {v} | {} | {why} |", x.n, x.claim, x.evidence);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Report;

    #[test]
    fn the_reference_table_puts_each_run_against_the_optimum_and_the_better_online_policy() {
        use crate::reference::{opt::Optimum, Outcome, Reference};
        let out = |hits| Outcome { hits, requests: 100, bytes_admitted: 1 << 20 };
        let b = Reference {
            opt: Optimum { best: out(60), bound: 60, ..Optimum::default() },
            lru: out(40),
            s3_fifo: out(45),
            fixed: out(50),
        };
        assert!(reference_markdown(&[row("zipf", "x", 5, 1.0)]).is_none(), "no run has them");
        let mut r = row("zipf", "dynamic-hot-dst", 5, 1.0);
        r.run_hit_ratio = Some(0.48);
        r.reference = Some(b);
        let t = reference_markdown(&[row("zipf", "hdd-only", 0, 1.0), r]).unwrap();
        assert!(t.contains("| **optimum** | 60.0 | 100 | - | 1M |"), "{t}");
        assert!(t.contains("| S3-FIFO | 45.0 | 75.0 | - | 1M |"), "{t}");
        assert!(t.contains("| best fixed set | 50.0 | 83.3 | - | 1M |"), "{t}");
        assert!(t.contains("| dynamic-hot-dst | 48.0 | 80.0 | +3.0 | 0 |"), "{t}");
    }

    fn row(w: &str, a: &str, pct: u32, ops: f64) -> Row {
        Row {
            workload: w.into(),
            arch: a.into(),
            pct,
            report: Report { ops_per_sec: ops, ..Report::default() },
            working_set: 1_000_000,
            ..Row::default()
        }
    }

    fn txn(w: &str, a: &str, pct: u32, secs: f64) -> Row {
        let mut r = row(w, a, pct, 1.0 / secs);
        r.report.txn_time_secs = Some(secs);
        r
    }

    #[test]
    fn finding_6_needs_falling_times_and_a_write_back_area_that_beats_none_at_every_size() {
        let mut rows = vec![txn("mail", "hdd-only", 0, 10.0), txn("mail", "ssd-only", 0, 1.0)];
        for (pct, plain, wb20, wb30) in [(25, 8.0, 6.0, 5.5), (50, 6.0, 4.0, 4.5), (75, 4.0, 3.0, 3.0)] {
            rows.push(txn("mail", "hystor", pct, plain));
            rows.push(txn("mail", "hystor+wb20", pct, wb20));
            rows.push(txn("mail", "hystor+wb30", pct, wb30));
        }
        let f6 = |rows: &[Row]| findings(rows).into_iter().find(|f| f.n == 6).unwrap();
        let f = f6(&rows);
        assert_eq!(f.verdict, Verdict::Holds, "{f:?}");
        assert!(f.evidence.contains("25%: 8.00 s, hystor+wb30 5.50 s (-31%)"), "{}", f.evidence);
        // At 75 % the area no longer helps: the finding does not hold.
        rows.retain(|r| !(r.pct == 75 && r.arch.starts_with("hystor+wb")));
        rows.push(txn("mail", "hystor+wb20", 75, 4.5));
        assert_eq!(f6(&rows).verdict, Verdict::DoesNotHold);
        // Without write-back runs it is not measured.
        rows.retain(|r| !r.arch.starts_with("hystor+wb"));
        assert_eq!(f6(&rows).verdict, Verdict::NotMeasured);
    }

    #[test]
    fn findings_are_judged_from_the_numbers() {
        let rows = vec![
            row("webserver-zipf", "hdd-only", 0, 10.0),
            row("webserver-zipf", "ssd-only", 0, 100.0),
            row("webserver-zipf", "dynamic-hot-dst", 25, 20.0),
            row("webserver-zipf", "on-demand-cache", 25, 9.0),
            row("shifting", "hdd-only", 0, 10.0),
            row("shifting", "ssd-only", 0, 100.0),
            row("shifting", "plain-cold-dst", 25, 12.0),
            row("shifting", "dynamic-cold-dst", 25, 30.0),
        ];
        let f = findings(&rows);
        assert_eq!(f[0].verdict, Verdict::DoesNotHold, "on-demand-cache lost to HDD-only: {:?}", f[0]);
        assert_eq!(f[1].verdict, Verdict::NotMeasured);
        assert_eq!(f[2].verdict, Verdict::Holds);
        let md = markdown(&rows);
        assert!(md.contains("×2.00 HDD") && md.contains("×0.20 SSD"), "{md}");
        let t = &tables(&rows)[0];
        let chart = svg(t);
        assert!(chart.starts_with("<svg") && chart.contains("HDD-only") && chart.contains("dynamic-hot-dst"));
        assert!(csv(&rows).lines().count() == rows.len() + 1);
    }

    #[test]
    fn peers_run_once_are_listed_apart_and_left_out_of_the_findings() {
        let mut rows = vec![
            row("webserver-zipf", "hdd-only", 0, 10.0),
            row("webserver-zipf", "ssd-only", 0, 100.0),
            row("webserver-zipf", "hdd-alone", 0, 20.0),
            row("webserver-zipf", "mergerfs", 0, 15.0),
            row("webserver-zipf", "dynamic-hot-dst", 25, 30.0),
            // Slower than HDD-only: it would break finding 1 if it counted.
            row("webserver-zipf", "mergerfs-cache", 25, 5.0),
        ];
        rows[5].mover = Some(crate::peers::MoverCounts { runs: 3, moved: 7, failed: 0 });
        let t = &tables(&rows)[0];
        assert_eq!(t.others, vec![("hdd-alone".to_string(), 20.0), ("mergerfs".to_string(), 15.0)]);
        assert_eq!(t.archs, ["dynamic-hot-dst", "mergerfs-cache"], "the recipe runs at each size");
        let md = markdown(&rows);
        assert!(md.contains("run once, on the same devices: hdd-alone 20.0 (×2.00 HDD, ×0.20 SSD, ×1.00 HDD alone), mergerfs 15.0 (×1.50 HDD, ×0.15 SSD, ×0.75 HDD alone)"), "{md}");
        assert!(md.contains("30.0 (×3.00 HDD, ×0.30 SSD, ×1.50 HDD alone; hit"), "{md}");
        assert!(md.contains("5.0 (×0.50 HDD, ×0.05 SSD, ×0.25 HDD alone; 7 files moved)"), "{md}");
        assert!(svg(t).contains("hdd-alone 20"), "the peers are lines of the chart");
        assert_eq!(findings(&rows)[0].verdict, Verdict::Holds, "{:?}", findings(&rows)[0]);
        assert!(csv(&rows).lines().nth(6).unwrap().ends_with(",,,,,,,,7"), "{}", csv(&rows));
    }

    #[test]
    fn findings_show_their_notes_whether_they_hold_or_not() {
        let f = |n, verdict| Finding { n, claim: "c", verdict, evidence: "e".into() };
        let notes = parse_notes("1: how it was set up\n");
        let md = findings_markdown(&[f(1, Verdict::Holds), f(2, Verdict::DoesNotHold), f(3, Verdict::Holds)], &notes);
        let rows: Vec<&str> = md.lines().skip(2).collect();
        assert!(rows[0].ends_with("| how it was set up |"), "{}", rows[0]);
        assert!(rows[1].ends_with("| (no note yet) |"), "{}", rows[1]);
        assert!(rows[2].ends_with("|  |"), "{}", rows[2]);
    }
}

/// Kendall's tau-b between two scorings of the same items: +1 the same
/// order, -1 the reverse. A pair tied in either scoring counts neither way
/// and is left out of the norm (tau-b), so that runs the simulator finds
/// equal (an SSD that holds the whole hot set under every policy) do not
/// count as disagreeing with live runs that differ only by noise. 1 for
/// fewer than two items; 0 when either scoring ties everything.
pub fn kendall_tau(a: &[f64], b: &[f64]) -> f64 {
    let spans: Vec<(f64, f64)> = a.iter().map(|&x| (x, x)).collect();
    kendall_tau_measured(&spans, b)
}

/// [`kendall_tau`] where the first scoring was measured several times: each
/// item is the lowest and highest of its repeats, and two items whose
/// ranges overlap are tied in it, because the measurements cannot say
/// which comes first (the live sweep's `--repeat`).
pub fn kendall_tau_measured(a: &[(f64, f64)], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let order_a = |i: usize, j: usize| {
        let ((lo_i, hi_i), (lo_j, hi_j)) = (a[i], a[j]);
        if hi_i < lo_j {
            -1.0
        } else if hi_j < lo_i {
            1.0
        } else {
            0.0
        }
    };
    let (mut agree, mut disagree, mut tied_a, mut tied_b) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let x = order_a(i, j);
            if x == 0.0 {
                tied_a += 1;
            }
            if b[i] == b[j] {
                tied_b += 1;
            }
            if x == 0.0 || b[i] == b[j] {
                continue;
            }
            if x * (b[i] - b[j]).signum() > 0.0 {
                agree += 1;
            } else {
                disagree += 1;
            }
        }
    }
    let pairs = (n * n.saturating_sub(1) / 2) as i64;
    if pairs == 0 {
        return 1.0;
    }
    let norm = (((pairs - tied_a) * (pairs - tied_b)) as f64).sqrt();
    if norm == 0.0 {
        0.0
    } else {
        (agree - disagree) as f64 / norm
    }
}

/// How one workload's simulated runs compare with its live ones.
#[derive(Clone, Debug, PartialEq)]
pub struct Fidelity {
    /// Workload.
    pub workload: String,
    /// Kendall's tau of the runs' throughputs (every architecture and
    /// size the two have in common, baselines included).
    pub tau: f64,
    /// Kendall's tau per SSD size over the architectures.
    pub tau_by_size: Vec<(u32, f64)>,
    /// Runs compared.
    pub runs: usize,
    /// Runs whose simulated throughput is within 25 % of the live one.
    pub within_25: usize,
    /// (architecture, size, live, simulated) of every run compared.
    pub pairs: Vec<(String, u32, f64, f64)>,
}

/// Compares a simulated sweep with a live one, workload by workload.
pub fn fidelity(live: &[Row], sim: &[Row]) -> Vec<Fidelity> {
    let mut out = Vec::new();
    let mut workloads: Vec<&str> = Vec::new();
    for r in live {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    for w in workloads {
        // Each compared run, and the range of its live repeats.
        let (pairs, ranges): (Vec<_>, Vec<(f64, f64)>) = live
            .iter()
            .filter(|l| l.workload == w)
            .filter_map(|l| {
                let s = sim.iter().find(|s| s.workload == w && s.arch == l.arch && s.pct == l.pct)?;
                let x = l.report.ops_per_sec;
                let range = l.repeats.iter().fold((x, x), |(lo, hi), &r| (lo.min(r), hi.max(r)));
                Some(((l.arch.clone(), l.pct, x, s.report.ops_per_sec), range))
            })
            .unzip();
        if pairs.is_empty() {
            continue;
        }
        let tau_of = |at: &[usize]| {
            kendall_tau_measured(
                &at.iter().map(|&i| ranges[i]).collect::<Vec<_>>(),
                &at.iter().map(|&i| pairs[i].3).collect::<Vec<_>>(),
            )
        };
        let tau = tau_of(&(0..pairs.len()).collect::<Vec<_>>());
        let mut sizes: Vec<u32> = pairs.iter().map(|p| p.1).filter(|&s| s > 0).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let tau_by_size = sizes
            .iter()
            .filter_map(|&s| {
                let at: Vec<usize> = (0..pairs.len()).filter(|&i| pairs[i].1 == s).collect();
                (at.len() > 1).then(|| (s, tau_of(&at)))
            })
            .collect();
        let within_25 = pairs.iter().filter(|p| p.2 > 0.0 && (p.3 / p.2 - 1.0).abs() <= 0.25).count();
        out.push(Fidelity { workload: w.to_string(), tau, tau_by_size, runs: pairs.len(), within_25, pairs });
    }
    out
}

/// The comparison as Markdown: a summary line per workload, then every
/// run side by side.
pub fn fidelity_markdown(f: &[Fidelity]) -> String {
    let mut s = String::from(
        "Kendall's tau-b of the runs' throughputs (ties in either ordering count neither way; two live runs measured several times whose repeats overlap are tied); within 25 %: the simulated throughput is 0.75 to 1.25 times the live one.\n\n| workload | Kendall's tau, all runs | tau per SSD size | runs within 25 % |\n|---|---|---|---|\n",
    );
    for w in f {
        let by: Vec<String> = w.tau_by_size.iter().map(|(p, t)| format!("{p}%: {t:.2}")).collect();
        s += &format!(
            "| {} | {:.2} | {} | {} of {} |\n",
            w.workload,
            w.tau,
            if by.is_empty() { "-".into() } else { by.join(", ") },
            w.within_25,
            w.runs
        );
    }
    for w in f {
        s += &format!("\n### {}\n\n| architecture | SSD | live ops/s | simulated ops/s | simulated / live |\n|---|---|---|---|---|\n", w.workload);
        for (arch, pct, l, sim) in &w.pairs {
            let size = if *pct == 0 { "-".to_string() } else { format!("{pct}%") };
            s += &format!("| {arch} | {size} | {l:.1} | {sim:.1} | {} |\n", ratio(*sim, *l));
        }
    }
    s
}

/// The findings whose verdicts differ between two sweeps of one preset
/// (a finding one of them did not measure is left out).
pub fn differing_findings(a: &[Row], b: &[Row]) -> Vec<u32> {
    findings(a)
        .iter()
        .zip(findings(b))
        .filter(|(x, y)| {
            x.verdict != y.verdict && x.verdict != Verdict::NotMeasured && y.verdict != Verdict::NotMeasured
        })
        .map(|(x, _)| x.n)
        .collect()
}

fn verdict_word(v: &Verdict) -> &'static str {
    match v {
        Verdict::Holds => "**holds**",
        Verdict::DoesNotHold => "does not hold",
        Verdict::NotMeasured => "not measured",
    }
}

/// Two sweeps of one preset side by side, `a` first: each finding's
/// verdict in both (with the note from `notes` on each that differs),
/// Kendall's tau of the architectures' order per workload, and every run
/// of tierfs as a multiple of its own sweep's HDD-only.
pub fn compare_markdown(a: &[Row], b: &[Row], (na, nb): (&str, &str), notes: &BTreeMap<u32, String>) -> String {
    let mut o = format!("| # | expected finding | {na} | {nb} | why the verdicts differ |\n|---|---|---|---|---|\n");
    let differ = differing_findings(a, b);
    for (x, y) in findings(a).iter().zip(findings(b)) {
        let why = match notes.get(&x.n) {
            Some(n) if differ.contains(&x.n) => n.as_str(),
            None if differ.contains(&x.n) => "(no note yet)",
            _ => "",
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {why} |",
            x.n,
            x.claim,
            verdict_word(&x.verdict),
            verdict_word(&y.verdict)
        );
    }
    let _ = writeln!(
        o,
        "\nKendall's tau-b of the runs' throughputs (tierfs's architectures and sizes, baselines included; 1: the same order):\n\n| workload | tau | runs |\n|---|---|---|"
    );
    let own = |rows: &[Row]| rows.iter().filter(|r| !is_peer(&r.arch)).cloned().collect::<Vec<Row>>();
    let (a, b) = (own(a), own(b));
    for f in fidelity(&a, &b) {
        let _ = writeln!(o, "| {} | {:.2} | {} |", f.workload, f.tau, f.runs);
    }
    let (ta, tb) = (tables(&a), tables(&b));
    for t in &ta {
        let Some(u) = tb.iter().find(|u| u.workload == t.workload) else { continue };
        let _ = writeln!(o, "\n### {}\n\n| architecture | SSD | {na} | {nb} |\n|---|---|---|---|", t.workload);
        let cell = |v: Option<f64>, base: f64| match v {
            Some(v) => format!("{v:.1} (×{} HDD-only)", ratio(v, base)),
            None => "-".into(),
        };
        let _ = writeln!(o, "| hdd-only | - | {:.1} | {:.1} |", t.hdd, u.hdd);
        let _ = writeln!(o, "| ssd-only | - | {} | {} |", cell(Some(t.ssd), t.hdd), cell(Some(u.ssd), u.hdd));
        for arch in &t.archs {
            for &s in &t.sizes {
                let _ = writeln!(
                    o,
                    "| {arch} | {s}% | {} | {} |",
                    cell(t.get(arch, s), t.hdd),
                    cell(u.get(arch, s), u.hdd)
                );
            }
        }
    }
    o
}

#[cfg(test)]
mod fidelity_tests {
    use super::*;

    #[test]
    fn a_comparison_names_the_findings_whose_verdicts_differ_and_wants_a_note_for_each() {
        let r = |a: &str, p: u32, v: f64| Row {
            workload: "shifting".into(),
            arch: a.into(),
            pct: p,
            report: crate::workload::Report { ops_per_sec: v, ..Default::default() },
            ..Row::default()
        };
        let devices = vec![
            r("hdd-only", 0, 10.0),
            r("ssd-only", 0, 90.0),
            r("plain-cold-dst", 25, 30.0),
            r("dynamic-cold-dst", 25, 20.0),
            r("mergerfs-cache", 25, 50.0),
        ];
        let emulated = vec![
            r("hdd-only", 0, 10.0),
            r("ssd-only", 0, 90.0),
            r("plain-cold-dst", 25, 12.0),
            r("dynamic-cold-dst", 25, 40.0),
        ];
        assert_eq!(differing_findings(&devices, &emulated), vec![3]);
        let md = compare_markdown(&devices, &emulated, ("devices", "emulated"), &BTreeMap::new());
        assert!(md.contains("| 3 | Plain cold-DST collapses under shifting locality; dynamic cold-DST recovers. | does not hold | **holds** | (no note yet) |"), "{md}");
        let notes = parse_notes("3: because\n");
        assert!(
            compare_markdown(&devices, &emulated, ("devices", "emulated"), &notes).contains("| **holds** | because |")
        );
        assert!(md.contains("| plain-cold-dst | 25% | 30.0 (×3.00 HDD-only) | 12.0 (×1.20 HDD-only) |"), "{md}");
        assert!(!md.contains("mergerfs-cache"), "the peers have no emulated runs: {md}");
        // Five pairs of runs in the same order, one (plain, dynamic) reversed.
        assert!(md.contains("| shifting | 0.67 | 4 |"), "{md}");
    }

    #[test]
    fn kendalls_tau_b_leaves_ties_out_of_the_count_and_the_norm() {
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(kendall_tau(&[1.0, 2.0, 3.0], &[30.0, 20.0, 10.0]), -1.0);
        // One pair tied in the second: the two others agree, of sqrt(3 * 2).
        let t = kendall_tau(&[1.0, 2.0, 3.0], &[10.0, 20.0, 20.0]);
        assert!((t - 2.0 / 6f64.sqrt()).abs() < 1e-12, "{t}");
        assert_eq!(kendall_tau(&[1.0, 2.0], &[5.0, 5.0]), 0.0, "everything tied");
        assert_eq!(kendall_tau(&[1.0], &[2.0]), 1.0);
    }

    #[test]
    fn live_runs_whose_repeats_overlap_are_tied_in_kendalls_tau() {
        // Runs 0 and 1 overlap (the live sweep cannot order them), so the
        // simulator's order of them counts neither way; the other pairs agree.
        let live = [(500.0, 530.0), (520.0, 590.0), (700.0, 710.0)];
        let t = kendall_tau_measured(&live, &[560.0, 510.0, 800.0]);
        assert!((t - 2.0 / 6f64.sqrt()).abs() < 1e-12, "{t}");
        // Apart, the same simulated order disagrees on that pair.
        let apart = [(500.0, 510.0), (520.0, 590.0), (700.0, 710.0)];
        assert!((kendall_tau_measured(&apart, &[560.0, 510.0, 800.0]) - 1.0 / 3.0).abs() < 1e-12);
    }
}
