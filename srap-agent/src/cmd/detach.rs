//! `srap-agent detach`: remove what `srap-agent sender` attached and
//! pinned (and ports an older agent reserved, and the source rules
//! `--source-rules install` added).

use anyhow::Context as _;
use srap_daemon::sender;

use crate::args::detach::DetachArgs;

/// Detaches and says what it removed.
pub fn run(args: &DetachArgs) -> anyhow::Result<()> {
    let report = sender::detach(&args.pin_dir).with_context(|| {
        format!(
            "detaching the binder pinned under {}",
            args.pin_dir.display()
        )
    })?;
    println!(
        "removed {} pins under {}",
        report.pins_removed,
        args.pin_dir.display()
    );
    if report.ports_unreserved > 0 {
        println!(
            "unreserved {} ports an older agent had reserved",
            report.ports_unreserved
        );
    }
    if report.source_rules_removed > 0 {
        println!(
            "removed {} source rules and routes --source-rules install had added",
            report.source_rules_removed
        );
    }
    if let Some(before) = report.path_manager_restored {
        println!("restored the namespace's MPTCP path manager ({before:?})");
    }
    if let Some(cgroup) = &report.cgroup_removed {
        println!("removed cgroup {}", cgroup.display());
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    Ok(())
}
