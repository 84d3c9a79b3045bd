//! What the binder costs a connection: one TCP connect() + accept() + close
//! over a veth between two namespaces, without the binder and with it
//! attached toward a 4-CPU and a 512-CPU receiver (same run, same sockets,
//! same veth). Goals: under 1 µs added per connect, ≤ 1.10× baseline, and
//! no growth with the slot count (the slot choice reads one bitmap word per
//! 64 slots, never every slot). Then the baseline and the 4-slot binder
//! again with every other core kept busy by a spinning thread (report-only:
//! what a connect costs on a loaded host). Then each `--steer` mode toward
//! a 32-CPU receiver from a host with a 16-CPU NIC: `remote`, `local` and
//! `both` (goal: `both` adds at most 1.2× what `remote` adds), and
//! `remote` and `both` again with every core streaming through memory, as
//! on a host moving data (report-only). Last, this host's NICs: connects
//! to an address reached by two links, from a binder choosing no NIC
//! (`--local-nics route`) and one taking them in turn (`balance`), with
//! the connect hook's own run time per call, beside a bare connect hook
//! that only binds a port the way the binder's does (the kernel's bind,
//! which `connect()` makes itself without a hook): what the binder's hook
//! spends beyond that bind is held under 1 µs. Then each feature alone
//! beside the default binder, the bare hook and the kernel's autobind
//! ([`connect_accept_features`]), and the same on a host whose every port
//! is in TIME_WAIT ([`connect_accept_churn`]).
//!
//! The settings take turns: each binder is attached to a cgroup of its own
//! for the whole run, and every sample criterion takes, of any setting, is
//! one round in which this process joins each setting's cgroup in turn and
//! times the same number of connects there ([`Rounds`]), each round
//! starting one setting later than the last. Criterion reports
//! each setting's own samples; the bench also pairs the settings round by
//! round (the median of each setting's difference to the baseline of the
//! same round) and writes them to `<target>/criterion/paired.json` as
//! `connect_paired/*` means, which `cargo xtask bench` holds to the goals:
//! a machine whose load drifts (other builds on the other core) shifts a
//! round's settings alike, so the paired figure holds where the plain
//! means, taken seconds apart, do not.
//!
//! Needs root (namespaces, cgroups, bpffs): elsewhere it prints SKIP and
//! measures nothing. The process goes back to its own cgroup at the end.

use std::{
    cell::RefCell,
    fs::File,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::Array,
    programs::{CgroupAttachMode, CgroupSockAddr},
};
use criterion::{Criterion, criterion_group, criterion_main};
use srap_common::{
    binder::{
        BARE_BIND_MAP, BARE_CONNECT4_PROGRAM, BinderSizes, CLOSE_PROGRAM, CONNECT4_PROGRAM,
        RELEASE_PROGRAM, bare_bind,
    },
    rss::{End, RssDescription, RssModel, embedded_default},
};
use srap_daemon::sender::{
    self, SenderOptions,
    ends::{LocalNicsPolicy, LocalPlacement, PlacedEnds, SourceRules},
    local::nics::{GivenNic, NicSettings},
    local_end,
};
use srap_harness::InCgroup;
use srap_tests::{
    NetNs, TwoHosts, cgroup::CgroupDir, privileged_or_skip, subnet::Subnet, unique_name,
};

/// Closes with RST (SO_LINGER 0): no TIME_WAIT, so steered ports are free
/// again at once and every iteration measures the same path.
fn close_now(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
}

fn round_trip(listener: &TcpListener, server: SocketAddr) {
    let client = TcpStream::connect(server).expect("connect");
    let (accepted, _) = listener.accept().expect("accept");
    close_now(client);
    drop(accepted);
}

/// A connection closed by the client first, as a connection-per-object
/// workload closes it: the client's end stays in TIME_WAIT for 60 s, its
/// tuple taken until then (or until a connect reuses it).
fn round_trip_leaving_time_wait(listener: &TcpListener, server: SocketAddr) {
    let client = TcpStream::connect(server).expect("connect");
    let (accepted, _) = listener.accept().expect("accept");
    drop(client);
    drop(accepted);
}

/// Settings measured in turns: every sample is one round, in which this
/// process joins each setting's cgroup and times the same number of
/// connects there; the round's figure for the asking setting is returned,
/// and every setting's is logged for the pairing.
struct Rounds<'a> {
    turns: Vec<Turn<'a>>,
    /// Nanoseconds per connect of each setting, round by round.
    log: Vec<Vec<f64>>,
    /// One connection, as the group makes it ([`round_trip`] or
    /// [`round_trip_leaving_time_wait`]).
    trip: fn(&TcpListener, SocketAddr),
}

/// Where one setting's connects run: its cgroup, the listener they reach,
/// and, for settings that must not share ports, a namespace of its own.
struct Turn<'a> {
    cgroup: &'a Path,
    /// Entered for the turn (`None`: where the bench thread already is).
    netns: Option<&'a NetNs>,
    listener: &'a TcpListener,
    server: SocketAddr,
}

