//! The sender's two ends of a flow (see `srap_common::ends`): which NIC's
//! CPUs a steered flow is placed on (`--steer`), and this host's own NIC
//! when it is one of them (`--local-iface` or `--local-rss`,
//! `--local-cpus`), described exactly as a receiver agent describes its
//! own. The settings that choose them ([`LocalSettings`]) live here too,
//! so the sender's settings depend on this module and not the reverse.

use std::{collections::BTreeSet, fmt, path::PathBuf, str::FromStr, sync::Arc};

use srap_common::{
    binder::placement,
    rss::{End, KeyProvenance, KeySource, RssDescription, RssModel},
};
use srap_host::{
    cpulist,
    cpus::{self, Offer},
};
use thiserror::Error;

use crate::{
    receiver::source::{Source, SourceError},
    tracker::learning::{LearnedKey, Served},
};

/// `--steer`: whose CPUs a steered flow is placed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Steer {
    /// The receiver's (the data this host sends).
    #[default]
    Remote,
    /// This host's own (the reverse tuple: what this host receives).
    Local,
    /// One port for both.
    Both,
}

impl Steer {
    /// The receiver's CPUs are planned.
    pub fn remote(self) -> bool {
        self != Self::Local
    }

    /// This host's CPUs are planned.
    pub fn local(self) -> bool {
        self != Self::Remote
    }

    /// The name `--steer` and the `steer` key take.
    pub fn name(self) -> &'static str {
        match self {
            Self::Remote => "remote",
            Self::Local => "local",
            Self::Both => "both",
        }
    }
}

impl FromStr for Steer {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Remote, Self::Local, Self::Both]
            .into_iter()
            .find(|steer| steer.name() == text)
            .ok_or_else(|| format!("`{text}` is not remote, local or both"))
    }
}

impl fmt::Display for Steer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--local-placement`: which of this host's CPUs a steered flow's local
/// end (what this host receives on it) is placed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LocalPlacement {
    /// The least-occupied offered CPU: flows spread over this host's CPUs.
    #[default]
    Spread,
    /// The CPU of the thread that connects (the hook runs on it), else its
    /// nearest offered CPU: SMT sibling, then last-level cache, then NUMA
    /// node. Holds for the CPU at `connect()`: a thread that moves later
    /// leaves its flow behind.
    Reader,
}

impl LocalPlacement {
    /// The name `--local-placement` and the `local-placement` key take.
    pub fn name(self) -> &'static str {
        match self {
            Self::Spread => "spread",
            Self::Reader => "reader",
        }
    }

    /// As the hook's config holds it (`srap_common::binder::placement`).
    pub fn as_config(self) -> u32 {
        match self {
            Self::Spread => placement::SPREAD,
            Self::Reader => placement::READER,
        }
    }
}

impl FromStr for LocalPlacement {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Spread, Self::Reader]
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| format!("`{text}` is not spread or reader"))
    }
}

impl fmt::Display for LocalPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which NIC the ports are chosen for, and this host's own NIC when it is
/// one of them (see `docs/directions.md`): `--steer`, `--local-iface`,
/// `--local-rss`, `--local-cpus` and `--local-placement`.
#[derive(Debug, Clone, Default)]
pub struct LocalSettings {
    /// Whose CPUs each steered flow is placed on (`None`: `remote`).
    pub steer: Option<Steer>,
    /// This host's NIC, discovered as the receiver agent discovers its own.
    pub local_iface: Option<String>,
    /// This host's NIC described in a file (`srap rss show --json`).
    pub local_rss: Option<PathBuf>,
    /// Only these CPUs of this host take steered flows (`None`: every CPU
    /// a receive queue reaches, those on the NIC's NUMA node first).
    pub local_cpus: Option<BTreeSet<u32>>,
    /// Where each flow's local end goes (`None`: `spread`).
    pub local_placement: Option<LocalPlacement>,
}

impl LocalSettings {
    /// `--steer`, `remote` unless given.
    pub fn steer(&self) -> Steer {
        self.steer.unwrap_or_default()
    }

    /// `--local-placement`, `spread` unless given.
    pub fn local_placement(&self) -> LocalPlacement {
        self.local_placement.unwrap_or_default()
    }

    /// Checks the local settings go together: a description of this
    /// host's NIC for `local` and `both`, and none of them for `remote`.
    /// Checked after the `--config` file is merged, so the messages name
    /// both the flag and the key.
    pub fn check(&self) -> anyhow::Result<()> {
        let described = self.local_iface.is_some() || self.local_rss.is_some();
        match self.steer() {
            Steer::Remote
                if described
                    || self.local_cpus.is_some()
                    || self.local_placement() == LocalPlacement::Reader =>
            {
                anyhow::bail!(
                    "--local-iface, --local-rss, --local-cpus and --local-placement reader go \
                     with --steer local or both (`steer` in the --config file)"
                )
            }
            Steer::Local | Steer::Both if !described => anyhow::bail!(
                "--steer {} needs this host's NIC: give --local-iface DEV (discovered) or \
                 --local-rss FILE (`local-iface` or `local-rss` in the --config file)",
                self.steer()
            ),
            Steer::Local | Steer::Both
                if self.local_iface.is_some() && self.local_rss.is_some() =>
            {
                anyhow::bail!("give one of --local-iface and --local-rss, not both")
            }
            _ => Ok(()),
        }
    }
}

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
}

impl LocalNic {
    /// Reads this host's NIC as `args` name it (`None` with `--steer
    /// remote`): discovered (blocking: netlink and /proc) or read from the
    /// file.
    pub fn load(args: &LocalSettings) -> Result<Option<Self>, LocalNicError> {
        let source = match (&args.local_iface, &args.local_rss) {
            (Some(iface), _) => Source::Iface(iface.clone()),
            (None, Some(file)) => Source::File(file.clone()),
            (None, None) => return Ok(None),
        };
        let mut warnings = Vec::new();
        let (description, discovered) = source.read_with_origin(&mut warnings)?;
        for warning in &warnings {
            tracing::warn!("this host's NIC: {warning}");
        }
        let mut nic = Self::new(source, description, args.local_cpus.as_ref())?;
        nic.discovered = discovered;
        nic.key.source = discovered;
        Ok(Some(nic))
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
            Source::Iface(iface) => crate::verifier::driver(iface),
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
    fn steer_parses_and_names_itself() {
        for (text, steer) in [
            ("remote", Steer::Remote),
            ("local", Steer::Local),
            ("both", Steer::Both),
        ] {
            assert_eq!(text.parse::<Steer>(), Ok(steer));
            assert_eq!(steer.to_string(), text);
        }
        assert!("push".parse::<Steer>().unwrap_err().contains("`push`"));
        assert!(Steer::Both.local() && Steer::Both.remote());
        assert!(!Steer::Local.remote() && !Steer::Remote.local());
    }

    #[test]
    fn local_cpus_restrict_the_offer_and_none_reached_is_an_error() {
        let file = Source::File("/etc/srap/local.json".into());
        let only: BTreeSet<u32> = [3, 4, 40].into_iter().collect();
        let nic = LocalNic::new(file.clone(), embedded_default(), Some(&only)).unwrap();
        assert_eq!(nic.tiers, vec![vec![3, 4]]);
        let all = LocalNic::new(file.clone(), embedded_default(), None).unwrap();
        assert_eq!(all.cpus().len(), 32);
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
