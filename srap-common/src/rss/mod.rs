//! The model of a receiver NIC's RSS: what it hashes, how, and where a hash lands.
//!
//! A flow lands on `queue_cpu[indir[toeplitz(key, input(tuple)) % indir.len()]]`.
//! Each step has its own module; [`RssModel`] strings them together.

mod description;
mod description_file;
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
};
pub use hash_function::{HashFunction, UnknownHashFunction};
pub use input::{FlowTuple, HashFields, HashInput, InputXfrm, MAX_INPUT_LEN, UnknownXfrm};
pub use learn::{Coverage, KeyLearner, LearnError, Learned, TableBits};
pub use model::{End, Landing, RssModel};
pub use provenance::{KeyConfidence, KeyProvenance, KeySource};
pub use toeplitz::{MIN_KEY_LEN, ToeplitzKey, ToeplitzTable, hash_naive};
