//! Adoption in the background: the first listing of a directory does not
//! wait for its reconciliation.
//!
//! Reconciling a directory tierfs has not seen yet costs a stat and four
//! state database writes per name (about 13 µs); for 100 000 names that
//! is over a second, far more than listing them. So when the adopter
//! thread runs ([`Volume::start_adopter`]), `opendir` of a directory not
//! reconciled during this mount only reads the backing directories' names
//! and kinds and the names the database knows: a *preview*, in name order,
//! where a name the database does not know yet carries an inode number
//! reserved for it now. The reconciliation itself is queued for the adopter
//! thread, which commits the directory in parts in name order and gives
//! every adopted name the number its preview showed. Everything else that
//! needs the directory reconciled still gets it before it goes on:
//! - a lookup of a name the database does not know waits until the adopter
//!   has committed that name (its *frontier* passed it), so `ls -l` of a
//!   new directory runs behind the adopter, not after it;
//! - readdirplus, which returns attributes, waits the same way for the
//!   entries of its answer;
//! - [`Volume::reconcile`] (creating, linking, renaming into the
//!   directory) takes a queued job over and runs it itself, or waits for
//!   the running one.
//!
//! A preview is what the backing directories held when it was made, as a
//! readdir of any file system reports the directory at some moment of the
//! listing. The inode number a preview shows differs from the one a lookup
//! gives only where the adopter finds what a listing of names cannot see:
//! a second name of a hard-linked file (it takes the first name's inode),
//! or the same name on both tiers (one copy is renamed aside).

use super::reconcile::Listed;
use super::Volume;
use crate::error::{err, Result};
use crate::state::ns::{Dentry, Ino};
use crate::store::{FileKind, Store};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Weak};

/// The adopter thread's queue and what it is doing.
#[derive(Default)]
struct Queue {
    /// An adopter thread is running and takes jobs.
    started: bool,
    /// The volume is shutting down: no new jobs, the running one stops at
    /// its next part.
    stop: bool,
    /// Directories waiting for their reconciliation, oldest first.
    queued: VecDeque<Ino>,
    /// The directory being reconciled by the adopter, and the last name
    /// it committed (every name up to it is in the database).
    running: Option<(Ino, Option<OsString>)>,
    /// The latest preview of each directory whose reconciliation is
    /// pending: the inode numbers it reserved for names not adopted yet,
    /// which the reconciliation gives those names.
    previews: HashMap<Ino, Arc<Preview>>,
    /// The reserved numbers a reconciliation gave a name, per directory:
    /// each is given once, whatever happens to its name afterwards.
    used: HashMap<Ino, HashSet<Ino>>,
}

/// The entries of a directory not reconciled yet, as its backing
/// directories list them, in name order.
#[derive(Debug)]
pub(crate) struct Preview {
    /// The entries. A name the database knew has its inode number; a
    /// name it did not know has one reserved for it (by this preview, or
    /// the one the previous preview of the directory reserved).
    pub(crate) entries: Vec<Dentry>,
    /// Which entries carry a reserved number.
    reserved: Vec<bool>,
}

impl Preview {
    /// The number reserved for `name`, if it has one.
    fn reserved(&self, name: &OsStr) -> Option<Ino> {
        let i = self.entries.binary_search_by(|e| e.name.as_os_str().cmp(name)).ok()?;
        self.reserved[i].then_some(self.entries[i].ino)
    }
}

/// Marks the adopter's job over when dropped, also if the reconciliation
/// panicked: nothing then waits for it for ever.
struct Running<'a>(&'a Adopter);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut q = self.0.q.lock();
        q.running = None;
        self.0.cv.notify_all();
    }
}

/// The adopter thread's nice value.
const ADOPTER_NICE: libc::c_int = 10;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Adopter {
    q: Mutex<Queue>,
    cv: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Adopter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Adopter")
    }
}

impl Adopter {
    /// True once shutdown began.
    pub(crate) fn stopping(&self) -> bool {
        self.q.lock().stop
    }

    /// True if the reconciliation of `dir` is the adopter's and shutdown
    /// began: it commits what it gathered and stops. (One a request runs
    /// goes on: the request waits for it.)
    pub(crate) fn should_stop(&self, dir: Ino) -> bool {
        let q = self.q.lock();
        q.stop && q.running.as_ref().is_some_and(|(d, _)| *d == dir)
    }

