//! Which RSS description each of this host's source addresses is placed
//! with (`--steer local|both`): the one of the NIC that holds it. A flow
//! bound to NIC B's address comes back through NIC B, hashed with B's key
//! and indirection table and delivered by B's queue → CPU map, so the
//! port that puts it on the connecting CPU is B's to compute, not the
//! first `--local-iface`'s.
//!
//! [`LocalModels`] is made once per plan from the primary model (the
//! first `--local-iface`'s, with a key learned from landings, or
//! `--local-rss`'s) and this host's NICs as [`LocalNics`] lists them (each
//! given NIC with the description it was read with). An address whose
//! NIC has no description of its own (not given, or given but not
//! described) keeps the primary model: a [`LocalFallback`], logged and
//! counted in the plan. Every model's layout is laid over one list of
//! CPUs ([`LocalModels::slot_cpus`]), because this host's CPUs are one
//! occupancy row whose slot `s` must be one CPU whichever NIC a flow
//! takes.

use std::{collections::BTreeSet, fmt, net::IpAddr, sync::Arc};

use srap_common::rss::{End, RssModel};

use super::nics::LocalNics;

/// The model of this host's end each source address is planned with.
#[derive(Debug, Clone)]
pub struct LocalModels {
    /// The first `--local-iface`'s (or `--local-rss`'s) model.
    primary: Arc<RssModel>,
    /// The NIC the primary model describes (`None`: a file does).
    primary_nic: Option<String>,
    /// Every other described NIC's model, by name.
    others: Vec<(String, Arc<RssModel>)>,
    /// Every model's reachable CPUs, ascending: the slots of this host's
    /// occupancy row, in every NIC's layout alike.
    slot_cpus: Vec<u32>,
}

/// Why an address is placed with the primary model though its NIC is
/// another: named in the log and the plan, counted in the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalFallback {
    /// No NIC of this host holds the address.
    NoNic,
    /// Its NIC has no RSS description (not a `--local-iface`, or one
    /// discovery could not describe).
    Undescribed { nic: String },
    /// Its NIC's description makes no model (the reason).
    Unmodelled { nic: String, problem: String },
}

impl fmt::Display for LocalFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoNic => write!(f, "no NIC of this host holds it"),
            Self::Undescribed { nic } => write!(f, "{nic} has no RSS description"),
            Self::Unmodelled { nic, problem } => write!(f, "{nic}'s description: {problem}"),
        }
    }
}

/// What one source address is planned with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceModel {
    pub source: IpAddr,
    /// The NIC that holds it.
    pub nic: Option<String>,
    /// The NIC whose description places it (`None`: the `--local-rss`
    /// file's).
    pub described_by: Option<String>,
    /// Why that is not its own NIC's, when it is not.
    pub fallback: Option<LocalFallback>,
}

impl LocalModels {
    /// The primary model alone, for every address: one NIC.
    pub fn single(primary: Arc<RssModel>) -> Self {
        let slot_cpus = primary.reachable_cpus().into_iter().collect();
        Self {
            primary,
            primary_nic: None,
            others: Vec::new(),
            slot_cpus,
        }
    }

    /// `primary` (the model of `primary_nic`, `None` for a file), and every
    /// other NIC of `nics` with a description, each as a model facing this
    /// host's end. A description that makes no model is left out (its
    /// addresses fall back, saying why).
    pub fn new(primary: Arc<RssModel>, primary_nic: Option<&str>, nics: &LocalNics) -> Self {
        let others: Vec<(String, Arc<RssModel>)> = nics
            .nics
            .iter()
            .filter(|n| Some(n.name.as_str()) != primary_nic)
            .filter_map(|n| {
                let model = RssModel::from_description(n.description.as_deref()?).ok()?;
                Some((n.name.clone(), Arc::new(model.facing(End::Local))))
            })
            .collect();
        let slot_cpus: BTreeSet<u32> = std::iter::once(&primary)
            .chain(others.iter().map(|(_, m)| m))
            .flat_map(|m| m.reachable_cpus())
            .collect();
        Self {
            primary,
            primary_nic: primary_nic.map(str::to_owned),
            others,
            slot_cpus: slot_cpus.into_iter().collect(),
        }
    }

    /// The CPUs of this host's occupancy row, slot by slot.
    pub fn slot_cpus(&self) -> &[u32] {
        &self.slot_cpus
    }

