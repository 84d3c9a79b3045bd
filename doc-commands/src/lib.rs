//! The command lines README.md and `docs/*.md` show, kept honest.
//!
//! Every SRAP command the documentation shows was run to capture its output,
//! and flags, once landed, stay stable: a renamed flag or subcommand must not
//! leave a page showing one that no longer exists. [`documented`] finds every
//! command line of a ```console or ```sh block ([`markdown`]), splits it as
//! the shell would and takes off what only says where it runs ([`shell`]),
//! and says which binary it is for. [`check`] parses those of one binary with
//! that binary's own clap definition: each binary crate (`srap`,
//! `srap-agent`, `srap-lab`, `cargo xtask`) runs it in a unit test against its `Cli`, so
//! the failure names the file, the line and clap's message.
//!
//! A command clap itself refuses in the documentation (its output starts with
//! clap's `error: `) must still be refused, with the same first line.
//! Commands of other tools (`iperf3`, `dpkg`, …) are left alone, each for the
//! reason in [`OTHER_TOOLS`]; a program that is neither SRAP's nor listed
//! there is reported, so a misspelt `srap-agnet` cannot slip through.

use std::{
    fmt,
    path::{Path, PathBuf},
};

pub use clap;

pub mod markdown;
pub mod shell;

/// The unit test a binary crate runs against its own clap `Cli`:
/// `doc_commands::parse_test!(doc_commands::Program::Srap, super::Cli);`
/// inside its `#[cfg(test)]` module. Fails with [`check`]'s message.
#[macro_export]
macro_rules! parse_test {
    ($program:expr, $cli:ty) => {
        #[test]
        fn the_documented_command_lines_parse() {
            let parse =
                |argv: &[String]| <$cli as $crate::clap::Parser>::try_parse_from(argv).map(drop);
            match $crate::check($program, parse) {
                Ok(checked) => println!("{checked} documented command lines parse"),
                Err(failures) => panic!("{failures}"),
            }
        }
    };
}

/// SRAP's command-line programs, each with its own clap `Cli`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `srap` (srap-cli).
    Srap,
    /// `srap-agent`.
    Agent,
    /// `srap-lab` (the lab, its own binary: not in the root daemon).
    Lab,
    /// `cargo xtask`.
    Xtask,
}

impl Program {
    /// The name its clap `Cli` carries, which is `argv[0]` below.
    pub fn name(self) -> &'static str {
        match self {
            Self::Srap => "srap",
            Self::Agent => "srap-agent",
            Self::Lab => "srap-lab",
            Self::Xtask => "cargo xtask",
        }
    }
}

/// Programs the documentation runs that are not SRAP's, and why their
/// command lines are not checked here.
pub const OTHER_TOOLS: &[(&str, &str)] = &[
    (
        "cargo",
        "cargo's own subcommands (build, run, bench, test): their flags are cargo's",
    ),
    ("cd", "changes the directory the next command runs in"),
    ("curl", "reads the receiver agent's /metrics"),
    (
        "dpkg",
        "Debian's package manager (installs, removes the .deb)",
    ),
    (
        "dpkg-deb",
        "Debian's tool that reads the .deb's fields and files",
    ),
    (
        "dnf",
        "the RHEL family's package manager (installs the .rpm)",
    ),
    ("$EDITOR", "the administrator's editor"),
    (
        "firewall-cmd",
        "firewalld on RHEL-family hosts, opening the receiver's peer port",
    ),
    (
        "ip",
        "iproute2: the source rules and table routes a host with several NICs needs",
    ),
    (
        "ansible-galaxy",
        "Ansible's collection installer, installing deploy/ansible (its flags are Ansible's)",
    ),
    (
        "ansible-playbook",
        "Ansible, running the collection's playbooks on a site (its flags are Ansible's)",
    ),
    (
        "helm",
        "Helm, installing the chart on a cluster (its flags are Helm's)",
    ),
    (
        "kubectl",
        "Kubernetes' client, labelling the nodes the chart's DaemonSets run on",
    ),
    (
        "kubernetes-validate",
        "checks rendered objects against Kubernetes' own schemas",
    ),
    ("ls", "lists a file the package made, with its mode"),
    (
        "rpm",
        "the RHEL family's package tool (installs, queries the .rpm)",
    ),
    (
        "sysctl",
        "the kernel's rp_filter and ARP settings on a host with several NICs",
    ),
    ("systemctl", "systemd, starting a packaged agent"),
    (
        "systemd-analyze",
        "systemd's own reading of a unit (its exposure score)",
    ),
];

