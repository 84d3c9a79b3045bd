//! MPTCP into the two-NIC receiver guest: the guest of
//! [`super::receiver_nics_lab`] serving MPTCP, each connection growing a
//! subflow through each of its NICs.
//!
//! Set up as a user would ([`enable`]): in the guest, a `signal` endpoint
//! on each NIC's address (iproute2's `ip mptcp`, copied in as `ip2`), so
//! that whichever address a connection's first subflow entered (the one
//! asked for: the sender moves no MPTCP connection), the guest announces
//! the other (`ADD_ADDR`; an announcement of the address the connection
//! already uses opens nothing), and a limit of two subflows; in the
//! namespace, MPTCP on and limits that accept an announced address. A
//! round ([`round`]) is one `iperf3 -c` under `mptcpize run` from the
//! namespace to NIC 0's address, against `iperf3 -s` in the guest under
//! `mptcpize`'s library ([`super::image::MPTCP_WRAP`]): every one of its
//! connections, the control connection included, is an MPTCP connection.
//!
//! What a round holds is the guest's own view, never SRAP's report: each
//! subflow as the guest's kernel lists it (`ss -tni`: its tuple, its
//! connection's token, the bytes it received), polled while the transfer
//! runs; the NIC its local address is on; the queue that NIC's own key and
//! table give its tuple and the CPU that queue's interrupt is pinned to;
//! the NICs' own `rx_bytes` and per-queue packets over the round.
//!
//! A subflow's token is taken from any listing that shows it: the guest's
//! kernel now and then lists a busy subflow without its `tcp-ulp-mptcp`
//! part, in one listing of a round; a subflow no listing gave a token
//! stays without one, and the round's judges name it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use srap_common::rss::FlowTuple;

use crate::veth::enable_mptcp_in;

use super::{
    image::MPTCP_WRAP,
    numa::{Counters, NumaGuest},
    receiver_nics_lab::{ClientRun, TwoNicReceiver},
    truth,
};
/// How long the guest's server may take to write its result once the
/// client has ended (as the receiver-NIC lab's).
const SERVER_END: Duration = Duration::from_secs(90);
/// A NIC's counter may exceed its subflows' bytes (headers, the agents'
/// session) but must hold at least this share of them.
const PAYLOAD_SHARE: f64 = 0.9;

/// MPTCP on, in the guest and in the namespace, with the endpoints and
/// limits the module's page says.
pub fn enable(lab: &mut TwoNicReceiver) -> anyhow::Result<()> {
    let mut script = String::from(
        "modprobe tcp_diag && sysctl -qw net.mptcp.enabled=1 && \
         ip2 mptcp limits set subflows 2 add_addr_accepted 0",
    );
    // NIC 1's first: the address a connection to NIC 0 announces.
    for nic in lab.numa.nics.iter().rev() {
        let _ = write!(
            script,
            " && ip2 mptcp endpoint add {} dev {} signal",
            nic.guest_ip, nic.name
        );
    }
    lab.numa.guest.run(&script)?;
    enable_mptcp_in(&lab.net.ns)
}

/// The guest's MPTCP endpoints as `ip mptcp endpoint show` prints them,
/// for a report.
pub fn endpoints(lab: &mut TwoNicReceiver) -> String {
    lab.numa
        .guest
        .read("ip2 mptcp endpoint show; ip2 mptcp limits show")
        .unwrap_or_else(|err| format!("{err:#}"))
}

/// One subflow as the guest's kernel lists it, placed by the NIC that
/// holds its local address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSubflow {
    /// The guest's end and the peer's.
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The guest's token of its MPTCP connection (`None`: `ss` showed a
    /// plain TCP connection, no MPTCP).
    pub token: Option<String>,
    /// Bytes it received, at the last listing that showed it.
    pub bytes: u64,
    /// The NIC holding `local`, the queue its key and table give the
    /// tuple, and the CPU that queue's interrupt is pinned to.
    pub nic: Option<usize>,
    pub queue: Option<u32>,
    pub cpu: Option<u32>,
}