impl<'a> Rounds<'a> {
    /// Every setting connecting to one listener from where the bench
    /// thread is.
    fn new(
        cgroups: Vec<&'a Path>,
        listener: &'a TcpListener,
        server: SocketAddr,
        trip: fn(&TcpListener, SocketAddr),
    ) -> Self {
        let turns = cgroups
            .into_iter()
            .map(|cgroup| Turn {
                cgroup,
                netns: None,
                listener,
                server,
            })
            .collect();
        Self::with_turns(turns, trip)
    }

    fn with_turns(turns: Vec<Turn<'a>>, trip: fn(&TcpListener, SocketAddr)) -> Self {
        let log = turns.iter().map(|_| Vec::new()).collect();
        Self { turns, log, trip }
    }

    /// One round of `iters` connects per setting; the time of `setting`'s.
    /// Each round starts one setting later than the last, so every setting
    /// runs in every place of the order equally often: no setting's figure
    /// depends on which one ran just before it (whose sockets, ports and
    /// map rows are what the caches hold when it starts).
    fn sample(&mut self, setting: usize, iters: u64) -> Duration {
        let mut asked = Duration::ZERO;
        let settings = self.turns.len();
        let round = self.log[0].len();
        for s in (0..settings).map(|i| (i + round) % settings) {
            let turn = &self.turns[s];
            let entered = turn
                .netns
                .map(|ns| ns.enter().expect("enter the setting's netns"));
            let joined = InCgroup::enter(turn.cgroup).expect("join the setting's cgroup");
            let started = Instant::now();
            for _ in 0..iters {
                (self.trip)(turn.listener, turn.server);
            }
            let took = started.elapsed();
            drop(joined);
            drop(entered);
            self.log[s].push(took.as_nanos() as f64 / iters.max(1) as f64);
            if s == setting {
                asked = took;
            }
        }
        asked
    }

    /// Per setting: the baseline's median, plus the median over rounds of
    /// the setting's difference to the baseline of the same round.
    fn paired(&self) -> Vec<f64> {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let baseline = median(self.log[0].clone());
        self.log
            .iter()
            .map(|times| {
                let added = times.iter().zip(&self.log[0]).map(|(t, b)| t - b).collect();
                baseline + median(added)
            })
            .collect()
    }
}

/// Writes `(id, mean ns)` pairs to `<target>/criterion/paired.json`, where
/// `cargo xtask bench` reads them with criterion's results.
fn write_paired(figures: &[(String, f64)]) {
    write_figures("paired.json", figures);
}

/// Writes `(id, value)` pairs to `<target>/criterion/<file>`.
fn write_figures(file: &str, figures: &[(String, f64)]) {
    // The bench runs as <target>/release/deps/connect-<hash>.
    let Some(target) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
    else {
        return;
    };
    let path = target.join("criterion").join(file);
    let map: serde_json::Map<String, serde_json::Value> = figures
        .iter()
        .map(|(id, ns)| (id.clone(), serde_json::json!(ns)))
        .collect();
    let written = std::fs::create_dir_all(target.join("criterion")).and_then(|()| {
        let text = serde_json::to_string_pretty(&map).map_err(std::io::Error::other)?;
        std::fs::write(&path, text)
    });
    match written {
        Ok(()) => eprintln!("paired figures: {}", path.display()),
        Err(err) => eprintln!("writing {}: {err}", path.display()),
    }
}

/// Runs `names` (settings, baseline first) in turns as criterion group
/// `group`, each connection a [`round_trip`]; returns their paired figures
/// as `paired_group/name`.
fn bench_in_turns(
    c: &mut Criterion,
    group: &str,
    names: &[&str],
    cgroups: Vec<&Path>,
    listener: &TcpListener,
    server: SocketAddr,
) -> Vec<(String, f64)> {
    let rounds = Rounds::new(cgroups, listener, server, round_trip);
    bench_rounds(c, group, names, rounds)
}

/// [`bench_in_turns`] over the connections `rounds` makes.
fn bench_rounds(
    c: &mut Criterion,
    group: &str,
    names: &[&str],
    rounds: Rounds<'_>,
) -> Vec<(String, f64)> {
    let rounds = RefCell::new(rounds);
    let mut bench = c.benchmark_group(group);
    bench.measurement_time(Duration::from_secs(5));
    for (setting, name) in names.iter().enumerate() {
        bench.bench_function(*name, |b| {
            b.iter_custom(|iters| rounds.borrow_mut().sample(setting, iters))
        });
    }
    bench.finish();
    let paired = rounds.borrow().paired();
    let rounds_run = rounds.borrow().log[0].len();
    let prefix = group.replacen("connect_accept", "connect_paired", 1);
    if rounds_run == 0 {
        // Filtered out: no figure, so `cargo xtask bench` says "not run".
        return Vec::new();
    }
    names
        .iter()
        .zip(paired)
        .map(|(name, ns)| {
            eprintln!("paired ({rounds_run} rounds): {prefix}/{name} {ns:.0} ns");
            (format!("{prefix}/{name}"), ns)
        })
        .collect()
}

