//! The installed units, hardened, are judged two ways by the package check:
//!
//! * **Exposure**: `systemd-analyze security --offline=true` scores each
//!   unit; above [`MAX_EXPOSURE`] fails (Debian's `chrony.service`, a root
//!   network daemon with privileged kernel calls, scores 3.7).
//! * **They run**: a throwaway container (`systemd-nspawn` on the host's
//!   `/usr`, a tmpfs root, loopback only, a bpffs of its own) boots
//!   systemd, which starts `srap-receiver` and `srap-sender` as the package
//!   installed them — sandbox, capability bounding set and system call
//!   filter included — with settings for loopback and the package's own
//!   key. A connection made under `srap exec` must be steered, the receiver
//!   must have authenticated the sender with that key and served
//!   `/metrics`, each agent must hold exactly its unit's capabilities,
//!   `systemctl reload` must read the key again, and neither may restart.
//!
//! The container shares nothing writable with the host but the directory
//! its results come back in, its bpffs and the cgroups it is started in;
//! a guard removes all of them, and `timeout` bounds the run.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};

use super::{
    contents::{UNIT_DIR, UNITS},
    files::{read, write},
};
use crate::exec::output_of;

/// Highest overall exposure `systemd-analyze security` may give a unit.
pub const MAX_EXPOSURE: f64 = 4.0;
/// Bound on the container's whole run (it takes ~5 s).
const RUN_SECONDS: &str = "120";

/// The receiver's settings in the container: loopback, the package's key,
/// an RSS description file (`lo` has none), metrics on loopback.
const RECEIVER_CONF: &str = "SRAP_RECEIVER_ARGS=\"--iface lo --listen 127.0.0.1:7447 \
    --rss /etc/srap/rss.json --psk-file /etc/srap/psk --metrics 127.0.0.1:9447\"\n";
const SENDER_CONF: &str =
    "SRAP_SENDER_ARGS=\"--port-range 20000-30000 --report-port 9447 --interval 1\"\n";
const SENDER_TOML: &str = "peers = [\"127.0.0.1:7447\"]\npsk-file = \"/etc/srap/psk\"\n";
const RSS_JSON: &str = r#"{"key": "6d:5a:56:da:25:5b:0e:c2:41:67:25:3d:43:a3:8f:b0:d0:ca:2b:cb:ae:7b:30:b4:77:cb:2d:a3:80:30:f2:0c:6a:42:b7:3b:be:ac:01:fa",
 "indir": [0, 1, 0, 1], "queue_cpu": [0, 1]}
"#;

/// Runs in the container as `srap-check.service`; leaves its findings in
/// /srap-check/out for [`judge`].
const CHECK_SH: &str = r#"#!/bin/bash
out=/srap-check/out
exec > "$out/check.log" 2>&1
set -x
# network-online.target means nothing on a loopback-only container.
systemctl start --job-mode=ignore-dependencies srap-receiver.service srap-sender.service
for i in $(seq 100); do
    srap status --sender --json 2>/dev/null | grep -q '"grant":{' && break
    sleep 0.1
done
scrape='exec 3<>/dev/tcp/127.0.0.1/9447; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3'
# One connection under `srap exec`, to the receiver's /metrics.
srap exec -- bash -c "$scrape" > /dev/null
# The receiver's status (and so /metrics) is sampled every second.
sleep 1.5
bash -c "$scrape" > "$out/metrics.txt"
srap status --sender --json > "$out/sender.json"
srap status --once --json > "$out/receiver.json"
systemctl reload srap-receiver.service
sleep 0.5
for u in srap-receiver srap-sender; do
    systemctl show "$u" -p ActiveState -p NRestarts > "$out/$u.show"
    grep '^Cap' "/proc/$(systemctl show -p MainPID --value "$u")/status" > "$out/$u.caps"
    journalctl -u "$u" --no-pager -o cat > "$out/$u.log"
done
"#;
const CHECK_SERVICE: &str = "[Unit]\nDescription=SRAP package check\n\
    SuccessAction=poweroff-force\nFailureAction=poweroff-force\n\
    [Service]\nType=oneshot\nTimeoutStartSec=60\nExecStart=/srap-check/check.sh\n";

/// Each unit's exposure, and each at most [`MAX_EXPOSURE`].
pub fn check_exposure() -> Result<Vec<(String, f64)>> {
    let mut scores = Vec::new();
    for unit in UNITS {
        let path = Path::new("/").join(UNIT_DIR).join(unit);
        let mut command = Command::new("systemd-analyze");
        command
            .args(["security", "--offline=true", "--no-pager"])
            .arg(&path);
        let report = output_of(&mut command)?;
        let score = overall_exposure(&report)
            .with_context(|| format!("no overall exposure for {unit} in:\n{report}"))?;
        ensure!(
            score <= MAX_EXPOSURE,
            "{unit}: exposure {score} is above {MAX_EXPOSURE}:\n{report}"
        );
        scores.push(((*unit).to_owned(), score));
    }
    Ok(scores)
}

