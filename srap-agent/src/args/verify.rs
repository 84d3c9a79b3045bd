//! The flags of `srap-agent verify`.

use std::path::PathBuf;

use super::receiver::HookArg;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Receiving interface.
    #[arg(long)]
    pub iface: String,
    /// Hook to attach to.
    #[arg(long, value_enum, default_value_t = HookArg::Auto)]
    pub hook: HookArg,
    /// cgroup2 directory whose TCP servers the socket hook watches
    /// (default: the cgroup2 root).
    #[arg(long, value_name = "DIR")]
    pub verify_cgroup: Option<PathBuf>,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub duration: Option<u64>,
}