/// The binder's programs a connect + close runs, whose run time the bench
/// reports: the connect hook, the release hook, and the `sock_ops` program
/// that watches each steered connection until it closes.
const TIMED_HOOKS: [&str; HOOKS] = [CONNECT4_PROGRAM, RELEASE_PROGRAM, CLOSE_PROGRAM];

/// How many of the binder's programs the bench times.
const HOOKS: usize = 3;

/// A binder attached to a cgroup of its own for a `cpus`-CPU receiver;
/// detached on drop.
struct Attached {
    cgroup: CgroupDir,
    pin_dir: PathBuf,
    label: String,
    /// From its start to its hooks attached (plan, verifier, attach).
    start_ms: u64,
}

impl Attached {
    /// Toward a `cpus`-CPU receiver.
    fn new(cpus: u32, server: SocketAddr) -> Self {
        let model = RssModel::from_description(&receiver_with(cpus)).expect("model");
        let targets = sender::Target::all(&model, &[server.ip()]);
        Self::attach(
            format!("{cpus} slots"),
            targets,
            None,
            LocalPlacement::LeastOccupied,
        )
    }

    /// `--steer steer` toward a 32-CPU receiver (the embedded description:
    /// 128 entries) from a host whose NIC has 16 queues over 128 entries: a
    /// joint map of 7 + 7 bits, 4 ports per pair of entries.
    fn steering(steer: PlacedEnds, server: SocketAddr) -> Self {
        let remote = RssModel::from_description(&embedded_default()).expect("model");
        let local = this_hosts_nic();
        let (targets, local) = match steer {
            PlacedEnds::Remote => (sender::Target::all(&remote, &[server.ip()]), None),
            PlacedEnds::Local => (sender::Target::all(&local, &[server.ip()]), None),
            PlacedEnds::Both => (
                sender::Target::all(&remote, &[server.ip()]),
                Some(std::sync::Arc::new(local)),
            ),
        };
        Self::attach(
            format!("--steer {steer}"),
            targets,
            local,
            LocalPlacement::LeastOccupied,
        )
    }

    /// `--steer local --local-placement reader`: [`Attached::steering`]'s
    /// `local`, each CPU's reader row written as the agent writes it.
    fn reader(server: SocketAddr) -> Self {
        let local = this_hosts_nic();
        let targets = sender::Target::all(&local, &[server.ip()]);
        Self::attach(
            "--steer local --local-placement reader".into(),
            targets,
            None,
            LocalPlacement::Reader,
        )
    }

    fn attach(
        label: String,
        targets: Vec<sender::Target>,
        local: Option<std::sync::Arc<RssModel>>,
        local_placement: LocalPlacement,
    ) -> Self {
        Self::attach_with(
            label,
            targets,
            local,
            local_placement,
            NicSettings::default(),
        )
    }

    fn attach_with(
        label: String,
        targets: Vec<sender::Target>,
        local: Option<std::sync::Arc<RssModel>>,
        local_placement: LocalPlacement,
        nics: NicSettings,
    ) -> Self {
        Self::attach_configured(label, |options| {
            options.targets = targets;
            options.local = local;
            options.local_placement = local_placement;
            options.nics = nics;
        })
    }

    /// Toward a 32-CPU receiver (the embedded description) with the
    /// settings `more` changes from the defaults: one feature's cost.
    fn feature(label: &str, server: SocketAddr, more: impl FnOnce(&mut SenderOptions)) -> Self {
        let remote = RssModel::from_description(&embedded_default()).expect("model");
        let targets = sender::Target::all(&remote, &[server.ip()]);
        Self::attach_configured(label.into(), |options| {
            options.targets = targets;
            more(options);
        })
    }

    /// A binder on a cgroup of its own with the default settings as
    /// `configure` changes them.
    fn attach_configured(label: String, configure: impl FnOnce(&mut SenderOptions)) -> Self {
        let cgroup = CgroupDir::unique().expect("cgroup path");
        cgroup.create().expect("create cgroup");
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/srap-bench-{}", unique_name("p")));
        let mut options = SenderOptions {
            targets: Vec::new(),
            ports: Vec::new(),
            cgroup: Some(cgroup.path().to_path_buf()),
            pin_dir: pin_dir.clone(),
            pacing_rate: None,
            port_range: None,
            local: None,
            local_placement: LocalPlacement::LeastOccupied,
            bonds: Default::default(),
            sizes: BinderSizes::DEFAULT,
            nics: NicSettings::default(),
            receiver_nics: Default::default(),
            mptcp: Default::default(),
            spread: Vec::new(),
        };
        configure(&mut options);
        let mut binder =
            sender::start(&options, srap_daemon::ebpf_object()).expect("attach the binder");
        eprintln!(
            "start ({label}): steering active {} ms after start",
            binder.start.to_steering_ms
        );
        if options.local_placement == LocalPlacement::Reader {
            let cpus = this_hosts_nic().reachable_cpus();
            local_end::apply_reader_rows(&mut binder, &cpus).expect("the reader rows");
        }
        Self {
            cgroup,
            pin_dir,
            label,
            start_ms: binder.start.to_steering_ms,
        }
    }

