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