    /// True when more than one NIC's model places flows: layouts are then
    /// laid over [`LocalModels::slot_cpus`].
    pub fn several(&self) -> bool {
        !self.others.is_empty()
    }

    /// The primary model.
    pub fn primary(&self) -> &Arc<RssModel> {
        &self.primary
    }

    /// The model `source` is planned with, and what was chosen: its NIC's
    /// own, or the primary one (a fallback when its NIC is another).
    pub fn of(&self, source: IpAddr, nics: &LocalNics) -> (Arc<RssModel>, SourceModel) {
        let holder = nics.holding(source);
        let nic = holder.map(|n| n.name.clone());
        let own = nic
            .as_deref()
            .and_then(|name| self.others.iter().find(|(n, _)| n == name));
        if let Some((name, model)) = own {
            let chosen = SourceModel {
                source,
                nic: nic.clone(),
                described_by: Some(name.clone()),
                fallback: None,
            };
            return (model.clone(), chosen);
        }
        let fallback = match (holder, &self.primary_nic) {
            // A file describes this host's NIC, whichever holds it.
            (_, None) => None,
            (Some(h), Some(primary)) if h.name == *primary => None,
            (None, Some(_)) => Some(LocalFallback::NoNic),
            (Some(h), Some(_)) => Some(match h.description.as_deref() {
                None => LocalFallback::Undescribed {
                    nic: h.name.clone(),
                },
                Some(d) => LocalFallback::Unmodelled {
                    nic: h.name.clone(),
                    problem: RssModel::from_description(d)
                        .err()
                        .map_or_else(String::new, |e| e.to_string()),
                },
            }),
        };
        let chosen = SourceModel {
            source,
            nic,
            described_by: self.primary_nic.clone(),
            fallback,
        };
        (self.primary.clone(), chosen)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use srap_common::rss::{RssDescription, embedded_default};

    use super::*;
    use crate::sender::local::nics::HostNic;

    fn nic(name: &str, address: &str, description: Option<RssDescription>) -> HostNic {
        HostNic {
            name: name.into(),
            addresses: BTreeSet::from([address.parse().expect("ip")]),
            node: None,
            up: true,
            members: Vec::new(),
            given: description.is_some(),
            description: description.map(Arc::new),
        }
    }

    fn model(description: &RssDescription) -> Arc<RssModel> {
        Arc::new(
            RssModel::from_description(description)
                .expect("model")
                .facing(End::Local),
        )
    }

    /// eth1's address takes eth1's model; eth0's the primary; an address
    /// of a NIC without a description falls back, named; the slots are
    /// both NICs' CPUs.
    #[test]
    fn each_address_takes_its_own_nics_model_or_a_named_fallback() {
        let first = embedded_default();
        let second = RssDescription {
            queue_cpu: Some((40..72).collect()),
            ..embedded_default()
        };
        let nics = LocalNics {
            nics: vec![
                nic("eth0", "10.0.0.1", Some(first.clone())),
                nic("eth1", "10.1.0.1", Some(second.clone())),
                nic("eth2", "10.2.0.1", None),
            ],
        };
        let models = LocalModels::new(model(&first), Some("eth0"), &nics);
        assert!(models.several());
        let (own, chosen) = models.of("10.1.0.1".parse().expect("ip"), &nics);
        assert_eq!(own.reachable_cpus(), (40..72).collect());
        assert_eq!(chosen.described_by.as_deref(), Some("eth1"));
        assert_eq!(chosen.fallback, None);
        let (primary, chosen) = models.of("10.0.0.1".parse().expect("ip"), &nics);
        assert!(Arc::ptr_eq(&primary, models.primary()) && chosen.fallback.is_none());
        let (primary, chosen) = models.of("10.2.0.1".parse().expect("ip"), &nics);
        assert!(Arc::ptr_eq(&primary, models.primary()));
        assert_eq!(
            chosen.fallback,
            Some(LocalFallback::Undescribed { nic: "eth2".into() })
        );
        let (_, chosen) = models.of("10.9.0.1".parse().expect("ip"), &nics);
        assert_eq!(chosen.fallback, Some(LocalFallback::NoNic));
        let cpus: Vec<u32> = (0..32).chain(40..72).collect();
        assert_eq!(models.slot_cpus(), cpus);
    }
}
