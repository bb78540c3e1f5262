//! The one place where errors become errno values.

use fuser::Errno;
use tierfs_core::Error;

/// The errno to answer the kernel with. OS errors keep their own code;
/// never `Errno::from(io::ErrorKind)`, which turns every kind into EIO.
pub fn errno(e: &Error) -> Errno {
    match e {
        Error::Io(io) => match io.raw_os_error() {
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
        let no_code = Error::Io(std::io::Error::other("x"));
        assert_eq!(errno(&no_code), Errno::EIO);
    }
}
