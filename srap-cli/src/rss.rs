//! `srap rss show --iface DEV`: the RSS of a local NIC as SRAP sees it, for a
//! person (text) or for an `--rss FILE` (`--json`).

use std::fmt::Write as _;

use std::collections::BTreeSet;

use srap_common::rss::KeySource;
use srap_host::{
    bond::{self, Bond},
    cpulist,
    cpus::{Offer, local_cpus},
    discovery::{self, Discovery, RssSource},
};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: RssCommand,
}

#[derive(clap::Subcommand)]
enum RssCommand {
    /// Discover and print the RSS configuration of a local interface.
    Show(ShowArgs),
}

#[derive(clap::Args)]
struct ShowArgs {
    /// The receiving interface (in this network namespace).
    #[arg(long)]
    iface: String,
    /// Print the RSS description file format (what --rss FILE reads).
    #[arg(long)]
    json: bool,
    /// Show the offer of a receiver agent started with `--cpus LIST` (a
    /// cpulist, `0-7,16-23`): the CPUs it would grant its senders.
    #[arg(long, value_name = "LIST", value_parser = cpulist::parse_some)]
    cpus: Option<BTreeSet<u32>>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        RssCommand::Show(show) => {
            if let Some(bond) = bond::read(&show.iface) {
                if show.json {
                    anyhow::bail!(
                        "{} is a bond: it has no RSS of its own; describe a member \
                         (srap rss show --iface MEMBER --json)",
                        show.iface
                    );
                }
                print!("{}", render_bond(&bond));
                return Ok(());
            }
            // Discovery errors name the interface and what to do already.
            let mut found = discovery::discover(&show.iface)?;
            if show.json {
                println!("{}", found.description.to_json_pretty());
                for warning in &found.warnings {
                    eprintln!("srap: warning: {warning}");
                }
            } else {
                let local = local_cpus(&show.iface).unwrap_or_else(|why| {
                    found
                        .warnings
                        .push(format!("{why}: the offer has one tier"));
                    None
                });
                let offer = Offer {
                    cpus: show.cpus.clone(),
                    local,
                };
                print!("{}", render(&found, &offer));
            }
            Ok(())
        }
    }
}

/// A bond: its mode and policy, its members, and whether the source port
/// decides which member a flow leaves on.
fn render_bond(bond: &Bond) -> String {
    let mut out = format!(
        "{}: a bond, mode {}, xmit_hash_policy {}\n",
        bond.name,
        bond.mode,
        if bond.policy_name.is_empty() {
            "-"
        } else {
            &bond.policy_name
        }
    );
    let members: Vec<String> = bond
        .members
        .iter()
        .map(|m| format!("{} {}", m.name, if m.up { "up" } else { "down" }))
        .collect();
    let _ = writeln!(out, "  members (enslavement order): {}", members.join(", "));
    let usable: Vec<&str> = bond.usable().iter().map(|m| m.name.as_str()).collect();
    let _ = writeln!(
        out,
        "  usable: {} (a flow leaves on usable[hash % {}])",
        usable.join(", "),
        usable.len()
    );
    match bond.why_not_port() {
        None => {
            let _ = writeln!(
                out,
                "  the source port decides each flow's member (srap odds --members {} gives \
                 the odds of an even split); SRAP does not place flows on members yet",
                usable.len()
            );
        }
        Some(why) => {
            let _ = writeln!(out, "  the source port does not decide the member: {why}");
        }
    }
    if let Some(first) = bond.members.first() {
        let _ = writeln!(
            out,
            "  what each member receives is its own RSS: srap rss show --iface {}",
            first.name
        );
    }
    out
}

