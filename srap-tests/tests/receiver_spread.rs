//! The connect hook spreading a transfer over the receiver's NICs
//! (`--receiver-nics spread`), on a real kernel: a receiver
//! namespace reached by two veth links on two subnets, its agent serving
//! both (`--iface` twice), the sender agent following it with the first
//! address as the one applications ask for.
//!
//! * `spread`, a server on the wildcard address: 16 flows to the first
//!   address split 8/8 over the links, judged by the receiver links' own
//!   `rx_bytes` (the kernel's count, not SRAP's) and by the addresses the
//!   server accepted them on; the 16 accepted tuples sit on 16 distinct
//!   (NIC, CPU) pairs by the RSS model's hash; every client's
//!   `getpeername()` is the address it asked for; the hook counted 8
//!   `dest_spread`. The same over IPv6: the application asks for the
//!   first link's IPv6 address, the server listens on a dual-stack `[::]`,
//!   and `connect6` spreads over the IPv6 addresses alone.
//! * `asked`, side by side: the kernel's choice, all 16 on the first link.
//! * `spread`, a server bound to the first address only: no flow moved.
//! * `spread`, the second link dropping SYNs (an nft rule in the receiver
//!   namespace) while the receiver agent still reports the listener on
//!   both: the first unanswered SYN marks the second address within about
//!   1 s, every connect after it goes to the asked address (by the
//!   server's accepted addresses and the links' `rx_bytes`) and none
//!   fails; the connects sent there before wait for the kernel's SYN
//!   retransmits and connect once the rule is lifted.
//!
//! The veth behind the second link has no RSS: both addresses are planned
//! with the receiver's first description (the embedded one), each on its
//! own binder row, so a flow's slot is a (NIC, CPU) pair. Everything lives
//! in the test's namespaces, deleted on drop.

use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    ops::ControlFlow,
    time::Duration,
};

use srap_common::{
    binder::event,
    rss::{RssModel, embedded_default},
};
use srap_status::{SenderStatus, sender::ReceiverRow};
use srap_tests::{
    NetNs, TwoHosts, VethEnd, built_binary,
    flows::{Accepted, Sink, listen_deep},
    harness::{ReceiverAgent, SenderAgent, SenderOpts, landings, poll_until},
    require_privileged,
    subnet::Subnet,
    test_workload::Workload,
    two_links,
};

/// The service port.
const DPORT: u16 = 5201;
const TIMEOUT: Duration = Duration::from_secs(20);
/// Flows per transfer.
const FLOWS: usize = 16;
/// What each flow sends, in KiB.
const KIB: u32 = 256;

/// Two namespaces, two links, the receiver agent serving both receiver
/// ends and the sender agent following it.
struct TwoNicReceiver {
    /// The family of the addresses applications ask for and the spread
    /// rows hold.
    v6: bool,
    sender: SenderAgent,
    _receiver: ReceiverAgent,
    far: VethEnd,
    hosts: TwoHosts,
    /// Dropped last: the second link's addresses.
    _second: Subnet,
}

impl TwoNicReceiver {
    /// Everything up, the sender under `--receiver-nics mode`.
    fn start(mode: &str) -> Self {
        Self::of_family(mode, false)
    }