    /// Each hook's total run time and run count so far (the kernel's
    /// `BPF_STATS_RUN_TIME` accounting), for [`Attached::report`].
    fn hook_totals(&self) -> [(Duration, u64); HOOKS] {
        let layout = sender::PinLayout::new(&self.pin_dir);
        TIMED_HOOKS.map(|name| {
            aya::programs::ProgramInfo::from_pin(layout.program(name))
                .map_or((Duration::ZERO, 0), |info| {
                    (info.run_time(), info.run_count())
                })
        })
    }

    /// connect4's mean run time per call since `since`, by the kernel's
    /// accounting (`None`: it never ran).
    fn connect_ns(&self, since: [(Duration, u64); HOOKS]) -> Option<f64> {
        let (time, count) = self.hook_totals()[0];
        let calls = count.saturating_sub(since[0].1);
        (calls > 0).then(|| time.saturating_sub(since[0].0).as_nanos() as f64 / calls as f64)
    }

    /// What the binder's hooks spent per connect since `since`: each timed
    /// hook's run time over the connect hook's calls (a connect runs its
    /// connect hook once, its release once, the TCP close's as often as
    /// the kernel calls it back). `None`: no connect ran.
    fn hooks_ns(&self, since: [(Duration, u64); HOOKS]) -> Option<f64> {
        let now = self.hook_totals();
        let connects = now[0].1.saturating_sub(since[0].1);
        let total: Duration = now
            .iter()
            .zip(since)
            .map(|((time, _), (time0, _))| time.saturating_sub(time0))
            .sum();
        (connects > 0).then(|| total.as_nanos() as f64 / connects as f64)
    }

    /// The hooks' mean run time per call since `since` (their
    /// [`Attached::hook_totals`] then: the hooks alone, apart from the
    /// noisy wall clock) and the binder's counters.
    fn report(&self, note: &str, since: [(Duration, u64); HOOKS]) {
        let label = format!("{}{note}", self.label);
        let now = self.hook_totals();
        for ((name, (time, count)), (time0, count0)) in TIMED_HOOKS.into_iter().zip(now).zip(since)
        {
            let calls = count.saturating_sub(count0);
            if calls == 0 {
                eprintln!("hook time ({label}): {name} never ran");
                continue;
            }
            let ns = time.saturating_sub(time0).as_nanos() as f64 / calls as f64;
            eprintln!("hook time ({label}): {name} {ns:.0} ns per call over {calls} calls");
        }
        let stats = sender::read_stats(&sender::PinLayout::new(&self.pin_dir));
        eprintln!(
            "binder counters ({label}): {}",
            stats.map_or_else(|e| e.to_string(), |s| s.to_string())
        );
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Err(err) = sender::detach(&self.pin_dir) {
            eprintln!("cleanup: detach {}: {err}", self.pin_dir.display());
        }
    }
}

/// Receiver counts whose pinned maps the bench reports.
const PINNED_RECEIVERS: [u32; 3] = [1, 100, 4096];

/// The kernel memory the binder's maps take for 1, 100 and 4 096
/// receivers (the other settings at their defaults): the formula
/// (`BinderSizes::pinned_bytes`) and the kernel's own count of the maps
/// created and pinned with those sizes (before any plan: no destination
/// yet), written to `<target>/criterion/pinned.json` for `cargo xtask
/// bench`.
fn write_pinned() {
    let cpus = aya::util::nr_cpus().map_or(1, |n| n as u32);
    let mut figures = Vec::new();
    for receivers in PINNED_RECEIVERS {
        let sizes = BinderSizes::for_receivers(receivers);
        let formula = sizes.pinned_bytes(cpus, 0);
        let dir = PathBuf::from(format!("/sys/fs/bpf/srap-bench-{}", unique_name("m")));
        let kernel = sender::create_maps(&dir, srap_daemon::ebpf_object(), &sizes)
            .and_then(|()| sender::pinned_memory(&sender::PinLayout::new(&dir)));
        if let Err(err) = sender::remove_pins(&dir) {
            eprintln!("cleanup: {}: {err}", dir.display());
        }
        let kernel: u64 = match kernel {
            Ok(by_map) => by_map.iter().map(|(_, bytes)| bytes).sum(),
            Err(err) => {
                eprintln!("pinned maps for {receivers} receivers: {err}");
                continue;
            }
        };
        eprintln!(
            "pinned maps, {receivers} receivers ({}): formula {formula} bytes, kernel {kernel}",
            srap_daemon::sender::settings_text(&sizes)
        );
        figures.push((format!("pinned/{receivers}/formula"), formula as f64));
        figures.push((format!("pinned/{receivers}/kernel"), kernel as f64));
    }
    write_figures("pinned.json", &figures);
}

