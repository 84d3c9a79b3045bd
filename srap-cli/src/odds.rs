//! `srap odds`: how often random ephemeral ports put two flows on one receiver
//! CPU — the problem SRAP exists for — by formula and by simulation.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::PathBuf,
};

use anyhow::bail;
use rand::{Rng as _, SeedableRng as _, rngs::StdRng};
use serde::Serialize;
use srap_common::{
    bond,
    odds::{self, TrialStats},
    planner::plan,
    port_range::PortRange,
    rss::{FlowTuple, RssDescription, RssModel, embedded_default},
};

use crate::rss_file;

/// Smallest indirection table the simulated NIC gets (mlx5 and ice use ≥ 128).
const MIN_TABLE_LEN: usize = 128;

#[derive(clap::Args)]
pub struct Args {
    /// Parallel flows.
    #[arg(long)]
    flows: u32,
    /// Receiver CPUs that take flows. Defaults to those --rss reaches.
    #[arg(long)]
    cpus: Option<u32>,
    /// Members of a layer3+4 bond instead of receiver CPUs: how often
    /// random ports split the flows evenly over them (by formula; with
    /// --trials, by the bonding driver's own hash of random ports).
    #[arg(long, conflicts_with_all = ["cpus", "rss"])]
    members: Option<u32>,
    /// Also simulate this many trials with real Toeplitz hashing of random ports.
    #[arg(long)]
    trials: Option<usize>,
    /// Simulate this receiver instead of a NIC with --cpus queues spread
    /// round-robin (`ethtool -X DEV equal N`) over a 128-entry table.
    #[arg(long)]
    rss: Option<PathBuf>,
    /// The kernel's ephemeral port range, which random ports come from.
    #[arg(long, default_value = "32768-60999")]
    ephemeral_range: PortRange,
    /// Seed for the simulation, for repeatable runs.
    #[arg(long)]
    seed: Option<u64>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Simulated {
    trials: usize,
    collision_free_rate: f64,
    mean_busiest: f64,
}

#[derive(Serialize)]
struct Report {
    flows: u32,
    cpus: u32,
    analytic_collision_free: f64,
    analytic_expected_busiest: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_ports: Option<Simulated>,
    #[serde(skip_serializing_if = "Option::is_none")]
    srap_ports: Option<Simulated>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.flows == 0 {
        bail!("--flows must be at least 1");
    }
    if let Some(members) = args.members {
        return bond_odds(args, members);
    }
    let model = match (&args.rss, args.cpus) {
        (Some(path), _) => Some(rss_file::load(Some(path))?),
        (None, Some(cpus)) if args.trials.is_some() => Some(round_robin_nic(cpus)?),
        (None, Some(_)) => None,
        (None, None) => bail!("give --cpus C (or --rss FILE to count the CPUs it reaches)"),
    };
    let cpus = match (args.cpus, &model) {
        (Some(cpus), _) => cpus,
        (None, Some(model)) => u32::try_from(model.reachable_cpus().len())?,
        (None, None) => unreachable!("checked above"),
    };
    let mut report = Report {
        flows: args.flows,
        cpus,
        analytic_collision_free: odds::collision_free(args.flows, cpus)?,
        analytic_expected_busiest: odds::expected_busiest(args.flows, cpus)?,
        kernel_ports: None,
        srap_ports: None,
    };
    if let (Some(trials), Some(model)) = (args.trials, &model) {
        let template = template(0)?;
        let mut rng = match args.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let range = args.ephemeral_range;
        let kernel = odds::simulate(model, &template, args.flows as usize, trials, || {
            rng.random_range(range.start()..=range.end())
        });
        let mut srap = TrialStats::default();
        let planned = plan(model, &template, args.flows as usize, PortRange::DEFAULT)?;
        srap.record(planned.flows.iter().map(|f| f.landing.cpu));
        report.kernel_ports = Some(simulated(&kernel));
        report.srap_ports = Some(simulated(&srap));
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

/// `--members`: the even-split odds over a bond's members.
#[derive(Serialize)]
struct BondReport {
    flows: u32,
    members: u32,
    analytic_even_split: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_ports: Option<BondSimulated>,
}

#[derive(Serialize)]
struct BondSimulated {
    trials: usize,
    even_split_rate: f64,
    mean_busiest: f64,
}

fn bond_odds(args: &Args, members: u32) -> anyhow::Result<()> {
    if !(1..=64).contains(&members) {
        bail!("--members {members}: a bond has 1 to 64 members");
    }
    let mut report = BondReport {
        flows: args.flows,
        members,
        analytic_even_split: bond::even_split(args.flows, members),
        kernel_ports: None,
    };
    if let Some(trials) = args.trials {
        let mut rng = match args.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let range = args.ephemeral_range;
        let (mut even, mut busiest) = (0usize, 0u64);
        for _ in 0..trials {
            let mut per_member = vec![0u32; members as usize];
            for _ in 0..args.flows {
                let tuple = template(rng.random_range(range.start()..=range.end()))?;
                let index = bond::member_index(&tuple, members).unwrap_or_default();
                per_member[index as usize] += 1;
            }
            let most = per_member.iter().copied().max().unwrap_or_default();
            even += usize::from(args.flows.is_multiple_of(members) && most == args.flows / members);
            busiest += u64::from(most);
        }
        report.kernel_ports = Some(BondSimulated {
            trials,
            even_split_rate: even as f64 / trials.max(1) as f64,
            mean_busiest: busiest as f64 / trials.max(1) as f64,
        });
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_bond_text(&report);
    }
    Ok(())
}

/// The flow the simulations vary the source port of.
fn template(sport: u16) -> anyhow::Result<FlowTuple> {
    Ok(FlowTuple::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        sport,
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        5201,
    )?)
}

fn print_bond_text(r: &BondReport) {
    println!(
        "{} flows on {} bond members (xmit_hash_policy layer3+4)",
        r.flows, r.members
    );
    println!(
        "  random ports, formula:  {:>7.2} % split evenly",
        r.analytic_even_split * 100.0
    );
    if let Some(k) = &r.kernel_ports {
        println!(
            "  random ports, {:>6} trials of the bonding driver's hash: {:>7.2} % split evenly, busiest member {:.2} flows",
            k.trials,
            k.even_split_rate * 100.0,
            k.mean_busiest
        );
    }
}

fn simulated(stats: &TrialStats) -> Simulated {
    Simulated {
        trials: stats.trials,
        collision_free_rate: stats.collision_free_rate(),
        mean_busiest: stats.mean_busiest(),
    }
}

/// A NIC with `cpus` queues, one per CPU, spread round-robin over the table.
fn round_robin_nic(cpus: u32) -> anyhow::Result<RssModel> {
    if cpus == 0 {
        bail!("--cpus must be at least 1");
    }
    let len = (cpus as usize).next_power_of_two().max(MIN_TABLE_LEN);
    let desc = RssDescription {
        indir: (0..len as u32).map(|i| i % cpus).collect(),
        queue_cpu: Some((0..cpus).collect()),
        ..embedded_default()
    };
    Ok(RssModel::from_description(&desc)?)
}

fn print_text(r: &Report) {
    println!("{} flows on {} receiver CPUs", r.flows, r.cpus);
    println!(
        "  random ports, formula:  {:>7.2} % collision-free, busiest CPU {:.2} flows on average",
        r.analytic_collision_free * 100.0,
        r.analytic_expected_busiest
    );
    if let Some(k) = &r.kernel_ports {
        println!(
            "  random ports, {:>6} trials of Toeplitz hashing: {:>7.2} % collision-free, busiest CPU {:.2} flows",
            k.trials,
            k.collision_free_rate * 100.0,
            k.mean_busiest
        );
    }
    if let Some(s) = &r.srap_ports {
        println!(
            "  SRAP-planned ports:     {:>7.2} % collision-free, busiest CPU {:.2} flows",
            s.collision_free_rate * 100.0,
            s.mean_busiest
        );
    }
}
