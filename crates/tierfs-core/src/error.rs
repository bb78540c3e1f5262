//! Typed errors of the core. The FUSE crate maps them to errno in one place
//! (`tierfs_fuse::errno`); nothing here decides a reply code.

use std::io;

/// Every failure the core can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed; the raw OS error is kept so it can be returned as is.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The state database failed.
    #[error("state database: {0}")]
    State(String),
    /// The state database holds something this version cannot read.
    #[error("state database is corrupt: {0}")]
    Corrupt(String),
    /// A test stopped a migration at a named step, as a crash would.
    #[error("simulated crash at {0}")]
    SimulatedCrash(&'static str),
    /// A value given by a user (xattr, option) was rejected.
    #[error("invalid value: {0}")]
    Invalid(String),
    /// Background work stopped because the mount is shutting down.
    #[error("cancelled: the mount is shutting down")]
    Cancelled,
}

/// Result with the core error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error carrying a raw errno value.
    pub fn errno(code: i32) -> Self {
        Error::Io(io::Error::from_raw_os_error(code))
    }

    /// The errno this error stands for, if it is an OS error.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// True if this is the given errno.
    pub fn is(&self, code: i32) -> bool {
        self.raw_os_error() == Some(code)
    }
}

impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(io) => Error::Io(io),
            other => Error::State(other.to_string()),
        }
    }
}

/// Shorthand for an `Err` with a raw errno.
pub fn err<T>(code: i32) -> Result<T> {
    Err(Error::errno(code))
}