    /// [`TwoNicReceiver::start`], with applications asking for the
    /// receiver's IPv6 address when `v6` (both links then carry IPv6).
    fn of_family(mode: &str, v6: bool) -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
        let (_near, far) = hosts
            .second_link_of(&second, v6)
            .expect("a second veth link");
        let opts = two_links::receiver_opts(&hosts, &far);
        let receiver = ReceiverAgent::start(&hosts.receiver, opts).expect("the receiver agent");
        let opts = SenderOpts::new(built_binary("srap-agent"))
            .peer(receiver.peer())
            .args([
                "--receiver".to_owned(),
                hosts.receiver_end.ip(v6).to_string(),
                "--receiver-nics".to_owned(),
                mode.to_owned(),
            ]);
        let mut sender = SenderAgent::new(&hosts.sender, opts).expect("a sender agent");
        sender.launch().expect("the sender agent steers");
        Self {
            v6,
            sender,
            _receiver: receiver,
            far,
            hosts,
            _second: second,
        }
    }

    /// The address applications ask for (the first link's) and the
    /// second link's.
    fn addrs(&self) -> [IpAddr; 2] {
        [self.hosts.receiver_end.ip(self.v6), self.far.ip(self.v6)]
    }

    /// What a server on [`TwoNicReceiver::wildcard`] accepts on: both
    /// links' addresses of the family asked for, and under IPv6 (a
    /// dual-stack `[::]`) their IPv4 ones too.
    fn wildcard_accepts(&self) -> Vec<IpAddr> {
        let mut all = self.addrs().to_vec();
        if self.v6 {
            all.extend([self.hosts.receiver_end.ip(false), self.far.ip(false)]);
        }
        all
    }

    /// The wildcard address of the family asked for.
    fn wildcard(&self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        }
    }

    /// A server of the test's own on `ip` port [`DPORT`] in the receiver
    /// namespace, accepting on a thread.
    fn serve(&self, ip: IpAddr) -> Sink {
        let addr = SocketAddr::new(ip, DPORT);
        let listener = self
            .hosts
            .receiver
            .run(move || listen_deep(addr))
            .expect("receiver netns")
            .expect("listen");
        Sink::start(listener)
    }

    /// The sender's row of the receiver, once `done` accepts it.
    fn receiver_row(&self, what: &str, done: impl Fn(&ReceiverRow) -> bool) -> ReceiverRow {
        let mut last = None;
        let found = poll_until(TIMEOUT, Duration::from_millis(100), || {
            let status = self.sender.status().expect("the sender's status");
            match status.receivers.into_iter().next() {
                Some(row) if done(&row) => ControlFlow::Break(row),
                row => {
                    last = row;
                    ControlFlow::Continue(())
                }
            }
        });
        found.unwrap_or_else(|_| panic!("{what} within {TIMEOUT:?}; last: {last:#?}"))
    }

    /// Waits until the sender knows [`DPORT`] is accepted on `accepting`
    /// and has planned `planned` addresses of the receiver.
    fn await_port(&self, accepting: &[IpAddr], planned: usize) {
        let want: BTreeSet<IpAddr> = accepting.iter().copied().collect();
        self.receiver_row("the port's listener and the planned addresses", |r| {
            r.addresses.len() == planned
                && r.ports.iter().any(|p| {
                    p.port == DPORT && p.addrs.iter().copied().collect::<BTreeSet<_>>() == want
                })
        });
    }

    /// The receiver links' `rx_bytes`, first then second.
    fn rx_bytes(&self) -> [u64; 2] {
        let read = |ns: &NetNs, iface: &str| {
            ns.iface_counter(iface, "rx_bytes")
                .expect("reading rx_bytes")
        };
        [
            read(&self.hosts.receiver, &self.hosts.receiver_end.ifname),
            read(&self.hosts.receiver, &self.far.ifname),
        ]
    }

    /// The sender's status once it lists every flow of a transfer (its
    /// socket hook records each at its handshake), or the last one.
    fn open_flows_status(&self) -> SenderStatus {
        let mut last = None;
        let found = poll_until(TIMEOUT, Duration::from_millis(100), || {
            let status = self.sender.status().expect("the sender's status");
            if status.flows.len() >= FLOWS {
                return ControlFlow::Break(status);
            }
            last = Some(status);
            ControlFlow::Continue(())
        });
        found.unwrap_or_else(|_| last.expect("a status"))
    }

    fn spread_count(&self) -> u64 {
        self.sender
            .stats()
            .expect("binder stats")
            .get(event::DEST_SPREAD)
    }

    /// [`FLOWS`] kept flows of [`KIB`] KiB each to the first address,
    /// from the sender's cgroup; what the server accepted, what each
    /// link received meanwhile, and whether every client's
    /// `getpeername()` was the address it asked for.
    fn transfer(&self, sink: Sink) -> Transfer {
        let asked = SocketAddr::new(self.addrs()[0], DPORT);
        let before = self.rx_bytes();
        let cgroup = self.sender.cgroup().to_path_buf();
        let mut workload = Workload::spawn(&self.hosts.sender, Some(&cgroup), asked);
        let opened = workload.bulk(FLOWS, KIB);
        assert!(
            opened.iter().all(|p| *p != 0),
            "a connect failed: {opened:?}"
        );
        let as_asked = workload.peers_as_asked();
        // Before the server closes: its listener gone, the second address
        // accepts nothing and leaves the plan.
        let status = self.open_flows_status();
        let accepted = sink.finish(Duration::from_millis(500));
        let after = self.rx_bytes();
        workload.finish();
        Transfer {
            accepted,
            rx: [after[0] - before[0], after[1] - before[1]],
            as_asked,
            status,
        }
    }
}

