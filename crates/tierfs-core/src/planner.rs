//! The planner: every decision of the tiering engine, as one value with no
//! thread, lock or clock of its own. Events and a clock value go in, with
//! the tier state read through [`Tiers`]; plans come out. Two executors
//! carry the plans out: the live engine (`engine`), which moves files on
//! the backing directories, and the simulator (`tierfs_sim::sim`), which
//! applies them to a model of the tiers at virtual time. Both drive the
//! planner the same way:
//!
//! - each tick, the events that came since the last one, in order
//!   ([`Planner::event`]: into the statistics, then the file's policy's
//!   answer), then each group's periodic plan ([`Planner::tick`]);
//! - when a move or a write needs room, the files to take off the SSD
//!   ([`Planner::room`]), chosen after the latest events are in;
//! - when a move is done, [`Planner::done`] (and [`Planner::cleaned`] for
//!   what the cleaner freed); where the file now is reaches the statistics
//!   as the `Placed` event the volume (or the model) emits, with the next
//!   tick's events.
//!
//! What stays with each executor is how a plan is carried out: the queue
//! and its one migrator, waiting for a last close, the cleaner's passes,
//! the regulator's admission and the device time it all takes.

use std::collections::{HashMap, HashSet};

use crate::clock::Timestamp;
use crate::event::{Event, EventKind};
use crate::policy::{evict_for, AgingRule, Params, Plan, PolicyKind, Reason, Space, Step, View};
use crate::state::ns::Ino;
use crate::stats::{FileStats, Group, Residence, Stats};
use crate::store::measured::Speed;
use crate::tier::Tier;

/// The state of the tiers as an executor knows it, read by the planner when
/// a decision needs it. Answers must not take the executor's lock around
/// the planner (the planner is borrowed while they are asked).
pub trait Tiers {
    /// The policy and settings in force for group `g`.
    fn setting(&self, g: Group) -> (PolicyKind, Params);
    /// The group whose policy governs the entries of directory `dir`.
    fn group_of(&self, dir: Ino) -> Group;
    /// The SSD's space now.
    fn space(&self) -> Space;
    /// `ino` cannot move now: queued or being moved (with `open`, also
    /// open in a way that keeps it where it is).
    fn busy(&self, ino: Ino, open: bool) -> bool;
    /// `ino` rests after a failed move: the policies do not plan it by
    /// themselves (see [`crate::policy::View::resting`]).
    fn resting(&self, _ino: Ino) -> bool {
        false
    }
    /// The tier `ino` is pinned to, if any (`group`: the file's group).
    fn pin(&self, _ino: Ino, _group: Option<Group>) -> Option<Tier> {
        None
    }
    /// A file an event names that the statistics do not know (lost in a
    /// crash, or older than a trace): where it is and its group, if it is a
    /// file that exists.
    fn unknown(&self, _ino: Ino) -> Option<(Residence, Group)> {
        None
    }
    /// The measured response times of the tiers (SSD, HDD).
    fn speeds(&self) -> [Speed; 2] {
        Default::default()
    }
    /// How often `ino` was moved in the last hour.
    fn moves(&self, _ino: Ino, _now: Timestamp) -> u32 {
        0
    }
    /// Would the write regulator let `bytes` go to the SSD now?
    fn ssd_admits(&self, _now: Timestamp, _bytes: u64) -> bool {
        true
    }
    /// Moves group `g` may plan now (`measured`'s tokens).
    fn tokens(&self, _g: Group, _now: Timestamp) -> u32 {
        0
    }
    /// Group `g` planned `moves` of its tokens' moves.
    fn spend(&self, _g: Group, _moves: u32) {}
}

/// The decisions' own state: the statistics, when each group's interval
/// work last ran, and what the cleaner has freed.
#[derive(Debug)]
pub struct Planner {
    /// The statistics.
    pub stats: Stats,
    last_run: HashMap<Group, Timestamp>,
    /// Bytes the cleaner took off the SSD so far (the background cleaner's
    /// estimate of what writers need).
    evicted_bytes: u64,
}

impl Planner {
    /// A planner starting from `stats`.
    pub fn new(stats: Stats) -> Planner {
        Planner { stats, last_run: HashMap::new(), evicted_bytes: 0 }
    }

    /// Bytes the cleaner has freed so far.
    pub fn evicted_bytes(&self) -> u64 {
        self.evicted_bytes
    }

