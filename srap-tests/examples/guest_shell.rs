//! Boots a lab guest and runs shell lines read from stdin in it, printing
//! each reply: for looking at a NIC and kernel by hand.
//!
//! `guest_shell NIC KERNEL QUEUES [nodiag]`, e.g.
//! `echo 'ethtool -x eth0' | target/debug/examples/guest_shell igb 6.12 4`
//! (as root, after `cargo build --bins` and `cargo xtask setup`).

use std::io::BufRead as _;

use anyhow::Context as _;
use clap::ValueEnum as _;
use srap_harness::guest::{
    Guest, GuestFiles, GuestImage, GuestKernel, GuestNet, GuestNic, GuestShape,
};
use srap_tests::built_binary;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [nic, kernel, queues, rest @ ..] = args.as_slice() else {
        anyhow::bail!("usage: guest_shell virtio|igb 6.1|6.12 QUEUES [nodiag]");
    };
    let nic = GuestNic::from_str(nic, true).map_err(anyhow::Error::msg)?;
    let kernel = GuestKernel::from_str(kernel, true).map_err(anyhow::Error::msg)?;
    let mut shape = GuestShape::with_nic(nic, queues.parse().context("QUEUES")?, None)?;
    if rest.iter().any(|a| a == "nodiag") {
        shape = shape.without_sock_diag();
    }
    let agent = built_binary("srap-agent");
    let files = GuestFiles::locate(None, &agent)?;
    let image = GuestImage::prepare(
        &files,
        kernel,
        &GuestImage::default_cache(&agent),
        &agent,
        &built_binary("srap"),
    )?;
    let net = GuestNet::new()?;
    let started = std::time::Instant::now();
    let mut guest = Guest::boot(&net, &image, shape)?;
    eprintln!("booted in {:.1} s", started.elapsed().as_secs_f64());
    guest.enable_rss()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let (code, output) = guest
            .shell()
            .status(&line, srap_harness::guest::COMMAND_TIMEOUT)?;
        println!("$ {line}\n{output}[exit {code}]");
    }
    Ok(())
}
