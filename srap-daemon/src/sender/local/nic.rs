//! This host's own NIC when flows are placed on it (`--steer local|both`):
//! described exactly as a receiver agent describes its own (discovered on
//! `--local-iface`, or read from `--local-rss`), its model facing this
//! host's end, and the CPUs offered to steered flows (`--local-cpus`, its
//! NUMA node's first).

use std::{collections::BTreeSet, path::PathBuf, sync::Arc};

use srap_common::rss::{End, KeyProvenance, KeySource, RssDescription, RssModel};
use srap_host::{
    cpulist,
    cpus::{self, Offer},
};
use thiserror::Error;

use crate::{
    description::{Source, SourceError},
    sender::ends::LocalSettings,
    tracker::learning::{LearnedKey, Served},
};

/// Why this host's NIC cannot be planned for.
#[derive(Debug, Error)]
pub enum LocalNicError {
    #[error("this host's NIC (--local-iface/--local-rss): {0}")]
    Source(#[from] SourceError),
    #[error("this host's NIC ({name}): {problem}")]
    Model { name: String, problem: String },
    #[error(
        "--local-cpus {asked} names no CPU a receive queue of this host's NIC reaches ({reached})"
    )]
    NoCpus { asked: String, reached: String },
}

/// This host's NIC as the plan sees it: where its description comes from,
/// the model, and the CPUs offered to steered flows, NUMA node first.
#[derive(Debug, Clone)]
pub struct LocalNic {
    pub source: Source,
    /// The description planned with: discovery's, or with a key learned
    /// from where this host's connections land ([`LocalNic::relearn`]).
    pub description: RssDescription,
    /// Discovery's key (the candidate a learned key replaces) and where it
    /// comes from (the driver, the kernel's default, …).
    pub candidate_key: String,
    pub discovered: KeySource,
    /// Where the key planned with comes from, the learned model's revision
    /// and how far the landings back it.
    pub key: KeyProvenance,
    /// The model facing [`End::Local`]: it takes flows as this host opens
    /// them and hashes their reverse tuple.
    pub model: Arc<RssModel>,
    /// The CPUs flows may be placed on, in tiers: the NIC's NUMA node
    /// first, the others only when those are all taken.
    pub tiers: Vec<Vec<u32>>,
    /// `--local-cpus`: the CPUs offered at all (`None`: every one).
    pub only: Option<BTreeSet<u32>>,
}

impl LocalNic {
    /// Reads this host's NIC as `args` name it (`None` with `--steer
    /// remote`): discovered (blocking: netlink and /proc) or read from the
    /// file.
    pub fn load(args: &LocalSettings) -> Result<Option<Self>, LocalNicError> {
        // `--steer remote` places no flow on this host's CPUs: its
        // `--local-iface`s are only the NICs `--local-nics` chooses among.
        if !args.placed_ends().local() {
            return Ok(None);
        }
        let source = match (args.local_ifaces.first(), &args.local_rss) {
            (Some(iface), _) => Source::Iface(iface.clone()),
            (None, Some(file)) => Source::File(file.clone()),
            (None, None) => return Ok(None),
        };
        Self::read(source, args.local_cpus.as_ref()).map(Some)
    }

    /// The NIC of `source`, read now, offering `only`.
    fn read(source: Source, only: Option<&BTreeSet<u32>>) -> Result<Self, LocalNicError> {
        let mut warnings = Vec::new();
        let (description, discovered) = source.read_with_origin(&mut warnings)?;
        for warning in &warnings {
            tracing::warn!("this host's NIC: {warning}");
        }
        let mut nic = Self::new(source, description, only)?;
        nic.discovered = discovered;
        nic.key.source = discovered;
        Ok(nic)
    }

    /// `iface` as discovered now, every CPU its queues reach offered: one
    /// of the NICs of `--local-iface` described for this host's list of
    /// NICs (blocking: netlink and /proc).
    pub fn describe(iface: &str) -> Result<Self, LocalNicError> {
        Self::read(Source::Iface(iface.to_owned()), None)
    }

    /// The NIC of `description`, offering `only` (every CPU a queue
    /// reaches when `None`), those of the NUMA node of the interface (when
    /// discovered) first.
    pub fn new(
        source: Source,
        description: RssDescription,
        only: Option<&BTreeSet<u32>>,
    ) -> Result<Self, LocalNicError> {
        let model = RssModel::from_description(&description).map_err(|e| LocalNicError::Model {
            name: source.to_string(),
            problem: e.to_string(),
        })?;
        let numa = match &source {
            Source::Iface(iface) => cpus::local_cpus(iface).unwrap_or_else(|problem| {
                tracing::warn!("{problem}: every CPU of {iface} offered alike");
                None
            }),
            Source::File(_) => None,
        };
        let offer = Offer {
            cpus: only.cloned(),
            local: numa,
        };
        let mut tiers = offer.tiers(&description);
        tiers.retain(|tier| !tier.is_empty());
        if tiers.is_empty() {
            let reached = model.reachable_cpus();
            return Err(LocalNicError::NoCpus {
                asked: only.map_or_else(String::new, |o| cpulist::format(o.iter().copied())),
                reached: cpulist::format(reached),
            });
        }
        Ok(Self {
            source,
            candidate_key: description.key.clone(),
            description,
            discovered: KeySource::Reported,
            key: KeyProvenance::default(),
            model: Arc::new(model.facing(End::Local)),
            tiers,
            only: only.cloned(),
        })
    }

