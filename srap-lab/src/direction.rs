//! `--direction`: which way the lab's data flows, and so which NICs are
//! emulated, steered for and judged. Below the flags ([`crate::args`]) and
//! everything that sets up or judges a run, which all take it.

use serde::Serialize;

/// `--direction`: which way the lab's data flows.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The sender uploads: data lands on the receiver's NIC.
    Push,
    /// The sender downloads: data lands on its own NIC.
    Pull,
    /// Both at once: data lands on both NICs.
    Both,
}

impl Direction {
    /// The sender's own NIC is emulated and judged.
    pub fn reaches_sender(self) -> bool {
        self != Self::Push
    }

    /// The receiver's NIC is judged.
    pub fn reaches_receiver(self) -> bool {
        self != Self::Pull
    }

    /// `srap-agent sender --steer` for this direction.
    pub fn steer(self) -> &'static str {
        match self {
            Self::Push => "remote",
            Self::Pull => "local",
            Self::Both => "both",
        }
    }

    /// What iperf3's client adds for this direction.
    pub fn iperf3_flag(self) -> Option<&'static str> {
        match self {
            Self::Push => None,
            Self::Pull => Some("-R"),
            Self::Both => Some("--bidir"),
        }
    }
}
