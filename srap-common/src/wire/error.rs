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
    #[error("not an SRAP peer: it sent \"{}\" where \"SRAP\" belongs", .found.escape_ascii())]
    NotSrap { found: [u8; 4] },
    #[error(
        "protocol version {got} is not supported (this agent speaks versions {} to \
         {supported}); run the same SRAP release on both hosts",
        super::version::MIN_PROTOCOL_VERSION
    )]
    WrongVersion { got: u16, supported: u16 },
    #[error("malformed message: {reason}")]
    Malformed { reason: String },
    #[error("{extra} unexpected bytes after the message")]
    TrailingBytes { extra: usize },
    #[error(
        "frame {expected} failed authentication: it was altered on the way, injected, \
         or belongs to another session"
    )]
    BadTag { expected: u64 },
    #[error("a frame this side sent came back (reflected): not from the peer")]
    Reflected,
    #[error(
        "frame {got} arrived where frame {expected} was due: {}",
        if .got < .expected { "a replay of an earlier frame" } else { "frames were dropped or reordered" }
    )]
    OutOfSequence { got: u64, expected: u64 },
}

impl From<bincode::error::DecodeError> for DecodeError {
    fn from(err: bincode::error::DecodeError) -> Self {
        use bincode::error::DecodeError as E;
        let reason = match err {
            E::UnexpectedEnd { additional } => {
                format!("it ends early ({additional} more bytes needed)")
            }
            E::LimitExceeded => "a field claims more than the message size limit".into(),
            E::UnexpectedVariant {
                found, type_name, ..
            } => {
                format!("unknown {} kind {found}", short_type(type_name))
            }
            E::Utf8 { .. } => "a text field is not UTF-8".into(),
            other => other.to_string(),
        };
        Self::Malformed { reason }
    }
}

/// `srap_common::wire::message::Message` → `Message`.
fn short_type(name: &str) -> &str {
    name.rsplit("::").next().unwrap_or(name)
}

/// A message that cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("message of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: usize, max: usize },
    #[error("cannot encode message: {reason}")]
    Bincode { reason: String },
    #[error("the session has used every sequence number; reconnect")]
    Exhausted,
}

impl From<bincode::error::EncodeError> for EncodeError {
    fn from(err: bincode::error::EncodeError) -> Self {
        Self::Bincode {
            reason: err.to_string(),
        }
    }
}
