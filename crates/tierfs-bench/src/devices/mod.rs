//! Modelled devices under the kernel: an "SSD" and an "HDD" that the
//! kernel sees as block devices with a device model's timing, so that a
//! real file system (its page cache, readahead, journal and writeback)
//! runs on them and systems without an emulation of their own (a plain
//! file system, mergerfs) can be measured on the same devices.
//!
//! Each device is a server ([`disk`]: a FUSE file system whose file `disk`
//! delays every request as the model says) under a loop device with direct
//! I/O (so that the loop device's requests reach the server one for one,
//! and `/sys/block/loopN/stat` counts them), formatted ext4 and mounted:
//!
//! ```text
//! DIR/NAME.img    the image (sparse)
//! DIR/NAME.dev/   the server's mount: disk, model
//! DIR/NAME/       the ext4 on /dev/loopN
//! DIR/NAME.log    the server's log
//! DIR/devices.json  what is up (see [`Devices`])
//! ```
//!
//! [`up`] sets the devices up and takes down what it set up if a step
//! fails; [`down`] takes down whatever it finds of them below DIR (also
//! after a crash, without `devices.json`), file systems mounted over
//! them first.

pub mod disk;

use disk::{Command, DiskSpec, DiskStats};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Proc, Stdio};
use std::time::{Duration, Instant};
use tierfs_core::device::{Profile, Standby};

/// The devices' names: the sweep puts the SSD tier on the first and the
/// HDD tier on the second.
pub const NAMES: [&str; 2] = ["ssd", "hdd"];

/// One device to set up.
#[derive(Clone, Debug)]
pub struct Setup {
    /// "ssd" or "hdd".
    pub name: String,
    /// Its speed.
    pub profile: Profile,
    /// Its size, bytes.
    pub size: u64,
    /// The drive's cache, bytes (0: none).
    pub cache: u64,
    /// Spinning down when idle (none: never).
    pub standby: Option<Standby>,
}

/// A device that is up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Up {
    /// "ssd" or "hdd".
    pub name: String,
    /// Its profile's name.
    pub profile: String,
    /// Its size, bytes.
    pub size: u64,
    /// The drive's cache, bytes.
    pub cache: u64,
    /// Its standby setting.
    pub standby: Option<Standby>,
    /// The loop device, e.g. /dev/loop3.
    pub loop_dev: PathBuf,
    /// The server's process.
    pub pid: u32,
    /// Where its ext4 is mounted.
    pub mount: PathBuf,
    /// Where its server is mounted.
    pub server: PathBuf,
}

/// The devices that are up below a folder (its `devices.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Devices {
    /// The folder.
    pub dir: PathBuf,
    /// The devices.
    pub devices: Vec<Up>,
}

fn image(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.img"))
}
fn server_mount(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.dev"))
}
fn log_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}
fn state_file(dir: &Path) -> PathBuf {
    dir.join("devices.json")
}

/// Mount points and sources in /proc/self/mounts.
fn mounts() -> Vec<(PathBuf, String, String)> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    // Spaces, tabs, newlines and backslashes are written as octal escapes.
    let unescape = |s: &str| {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let oct = b.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
            match (b[i], oct) {
                (b'\\', Some(c)) => {
                    out.push(c);
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let source = unescape(f.next()?);
            let point = PathBuf::from(unescape(f.next()?));
            let fstype = f.next()?.to_string();
            Some((point, source, fstype))
        })
        .collect()
}

fn is_mounted(p: &Path) -> bool {
    mounts().iter().any(|(m, _, _)| m == p)
}