fn connect_accept(c: &mut Criterion) {
    if !privileged_or_skip("connect benchmark") {
        return;
    }
    write_pinned();
    let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
    let (listener, server) = hosts.listen(5201).expect("listen");
    let plain = CgroupDir::unique().expect("cgroup path");
    plain.create().expect("create cgroup");
    // The kernel's accounting of each program's run time, on for the run.
    let stats_on = aya::sys::enable_stats(aya::sys::Stats::RunTime);
    let (binders, steered) = hosts
        .sender
        .run(|| {
            (
                [Attached::new(4, server), Attached::new(512, server)],
                [PlacedEnds::Remote, PlacedEnds::Local, PlacedEnds::Both]
                    .map(|s| Attached::steering(s, server))
                    .into_iter()
                    .chain([Attached::reader(server)])
                    .collect::<Vec<_>>(),
            )
        })
        .expect("sender netns");
    // The client side runs on this thread, in the sender's namespace; it
    // leaves each setting's cgroup for its own after every turn.
    let inside = hosts.sender.enter().expect("enter sender netns");

    let settings = ["baseline", "binder_4_slots", "binder_512_slots"];
    let cgroups = vec![
        plain.path(),
        binders[0].cgroup.path(),
        binders[1].cgroup.path(),
    ];
    let zero = [(Duration::ZERO, 0); HOOKS];
    let mut figures = bench_in_turns(c, "connect_accept", &settings, cgroups, &listener, server);
    if stats_on.is_ok() {
        binders.iter().for_each(|b| b.report("", zero));
    }

    let modes = [
        "baseline",
        "binder_remote",
        "binder_local",
        "binder_both",
        "binder_local_reader",
    ];
    let cgroups = std::iter::once(plain.path())
        .chain(steered.iter().map(|b| b.cgroup.path()))
        .collect();
    figures.extend(bench_in_turns(
        c,
        "connect_accept_steer",
        &modes,
        cgroups,
        &listener,
        server,
    ));
    if stats_on.is_ok() {
        steered.iter().for_each(|b| b.report("", zero));
    }

    // `remote` and `both` again on a host that moves data: every core
    // (the bench's too) streams through memory, so each connect finds
    // little of what the last one left in the caches, and `both`'s extra
    // map rows cost what they cost there (report-only).
    let before = [&steered[0], &steered[2]].map(Attached::hook_totals);
    let streaming = Load::start(Work::Stream);
    let cgroups = vec![
        plain.path(),
        steered[0].cgroup.path(),
        steered[2].cgroup.path(),
    ];
    figures.extend(bench_in_turns(
        c,
        "connect_accept_steer_streaming",
        &["baseline", "binder_remote", "binder_both"],
        cgroups,
        &listener,
        server,
    ));
    drop(streaming);
    if stats_on.is_ok() {
        for (binder, since) in [&steered[0], &steered[2]].into_iter().zip(before) {
            binder.report(", every core streaming memory", since);
        }
    }

    let before = binders[0].hook_totals();
    let spinning = Load::start(Work::Spin);
    let cgroups = vec![plain.path(), binders[0].cgroup.path()];
    figures.extend(bench_in_turns(
        c,
        "connect_accept_busy",
        &settings[..2],
        cgroups,
        &listener,
        server,
    ));
    drop(spinning);
    if stats_on.is_ok() {
        binders[0].report(", other core busy", before);
    }
    drop(inside);
    figures.extend(connect_accept_features(c, &hosts, &plain, stats_on.is_ok()));
    figures.extend(connect_accept_churn(c, &plain));
    figures.extend(connect_accept_nics(c, &hosts, &plain, stats_on.is_ok()));
    write_paired(&figures);
    drop(binders);
    drop(steered);
    drop(plain);
}

/// What each feature costs when it is configured, and what the default
/// costs (every feature off, so neither verified nor run): the same
/// connects toward a 32-CPU receiver from the default binder, one with
/// `--receiver-nics spread`, one with `--mptcp subflows`, one with
/// `--local-nics numa`, beside the kernel's autobind (the baseline) and the
/// bare hook that only binds, in turns. Besides the paired wall clock, the
/// binder's hooks' own run time per connect (connect4, release, the TCP
/// close's where loaded: `connect_hook_feature/*`) go to the figures, and
/// each binder's start to steering (`start/*`, milliseconds) to
/// `<target>/criterion/start.json`.
fn connect_accept_features(
    c: &mut Criterion,
    hosts: &TwoHosts,
    plain: &CgroupDir,
    stats: bool,
) -> Vec<(String, f64)> {
    use sender::{choices::MptcpMode, spread::ReceiverNicsMode};
    let (listener, server) = hosts.listen(5203).expect("listen");
    let binders = hosts
        .sender
        .run(|| {
            [
                Attached::feature("default", server, |_| {}),
                Attached::feature("receiver-nics_spread", server, |o| {
                    o.receiver_nics = ReceiverNicsMode::Spread;
                }),
                Attached::feature("mptcp_subflows", server, |o| o.mptcp = MptcpMode::Subflows),
                Attached::feature("local-nics_numa", server, |o| {
                    o.nics.policy = LocalNicsPolicy::Numa;
                }),
                Attached::feature("steer_both", server, |o| {
                    o.local = Some(std::sync::Arc::new(this_hosts_nic()));
                }),
            ]
        })
        .expect("sender netns");
    let bare = BareBind::attach(hosts.sender_end.ipv4);
    let inside = hosts.sender.enter().expect("enter sender netns");
    let before = binders.each_ref().map(Attached::hook_totals);
    let cgroups = std::iter::once(plain.path())
        .chain(binders.iter().map(|b| b.cgroup.path()))
        .chain([bare.cgroup.path()])
        .collect();
    let names = [
        "baseline",
        "binder_default",
        "binder_spread",
        "binder_mptcp",
        "binder_numa",
        "binder_both",
        "bare_bind",
    ];
    let mut figures = bench_in_turns(
        c,
        "connect_accept_features",
        &names,
        cgroups,
        &listener,
        server,
    );
    drop(inside);
    let starts: Vec<(String, f64)> = binders
        .iter()
        .map(|b| (format!("start/{}", b.label), b.start_ms as f64))
        .collect();
    write_figures("start.json", &starts);
    if stats {
        for (binder, since) in binders.iter().zip(before) {
            binder.report("", since);
            if let Some(ns) = binder.hooks_ns(since) {
                figures.push((format!("connect_hook_feature/{}", binder.label), ns));
            }
        }
        if let Some(ns) = bare.ns_per_call() {
            eprintln!("hook time (bare bind): {BARE_CONNECT4_PROGRAM} {ns:.0} ns per call");
            figures.push(("connect_hook_feature/bare_bind".into(), ns));
        }
    }
    figures
}