/// One transfer as the receiver and the client saw it.
struct Transfer {
    accepted: Vec<Accepted>,
    /// Bytes each receiver link received during it.
    rx: [u64; 2],
    as_asked: Vec<bool>,
    /// The sender's status while the flows were open.
    status: SenderStatus,
}

impl Transfer {
    /// The accepted flows' client ends by the receiver address they
    /// reached, first then second.
    fn peers_by_addr(&self, addrs: [IpAddr; 2]) -> [Vec<SocketAddr>; 2] {
        addrs.map(|a| {
            self.accepted
                .iter()
                .filter(|f| f.local.ip() == a)
                .map(|f| f.peer)
                .collect()
        })
    }

    fn assert_as_asked(&self) {
        assert_eq!(self.as_asked.len(), FLOWS, "{:?}", self.as_asked);
        assert!(
            self.as_asked.iter().all(|ok| *ok),
            "getpeername() is the address asked for: {:?}",
            self.as_asked
        );
    }
}

/// What one flow's payload is at least on the link it entered.
const FLOW_BYTES: u64 = KIB as u64 * 1024;

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn spread_splits_a_transfer_over_both_nics_on_distinct_cpus() {
    require_privileged("a receiver of two veth links and a spreading sender");
    spread_splits_a_transfer(false);
}

/// As the IPv4 test, the application asking for the receiver's IPv6
/// address and the server on `[::]`: `connect6` spreads as `connect4`
/// does, and `getpeername6` gives the asked address back.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn spread_splits_an_ipv6_transfer_over_both_nics_on_distinct_cpus() {
    require_privileged("a receiver of two IPv6 veth links and a spreading sender");
    spread_splits_a_transfer(true);
}