/// One transfer's subflows, the guest's counters over it, and what the
/// client and server said.
#[derive(Debug, Clone)]
pub struct MptcpRound {
    pub title: String,
    pub subflows: Vec<GuestSubflow>,
    pub counters: Counters,
    /// The server's own `sum_received` rate, bits per second.
    pub received_bps: f64,
    /// Each stream's `getpeername()` at the client (iperf3's
    /// `remote_host`), by its local port.
    pub peers_seen: Vec<(u16, IpAddr)>,
    /// How many times, over the round's listings, a subflow showed no
    /// MPTCP token (another listing of it may have), for the report.
    pub without_token: usize,
    /// How many listings the round took.
    pub listings: usize,
}

impl MptcpRound {
    /// The subflows by their connection's token (those without one under
    /// `"-"`).
    pub fn connections(&self) -> BTreeMap<String, Vec<&GuestSubflow>> {
        let mut by_token: BTreeMap<String, Vec<&GuestSubflow>> = BTreeMap::new();
        for s in &self.subflows {
            let token = s.token.clone().unwrap_or_else(|| "-".into());
            by_token.entry(token).or_default().push(s);
        }
        by_token
    }

    /// The distinct (NIC, CPU) pairs the subflows sit on.
    pub fn pairs(&self) -> BTreeSet<(usize, u32)> {
        self.subflows
            .iter()
            .filter_map(|s| s.nic.zip(s.cpu))
            .collect()
    }

    /// Subflows that entered through NIC `nic`.
    pub fn through(&self, nic: usize) -> usize {
        self.subflows.iter().filter(|s| s.nic == Some(nic)).count()
    }

    /// What contradicts "each of `connections` MPTCP connections has one
    /// subflow through each of `nics` NICs".
    pub fn judge_connections(&self, connections: usize, nics: usize) -> Vec<String> {
        let mut wrong = Vec::new();
        let by_token = self.connections();
        if by_token.len() != connections {
            wrong.push(format!(
                "{} connections in the guest's listing, not {connections}",
                by_token.len()
            ));
        }
        for (token, subflows) in &by_token {
            let mut entered: Vec<Option<usize>> = subflows.iter().map(|s| s.nic).collect();
            entered.sort_unstable();
            let wanted: Vec<Option<usize>> = (0..nics).map(Some).collect();
            if entered != wanted {
                wrong.push(format!(
                    "connection {token}: subflows through NICs {entered:?}, not one through each"
                ));
            }
        }
        wrong
    }

    /// What the NICs' own counters contradict: a NIC short of the bytes its
    /// subflows received, busy queues no subflow of that NIC hashes to, or
    /// a subflow that carried a fair share whose queue stayed idle.
    pub fn judge_counters(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        for (nic, counters) in self.counters.nics.iter().enumerate() {
            let mine: Vec<&GuestSubflow> = self
                .subflows
                .iter()
                .filter(|s| s.nic == Some(nic))
                .collect();
            let payload: u64 = mine.iter().map(|s| s.bytes).sum();
            if (counters.rx_bytes as f64) < payload as f64 * PAYLOAD_SHARE {
                wrong.push(format!(
                    "NIC {nic} counted {} bytes for its subflows' {payload}",
                    counters.rx_bytes
                ));
            }
            let busy = truth::busy_queues(&counters.rx_queue_packets, mine.len());
            let hashed: BTreeSet<u32> = mine.iter().filter_map(|s| s.queue).collect();
            if !busy.is_subset(&hashed) {
                wrong.push(format!(
                    "NIC {nic}: queues {busy:?} busy by its own counters, its subflows hash to {hashed:?}"
                ));
            }
            let fair = payload / (2 * mine.len().max(1) as u64);
            let carried: BTreeSet<u32> = mine
                .iter()
                .filter(|s| s.bytes > fair)
                .filter_map(|s| s.queue)
                .collect();
            if !carried.is_subset(&busy) {
                wrong.push(format!(
                    "NIC {nic}: its busiest subflows hash to queues {carried:?}, its own counters \
                     show {busy:?} busy"
                ));
            }
        }
        wrong
    }

