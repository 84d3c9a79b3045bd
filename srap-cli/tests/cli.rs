//! The `srap` binary end to end: real processes, real output, real errors.

use std::process::Command;

use serde_json::Value;
use srap_common::rss::{FlowTuple, RssModel, embedded_default};
use temp_path::TempPath;

const MS_KEY: &str =
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn srap(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_srap"))
        .args(args)
        .output()
        .unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[track_caller]
fn fails_with(args: &[&str], needles: &[&str]) {
    let out = srap(args);
    assert!(!out.ok, "{args:?} succeeded: {}", out.stdout);
    for needle in needles {
        assert!(
            out.stderr.contains(needle),
            "stderr of {args:?} lacks `{needle}`: {}",
            out.stderr
        );
    }
}

/// A file in the OS temp dir, removed on drop.
mod temp_path {
    use std::{io::Write as _, path::PathBuf, sync::atomic::AtomicU32};

    pub struct TempPath(pub PathBuf);

    impl TempPath {
        pub fn with(contents: &str) -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("srap-cli-test-{}-{n}.json", std::process::id()));
            std::fs::File::create(&path)
                .unwrap()
                .write_all(contents.as_bytes())
                .unwrap();
            Self(path)
        }

        pub fn as_str(&self) -> &str {
            self.0.to_str().unwrap()
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn hash_prints_the_published_vectors() {
    let v4 = srap(&[
        "hash",
        "--key",
        MS_KEY,
        "--src",
        "66.9.149.187:2794",
        "--dst",
        "161.142.100.80:1766",
    ]);
    assert!(v4.ok, "{}", v4.stderr);
    assert_eq!(v4.stdout, "0x51ccc178\n");
    let colons: Vec<String> = MS_KEY
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let v6_ip_only = srap(&[
        "hash",
        "--key",
        &colons.join(":"),
        "--src",
        "[3ffe:2501:200:1fff::7]:2794",
        "--dst",
        "[3ffe:2501:200:3::1]:1766",
        "--fields",
        "sd",
    ]);
    assert_eq!(v6_ip_only.stdout, "0x2cc18cd5\n");
}

#[test]
fn hash_refuses_bad_input_by_name() {
    fails_with(
        &[
            "hash",
            "--key",
            "6d:5a:zz",
            "--src",
            "1.1.1.1:1",
            "--dst",
            "2.2.2.2:2",
        ],
        &["--key", "`zz`"],
    );
    fails_with(
        &[
            "hash",
            "--key",
            MS_KEY,
            "--src",
            "1.1.1.1:1",
            "--dst",
            "[::1]:2",
        ],
        &["different address families"],
    );
    fails_with(
        &[
            "hash",
            "--key",
            MS_KEY,
            "--src",
            "1.1.1.1:1",
            "--dst",
            "2.2.2.2:2",
            "--fields",
            "sdq",
        ],
        &["--fields", "`q`"],
    );
    fails_with(
        &[
            "hash",
            "--key",
            MS_KEY,
            "--src",
            "1.1.1.1:1",
            "--dst",
            "2.2.2.2:2",
            "--xfrm",
            "odd",
        ],
        &["--xfrm"],
    );
    fails_with(
        &[
            "hash",
            "--key",
            MS_KEY,
            "--src",
            "1.1.1.1",
            "--dst",
            "2.2.2.2:2",
        ],
        &["--src"],
    );
}

#[test]
fn predict_json_lands_sixteen_flows_on_sixteen_cpus() {
    let out = srap(&[
        "predict",
        "--src",
        "10.0.0.1",
        "--dst",
        "10.0.0.2:5201",
        "--flows",
        "16",
        "--json",
    ]);
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stderr.contains("embedded 32-queue receiver"));
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan["distinct_cpus"], 16);
    // Check every flow independently with the model, not with the CLI's own numbers.
    let model = RssModel::from_description(&embedded_default()).unwrap();
    let mut cpus = std::collections::BTreeSet::new();
    for flow in plan["flows"].as_array().unwrap() {
        let port = flow["port"].as_u64().unwrap() as u16;
        let tuple = FlowTuple::new(
            "10.0.0.1".parse().unwrap(),
            port,
            "10.0.0.2".parse().unwrap(),
            5201,
        )
        .unwrap();
        let landing = model.landing(&tuple);
        assert_eq!(flow["hash"], format!("0x{:08x}", landing.hash));
        assert_eq!(flow["index"], landing.index);
        assert_eq!(flow["queue"], landing.queue);
        assert_eq!(flow["cpu"], landing.cpu);
        cpus.insert(landing.cpu);
    }
    assert_eq!(cpus.len(), 16);
}

#[test]
fn predict_reads_a_description_file_and_prints_a_table() {
    let key: String = MS_KEY.to_string();
    // Four queues, two per CPU: only two distinct CPUs exist.
    let file = TempPath::with(&format!(
        r#"{{"key":"{key}","indir":[0,1,2,3],"queue_cpu":[4,4,9,9]}}"#
    ));
    let out = srap(&[
        "predict",
        "--rss",
        file.as_str(),
        "--src",
        "fd00::1",
        "--dst",
        "[fd00::2]:443",
        "--flows",
        "5",
    ]);
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stdout.contains("2 CPUs reachable over 4 queues"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("5 flows on 2 distinct CPUs (busiest CPU: 3 flows)"),
        "{}",
        out.stdout
    );
}