    /// Before a reconciliation of `dir` outside the adopter thread: takes
    /// a queued job for `dir` off the queue (the caller does it now), or
    /// waits until the adopter's job for `dir` is over.
    pub(crate) fn claim(&self, dir: Ino) {
        let mut q = self.q.lock();
        let queued = q.queued.len();
        q.queued.retain(|d| *d != dir);
        if q.queued.len() != queued {
            // Who waits for the queued job waits for the caller now.
            self.cv.notify_all();
        }
        while q.running.as_ref().is_some_and(|(d, _)| *d == dir) {
            self.cv.wait(&mut q);
        }
    }

    /// The adopter committed every name of `dir` up to `last`.
    pub(crate) fn progress(&self, dir: Ino, last: &OsStr) {
        let mut q = self.q.lock();
        if let Some((d, frontier)) = q.running.as_mut() {
            if *d == dir {
                *frontier = Some(last.to_os_string());
                self.cv.notify_all();
            }
        }
    }

    /// The inode number a preview reserved for `name` in `dir`, if one
    /// did and no name was given it yet: the caller adopts the name with
    /// it.
    pub(crate) fn reserved(&self, dir: Ino, name: &OsStr) -> Option<Ino> {
        let mut q = self.q.lock();
        let ino = q.previews.get(&dir)?.reserved(name)?;
        q.used.entry(dir).or_default().insert(ino).then_some(ino)
    }

    /// Forgets the previews of `dir` and its used numbers.
    pub(crate) fn forget(&self, dir: Ino) {
        let mut q = self.q.lock();
        q.previews.remove(&dir);
        q.used.remove(&dir);
    }
}

/// What waiting for a name's adoption found.
enum Wait {
    /// Committed, or nothing is pending for the directory.
    Done,
    /// Not queued nor running: the caller reconciles it.
    Reconcile,
}

impl<S: Store> Volume<S> {
    /// Starts the adopter thread (see the module documentation). Without
    /// it every reconciliation runs in the request that needs it.
    pub fn start_adopter(self: &Arc<Self>) -> std::io::Result<()> {
        let me: Weak<Self> = Arc::downgrade(self);
        let a = self.adopter.clone();
        let h = std::thread::Builder::new().name("tierfs-adopter".into()).spawn(move || adopter_loop(a, me))?;
        self.adopter.q.lock().started = true;
        *self.adopter.thread.lock() = Some(h);
        Ok(())
    }

    /// Stops the adopter thread: queued directories are left for the next
    /// request that needs them or the next mount; a running
    /// reconciliation stops after the part it is committing. Returns false
    /// if the thread did not end within `wait`.
    pub fn stop_adopter(&self, wait: std::time::Duration) -> bool {
        {
            let mut q = self.adopter.q.lock();
            q.stop = true;
            q.started = false;
            q.queued.clear();
            self.adopter.cv.notify_all();
        }
        let Some(h) = self.adopter.thread.lock().take() else { return true };
        let ended = crate::runtime::join_by(h, std::time::Instant::now() + wait).is_ok();
        if !ended {
            tracing::error!("the adopter thread did not stop within {wait:?}");
        }
        ended
    }

