//! The .rpm, written by the `rpm` crate (the library cargo-generate-rpm
//! uses) from the staged tree: no spec file, no rpmbuild. Its name,
//! description and maintainer come from `deploy/debian/control`, its
//! files and their flags from [`contents::entries`], its scriptlets from
//! [`scripts`].

use std::path::{Path, PathBuf};

use ::rpm::{BuildConfig, CompressionType, Dependency, FileOptions, PackageBuilder, Scriptlet};
use anyhow::{Context as _, Result};

use super::{contents, elf, files::read, scripts, stage::version_of};
use crate::exec::workspace_root;

/// The release of this version's package (rpm's `-1` after the version).
const RELEASE: &str = "1";

/// The .rpm and the tree it was written from, which the RPM check compares
/// both packages to.
pub struct BuiltRpm {
    pub path: PathBuf,
    pub stage: PathBuf,
}

/// Writes `NAME-VERSION-RELEASE.ARCH.rpm` of `stage` into `out`.
pub fn build(stage: &Path, out: &Path) -> Result<BuiltRpm> {
    let version = version_of(&stage.join("usr/bin/srap"))?;
    let arch = std::env::consts::ARCH;
    let control = Control::read()?;
    let mut builder = PackageBuilder::new(
        contents::PACKAGE,
        &version,
        env!("CARGO_PKG_LICENSE"),
        arch,
        &control.summary,
    );
    builder
        .using_config(BuildConfig::v4().compression(CompressionType::Gzip))
        .release(RELEASE)
        .description(&control.description)
        .packager(&control.maintainer)
        .vendor(&control.maintainer)
        .group("Applications/System")
        .build_host(build_host()?)
        .add_changelog_entry(
            format!("{} - {version}-{RELEASE}", control.maintainer),
            "- Built by `cargo xtask package --rpm` (docs/deploying.md)",
            changelog_time()?,
        );
    add_files(&mut builder, stage)?;
    add_scriptlets(&mut builder)?;
    if let Some(glibc) = elf::glibc_required(&contents::binaries_in(stage))? {
        builder.requires(Dependency::greater_eq(contents::GLIBC.1, glibc));
    }
    for (_, name) in contents::REQUIRES {
        builder.requires(Dependency::any(*name));
    }
    for (_, name) in contents::RECOMMENDS {
        builder.recommends(Dependency::any(*name));
    }
    let package = builder.build().context("building the .rpm")?;
    let path = out.join(format!(
        "{}-{version}-{RELEASE}.{arch}.rpm",
        contents::PACKAGE
    ));
    package
        .write_file(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(BuiltRpm {
        path,
        stage: stage.to_owned(),
    })
}

/// Every entry of the staged tree, root's, with its mode and flags.
fn add_files(builder: &mut PackageBuilder, stage: &Path) -> Result<()> {
    for entry in contents::entries(stage)? {
        let mode = u16::try_from(entry.mode).context("a mode beyond 16 bits")?;
        let options = if entry.dir {
            FileOptions::dir(&entry.path)
        } else {
            FileOptions::new(&entry.path)
        }
        .permissions(mode)
        .user(contents::OWNER)
        .group(contents::OWNER);
        // rpmbuild marks man pages and the doc directory `%doc` itself.
        let doc = !entry.dir
            && ["/usr/share/man/", "/usr/share/doc/"]
                .iter()
                .any(|dir| entry.path.starts_with(dir));
        let options = if entry.config {
            options.config().noreplace()
        } else if doc {
            options.doc()
        } else {
            options
        };
        if entry.dir {
            builder.with_dir_entry(options)?;
        } else {
            let source = stage.join(entry.path.trim_start_matches('/'));
            builder
                .with_file(&source, options)
                .with_context(|| format!("adding {}", source.display()))?;
        }
    }
    Ok(())
}

fn add_scriptlets(builder: &mut PackageBuilder) -> Result<()> {
    for phase in scripts::RPM_PHASES {
        let script = Scriptlet::new(scripts::rpm_scriptlet(*phase)?);
        match phase {
            scripts::RpmPhase::Post => builder.post_install_script(script),
            scripts::RpmPhase::PreUn => builder.pre_uninstall_script(script),
            scripts::RpmPhase::PostUn => builder.post_uninstall_script(script),
        };
    }
    Ok(())
}

/// The changelog's one entry is dated at the last commit (a build of the
/// same commit is the same), or now outside a git checkout.
fn changelog_time() -> Result<u32> {
    let mut git = std::process::Command::new("git");
    git.args(["log", "-1", "--format=%ct"])
        .current_dir(workspace_root());
    let committed = crate::exec::stdout_of(&mut git).and_then(|s| s.trim().parse().ok());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_secs();
    u32::try_from(committed.unwrap_or(now)).context("a time beyond 2106")
}

/// This machine's name, which rpm records (`rpm -qi`: Build Host).
fn build_host() -> Result<String> {
    let name = read(Path::new("/proc/sys/kernel/hostname"))?;
    Ok(name.trim().to_owned())
}

/// What the .deb's control template says of the package, for the .rpm.
struct Control {
    summary: String,
    description: String,
    maintainer: String,
}

impl Control {
    fn read() -> Result<Self> {
        let path = workspace_root().join("deploy/debian/control");
        let text = read(&path)?;
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
                .map(str::to_owned)
                .with_context(|| format!("{} has no {name} field", path.display()))
        };
        // The description's continuation lines, one space in; " ." is an
        // empty line.
        let description: Vec<&str> = text
            .lines()
            .skip_while(|line| !line.starts_with("Description:"))
            .skip(1)
            .map_while(|line| line.strip_prefix(' '))
            .map(|line| if line == "." { "" } else { line })
            .collect();
        Ok(Self {
            summary: field("Description")?,
            description: description.join("\n"),
            maintainer: field("Maintainer")?,
        })
    }
}