    /// The round as a table: per NIC, then per connection and subflow.
    pub fn render(&self, numa: &NumaGuest) -> String {
        let mut out = format!(
            "{} ({:.0} Mbit/s at the server)\n",
            self.title,
            self.received_bps / 1e6
        );
        for (i, nic) in numa.nics.iter().enumerate() {
            let counters = self.counters.nics.get(i);
            let _ = writeln!(
                out,
                "  NIC {i} {} ({}): {} subflows, rx_bytes {:.1} MB, rx packets {}",
                nic.name,
                nic.guest_ip,
                self.through(i),
                counters.map_or(0, |c| c.rx_bytes) as f64 / 1e6,
                counters.map_or(String::new(), |c| truth::queue_counts(&c.rx_queue_packets)),
            );
        }
        let cpus: BTreeSet<u32> = self.subflows.iter().filter_map(|s| s.cpu).collect();
        let _ = writeln!(
            out,
            "  {} connections, distinct (NIC, CPU) pairs {}/{} subflows, CPUs {}",
            self.connections().len(),
            self.pairs().len(),
            self.subflows.len(),
            cpus.len(),
        );
        let asked = numa.nics.first().map(|n| IpAddr::V4(n.guest_ip));
        let other: Vec<String> = self
            .peers_seen
            .iter()
            .filter(|(_, peer)| Some(*peer) != asked)
            .map(|(port, peer)| format!("{port}→{peer}"))
            .collect();
        let _ = writeln!(
            out,
            "  getpeername() at the client: {} of {} streams the address asked for; others {other:?}",
            self.peers_seen.len() - other.len(),
            self.peers_seen.len(),
        );
        if self.without_token > 0 {
            let _ = writeln!(
                out,
                "  {} sightings of a subflow without its token in {} listings",
                self.without_token, self.listings
            );
        }
        let opt = |v: Option<u32>| v.map_or_else(|| "-".into(), |v| v.to_string());
        for (token, subflows) in self.connections() {
            for s in subflows {
                let _ = writeln!(
                    out,
                    "  token {token:>8}  {:<21} → {:<19} NIC {:>1} queue {:>2} CPU {:>2} {:>10} bytes",
                    s.remote.to_string(),
                    s.local.to_string(),
                    s.nic.map_or_else(|| "-".into(), |n| n.to_string()),
                    opt(s.queue),
                    opt(s.cpu),
                    s.bytes
                );
            }
        }
        out
    }
}

/// How a round runs.
#[derive(Debug, Clone, Copy)]
pub struct MptcpSpec<'a> {
    pub title: &'a str,
    /// Under `srap exec` in the sender agent's cgroup, or the kernel's
    /// ports.
    pub steered: bool,
    /// The server's port (a fresh one per round).
    pub port: u16,
    /// iperf3's data streams: `streams + 1` MPTCP connections with the
    /// control connection.
    pub streams: usize,
    pub seconds: u64,
}

/// One round as `spec` says, judged by the guest.
pub fn round(lab: &mut TwoNicReceiver, spec: &MptcpSpec<'_>) -> anyhow::Result<MptcpRound> {
    let port = spec.port;
    let file = format!("/tmp/iperf3-{port}.json");
    lab.numa.guest.run(&format!(
        "rm -f {file}; LD_PRELOAD={MPTCP_WRAP} iperf3 -s -1 -J -p {port} > {file} 2>&1 &"
    ))?;
    let listening = format!("netstat -tln | grep -q ':{port} '");
    if !lab
        .numa
        .guest
        .poll_until(&listening, Duration::from_secs(30))?
    {
        bail!(
            "the MPTCP iperf3 -s did not listen on port {port} in the guest: {}",
            lab.numa.guest.read_or_why(&file)
        );
    }
    if spec.steered {
        lab.wait_listener_known(port, lab.numa.nics.len())?;
    }
    let before = lab.numa.counters()?;
    let listed = run_client(lab, spec)?;
    let done = format!("! netstat -tln | grep -q ':{port} ' && grep -q '\"end\"' {file}");
    if !lab.numa.guest.poll_until(&done, SERVER_END)? {
        bail!(
            "the guest's MPTCP iperf3 wrote no result for port {port} within {SERVER_END:?} \
             after the client ended; its output:\n{}",
            lab.numa.guest.read_or_why(&file)
        );
    }
    let after = lab.numa.counters()?;
    let server = lab.numa.guest.read(&format!("cat {file}"))?;
    let peers_seen = truth::iperf3_accepted_streams(&listed.client)
        .context("the client's iperf3 -J")?
        .into_iter()
        .map(|s| (s.local_port, s.remote_host))
        .collect();
    Ok(MptcpRound {
        title: spec.title.into(),
        subflows: place(lab, listed.subflows)?,
        without_token: listed.without_token,
        listings: listed.listings,
        counters: after.since(&before),
        received_bps: truth::iperf3_received_bps(&server)?,
        peers_seen,
    })
}