    /// Runs `f` with what the policies of group `g` (whose settings are
    /// `params`) see at `now` (`open`: see [`Tiers::busy`]; `tokens`:
    /// moves it may plan, for `measured`).
    #[allow(clippy::too_many_arguments)]
    pub fn view<R>(
        &self,
        tiers: &dyn Tiers,
        g: Group,
        params: Params,
        now: Timestamp,
        open: bool,
        tokens: u32,
        f: impl FnOnce(&View<'_>) -> R,
    ) -> R {
        let st = &self.stats;
        let pin = |i: Ino| tiers.pin(i, st.get(i).map(|f| f.group));
        let busy = |i: Ino| tiers.busy(i, open);
        let resting = |i: Ino| tiers.resting(i);
        let moves = |i: Ino| tiers.moves(i, now);
        let ssd_admits = |bytes: u64| tiers.ssd_admits(now, bytes);
        let v = View {
            stats: st,
            now,
            space: tiers.space(),
            group: g,
            params,
            pin: &pin,
            busy: &busy,
            resting: &resting,
            evicted_bytes: self.evicted_bytes,
            speeds: tiers.speeds(),
            tokens,
            moves: &moves,
            ssd_admits: &ssd_admits,
            counter_before: None,
        };
        f(&v)
    }

    /// One event into the statistics, decided on at `now`: the moves the
    /// file's policy makes of it. A file the statistics do not know starts
    /// where [`Tiers::unknown`] says; one it does not know stays out.
    pub fn event(&mut self, ev: &Event, now: Timestamp, tiers: &dyn Tiers) -> Plan {
        let names_a_file =
            !matches!(ev.kind, EventKind::Create { .. } | EventKind::Remove | EventKind::DirMoved { .. });
        // The counter before this event (0 for a file it starts tracking).
        let before = match self.stats.get(ev.ino) {
            Some(f) => f.counter,
            None => {
                if names_a_file {
                    if let Some((residence, group)) = tiers.unknown(ev.ino) {
                        self.stats.insert(ev.ino, FileStats { residence, group, ..FileStats::default() });
                    }
                }
                0
            }
        };
        self.stats.apply(ev, &mut |d| tiers.group_of(d));
        let Some(f) = self.stats.get(ev.ino) else { return Plan::default() };
        let (kind, params) = tiers.setting(f.group);
        self.view(tiers, f.group, params, now, false, 0, |v| {
            let v = View { counter_before: Some(before), ..*v };
            kind.policy().on_access(&v, ev.ino, &f, &ev.kind)
        })
    }

    /// Group `g`'s periodic plan at `now` (`Policy::on_tick`, with `last`
    /// the time of its last interval run), given `measured`'s tokens, which
    /// are spent on it if `spend`; and whether it was an interval run.
    pub fn periodic(
        &self,
        g: Group,
        now: Timestamp,
        last: Option<Timestamp>,
        spend: bool,
        tiers: &dyn Tiers,
    ) -> (Plan, bool) {
        let (kind, params) = tiers.setting(g);
        let tokens = if kind == PolicyKind::Measured { tiers.tokens(g, now) } else { 0 };
        let (plan, ran) = self.view(tiers, g, params, now, false, tokens, |v| kind.policy().on_tick(v, last));
        if spend && tokens > 0 {
            tiers.spend(g, plan.steps.len() as u32);
        }
        (plan, ran)
    }

    /// The periodic plans of `groups` at `now`, each group's interval
    /// work when its interval has passed since it last ran; then the
    /// aging the root's rule asks besides the period (the executor ages by
    /// the period itself, `Stats::age`).
    pub fn tick(&mut self, now: Timestamp, groups: &[Group], tiers: &dyn Tiers) -> Plan {
        let mut plan = Plan::default();
        for &g in groups {
            let last = self.last_run.get(&g).copied();
            let (p, ran) = self.periodic(g, now, last, true, tiers);
            if ran {
                self.last_run.insert(g, now);
            }
            plan.extend(p);
        }
        match tiers.setting(0).1.aging {
            AgingRule::Period => 0,
            AgingRule::Requests => self.stats.age_by_requests(),
            AgingRule::Shift => self.stats.age_on_shift(),
        };
        plan
    }

    /// The moves that bring group `g`'s files to where its policy wants
    /// them (after a policy change, a rename into the group, a pin).
    pub fn conform(&self, g: Group, now: Timestamp, tiers: &dyn Tiers) -> Plan {
        let (kind, params) = tiers.setting(g);
        self.view(tiers, g, params, now, false, 0, |v| kind.policy().conform(v))
    }

    /// The coldest SSD files to take off so that `more` bytes more than
    /// now are free under the capacity (judged on one reading of the
    /// space), never those in `skip` nor busy ones (files open with
    /// passthrough included), as evictions.
    pub fn room(&self, now: Timestamp, more: u64, skip: &HashSet<Ino>, tiers: &dyn Tiers) -> Vec<Step> {
        let (_, params) = tiers.setting(0);
        self.view(tiers, 0, params, now, true, 0, |v| {
            let target = v.space.free().saturating_add(more);
            evict_for(v, target, skip, false, |counter| Reason::Evict { counter }).0
        })
    }

    /// A step of a plan was carried out; `counter` is the file's access
    /// counter when it started. An eviction moves the eviction clock that
    /// the admission of the dynamic policies compares against.
    pub fn done(&mut self, step: &Step, counter: u32) {
        if step.reason.is_eviction() {
            self.stats.last_evicted = Some(counter);
        }
    }

    /// The cleaner took `bytes` off the SSD for someone waiting for room.
    pub fn cleaned(&mut self, bytes: u64) {
        self.evicted_bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::policy::Admission;
    use crate::tier::Placement;
    use std::cell::RefCell;

    /// Two tiers in a table: every file of one group, a small SSD.
    struct Table {
        policy: PolicyKind,
        aging: AgingRule,
        admission: Admission,
        used: u64,
        limit: u64,
        busy: HashSet<Ino>,
        asked: RefCell<Vec<Ino>>,
    }

    impl Tiers for Table {
        fn setting(&self, _g: Group) -> (PolicyKind, Params) {
            (self.policy, Params { aging: self.aging, admission: self.admission, ..Params::default() })
        }
        fn group_of(&self, _dir: Ino) -> Group {
            0
        }
        fn space(&self) -> Space {
            Space { used: self.used, limit: self.limit }
        }
        fn busy(&self, ino: Ino, _open: bool) -> bool {
            self.busy.contains(&ino)
        }
        fn unknown(&self, ino: Ino) -> Option<(Residence, Group)> {
            self.asked.borrow_mut().push(ino);
            (ino < 100).then_some((Residence::Ssd, 0))
        }
    }

    fn ev(ino: Ino, secs: u64, kind: EventKind) -> Event {
        Event::new(ino, Timestamp::from_secs(secs), kind)
    }

    fn table(policy: PolicyKind) -> Table {
        Table {
            policy,
            aging: AgingRule::Period,
            admission: Admission::First,
            used: 0,
            limit: 1 << 20,
            busy: HashSet::new(),
            asked: RefCell::new(Vec::new()),
        }
    }

    #[test]
    fn a_file_the_statistics_lost_starts_where_the_tiers_say_and_a_gone_one_stays_out() {
        let t = table(PolicyKind::DynamicHotDst);
        let mut p = Planner::new(Stats::new(crate::stats::DEFAULT_AGING));
        let read = |ino| ev(ino, 1, EventKind::Read { off: 0, len: 4096, tier: Tier::Ssd, fragment: false });
        p.event(&read(7), Timestamp::from_secs(1), &t);
        p.event(&read(700), Timestamp::from_secs(1), &t);
        assert_eq!(p.stats.get(7).map(|f| f.residence), Some(Residence::Ssd));
        assert!(p.stats.get(700).is_none());
        // Any event of a file counts, a close as much as a read.
        p.event(&ev(9, 1, EventKind::Close { size: 10 }), Timestamp::from_secs(1), &t);
        assert_eq!(p.stats.get(9).map(|f| (f.residence, f.size)), Some((Residence::Ssd, 10)));
        // A removal or a creation is never a file to look up.
        p.event(&ev(8, 1, EventKind::Remove), Timestamp::from_secs(1), &t);
        assert_eq!(*t.asked.borrow(), vec![7, 700, 9]);
    }

    #[test]
    fn a_sampled_read_of_a_file_read_once_does_not_admit_it_under_repeat_admission() {
        // A heat source's event stands for `times` requests of one access:
        // all of its weight is this access's, none came before it.
        let mut t = table(PolicyKind::DynamicHotDst);
        t.admission = Admission::Repeat;
        let mut p = Planner::new(Stats::new(crate::stats::DEFAULT_AGING));
        let placement = Placement::On(Tier::Hdd);
        p.event(&ev(1, 1, EventKind::Create { placement, parent: 1, size: 4096 }), Timestamp::from_secs(1), &t);
        assert_eq!(p.stats.get(1).unwrap().counter, 0);
        let read = EventKind::Read { off: 0, len: 4096, tier: Tier::Hdd, fragment: false };
        let sampled = Event { times: 16, ..ev(1, 1, read) };
        let plan = p.event(&sampled, Timestamp::from_secs(1), &t);
        assert!(plan.steps.is_empty(), "{plan:?}");
        let plan = p.event(&ev(1, 2, read), Timestamp::from_secs(2), &t);
        assert_eq!(plan.steps.len(), 1, "its next read admits it: {plan:?}");
    }

    #[test]
    fn the_roots_aging_rule_ages_the_statistics_at_each_tick() {
        // One file on a full SSD: `requests` halves every ten accesses.
        let mut t = table(PolicyKind::DynamicHotDst);
        let mut p = Planner::new(Stats::new(crate::stats::DEFAULT_AGING));
        let placement = Placement::On(Tier::Ssd);
        p.event(&ev(1, 1, EventKind::Create { placement, parent: 1, size: 100 }), Timestamp::from_secs(1), &t);
        p.stats.last_evicted = Some(0);
        let reads = |p: &mut Planner, t: &Table| {
            for _ in 0..10 {
                let read = EventKind::Read { off: 0, len: 4096, tier: Tier::Ssd, fragment: false };
                p.event(&ev(1, 1, read), Timestamp::from_secs(1), t);
            }
        };
        reads(&mut p, &t);
        p.tick(Timestamp::from_secs(2), &[0], &t);
        assert_eq!(p.stats.get(1).unwrap().counter, 640, "the period alone: no halving");
        t.aging = AgingRule::Requests;
        p.tick(Timestamp::from_secs(2), &[0], &t);
        assert_eq!(p.stats.get(1).unwrap().counter, 640, "the count starts at the first tick under the rule");
        reads(&mut p, &t);
        p.tick(Timestamp::from_secs(2), &[0], &t);
        assert_eq!(p.stats.get(1).unwrap().counter, 1280 / 2);
    }

    #[test]
    fn only_evictions_move_the_eviction_clock_and_only_the_cleaner_counts_freed_bytes() {
        let mut p = Planner::new(Stats::new(crate::stats::DEFAULT_AGING));
        let promote =
            Step { ino: 1, mv: crate::migrate::Move::Promote, reason: Reason::Interval { counter: 5 }, size: 10 };
        p.done(&promote, 5);
        assert_eq!(p.stats.last_evicted, None);
        let evict = Step { reason: Reason::Evict { counter: 3 }, mv: crate::migrate::Move::Demote, ..promote };
        p.done(&evict, 3);
        assert_eq!(p.stats.last_evicted, Some(3));
        assert_eq!(p.evicted_bytes(), 0);
        p.cleaned(10);
        assert_eq!(p.evicted_bytes(), 10);
    }

    #[test]
    fn room_picks_the_coldest_ssd_files_but_never_skipped_or_busy_ones() {
        let mut t = table(PolicyKind::DynamicHotDst);
        let mut p = Planner::new(Stats::new(crate::stats::DEFAULT_AGING));
        for ino in 1..=4u64 {
            let placement = Placement::On(Tier::Ssd);
            p.event(&ev(ino, 1, EventKind::Create { placement, parent: 1, size: 100 }), Timestamp::from_secs(1), &t);
            // Hotter the higher the number.
            for _ in 0..ino {
                let read = EventKind::Read { off: 0, len: 100, tier: Tier::Ssd, fragment: false };
                p.event(&ev(ino, 2, read), Timestamp::from_secs(2), &t);
            }
        }
        t.used = 400;
        t.limit = 400;
        t.busy.insert(2);
        let skip: HashSet<Ino> = [1].into_iter().collect();
        let steps = p.room(Timestamp::from_secs(3), 200, &skip, &t);
        let inos: Vec<Ino> = steps.iter().map(|s| s.ino).collect();
        assert_eq!(inos, vec![3, 4]);
        assert!(steps.iter().all(|s| matches!(s.reason, Reason::Evict { .. })));
    }
}
