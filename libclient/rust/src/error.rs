//! kvpool::Error: the code kvpool reports (stable numbers) and its message.

use std::ffi::CStr;
use std::fmt;

use crate::ffi;

/// kvpool's error codes (the numbers of kvpool::ErrorCode in C++ and kvpool.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    NotEnoughBlocks,
    InvalidArgument,
    InvalidState,
    BlockFull,
    BlockEmpty,
    IncompleteBlock,
    InvalidHandle,
    NotFound,
    ResourceExhausted,
    DaemonGone,
    ProtocolError,
    VersionMismatch,
    ConfigError,
    PermissionDenied,
    IoError,
    Timeout,
    Unsupported,
    DeviceError,
    Disconnected,
    Internal,
    QuotaExceeded,
    DaemonUnresponsive,
    ChecksumMismatch,
    /// A number this crate does not know (a newer library).
    Unknown(i32),
}

impl ErrorCode {
    pub fn from_raw(code: i32) -> ErrorCode {
        use ErrorCode::*;
        match code {
            1 => NotEnoughBlocks,
            2 => InvalidArgument,
            3 => InvalidState,
            4 => BlockFull,
            5 => BlockEmpty,
            6 => IncompleteBlock,
            7 => InvalidHandle,
            8 => NotFound,
            9 => ResourceExhausted,
            10 => DaemonGone,
            11 => ProtocolError,
            12 => VersionMismatch,
            13 => ConfigError,
            14 => PermissionDenied,
            15 => IoError,
            16 => Timeout,
            17 => Unsupported,
            18 => DeviceError,
            19 => Disconnected,
            20 => Internal,
            21 => QuotaExceeded,
            22 => DaemonUnresponsive,
            23 => ChecksumMismatch,
            n => Unknown(n),
        }
    }

    /// The stable number.
    pub fn raw(self) -> i32 {
        use ErrorCode::*;
        match self {
            NotEnoughBlocks => 1,
            InvalidArgument => 2,
            InvalidState => 3,
            BlockFull => 4,
            BlockEmpty => 5,
            IncompleteBlock => 6,
            InvalidHandle => 7,
            NotFound => 8,
            ResourceExhausted => 9,
            DaemonGone => 10,
            ProtocolError => 11,
            VersionMismatch => 12,
            ConfigError => 13,
            PermissionDenied => 14,
            IoError => 15,
            Timeout => 16,
            Unsupported => 17,
            DeviceError => 18,
            Disconnected => 19,
            Internal => 20,
            QuotaExceeded => 21,
            DaemonUnresponsive => 22,
            ChecksumMismatch => 23,
            Unknown(n) => n,
        }
    }

    /// "NotEnoughBlocks", ... (kvpool's own names).
    pub fn name(self) -> &'static str {
        let p = unsafe { ffi::kvpool_error_name(self.raw()) };
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("Unknown")
    }
}

/// An error from kvpool: a code to branch on and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: ErrorCode,
    message: String,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }
    pub fn code(&self) -> ErrorCode {
        self.code
    }
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The calling thread's last C ABI failure, which returned `code`.
    pub(crate) fn last(code: ffi::kvpool_error_code) -> Error {
        let msg = unsafe { CStr::from_ptr(ffi::kvpool_last_error_message()) };
        Error::new(ErrorCode::from_raw(code), msg.to_string_lossy().into_owned())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Ok(()) for KVPOOL_OK, else the thread's last error.
pub(crate) fn check(code: ffi::kvpool_error_code) -> Result<()> {
    if code == ffi::KVPOOL_OK {
        Ok(())
    } else {
        Err(Error::last(code))
    }
}