    /// The entries of `dir`, which is not reconciled yet, from its backing
    /// directories, in name order; its reconciliation is queued. `None`:
    /// there is no adopter thread, or the directory was reconciled
    /// meanwhile (the caller reads the database).
    pub(crate) fn preview(&self, dir: Ino) -> Result<Option<Arc<Preview>>> {
        if !self.adopter.q.lock().started {
            return Ok(None);
        }
        self.check_tiers()?;
        let t0 = std::time::Instant::now();
        let mut names: Vec<(OsString, FileKind)> = Vec::new();
        let hdd_known = self.hdd_names_known(dir)?;
        self.list_backing(dir, hdd_known, |_, name, listed| {
            let kind = match listed {
                Listed::Kind(k) => Some(k),
                Listed::Stat(st) => st.kind(),
            };
            if let Some(kind) = kind {
                names.push((name, kind));
            }
        })?;
        // In name order, as the database keeps them; a name on both tiers
        // once (the reconciliation decides which copy keeps it).
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        names.dedup_by(|later, first| later.0 == first.0);
        let t1 = t0.elapsed();
        // The previous preview's reservations that no name took yet carry
        // over (the same name keeps its number). Read before the names the
        // database knows: a name the adopter commits in between is then
        // known, not given a new number because its reservation is used.
        let (older, used) = {
            let q = self.adopter.q.lock();
            (q.previews.get(&dir).cloned(), q.used.get(&dir).cloned().unwrap_or_default())
        };
        // Both in name order: matched by a merge.
        let known = self.ns.children(dir)?;
        let mut known = known.into_iter().peekable();
        let mut entries = Vec::with_capacity(names.len());
        let mut reserved = Vec::with_capacity(names.len());
        let mut unnumbered = Vec::new();
        for (name, kind) in names {
            while known.next_if(|k| k.name < name).is_some() {}
            let (ino, is_reserved) = match known.next_if(|k| k.name == name) {
                Some(k) => (k.ino, false),
                None => match older.as_ref().and_then(|p| p.reserved(&name)).filter(|i| !used.contains(i)) {
                    Some(i) => (i, true),
                    None => {
                        unnumbered.push(entries.len());
                        (0, true)
                    }
                },
            };
            reserved.push(is_reserved);
            entries.push(Dentry { name, ino, kind });
        }
        // Numbers come from a reservation in memory: the database is
        // written once per 65 536.
        for at in unnumbered {
            entries[at].ino = self.ns.alloc_ino()?;
        }
        let mut q = self.adopter.q.lock();
        if self.is_verified(dir) || !q.started {
            return Ok(None);
        }
        // Another preview registered meanwhile: its numbers win, so that
        // a name keeps one number whichever preview a listing read.
        if let Some(c) = q.previews.get(&dir).filter(|c| !older.as_ref().is_some_and(|o| Arc::ptr_eq(o, c))) {
            let used = q.used.get(&dir);
            for (e, r) in entries.iter_mut().zip(&reserved) {
                if let Some(n) = c.reserved(&e.name).filter(|n| *r && !used.is_some_and(|u| u.contains(n))) {
                    e.ino = n;
                }
            }
        }
        let preview = Arc::new(Preview { entries, reserved });
        q.previews.insert(dir, preview.clone());
        if !q.queued.contains(&dir) && q.running.as_ref().is_none_or(|(d, _)| *d != dir) {
            q.queued.push_back(dir);
            self.adopter.cv.notify_all();
        }
        tracing::debug!(dir, names = preview.entries.len(), listed = ?t1, took = ?t0.elapsed(), "previewed a directory not reconciled yet");
        Ok(Some(preview))
    }

    /// Waits until `name` of `dir` is adopted if the adopter has `dir` (a
    /// queued job moves to the front); reconciles `dir` now if it is
    /// neither queued nor running and not reconciled.
    pub(crate) fn await_adopted(&self, dir: Ino, name: &OsStr) -> Result<()> {
        let w = {
            let mut q = self.adopter.q.lock();
            loop {
                if self.is_verified(dir) {
                    break Wait::Done;
                }
                match &q.running {
                    Some((d, frontier)) if *d == dir => {
                        if frontier.as_deref().is_some_and(|f| f >= name) {
                            break Wait::Done;
                        }
                    }
                    _ => {
                        let Some(at) = q.queued.iter().position(|d| *d == dir) else { break Wait::Reconcile };
                        if at > 0 {
                            q.queued.remove(at);
                            q.queued.push_front(dir);
                        }
                    }
                }
                self.adopter.cv.wait(&mut q);
            }
        };
        match w {
            Wait::Done => Ok(()),
            Wait::Reconcile => self.reconcile(dir, false),
        }
    }

    /// The end of a reconciliation of `dir`: it is verified, and the
    /// numbers reserved by its previews that no name took are dropped.
    pub(crate) fn reconciled(&self, dir: Ino) {
        let mut q = self.adopter.q.lock();
        self.mark_verified(dir);
        q.previews.remove(&dir);
        q.used.remove(&dir);
        self.adopter.cv.notify_all();
    }
}

