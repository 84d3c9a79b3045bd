//! The RSS description: the JSON file users write or `srap rss show --json`
//! prints, and what a receiver agent serves to senders.

use serde::{Deserialize, Serialize};

use super::error::DescriptionError;
use crate::{
    family::Family,
    protocol::{FlowType, Protocol},
};

/// A receiver NIC's RSS configuration as plain data. [`RssModel`]
/// validates it; errors name the field at fault.
///
/// [`RssModel`]: super::model::RssModel
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

/// Hashed fields per flow type ([`FlowType`]: protocol and family), in
/// ethtool letters, keyed by ethtool's name of the flow type
/// (`"fields": {"tcp4": "sdfn", "udp4": "sd"}`). TCP's are always there
/// (the default `sdfn` when a file leaves them out); UDP's where the NIC
/// said (discovery reads them). [`RssModel`] keeps every one given, and
/// hashes each flow with its own flow type's; the agents' protocol
/// carries UDP's from version 10 on (`wire::UdpFields`).
///
/// [`RssModel`]: super::model::RssModel
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "FieldsJson", into = "FieldsJson")]
pub struct FieldsDescription {
    pub tcp4: String,
    pub tcp6: String,
    /// UDP's over IPv4 and IPv6 ([`Self::of`]), `None` when neither is
    /// known. Boxed: most descriptions have none, and a description travels
    /// by value in the agents' events.
    udp: Option<Box<[Option<String>; 2]>>,
}

/// [`FieldsDescription`] as the JSON has it: one key per flow type.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldsJson {
    #[serde(default = "default_fields")]
    tcp4: String,
    #[serde(default = "default_fields")]
    tcp6: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    udp4: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    udp6: Option<String>,
}

impl From<FieldsJson> for FieldsDescription {
    fn from(json: FieldsJson) -> Self {
        let mut fields = Self::tcp(json.tcp4, json.tcp6);
        for (flow, letters) in [(FlowType::UDP4, json.udp4), (FlowType::UDP6, json.udp6)] {
            if let Some(letters) = letters {
                fields.set(flow, letters);
            }
        }
        fields
    }
}

impl From<FieldsDescription> for FieldsJson {
    fn from(fields: FieldsDescription) -> Self {
        let [udp4, udp6] = fields.udp.map_or([None, None], |udp| *udp);
        Self {
            tcp4: fields.tcp4,
            tcp6: fields.tcp6,
            udp4,
            udp6,
        }
    }
}

impl Default for FieldsDescription {
    fn default() -> Self {
        Self::tcp(default_fields(), default_fields())
    }
}

impl FieldsDescription {
    /// TCP's fields over IPv4 and IPv6 as given, UDP's unknown.
    pub fn tcp(tcp4: impl Into<String>, tcp6: impl Into<String>) -> Self {
        Self {
            tcp4: tcp4.into(),
            tcp6: tcp6.into(),
            udp: None,
        }
    }

    /// The fields of `flow`, if known (TCP's always are).
    pub fn of(&self, flow: FlowType) -> Option<&str> {
        let udp = |i: usize| self.udp.as_ref().and_then(|udp| udp[i].as_deref());
        match (flow.protocol, flow.family) {
            (Protocol::Tcp, Family::Inet) => Some(&self.tcp4),
            (Protocol::Tcp, Family::Inet6) => Some(&self.tcp6),
            (Protocol::Udp, Family::Inet) => udp(0),
            (Protocol::Udp, Family::Inet6) => udp(1),
        }
    }

    /// Sets the fields of `flow`.
    pub fn set(&mut self, flow: FlowType, letters: String) {
        let slot = match (flow.protocol, flow.family) {
            (Protocol::Tcp, Family::Inet) => return self.tcp4 = letters,
            (Protocol::Tcp, Family::Inet6) => return self.tcp6 = letters,
            (Protocol::Udp, Family::Inet) => 0,
            (Protocol::Udp, Family::Inet6) => 1,
        };
        self.udp.get_or_insert_with(Default::default)[slot] = Some(letters);
    }

    /// Every flow type whose fields are known, in [`FlowType::ALL`]'s order.
    pub fn known(&self) -> impl Iterator<Item = (FlowType, &str)> {
        FlowType::ALL
            .into_iter()
            .filter_map(|flow| self.of(flow).map(|letters| (flow, letters)))
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