/// Runs a command to its end; its output, or an error with its stderr.
pub(crate) fn run(cmd: &mut Proc) -> io::Result<String> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} {:?} failed: {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Devices {
    /// The devices up below `dir`.
    pub fn load(dir: &Path) -> io::Result<Devices> {
        let f = state_file(dir);
        let text = std::fs::read_to_string(&f).map_err(|e| {
            io::Error::new(e.kind(), format!("{}: {e} (are the devices up? tierfs bench devices up)", f.display()))
        })?;
        serde_json::from_str(&text).map_err(|e| io::Error::other(format!("{}: {e}", f.display())))
    }

    fn save(&self) -> io::Result<()> {
        std::fs::write(state_file(&self.dir), serde_json::to_string_pretty(self)?)
    }

    /// The device named `name`.
    pub fn get(&self, name: &str) -> io::Result<&Up> {
        self.devices
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| io::Error::other(format!("no device {name} is up in {}", self.dir.display())))
    }

    /// Every device's model paused (requests cost nothing and are not
    /// counted), or on again after a cold start: written back, its page
    /// cache dropped ([`Up::drop_cache`]) and its model reset.
    pub fn set_models(&self, on: bool) -> io::Result<()> {
        for d in &self.devices {
            if on {
                d.drop_cache()?;
                d.command(Command::Resume)?;
            } else {
                d.command(Command::Pause)?;
            }
        }
        Ok(())
    }

    /// Every device's counters, in the order of `devices`.
    pub fn stats(&self) -> io::Result<Vec<(DiskStats, BlockStat)>> {
        self.devices.iter().map(|d| Ok((d.stats()?, d.block_stat()?))).collect()
    }

    /// Writes back every device's file system (syncfs) and returns how
    /// long that took.
    pub fn sync(&self) -> io::Result<Duration> {
        let t = Instant::now();
        for d in &self.devices {
            d.sync()?;
        }
        Ok(t.elapsed())
    }
}

/// `/sys/block/loopN/stat`: what the block layer counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockStat {
    /// Reads completed.
    pub reads: u64,
    /// Sectors (512 bytes) read.
    pub read_sectors: u64,
    /// Writes completed.
    pub writes: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Flushes completed.
    pub flushes: u64,
}

impl BlockStat {
    /// Parses the stat file's text.
    pub fn parse(text: &str) -> Option<BlockStat> {
        let f: Vec<u64> = text.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
        Some(BlockStat {
            reads: *f.first()?,
            read_sectors: *f.get(2)?,
            writes: *f.get(4)?,
            write_sectors: *f.get(6)?,
            flushes: f.get(15).copied().unwrap_or(0),
        })
    }

    /// The counts from `before` to `self`.
    pub fn since(&self, before: &BlockStat) -> BlockStat {
        BlockStat {
            reads: self.reads.saturating_sub(before.reads),
            read_sectors: self.read_sectors.saturating_sub(before.read_sectors),
            writes: self.writes.saturating_sub(before.writes),
            write_sectors: self.write_sectors.saturating_sub(before.write_sectors),
            flushes: self.flushes.saturating_sub(before.flushes),
        }
    }
}

/// `BLKFLSBUF` (`_IO(0x12, 97)`): write back and drop a block device's
/// own buffers (the libc crate does not name it).
const BLKFLSBUF: libc::c_ulong = 0x1261;

impl Up {
    /// The model's counters.
    pub fn stats(&self) -> io::Result<DiskStats> {
        let f = disk::model_file(&self.server);
        let text = std::fs::read_to_string(&f)?;
        serde_json::from_str(&text).map_err(|e| io::Error::other(format!("{}: {e}", f.display())))
    }

    /// Sends the model a command.
    pub fn command(&self, c: Command) -> io::Result<()> {
        std::fs::OpenOptions::new().write(true).open(disk::model_file(&self.server))?.write_all(c.word().as_bytes())
    }

    /// What the block layer counted for the loop device.
    pub fn block_stat(&self) -> io::Result<BlockStat> {
        let name = self.loop_dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let f = Path::new("/sys/block").join(&name).join("stat");
        let text = std::fs::read_to_string(&f)?;
        BlockStat::parse(&text).ok_or_else(|| io::Error::other(format!("{}: cannot read {text:?}", f.display())))
    }

