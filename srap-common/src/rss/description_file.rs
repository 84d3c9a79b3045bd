//! Reading a description file (`--rss FILE`) into a checked model.
//!
//! It stands apart from the description so that the plain data knows nothing
//! of the model that validates it; it must not parse or validate anything
//! itself, only read the file and name it in what goes wrong.

use std::path::Path;

use super::{description::RssDescription, error::DescriptionFileError, model::RssModel};

impl RssDescription {
    /// Reads a description file and checks it describes a NIC SRAP can
    /// model: the one way every command and the receiver load `--rss FILE`.
    pub fn load(path: &Path) -> Result<(Self, RssModel), DescriptionFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| DescriptionFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |source| DescriptionFileError::Invalid {
            path: path.to_owned(),
            source,
        };
        let description = Self::from_json(&text).map_err(invalid)?;
        let model = RssModel::from_description(&description).map_err(invalid)?;
        Ok((description, model))
    }
}