/// What a documented command line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runs {
    /// SRAP's programs with these arguments (`argv[0]` is the program's
    /// name). `cargo xtask lab -- ARGS` is also `srap-lab ARGS`, and
    /// `cargo xtask run -- ARGS` is `srap-agent ARGS`.
    Ours(Vec<(Program, Vec<String>)>),
    /// A tool of [`OTHER_TOOLS`], with the reason it is not checked.
    Other {
        program: String,
        reason: &'static str,
    },
    /// Neither SRAP's nor a known other tool: a typo, or a tool to add to
    /// [`OTHER_TOOLS`] with its reason.
    Unknown(String),
}

/// What the documentation shows a command doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// It runs (or prints its help or version).
    Accepted,
    /// clap refuses it, with this first line (`error: invalid value …`).
    Refused(String),
}

/// One command line of the documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Documented {
    /// Where it is, relative to the workspace: `docs/lab.md`.
    pub file: PathBuf,
    pub line: usize,
    /// As written, without its prompt.
    pub text: String,
    pub runs: Runs,
    pub expect: Expect,
}

impl fmt::Display for Documented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: `{}`", self.file.display(), self.line, self.text)
    }
}

/// The workspace this crate belongs to, whose README.md and docs/ are read.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// README.md and every `.md` file under docs/, in a stable order.
pub fn pages(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut found = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(root.join(&dir))
            .map_err(|e| format!("reading {}: {e}", root.join(&dir).display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?;
            let relative = dir.join(entry.file_name());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(relative);
            } else if relative.extension().is_some_and(|e| e == "md") {
                found.push(relative);
            }
        }
    }
    found[1..].sort();
    Ok(found)
}

