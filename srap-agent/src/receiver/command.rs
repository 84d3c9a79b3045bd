//! `srap-agent receiver` end to end: read the PSK, start the description
//! watcher and the server, run until Ctrl-C or SIGTERM.

use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use super::{AllowList, Server, ServerConfig, Source, Timeouts, args::ReceiverArgs, source};
use crate::psk::read_psk_file;

/// How often the description is re-read: a file is cheap to re-read; a
/// discovery is a few netlink and /proc reads. Both within the 1 s promise.
const FILE_POLL: Duration = Duration::from_millis(500);
const IFACE_POLL: Duration = Duration::from_secs(1);

pub async fn run(args: &ReceiverArgs) -> anyhow::Result<()> {
    let psk = args.psk_file.as_deref().map(read_psk_file).transpose()?;
    let (source, poll) = match &args.rss {
        Some(path) => {
            if !std::path::Path::new("/sys/class/net")
                .join(&args.iface)
                .exists()
            {
                warn!(
                    "no interface {} here; serving {} anyway",
                    args.iface,
                    path.display()
                );
            }
            (Source::File(path.clone()), FILE_POLL)
        }
        None => (Source::Iface(args.iface.clone()), IFACE_POLL),
    };
    let (updates, watcher) = source::watch(source, poll).context("no RSS description to serve")?;
    let config = ServerConfig {
        allow: AllowList::new(args.allow.clone()),
        psk,
        max_peers: args.max_peers.max(1),
        timeouts: Timeouts::default(),
    };
    let server = Server::bind(args.listen, config, updates)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    info!("stopping");
    server.shutdown().await;
    watcher.abort();
    Ok(())
}