/// A host that opens connections faster than TIME_WAIT lets them go (a
/// connection per object, closed by the client first): the kernel's
/// autobind, the default binder and each feature, in turns, each in a pair
/// of namespaces of its own (its TIME_WAIT tuples are its own, as on a host
/// whose connections are all steered or all not), whose sender's every
/// port of `ip_local_port_range` is in TIME_WAIT before the first round
/// and stays so (`tcp_tw_reuse=1` there, as such hosts set it: the
/// kernel's `connect()` then takes over a TIME_WAIT tuple older than a
/// second). The kernel searches the range for a tuple it may take; the
/// binder binds the port it computed and takes its TIME_WAIT tuple over
/// (a bound port may take over a tuple with timestamps of any age). Goals
/// in `cargo xtask bench`: the default's connect ≤ 0.8× the kernel's,
/// every feature's ≤ 1.0×.
fn connect_accept_churn(c: &mut Criterion, plain: &CgroupDir) -> Vec<(String, f64)> {
    use sender::{choices::MptcpMode, spread::ReceiverNicsMode};
    type Configure = fn(&mut SenderOptions);
    let features: [(&str, &str, Configure); 5] = [
        ("binder_default", "default", |_| {}),
        ("binder_spread", "receiver-nics_spread", |o| {
            o.receiver_nics = ReceiverNicsMode::Spread;
        }),
        ("binder_mptcp", "mptcp_subflows", |o| {
            o.mptcp = MptcpMode::Subflows
        }),
        ("binder_numa", "local-nics_numa", |o| {
            o.nics.policy = LocalNicsPolicy::Numa
        }),
        ("binder_both", "steer_both", |o| {
            o.local = Some(std::sync::Arc::new(this_hosts_nic()));
        }),
    ];
    let kernel = ChurnLab::new();
    let labs: Vec<ChurnLab> = features.iter().map(|_| ChurnLab::new()).collect();
    let binders: Vec<Attached> = labs
        .iter()
        .zip(&features)
        .map(|(lab, (_, label, configure))| {
            lab.hosts
                .sender
                .run(|| Attached::feature(label, lab.server, *configure))
                .expect("sender netns")
        })
        .collect();
    let turns: Vec<Turn<'_>> = std::iter::once(kernel.turn(plain.path()))
        .chain(
            labs.iter()
                .zip(&binders)
                .map(|(lab, b)| lab.turn(b.cgroup.path())),
        )
        .collect();
    for turn in &turns {
        fill_with_time_wait(turn);
    }
    let names: Vec<&str> = std::iter::once("baseline")
        .chain(features.iter().map(|(name, _, _)| *name))
        .collect();
    let rounds = Rounds::with_turns(turns, round_trip_leaving_time_wait);
    let figures = bench_rounds(c, "connect_accept_churn", &names, rounds);
    for binder in &binders {
        binder.report(", TIME_WAIT churn", [(Duration::ZERO, 0); HOOKS]);
    }
    figures
}

/// A pair of namespaces for one setting of [`connect_accept_churn`], with
/// `tcp_tw_reuse=1` on the sender and a listener on the receiver.
struct ChurnLab {
    hosts: TwoHosts,
    listener: TcpListener,
    server: SocketAddr,
}

impl ChurnLab {
    fn new() -> Self {
        let hosts = TwoHosts::pair().expect("two namespaces joined by a veth");
        let set = hosts
            .sender
            .exec("sysctl", ["-qw", "net.ipv4.tcp_tw_reuse=1"])
            .expect("sysctl in the sender's namespace");
        assert!(set.status.success(), "sysctl tcp_tw_reuse=1: {set:?}");
        let (listener, server) = hosts.listen(5204).expect("listen");
        Self {
            hosts,
            listener,
            server,
        }
    }

