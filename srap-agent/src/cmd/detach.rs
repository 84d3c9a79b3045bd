//! `srap-agent detach`: remove what `srap-agent sender` attached, pinned
//! and reserved.

use anyhow::Context as _;
use srap_daemon::sender::{self, args::DetachArgs};

/// Detaches and says what it removed.
pub fn run(args: &DetachArgs) -> anyhow::Result<()> {
    let report = sender::detach(&args.pin_dir).with_context(|| {
        format!(
            "detaching the binder pinned under {}",
            args.pin_dir.display()
        )
    })?;
    println!(
        "removed {} pins under {}; unreserved {} ports",
        report.pins_removed,
        args.pin_dir.display(),
        report.ports_unreserved
    );
    if let Some(cgroup) = &report.cgroup_removed {
        println!("removed cgroup {}", cgroup.display());
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    Ok(())
}
