//! The steered cgroup's MPTCP connections in the status: its open flows
//! that the kernel names subflows of one connection (sock_diag's token),
//! grouped, each with the receiver CPU planned and seen and the NIC of this
//! host that holds its source address.
//!
//! The binder sees each subflow as the TCP connection it is (the first
//! through the connect hook, the others through the bind hook); only the
//! kernel knows which belong together, so the grouping is read from it,
//! never inferred from addresses or timing.

use std::collections::BTreeMap;

use srap_status::{
    SenderStatus,
    sender::{MptcpRow, MptcpSubflowRow},
};

use crate::sock_diag::mptcp::Subflows;

/// Fills `status.mptcp` from its `flows` and the namespace's `subflows`:
/// one row per token, its subflows ordered by local address id; flows
/// that are no subflow are left out.
pub fn add_mptcp(status: &mut SenderStatus, subflows: &Subflows) {
    let mut by_token: BTreeMap<u32, Vec<MptcpSubflowRow>> = BTreeMap::new();
    for flow in &status.flows {
        let (Some(src), Some(dst)) = (flow.src, flow.dst) else {
            continue;
        };
        let Some(seen) = subflows.get(&(src, dst)) else {
            continue;
        };
        let local_nic = status
            .local_nics
            .iter()
            .find(|nic| nic.addresses.contains(&src.ip()))
            .map(|nic| nic.name.clone());
        by_token
            .entry(seen.token)
            .or_default()
            .push(MptcpSubflowRow {
                src: Some(src),
                dst: Some(dst),
                local_id: seen.local_id,
                remote_id: seen.remote_id,
                receiver_cpu_planned: flow.receiver_cpu_planned,
                receiver_cpu_seen: flow.receiver_cpu_seen,
                local_nic,
            });
    }
    status.mptcp = by_token
        .into_iter()
        .map(|(token, mut subflows)| {
            subflows.sort_by_key(|s| (s.local_id, s.src));
            MptcpRow { token, subflows }
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use srap_status::sender::{LocalNicRow, SenderFlowRow};

    use super::*;
    use crate::sock_diag::mptcp::SubflowSeen;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("address")
    }

    fn flow(src: &str, dst: &str, cpu: u32) -> SenderFlowRow {
        SenderFlowRow {
            src: Some(addr(src)),
            dst: Some(addr(dst)),
            receiver_cpu_planned: Some(cpu),
            ..SenderFlowRow::default()
        }
    }

    #[test]
    fn subflows_group_by_token_and_plain_flows_stay_out() {
        let mut status = SenderStatus {
            flows: vec![
                flow("10.1.0.1:10001", "10.1.0.2:5201", 3),
                flow("10.2.0.1:10002", "10.1.0.2:5201", 5),
                flow("10.1.0.1:10003", "10.1.0.2:5201", 1),
                flow("10.1.0.1:10004", "10.1.0.2:22", 2),
            ],
            local_nics: vec![LocalNicRow {
                name: "eth1".to_owned(),
                addresses: vec!["10.2.0.1".parse().expect("ip")],
                ..LocalNicRow::default()
            }],
            ..SenderStatus::default()
        };
        let seen = |token, local_id| SubflowSeen {
            token,
            local_id,
            remote_id: 0,
            cgroup: None,
        };
        let subflows: Subflows = [
            ((addr("10.2.0.1:10002"), addr("10.1.0.2:5201")), seen(7, 1)),
            ((addr("10.1.0.1:10001"), addr("10.1.0.2:5201")), seen(7, 0)),
            ((addr("10.1.0.1:10003"), addr("10.1.0.2:5201")), seen(9, 0)),
        ]
        .into_iter()
        .collect();
        add_mptcp(&mut status, &subflows);
        let tokens: Vec<u32> = status.mptcp.iter().map(|m| m.token).collect();
        assert_eq!(tokens, [7, 9]);
        let first = &status.mptcp[0];
        let ports: Vec<u16> = first
            .subflows
            .iter()
            .filter_map(|s| s.src)
            .map(|s| s.port())
            .collect();
        assert_eq!(ports, [10001, 10002], "by local address id");
        assert_eq!(first.subflows[1].local_nic.as_deref(), Some("eth1"));
        assert_eq!(first.subflows[0].local_nic, None);
        assert_eq!(first.receiver_cpus().len(), 2);
    }
}
