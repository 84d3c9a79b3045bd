//! Queue → IRQ → CPU: which interrupt serves each receive queue (from the
//! names drivers give their vectors in `/proc/interrupts`) and which CPUs it
//! may run on (`/proc/irq/N/{effective_,smp_}affinity_list`).

use std::collections::BTreeMap;

/// One numbered line of `/proc/interrupts`: the IRQ and every token after
/// the per-CPU counts (chip, hwirq, trigger, then the action names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    pub irq: u32,
    pub tokens: Vec<String>,
}

/// Parses `/proc/interrupts`. Lines that are not numbered IRQs (the CPU
/// header, NMI, LOC, ERR, …) are skipped; nothing in the text can fail.
pub fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    let mut lines = text.lines();
    let cpus = lines.next().map_or(0, |header| {
        header
            .split_whitespace()
            .filter(|t| t.starts_with("CPU"))
            .count()
    });
    lines
        .filter_map(|line| {
            let (irq, rest) = line.split_once(':')?;
            let irq = irq.trim().parse().ok()?;
            let mut tokens = rest.split_whitespace().peekable();
            // Skip the per-CPU counters (at most one per CPU column).
            for _ in 0..cpus {
                if tokens
                    .next_if(|t| t.bytes().all(|b| b.is_ascii_digit()))
                    .is_none()
                {
                    break;
                }
            }
            let tokens = tokens
                .map(|t| t.trim_end_matches(',').to_owned())
                .filter(|t| !t.is_empty())
                .collect();
            Some(IrqLine { irq, tokens })
        })
        .collect()
}

/// How a device names its receive vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqNaming {
    pub ifname: String,
    /// Driver name (`ETHTOOL_GDRVINFO`): mlx5 names its vectors its own way.
    pub driver: Option<String>,
    /// PCI address (`ETHTOOL_GDRVINFO` bus_info), for mlx5's names.
    pub bus_info: Option<String>,
    /// `K` of the `virtioK` device under the interface, for virtio_net.
    pub virtio_index: Option<u32>,
}

impl IrqNaming {
    /// The receive queue an IRQ action name belongs to, if it is one of ours:
    /// * mlx5: `mlx5_comp<N>@pci:<bus>` (older kernels: `mlx5_comp<N>`);
    /// * ice, i40e, ixgbe, bnxt and kin: `[<drv>-]<ifname>-TxRx-<N>`, or
    ///   `…-rx-<N>` for drivers with separate receive vectors;
    /// * virtio_net: `virtio<K>-input.<N>`.
    pub fn queue_of(&self, name: &str) -> Option<u32> {
        if let Some(rest) = name.strip_prefix("mlx5_comp") {
            if !self
                .driver
                .as_deref()
                .is_some_and(|d| d.starts_with("mlx5"))
            {
                return None;
            }
            let (n, bus) = match rest.split_once("@pci:") {
                Some((n, bus)) => (n, Some(bus)),
                None => (rest, None),
            };
            let ours = match (bus, self.bus_info.as_deref()) {
                (Some(bus), Some(ours)) => bus == ours,
                // Old names carry no address: with one mlx5 port they are ours.
                _ => true,
            };
            return ours.then(|| n.parse().ok()).flatten();
        }
        if let Some(rest) = name.strip_prefix("virtio") {
            let (k, n) = rest.split_once("-input.")?;
            return (k.parse::<u32>().ok()? == self.virtio_index?)
                .then(|| n.parse().ok())
                .flatten();
        }
        for marker in ["-TxRx-", "-rx-"] {
            if let Some((head, n)) = name.rsplit_once(marker) {
                let ours = head == self.ifname
                    || head
                        .strip_suffix(self.ifname.as_str())
                        .is_some_and(|prefix| prefix.ends_with('-'));
                if ours {
                    return n.parse().ok();
                }
            }
        }
        None
    }

