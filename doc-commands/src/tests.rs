use clap::Parser;

use super::*;

fn words(line: &str) -> Vec<String> {
    shell::first_command(line).unwrap()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_lab_through_xtask_is_also_the_labs_command_line() {
    assert_eq!(
        runs(&words("cargo xtask lab -- --experiment --trials 10")),
        Runs::Ours(vec![
            (
                Program::Xtask,
                strings(&["cargo xtask", "lab", "--", "--experiment", "--trials", "10"])
            ),
            (
                Program::Lab,
                strings(&["srap-lab", "--experiment", "--trials", "10"])
            ),
        ])
    );
    assert_eq!(
        runs(&words("cargo xtask run -- receiver --iface eth0")),
        Runs::Ours(vec![
            (
                Program::Xtask,
                strings(&["cargo xtask", "run", "--", "receiver", "--iface", "eth0"])
            ),
            (
                Program::Agent,
                strings(&["srap-agent", "receiver", "--iface", "eth0"])
            ),
        ])
    );
    assert_eq!(
        runs(&words("cargo xtask test")),
        Runs::Ours(vec![(Program::Xtask, strings(&["cargo xtask", "test"]))])
    );
}

#[test]
fn programs_are_ours_by_name_or_path_other_tools_or_unknown() {
    assert!(matches!(
        runs(&words("/usr/bin/srap --version")),
        Runs::Ours(r) if r == [(Program::Srap, strings(&["srap", "--version"]))]
    ));
    assert!(matches!(
        runs(&words("target/release/srap-agent detach")),
        Runs::Ours(r) if r[0].0 == Program::Agent
    ));
    assert!(matches!(
        runs(&words("cargo build --bins")),
        Runs::Other { program, .. } if program == "cargo"
    ));
    assert_eq!(
        runs(&words("srap-agnet sender")),
        Runs::Unknown("srap-agnet".into())
    );
}

/// A stand-in for a binary's `Cli`, to check [`check_pages`] on pages of
/// the test's own.
#[derive(Parser, Debug)]
#[command(name = "srap", version)]
struct Toy {
    #[command(subcommand)]
    command: ToyCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ToyCommand {
    Hash {
        #[arg(long)]
        key: String,
    },
    Completions {
        #[arg(value_parser = ["bash", "zsh"])]
        shell: String,
    },
}

fn toy(argv: &[String]) -> Result<(), clap::Error> {
    Toy::try_parse_from(argv).map(drop)
}

/// A README.md and docs/page.md in a directory of their own.
struct Pages(PathBuf);

impl Pages {
    fn new(readme: &str, page: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "doc-commands-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(dir.join("README.md"), readme).unwrap();
        std::fs::write(dir.join("docs/page.md"), page).unwrap();
        Self(dir)
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_flag_that_does_not_exist_fails_with_the_file_line_and_clap_message() {
    let pages = Pages::new(
        "# x\n\n```console\n$ srap hash --key 00\n0x0\n```\n",
        "Page.\n\n```console\n# srap hash --key 00 --bogus 1\nsrap: error: …\n```\n",
    );
    let error = check_pages(&pages.0, Program::Srap, toy).unwrap_err();
    assert!(
        error.contains("docs/page.md:4: `srap hash --key 00 --bogus 1`"),
        "{error}"
    );
    assert!(
        error.contains("error: unexpected argument '--bogus' found"),
        "{error}"
    );
    assert!(error.starts_with("1 of 2 documented"), "{error}");
}

#[test]
fn a_refusal_the_page_shows_must_still_be_clap_s() {
    let refused = "```console\n$ srap completions nushell\n\
                   error: invalid value 'nushell' for '<SHELL>'\n```\n";
    let pages = Pages::new("```console\n$ srap --version\nsrap 0.1.0\n```\n", refused);
    assert_eq!(check_pages(&pages.0, Program::Srap, toy), Ok(2));

    let accepted_now = "```console\n$ srap completions bash\nerror: invalid value\n```\n";
    let pages = Pages::new("", accepted_now);
    let error = check_pages(&pages.0, Program::Srap, toy).unwrap_err();
    assert!(error.contains("but clap accepts it now"), "{error}");
}

#[test]
fn no_command_of_the_program_at_all_is_a_failure() {
    let pages = Pages::new("```console\n$ cargo xtask test\n```\n", "");
    let error = check_pages(&pages.0, Program::Srap, toy).unwrap_err();
    assert!(error.contains("no command line of `srap` found"), "{error}");
}

#[test]
fn a_command_in_an_output_block_is_reported() {
    let pages = Pages::new("```text\n$ srap hash --key 00\n```\n", "");
    let error = documented(&pages.0).unwrap_err();
    assert!(error.contains("README.md:2: a `$ ` command in a ```text block"));
}

/// The real pages: every command line runs SRAP's programs or a tool of
/// [`OTHER_TOOLS`]. Prints what is left unchecked and why
/// (`cargo test -p doc-commands -- --nocapture`).
#[test]
fn every_documented_command_is_srap_s_or_a_known_tool() {
    let found = documented(&workspace_root()).unwrap_or_else(|e| panic!("{e}"));
    let mut unknown = Vec::new();
    for doc in &found {
        match &doc.runs {
            Runs::Ours(_) => {}
            Runs::Other { program, reason } => {
                println!("not checked: {doc}: {program}: {reason}");
            }
            Runs::Unknown(program) => unknown.push(format!("{doc}: `{program}`")),
        }
    }
    assert!(
        unknown.is_empty(),
        "programs that are neither SRAP's nor in OTHER_TOOLS (a typo, or a tool to list \
         there with the reason it is not checked):\n{}",
        unknown.join("\n")
    );
    let ours = found
        .iter()
        .filter(|d| matches!(d.runs, Runs::Ours(_)))
        .count();
    println!(
        "{ours} of {} command lines run SRAP's programs",
        found.len()
    );
}

/// README.md is the front door (issue 21): short, with the two commands on
/// its first screen; the manual lives in docs/.
#[test]
fn the_readme_is_a_front_door() {
    const MAX_LINES: usize = 300;
    const FIRST_SCREEN: usize = 40;
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= MAX_LINES,
        "README.md has {lines} lines, more than {MAX_LINES}: it is the front door; \
         put the manual in a page under docs/ and link it"
    );
    let first_screen: String = readme
        .lines()
        .take(FIRST_SCREEN)
        .collect::<Vec<_>>()
        .join("\n");
    for command in ["cargo xtask lab", "cargo xtask test"] {
        assert!(
            first_screen.contains(command),
            "README.md's first {FIRST_SCREEN} lines do not show `{command}`"
        );
    }
}