/// What [`run_client`] saw.
struct Listed {
    /// Each subflow with the most bytes and the token seen for it.
    subflows: Vec<SsSubflow>,
    /// Sightings of a subflow without its MPTCP token, and listings.
    without_token: usize,
    listings: usize,
    /// The client's `iperf3 -J` output.
    client: String,
}

/// Runs `mptcpize run iperf3 -c` to its end, listing the guest's subflows
/// on the port all the while.
fn run_client(lab: &mut TwoNicReceiver, spec: &MptcpSpec<'_>) -> anyhow::Result<Listed> {
    let run = ClientRun {
        program: "mptcpize run iperf3",
        port: spec.port,
        streams: spec.streams,
        seconds: spec.seconds,
        steered: spec.steered,
    };
    let mut client = lab.spawn_client(&run)?;
    let listing = format!("ss -Htni state established '( sport = :{} )'", spec.port);
    let mut seen: BTreeMap<(SocketAddr, SocketAddr), SsSubflow> = BTreeMap::new();
    let (mut without_token, mut listings) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(spec.seconds + 60);
    while !client.exited() && Instant::now() < deadline {
        listings += 1;
        for s in parse_ss_subflows(&lab.numa.guest.read(&listing)?) {
            without_token += usize::from(s.token.is_none());
            seen.entry((s.local, s.remote))
                .and_modify(|old| old.update(&s))
                .or_insert(s);
        }
    }
    let json = client.finish(Duration::from_secs(5))?;
    Ok(Listed {
        subflows: seen.into_values().collect(),
        without_token,
        listings,
        client: json,
    })
}

/// Each listed subflow with its NIC, queue and CPU.
fn place(lab: &TwoNicReceiver, listed: Vec<SsSubflow>) -> anyhow::Result<Vec<GuestSubflow>> {
    listed
        .into_iter()
        .map(|s| {
            let nic = lab
                .numa
                .nics
                .iter()
                .position(|n| IpAddr::V4(n.guest_ip) == s.local.ip());
            let queue = match nic.and_then(|i| lab.models.get(i)) {
                Some(model) => {
                    let tuple = FlowTuple::new(
                        s.remote.ip(),
                        s.remote.port(),
                        s.local.ip(),
                        s.local.port(),
                    )?;
                    Some(model.landing(&tuple).queue)
                }
                None => None,
            };
            let cpu = nic
                .zip(queue)
                .and_then(|(i, q)| lab.numa.nics.get(i)?.queue_cpus.get(q as usize).copied());
            Ok(GuestSubflow {
                local: s.local,
                remote: s.remote,
                token: s.token,
                bytes: s.bytes,
                nic,
                queue,
                cpu,
            })
        })
        .collect()
}

/// One socket of `ss -Htni state established`: its tuple, the local token
/// of its MPTCP connection if it is a subflow, and `bytes_received`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SsSubflow {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub token: Option<String>,
    pub bytes: u64,
}

impl SsSubflow {
    /// Takes a later listing of the same subflow: its bytes, and its token
    /// unless that listing lacked one (a token never changes).
    pub fn update(&mut self, later: &Self) {
        self.bytes = self.bytes.max(later.bytes);
        if later.token.is_some() {
            self.token.clone_from(&later.token);
        }
    }
}

