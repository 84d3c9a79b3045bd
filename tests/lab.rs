//! The lab end to end: two namespaces, the emulated 32-queue NIC, the binder
//! and the verifier come up; the experiment puts every SRAP trial's flows on
//! distinct queues (judged by the verifier) while kernel-chosen ports are
//! predicted exactly; and everything is gone afterwards.

use std::path::Path;

use srap_agent::lab::{experiment, steering::LabSteering, topology::LabNet};
use srap_suite::require_privileged;

#[test]
fn experiment_is_collision_free_with_srap_and_leaves_nothing_behind() {
    if !require_privileged("experiment_is_collision_free_with_srap_and_leaves_nothing_behind") {
        return;
    }
    let (pin_dir, cgroup) = {
        let net = LabNet::new(32).expect("lab network");
        let steering = LabSteering::start(&net.hosts.sender, &net.model, net.receiver_ip())
            .expect("binder in the sender namespace");
        let report = experiment::run(&net, steering.cgroup(), 16, 5, 32).expect("experiment");
        assert_eq!(report.srap.trials, 5);
        assert_eq!(report.srap.collision_free_rate, 1.0, "{report:?}");
        assert_eq!(report.srap.mean_busiest, 1.0, "{report:?}");
        // The emulated NIC follows the model for every flow, steered or not.
        assert_eq!(report.srap.prediction_accuracy, 1.0, "{report:?}");
        assert_eq!(report.kernel.prediction_accuracy, 1.0, "{report:?}");
        assert!(report.kernel.mean_busiest >= 1.0);
        assert!((report.analytic_collision_free - 0.0104).abs() < 1e-3);
        (
            steering.pin_dir().to_path_buf(),
            steering.cgroup().to_path_buf(),
        )
    };
    assert!(!pin_dir.exists(), "{} left behind", pin_dir.display());
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    assert!(Path::new("/proc/self/cgroup").exists());
    let own = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroup");
    assert!(
        !own.contains("srap-lab"),
        "the test process stayed in the lab cgroup: {own}"
    );
}
