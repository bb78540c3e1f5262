//! Deadlock detection for test builds (feature `lock-check`, and always in
//! this crate's unit tests): parking_lot records who waits for which lock,
//! and a watcher thread looks for a cycle every second. Finding one, it
//! logs every thread of it with its backtrace and aborts, so that a
//! deadlock fails a test with the evidence instead of hanging it. Does
//! nothing in other builds.

/// Starts the watcher (once per process).
pub fn watch() {
    #[cfg(any(test, feature = "lock-check"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let r = std::thread::Builder::new().name("tierfs-lockcheck".into()).spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let cycles = parking_lot::deadlock::check_deadlock();
                if cycles.is_empty() {
                    continue;
                }
                let mut report =
                    format!("DEADLOCK: {} cycle(s) of threads waiting for each other's locks\n", cycles.len());
                for (i, threads) in cycles.iter().enumerate() {
                    for t in threads {
                        report.push_str(&format!("cycle {i}, thread {:?}:\n{:?}\n", t.thread_id(), t.backtrace()));
                    }
                }
                tracing::error!("{report}");
                eprintln!("{report}");
                std::process::abort();
            });
            if let Err(e) = r {
                tracing::warn!(error = %e, "cannot start the deadlock watcher");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_watcher_starts_once() {
        super::watch();
        super::watch();
    }

    #[test]
    fn a_deadlock_aborts_with_the_threads_and_their_backtraces() {
        const CHILD: &str = "TIERFS_LOCKCHECK_CHILD";
        if std::env::var_os(CHILD).is_some() {
            // Two threads taking two locks in opposite orders.
            static A: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
            static B: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
            super::watch();
            let _b = B.lock();
            std::thread::spawn(|| {
                let _a = A.lock();
                std::thread::sleep(std::time::Duration::from_millis(100));
                let _b = B.lock();
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            let _a = A.lock();
            unreachable!("the two threads deadlock");
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "lockcheck::tests::a_deadlock_aborts_with_the_threads_and_their_backtraces",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the child must abort");
        assert!(err.contains("DEADLOCK: 1 cycle"), "{err}");
        assert!(err.contains("lockcheck"), "backtraces name the code: {err}");
    }
}
