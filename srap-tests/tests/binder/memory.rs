//! What the binder's maps take in kernel memory, measured from the kernel
//! (each pinned map's `memlock`, as `bpftool map show` reports it), and
//! the settings that size them: a plan they cannot hold, or pins made with
//! other settings under an attached binder, stop the agent with an error
//! naming the setting, never a silent fallback.

use srap_common::binder::BinderSizes;
use srap_daemon::sender::pinned_memory;

use super::Lab;
use srap_tests::require_privileged;

/// The bound for one 32-CPU receiver (it was 53.7 MiB, every map
/// at the most the binder could hold).
const ONE_RECEIVER_LIMIT: u64 = 8 << 20;

/// A sender agent with its defaults, steering toward one 32-CPU receiver
/// (`data/receiver-32q.json`): its pinned maps take at most 8 MiB, as the
/// kernel counts them, and the formula of docs/binder.md says what the
/// kernel charges.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn one_32_cpu_receiver_pins_at_most_8_mib() {
    require_privileged("binder: pinned memory of one receiver");
    let lab = Lab::new(false);
    lab.attach_once();
    let by_map = pinned_memory(&lab.agent.layout()).expect("the pinned maps' memlock");
    let kernel: u64 = by_map.iter().map(|(_, bytes)| bytes).sum();
    let cpus = aya::util::nr_cpus().expect("possible CPUs") as u32;
    // Two destinations: the receiver bound to the route's source, and
    // unbound.
    let formula = BinderSizes::DEFAULT.pinned_bytes(cpus, 2);
    eprintln!(
        "one 32-CPU receiver, default settings: {kernel} bytes pinned ({:.2} MiB; formula \
         {formula}); by map: {by_map:?}",
        kernel as f64 / f64::from(1 << 20)
    );
    assert!(kernel <= ONE_RECEIVER_LIMIT, "{kernel} bytes: {by_map:?}");
    // Exact on the kernels measured; the headers are the kernel's structs,
    // so allow another kernel a little.
    assert!(
        kernel.abs_diff(formula) * 100 <= formula,
        "kernel {kernel}, formula {formula}: {by_map:?}"
    );
}

/// `--max-cpus 16` toward a 32-CPU receiver: the agent stops before
/// anything is attached, naming the setting to raise. Then, with the
/// binder attached at the defaults, an agent started with another
/// `--max-sockets` is refused (the open flows' records are in the pinned
/// socket table), naming the pinned settings and `srap-agent detach`; the
/// pinned settings adopt it again.
#[test]
#[ignore = "kernel: needs root, netns and bpffs; run as root by `cargo xtask test`"]
fn a_plan_or_pins_past_the_settings_are_refused_naming_the_setting() {
    require_privileged("binder: map sizes refused by name");
    let lab = Lab::new(false);
    let run = |extra: &[&str]| {
        let out = lab
            .agent
            .command(&[&["--once"], extra].concat())
            .output()
            .expect("run the agent");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = run(&["--max-cpus", "16"]);
    assert!(!ok, "a plan past --max-cpus is refused");
    assert!(
        err.contains(
            "CPU slots of one receiver: these receivers need 32, the binder is sized for 16 \
             (--max-cpus 16): raise --max-cpus"
        ),
        "{err}"
    );
    assert!(!lab.agent.layout().links_pinned(), "nothing attached");

    lab.attach_once();
    let (ok, err) = run(&["--max-sockets", "1000"]);
    assert!(!ok, "other sizes under an attached binder are refused");
    for says in [
        "--max-sockets 32768",
        "SRAP_SOCKETS 65536 → 2048 entries",
        "srap-agent detach",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    lab.attach_once();
}