    /// What this host's learner starts from and judges.
    pub fn served(&self) -> Served<'_> {
        Served {
            description: &self.description,
            key: self.key,
            candidate_key: &self.candidate_key,
        }
    }

    /// Takes what `learned` holds: the key's provenance (revision,
    /// confidence) always, and a learned key (or the candidate again, once
    /// one is withdrawn) as a new model; true when the model changed.
    pub fn relearn(&mut self, learned: &LearnedKey) -> Result<bool, LocalNicError> {
        let mut description = RssDescription {
            key: self.candidate_key.clone(),
            ..self.description.clone()
        };
        let mut key = KeyProvenance {
            source: self.discovered,
            ..KeyProvenance::default()
        };
        learned.applied(&mut description, &mut key);
        self.key = key;
        if description.key == self.description.key {
            return Ok(false);
        }
        let model = RssModel::from_description(&description).map_err(|e| LocalNicError::Model {
            name: self.source.to_string(),
            problem: e.to_string(),
        })?;
        self.model = Arc::new(model.facing(End::Local));
        self.description = description;
        Ok(true)
    }

    /// Every offered CPU.
    pub fn cpus(&self) -> BTreeSet<u32> {
        self.tiers.iter().flatten().copied().collect()
    }

    /// The tiers offered when this host's row also holds the CPUs of other
    /// NICs' queues (`slot_cpus`: every NIC's, `--local-nics`): this NIC's
    /// tiers, then a last one of the CPUs only the others reach, within
    /// `--local-cpus`.
    pub fn tiers_over(&self, slot_cpus: &[u32]) -> Vec<Vec<u32>> {
        let mine = self.cpus();
        let others: Vec<u32> = slot_cpus
            .iter()
            .copied()
            .filter(|c| !mine.contains(c))
            .filter(|c| self.only.as_ref().is_none_or(|only| only.contains(c)))
            .collect();
        let mut tiers = self.tiers.clone();
        if !others.is_empty() {
            tiers.push(others);
        }
        tiers
    }

    /// Where the description came from, for messages.
    pub fn name(&self) -> String {
        match &self.source {
            Source::Iface(iface) => iface.clone(),
            Source::File(path) => path.display().to_string(),
        }
    }

    /// The driver of the discovered NIC (`None` for a file, or when the
    /// device does not say): the pause warning names what a veth or bridge
    /// cannot do.
    pub fn driver(&self) -> Option<String> {
        match &self.source {
            Source::Iface(iface) => crate::observer::driver(iface),
            Source::File(_) => None,
        }
    }

    /// The file when it came from one.
    pub fn file(&self) -> Option<&PathBuf> {
        match &self.source {
            Source::File(path) => Some(path),
            Source::Iface(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use srap_common::rss::embedded_default;

    use super::*;

    #[test]
    fn local_cpus_restrict_the_offer_and_none_reached_is_an_error() {
        let file = Source::File("/etc/srap/local.json".into());
        let only: BTreeSet<u32> = [3, 4, 40].into_iter().collect();
        let nic = LocalNic::new(file.clone(), embedded_default(), Some(&only)).unwrap();
        assert_eq!(nic.tiers, vec![vec![3, 4]]);
        let all = LocalNic::new(file.clone(), embedded_default(), None).unwrap();
        assert_eq!(all.cpus().len(), 32);
        // Other NICs' CPUs come last, within --local-cpus.
        assert_eq!(nic.tiers_over(&[3, 4, 40, 41]), [vec![3, 4], vec![40]]);
        assert_eq!(all.tiers_over(&[0, 31]), all.tiers);
        let none: BTreeSet<u32> = [100].into_iter().collect();
        let err = LocalNic::new(file, embedded_default(), Some(&none)).unwrap_err();
        assert!(err.to_string().contains("--local-cpus 100"), "{err}");
    }

    /// A key learned for this host's NIC becomes its model (facing this
    /// host's end, the CPU offer kept) and its provenance says so, with the
    /// learned model's revision; withdrawn, the candidate comes back.
    #[test]
    fn a_learned_key_becomes_this_hosts_model_and_a_withdrawn_one_goes() {
        let file = Source::File("/etc/srap/local.json".into());
        let mut nic = LocalNic::new(file, embedded_default(), None).unwrap();
        let learned = LearnedKey::default();
        assert!(!nic.relearn(&learned).unwrap(), "nothing learned yet");
        let shifted = "00:".to_owned() + &nic.candidate_key[..(39 * 3 - 1)];
        learned.set(Some((nic.candidate_key.clone(), shifted.clone())));
        assert!(nic.relearn(&learned).unwrap());
        assert_eq!(nic.description.key, shifted);
        assert_eq!(nic.model.key().to_string(), shifted);
        assert_eq!(nic.model.end(), End::Local);
        assert_eq!((nic.key.source, nic.key.revision), (KeySource::Learned, 1));
        assert_eq!(nic.cpus().len(), 32);
        assert!(!nic.relearn(&learned).unwrap(), "the same key again");
        learned.set(None);
        assert!(nic.relearn(&learned).unwrap());
        assert_eq!(nic.description.key, nic.candidate_key);
        assert_eq!((nic.key.source, nic.key.revision), (KeySource::Reported, 2));
    }
}
