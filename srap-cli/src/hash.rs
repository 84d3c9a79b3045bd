//! `srap hash`: one Toeplitz hash, for checking SRAP against a NIC or a spec.

use std::net::SocketAddr;

use anyhow::anyhow;
use srap_common::rss::{FlowTuple, HashFields, HashInput, InputXfrm, ToeplitzKey, ToeplitzTable};

#[derive(clap::Args)]
pub struct Args {
    /// RSS key in hex, with or without colons (as `ethtool -x DEV` prints it).
    #[arg(long)]
    key: String,
    /// Sender address and port as the receiver sees them; IPv6 as [addr]:port.
    #[arg(long)]
    src: SocketAddr,
    /// Receiver address and port.
    #[arg(long)]
    dst: SocketAddr,
    /// Hashed fields in ethtool letters: s, d (IP src/dst), f, n (ports).
    #[arg(long, default_value = "sdfn")]
    fields: String,
    /// Input transform.
    #[arg(long, default_value = "none", value_parser = InputXfrm::NAMES)]
    xfrm: String,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let key = ToeplitzKey::parse_hex(&args.key).map_err(|e| anyhow!("--key: {e}"))?;
    let fields: HashFields = args.fields.parse().map_err(|e| anyhow!("--fields: {e}"))?;
    let xfrm: InputXfrm = args.xfrm.parse().map_err(|e| anyhow!("--xfrm: {e}"))?;
    let tuple = FlowTuple::from_sockets(args.src, args.dst)?;
    let input = HashInput::new(&tuple, fields, xfrm);
    println!("0x{:08x}", ToeplitzTable::new(key).hash(input.as_bytes()));
    Ok(())
}