/// `→ Overall exposure level for srap-receiver.service: 2.2 OK 🙂` → 2.2.
fn overall_exposure(report: &str) -> Option<f64> {
    let line = report
        .lines()
        .find(|l| l.contains("Overall exposure level"))?;
    let (_, after) = line.rsplit_once(": ")?;
    after.split_whitespace().next()?.parse().ok()
}

/// Boots the container, runs the agents under their units and judges
/// what they did.
pub fn check_running() -> Result<()> {
    let run = Container::prepare()?;
    let log = run.dir.join("nspawn.log");
    let file = fs::File::create(&log).context("creating the container's log")?;
    let mut command = Command::new("timeout");
    command
        .args(["--kill-after=10", RUN_SECONDS, "sh", "-c"])
        .arg(run.enter_cgroups_then_exec())
        .arg("srap-package-check")
        .args(run.nspawn_args())
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone().context("the container's log")?)
        .stderr(file);
    let status = command.status().context("could not run systemd-nspawn")?;
    let tail = || fs::read_to_string(&log).unwrap_or_default();
    ensure!(
        status.success(),
        "systemd-nspawn ({status}); its output:\n{}",
        tail()
    );
    judge(&run.dir.join("out")).with_context(|| {
        let check = fs::read_to_string(run.dir.join("out/check.log")).unwrap_or_default();
        format!("the units in the container (its script's log:\n{check})")
    })
}

/// The container's scratch directory, bpffs and cgroups; removed on drop.
struct Container {
    dir: PathBuf,
    bpffs: PathBuf,
    mounted: bool,
    /// The cgroups the container is started in (nspawn makes its own
    /// below the caller's), deepest removed first.
    cgroups: Vec<PathBuf>,
}

impl Container {
    fn prepare() -> Result<Self> {
        let name = format!("srap-package-check-{}", std::process::id());
        let dir = std::env::temp_dir().join(&name);
        let mut run = Self {
            bpffs: dir.join("bpffs"),
            dir,
            mounted: false,
            cgroups: Vec::new(),
        };
        let etc = run.dir.join("etc-srap");
        for sub in [&etc, &run.dir.join("out"), &run.bpffs] {
            fs::create_dir_all(sub).with_context(|| format!("creating {}", sub.display()))?;
        }
        for (file, text) in [
            ("receiver.conf", RECEIVER_CONF),
            ("sender.conf", SENDER_CONF),
            ("sender.toml", SENDER_TOML),
            ("rss.json", RSS_JSON),
        ] {
            write(&etc.join(file), text)?;
        }
        // The key the package made, as the agents will read it.
        let psk = etc.join("psk");
        fs::copy("/etc/srap/psk", &psk).context("copying the package's /etc/srap/psk")?;
        fs::set_permissions(&psk, fs::Permissions::from_mode(0o600))?;
        write(&run.dir.join("check.sh"), CHECK_SH)?;
        fs::set_permissions(run.dir.join("check.sh"), fs::Permissions::from_mode(0o755))?;
        write(&run.dir.join("check.service"), CHECK_SERVICE)?;
        output_of(
            Command::new("mount")
                .args(["-t", "bpf", "bpf"])
                .arg(&run.bpffs),
        )?;
        run.mounted = true;
        run.cgroups = make_cgroups(&name)?;
        Ok(run)
    }

    /// `sh -c` text: moves the shell into the check's cgroups, then
    /// `exec "$@"` (the nspawn command line).
    fn enter_cgroups_then_exec(&self) -> String {
        let moves: String = self
            .cgroups
            .iter()
            .map(|c| format!("echo $$ > '{}/cgroup.procs' && ", c.display()))
            .collect();
        format!("{moves}exec \"$@\"")
    }

