//! The sender's two ends of a flow (see `srap_common::ends`): which ends'
//! NICs a steered flow is placed on ([`PlacedEnds`], `--steer`), where its
//! local end goes on this host ([`LocalPlacement`]), and the settings that
//! name this host's own NIC when it is one of them ([`LocalSettings`]:
//! `--local-iface` or `--local-rss`, `--local-cpus`). The NIC itself, as
//! described, is [`super::local::nic`]'s. Plain settings, beneath
//! everything else of the sender.

use std::{collections::BTreeSet, fmt, path::PathBuf, str::FromStr};

use srap_common::{binder::placement, local_nics::policy as nic_policy};

/// `--steer`: which ends' NICs a steered flow is placed on (their CPUs:
/// the receiver's, this host's, or both at once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PlacedEnds {
    /// The receiver's (the data this host sends).
    #[default]
    Remote,
    /// This host's own (the reverse tuple: what this host receives).
    Local,
    /// One port for both.
    Both,
}

impl PlacedEnds {
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

impl FromStr for PlacedEnds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Remote, Self::Local, Self::Both]
            .into_iter()
            .find(|ends| ends.name() == text)
            .ok_or_else(|| format!("`{text}` is not remote, local or both"))
    }
}

impl fmt::Display for PlacedEnds {
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

/// `--local-nics`: which of this host's NICs a steered flow leaves and
/// arrives by, where several can reach its destination (issue 43): the
/// connect hook binds the chosen NIC's address when the application bound
/// none (`srap_common::local_nics`), and places the flow by the route
/// where that NIC cannot take it (counted as `nic_fallback`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LocalNicsPolicy {
    /// The route's choice (its source address): the kernel's, as before.
    #[default]
    Route,
    /// The NIC on the connecting CPU's NUMA node.
    Numa,
    /// Flows spread evenly over the NICs (egress bandwidth).
    Balance,
}

impl LocalNicsPolicy {
    /// The name `--local-nics` and the `local-nics` key take.
    pub fn name(self) -> &'static str {
        match self {
            Self::Route => "route",
            Self::Numa => "numa",
            Self::Balance => "balance",
        }
    }

    /// As the hook's config holds it (`srap_common::local_nics::policy`).
    pub fn as_config(self) -> u32 {
        match self {
            Self::Route => nic_policy::ROUTE,
            Self::Numa => nic_policy::NUMA,
            Self::Balance => nic_policy::BALANCE,
        }
    }
}

impl FromStr for LocalNicsPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Route, Self::Numa, Self::Balance]
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| format!("`{text}` is not route, numa or balance"))
    }
}

impl fmt::Display for LocalNicsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--source-rules`: whether the agent only says which source rules the
/// NICs of `--local-nics numa|balance` need, or also installs them (and
/// removes them on detach and on a clean stop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SourceRules {
    /// Check and warn; change nothing.
    #[default]
    Check,
    /// Install each missing source rule and its table's route.
    Install,
}

impl SourceRules {
    /// The name `--source-rules` and the `source-rules` key take.
    pub fn name(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Install => "install",
        }
    }
}

impl FromStr for SourceRules {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        [Self::Check, Self::Install]
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| format!("`{text}` is not check or install"))
    }
}

impl fmt::Display for SourceRules {
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
    /// but the NICs `--local-nics numa|balance` chooses among
    /// (`--local-iface`), which place no flow on this host's CPUs.
    /// Checked after the `--config` file is merged, so the messages name
    /// both the flag and the key.
    pub fn check(&self) -> anyhow::Result<()> {
        let described = !self.local_ifaces.is_empty() || self.local_rss.is_some();
        let nics_chosen = self.local_nics() != LocalNicsPolicy::Route;
        match self.placed_ends() {
            PlacedEnds::Remote
                if (described && !(nics_chosen && self.local_rss.is_none()))
                    || self.local_cpus.is_some()
                    || self.local_placement() == LocalPlacement::Reader =>
            {
                anyhow::bail!(
                    "--local-iface, --local-rss, --local-cpus and --local-placement reader go \
                     with --steer local or both (`steer` in the --config file); --local-iface \
                     alone also goes with --local-nics numa or balance"
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
    fn placed_ends_parse_and_name_themselves() {
        for (text, ends) in [
            ("remote", PlacedEnds::Remote),
            ("local", PlacedEnds::Local),
            ("both", PlacedEnds::Both),
        ] {
            assert_eq!(text.parse::<PlacedEnds>(), Ok(ends));
            assert_eq!(ends.to_string(), text);
        }
        assert!("push".parse::<PlacedEnds>().unwrap_err().contains("`push`"));
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
        assert!(nics(LocalNicsPolicy::Numa).check().is_ok());
        assert!(nics(LocalNicsPolicy::Balance).check().is_ok());
        let route = nics(LocalNicsPolicy::Route)
            .check()
            .unwrap_err()
            .to_string();
        assert!(route.contains("go with --steer local or both"), "{route}");
        let rss = LocalSettings {
            local_rss: Some("nic.json".into()),
            ..nics(LocalNicsPolicy::Numa)
        };
        assert!(rss.check().is_err());
    }

    /// The three policy names are fixed (issue 43), each its own number in
    /// the hook's config.
    #[test]
    fn local_nics_policies_parse_and_each_is_its_own_hook_policy() {
        for (text, policy) in [
            ("route", LocalNicsPolicy::Route),
            ("numa", LocalNicsPolicy::Numa),
            ("balance", LocalNicsPolicy::Balance),
        ] {
            assert_eq!(text.parse::<LocalNicsPolicy>(), Ok(policy));
            assert_eq!(policy.to_string(), text);
        }
        assert!("nearest".parse::<LocalNicsPolicy>().is_err());
        assert_eq!(
            LocalSettings::default().local_nics(),
            LocalNicsPolicy::Route
        );
        let numbers: BTreeSet<u32> = [
            LocalNicsPolicy::Route,
            LocalNicsPolicy::Numa,
            LocalNicsPolicy::Balance,
        ]
        .map(LocalNicsPolicy::as_config)
        .into();
        assert_eq!(numbers.len(), 3);
        assert_eq!(LocalNicsPolicy::Route.as_config(), nic_policy::ROUTE);
    }
}
