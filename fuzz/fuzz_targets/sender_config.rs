//! The sender agent's TOML settings (`--config FILE`,
//! /etc/srap/sender.toml, which administrators write) on arbitrary bytes:
//! an error that names the file, never a panic; the values of a file that
//! parses are parsed as the agent parses them (`pacing-rate`,
//! `port-range`), to an error or a value.
//!
//! The parser is the agent's own source file, compiled in here as
//! `srap-agent` compiles `srap`'s docs module, so this crate needs neither
//! the eBPF build nor tokio.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use srap_common::port_range::PortRange;

#[allow(dead_code)]
#[path = "../../srap-daemon/src/sender/choices.rs"]
mod choices;
#[allow(dead_code)]
#[path = "../../srap-daemon/src/sender/config.rs"]
mod config;
#[allow(dead_code)]
#[path = "../../srap-daemon/src/sender/rate.rs"]
mod rate;
#[allow(dead_code)]
#[path = "../../srap-daemon/src/setting.rs"]
mod setting;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/etc/srap/sender.toml");
    match config::SenderConfig::parse(path, text) {
        Err(err) => assert!(err.to_string().contains("/etc/srap/sender.toml"), "{err}"),
        Ok(config) => {
            if let Some(rate) = &config.pacing_rate {
                let _ = rate.parse::<rate::PacingRate>();
            }
            if let Some(range) = &config.port_range {
                let _ = range.parse::<PortRange>();
            }
            let peers = config.all_peers();
            assert_eq!(peers.len(), config.peers.len() + config.peer.len());
        }
    }
});