/// The adopter thread: reconciles queued directories one at a time. It
/// holds the volume only while it reconciles.
fn adopter_loop<S: Store>(a: Arc<Adopter>, vol: Weak<Volume<S>>) {
    // Below the request threads: the listing it runs behind goes first on
    // a machine with few cores. (setpriority of a thread id sets that
    // thread's nice value on Linux.)
    // SAFETY: gettid and setpriority have no memory preconditions.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, ADOPTER_NICE);
    }
    loop {
        let dir = {
            let mut q = a.q.lock();
            loop {
                if q.stop || vol.strong_count() == 0 {
                    return;
                }
                if let Some(d) = q.queued.pop_front() {
                    q.running = Some((d, None));
                    break d;
                }
                // The timeout lets the thread see a volume dropped
                // without stop_adopter (a test's).
                a.cv.wait_for(&mut q, std::time::Duration::from_secs(1));
            }
        };
        let Some(v) = vol.upgrade() else { return };
        let r = {
            let _running = Running(&a);
            v.reconcile_now(dir, false)
        };
        match r {
            Ok(()) => {}
            Err(e) if a.stopping() => tracing::debug!(dir, error = %e, "adoption stopped by the unmount"),
            // Removed since it was listed.
            Err(e)
                if (e.is(libc::ENOENT) || e.is(libc::ENOTDIR))
                    && matches!(v.record(dir), Err(r) if r.is(libc::ENOENT)) =>
            {
                a.forget(dir);
                tracing::debug!(dir, error = %e, "a directory queued for adoption went away")
            }
            // The next request that needs the directory tries again (and
            // gets the error).
            Err(e) => tracing::warn!(dir, error = %e, "reconciling a directory in the background failed"),
        }
    }
}

/// The error a reconciliation stopped by the unmount returns.
pub(crate) fn stopped<T>() -> Result<T> {
    err(libc::EINTR)
}

#[cfg(test)]
mod tests {
    use crate::migrate::tests::{Rig, CTX};
    use crate::state::ns::{Ino, ROOT_INO};
    use crate::store::mem::MemStore;
    use crate::store::Store;
    use crate::testutil::within;
    use crate::vfs::{DirEntryOut, Volume};
    use std::collections::HashMap;
    use std::ffi::{OsStr, OsString};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// How many names the HDD holds before the mount: three parts of a
    /// reconciliation.
    const NAMES: usize = 3000;

