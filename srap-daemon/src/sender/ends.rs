//! The sender's two ends of a flow (see `srap_common::ends`): which ends'
//! NICs a steered flow is placed on ([`PlacedEnds`], `--steer`), where its
//! local end goes on this host ([`LocalPlacement`]), and the settings that
//! name this host's own NIC when it is one of them ([`LocalSettings`]:
//! `--local-iface` or `--local-rss`, `--local-cpus`). The NIC itself, as
//! described, is [`super::local::nic`]'s. Plain settings, beneath
//! everything else of the sender; the enums among them are defined in
//! [`super::choices`] and named here too.

use std::{collections::BTreeSet, path::PathBuf};

use super::choices::MptcpMode;
pub use super::choices::{LocalNicsPolicy, LocalPlacement, PlacedEnds, SourceRules};

/// Which NIC the ports are chosen for, and this host's own NIC when it is
/// one of them (see `docs/directions.md`): `--steer`, `--local-iface`,
/// `--local-rss`, `--local-cpus` and `--local-placement`.
#[derive(Debug, Clone, Default)]
pub struct LocalSettings {
    /// Whose CPUs each steered flow is placed on (`None`: `remote`).
    pub placed_ends: Option<PlacedEnds>,
    /// This host's NICs (`--local-iface`, repeatable), each discovered as
    /// the receiver agent discovers its own; flows are placed on the first
    /// (`--steer local|both`), the others are described and shown.
    pub local_ifaces: Vec<String>,
    /// This host's NIC described in a file (`srap rss show --json`).
    pub local_rss: Option<PathBuf>,
    /// Only these CPUs of this host take steered flows (`None`: every CPU
    /// a receive queue reaches, those on the NIC's NUMA node first).
    pub local_cpus: Option<BTreeSet<u32>>,
    /// Where each flow's local end goes (`None`: `spread`).
    pub local_placement: Option<LocalPlacement>,
    /// Which local NIC a flow leaves by (`None`: `route`).
    pub local_nics: Option<LocalNicsPolicy>,
    /// Whether the source rules those NICs need are installed (`None`:
    /// `check`).
    pub source_rules: Option<SourceRules>,
}

impl LocalSettings {
    /// `--steer`, `remote` unless given.
    pub fn placed_ends(&self) -> PlacedEnds {
        self.placed_ends.unwrap_or_default()
    }

    /// `--local-nics`, `route` unless given.
    pub fn local_nics(&self) -> LocalNicsPolicy {
        self.local_nics.unwrap_or_default()
    }

    /// `--source-rules`, `check` unless given.
    pub fn source_rules(&self) -> SourceRules {
        self.source_rules.unwrap_or_default()
    }

    /// `--local-placement`, `spread` unless given.
    pub fn local_placement(&self) -> LocalPlacement {
        self.local_placement.unwrap_or_default()
    }

    /// Checks the local settings go together: a description of this
    /// host's NIC for `local` and `both`, and none of them for `remote` —
    /// but the NICs `--local-nics numa|balance` chooses among, or
    /// `--mptcp follow-reader` opens subflows through (`--local-iface`),
    /// which place no flow on this host's CPUs. Checked after the
    /// `--config` file is merged, so the messages name both the flag and
    /// the key.
    pub fn check(&self, mptcp: MptcpMode) -> anyhow::Result<()> {
        let described = !self.local_ifaces.is_empty() || self.local_rss.is_some();
        let nics_chosen =
            self.local_nics() != LocalNicsPolicy::Route || mptcp == MptcpMode::FollowReader;
        match self.placed_ends() {
            PlacedEnds::Remote
                if (described && !(nics_chosen && self.local_rss.is_none()))
                    || self.local_cpus.is_some()
                    || self.local_placement() == LocalPlacement::Reader =>
            {
                anyhow::bail!(
                    "--local-iface, --local-rss, --local-cpus and --local-placement reader go \
                     with --steer local or both (`steer` in the --config file); --local-iface \
                     alone also goes with --local-nics numa or balance, or --mptcp follow-reader"
                )
            }
            PlacedEnds::Local | PlacedEnds::Both if !described => anyhow::bail!(
                "--steer {} needs this host's NIC: give --local-iface DEV (discovered) or \
                 --local-rss FILE (`local-iface` or `local-rss` in the --config file)",
                self.placed_ends()
            ),
            PlacedEnds::Local | PlacedEnds::Both
                if !self.local_ifaces.is_empty() && self.local_rss.is_some() =>
            {
                anyhow::bail!("give one of --local-iface and --local-rss, not both")
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_ends_say_whose_cpus_are_planned() {
        assert!(PlacedEnds::Both.local() && PlacedEnds::Both.remote());
        assert!(!PlacedEnds::Local.remote() && !PlacedEnds::Remote.local());
    }

    /// The NICs `--local-nics numa|balance` chooses among are given with
    /// `--local-iface` without placing flows on this host's CPUs; under
    /// `route`, or with `--local-rss`, they still need `--steer local|both`.
    #[test]
    fn local_ifaces_go_with_a_nic_policy_without_steering_this_host() {
        let nics = |policy| LocalSettings {
            local_ifaces: vec!["eth0".into(), "eth1".into()],
            local_nics: Some(policy),
            ..LocalSettings::default()
        };
        assert!(nics(LocalNicsPolicy::Numa).check(MptcpMode::Off).is_ok());
        assert!(nics(LocalNicsPolicy::Balance).check(MptcpMode::Off).is_ok());
        let route = nics(LocalNicsPolicy::Route)
            .check(MptcpMode::Off)
            .unwrap_err()
            .to_string();
        assert!(route.contains("go with --steer local or both"), "{route}");
        let rss = LocalSettings {
            local_rss: Some("nic.json".into()),
            ..nics(LocalNicsPolicy::Numa)
        };
        assert!(rss.check(MptcpMode::Off).is_err());
        let follow = nics(LocalNicsPolicy::Route).check(MptcpMode::FollowReader);
        assert!(
            follow.is_ok(),
            "the NICs follow-reader opens subflows through"
        );
    }

    /// Each policy is its own number in the hook's config.
    #[test]
    fn each_local_nics_policy_is_its_own_hook_policy() {
        use clap::ValueEnum as _;
        let numbers: BTreeSet<u32> = LocalNicsPolicy::value_variants()
            .iter()
            .map(|p| p.as_config())
            .collect();
        assert_eq!(numbers.len(), LocalNicsPolicy::value_variants().len());
        assert_eq!(
            LocalSettings::default().local_nics(),
            LocalNicsPolicy::Route
        );
    }
}
