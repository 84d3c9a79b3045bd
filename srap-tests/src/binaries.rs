//! Where the workspace's binaries are for tests that run them as processes.

use std::path::{Path, PathBuf};

use srap_harness::guest::{GuestFiles, GuestImage, GuestKernel, receiver_nics_lab::TwoNicReceiver};

/// `srap`, `srap-agent` or `srap-lab` as cargo built it beside the test binary
/// (`target/<profile>/deps/<test>` → `target/<profile>/<name>`), or in
/// `SRAP_BIN_DIR`. `cargo test` at the workspace root builds them.
pub fn built_binary(name: &str) -> PathBuf {
    let dir = std::env::var_os("SRAP_BIN_DIR").map_or_else(
        || {
            let exe = std::env::current_exe().expect("current exe");
            exe.parent()
                .and_then(Path::parent)
                .expect("test binary in target/<profile>/deps")
                .to_path_buf()
        },
        PathBuf::from,
    );
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: build it first (`cargo build --bins`; `cargo test` at the \
         workspace root does), or point SRAP_BIN_DIR at it",
        path.display()
    );
    path
}

/// The QEMU guests' image for `kernel`, holding the `srap-agent` and `srap`
/// cargo built (prepared once per build: cached beside the agent).
pub fn guest_image(kernel: GuestKernel) -> GuestImage {
    let agent = built_binary("srap-agent");
    let cache = GuestImage::default_cache(&agent);
    let files = GuestFiles::locate(None, &agent).expect("the guest files");
    GuestImage::prepare(&files, kernel, &cache, &agent, &built_binary("srap"))
        .expect("the guest image")
}

/// The two-NIC receiver guest (Linux 6.1) with the built agent and `srap`,
/// its sender agent given `sender_args`; panics, saying why, when it does
/// not come up.
pub fn two_nic_receiver(sender_args: &[&str]) -> TwoNicReceiver {
    let image = guest_image(GuestKernel::V6_1);
    TwoNicReceiver::start(
        &image,
        &built_binary("srap-agent"),
        &built_binary("srap"),
        sender_args,
    )
    .unwrap_or_else(|err| panic!("the two-NIC receiver: {err:#}"))
}