    fn nspawn_args(&self) -> Vec<String> {
        let d = self.dir.display();
        let mut args: Vec<String> = [
            "systemd-nspawn",
            "--quiet",
            "--directory=/",
            "--volatile=yes",
            "--private-network",
            "--register=no",
            "--keep-unit",
            // The agents' capabilities must reach the container to be
            // bounded by the units; nspawn's own filter lets `bpf` through
            // only when asked.
            "--capability=CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN",
            "--system-call-filter=bpf",
        ]
        .map(str::to_owned)
        .to_vec();
        args.push(format!("--machine=srapchk{}", std::process::id()));
        for (from, to, writable) in [
            (format!("{d}/etc-srap"), "/etc/srap", false),
            (format!("{d}/check.sh"), "/srap-check/check.sh", false),
            (
                format!("{d}/check.service"),
                "/etc/systemd/system/srap-check.service",
                false,
            ),
            (format!("{d}/out"), "/srap-check/out", true),
            (format!("{d}/bpffs"), "/sys/fs/bpf", true),
        ] {
            let flag = if writable { "--bind" } else { "--bind-ro" };
            args.push(format!("{flag}={from}:{to}"));
        }
        args.extend(
            [
                "--boot",
                "systemd.firstboot=off",
                "systemd.unit=srap-check.service",
            ]
            .map(str::to_owned),
        );
        args
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.bpffs).status();
        }
        for cgroup in &self.cgroups {
            remove_cgroup_tree(cgroup);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A cgroup named `name` in the cgroup2 hierarchy and, on a hybrid host,
/// the `name=systemd` one: nspawn makes its own below the cgroups of its
/// caller there.
fn make_cgroups(name: &str) -> Result<Vec<PathBuf>> {
    let mounts = fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    let roots: Vec<&str> = mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, at, "cgroup2", ..] => Some(*at),
                [_, at, "cgroup", opts, ..] if opts.split(',').any(|o| o == "name=systemd") => {
                    Some(*at)
                }
                _ => None,
            }
        })
        .collect();
    ensure!(
        !roots.is_empty(),
        "no cgroup2 mount in /proc/mounts for the container"
    );
    let mut made = Vec::new();
    for root in roots {
        let dir = Path::new(root).join(name);
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        made.push(dir);
    }
    Ok(made)
}

/// `rmdir` of `dir` and every cgroup below it, deepest first (they are
/// empty once the container is gone).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    if let Err(err) = fs::remove_dir(dir) {
        eprintln!("package check: removing cgroup {}: {err}", dir.display());
    }
}

/// What the container's script found.
fn judge(out: &Path) -> Result<()> {
    for unit in ["srap-receiver", "srap-sender"] {
        let show = read(&out.join(format!("{unit}.show")))?;
        ensure!(
            show.contains("ActiveState=active") && show.contains("NRestarts=0"),
            "{unit} is not running, or restarted:\n{show}\nits journal:\n{}",
            read(&out.join(format!("{unit}.log"))).unwrap_or_default()
        );
        check_capabilities(unit, &read(&out.join(format!("{unit}.caps")))?)?;
    }
    let sender: serde_json::Value = serde_json::from_str(&read(&out.join("sender.json"))?)
        .context("srap status --sender --json")?;
    let steered = sender["binder"]
        .as_array()
        .and_then(|counters| {
            counters
                .iter()
                .find(|c| c[0] == "steered")
                .and_then(|c| c[1].as_u64())
        })
        .unwrap_or(0);
    ensure!(
        steered >= 1,
        "the connection under `srap exec` was not steered: {sender:#}"
    );
    let receiver: serde_json::Value = serde_json::from_str(&read(&out.join("receiver.json"))?)
        .context("srap status --once --json")?;
    let keys = &receiver["access"]["keys"];
    let peer_key = &receiver["peers"][0]["key"];
    ensure!(
        keys.as_array().is_some_and(|k| k.len() == 1) && keys[0] == *peer_key,
        "the receiver did not authenticate the sender with the package's key: {receiver:#}"
    );
    let metrics = read(&out.join("metrics.txt"))?;
    for line in ["srap_psk_keys 1", "srap_listen_open 0", "srap_peers 1"] {
        ensure!(
            metrics.lines().any(|l| l == line),
            "/metrics lacks `{line}`:\n{metrics}"
        );
    }
    let journal = read(&out.join("srap-receiver.log"))?;
    ensure!(
        journal.contains("pre-shared keys unchanged"),
        "`systemctl reload srap-receiver` did not read the key again:\n{journal}"
    );
    Ok(())
}

/// The agent's capabilities (`Cap*:` lines of its /proc status) are
/// exactly its unit's `CapabilityBoundingSet`, effective and bounding.
fn check_capabilities(unit: &str, caps: &str) -> Result<()> {
    let path = Path::new("/")
        .join(UNIT_DIR)
        .join(format!("{unit}.service"));
    let want: Vec<String> = read(&path)?
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .with_context(|| format!("{} sets no CapabilityBoundingSet", path.display()))?
        .split_whitespace()
        .map(str::to_lowercase)
        .collect();
    for field in ["CapEff:", "CapBnd:"] {
        let hex = caps
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .with_context(|| format!("{unit}: no {field} in {caps}"))?
            .trim();
        let decoded = output_of(Command::new("capsh").arg(format!("--decode={hex}")))?;
        let mut have: Vec<String> = decoded
            .trim()
            .rsplit_once('=')
            .map(|(_, names)| names.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
        have.sort();
        let mut want = want.clone();
        want.sort();
        if have != want {
            bail!("{unit}: {field} {have:?}, its unit bounds it to {want:?}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overall_exposure_is_read_from_the_report() {
        let report = "✗ PrivateNetwork= … 0.5\n\n→ Overall exposure level for \
                      srap-receiver.service: 2.2 OK 🙂\n";
        assert_eq!(overall_exposure(report), Some(2.2));
        assert_eq!(overall_exposure("nothing"), None);
    }
}
