//! Why a frame could not be encoded or decoded. Each error names the problem
//! in words a peer's operator can act on: the receiver sends them back as
//! [`super::ErrorReport`]s.

use thiserror::Error;

/// A frame that is not a valid message of this protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("message of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("message of {len} bytes is shorter than the {min}-byte header")]
    TooShort { len: usize, min: usize },
    #[error("truncated message: expected {expected} bytes, got {got}")]
    Truncated { expected: usize, got: usize },
    #[error("not an SRAP peer: the message starts with {found:02x?}, not \"SRAP\"")]
    NotSrap { found: [u8; 4] },
    #[error(
        "protocol version {got} is not supported (this agent speaks version {supported}); \
         run the same SRAP release on both hosts"
    )]
    WrongVersion { got: u16, supported: u16 },
    #[error("malformed message: {reason}")]
    Malformed { reason: String },
    #[error("{extra} unexpected bytes after the message")]
    TrailingBytes { extra: usize },
}

impl From<bincode::error::DecodeError> for DecodeError {
    fn from(err: bincode::error::DecodeError) -> Self {
        Self::Malformed {
            reason: err.to_string(),
        }
    }
}

/// A message that cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("message of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("cannot encode message: {reason}")]
    Bincode { reason: String },
}

impl From<bincode::error::EncodeError> for EncodeError {
    fn from(err: bincode::error::EncodeError) -> Self {
        Self::Bincode {
            reason: err.to_string(),
        }
    }
}
