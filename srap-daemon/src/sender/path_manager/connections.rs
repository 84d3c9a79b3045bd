//! The namespace's MPTCP connections as their path manager keeps them,
//! and what it asks of the kernel for each: pure, fed the path manager's
//! events, the cgroup each connection belongs to and the reader
//! tracepoint's counts, answering with [`Action`]s the manager carries
//! out.
//!
//! * A connection of the steered cgroup gets a subflow from each NIC this
//!   host follows (this host connected) or each NIC's address announced
//!   (this host accepted); its ports are the binder's to choose (the
//!   bind hook steers a subflow bound with port 0). Every subflow but the
//!   ones through the reader's node's NIC is marked backup, so the peer
//!   sends by that NIC alone; with none there, none is backup.
//! * Any other connection gets what the kernel's own path manager would
//!   give it: a subflow from each `subflow` endpoint, up to the limit, and
//!   each `signal` endpoint announced.
//! * A connection is never left with every subflow backup.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
};

use srap_common::reader::ReadCounts;
use srap_host::mptcp_pm::{
    FLAG_SIGNAL, FLAG_SUBFLOW, PmEndpoint, PmEndpointEntry, PmEvent, PmEventKind, PmLimits,
};

use super::reader_node::ReaderNode;

/// One NIC a followed connection may have a subflow through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowedNic {
    pub name: String,
    pub ifindex: u32,
    pub addresses: Vec<IpAddr>,
    /// Its device's NUMA node; `None` when unknown.
    pub node: Option<u32>,
}

/// What the namespace's own path manager settings say, for the
/// connections SRAP does not steer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelSettings {
    pub endpoints: Vec<PmEndpointEntry>,
    pub limits: PmLimits,
}

/// A request for the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    CreateSubflow {
        token: u32,
        local: PmEndpoint,
        remote: SocketAddr,
    },
    Announce {
        token: u32,
        local: PmEndpoint,
    },
    SetBackup {
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
        backup: bool,
    },
    /// Start or stop counting the connection's reads.
    Follow(u32),
    Forget(u32),
}

/// One subflow as the events told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subflow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub backup: bool,
}

/// Whose the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Not known yet: its cgroup is read at the next tick.
    Unknown,
    /// Of the steered cgroup: SRAP follows its reader.
    Steered,
    /// Another cgroup's: it gets the kernel's settings.
    Other,
    /// Open before this agent started: its subflows are kept, its reader
    /// followed.
    Adopted,
}

/// One connection.
#[derive(Debug, Clone)]
pub struct Connection {
    pub token: u32,
    /// The first subflow's ends.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub server_side: bool,
    /// Its first subflow is established (`MPTCP_EVENT_ESTABLISHED`).
    pub established: bool,
    pub owner: Owner,
    pub subflows: Vec<Subflow>,
    pub reader: ReaderNode,
    /// Subflows asked for and refused, or closed with an error.
    pub refused: u64,
    /// Why no subflow is on the reader's node, while none is.
    pub unplaced: Option<String>,
    next_id: u8,
    /// The address id each local address has in this connection: the
    /// kernel takes a subflow made again from an address only under the
    /// id it first had.
    ids: BTreeMap<IpAddr, u8>,
    /// Its subflows' backup flags are as recorded: not so for a
    /// connection adopted from the kernel's listing, whose flags the
    /// agent before may have set, until they are all set once.
    flags_known: bool,
    /// The repair round ([`Connections::repair`]) a subflow from each
    /// local address was last asked for in, until one is established.
    asked: BTreeMap<IpAddr, u64>,
    /// Addresses the peer announced (`ADD_ADDR`), each with the port to
    /// reach it on, and those a subflow was asked toward.
    announced: Vec<SocketAddr>,
    joined: usize,
    /// The namespace's limits, for a connection given the kernel's
    /// settings ([`Owner::Other`]).
    limits: Option<PmLimits>,
}

