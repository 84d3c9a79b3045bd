//! Which CPU processes each receive queue, and the warnings that say when
//! that answer is shaky: two queues on one CPU (distinct queues are then not
//! distinct cores), an IRQ allowed on several CPUs, RPS spreading a queue.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
};

use serde::Serialize;

/// What the system says about one receive queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFacts {
    /// The queue's interrupt, when its vector was found by name.
    pub irq: Option<u32>,
    /// `/proc/irq/N/smp_affinity_list`: where the IRQ may run.
    pub affinity: Vec<u32>,
    /// `/proc/irq/N/effective_affinity_list`: where it runs now (x86).
    pub effective: Vec<u32>,
    /// `/proc/irq/N/affinity_hint`: where the driver suggests it run;
    /// empty when the driver gives none (igb).
    pub hint: Vec<u32>,
    /// `rps_cpus` of the queue; empty when RPS is off.
    pub rps: Vec<u32>,
}

/// Where the CPU of a queue comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuSource {
    /// The queue's RPS mask.
    Rps,
    /// The affinity of the queue's IRQ.
    Irq,
    /// The IRQ may run on several CPUs: the one it is routed to now.
    Effective,
    /// Nothing found: queue N is taken to run on CPU N.
    Assumed,
}

impl fmt::Display for CpuSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rps => "rps",
            Self::Irq => "irq",
            Self::Effective => "irq routed now",
            Self::Assumed => "assumed",
        })
    }
}

/// One receive queue and the CPU SRAP counts it on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuePlacement {
    pub queue: u32,
    pub irq: Option<u32>,
    pub cpu: u32,
    pub source: CpuSource,
}