/// 16 flows to the first address split 8/8 over the links on 16 (NIC,
/// CPU) pairs, each client's `getpeername()` the address asked for, and
/// the sender's status showing both addresses.
fn spread_splits_a_transfer(v6: bool) {
    let setup = TwoNicReceiver::of_family("spread", v6);
    let addrs = setup.addrs();
    let sink = setup.serve(setup.wildcard());
    let accepting = setup.wildcard_accepts();
    setup.await_port(&accepting, accepting.len());
    let spread_before = setup.spread_count();
    let transfer = setup.transfer(sink);
    assert_eq!(transfer.accepted.len(), FLOWS, "{:?}", transfer.accepted);
    let [first, second] = transfer.peers_by_addr(addrs);
    println!(
        "spread: {} flows on {}, {} on {}; rx_bytes {:?}",
        first.len(),
        addrs[0],
        second.len(),
        addrs[1],
        transfer.rx
    );
    assert_eq!((first.len(), second.len()), (8, 8), "8/8 by address");
    let half = FLOWS as u64 / 2 * FLOW_BYTES;
    for (link, bytes) in transfer.rx.iter().enumerate() {
        assert!(
            *bytes >= half && *bytes < half * 3 / 2,
            "link {link} received {bytes} bytes, half the transfer is {half}: {:?}",
            transfer.rx
        );
    }
    // 16 distinct (NIC, CPU) pairs by the model each address is planned
    // with (the receiver's first description: the veth has none).
    let model = RssModel::from_description(&embedded_default()).expect("model");
    let mut pairs = BTreeSet::new();
    for (nic, peers) in [first, second].iter().enumerate() {
        let service = SocketAddr::new(addrs[nic], DPORT);
        for landing in landings(&model, peers, service).expect("landings") {
            pairs.insert((nic, landing.cpu));
        }
    }
    assert_eq!(pairs.len(), FLOWS, "(NIC, CPU) pairs: {pairs:?}");
    transfer.assert_as_asked();
    assert_eq!(
        setup.spread_count() - spread_before,
        8,
        "half the connects were sent to the second address"
    );
    // The sender's status: each moved flow with the address asked for
    // beside the one used, and each address's row its own flows.
    let flows = &transfer.status.flows;
    let moved: Vec<_> = flows.iter().filter(|f| f.asked.is_some()).collect();
    assert_eq!(moved.len(), 8, "{flows:#?}");
    assert!(
        moved
            .iter()
            .all(|f| f.asked == Some(addrs[0]) && f.dst.map(|d| d.ip()) == Some(addrs[1])),
        "{moved:#?}"
    );
    let row = &transfer.status.receivers[0];
    // Under IPv6 the other family's addresses are planned too (a
    // dual-stack server accepts there), with no flows.
    let open: Vec<(Option<IpAddr>, u64)> = row
        .addresses
        .iter()
        .filter(|a| a.addr.is_some_and(|ip| ip.is_ipv6() == v6))
        .map(|a| (a.addr, a.open_flows))
        .collect();
    assert_eq!(
        open,
        [(Some(addrs[0]), 8), (Some(addrs[1]), 8)],
        "flows per receiver NIC's address"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn asked_keeps_the_kernels_choice_of_one_nic() {
    require_privileged("a receiver of two veth links and a sender that keeps the address");
    let setup = TwoNicReceiver::start("asked");
    let addrs = setup.addrs();
    let sink = setup.serve(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    setup.await_port(&addrs, 1);
    let transfer = setup.transfer(sink);
    let [first, second] = transfer.peers_by_addr(addrs);
    println!(
        "asked: {} flows on {}, {} on {}; rx_bytes {:?}",
        first.len(),
        addrs[0],
        second.len(),
        addrs[1],
        transfer.rx
    );
    assert_eq!((first.len(), second.len()), (FLOWS, 0), "all on the first");
    assert!(
        transfer.rx[0] >= FLOWS as u64 * FLOW_BYTES,
        "{:?}",
        transfer.rx
    );
    assert!(transfer.rx[1] < FLOW_BYTES, "{:?}", transfer.rx);
    transfer.assert_as_asked();
    assert_eq!(setup.spread_count(), 0);
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_server_bound_to_one_address_gets_every_flow_there() {
    require_privileged("a receiver of two veth links whose server listens on one");
    let setup = TwoNicReceiver::start("spread");
    let addrs = setup.addrs();
    let sink = setup.serve(addrs[0]);
    // No port is accepted on the second address: it is not planned.
    setup.await_port(&addrs[..1], 1);
    let transfer = setup.transfer(sink);
    let [first, second] = transfer.peers_by_addr(addrs);
    assert_eq!((first.len(), second.len()), (FLOWS, 0), "no flow moved");
    assert!(transfer.rx[1] < FLOW_BYTES, "{:?}", transfer.rx);
    transfer.assert_as_asked();
    assert_eq!(setup.spread_count(), 0, "no connect was sent elsewhere");
}

/// How soon a receiver NIC reported down must leave the spread rows.
const FALLBACK_BUDGET: Duration = Duration::from_secs(1);

impl TwoNicReceiver {
    /// The sender's re-plans for the receiver's NICs so far.
    fn nic_replans(&self) -> usize {
        self.sender
            .log()
            .text()
            .lines()
            .filter(|l| l.contains("replanned for the NICs of"))
            .count()
    }
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_receiver_nic_taken_down_is_left_out_at_once_and_no_connect_fails() {
    require_privileged("a receiver of two veth links, one taken down");
    let setup = TwoNicReceiver::start("spread");
    let addrs = setup.addrs();
    let sink = setup.serve(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    setup.await_port(&addrs, 2);
    let replans = setup.nic_replans();
    let down = std::time::Instant::now();
    setup
        .hosts
        .receiver
        .ip(["link", "set", "dev", &setup.far.ifname, "down"])
        .expect("ip link set down");
    let replanned = poll_until(TIMEOUT, Duration::from_millis(10), || {
        if setup.nic_replans() > replans {
            ControlFlow::Break(down.elapsed())
        } else {
            ControlFlow::Continue(())
        }
    });
    let took = replanned.unwrap_or_else(|_| {
        panic!(
            "no re-plan after the second NIC went down; the sender's log:\n{}",
            setup.sender.log().tail()
        )
    });
    println!("the second NIC's rows left {took:?} after it went down");
    let spread_before = setup.spread_count();
    let transfer = setup.transfer(sink);
    let [first, second] = transfer.peers_by_addr(addrs);
    assert_eq!(
        (first.len(), second.len()),
        (FLOWS, 0),
        "every flow to the address asked for"
    );
    transfer.assert_as_asked();
    assert_eq!(
        setup.spread_count(),
        spread_before,
        "none sent to the NIC down"
    );
    assert!(
        took <= FALLBACK_BUDGET,
        "the NIC down left the rows after {took:?}"
    );
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_listener_gone_from_the_second_address_takes_its_rows_along() {
    require_privileged("a receiver of two veth links whose wildcard listener goes");
    let setup = TwoNicReceiver::start("spread");
    let addrs = setup.addrs();
    let wildcard = setup.serve(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    setup.await_port(&addrs, 2);
    let replans = setup.nic_replans();
    let gone = std::time::Instant::now();
    drop(wildcard.finish(Duration::ZERO));
    let sink = setup.serve(addrs[0]);
    let replanned = poll_until(TIMEOUT, Duration::from_millis(10), || {
        if setup.nic_replans() > replans {
            ControlFlow::Break(gone.elapsed())
        } else {
            ControlFlow::Continue(())
        }
    });
    let took = replanned.unwrap_or_else(|_| {
        panic!(
            "no re-plan after the listener went; the sender's log:\n{}",
            setup.sender.log().tail()
        )
    });
    println!("the second address's rows left {took:?} after its listener went");
    setup.await_port(&addrs[..1], 1);
    let spread_before = setup.spread_count();
    let transfer = setup.transfer(sink);
    let [first, second] = transfer.peers_by_addr(addrs);
    assert_eq!((first.len(), second.len()), (FLOWS, 0), "every flow back");
    transfer.assert_as_asked();
    assert_eq!(setup.spread_count(), spread_before);
    assert!(
        took <= FALLBACK_BUDGET,
        "the listener's rows left after {took:?}"
    );
}

/// The nftables table that drops SYNs on the receiver's second link.
const SYN_DROP_TABLE: &str = "srap_syn_drop";

/// A rule in the receiver namespace that drops every SYN toward
/// [`DPORT`] arriving on one link, counting them: a firewall on the
/// receiver's second NIC, silent (no reset, no ICMP). Removed on drop.
struct SynDrop<'a> {
    ns: &'a NetNs,
}

impl<'a> SynDrop<'a> {
    fn install(ns: &'a NetNs, ifname: &str) -> Self {
        let nft = |args: &[&str]| ns.exec("nft", args).expect("nft in the receiver namespace");
        nft(&["add", "table", "inet", SYN_DROP_TABLE]);
        let guard = Self { ns };
        nft(&[
            "add",
            "chain",
            "inet",
            SYN_DROP_TABLE,
            "in",
            "{",
            "type",
            "filter",
            "hook",
            "prerouting",
            "priority",
            "-300",
            ";",
            "}",
        ]);
        let dport = DPORT.to_string();
        nft(&[
            "add",
            "rule",
            "inet",
            SYN_DROP_TABLE,
            "in",
            "iifname",
            ifname,
            "tcp",
            "dport",
            &dport,
            "tcp",
            "flags",
            "&",
            "(syn|ack)",
            "==",
            "syn",
            "counter",
            "drop",
        ]);
        guard
    }

    /// SYNs dropped so far (the rule's own counter).
    fn dropped(&self) -> u64 {
        let out = self
            .ns
            .exec("nft", ["list", "table", "inet", SYN_DROP_TABLE])
            .expect("nft list");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter in {text}"))
    }
}

impl Drop for SynDrop<'_> {
    fn drop(&mut self) {
        if let Err(err) = self
            .ns
            .exec("nft", ["delete", "table", "inet", SYN_DROP_TABLE])
        {
            eprintln!("cleanup: removing the SYN drop: {err:#}");
        }
    }
}

/// Connects made at once while the second link drops SYNs.
const BURST: usize = 8;

impl TwoNicReceiver {
    fn syns_unanswered(&self) -> u64 {
        self.sender
            .stats()
            .expect("binder stats")
            .get(event::SPREAD_SYN_UNANSWERED)
    }

    /// The sender's marks, once it shows one.
    fn shown_failing(&self) -> Vec<srap_status::sender::SpreadFailingRow> {
        let shown = poll_until(TIMEOUT, Duration::from_millis(100), || {
            let status = self.sender.status().expect("the sender's status");
            if status.spread_failing.is_empty() {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(status.spread_failing)
            }
        });
        shown.unwrap_or_else(|()| {
            panic!(
                "no failing address in the sender's status; its log:\n{}",
                self.sender.log().tail()
            )
        })
    }
}

/// The client ports of `accepted` that reached `addr`.
fn ports_on(accepted: &[Accepted], addr: IpAddr) -> BTreeSet<u16> {
    accepted
        .iter()
        .filter(|f| f.local.ip() == addr)
        .map(|f| f.peer.port())
        .collect()
}

#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_second_nic_that_drops_syns_is_left_after_the_first_unanswered_one() {
    require_privileged("a receiver of two veth links whose second drops SYNs");
    let setup = TwoNicReceiver::start("spread");
    let addrs = setup.addrs();
    let sink = setup.serve(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    setup.await_port(&addrs, 2);
    let asked = SocketAddr::new(addrs[0], DPORT);
    let cgroup = setup.sender.cgroup().to_path_buf();
    let drop_rule = SynDrop::install(&setup.hosts.receiver, &setup.far.ifname);
    let (spread_before, unanswered_before) = (setup.spread_count(), setup.syns_unanswered());

    // Before any SYN went unanswered: half the burst goes to the second
    // address, whose SYNs are dropped; their connects wait.
    let mut first = Workload::spawn(&setup.hosts.sender, Some(&cgroup), asked);
    let sent = std::time::Instant::now();
    first.send(&format!("burst {BURST}"));
    let detected = poll_until(TIMEOUT, Duration::from_millis(10), || {
        if setup.syns_unanswered() > unanswered_before {
            ControlFlow::Break(sent.elapsed())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap_or_else(|()| {
        panic!(
            "no unanswered SYN marked; the sender's log:\n{}",
            setup.sender.log().tail()
        )
    });
    let to_dead = setup.spread_count() - spread_before;

    // After it: every new connect keeps the asked address, none fails.
    let rx_before = setup.rx_bytes();
    let mut second = Workload::spawn(&setup.hosts.sender, Some(&cgroup), asked);
    let after = second.bulk(FLOWS, KIB);
    let rx_after = setup.rx_bytes();
    let spread_after = setup.spread_count() - spread_before;
    let shown = setup.shown_failing();
    let warned = setup
        .sender
        .log()
        .find(|l| l.contains("got no answer to its SYN"));
    let dropped = drop_rule.dropped();

    // The connects sent there before: left to the kernel's own SYN
    // retransmits, which connect them once the path answers again.
    let lifted = sent.elapsed();
    drop(drop_rule);
    let late = first.answer(TIMEOUT);
    let late_took = sent.elapsed();
    let accepted = sink.finish(Duration::from_millis(500));
    second.finish();
    first.finish();

    let on_second = ports_on(&accepted, addrs[1]);
    let on_first = ports_on(&accepted, addrs[0]);
    println!(
        "SYN to {} unanswered: marked {detected:?} after the burst; {to_dead} of {BURST} connects \
         had been sent there ({dropped} SYNs dropped); the rule lifted at {lifted:?}, they \
         connected by {late_took:?}; {} connects after the mark, all to {}; second link rx \
         {} bytes meanwhile",
        addrs[1],
        after.len(),
        addrs[0],
        rx_after[1] - rx_before[1]
    );
    assert!(
        after.iter().all(|p| *p != 0),
        "a connect after the mark failed: {after:?}"
    );
    assert!(
        after.iter().all(|p| on_first.contains(p)),
        "every connect after the mark was accepted on {}: {after:?}, first {on_first:?}",
        addrs[0]
    );
    assert_eq!(
        spread_after, to_dead,
        "no connect was sent to the dead address after the mark"
    );
    assert!(
        rx_after[1] - rx_before[1] < FLOW_BYTES,
        "the second link received {} bytes after the mark",
        rx_after[1] - rx_before[1]
    );
    assert!(
        rx_after[0] - rx_before[0] >= FLOWS as u64 * FLOW_BYTES,
        "{rx_before:?} -> {rx_after:?}"
    );
    assert!(to_dead >= 1, "the burst sent none to the second address");
    assert!(dropped >= to_dead, "{dropped} SYNs dropped, {to_dead} sent");
    assert!(
        detected <= Duration::from_secs(3),
        "marked {detected:?} after the SYN (its first timeout is 1 s)"
    );
    // The late ones: connected, on the address they were sent to.
    assert!(
        late.iter().all(|p| *p != 0),
        "a connect sent before the mark failed: {late:?}"
    );
    let late_on_second = late.iter().filter(|p| on_second.contains(p)).count();
    assert_eq!(
        late_on_second as u64, to_dead,
        "late {late:?}, second {on_second:?}"
    );
    // Said and shown.
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!((shown[0].asked, shown[0].used), (addrs[0], addrs[1]));
    assert!(warned.is_some(), "{}", setup.sender.log().tail());
}