    /// Its setting's turn: `cgroup`, from its sender namespace.
    fn turn<'a>(&'a self, cgroup: &'a Path) -> Turn<'a> {
        Turn {
            cgroup,
            netns: Some(&self.hosts.sender),
            listener: &self.listener,
            server: self.server,
        }
    }
}

/// Puts every port of the turn's `ip_local_port_range` toward its server
/// in TIME_WAIT: as many connections, made as the setting makes them (in
/// its cgroup), each closed by the client.
fn fill_with_time_wait(turn: &Turn<'_>) {
    let entered = turn
        .netns
        .map(|ns| ns.enter().expect("enter the setting's netns"));
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("ip_local_port_range");
    let bounds: Vec<u32> = range
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let ports = bounds
        .get(1)
        .zip(bounds.first())
        .map_or(0, |(hi, lo)| hi - lo + 1);
    let joined = InCgroup::enter(turn.cgroup).expect("join the setting's cgroup");
    let started = Instant::now();
    for _ in 0..ports {
        round_trip_leaving_time_wait(turn.listener, turn.server);
    }
    let took = started.elapsed();
    drop(joined);
    drop(entered);
    eprintln!(
        "TIME_WAIT churn: {ports} ports of {} put in TIME_WAIT in {:.1} s",
        range.trim().replace('\t', "-"),
        took.as_secs_f64()
    );
}

/// This host's NICs: the same connects to a service address
/// reached by two links, from a binder choosing no NIC (`--local-nics
/// route`) and from one taking the links in turn (`balance`: the NIC's
/// table, its address bound), in turns with the baseline. Besides the
/// paired wall clock, each hook's own run time per call (the kernel's
/// `BPF_STATS_RUN_TIME`, over every connect of the group: tens of
/// thousands) goes to the figures as `connect_hook/*`, and so does the
/// bare hook's ([`BareBind`]): `cargo xtask bench` holds what the binder's
/// hook spends beyond that bare bind to 1 µs.
fn connect_accept_nics(
    c: &mut Criterion,
    hosts: &TwoHosts,
    plain: &CgroupDir,
    stats: bool,
) -> Vec<(String, f64)> {
    let links = TwoLinks::new(hosts);
    let binders = hosts
        .sender
        .run(|| [LocalNicsPolicy::Route, LocalNicsPolicy::Balance].map(|p| links.attach(p)))
        .expect("sender netns");
    let bare = BareBind::attach(hosts.sender_end.ipv4);
    let inside = hosts.sender.enter().expect("enter sender netns");
    let before = binders.each_ref().map(Attached::hook_totals);
    let cgroups = vec![
        plain.path(),
        binders[0].cgroup.path(),
        binders[1].cgroup.path(),
        bare.cgroup.path(),
    ];
    let mut figures = bench_in_turns(
        c,
        "connect_accept_nics",
        &["baseline", "binder_route", "binder_balance", "bare_bind"],
        cgroups,
        &links.listener,
        links.service,
    );
    drop(inside);
    if stats {
        for (binder, since) in binders.iter().zip(before) {
            binder.report("", since);
            if let Some(ns) = binder.connect_ns(since) {
                figures.push((format!("connect_hook/{}", binder.label), ns));
            }
        }
        if let Some(ns) = bare.ns_per_call() {
            eprintln!("hook time (bare bind): {BARE_CONNECT4_PROGRAM} {ns:.0} ns per call");
            figures.push(("connect_hook/bare_bind".into(), ns));
        }
    }
    figures
}

/// The bare connect hook ([`BARE_CONNECT4_PROGRAM`]) on a cgroup of its
/// own, binding `source` (link A's address, the one the route's binder
/// binds) and the next port of a rotation: the kernel's bind alone, the
/// part of the binder's hook that `connect()` would do itself without it.
/// Fields drop in order: the object (its program detached) before the
/// cgroup.
struct BareBind {
    ebpf: Ebpf,
    cgroup: CgroupDir,
}

impl BareBind {
    fn attach(source: Ipv4Addr) -> Self {
        let cgroup = CgroupDir::unique().expect("cgroup path");
        cgroup.create().expect("create cgroup");
        let mut ebpf = Ebpf::load(srap_harness::lab_ebpf_object()).expect("load the lab's object");
        let map = ebpf.map_mut(BARE_BIND_MAP).expect("the bare bind map");
        let mut rows: Array<_, u32> = Array::try_from(map).expect("an array");
        rows.set(bare_bind::SOURCE, u32::from_ne_bytes(source.octets()), 0)
            .expect("the bare hook's source address");
        let program: &mut CgroupSockAddr = ebpf
            .program_mut(BARE_CONNECT4_PROGRAM)
            .expect("the bare connect hook")
            .try_into()
            .expect("a cgroup/connect4 program");
        program.load().expect("load the bare connect hook");
        let file = File::open(cgroup.path()).expect("open the cgroup");
        program
            .attach(file, CgroupAttachMode::Single)
            .expect("attach the bare connect hook");
        Self { ebpf, cgroup }
    }

