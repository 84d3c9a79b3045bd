//! `srap-test-workload IP:PORT`: the integration tests' workload, a process
//! of its own that opens and closes connections to IP:PORT as its stdin
//! commands it (`srap_tests::test_workload::serve`), so a test started under
//! `srap exec` sees the source ports a real application gets. A helper for
//! tests only: the packages do not ship it.

use std::net::SocketAddr;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let dst = std::env::args()
        .nth(1)
        .context("usage: srap-test-workload IP:PORT (the receiver it connects to)")?;
    let dst: SocketAddr = dst
        .parse()
        .with_context(|| format!("the receiver `{dst}` is not IP:PORT"))?;
    srap_tests::test_workload::serve(dst);
    Ok(())
}