/// `ss -Htni state established …` as iproute2 prints it: a line per
/// socket (`Recv-Q Send-Q Local Peer`), then its details, where an MPTCP
/// subflow's `tcp-ulp-mptcp` part says `token:REMOTE(id:N)/LOCAL(id:M)`.
/// IPv4-mapped addresses are read as the IPv4 ones they are.
pub fn parse_ss_subflows(text: &str) -> Vec<SsSubflow> {
    let mut sockets: Vec<SsSubflow> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [_, _, local, remote, ..] = words[..]
            && let (Ok(local), Ok(remote)) =
                (local.parse::<SocketAddr>(), remote.parse::<SocketAddr>())
        {
            // A dual-stack listener's subflows are IPv4 tuples that `ss`
            // prints mapped (`[::ffff:10.0.0.2]:5601`): the NIC saw IPv4.
            let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
            sockets.push(SsSubflow {
                local: canonical(local),
                remote: canonical(remote),
                token: None,
                bytes: 0,
            });
            continue;
        }
        let Some(socket) = sockets.last_mut() else {
            continue;
        };
        for word in &words {
            if let Some(bytes) = word.strip_prefix("bytes_received:") {
                socket.bytes = bytes.parse().unwrap_or(socket.bytes);
            }
            if let Some((_, local)) = word.strip_prefix("token:").and_then(|t| t.split_once('/'))
                && let Some((token, _)) = local.split_once('(')
            {
                socket.token = Some(token.to_owned());
            }
        }
    }
    sockets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_lists_subflows_with_their_local_token_and_bytes() {
        let text = "0      0      10.199.3.2:5601   10.199.3.1:40001\n\
             \t cubic wscale:7,7 rto:204 bytes_received:123456 segs_in:90 tcp-ulp-mptcp flags:Mmec token:0000(id:0)/9a8b7c6d(id:0) seq:1 sfseq:1 ssnoff:2 maplen:3\n\
             0      0      [::ffff:10.199.4.2]:5601   [::ffff:10.199.4.1]:50002\n\
             \t cubic bytes_received:77 tcp-ulp-mptcp flags:Jjecv token:1111(id:2)/9a8b7c6d(id:2) seq:1\n\
             0      0      10.199.3.2:5601   10.199.3.1:40003\n\
             \t cubic bytes_received:5\n";
        let got = parse_ss_subflows(text);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].token.as_deref(), Some("9a8b7c6d"));
        assert_eq!(got[0].bytes, 123_456);
        assert_eq!(got[1].remote, "10.199.4.1:50002".parse().expect("addr"));
        assert_eq!(got[1].token.as_deref(), Some("9a8b7c6d"));
        assert_eq!((got[2].token.as_deref(), got[2].bytes), (None, 5));
    }

    fn subflow(token: &str, nic: usize, cpu: u32) -> GuestSubflow {
        GuestSubflow {
            local: "10.0.0.2:5601".parse().expect("addr"),
            remote: SocketAddr::new("10.0.0.1".parse().expect("ip"), 40000 + cpu as u16),
            token: Some(token.into()),
            bytes: 1000,
            nic: Some(nic),
            queue: Some(cpu),
            cpu: Some(cpu),
        }
    }

    #[test]
    fn a_connection_without_a_subflow_on_each_nic_is_named() {
        let round = |subflows| MptcpRound {
            title: "t".into(),
            subflows,
            counters: Counters::default(),
            received_bps: 0.0,
            peers_seen: Vec::new(),
            without_token: 0,
            listings: 0,
        };
        let good = round(vec![subflow("a", 0, 0), subflow("a", 1, 8)]);
        assert!(good.judge_connections(1, 2).is_empty());
        assert_eq!(good.pairs().len(), 2);
        let bad = round(vec![
            subflow("a", 0, 0),
            subflow("a", 0, 1),
            subflow("b", 1, 8),
        ]);
        let wrong = bad.judge_connections(2, 2);
        assert_eq!(wrong.len(), 2, "{wrong:?}");
        assert!(
            bad.judge_connections(3, 2)
                .iter()
                .any(|w| w.contains("not 3"))
        );
    }
}
