//! The engine's intake from the heat source (`crate::heat`): the samples of
//! the requests the kernel served by itself, joined into requests and taken
//! in as the `Read` and `Write` events the userspace path emits, so that
//! the statistics, the policies and Hystor's block table count a
//! passthrough file's requests as they count any other's.

use super::Engine;
use crate::clock::Timestamp;
use crate::event::{Event, EventKind};
use crate::heat::{sampling_interval, Joiner, Request, Sample};
use crate::report::HeatReport;
use crate::store::Store;
use crate::vfs::IoMode;

/// The joiner and its buffers (a leaf lock).
#[derive(Debug, Default)]
pub(crate) struct Intake {
    joiner: Joiner,
    samples: Vec<Sample>,
    requests: Vec<Request>,
    /// Samples taken since the last tick, and when that was.
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
            i.since_tick += i.samples.len() as u64;
            for s in i.samples.drain(..) {
                i.joiner.push(&s, &mut i.requests);
            }
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
        // A write's event carries the size after it: the kernel wrote the
        // file, and only grew it if it wrote past its end.
        let p = self.planner.lock();
        requests
            .into_iter()
            .map(|r| {
                let kind = if r.write {
                    let end = r.off.saturating_add(r.len);
                    let size = p.stats.get(r.ino).map_or(end, |f| f.size.max(end));
                    EventKind::Write { off: r.off, len: r.len, tier: r.tier, size, fragment: false }
                } else {
                    EventKind::Read { off: r.off, len: r.len, tier: r.tier, fragment: false }
                };
                Event { ino: r.ino, time, kind, times: r.times }
            })
            .collect()
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
        let sees = heat.sees();
        HeatReport {
            source: heat.name().into(),
            passthrough: self.vol.io_mode() == IoMode::Passthrough,
            sees_reads: sees.reads,
            sees_writes: sees.writes,
            counts,
        }
    }
}

/// How a mount in `mode` counts accesses, for `tierfs stats`.
pub(super) fn counting(mode: IoMode, heat: &HeatReport) -> String {
    match (mode, heat.sees_reads, heat.sees_writes) {
        (IoMode::Userspace, ..) => "per request".into(),
        (IoMode::Passthrough, true, true) => {
            format!("per request (passthrough: seen by the {} heat source)", heat.source)
        }
        (IoMode::Passthrough, true, false) => format!(
            "per request for reads (seen by the {} heat source), per open for writes to passthrough files",
            heat.source
        ),
        (IoMode::Passthrough, false, _) => {
            "per open (passthrough: no heat source sees the kernel's reads and writes; files whose chunks are counted \
             take the userspace path)"
                .into()
        }
    }
}