    /// Receive queue → IRQ, for the queues whose vector is found. A queue
    /// named by two IRQs keeps the first.
    pub fn queue_irqs(&self, lines: &[IrqLine]) -> BTreeMap<u32, u32> {
        let mut map = BTreeMap::new();
        for line in lines {
            if let Some(queue) = line.tokens.iter().find_map(|t| self.queue_of(t)) {
                map.entry(queue).or_insert(line.irq);
            }
        }
        map
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Laid out as a 4-CPU host with an mlx5 NIC (two ports) shows it.
    pub(crate) const MLX5: &str = "            CPU0       CPU1       CPU2       CPU3       \n\
   0:         44          0          0          0   IO-APIC   2-edge      timer\n\
  97:          0          0          0          0  IR-PCI-MSIX-0000:08:00.0    0-edge      mlx5_async0@pci:0000:08:00.0\n\
  98:     120345          0          0          0  IR-PCI-MSIX-0000:08:00.0    1-edge      mlx5_comp0@pci:0000:08:00.0\n\
  99:          0     884211          0          0  IR-PCI-MSIX-0000:08:00.0    2-edge      mlx5_comp1@pci:0000:08:00.0\n\
 100:          0          0      77120          0  IR-PCI-MSIX-0000:08:00.0    3-edge      mlx5_comp2@pci:0000:08:00.0\n\
 101:          0          0          0      90211  IR-PCI-MSIX-0000:08:00.0    4-edge      mlx5_comp3@pci:0000:08:00.0\n\
 110:          1          0          0          0  IR-PCI-MSIX-0000:08:00.1    1-edge      mlx5_comp0@pci:0000:08:00.1\n\
 NMI:          0          0          0          0   Non-maskable interrupts\n\
 LOC:    1234567    1234567    1234567    1234567   Local timer interrupts\n\
 ERR:          0\n";

    pub(crate) const ICE: &str = "            CPU0       CPU1       \n\
 140:          0          0  IR-PCI-MSIX-0000:3b:00.0    0-edge      ice-0000:3b:00.0:misc\n\
 141:       2000          0  IR-PCI-MSIX-0000:3b:00.0    1-edge      ice-ens1f0-TxRx-0\n\
 142:          0       3000  IR-PCI-MSIX-0000:3b:00.0    2-edge      ice-ens1f0-TxRx-1\n\
 150:          0       3000  IR-PCI-MSIX-0000:3b:00.1    1-edge      ice-ens1f01-TxRx-0\n";

    pub(crate) const VIRTIO: &str = "            CPU0       CPU1       \n\
  24:          0          0   PCI-MSIX-0000:00:03.0   0-edge      virtio0-config\n\
  25:       1021          0   PCI-MSIX-0000:00:03.0   1-edge      virtio0-input.0\n\
  26:          1          0   PCI-MSIX-0000:00:03.0   2-edge      virtio0-output.0\n\
  27:          0        877   PCI-MSIX-0000:00:03.0   3-edge      virtio0-input.1\n\
  28:          0          1   PCI-MSIX-0000:00:03.0   4-edge      virtio0-output.1\n\
  29:          0          0   PCI-MSIX-0000:00:04.0   1-edge      virtio1-input.0\n";

    fn naming(ifname: &str, bus: Option<&str>, virtio: Option<u32>) -> IrqNaming {
        let driver = match (bus, virtio) {
            (_, Some(_)) => "virtio_net",
            (Some(bus), _) if bus.starts_with("0000:08") => "mlx5_core",
            _ => "ice",
        };
        IrqNaming {
            ifname: ifname.into(),
            driver: Some(driver.into()),
            bus_info: bus.map(Into::into),
            virtio_index: virtio,
        }
    }

    #[test]
    fn mlx5_queues_match_their_own_pci_function_only() {
        let lines = parse_interrupts(MLX5);
        assert_eq!(lines.len(), 7);
        assert_eq!(
            lines[2].tokens.last().unwrap(),
            "mlx5_comp0@pci:0000:08:00.0"
        );
        let map = naming("enp8s0f0np0", Some("0000:08:00.0"), None).queue_irqs(&lines);
        assert_eq!(map, BTreeMap::from([(0, 98), (1, 99), (2, 100), (3, 101)]));
        let other = naming("enp8s0f1np1", Some("0000:08:00.1"), None).queue_irqs(&lines);
        assert_eq!(other, BTreeMap::from([(0, 110)]));
    }

    #[test]
    fn ice_queues_match_the_exact_interface_name() {
        let lines = parse_interrupts(ICE);
        let map = naming("ens1f0", Some("0000:3b:00.0"), None).queue_irqs(&lines);
        assert_eq!(map, BTreeMap::from([(0, 141), (1, 142)]));
        // ens1f01 is another device whose name merely starts the same.
        let map = naming("ens1f01", None, None).queue_irqs(&lines);
        assert_eq!(map, BTreeMap::from([(0, 150)]));
    }

    #[test]
    fn virtio_input_vectors_of_our_device() {
        let lines = parse_interrupts(VIRTIO);
        let map = naming("eth0", None, Some(0)).queue_irqs(&lines);
        assert_eq!(map, BTreeMap::from([(0, 25), (1, 27)]));
        let map = naming("eth1", None, Some(1)).queue_irqs(&lines);
        assert_eq!(map, BTreeMap::from([(0, 29)]));
    }

    #[test]
    fn garbage_lines_are_skipped() {
        let text = "CPU0\nfoo\n:\n 12\n 13: 5 x y\n 99999999999: 1 a\n";
        let lines = parse_interrupts(text);
        assert_eq!(
            lines,
            vec![IrqLine {
                irq: 13,
                tokens: vec!["x".into(), "y".into()]
            }]
        );
        assert!(parse_interrupts("").is_empty());
    }
}