/// The human-readable report.
fn render(found: &Discovery, offer: &Offer) -> String {
    let desc = &found.description;
    let mut out = String::new();
    let source = match found.source {
        RssSource::Netlink => "ethtool netlink",
        RssSource::Ioctl => "ethtool ioctl",
    };
    let _ = writeln!(
        out,
        "{}: driver {}, read over {source}",
        found.iface,
        found.driver.as_deref().unwrap_or("unknown")
    );
    let key_len = desc.key.split(':').count();
    let _ = writeln!(
        out,
        "  hash       {}, input transform {}",
        desc.hfunc, desc.input_xfrm
    );
    let _ = writeln!(out, "  key        {key_len} bytes {}", desc.key);
    if found.key_source != KeySource::Reported {
        let _ = writeln!(out, "             from {}", found.key_source);
    }
    let _ = writeln!(
        out,
        "  table      {} entries, {}",
        desc.indir.len(),
        summarize_table(&desc.indir)
    );
    let fields: Vec<String> = desc
        .fields
        .known()
        .map(|(flow, letters)| format!("{} {letters}", flow.name()))
        .collect();
    let _ = writeln!(out, "  fields     {}", fields.join(", "));
    let _ = writeln!(out, "  queues     {}", found.queues.len());
    for queue in &found.queues {
        let irq = queue
            .irq
            .map_or_else(|| "no irq".to_owned(), |irq| format!("irq {irq}"));
        let _ = writeln!(
            out,
            "    rx-{:<4} → cpu {:<4} ({irq}, from {})",
            queue.queue, queue.cpu, queue.source
        );
    }
    let _ = writeln!(out, "  offered    {}", offered(found, offer));
    if found.warnings.is_empty() {
        let _ = writeln!(out, "  no warnings");
    } else {
        let _ = writeln!(out, "  warnings");
        for warning in &found.warnings {
            let _ = writeln!(out, "    ! {warning}");
        }
    }
    out
}

/// The CPUs a receiver agent on this NIC grants its senders (`srap-agent
/// receiver`'s offer): every CPU a queue reaches, narrowed by `--cpus`,
/// the NIC's NUMA node first.
fn offered(found: &Discovery, offer: &Offer) -> String {
    let tiers: Vec<Vec<u32>> = offer
        .tiers(&found.description)
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect();
    let list = |t: &Vec<u32>| cpulist::format(t.iter().copied());
    match tiers.as_slice() {
        [] if offer.cpus.is_some() => {
            "no CPUs to senders: --cpus names none a queue reaches".into()
        }
        [] => "no CPUs to senders: this description cannot be modelled".into(),
        [one] if offer.local.is_some() => {
            format!("CPUs {} to senders (all on the NIC's NUMA node)", list(one))
        }
        [one] => format!("CPUs {} to senders", list(one)),
        [near, far, ..] => format!(
            "CPUs {} to senders, the NIC's NUMA node first: {}, then {}",
            cpulist::format(tiers.concat()),
            list(near),
            list(far)
        ),
    }
}

/// One line for a table of hundreds of entries: its repeating pattern when it
/// has one (`ethtool -X DEV equal N` makes one), else entries per queue.
fn summarize_table(indir: &[u32]) -> String {
    let period = (1..=indir.len())
        .find(|&p| {
            indir.len().is_multiple_of(p)
                && indir.iter().enumerate().all(|(i, q)| *q == indir[i % p])
        })
        .unwrap_or(indir.len());
    if period < indir.len() {
        let pattern: Vec<String> = indir[..period.min(16)].iter().map(u32::to_string).collect();
        let ellipsis = if period > 16 { " …" } else { "" };
        return format!(
            "pattern [{}{ellipsis}] × {}",
            pattern.join(" "),
            indir.len() / period
        );
    }
    let mut counts = std::collections::BTreeMap::<u32, usize>::new();
    for queue in indir {
        *counts.entry(*queue).or_default() += 1;
    }
    let per_queue: Vec<String> = counts.iter().map(|(q, n)| format!("q{q}×{n}")).collect();
    format!("entries per queue: {}", per_queue.join(" "))
}

#[cfg(test)]
mod tests {
    use srap_common::rss::{FieldsDescription, RssDescription};
    use srap_host::discovery::placement::{CpuSource, QueuePlacement};

    use super::*;