/// Every connection of the namespace, by token.
#[derive(Debug, Default)]
pub struct Connections {
    pub by_token: BTreeMap<u32, Connection>,
    /// The NICs a steered connection gets a subflow through.
    nics: Vec<FollowedNic>,
    /// Backup flags changed, subflows asked for.
    pub flips: u64,
    pub subflows_made: u64,
    /// Repair rounds so far.
    rounds: u64,
}

/// Repair rounds between two asks for the same NIC's subflow: one still
/// opening (its SYN out) is not asked for twice.
pub const REPAIR_ROUNDS_BETWEEN_ASKS: u64 = 5;

impl Connections {
    /// No connection yet; steered ones get a subflow through each of
    /// `nics`.
    pub fn new(nics: Vec<FollowedNic>) -> Self {
        Self {
            nics,
            ..Self::default()
        }
    }

    /// Takes one event; what it asks of the kernel at once.
    pub fn on_event(&mut self, event: &PmEvent) -> Vec<Action> {
        match event.kind {
            PmEventKind::Created => {
                self.created(event);
                Vec::new()
            }
            PmEventKind::Established => {
                if let Some(conn) = self.by_token.get_mut(&event.token) {
                    conn.established = true;
                }
                Vec::new()
            }
            PmEventKind::SubEstablished => self.sub_established(event),
            PmEventKind::SubClosed => self.sub_closed(event),
            PmEventKind::SubPriority => {
                self.sub_priority(event);
                Vec::new()
            }
            PmEventKind::Announced => self.peer_announced(event),
            PmEventKind::Closed => match self.by_token.remove(&event.token) {
                Some(_) => vec![Action::Forget(event.token)],
                None => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// Established connections whose owner is still [`Owner::Unknown`],
    /// with their first subflow's ends (the kernel takes no further
    /// subflow before a connection is established).
    pub fn unresolved(&self) -> Vec<(u32, SocketAddr, SocketAddr)> {
        self.by_token
            .values()
            .filter(|c| c.owner == Owner::Unknown && c.established)
            .map(|c| (c.token, c.local, c.remote))
            .collect()
    }

    /// Says whose connection `token` is, and what that asks for.
    pub fn resolve(&mut self, token: u32, owner: Owner, kernel: &KernelSettings) -> Vec<Action> {
        let nics = &self.nics;
        let round = self.rounds;
        let Some(conn) = self.by_token.get_mut(&token) else {
            return Vec::new();
        };
        conn.owner = owner;
        if owner == Owner::Other {
            conn.limits = Some(kernel.limits);
        }
        let mut actions = match owner {
            Owner::Steered => conn.missing_paths(nics, round),
            Owner::Other => conn.kernel_paths(kernel),
            Owner::Unknown | Owner::Adopted => Vec::new(),
        };
        let announced = conn.announced.clone();
        for to in announced {
            actions.extend(conn.toward_announced(to, nics));
        }
        self.subflows_made += actions
            .iter()
            .filter(|a| matches!(a, Action::CreateSubflow { .. }))
            .count() as u64;
        let follow = matches!(owner, Owner::Steered | Owner::Adopted);
        follow
            .then_some(Action::Follow(token))
            .into_iter()
            .chain(actions)
            .collect()
    }

    /// Takes a connection open before the agent: its subflows as the
    /// kernel lists them, each with its local address id (the first
    /// subflow, id 0, first).
    pub fn adopt(&mut self, token: u32, subflows: Vec<(u8, Subflow)>) -> Vec<Action> {
        let Some((_, first)) = subflows.first().copied() else {
            return Vec::new();
        };
        let mut conn = Connection::new(token, first.local, first.remote, false);
        conn.owner = Owner::Adopted;
        conn.established = true;
        conn.flags_known = false;
        for (id, subflow) in &subflows {
            if *id != 0 {
                conn.ids.insert(subflow.local.ip(), *id);
                conn.next_id = conn.next_id.max(id.saturating_add(1));
            }
        }
        conn.subflows = subflows.into_iter().map(|(_, s)| s).collect();
        self.by_token.insert(token, conn);
        vec![Action::Follow(token)]
    }

    /// One repair round over the connections this host opened and
    /// follows: a subflow through each NIC of `up` (the followed NICs up
    /// now) that none of a connection's subflows leaves from, as when
    /// the NIC's subflow closed while the NIC was down. Where this host
    /// accepted the connection, the peer makes the subflows: nothing.
    pub fn repair(&mut self, up: &[FollowedNic]) -> Vec<Action> {
        self.rounds += 1;
        let round = self.rounds;
        let mut actions = Vec::new();
        for conn in self.by_token.values_mut() {
            let followed = matches!(conn.owner, Owner::Steered | Owner::Adopted);
            if followed && conn.established && !conn.server_side {
                actions.extend(conn.missing_paths(up, round));
            }
        }
        self.subflows_made += actions.len() as u64;
        actions
    }

    /// The reads of `token` counted now: the flags its reader's node asks.
    pub fn on_reads(&mut self, token: u32, counts: &ReadCounts) -> Vec<Action> {
        let Some(conn) = self.by_token.get_mut(&token) else {
            return Vec::new();
        };
        conn.reader.sample(counts);
        let actions = conn.flags(&self.nics);
        self.flips += actions.len() as u64;
        actions
    }

    /// The peer announced an address: kept, and once the connection's
    /// owner is known, the subflows it asks toward it.
    fn peer_announced(&mut self, event: &PmEvent) -> Vec<Action> {
        let (Some(conn), Some(to)) = (self.by_token.get_mut(&event.token), event.remote) else {
            return Vec::new();
        };
        let port = if to.port() == 0 {
            conn.remote.port()
        } else {
            to.port()
        };
        let to = SocketAddr::new(to.ip(), port);
        if conn.announced.contains(&to) {
            return Vec::new();
        }
        conn.announced.push(to);
        let actions = conn.toward_announced(to, &self.nics);
        self.subflows_made += actions.len() as u64;
        actions
    }

    fn created(&mut self, event: &PmEvent) {
        let (Some(local), Some(remote)) = (event.local, event.remote) else {
            return;
        };
        let conn = Connection::new(event.token, local, remote, event.server_side);
        self.by_token.insert(event.token, conn);
    }

    fn sub_established(&mut self, event: &PmEvent) -> Vec<Action> {
        let (Some(conn), Some(local), Some(remote)) = (
            self.by_token.get_mut(&event.token),
            event.local,
            event.remote,
        ) else {
            return Vec::new();
        };
        conn.subflows
            .retain(|s| (s.local, s.remote) != (local, remote));
        conn.asked.remove(&local.ip());
        if let Some(id) = event.local_id.filter(|id| *id != 0) {
            conn.ids.insert(local.ip(), id);
            conn.next_id = conn.next_id.max(id.saturating_add(1));
        }
        conn.subflows.push(Subflow {
            local,
            remote,
            backup: event.backup,
        });
        Vec::new()
    }

    fn sub_closed(&mut self, event: &PmEvent) -> Vec<Action> {
        let Some(conn) = self.by_token.get_mut(&event.token) else {
            return Vec::new();
        };
        if event.error.is_some_and(|e| e != 0) {
            conn.refused += 1;
        }
        conn.subflows
            .retain(|s| Some(s.local) != event.local || Some(s.remote) != event.remote);
        conn.never_all_backup()
    }

    fn sub_priority(&mut self, event: &PmEvent) {
        let Some(conn) = self.by_token.get_mut(&event.token) else {
            return;
        };
        for subflow in &mut conn.subflows {
            if Some(subflow.local) == event.local && Some(subflow.remote) == event.remote {
                subflow.backup = event.backup;
            }
        }
    }
}

impl Connection {
    fn new(token: u32, local: SocketAddr, remote: SocketAddr, server_side: bool) -> Self {
        Self {
            token,
            local,
            remote,
            server_side,
            established: false,
            owner: Owner::Unknown,
            // The first subflow is established when the connection is.
            subflows: vec![Subflow {
                local,
                remote,
                backup: false,
            }],
            reader: ReaderNode::default(),
            refused: 0,
            unplaced: None,
            next_id: 1,
            ids: BTreeMap::new(),
            flags_known: true,
            asked: BTreeMap::new(),
            announced: Vec::new(),
            joined: 0,
            limits: None,
        }
    }

    /// A subflow from (or, accepted, an announcement of) each NIC of
    /// `nics` that none of the connection's subflows leaves from, of the
    /// connection's family, unless asked for in the last
    /// [`REPAIR_ROUNDS_BETWEEN_ASKS`] rounds.
    fn missing_paths(&mut self, nics: &[FollowedNic], round: u64) -> Vec<Action> {
        let family_v4 = self.local.is_ipv4();
        let mut actions = Vec::new();
        for nic in nics {
            let has_one = self
                .subflows
                .iter()
                .any(|s| nic.addresses.contains(&s.local.ip()));
            let Some(ip) = nic.addresses.iter().find(|a| a.is_ipv4() == family_v4) else {
                continue;
            };
            let recent = self
                .asked
                .get(ip)
                .is_some_and(|at| round < at + REPAIR_ROUNDS_BETWEEN_ASKS);
            if has_one || recent {
                continue;
            }
            self.asked.insert(*ip, round);
            let local = PmEndpoint {
                id: self.id_for(*ip),
                addr: SocketAddr::new(*ip, 0),
                ifindex: Some(nic.ifindex),
            };
            actions.push(self.path_from(local));
        }
        actions
    }

    /// The subflows toward an address the peer announced, once the
    /// connection's owner is known: for one SRAP follows, from each of
    /// `nics` (its flags then follow the reader as every subflow's do);
    /// nothing where this host accepted the connection; for another
    /// cgroup's, one from its first subflow's address, as the
    /// kernel does, within the namespace's `add_addr_accepted` and
    /// `subflows` limits.
    fn toward_announced(&mut self, to: SocketAddr, nics: &[FollowedNic]) -> Vec<Action> {
        let family_v4 = to.is_ipv4();
        let locals: Vec<(IpAddr, Option<u32>)> = match self.owner {
            // Accepted, the peer makes the subflows.
            Owner::Steered | Owner::Adopted if self.server_side => Vec::new(),
            Owner::Steered | Owner::Adopted => nics
                .iter()
                .filter_map(|n| {
                    let ip = n.addresses.iter().find(|a| a.is_ipv4() == family_v4)?;
                    Some((*ip, Some(n.ifindex)))
                })
                .collect(),
            Owner::Other => match self.limits {
                Some(l)
                    if (self.joined as u32) < l.add_addr_accepted
                        && (self.subflows.len() as u32) <= l.subflows =>
                {
                    vec![(self.local.ip(), None)]
                }
                _ => Vec::new(),
            },
            Owner::Unknown => Vec::new(),
        };
        if !locals.is_empty() {
            self.joined += 1;
        }
        locals
            .into_iter()
            .map(|(ip, ifindex)| Action::CreateSubflow {
                token: self.token,
                local: PmEndpoint {
                    id: self.id_for(ip),
                    addr: SocketAddr::new(ip, 0),
                    ifindex,
                },
                remote: to,
            })
            .collect()
    }

    /// What the kernel's own path manager would do with its endpoints.
    fn kernel_paths(&mut self, kernel: &KernelSettings) -> Vec<Action> {
        let family_v4 = self.local.is_ipv4();
        let mut made = 0;
        let mut actions = Vec::new();
        for entry in &kernel.endpoints {
            let end = entry.end;
            if end.addr.is_ipv4() != family_v4 || end.addr.ip() == self.local.ip() {
                continue;
            }
            if entry.flags & FLAG_SIGNAL != 0 {
                actions.push(Action::Announce {
                    token: self.token,
                    local: end,
                });
            }
            if entry.flags & FLAG_SUBFLOW != 0 && !self.server_side && made < kernel.limits.subflows
            {
                made += 1;
                actions.push(Action::CreateSubflow {
                    token: self.token,
                    local: end,
                    remote: self.remote,
                });
            }
        }
        actions
    }

    fn path_from(&self, local: PmEndpoint) -> Action {
        if self.server_side {
            Action::Announce {
                token: self.token,
                local,
            }
        } else {
            Action::CreateSubflow {
                token: self.token,
                local,
                remote: self.remote,
            }
        }
    }

    /// The id `ip` has in this connection, a new one the first time.
    fn id_for(&mut self, ip: IpAddr) -> u8 {
        if let Some(id) = self.ids.get(&ip) {
            return *id;
        }
        let id = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        self.ids.insert(ip, id);
        id
    }

    /// The backup flag each subflow should have for the reader's node.
    fn flags(&mut self, nics: &[FollowedNic]) -> Vec<Action> {
        let Some(node) = self.reader.node() else {
            return Vec::new();
        };
        let on_node = |s: &Subflow| node_of(nics, s.local.ip()) == Some(node);
        let any_on_node = self.subflows.iter().any(on_node);
        self.unplaced = (!any_on_node).then(|| unplaced(nics, node));
        let wanted = |s: &Subflow| any_on_node && !on_node(s);
        self.set_flags(wanted)
    }

    /// Unmarks every subflow when all that are left are backup.
    fn never_all_backup(&mut self) -> Vec<Action> {
        if self.subflows.iter().all(|s| s.backup) {
            self.set_flags(|_| false)
        } else {
            Vec::new()
        }
    }

    fn set_flags(&mut self, wanted: impl Fn(&Subflow) -> bool) -> Vec<Action> {
        let mut actions = Vec::new();
        let all = !std::mem::replace(&mut self.flags_known, true);
        for subflow in &mut self.subflows {
            let backup = wanted(subflow);
            if subflow.backup != backup || all {
                subflow.backup = backup;
                actions.push(Action::SetBackup {
                    token: self.token,
                    local: subflow.local,
                    remote: subflow.remote,
                    backup,
                });
            }
        }
        actions
    }
}

/// Why a connection read on `node` has no subflow there.
fn unplaced(nics: &[FollowedNic], node: u32) -> String {
    let there: Vec<&str> = nics
        .iter()
        .filter(|n| n.node == Some(node))
        .map(|n| n.name.as_str())
        .collect();
    if there.is_empty() {
        format!("no followed NIC is on node {node} (give its NIC with --local-iface)")
    } else {
        format!(
            "no subflow leaves from node {node}'s NIC ({}): refused, closed or without an \
             address of the connection's family",
            there.join(", ")
        )
    }
}

/// The node of the NIC holding `ip`.
fn node_of(nics: &[FollowedNic], ip: IpAddr) -> Option<u32> {
    nics.iter().find(|n| n.addresses.contains(&ip))?.node
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("address")
    }

    fn nics() -> Vec<FollowedNic> {
        (0..2)
            .map(|n| FollowedNic {
                name: format!("eth{n}"),
                ifindex: 10 + n,
                addresses: vec![format!("10.{n}.0.1").parse().expect("ip")],
                node: Some(n),
            })
            .collect()
    }

    fn event(kind: PmEventKind, local: &str, remote: &str) -> PmEvent {
        PmEvent {
            local: Some(addr(local)),
            remote: Some(addr(remote)),
            ..PmEvent::new(kind, 7)
        }
    }

    /// A steered connection from eth0, with its second subflow from eth1.
    fn two_subflows() -> Connections {
        let mut table = Connections::new(nics());
        table.on_event(&event(
            PmEventKind::Created,
            "10.0.0.1:40000",
            "10.9.0.2:5201",
        ));
        let asked = table.resolve(7, Owner::Steered, &KernelSettings::default());
        assert_eq!(
            asked,
            vec![
                Action::Follow(7),
                Action::CreateSubflow {
                    token: 7,
                    local: PmEndpoint {
                        id: 1,
                        addr: addr("10.1.0.1:0"),
                        ifindex: Some(11)
                    },
                    remote: addr("10.9.0.2:5201"),
                }
            ]
        );
        table.on_event(&event(
            PmEventKind::SubEstablished,
            "10.1.0.1:40001",
            "10.9.0.2:5201",
        ));
        table
    }

    fn reads(node: usize, bytes: u64, counts: &mut ReadCounts) -> ReadCounts {
        counts.bytes[node] += bytes;
        *counts
    }

    #[test]
    fn the_subflows_off_the_readers_node_are_backup_and_follow_its_move() {
        let mut table = two_subflows();
        let mut counts = ReadCounts::default();
        let first = table.on_reads(7, &reads(1, 1 << 20, &mut counts));
        assert_eq!(
            first,
            vec![Action::SetBackup {
                token: 7,
                local: addr("10.0.0.1:40000"),
                remote: addr("10.9.0.2:5201"),
                backup: true
            }]
        );
        assert!(
            table
                .on_reads(7, &reads(0, 1 << 20, &mut counts))
                .is_empty()
        );
        let moved = table.on_reads(7, &reads(0, 1 << 20, &mut counts));
        assert_eq!(moved.len(), 2, "both flags flip: {moved:?}");
        assert_eq!(table.flips, 3);
    }

    #[test]
    fn a_lone_backup_subflow_is_unmarked_when_the_other_closes() {
        let mut table = two_subflows();
        let mut counts = ReadCounts::default();
        table.on_reads(7, &reads(1, 1 << 20, &mut counts));
        let closed = table.on_event(&event(
            PmEventKind::SubClosed,
            "10.1.0.1:40001",
            "10.9.0.2:5201",
        ));
        assert_eq!(
            closed,
            vec![Action::SetBackup {
                token: 7,
                local: addr("10.0.0.1:40000"),
                remote: addr("10.9.0.2:5201"),
                backup: false
            }]
        );
    }

    #[test]
    fn without_a_subflow_on_the_readers_node_none_is_backup_and_the_status_says_why() {
        let mut table = two_subflows();
        let mut nics = nics();
        nics[1].node = None;
        nics.push(FollowedNic {
            name: "eth2".into(),
            ifindex: 12,
            addresses: vec![],
            node: Some(2),
        });
        table.nics = nics;
        let mut counts = ReadCounts::default();
        assert!(
            table
                .on_reads(7, &reads(2, 1 << 20, &mut counts))
                .is_empty()
        );
        let conn = &table.by_token[&7];
        assert!(
            conn.unplaced
                .as_deref()
                .is_some_and(|why| why.contains("node 2"))
        );
    }

    #[test]
    fn another_cgroups_connection_gets_the_kernels_endpoints_up_to_the_limit() {
        let mut table = Connections::new(nics());
        table.on_event(&event(
            PmEventKind::Created,
            "10.0.0.1:40000",
            "10.9.0.2:5201",
        ));
        let entry = |ip: &str, flags| PmEndpointEntry {
            end: PmEndpoint {
                id: 3,
                addr: addr(ip),
                ifindex: None,
            },
            flags,
        };
        let kernel = KernelSettings {
            endpoints: vec![
                entry("10.1.0.1:0", FLAG_SUBFLOW),
                entry("10.2.0.1:0", FLAG_SUBFLOW),
                entry("10.3.0.1:0", FLAG_SIGNAL),
            ],
            limits: PmLimits {
                subflows: 1,
                add_addr_accepted: 0,
            },
        };
        let asked = table.resolve(7, Owner::Other, &kernel);
        assert_eq!(
            asked.len(),
            2,
            "one subflow (the limit) and one announcement: {asked:?}"
        );
        assert!(!asked.contains(&Action::Follow(7)));
    }

    #[test]
    fn an_accepted_connection_announces_the_other_nics() {
        let mut table = Connections::new(nics());
        let mut created = event(PmEventKind::Created, "10.0.0.1:5201", "10.9.0.2:40000");
        created.server_side = true;
        table.on_event(&created);
        let asked = table.resolve(7, Owner::Steered, &KernelSettings::default());
        assert!(
            matches!(asked[1], Action::Announce { token: 7, .. }),
            "{asked:?}"
        );
        assert!(table.repair(&nics()).is_empty(), "the peer makes them");
    }

    #[test]
    fn an_adopted_connections_flags_are_all_set_once_its_reader_is_known() {
        let mut table = Connections::new(nics());
        let subflow = |local: &str| Subflow {
            local: addr(local),
            remote: addr("10.9.0.2:5201"),
            backup: false,
        };
        table.adopt(
            7,
            vec![
                (0, subflow("10.0.0.1:40000")),
                (1, subflow("10.1.0.1:40001")),
            ],
        );
        let mut counts = ReadCounts::default();
        let first = table.on_reads(7, &reads(0, 1 << 20, &mut counts));
        assert_eq!(
            first.len(),
            2,
            "the flag the agent before left on each: {first:?}"
        );
        let again = table.on_reads(7, &reads(0, 1 << 20, &mut counts));
        assert!(again.is_empty(), "then only changes: {again:?}");
    }

    #[test]
    fn a_nics_subflow_that_closed_is_asked_again_once_the_nic_is_up_and_not_twice_at_once() {
        let mut table = two_subflows();
        table.on_event(&event(
            PmEventKind::Established,
            "10.0.0.1:40000",
            "10.9.0.2:5201",
        ));
        assert!(table.repair(&nics()).is_empty(), "a subflow from each NIC");
        table.on_event(&event(
            PmEventKind::SubClosed,
            "10.1.0.1:40001",
            "10.9.0.2:5201",
        ));
        let eth0_only = &nics()[..1];
        assert!(table.repair(eth0_only).is_empty(), "eth1 is down");
        let asked = table.repair(&nics());
        assert!(
            matches!(
                asked[..],
                [Action::CreateSubflow {
                    local: PmEndpoint {
                        id: 1,
                        ifindex: Some(11),
                        ..
                    },
                    ..
                }]
            ),
            "eth1 is back, under the id its address had: {asked:?}"
        );
        for _ in 1..REPAIR_ROUNDS_BETWEEN_ASKS {
            assert!(table.repair(&nics()).is_empty(), "still opening");
        }
        assert_eq!(table.repair(&nics()).len(), 1, "asked again");
    }

    fn announced(remote: &str) -> PmEvent {
        PmEvent {
            remote: Some(addr(remote)),
            remote_id: Some(1),
            ..PmEvent::new(PmEventKind::Announced, 7)
        }
    }

    #[test]
    fn a_steered_connection_joins_an_announced_address_from_each_nic_on_its_port() {
        let mut table = two_subflows();
        let asked = table.on_event(&announced("10.9.1.2:0"));
        let from: Vec<(IpAddr, SocketAddr)> = asked
            .iter()
            .filter_map(|a| match a {
                Action::CreateSubflow { local, remote, .. } => Some((local.addr.ip(), *remote)),
                _ => None,
            })
            .collect();
        let to = addr("10.9.1.2:5201");
        assert_eq!(
            from,
            vec![
                ("10.0.0.1".parse().expect("ip"), to),
                ("10.1.0.1".parse().expect("ip"), to)
            ]
        );
        assert!(table.on_event(&announced("10.9.1.2:0")).is_empty(), "once");
    }

    #[test]
    fn another_cgroups_connection_joins_announced_addresses_within_the_kernels_limits() {
        let mut table = Connections::new(nics());
        table.on_event(&event(
            PmEventKind::Created,
            "10.0.0.1:40000",
            "10.9.0.2:5201",
        ));
        // Announced before the connection's cgroup was read: kept.
        assert!(table.on_event(&announced("10.9.1.2:0")).is_empty());
        let kernel = KernelSettings {
            limits: PmLimits {
                subflows: 2,
                add_addr_accepted: 1,
            },
            ..KernelSettings::default()
        };
        let asked = table.resolve(7, Owner::Other, &kernel);
        assert!(
            matches!(
                asked[..],
                [Action::CreateSubflow {
                    local: PmEndpoint { ifindex: None, .. },
                    ..
                }]
            ),
            "one subflow from the connection's own address: {asked:?}"
        );
        assert!(
            table.on_event(&announced("10.9.2.2:0")).is_empty(),
            "add_addr_accepted 1"
        );
    }
}