#[test]
fn predict_refuses_bad_descriptions_and_impossible_plans() {
    let bad = TempPath::with(r#"{"key":"6d5a","indir":[0]}"#);
    fails_with(
        &[
            "predict",
            "--rss",
            bad.as_str(),
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2:1",
            "--flows",
            "2",
        ],
        &[bad.as_str(), "field `key`", "at least 40"],
    );
    fails_with(
        &[
            "predict",
            "--rss",
            "/nonexistent/rss.json",
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2:1",
            "--flows",
            "2",
        ],
        &["cannot read the RSS description /nonexistent/rss.json"],
    );
    fails_with(
        &[
            "predict",
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2:1",
            "--flows",
            "9",
            "--port-range",
            "2000-2007",
        ],
        &["9 flows", "only 8 ports"],
    );
    fails_with(
        &[
            "predict", "--src", "10.0.0.1", "--dst", "[::2]:1", "--flows", "2",
        ],
        &["different address families"],
    );
    fails_with(
        &[
            "predict",
            "--src",
            "10.0.0.1",
            "--dst",
            "10.0.0.2:1",
            "--flows",
            "0",
        ],
        &["--flows"],
    );
}

/// An error says each cause once, on one line, and never prints a
/// backtrace, even with RUST_BACKTRACE set as on many developers' shells.
#[test]
fn errors_say_each_cause_once_without_a_backtrace() {
    let truncated = TempPath::with("{\"key\": ");
    for (rss, cause) in [
        (truncated.as_str(), "EOF while parsing"),
        ("/nonexistent/rss.json", "No such file or directory"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_srap"))
            .args(["predict", "--rss", rss, "--src", "10.0.0.1"])
            .args(["--dst", "10.0.0.2:1", "--flows", "2"])
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{rss}");
        assert_eq!(stderr.matches(cause).count(), 1, "{stderr}");
        assert_eq!(stderr.matches(rss).count(), 1, "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("srap: error: "), "{stderr}");
        assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    }
}

#[test]
fn odds_reproduces_the_one_percent_figure() {
    let out = srap(&["odds", "--flows", "16", "--cpus", "32"]);
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stdout.contains("1.04 % collision-free"),
        "{}",
        out.stdout
    );
}

#[test]
fn odds_simulation_agrees_with_the_formula() {
    let out = srap(&[
        "odds", "--flows", "4", "--cpus", "8", "--trials", "4000", "--seed", "7", "--json",
    ]);
    assert!(out.ok, "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let analytic = report["analytic_collision_free"].as_f64().unwrap();
    assert!((analytic - 0.41015625).abs() < 1e-9, "{analytic}");
    let simulated = report["kernel_ports"]["collision_free_rate"]
        .as_f64()
        .unwrap();
    // 4000 trials: the standard error is under 0.008; allow five of them.
    assert!(
        (simulated - analytic).abs() < 0.04,
        "simulated {simulated} vs {analytic}"
    );
    assert_eq!(report["srap_ports"]["collision_free_rate"], 1.0);
    fails_with(&["odds", "--flows", "4"], &["--cpus"]);
    fails_with(&["odds", "--flows", "0", "--cpus", "4"], &["--flows"]);
}

#[test]
fn usage_errors_do_not_panic() {
    let out = Command::new(env!("CARGO_BIN_EXE_srap"))
        .arg("predict")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

#[test]
fn completions_cover_every_subcommand_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _srap"),
        ("zsh", "#compdef srap"),
        ("fish", "complete -c srap"),
    ] {
        let out = srap(&["completions", shell]);
        assert!(out.ok, "{shell}: {}", out.stderr);
        assert!(out.stdout.contains(marker), "{shell}: no `{marker}`");
        for sub in ["hash", "predict", "odds", "exec", "rss", "status"] {
            assert!(out.stdout.contains(sub), "{shell}: no `{sub}`");
        }
    }
    fails_with(
        &["completions", "nushell"],
        &["invalid value 'nushell'", "bash"],
    );
}

#[test]
fn manpages_writes_one_page_per_command() {
    let dir = std::env::temp_dir().join(format!("srap-cli-man-{}", std::process::id()));
    let out = srap(&["manpages", dir.to_str().unwrap(), "--section", "1"]);
    let pages: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.ok, "{}", out.stderr);
    for page in [
        "srap.1",
        "srap-hash.1",
        "srap-rss-show.1",
        "srap-completions.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "no {page} in {pages:?}");
        assert!(
            out.stdout.contains(page),
            "{page} not printed: {}",
            out.stdout
        );
    }
    assert!(!pages.iter().any(|p| p.contains("manpages")), "{pages:?}");
    fails_with(
        &["manpages", "/proc/no-such-dir/man"],
        &["creating the man page directory /proc/no-such-dir/man"],
    );
}

/// `srap … | head -1`: the reader closes the pipe after one line, and srap
/// ends at its next write as Unix tools do (SIGPIPE), without a panic.
#[test]
fn a_reader_that_stops_early_ends_srap_quietly() {
    use std::{
        io::{BufRead as _, BufReader},
        os::unix::process::ExitStatusExt as _,
        process::Stdio,
    };

    let mut child = Command::new(env!("CARGO_BIN_EXE_srap"))
        .args(["predict", "--src", "10.0.0.1", "--dst", "10.0.0.2:5201"])
        .args(["--flows", "2000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("srap runs");
    let stdout = child.stdout.take().expect("its stdout");
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("a first line");
    // The read end is dropped here: srap's later writes meet a closed pipe.
    let out = child.wait_with_output().expect("srap ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!first.is_empty());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}