/// Every command line of README.md and docs/ under `root`. Fails, naming
/// each place, on a line the shell could not split or a `$ ` prompt in a
/// block that holds no commands.
pub fn documented(root: &Path) -> Result<Vec<Documented>, String> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for file in pages(root)? {
        let page = std::fs::read_to_string(root.join(&file))
            .map_err(|e| format!("reading {}: {e}", root.join(&file).display()))?;
        for block in markdown::blocks(&page) {
            for line in block.stray_prompts() {
                problems.push(format!(
                    "{}:{line}: a `$ ` command in a ```{} block, which nothing checks: \
                     make the block ```console",
                    file.display(),
                    block.info
                ));
            }
            for command in block.commands() {
                match shell::first_command(&command.text) {
                    Ok(words) => found.push(Documented {
                        file: file.clone(),
                        line: command.line,
                        runs: runs(&words),
                        expect: expect(command.output.as_deref()),
                        text: command.text,
                    }),
                    Err(e) => problems.push(format!("{}:{}: {e}", file.display(), command.line)),
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(problems.join("\n"))
    }
}

/// Which program the words run, with what arguments.
fn runs(words: &[String]) -> Runs {
    let Some(first) = words.first() else {
        return Runs::Unknown(String::new());
    };
    let program = first.rsplit('/').next().unwrap_or(first);
    let rest = || words[1..].to_vec();
    match program {
        "srap" => Runs::Ours(vec![(Program::Srap, argv(Program::Srap, rest()))]),
        "srap-agent" => Runs::Ours(vec![(Program::Agent, argv(Program::Agent, rest()))]),
        "srap-lab" => Runs::Ours(vec![(Program::Lab, argv(Program::Lab, rest()))]),
        "cargo" if words.get(1).is_some_and(|w| w == "xtask") => xtask(&words[2..]),
        _ => match OTHER_TOOLS.iter().find(|(name, _)| *name == program) {
            Some((_, reason)) => Runs::Other {
                program: program.to_owned(),
                reason,
            },
            None => Runs::Unknown(program.to_owned()),
        },
    }
}

/// `cargo xtask ARGS`, and the agent's or the lab's command line when it
/// runs one.
fn xtask(args: &[String]) -> Runs {
    let mut runs = vec![(Program::Xtask, argv(Program::Xtask, args.to_vec()))];
    let passed = |from: usize| {
        let rest = args.get(from..).unwrap_or_default();
        rest.strip_prefix(&["--".to_owned()])
            .unwrap_or(rest)
            .to_vec()
    };
    match args.first().map(String::as_str) {
        Some("lab") => runs.push((Program::Lab, argv(Program::Lab, passed(1)))),
        Some("run") => runs.push((Program::Agent, argv(Program::Agent, passed(1)))),
        _ => {}
    }
    Runs::Ours(runs)
}

fn argv(program: Program, args: Vec<String>) -> Vec<String> {
    std::iter::once(program.name().to_owned())
        .chain(args)
        .collect()
}

/// A command whose shown output starts with clap's `error: ` is one the
/// documentation shows clap refusing.
fn expect(output: Option<&str>) -> Expect {
    match output {
        Some(line) if line.starts_with("error: ") => Expect::Refused(line.to_owned()),
        _ => Expect::Accepted,
    }
}

/// Parses every documented command line of `program` with `parse` (its
/// clap `Cli::try_parse_from`, result dropped). Returns how many were
/// checked; fails naming each file and line whose command clap now treats
/// otherwise than the documentation shows, with clap's message, and when
/// none of `program` was found (the extraction would be broken).
pub fn check(
    program: Program,
    parse: impl Fn(&[String]) -> Result<(), clap::Error>,
) -> Result<usize, String> {
    check_pages(&workspace_root(), program, parse)
}

/// [`check`] on the README.md and docs/ under `root`.
pub fn check_pages(
    root: &Path,
    program: Program,
    parse: impl Fn(&[String]) -> Result<(), clap::Error>,
) -> Result<usize, String> {
    let mut checked = 0;
    let mut failures = Vec::new();
    for doc in documented(root)? {
        let Runs::Ours(runs) = &doc.runs else {
            continue;
        };
        for (_, args) in runs.iter().filter(|(p, _)| *p == program) {
            checked += 1;
            if let Err(why) = verdict(parse(args), &doc.expect) {
                failures.push(format!("{doc}\n{}", indented(why.trim_end())));
            }
        }
    }
    if checked == 0 {
        return Err(format!(
            "no command line of `{}` found in README.md or docs/ under {}",
            program.name(),
            root.display()
        ));
    }
    if !failures.is_empty() {
        return Err(format!(
            "{} of {checked} documented command lines of `{}` are not what clap accepts now \
             (fix the page, or the flag that changed):\n\n{}",
            failures.len(),
            program.name(),
            failures.join("\n\n")
        ));
    }
    Ok(checked)
}

/// `text` with every non-empty line indented, under the place it is about.
fn indented(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line {
            "" => String::new(),
            line => format!("    {line}"),
        })
        .collect();
    lines.join("\n")
}

/// Whether clap's `result` is what the documentation shows.
fn verdict(result: Result<(), clap::Error>, expect: &Expect) -> Result<(), String> {
    use clap::error::ErrorKind;
    match (result, expect) {
        (Ok(()), Expect::Accepted) => Ok(()),
        (Err(e), Expect::Accepted) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(()),
            _ => Err(e.render().to_string()),
        },
        (Ok(()), Expect::Refused(shown)) => Err(format!(
            "the page shows clap refusing it (`{shown}`), but clap accepts it now"
        )),
        (Err(e), Expect::Refused(shown)) => {
            let said = e.render().to_string();
            if said.lines().next() == Some(shown.as_str()) {
                Ok(())
            } else {
                Err(format!("the page shows `{shown}`; clap now says:\n{said}"))
            }
        }
    }
}

#[cfg(test)]
mod tests;