    #[test]
    fn a_bond_names_its_usable_members_and_whether_the_port_decides() {
        let member = |name: &str, up| srap_host::bond::Member {
            name: name.into(),
            up,
            aggregator: None,
            port_state: None,
        };
        let bond = Bond {
            name: "bond0".into(),
            mode: "balance-xor".into(),
            policy_name: "layer3+4".into(),
            policy: Some(srap_common::bond::HashPolicy::Layer34),
            active_aggregator: None,
            members: vec![
                member("eth1", true),
                member("eth0", false),
                member("eth2", true),
            ],
        };
        let text = render_bond(&bond);
        assert!(
            text.starts_with("bond0: a bond, mode balance-xor, xmit_hash_policy layer3+4\n"),
            "{text}"
        );
        assert!(text.contains("members (enslavement order): eth1 up, eth0 down, eth2 up"));
        assert!(text.contains("usable: eth1, eth2 (a flow leaves on usable[hash % 2])"));
        assert!(
            text.contains("the source port decides each flow's member"),
            "{text}"
        );
        let backup = render_bond(&Bond {
            mode: "active-backup".into(),
            ..bond
        });
        assert!(
            backup.contains("does not decide the member: mode active-backup"),
            "{backup}"
        );
    }

    #[test]
    fn table_summaries() {
        let rr: Vec<u32> = (0..256).map(|i| i % 4).collect();
        assert_eq!(summarize_table(&rr), "pattern [0 1 2 3] × 64");
        assert_eq!(summarize_table(&[0, 0, 1]), "entries per queue: q0×2 q1×1");
        assert_eq!(summarize_table(&[]), "entries per queue: ");
    }

    #[test]
    fn text_report_of_a_fixture() {
        let found = Discovery {
            iface: "enp8s0f0np0".into(),
            driver: Some("mlx5_core".into()),
            source: RssSource::Netlink,
            key_source: KeySource::Reported,
            description: RssDescription {
                hfunc: "toeplitz".into(),
                key: srap_common::rss::embedded_default().key,
                indir: (0..256).map(|i| i % 2).collect(),
                input_xfrm: "sym-or-xor".into(),
                fields: FieldsDescription::default(),
                queue_cpu: Some(vec![0, 0]),
            },
            queues: vec![
                QueuePlacement {
                    queue: 0,
                    irq: Some(98),
                    cpu: 0,
                    source: CpuSource::Irq,
                },
                QueuePlacement {
                    queue: 1,
                    irq: Some(99),
                    cpu: 0,
                    source: CpuSource::Irq,
                },
            ],
            warnings: vec![
                "queues 0,1 are all served by CPU 0: flows on them share one core".into(),
            ],
        };
        let text = render(&found, &Offer::default());
        println!("{text}");
        assert!(text.contains("offered    CPUs 0 to senders\n"));
        let numa = Offer {
            cpus: None,
            local: Some([0].into_iter().collect()),
        };
        assert!(render(&found, &numa).contains("CPUs 0 to senders (all on the NIC's NUMA node)\n"));
        let mut two_nodes = found.clone();
        two_nodes.description.queue_cpu = Some(vec![0, 8]);
        two_nodes.queues[1].cpu = 8;
        two_nodes.warnings.clear();
        let offer = Offer {
            cpus: Some([0, 8, 9].into_iter().collect()),
            local: Some((8..16).collect()),
        };
        let two_text = render(&two_nodes, &offer);
        println!("{two_text}");
        assert!(
            two_text
                .contains("offered    CPUs 0,8 to senders, the NIC's NUMA node first: 8, then 0\n")
        );
        let none = Offer {
            cpus: Some([5].into_iter().collect()),
            local: None,
        };
        assert!(render(&found, &none).contains("--cpus names none a queue reaches"));
        assert!(text.starts_with("enp8s0f0np0: driver mlx5_core, read over ethtool netlink\n"));
        assert!(text.contains("key        40 bytes 6d:5a:56:da:25:5b:0e:c2:41:67"));
        assert!(text.contains("256 entries, pattern [0 1] × 128"));
        assert!(text.contains("rx-1    → cpu 0    (irq 99, from irq)"));
        assert!(text.contains("! queues 0,1 are all served by CPU 0"));
    }
}
