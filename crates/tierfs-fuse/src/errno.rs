//! The one place where errors become errno values.

use fuser::Errno;
use std::sync::atomic::{AtomicU64, Ordering};
use tierfs_core::Error;

/// What a network file system under a tier (GlusterFS, NFS) answers when
/// its servers cannot be reached. Passed on, they would read as if the
/// tierfs mount itself were disconnected.
const UNREACHABLE: [i32; 9] = [
    libc::ENOTCONN,
    libc::ECONNREFUSED,
    libc::ECONNRESET,
    libc::ECONNABORTED,
    libc::EHOSTDOWN,
    libc::EHOSTUNREACH,
    libc::ENETDOWN,
    libc::ENETUNREACH,
    libc::ETIMEDOUT,
];

/// Says (at most once a minute) that a tier is unreachable.
fn unreachable_tier(code: i32) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let last = LAST.load(Ordering::Relaxed);
    if now >= last + 60 && LAST.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        tracing::error!(
            error = %std::io::Error::from_raw_os_error(code),
            "a tier's file system cannot reach its servers: answering EIO"
        );
    }
}

/// The errno to answer the kernel with. OS errors keep their own code,
/// except that a network tier's "cannot reach the server" becomes EIO;
/// never `Errno::from(io::ErrorKind)`, which turns every kind into EIO.
pub fn errno(e: &Error) -> Errno {
    match e {
        Error::Io(io) => match io.raw_os_error() {
            Some(code) if UNREACHABLE.contains(&code) => {
                unreachable_tier(code);
                Errno::EIO
            }
            Some(code) if code > 0 => Errno::from_i32(code),
            _ => {
                tracing::error!(error = %e, "I/O error without an errno");
                Errno::EIO
            }
        },
        Error::Invalid(msg) => {
            tracing::warn!("rejected: {msg}");
            Errno::EINVAL
        }
        Error::State(_) | Error::Corrupt(_) | Error::SimulatedCrash(_) | Error::Cancelled => {
            tracing::error!(error = %e, "state database error");
            Errno::EIO
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_keep_their_code() {
        assert_eq!(errno(&Error::errno(libc::ENOTEMPTY)), Errno::ENOTEMPTY);
        assert_eq!(errno(&Error::errno(libc::EXDEV)), Errno::EXDEV);
        assert_eq!(errno(&Error::Invalid("x".into())), Errno::EINVAL);
        assert_eq!(errno(&Error::State("x".into())), Errno::EIO);
        assert_eq!(errno(&Error::errno(libc::ENOTCONN)), Errno::EIO, "a network tier is unreachable");
        assert_eq!(errno(&Error::errno(libc::ETIMEDOUT)), Errno::EIO);
        let no_code = Error::Io(std::io::Error::other("x"));
        assert_eq!(errno(&no_code), Errno::EIO);
    }
}