fn list(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPU an IRQ is serviced on. The affinity mask is what the system was
/// told; the effective affinity is where the interrupt was last routed, and
/// before a queue's first interrupt it still names the boot-time CPU (a
/// 4-queue virtio guest shows `3,1,3,1` while the masks say `0,1,2,3`). So
/// a mask of one CPU is the answer, an effective CPU is believed only inside
/// the mask, and a stale one falls back to the mask's first CPU: the
/// description then does not change by itself as traffic reaches each queue.
fn irq_cpu(affinity: &[u32], effective: &[u32], first: u32) -> u32 {
    match (affinity, effective) {
        ([only], _) => *only,
        (_, [now]) if affinity.contains(now) => *now,
        _ => first,
    }
}

/// Decides the CPU of every queue (`facts[q]` is queue q) and collects
/// warnings. `reached` are the queues the indirection table names: only
/// their sharing of a CPU matters.
pub fn place(facts: &[QueueFacts], reached: &[u32]) -> (Vec<QueuePlacement>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut assumed = Vec::new();
    let mut spread = Vec::new();
    let mut placements = Vec::with_capacity(facts.len());
    for (queue, fact) in (0u32..).zip(facts) {
        let (cpu, source) = if let Some(&first) = fact.rps.first() {
            if fact.rps.len() > 1 {
                warnings.push(format!(
                    "queue {queue}: RPS spreads its packets over CPUs {} by hash; SRAP counts \
                     it on CPU {first} (give each queue one CPU in \
                     /sys/class/net/DEV/queues/rx-{queue}/rps_cpus)",
                    list(&fact.rps)
                ));
            }
            (first, CpuSource::Rps)
        } else if let (Some(irq), Some(&first)) = (fact.irq, fact.affinity.first()) {
            let cpu = irq_cpu(&fact.affinity, &fact.effective, first);
            if fact.affinity.len() > 1 {
                spread.push((queue, irq, cpu, fact));
                (cpu, CpuSource::Effective)
            } else {
                (cpu, CpuSource::Irq)
            }
        } else {
            assumed.push(queue);
            (queue, CpuSource::Assumed)
        };
        placements.push(QueuePlacement {
            queue,
            irq: fact.irq,
            cpu,
            source,
        });
    }
    warnings.extend(spread_warning(&spread));
    if !assumed.is_empty() {
        warnings.push(format!(
            "no IRQ or RPS mask found for queue(s) {}: assuming queue N runs on CPU N \
             (write the real map into an --rss FILE if that is wrong)",
            list(&assumed)
        ));
    }
    let mut by_cpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for placement in &placements {
        if reached.contains(&placement.queue) {
            by_cpu
                .entry(placement.cpu)
                .or_default()
                .push(placement.queue);
        }
    }
    for (cpu, queues) in by_cpu.into_iter().filter(|(_, q)| q.len() > 1) {
        warnings.push(format!(
            "queues {} are all served by CPU {cpu}: flows on them share one core",
            list(&queues)
        ));
    }
    (placements, warnings)
}

/// One warning for every queue whose IRQ may run on several CPUs: which
/// CPU SRAP counts it on and why, whether the driver gave no affinity hint
/// (igb gives none: every queue may then run anywhere), and how to pin.
fn spread_warning(spread: &[(u32, u32, u32, &QueueFacts)]) -> Option<String> {
    let (_, first_irq, first_cpu, _) = spread.first()?;
    let queues: Vec<u32> = spread.iter().map(|(q, ..)| *q).collect();
    let mapping: Vec<String> = spread
        .iter()
        .map(|(q, irq, cpu, _)| format!("rx-{q} (IRQ {irq}) → CPU {cpu}"))
        .collect();
    let masks: BTreeSet<String> = spread.iter().map(|(.., f)| list(&f.affinity)).collect();
    let masks: Vec<String> = masks.into_iter().collect();
    let no_hint = spread.iter().all(|(.., f)| f.hint.is_empty());
    let why = if no_hint {
        "the driver sets no IRQ affinity hint (affinity_hint is empty) and nothing pinned them"
    } else {
        "nothing pinned them to one CPU"
    };
    Some(format!(
        "the IRQs of queue(s) {} may run on CPUs {}: {why}. SRAP counts each queue on the CPU \
         its interrupt is routed to now (effective_affinity_list, or the mask's first CPU \
         before its first interrupt): {}. The kernel may move them (irqbalance, CPU hotplug); \
         pin each, e.g. `echo {first_cpu} > /proc/irq/{first_irq}/smp_affinity_list`",
        list(&queues),
        masks.join(" / "),
        mapping.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq(irq: u32, affinity: &[u32], effective: &[u32]) -> QueueFacts {
        QueueFacts {
            irq: Some(irq),
            affinity: affinity.to_vec(),
            effective: effective.to_vec(),
            hint: Vec::new(),
            rps: Vec::new(),
        }
    }

    #[test]
    fn one_pinned_irq_per_queue_is_clean() {
        let facts = [irq(98, &[0], &[0]), irq(99, &[1], &[1])];
        let (placed, warnings) = place(&facts, &[0, 1]);
        assert_eq!(placed.iter().map(|p| p.cpu).collect::<Vec<_>>(), [0, 1]);
        assert!(placed.iter().all(|p| p.source == CpuSource::Irq));
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn spread_irq_uses_effective_cpu_and_warns() {
        let facts = [irq(98, &[0, 1, 2, 3], &[2])];
        let (placed, warnings) = place(&facts, &[0]);
        assert_eq!(placed[0].cpu, 2);
        assert_eq!(placed[0].source, CpuSource::Effective);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("queue(s) 0 may run on CPUs 0,1,2,3"));
        assert!(warnings[0].contains("rx-0 (IRQ 98) → CPU 2"));
    }

    #[test]
    fn igb_without_affinity_hints_is_one_warning_naming_each_queue() {
        // A 4-vCPU igb guest (6.12): every rx vector may run anywhere, the
        // kernel spread them 3, 0, 1, 2, and the driver hints nothing.
        let facts = [
            irq(25, &[0, 1, 2, 3], &[3]),
            irq(26, &[0, 1, 2, 3], &[0]),
            irq(27, &[0, 1, 2, 3], &[1]),
            irq(28, &[0, 1, 2, 3], &[2]),
        ];
        let (placed, warnings) = place(&facts, &[0, 1, 2, 3]);
        assert_eq!(
            placed.iter().map(|p| p.cpu).collect::<Vec<_>>(),
            [3, 0, 1, 2]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let warning = &warnings[0];
        assert!(warning.contains("queue(s) 0,1,2,3 may run on CPUs 0,1,2,3"));
        assert!(warning.contains("no IRQ affinity hint"), "{warning}");
        assert!(warning.contains("rx-0 (IRQ 25) → CPU 3, rx-1 (IRQ 26) → CPU 0"));
        assert!(warning.contains("echo 3 > /proc/irq/25/smp_affinity_list"));
    }

    #[test]
    fn stale_effective_cpu_outside_the_mask_is_ignored() {
        // A one-CPU mask wins over a stale effective CPU.
        let facts = [irq(25, &[0], &[3]), irq(27, &[1], &[1])];
        let (placed, warnings) = place(&facts, &[0, 1]);
        assert_eq!(placed.iter().map(|p| p.cpu).collect::<Vec<_>>(), [0, 1]);
        assert!(warnings.is_empty(), "{warnings:?}");
        // An effective CPU outside a wider mask is stale too.
        let facts = [irq(25, &[0, 1], &[3])];
        let (placed, _) = place(&facts, &[0]);
        assert_eq!(placed[0].cpu, 0);
    }

    #[test]
    fn shared_cpu_warns_only_for_reached_queues() {
        let facts = [irq(1, &[0], &[]), irq(2, &[0], &[]), irq(3, &[1], &[])];
        let (_, warnings) = place(&facts, &[0, 1, 2]);
        assert_eq!(
            warnings,
            ["queues 0,1 are all served by CPU 0: flows on them share one core"]
        );
        let (_, warnings) = place(&facts, &[0, 2]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn rps_overrides_irq_and_missing_irqs_are_assumed() {
        let mut with_rps = irq(5, &[0], &[0]);
        with_rps.rps = vec![3];
        let spread_rps = QueueFacts {
            rps: vec![4, 5],
            ..QueueFacts::default()
        };
        let facts = [with_rps, spread_rps, QueueFacts::default()];
        let (placed, warnings) = place(&facts, &[0, 1, 2]);
        assert_eq!(
            placed.iter().map(|p| (p.cpu, p.source)).collect::<Vec<_>>(),
            [
                (3, CpuSource::Rps),
                (4, CpuSource::Rps),
                (2, CpuSource::Assumed)
            ]
        );
        assert!(warnings.iter().any(|w| w.contains("RPS spreads")));
        assert!(warnings.iter().any(|w| w.contains("queue(s) 2")));
    }
}
