//! Mounting over backing directories that already hold data.

use crate::harness::{Area, Mounted};
use std::fs;
use std::time::{Duration, SystemTime};

fn set_mtime(p: &std::path::Path, secs_ago: u64) {
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(secs_ago)).unwrap();
}

#[test]
fn existing_files_are_adopted_where_they_are() {
    let area = Area::new();
    fs::create_dir_all(area.ssd().join("shared/s")).unwrap();
    fs::create_dir_all(area.hdd().join("shared/h")).unwrap();
    fs::write(area.ssd().join("shared/s/one"), b"ssd file").unwrap();
    fs::write(area.hdd().join("shared/h/two"), b"hdd file").unwrap();
    fs::write(area.hdd().join("top"), b"top").unwrap();
    fs::hard_link(area.hdd().join("top"), area.hdd().join("shared/top-link")).unwrap();
    let m = Mounted::new(&area, &[]);
    let mut names: Vec<_> =
        fs::read_dir(m.p("shared")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["h", "s", "top-link"]);
    assert_eq!(fs::read(m.p("shared/s/one")).unwrap(), b"ssd file");
    assert_eq!(fs::read(m.p("shared/h/two")).unwrap(), b"hdd file");
    // Files stay where they were found.
    m.unmount();
    assert!(area.ssd().join("shared/s/one").exists() && !area.hdd().join("shared/s/one").exists());
    assert!(area.hdd().join("shared/h/two").exists() && !area.ssd().join("shared/h/two").exists());
    // Every directory now has its meta copy on the SSD tier.
    assert!(area.ssd().join("shared/h").is_dir());
}

#[test]
fn same_path_on_both_tiers_newest_wins_and_the_other_is_set_aside() {
    let area = Area::new();
    fs::write(area.ssd().join("f"), b"old on ssd").unwrap();
    fs::write(area.hdd().join("f"), b"new on hdd").unwrap();
    set_mtime(&area.ssd().join("f"), 3600);
    fs::write(area.ssd().join("g"), b"new on ssd").unwrap();
    fs::write(area.hdd().join("g"), b"old on hdd").unwrap();
    set_mtime(&area.hdd().join("g"), 3600);
    let m = Mounted::new(&area, &[]);
    assert_eq!(fs::read(m.p("f")).unwrap(), b"new on hdd");
    assert_eq!(fs::read(m.p("f.tierfs-conflict-ssd")).unwrap(), b"old on ssd");
    assert_eq!(fs::read(m.p("g")).unwrap(), b"new on ssd");
    assert_eq!(fs::read(m.p("g.tierfs-conflict-hdd")).unwrap(), b"old on hdd");
    let log = m.log_text();
    assert!(log.contains("renamed aside"), "conflicts are reported:\n{log}");
    m.unmount();
}

/// Readdir is a cursor over the names in the state database: through the
/// ~500 readdir calls a 50 000-entry directory takes, with names being
/// added and removed meanwhile, every entry present all along is listed
/// exactly once, and no name twice.
#[test]
fn a_directory_of_50000_entries_lists_every_entry_once_while_entries_come_and_go() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const KEEP: usize = 50_000;
    const GONE: usize = 5_000;
    let area = Area::new();
    let big = area.hdd().join("big");
    fs::create_dir_all(&big).unwrap();
    for i in 0..KEEP {
        fs::File::create(big.join(format!("keep-{i:05}"))).unwrap();
    }
    for i in 0..GONE {
        fs::File::create(big.join(format!("gone-{i:05}"))).unwrap();
    }
    let m = Mounted::new(&area, &[]);
    let dir = m.p("big");
    let list = |dir: &std::path::Path| -> HashMap<String, usize> {
        let mut seen = HashMap::new();
        for e in fs::read_dir(dir).unwrap() {
            *seen.entry(e.unwrap().file_name().into_string().unwrap()).or_insert(0) += 1;
        }
        seen
    };
    // The first listing adopts the directory.
    assert_eq!(list(&dir).len(), KEEP + GONE);
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                // New names sort before, among and after the kept ones.
                for prefix in ["a-new", "keep-new", "z-new"] {
                    fs::File::create(dir.join(format!("{prefix}-{n}"))).unwrap();
                }
                if n < GONE {
                    fs::remove_file(dir.join(format!("gone-{n:05}"))).unwrap();
                }
                n += 1;
            }
            n
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    for round in 0..3 {
        let seen = list(&dir);
        assert!(std::time::Instant::now() < deadline, "the listings took more than 300 s");
        let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).map(|(n, _)| n.clone()).collect();
        assert!(twice.is_empty(), "round {round}: listed more than once: {:?}", &twice[..twice.len().min(10)]);
        let missing: Vec<_> = (0..KEEP).map(|i| format!("keep-{i:05}")).filter(|n| !seen.contains_key(n)).collect();
        assert!(
            missing.is_empty(),
            "round {round}: {} kept entries missing, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
    }
    stop.store(true, Ordering::Relaxed);
    let made = churn.join().unwrap();
    assert!(made > 0, "entries were added during the listings");
    // At rest the listing is exact.
    let seen = list(&dir);
    assert_eq!(seen.len(), KEEP + 3 * made + GONE.saturating_sub(made), "at rest");
    m.unmount();
}
