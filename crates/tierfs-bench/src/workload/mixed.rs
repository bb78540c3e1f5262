//! The mixed workload (Loris §V-E): the file server and the web server in
//! two directories at once, after a dummy file set that flushes data off
//! the SSD. The type-aware configuration caches the web server's files and
//! tiers the file server's.

use super::{FileServer, Fs, Params, Report, WebServer, Workload};
use std::io;
use std::path::Path;

/// See the module documentation.
pub struct Mixed {
    /// Settings.
    pub p: Params,
}

impl Mixed {
    fn parts(&self) -> (FileServer, WebServer) {
        (FileServer { p: self.p, sub: "fs" }, WebServer { p: self.p, zipf: false, sub: "web" })
    }
}

impl Workload for Mixed {
    fn name(&self) -> &'static str {
        "mixed"
    }
    fn type_aware(&self) -> Vec<(&'static str, &'static str)> {
        vec![("web", "on-demand-cache"), ("fs", "dynamic-hot-dst")]
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        let (files, web) = self.parts();
        fs.create_dir_all(&dir.join("fs"))?;
        fs.create_dir_all(&dir.join("web"))?;
        files.prepare(fs, dir)?;
        web.prepare(fs, dir)?;
        // The dummy set that pushes the others off the SSD.
        super::webserver::make_set(fs, &dir.join("dummy"), &self.p, self.p.seed + 7).map(drop)
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        let (files, web) = self.parts();
        // The file server's listing first: the halves start together (a
        // listing on the emulated HDD takes seconds, and the web server
        // ran alone meanwhile).
        let set = files.scan(fs, dir)?;
        // Each half on a thread of its own: a model gives each its stream.
        let (fs1, fs2) = (fs.thread(), fs.thread());
        // Each thread owns its view, so that its stream ends with it (a
        // simulator waits for the end of a stream before its parent goes
        // on, and a half that failed must not wait for the other).
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(move || files.run_set(fs1.as_ref(), set));
            let b = s.spawn(move || web.run(fs2.as_ref(), dir));
            (a.join(), b.join())
        });
        let a = a.map_err(|_| io::Error::other("file server thread panicked"))??;
        let b = b.map_err(|_| io::Error::other("web server thread panicked"))??;
        let secs = a.secs.max(b.secs);
        Ok(Report {
            workload: self.name().into(),
            ops: a.ops + b.ops,
            secs,
            ops_per_sec: (a.ops + b.ops) as f64 / secs,
            txn_time_secs: None,
            bytes_read: a.bytes_read + b.bytes_read,
            bytes_written: a.bytes_written + b.bytes_written,
            latency: if a.latency.p99_us > b.latency.p99_us { a.latency } else { b.latency },
            files: a.files + b.files,
        })
    }
}