    /// Writes back its file system (syncfs).
    pub fn sync(&self) -> io::Result<()> {
        let f = File::open(&self.mount)?;
        // SAFETY: a valid descriptor.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A cold page cache for its file system: written back, then every
    /// file's cached pages dropped (`POSIX_FADV_DONTNEED`) and the block
    /// device's buffers (inode tables, directories, the journal) too. The
    /// kernel's inode and dentry caches stay: only dropping every file
    /// system's on the machine would empty them.
    pub fn drop_cache(&self) -> io::Result<()> {
        self.sync()?;
        fn walk(dir: &Path) -> io::Result<()> {
            for e in std::fs::read_dir(dir)?.flatten() {
                let t = e.file_type()?;
                let p = e.path();
                if t.is_dir() {
                    walk(&p)?;
                } else if t.is_file() {
                    // A file that went away in between has nothing cached.
                    let Ok(f) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOATIME).open(&p) else {
                        continue;
                    };
                    // SAFETY: a valid descriptor; the whole file.
                    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                }
            }
            Ok(())
        }
        walk(&self.mount)?;
        let dev = File::open(&self.loop_dev)?;
        // SAFETY: a valid descriptor of a block device; the ioctl takes no argument.
        if unsafe { libc::ioctl(dev.as_raw_fd(), BLKFLSBUF as _, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Sets up `setups` below `dir`: an image, a server (`bin bench devices
/// serve`), a loop device with direct I/O, an ext4 and its mount each.
/// The models are paused while the file systems are made. On failure,
/// takes down whatever it set up.
pub fn up(dir: &Path, setups: &[Setup], bin: &Path) -> io::Result<Devices> {
    if state_file(dir).exists() || setups.iter().any(|s| is_mounted(&dir.join(&s.name))) {
        return Err(io::Error::other(format!(
            "devices are up in {} already (tierfs bench devices down --dir {0})",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let mut devices = Devices { dir: dir.clone(), devices: Vec::new() };
    let r = (|| -> io::Result<()> {
        for s in setups {
            let up = up_one(&dir, s, bin, &mut devices)?;
            devices.devices.push(up);
            devices.save()?;
        }
        devices.set_models(true)
    })();
    if let Err(e) = r {
        let _ = down(&dir);
        return Err(e);
    }
    Ok(devices)
}

fn up_one(dir: &Path, s: &Setup, bin: &Path, so_far: &mut Devices) -> io::Result<Up> {
    if !NAMES.contains(&s.name.as_str()) {
        return Err(io::Error::other(format!("a device is named ssd or hdd, not {:?}", s.name)));
    }
    let img = image(dir, &s.name);
    let server = server_mount(dir, &s.name);
    let mount = dir.join(&s.name);
    let _ = std::fs::remove_file(&img);
    File::create(&img)?.set_len(s.size)?;
    std::fs::create_dir_all(&server)?;
    std::fs::create_dir_all(&mount)?;
    let spec = DiskSpec {
        image: img,
        mountpoint: server.clone(),
        profile: s.profile.clone(),
        cache: s.cache,
        standby: s.standby,
        paused: true,
    };
    let log = File::create(log_file(dir, &s.name))?;
    let mut child = Proc::new(bin)
        .args(["bench", "devices", "serve", "--spec", &serde_json::to_string(&spec)?])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C at the terminal that ran `up`
        // (or the sweep) does not take the device away under its users.
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    // What down needs if a later step fails: the server's pid.
    so_far.devices.push(Up {
        name: s.name.clone(),
        profile: s.profile.name.clone(),
        size: s.size,
        cache: s.cache,
        standby: s.standby,
        loop_dev: PathBuf::new(),
        pid,
        mount: mount.clone(),
        server: server.clone(),
    });
    so_far.save()?;
    so_far.devices.pop();
    let disk = server.join("disk");
    let t = Instant::now();
    while std::fs::metadata(&disk).map(|m| m.len()).ok() != Some(s.size) {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(log_file(dir, &s.name)).unwrap_or_default();
            return Err(io::Error::other(format!("the {} server ended ({status}): {}", s.name, log.trim())));
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(io::Error::other(format!("the {} server did not come up in 10 s", s.name)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let loop_dev = PathBuf::from(run(Proc::new("losetup").args(["--direct-io=on", "--show", "-f"]).arg(&disk))?);
    let up = Up {
        name: s.name.clone(),
        profile: s.profile.name.clone(),
        size: s.size,
        cache: s.cache,
        standby: s.standby,
        loop_dev,
        pid,
        mount,
        server,
    };
    let dio = up.loop_dev.file_name().map(|n| Path::new("/sys/block").join(n).join("loop/dio"));
    if dio.and_then(|f| std::fs::read_to_string(f).ok()).as_deref().map(str::trim) != Some("1") {
        // Without direct I/O the loop device reads ahead and caches in
        // the image's page cache: the model would see other requests.
        let _ = run(Proc::new("losetup").arg("-d").arg(&up.loop_dev));
        return Err(io::Error::other(format!(
            "the kernel refused direct I/O for {} over {}",
            up.loop_dev.display(),
            disk.display()
        )));
    }
    // Inode tables and the journal written now (models paused), not by a
    // background thread during a measurement; no discard of the image.
    run(Proc::new("mkfs.ext4")
        .args(["-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", "-L"])
        .arg(format!("tierfs-{}", s.name))
        .arg(&up.loop_dev))?;
    run(Proc::new("mount").args(["-t", "ext4"]).arg(&up.loop_dev).arg(&up.mount))?;
    Ok(up)
}

/// Unmounts `p`, retrying for a while if it is busy (a daemon that was
/// just unmounted may still hold files below it).
fn unmount(p: &Path) -> io::Result<()> {
    let mut last = String::new();
    for _ in 0..50 {
        if !is_mounted(p) {
            return Ok(());
        }
        match run(Proc::new("umount").arg(p)) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if is_mounted(p) {
        return Err(io::Error::other(last));
    }
    Ok(())
}

/// Whether process `pid` is a devices server.
fn is_server(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
            args.windows(3).any(|w| w == [&b"bench"[..], b"devices", b"serve"])
        })
        .unwrap_or(false)
}

/// Takes down the devices below `dir`: the file systems mounted over them,
/// their ext4s, loop devices, servers and images. Goes on past a step that
/// fails and returns what it did, or every failure.
pub fn down(dir: &Path) -> io::Result<Vec<String>> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let state = Devices::load(&dir).ok();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    fn note(done: &mut Vec<String>, failed: &mut Vec<String>, r: io::Result<()>, what: String) {
        match r {
            Ok(()) => done.push(what),
            Err(e) => failed.push(format!("{what}: {e}")),
        }
    }
    for name in NAMES {
        let mount = dir.join(name);
        let server = server_mount(&dir, name);
        let mount_s = mount.to_string_lossy().into_owned();
        // Whatever stands on the device: a tierfs or mergerfs over it
        // (its source names the tier directories), or a mount below it.
        let stacked: Vec<PathBuf> = mounts()
            .into_iter()
            .filter(|(p, src, fstype)| {
                p != &mount && (p.starts_with(&mount) || (fstype.starts_with("fuse") && src.contains(&mount_s)))
            })
            .map(|(p, _, _)| p)
            .collect();
        for p in stacked.iter().rev() {
            note(&mut done, &mut failed, unmount(p), format!("unmounted {} (on the {name} device)", p.display()));
        }
        if is_mounted(&mount) {
            note(&mut done, &mut failed, unmount(&mount), format!("unmounted {}", mount.display()));
        }
        let backing = server.join("disk");
        for e in std::fs::read_dir("/sys/block").into_iter().flatten().flatten() {
            let f = e.path().join("loop/backing_file");
            let Ok(b) = std::fs::read_to_string(&f) else { continue };
            if Path::new(b.trim()) == backing {
                let dev = Path::new("/dev").join(e.file_name());
                note(
                    &mut done,
                    &mut failed,
                    run(Proc::new("losetup").arg("-d").arg(&dev)).map(drop),
                    format!("detached {}", dev.display()),
                );
            }
        }
        // A detached loop device lets go of its backing file only when
        // the last opener (udev's probe, say) closes it: until then the
        // server's mount is busy, so the unmount is retried.
        if is_mounted(&server) {
            note(&mut done, &mut failed, unmount(&server), format!("unmounted {}", server.display()));
        }
        if let Some(pid) = state.as_ref().and_then(|s| s.devices.iter().find(|d| d.name == name)).map(|d| d.pid) {
            let t = Instant::now();
            while is_server(pid) && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if is_server(pid) {
                // SAFETY: kill of a process this module started (its
                // command line checked just above).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                done.push(format!("killed the {name} server (pid {pid})"));
            }
        }
        if image(&dir, name).exists() {
            note(
                &mut done,
                &mut failed,
                std::fs::remove_file(image(&dir, name)),
                format!("removed {}", image(&dir, name).display()),
            );
        }
        for d in [&mount, &server] {
            let _ = std::fs::remove_dir(d);
        }
    }
    if failed.is_empty() {
        let _ = std::fs::remove_file(state_file(&dir));
        Ok(done)
    } else {
        Err(io::Error::other(format!("could not take everything down: {}", failed.join("; "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_stats_are_read_from_the_kernels_line() {
        let line = "    1000       11    19700       36     5301     2246  9230218   245309        0    12608   249063        2        0   524290        0     1000     3716\n";
        let s = BlockStat::parse(line).unwrap();
        assert_eq!((s.reads, s.read_sectors, s.writes, s.write_sectors, s.flushes), (1000, 19700, 5301, 9230218, 1000));
        let older = BlockStat { reads: 10, read_sectors: 700, writes: 1, write_sectors: 8, flushes: 0 };
        assert_eq!(s.since(&older).reads, 990);
        // A kernel without the flush fields.
        assert_eq!(BlockStat::parse("1 2 3 4 5 6 7 8 9 10 11").unwrap().flushes, 0);
        assert!(BlockStat::parse("1 2 x").is_none());
    }
}
