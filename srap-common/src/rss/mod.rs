//! The model of a receiver NIC's RSS: what it hashes, how, and where a hash lands.
//!
//! A flow lands on `queue_cpu[indir[toeplitz(key, input(tuple)) % indir.len()]]`.
//! Each step has its own module; [`RssModel`] strings them together.

mod description;
mod error;
mod hash_function;
mod input;
mod learn;
mod model;
mod provenance;
mod toeplitz;

pub use description::{FieldsDescription, RssDescription, embedded_default};
pub use error::{
    DescriptionError, DescriptionFileError, FieldsError, KeyError, TupleError, Unhashed,
    UnknownHashFunction, UnknownXfrm,
};
pub use hash_function::HashFunction;
pub use input::{FlowTuple, HashFields, HashInput, InputXfrm, MAX_INPUT_LEN};
pub use learn::{Coverage, KeyLearner, LearnError, Learned, TableBits};
pub use model::{End, Landing, RssModel};
pub use provenance::{KeyConfidence, KeyProvenance, KeySource};
pub use toeplitz::{MIN_KEY_LEN, ToeplitzKey, ToeplitzTable, hash_naive};