    /// A tree made directly on the HDD: `NAMES` files, and `link-a` with a
    /// second name `link-b`.
    fn rig() -> Rig {
        let rig = Rig::new();
        let root = rig.hdd.root().unwrap();
        for i in 0..NAMES {
            rig.hdd.open(&root, OsStr::new(&format!("f{i:05}")), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        }
        rig.hdd.open(&root, OsStr::new("link-a"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        rig.hdd.link(&root, OsStr::new("link-a"), &root, OsStr::new("link-b")).unwrap();
        rig
    }

    /// Holds every stat of an entry on the HDD (the adopter's, not the
    /// preview's: a listing gives the kinds) while `hold` is set, counting
    /// the held calls.
    fn hold_stats(rig: &Rig) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
        hold_stats_of(rig, None, Duration::from_secs(20))
    }

    /// As [`hold_stats`], for the stats of the entries named `only` (all if
    /// `None`), each held at most `at_most`.
    fn hold_stats_of(rig: &Rig, only: Option<&'static str>, at_most: Duration) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
        let hold = Arc::new(AtomicBool::new(true));
        let held = Arc::new(AtomicUsize::new(0));
        let (h, n) = (hold.clone(), held.clone());
        rig.hdd.set_gate(Some(Arc::new(move |op, name| {
            if op != "stat" || only.is_some_and(|o| name != o) {
                return;
            }
            n.fetch_add(1, Ordering::SeqCst);
            let t0 = std::time::Instant::now();
            while h.load(Ordering::SeqCst) && t0.elapsed() < at_most {
                std::thread::sleep(Duration::from_millis(1));
            }
        })));
        (hold, held)
    }

    fn wait_held(held: &Arc<AtomicUsize>) {
        within(10, "a reconciliation to reach its first held stat", {
            let held = held.clone();
            move || {
                while held.load(Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
    }

    fn list(v: &Volume<impl Store>, plus: bool) -> Vec<DirEntryOut> {
        let fh = v.opendir(ROOT_INO).unwrap();
        let all = pages(v, fh, plus);
        v.releasedir(fh).unwrap();
        all
    }

    fn pages(v: &Volume<impl Store>, fh: u64, plus: bool) -> Vec<DirEntryOut> {
        let mut all = Vec::new();
        let mut off = 0;
        loop {
            let page =
                if plus { v.readdirplus(fh, off, crate::vfs::READDIR_BATCH) } else { v.readdir(fh, off) }.unwrap();
            let Some(last) = page.last() else { break };
            off = last.next;
            all.extend(page);
        }
        all
    }

    fn names(entries: &[DirEntryOut]) -> HashMap<OsString, Ino> {
        let mut m = HashMap::new();
        for e in entries {
            assert!(m.insert(e.name.clone(), e.ino).is_none(), "{:?} listed twice", e.name);
        }
        m
    }

    /// A mount of [`rig`] with its adopter, whose stats are held.
    fn mounted() -> (Rig, Arc<Volume<MemStore>>, Arc<AtomicBool>, Arc<AtomicUsize>) {
        let rig = rig();
        let v = Arc::new(rig.mount());
        v.start_adopter().unwrap();
        let (hold, held) = hold_stats(&rig);
        (rig, v, hold, held)
    }

    #[test]
    fn a_first_listing_does_not_wait_for_the_adoption_of_its_directory() {
        let (_rig, v, hold, held) = mounted();
        let fh = v.opendir(ROOT_INO).unwrap();
        assert!(!v.listing_is_keyed(fh), "a preview is no listing for the kernel to keep");
        wait_held(&held);
        let listed = within(10, "the first listing", {
            let v = v.clone();
            move || pages(&v, fh, false)
        });
        v.releasedir(fh).unwrap();
        let listed = names(&listed);
        assert_eq!(listed.len(), NAMES + 4, "every name, `.` and `..`, once");
        assert!(v.ns.children(ROOT_INO).unwrap().is_empty(), "nothing adopted while it is held");
        hold.store(false, Ordering::SeqCst);
        // Each name resolves to the number the listing showed, but the
        // second name of the hard-linked file: it joins the first's inode.
        for (name, ino) in &listed {
            if name == "." || name == ".." {
                continue;
            }
            let got = v.lookup(ROOT_INO, name).unwrap().ino;
            if name == "link-b" {
                assert_eq!(got, v.lookup(ROOT_INO, OsStr::new("link-a")).unwrap().ino);
            } else {
                assert_eq!(got, *ino, "{name:?}");
            }
        }
        assert!(v.stop_adopter(Duration::from_secs(5)));
        // After the adoption the database answers, with the same numbers,
        // and the kernel may keep the listing.
        let fh = v.opendir(ROOT_INO).unwrap();
        assert!(v.listing_is_keyed(fh));
        v.releasedir(fh).unwrap();
        let again = names(&list(&v, false));
        assert_eq!(again.len(), listed.len());
        assert_eq!(again[OsStr::new("f01234")], listed[OsStr::new("f01234")]);
    }

    #[test]
    fn readdirplus_answers_only_entries_the_database_has() {
        let (_rig, v, hold, held) = mounted();
        let done = Arc::new(AtomicBool::new(false));
        let t = std::thread::spawn({
            let (v, done) = (v.clone(), done.clone());
            move || {
                let all = list(&v, true);
                done.store(true, Ordering::SeqCst);
                all
            }
        });
        wait_held(&held);
        std::thread::sleep(Duration::from_millis(200));
        assert!(!done.load(Ordering::SeqCst), "readdirplus waits for the adoption of its entries");
        hold.store(false, Ordering::SeqCst);
        let all = within(20, "readdirplus", move || t.join().unwrap());
        let all = names(&all);
        assert_eq!(all.len(), NAMES + 4);
        for (name, ino) in &all {
            let a = v.getattr(*ino).unwrap_or_else(|e| panic!("getattr of {name:?} ({ino}): {e}"));
            assert_eq!(a.ino, *ino);
        }
        assert_eq!(all[OsStr::new("link-a")], all[OsStr::new("link-b")], "one inode for both names");
        assert!(v.stop_adopter(Duration::from_secs(5)));
    }

    #[test]
    fn a_create_in_a_directory_being_adopted_waits_for_it_and_every_name_stays_once() {
        let (_rig, v, hold, held) = mounted();
        let first = names(&list(&v, false));
        wait_held(&held);
        let t = std::thread::spawn({
            let v = v.clone();
            move || {
                let (a, o) = v.create(&CTX, ROOT_INO, OsStr::new("new"), 0o644, 0, libc::O_RDWR).unwrap();
                v.release(o.fh).unwrap();
                a.ino
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        hold.store(false, Ordering::SeqCst);
        let new = within(20, "the create", move || t.join().unwrap());
        let after = names(&list(&v, false));
        assert_eq!(after.len(), first.len() + 1);
        assert_eq!(after[OsStr::new("new")], new);
        assert!(!first.values().any(|i| *i == new), "the new file has a number no listed name had");
        assert!(v.stop_adopter(Duration::from_secs(5)));
    }

    #[test]
    fn an_unmount_during_an_adoption_stops_it_and_the_next_mount_adopts_the_rest_once() {
        let (rig, v, hold, held) = mounted();
        list(&v, false);
        wait_held(&held);
        let stopper = std::thread::spawn({
            let v = v.clone();
            move || v.stop_adopter(Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(50));
        hold.store(false, Ordering::SeqCst);
        assert!(within(20, "stop_adopter", move || stopper.join().unwrap()));
        let committed = v.ns.children(ROOT_INO).unwrap().len();
        assert!(committed < NAMES, "stopped after a part ({committed} names adopted)");
        drop(v);
        let v = rig.mount();
        let all = names(&list(&v, false));
        assert_eq!(all.len(), NAMES + 4);
        assert_eq!(v.ns.children(ROOT_INO).unwrap().len(), NAMES + 2);
        assert_eq!(v.ns.links(all[OsStr::new("link-a")]).unwrap().len(), 2, "the link joined its first name");
    }

    /// A directory `d` on the HDD, not reconciled yet, holding the file `x`:
    /// the mount and `d`'s number.
    fn unreconciled_dir() -> (Rig, Arc<Volume<MemStore>>, Ino) {
        let rig = Rig::new();
        let root = rig.hdd.root().unwrap();
        rig.hdd.mkdir(&root, OsStr::new("d"), 0o755).unwrap();
        let d = rig.hdd.open_dir(&root, OsStr::new("d")).unwrap();
        rig.hdd.open(&d, OsStr::new("x"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        let v = Arc::new(rig.mount());
        let d = v.lookup(ROOT_INO, OsStr::new("d")).unwrap().ino;
        assert!(!v.is_verified(d));
        (rig, v, d)
    }

    /// Review finding: the map of adopted hard links kept a file after all
    /// the names the namespace knew were unlinked (its record gone), so a
    /// name of it in a directory adopted later joined the gone inode and
    /// no lookup found it for the rest of the mount.
    #[test]
    fn a_name_adopted_after_the_known_names_of_its_file_went_gets_a_live_inode() {
        let rig = Rig::new();
        let root = rig.hdd.root().unwrap();
        for d in ["a", "b", "c"] {
            rig.hdd.mkdir(&root, OsStr::new(d), 0o755).unwrap();
        }
        let a = rig.hdd.open_dir(&root, OsStr::new("a")).unwrap();
        let b = rig.hdd.open_dir(&root, OsStr::new("b")).unwrap();
        let c = rig.hdd.open_dir(&root, OsStr::new("c")).unwrap();
        rig.hdd.open(&a, OsStr::new("x"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        rig.hdd.link(&a, OsStr::new("x"), &b, OsStr::new("y")).unwrap();
        rig.hdd.link(&a, OsStr::new("x"), &c, OsStr::new("z")).unwrap();
        let v = rig.mount();
        let ino = |name: &str| v.lookup(ROOT_INO, OsStr::new(name)).unwrap().ino;
        let (a, b) = (ino("a"), ino("b"));
        let x = v.lookup(a, OsStr::new("x")).unwrap().ino;
        v.unlink(a, OsStr::new("x")).unwrap();
        assert!(v.ns.record(x).unwrap().is_none(), "its only known name went");
        let y = v.lookup(b, OsStr::new("y")).expect("b/y exists on the HDD");
        assert_ne!(y.ino, x);
        assert_eq!(v.getattr(y.ino).unwrap().nlink, 2);
    }

    /// Review finding: both names of a hard-linked file vanished from the
    /// backing directory, and the reconciliation that forgot them counted,
    /// for each, the other one still in the database: the record stayed.
    #[test]
    fn a_reconciliation_that_forgets_every_name_of_a_file_forgets_its_record() {
        let (rig, v, d) = unreconciled_dir();
        let root = rig.hdd.root().unwrap();
        let dh = rig.hdd.open_dir(&root, OsStr::new("d")).unwrap();
        rig.hdd.link(&dh, OsStr::new("x"), &dh, OsStr::new("y")).unwrap();
        let x = v.lookup(d, OsStr::new("x")).unwrap().ino;
        assert_eq!(v.lookup(d, OsStr::new("y")).unwrap().ino, x);
        for n in ["x", "y"] {
            rig.hdd.unlink(&dh, OsStr::new(n)).unwrap();
        }
        v.reconcile(d, true).unwrap();
        assert!(v.ns.children(d).unwrap().is_empty());
        assert!(v.ns.record(x).unwrap().is_none(), "no name left, the record stayed");
    }

    /// Review finding: the same with the record deleted earlier in the same
    /// batch. `d/x`, the only name the namespace knows of a file with a
    /// second backing name elsewhere, was renamed to `d/z` on the HDD: the
    /// reconciliation forgets `x` (deleting the record) before it adopts
    /// `z`, which must not join the inode the batch removes.
    #[test]
    fn a_name_adopted_after_its_files_record_was_dropped_in_the_same_pass_gets_a_live_inode() {
        let (rig, v, d) = unreconciled_dir();
        let root = rig.hdd.root().unwrap();
        rig.hdd.mkdir(&root, OsStr::new("e"), 0o755).unwrap();
        let e = rig.hdd.open_dir(&root, OsStr::new("e")).unwrap();
        let dh = rig.hdd.open_dir(&root, OsStr::new("d")).unwrap();
        rig.hdd.link(&dh, OsStr::new("x"), &e, OsStr::new("w")).unwrap();
        let x = v.lookup(d, OsStr::new("x")).unwrap().ino;
        rig.hdd.rename(&dh, OsStr::new("x"), &dh, OsStr::new("z"), 0).unwrap();
        v.reconcile(d, true).unwrap();
        // The namespace as the reconciliation left it (a lookup that finds
        // no record reconciles again, which would hide the fault).
        let (z, _) = v.ns.lookup(d, OsStr::new("z")).unwrap().expect("d/z adopted");
        assert!(v.ns.record(x).unwrap().is_none());
        assert!(v.ns.record(z).unwrap().is_some(), "d/z joined the inode the pass removed");
    }

    /// Reconciles `d` wholly the first time this thread passes the test
    /// point `at` (between a request's two reads); counts the passes.
    fn reconcile_at(
        at: &'static str,
        v: &Arc<Volume<MemStore>>,
        d: Ino,
    ) -> (crate::testutil::PointGuard, Arc<AtomicUsize>) {
        let ran = Arc::new(AtomicUsize::new(0));
        let point = crate::testutil::on_point(at, {
            let (v, ran) = (v.clone(), ran.clone());
            move || {
                if ran.fetch_add(1, Ordering::SeqCst) == 0 {
                    v.reconcile(d, false).unwrap();
                }
            }
        });
        (point, ran)
    }

    /// Regression: a lookup read the namespace, missed the name not adopted
    /// yet, and only then asked whether the directory was reconciled. When
    /// the reconciliation committed the name and marked the directory in
    /// between, the lookup answered the name absent, and the kernel kept
    /// that negative entry: reads and renames of a file on the HDD failed
    /// with ENOENT for a while (the adoption integration test, about one
    /// CI run in eight).
    #[test]
    fn a_lookup_racing_the_end_of_an_adoption_does_not_answer_an_adopted_name_absent() {
        let (_rig, v, d) = unreconciled_dir();
        let (_point, ran) = reconcile_at("lookup missed", &v, d);
        let got = v.lookup_present(d, OsStr::new("x")).unwrap();
        assert!(ran.load(Ordering::SeqCst) > 0, "the test point was passed");
        assert!(got.is_some(), "x, adopted during the lookup, answered absent");
    }

    /// Regression: the same race in the search of a name an unlink, a
    /// rename or a link starts with.
    #[test]
    fn an_unlink_racing_the_end_of_an_adoption_finds_the_adopted_name() {
        let (_rig, v, d) = unreconciled_dir();
        let (_point, ran) = reconcile_at("find missed", &v, d);
        v.unlink(d, OsStr::new("x")).unwrap();
        assert!(ran.load(Ordering::SeqCst) > 0, "the test point was passed");
        assert!(v.lookup_present(d, OsStr::new("x")).unwrap().is_none());
    }

    /// A lookup waiting for a queued directory is woken when a request
    /// takes the job over and finishes it, not when the adopter is next
    /// done with another directory.
    #[test]
    fn a_lookup_waiting_for_a_queued_directory_wakes_when_a_request_reconciles_it() {
        let rig = Rig::new();
        let root = rig.hdd.root().unwrap();
        for d in ["busy", "queued"] {
            rig.hdd.mkdir(&root, OsStr::new(d), 0o755).unwrap();
        }
        let busy = rig.hdd.open_dir(&root, OsStr::new("busy")).unwrap();
        rig.hdd.open(&busy, OsStr::new("held"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        let queued = rig.hdd.open_dir(&root, OsStr::new("queued")).unwrap();
        rig.hdd.open(&queued, OsStr::new("x"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        let v = Arc::new(rig.mount());
        let busy_ino = v.lookup(ROOT_INO, OsStr::new("busy")).unwrap().ino;
        let queued_ino = v.lookup(ROOT_INO, OsStr::new("queued")).unwrap().ino;
        v.start_adopter().unwrap();
        // The adopter is held in the stat of `busy/held`.
        let (hold, held) = hold_stats_of(&rig, Some("held"), Duration::from_secs(30));
        v.releasedir(v.opendir(busy_ino).unwrap()).unwrap();
        wait_held(&held);
        v.releasedir(v.opendir(queued_ino).unwrap()).unwrap();
        let waiter = std::thread::spawn({
            let v = v.clone();
            move || v.lookup(queued_ino, OsStr::new("x")).map(|a| a.ino)
        });
        std::thread::sleep(Duration::from_millis(100));
        // A create in `queued` takes its job over and reconciles it.
        let (_, o) = v.create(&CTX, queued_ino, OsStr::new("y"), 0o644, 0, libc::O_RDWR).unwrap();
        v.release(o.fh).unwrap();
        let x = within(5, "the waiting lookup", move || waiter.join().unwrap());
        assert!(x.is_ok(), "{x:?}");
        hold.store(false, Ordering::SeqCst);
        assert!(v.stop_adopter(Duration::from_secs(10)));
    }

    /// Regression ("a hard link adopted in two directories at once became
    /// two files"): two reconciliations running together, each adopting one
    /// name of a file, gave the names two inodes when the second saw the
    /// first's claim before the first had committed it (it took the claim
    /// for a file gone since). Then a write through one name no longer
    /// showed through the other once the file moved.
    #[test]
    fn two_names_of_a_file_adopted_in_two_directories_at_once_are_one_file() {
        let rig = Rig::new();
        let root = rig.hdd.root().unwrap();
        for d in ["a", "b"] {
            rig.hdd.mkdir(&root, OsStr::new(d), 0o755).unwrap();
        }
        let (a, b) =
            (rig.hdd.open_dir(&root, OsStr::new("a")).unwrap(), rig.hdd.open_dir(&root, OsStr::new("b")).unwrap());
        for n in ["x", "z"] {
            rig.hdd.open(&a, OsStr::new(n), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        }
        rig.hdd.link(&a, OsStr::new("x"), &b, OsStr::new("y")).unwrap();
        let v = Arc::new(rig.mount());
        v.reconcile(ROOT_INO, false).unwrap();
        let ia = v.lookup(ROOT_INO, OsStr::new("a")).unwrap().ino;
        let ib = v.lookup(ROOT_INO, OsStr::new("b")).unwrap().ino;
        // The reconciliation of `a` is held in its stat of `z`, after it
        // took `x` and before it commits.
        let (hold, held) = hold_stats_of(&rig, Some("z"), Duration::from_secs(20));
        let first = std::thread::spawn({
            let v = v.clone();
            move || v.reconcile(ia, false)
        });
        wait_held(&held);
        let second = std::thread::spawn({
            let v = v.clone();
            move || v.reconcile(ib, false)
        });
        // The second may wait for the first (it must not finish wrong).
        std::thread::sleep(Duration::from_millis(200));
        hold.store(false, Ordering::SeqCst);
        first.join().unwrap().unwrap();
        second.join().unwrap().unwrap();
        let x = v.lookup(ia, OsStr::new("x")).unwrap();
        let y = v.lookup(ib, OsStr::new("y")).unwrap();
        assert_eq!(x.ino, y.ino, "the two names of one file");
        assert_eq!(x.nlink, 2);
    }
}
