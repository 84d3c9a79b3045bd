//! The maintainer scripts of both packages, from one body.
//!
//! `deploy/scripts/maintainer.sh` defines what happens (make the key,
//! reload systemd, stop and disable the units, delete the key); [`HOOKS`]
//! says when, in each package manager's terms. dpkg names the step in `$1`
//! (`configure`, `remove`, `purge`, `upgrade`, …); rpm passes the number
//! of the package's versions installed once the step is done (1 on first
//! install, 2 on upgrade, 0 on erase) and has no purge: an erase deletes
//! the unedited settings, which is dpkg's purge.

use anyhow::Result;

use super::files::read;
use crate::exec::workspace_root;

/// The shared body, relative to the workspace root.
const BODY: &str = "deploy/scripts/maintainer.sh";

/// An rpm scriptlet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpmPhase {
    /// `%post`: after install and after upgrade.
    Post,
    /// `%preun`: before erase and before the old version goes in an upgrade.
    PreUn,
    /// `%postun`: after erase and after the old version went in an upgrade.
    PostUn,
}

/// The test of a call made whatever the arguments.
const ALWAYS: &str = "true";

/// One action of the body and when each package manager runs it.
struct Hook {
    /// A function of the body.
    action: &'static str,
    /// The dpkg maintainer script and the test of its arguments.
    deb: (&'static str, &'static str),
    /// The rpm scriptlet and the test of its count.
    rpm: (RpmPhase, &'static str),
}

/// Installed or upgraded, about to be removed, removed for good, removed:
/// in the order each package manager runs them.
const HOOKS: &[Hook] = &[
    Hook {
        action: "srap_installed",
        deb: ("postinst", r#"[ "$1" = configure ]"#),
        rpm: (RpmPhase::Post, ALWAYS),
    },
    Hook {
        action: "srap_removing",
        deb: ("prerm", r#"[ "$1" = remove ]"#),
        rpm: (RpmPhase::PreUn, r#"[ "$1" -eq 0 ]"#),
    },
    Hook {
        action: "srap_purged",
        deb: ("postrm", r#"[ "$1" = purge ]"#),
        rpm: (RpmPhase::PostUn, r#"[ "$1" -eq 0 ]"#),
    },
    Hook {
        action: "srap_removed",
        deb: ("postrm", r#"[ "$1" = remove ] || [ "$1" = purge ]"#),
        rpm: (RpmPhase::PostUn, r#"[ "$1" -eq 0 ]"#),
    },
];

/// The dpkg maintainer scripts the .deb carries.
pub const DEB_SCRIPTS: &[&str] = &["postinst", "prerm", "postrm"];
/// The rpm scriptlets the .rpm carries.
pub const RPM_PHASES: &[RpmPhase] = &[RpmPhase::Post, RpmPhase::PreUn, RpmPhase::PostUn];

/// The dpkg maintainer script `name` (`postinst`, …), a whole file.
pub fn deb_script(name: &str) -> Result<String> {
    let calls = HOOKS
        .iter()
        .filter(|hook| hook.deb.0 == name)
        .map(|hook| (hook.deb.1, hook.action));
    Ok(format!("#!/bin/sh\n{}", script(calls)?))
}

/// The rpm scriptlet of `phase` (rpm runs it with `/bin/sh`).
pub fn rpm_scriptlet(phase: RpmPhase) -> Result<String> {
    let calls = HOOKS
        .iter()
        .filter(|hook| hook.rpm.0 == phase)
        .map(|hook| (hook.rpm.1, hook.action));
    script(calls)
}

/// The body, then one guarded call per (test, action), then `exit 0`: a
/// test that is false must not become the script's status.
fn script<'a>(calls: impl Iterator<Item = (&'a str, &'a str)>) -> Result<String> {
    let mut text = read(&workspace_root().join(BODY))?;
    text.push('\n');
    for (test, action) in calls {
        let call = if test == ALWAYS {
            format!("{action}\n")
        } else {
            format!("if {test}; then {action}; fi\n")
        };
        text.push_str(&call);
    }
    text.push_str("exit 0\n");
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_of_the_body_runs_in_both_formats() {
        let body = read(&workspace_root().join(BODY)).expect("the body");
        for hook in HOOKS {
            assert!(
                body.contains(&format!("{}() {{", hook.action)),
                "{BODY} defines no {}",
                hook.action
            );
            assert!(DEB_SCRIPTS.contains(&hook.deb.0));
            assert!(RPM_PHASES.contains(&hook.rpm.0));
        }
    }

    #[test]
    fn each_script_calls_its_actions_in_order_then_exits_0() {
        let postrm = deb_script("postrm").expect("postrm");
        let purge = postrm.find("then srap_purged").expect("purge call");
        let removed = postrm.find("then srap_removed").expect("removed call");
        assert!(purge < removed && postrm.ends_with("exit 0\n"));
        let post = rpm_scriptlet(RpmPhase::Post).expect("%post");
        assert!(post.contains("\nsrap_installed\nexit 0\n"));
    }
}
