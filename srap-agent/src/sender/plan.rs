//! What goes into the binder's maps: one steering table per receiver address
//! (or per receiver address and port, when the receiver's RSS is not linear
//! in the destination port), and the destinations that point at them.
//!
//! Pure computation on the RSS model; [`super::maps`] writes the result.

use std::{collections::BTreeSet, net::IpAddr};

use srap_common::{
    binder::{DestKey, DestValue, MAX_DESTS, MAX_RECEIVERS, MAX_TABLES},
    rss::RssModel,
    solver::PortRange,
    steering::{Scope, SteeringTable, addr_words},
};

use super::SenderError;

/// One receiver as the agent steers it.
#[derive(Debug, Clone)]
pub struct ReceiverPlan {
    /// Receiver index: its CPU occupancy row in the binder.
    pub index: u32,
    pub receiver: IpAddr,
    /// The address flows to it leave from (bound with the port).
    pub source: IpAddr,
    /// Indexes into [`Plan::tables`].
    pub tables: Vec<usize>,
}

/// Everything the maps will hold.
#[derive(Debug, Clone)]
pub struct Plan {
    pub receivers: Vec<ReceiverPlan>,
    /// Table `t` of the binder is `tables[t]`.
    pub tables: Vec<SteeringTable>,
    pub dests: Vec<(DestKey, DestValue)>,
}

impl Plan {
    /// Builds the plan for `receivers` (each with its source address), for
    /// every destination port (`ports` empty) or only `ports`.
    pub fn build(
        model: &RssModel,
        receivers: &[(IpAddr, IpAddr)],
        ports: &[u16],
        range: PortRange,
    ) -> Result<Self, SenderError> {
        if receivers.is_empty() {
            return Err(SenderError::Input(
                "no receiver: give --receiver IP (once per receiver address)".into(),
            ));
        }
        if receivers.len() > MAX_RECEIVERS as usize {
            return Err(SenderError::Input(format!(
                "{} receivers given; the binder tracks at most {MAX_RECEIVERS}",
                receivers.len()
            )));
        }
        let mut seen = BTreeSet::new();
        for (receiver, _) in receivers {
            if !seen.insert(receiver) {
                return Err(SenderError::Input(format!(
                    "receiver {receiver} is given twice"
                )));
            }
        }
        let ports: Vec<u16> = ports
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if ports.contains(&0) {
            return Err(SenderError::Input(
                "--port 0 is not a destination port; leave --port out to steer every port".into(),
            ));
        }
        let mut plan = Self {
            receivers: Vec::new(),
            tables: Vec::new(),
            dests: Vec::new(),
        };
        for (index, (receiver, source)) in receivers.iter().enumerate() {
            plan.add_receiver(model, index as u32, *receiver, *source, &ports, range)?;
        }
        if plan.tables.len() > MAX_TABLES as usize {
            return Err(SenderError::Input(format!(
                "these receivers and ports need {} steering tables; the binder holds \
                 {MAX_TABLES}: steer fewer ports or receivers",
                plan.tables.len()
            )));
        }
        if plan.dests.len() > MAX_DESTS as usize {
            return Err(SenderError::Input(format!(
                "{} destinations; the binder holds {MAX_DESTS}",
                plan.dests.len()
            )));
        }
        Ok(plan)
    }

    fn add_receiver(
        &mut self,
        model: &RssModel,
        index: u32,
        receiver: IpAddr,
        source: IpAddr,
        ports: &[u16],
        range: PortRange,
    ) -> Result<(), SenderError> {
        let build = |dport| {
            SteeringTable::build(model, source, receiver, dport, range).map_err(|source| {
                SenderError::Steering {
                    receiver,
                    dport,
                    source,
                }
            })
        };
        let (family, addr) = addr_words(receiver);
        let entry = |plan: &mut Self, port: u16, table: SteeringTable| {
            let t = plan.tables.len();
            plan.tables.push(table);
            plan.dests.push((
                DestKey {
                    family,
                    port: u32::from(port),
                    addr,
                },
                DestValue {
                    table: t as u32,
                    receiver: index,
                },
            ));
            t
        };
        let mut tables = Vec::new();
        match ports.split_first() {
            None => tables.push(entry(self, 0, build(None)?)),
            Some((first, rest)) => {
                let table = build(Some(*first))?;
                if table.scope == Scope::AnyPort {
                    // One table serves every port: point each port at it.
                    let t = entry(self, *first, table);
                    tables.push(t);
                    for port in rest {
                        self.dests.push((
                            DestKey {
                                family,
                                port: u32::from(*port),
                                addr,
                            },
                            DestValue {
                                table: t as u32,
                                receiver: index,
                            },
                        ));
                    }
                } else {
                    tables.push(entry(self, *first, table));
                    for port in rest {
                        tables.push(entry(self, *port, build(Some(*port))?));
                    }
                }
            }
        }
        self.receivers.push(ReceiverPlan {
            index,
            receiver,
            source,
            tables,
        });
        Ok(())
    }

    /// Every source port the binder may bind: what to reserve.
    pub fn ports(&self) -> BTreeSet<u16> {
        self.tables.iter().flat_map(SteeringTable::ports).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use srap_common::rss::{RssModel, embedded_default};

    use super::*;

    fn model() -> RssModel {
        RssModel::from_description(&embedded_default()).unwrap()
    }

    const V4: (IpAddr, IpAddr) = (
        IpAddr::V4(Ipv4Addr::new(10, 199, 9, 2)),
        IpAddr::V4(Ipv4Addr::new(10, 199, 9, 1)),
    );

    #[test]
    fn any_port_receiver_has_one_wildcard_dest() {
        let plan = Plan::build(&model(), &[V4], &[], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.tables.len(), 1);
        assert_eq!(plan.dests.len(), 1);
        assert_eq!(plan.dests[0].0.port, 0);
        assert_eq!(plan.tables[0].slots.len(), 32);
        assert!(!plan.ports().is_empty());
    }

    #[test]
    fn linear_receiver_with_ports_shares_its_table() {
        let v6 = (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 2)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0x5a, 0, 9, 0, 0, 0, 1)),
        );
        let plan = Plan::build(&model(), &[V4, v6], &[5201, 80, 5201], PortRange::DEFAULT).unwrap();
        assert_eq!(plan.tables.len(), 2);
        assert_eq!(plan.dests.len(), 4);
        assert!(plan.dests.iter().all(|(k, _)| k.port != 0));
        assert_eq!(plan.receivers[1].index, 1);
        assert!(
            plan.dests[2..]
                .iter()
                .all(|(_, v)| v.receiver == 1 && v.table == 1)
        );
    }

    #[test]
    fn bad_input_is_an_error() {
        let m = model();
        assert!(Plan::build(&m, &[], &[], PortRange::DEFAULT).is_err());
        assert!(Plan::build(&m, &[V4, V4], &[], PortRange::DEFAULT).is_err());
        assert!(Plan::build(&m, &[V4], &[0], PortRange::DEFAULT).is_err());
        let mixed = (V4.0, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(Plan::build(&m, &[mixed], &[], PortRange::DEFAULT).is_err());
    }
}
