//! Errors of the RSS model. Each names the field or value at fault and, where
//! there is one, what the user can do about it. A name that parses to none of
//! a list (an input transform, a hash function) is refused beside that list,
//! whose names its message gives: this file imports none of the model's steps.

use thiserror::Error;

/// A Toeplitz key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("byte {index} of the key is `{text}`, not two hex digits")]
    BadHex { index: usize, text: String },
    #[error(
        "the key has {len} bytes; at least {min} are needed to hash an IPv6 4-tuple \
         (ethtool -x DEV shows the whole key)"
    )]
    TooShort { len: usize, min: usize },
}

/// Hashed fields in ethtool letters that SRAP cannot model.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FieldsError {
    #[error(
        "`{0}` (L2 address, VLAN or L3 protocol) is hashed by the NIC but not modelled by \
         SRAP; set the fields to sdfn with `ethtool -N DEV rx-flow-hash tcp4 sdfn`"
    )]
    Unmodelled(char),
    #[error("`{0}` is not an ethtool rx-flow-hash letter (use s, d, f, n)")]
    NotALetter(char),
    #[error("`{0}` is given twice")]
    Twice(char),
}

/// A flow type whose hashed fields a description does not give (UDP's,
/// where discovery could not read them): flows of it cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error(
    "the RSS description does not say which fields the NIC hashes for {} flows \
     (`ethtool -n DEV rx-flow-hash {}` shows them)",
    .0.name(),
    .0.name()
)]
pub struct Unhashed(pub crate::protocol::FlowType);

/// A 4-tuple that cannot be hashed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TupleError {
    #[error("source {src} and destination {dst} are of different address families")]
    MixedFamily { src: String, dst: String },
}

/// An RSS description (the JSON file, or one built by discovery) that does not
/// describe a NIC SRAP can model.
#[derive(Debug, Error)]
pub enum DescriptionError {
    #[error("not a valid RSS description: {0}")]
    Json(#[from] serde_json::Error),
    #[error("RSS description field `{field}`: {problem}")]
    Field {
        field: &'static str,
        problem: String,
    },
}

impl DescriptionError {
    pub(crate) fn field(field: &'static str, problem: impl Into<String>) -> Self {
        Self::Field {
            field,
            problem: problem.into(),
        }
    }
}

/// An RSS description file that cannot be used, naming the file.
#[derive(Debug, Error)]
pub enum DescriptionFileError {
    #[error("cannot read the RSS description {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("RSS description {path}: {source}")]
    Invalid {
        path: std::path::PathBuf,
        source: DescriptionError,
    },
}
