//! The engine's intake from the heat source (`crate::heat`): the samples of
//! the requests the kernel served by itself, joined into requests and taken
//! in as the `Read` and `Write` events the userspace path emits, so that
//! the statistics, the policies and Hystor's block table count a
//! passthrough file's requests as they count any other's.

use super::Engine;
use crate::clock::Timestamp;
use crate::event::{Event, EventKind};
use crate::heat::{monotonic_ns, sampling_interval, Joiner, Request, Sample};
use crate::report::{HeatReport, SeenReport};
use crate::store::Store;
use crate::tier::Tier;
use crate::vfs::IoMode;

/// The joiner and its buffers (a leaf lock).
#[derive(Debug, Default)]
pub(crate) struct Intake {
    joiner: Joiner,
    samples: Vec<Sample>,
    requests: Vec<Request>,
    /// Requests begun since the last tick, and when that was.
    since_tick: u64,
    last_tick: Option<Timestamp>,
    /// The source samples one request in so many.
    every: u32,
}

/// What a call of [`Engine::heat_events`] also does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drain {
    /// Takes what came.
    Take,
    /// The engine's tick: writes whose pieces stopped coming are over.
    Tick,
    /// The unmount: every pending write is over.
    Last,
}

impl<S: Store> Engine<S> {
    /// The events of the requests the heat source saw since the last call.
    pub(super) fn heat_events(&self, drain: Drain) -> Vec<Event> {
        let heat = self.vol.heat();
        let time = self.clock.now();
        let requests = {
            let mut guard = self.heat.lock();
            let i = &mut *guard;
            heat.drain(&mut i.samples);
            for s in i.samples.drain(..) {
                i.joiner.push(&s, &mut i.requests);
            }
            i.since_tick += i.joiner.take_begun();
            match drain {
                Drain::Take => {}
                Drain::Tick => {
                    i.joiner.end_of_drain(&mut i.requests);
                    // The sampling interval follows the load, tick by tick.
                    if let Some(last) = i.last_tick {
                        let every = sampling_interval(i.since_tick, time.since(last).as_secs_f64(), i.every);
                        if every != i.every.max(1) {
                            heat.set_every(every);
                        }
                        i.every = every;
                    }
                    i.last_tick = Some(time);
                    i.since_tick = 0;
                }
                Drain::Last => i.joiner.flush(&mut i.requests),
            }
            std::mem::take(&mut i.requests)
        };
        if requests.is_empty() {
            return Vec::new();
        }
        // The samples' clock (CLOCK_MONOTONIC) in the engine's time.
        let offset = i128::from(time.0) - i128::from(monotonic_ns());
        let at = |t: u64| Timestamp((i128::from(t) + offset).clamp(0, i128::from(time.0)) as u64);
        // A write's event carries the size after it: the kernel wrote the
        // file, and only grew it if it wrote past its end. (A write joined
        // after a later truncate and close of its file leaves the size its
        // end until the file's next open or close.)
        let p = self.planner.lock();
        let mut events: Vec<Event> = requests
            .into_iter()
            .map(|r| {
                let kind = if r.write {
                    let end = r.off.saturating_add(r.len);
                    let size = p.stats.get(r.ino).map_or(end, |f| f.size.max(end));
                    EventKind::Write { off: r.off, len: r.len, tier: r.tier, size, fragment: false }
                } else {
                    EventKind::Read { off: r.off, len: r.len, tier: r.tier, fragment: false }
                };
                Event { ino: r.ino, time: at(r.time), kind, times: r.times }
            })
            .collect();
        drop(p);
        // A write is reported when its call is over, after later reads.
        events.sort_by_key(|e| e.time);
        events
    }

    /// The heat source and what it saw, for `tierfs stats`.
    pub(super) fn heat_report(&self) -> HeatReport {
        let heat = self.vol.heat();
        let (mut counts, every) = {
            let i = self.heat.lock();
            (i.joiner.counts(), i.every)
        };
        (counts.lost, counts.watched) = heat.lost_and_watched();
        counts.every = every.max(1);
        HeatReport {
            source: heat.name().into(),
            passthrough: self.vol.io_mode() == IoMode::Passthrough,
            tiers: Tier::ALL
                .iter()
                .map(|&t| {
                    let s = heat.sees(t);
                    SeenReport { tier: t.name().into(), reads: s.reads, writes: s.writes, direct: s.direct }
                })
                .collect(),
            counts,
        }
    }
}

/// Merges the heat source's events (in time order) into the queue's,
/// each where its time puts it; the queue's keep their order, and come
/// first at equal times.
pub(super) fn merge(queue: Vec<Event>, heat: Vec<Event>) -> Vec<Event> {
    if heat.is_empty() {
        return queue;
    }
    let mut out = Vec::with_capacity(queue.len() + heat.len());
    let mut h = heat.into_iter().peekable();
    for ev in queue {
        while let Some(x) = h.next_if(|x| x.time < ev.time) {
            out.push(x);
        }
        out.push(ev);
    }
    out.extend(h);
    out
}

/// How a mount in `mode` counts accesses, for `tierfs stats`.
pub(super) fn counting(mode: IoMode, heat: &HeatReport) -> String {
    let reads = heat.tiers.iter().all(|t| t.reads);
    let writes = heat.tiers.iter().all(|t| t.writes);
    match (mode, reads, writes) {
        (IoMode::Userspace, ..) => "per request".into(),
        (IoMode::Passthrough, true, true) => {
            format!("per request (passthrough: seen by the {} heat source)", heat.source)
        }
        (IoMode::Passthrough, true, false) => format!(
            "per request for reads (seen by the {} heat source), per open for writes to passthrough files on a tier \
             whose writes it does not see",
            heat.source
        ),
        (IoMode::Passthrough, false, _) if heat.tiers.iter().any(|t| t.reads) => format!(
            "per request on the tiers the {} heat source sees, per open on the others (there files whose chunks are \
             counted take the userspace path)",
            heat.source
        ),
        (IoMode::Passthrough, false, _) => {
            "per open (passthrough: no heat source sees the kernel's reads and writes; files whose chunks are counted \
             take the userspace path)"
                .into()
        }
    }
}
