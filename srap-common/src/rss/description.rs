//! The RSS description: the JSON file users write or `srap rss show --json`
//! prints, and what a receiver agent serves to senders.

use serde::{Deserialize, Serialize};

use super::{DescriptionError, DescriptionFileError, RssModel};

/// A receiver NIC's RSS configuration as plain data. [`super::RssModel`]
/// validates it; errors name the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RssDescription {
    /// Hash function as ethtool names it; only `toeplitz` is modelled.
    #[serde(default = "default_hfunc")]
    pub hfunc: String,
    /// The key in hex, with or without colons.
    pub key: String,
    /// Indirection table: entry `hash % len` names the receive queue.
    pub indir: Vec<u32>,
    /// `none`, `sym-xor` or `sym-or-xor`.
    #[serde(default = "default_xfrm")]
    pub input_xfrm: String,
    #[serde(default)]
    pub fields: FieldsDescription,
    /// CPU that services each queue; identity when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_cpu: Option<Vec<u32>>,
}

/// Hashed fields per flow type, in ethtool letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldsDescription {
    #[serde(default = "default_fields")]
    pub tcp4: String,
    #[serde(default = "default_fields")]
    pub tcp6: String,
}

impl Default for FieldsDescription {
    fn default() -> Self {
        Self {
            tcp4: default_fields(),
            tcp6: default_fields(),
        }
    }
}

fn default_hfunc() -> String {
    "toeplitz".into()
}

fn default_xfrm() -> String {
    "none".into()
}

fn default_fields() -> String {
    "sdfn".into()
}

impl RssDescription {
    pub fn from_json(text: &str) -> Result<Self, DescriptionError> {
        Ok(serde_json::from_str(text)?)
    }

    /// Reads a description file and checks it describes a NIC SRAP can
    /// model: the one way every command and the receiver load `--rss FILE`.
    pub fn load(path: &std::path::Path) -> Result<(Self, RssModel), DescriptionFileError> {
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

    pub fn to_json_pretty(&self) -> String {
        // Serializing plain strings and integers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The description shipped with SRAP: a 32-queue receiver, one queue per CPU,
/// the Microsoft reference key and a 128-entry round-robin table. It stands in
/// for a real NIC in the predictor demo and the lab.
pub fn embedded_default() -> RssDescription {
    const TEXT: &str = include_str!("../../data/receiver-32q.json");
    RssDescription::from_json(TEXT).expect("the embedded description is valid (tested)")
}