    /// Its mean run time per call so far, by the kernel's accounting
    /// (`None`: it never ran).
    fn ns_per_call(&self) -> Option<f64> {
        let info = self.ebpf.program(BARE_CONNECT4_PROGRAM)?.info().ok()?;
        let calls = info.run_count();
        (calls > 0).then(|| info.run_time().as_nanos() as f64 / calls as f64)
    }
}

/// A service address on the receiver's loopback, reached from the sender
/// by link A (the route) and by a second link B (a worse metric), and a
/// listener on it: the two NICs [`connect_accept_nics`] chooses among.
struct TwoLinks {
    listener: TcpListener,
    service: SocketAddr,
    names: [String; 2],
    _subnets: [Subnet; 2],
}

impl TwoLinks {
    fn new(hosts: &TwoHosts) -> Self {
        let second = Subnet::lease().expect("a second subnet");
        let service_net = Subnet::lease().expect("the service subnet");
        let (near, far) = hosts.second_link(&second).expect("a second veth link");
        let service = service_net.ipv4(1);
        hosts
            .receiver
            .ip(["addr", "add", &format!("{service}/32"), "dev", "lo"])
            .expect("the service address");
        let routes = [
            (
                hosts.receiver_end.ipv4.to_string(),
                &hosts.sender_end.ifname,
                "10",
            ),
            (far.ipv4.to_string(), &near.ifname, "200"),
        ];
        for (via, dev, metric) in routes {
            hosts
                .sender
                .ip([
                    "route",
                    "add",
                    &format!("{service}/32"),
                    "via",
                    &via,
                    "dev",
                    dev,
                    "metric",
                    metric,
                ])
                .expect("a route to the service address");
        }
        let service = SocketAddr::new(service.into(), 5202);
        let listener = hosts
            .receiver
            .run(|| TcpListener::bind(service))
            .expect("receiver netns")
            .expect("listen on the service address");
        Self {
            listener,
            service,
            names: [hosts.sender_end.ifname.clone(), near.ifname],
            _subnets: [second, service_net],
        }
    }

    /// A binder given both links under `policy`, the source rules B needs
    /// installed by it (in the sender's namespace, gone with it).
    fn attach(&self, policy: LocalNicsPolicy) -> Attached {
        let remote = RssModel::from_description(&embedded_default()).expect("model");
        let nics = NicSettings {
            policy,
            given: self
                .names
                .iter()
                .map(|name| GivenNic {
                    name: name.clone(),
                    description: None,
                })
                .collect(),
            source_rules: SourceRules::Install,
        };
        Attached::attach_with(
            format!("local-nics_{policy}"),
            sender::Target::all(&remote, &[self.service.ip()]),
            None,
            LocalPlacement::LeastOccupied,
            nics,
        )
    }
}

/// What the load threads of [`Load`] do.
#[derive(Clone, Copy)]
enum Work {
    /// Spin in registers: the other cores are taken, memory is not.
    Spin,
    /// Write through a buffer far larger than a core's caches, as a host
    /// moving data does: whatever a connect left in a cache is gone by the
    /// next one that time-shares its core.
    Stream,
}

/// Bytes each streaming thread writes through, over and over.
const STREAM_BYTES: usize = 64 << 20;

/// Threads that keep cores busy while they live: [`Work::Spin`] on every
/// core but one, [`Work::Stream`] on every core (one shares the bench's).
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(work: Work) -> Self {
        use std::sync::{Arc, atomic::AtomicBool};
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let count = match work {
            Work::Spin => cores.max(2) - 1,
            Work::Stream => cores,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || match work {
                    Work::Spin => spin(&stop),
                    Work::Stream => stream(&stop),
                })
            })
            .collect();
        Self { stop, threads }
    }
}

fn spin(stop: &std::sync::atomic::AtomicBool) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

fn stream(stop: &std::sync::atomic::AtomicBool) {
    let mut buffer = vec![0u8; STREAM_BYTES];
    let mut pass = 0u8;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        pass = pass.wrapping_add(1);
        buffer.fill(pass);
        std::hint::black_box(&buffer);
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A receiver description with `cpus` CPUs (one queue each).
fn receiver_with(cpus: u32) -> RssDescription {
    let mut description = embedded_default();
    description.indir = (0..1024).map(|i| i % cpus).collect();
    description.queue_cpu = Some((0..cpus).collect());
    description
}

/// A 16-queue NIC of this host (each queue its own CPU, 128 entries), as
/// the binder's model of it faces it: hashing the reverse tuple.
fn this_hosts_nic() -> RssModel {
    let description = RssDescription {
        indir: (0..128).map(|i| i % 16).collect(),
        queue_cpu: Some((0..16).collect()),
        key: "3c:3c:a1:59:07:ee:12:40:88:7d:d0:2b:61:f3:9a:c4:25:5e:b0:13:\
              77:c8:0d:e9:42:6a:1f:95:38:b7:cc:04:5d:e1:8a:26:f0:33:9b:70"
            .into(),
        ..embedded_default()
    };
    RssModel::from_description(&description)
        .expect("model")
        .facing(End::Local)
}

criterion_group!(benches, connect_accept);
criterion_main!(benches);
