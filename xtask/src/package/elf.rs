//! What a packaged binary needs from the C library of the host it runs on,
//! read from the ELF (`readelf --dynamic`, `objdump -T`): a binary linked
//! statically needs nothing; one linked against glibc needs, for each
//! symbol, the version it was linked with, and does not start where glibc
//! is older than the newest of those (`GLIBC_2.35` on RHEL 9's 2.34).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Result, bail, ensure};

use crate::exec::output_of;

/// The oldest glibc of the supported hosts: RHEL 8's (RHEL 9 has 2.34,
/// Debian 11 2.31, Ubuntu 20.04 2.31).
pub const OLDEST_GLIBC: (u32, u32) = (2, 28);

/// The libraries glibc itself is made of: what a binary linked against
/// it may load (Debian's `libc6`, the RHEL family's `glibc`).
const GLIBC_LIBRARIES: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

/// The glibc version `bins` need at least (their newest symbol version),
/// for the packages' dependency on it (`libc6 (>= …)`, `glibc >= …`);
/// None when they load no library. Fails on a library glibc does not
/// hold: the packages would need a dependency they do not declare.
pub fn glibc_required(bins: &[PathBuf]) -> Result<Option<String>> {
    let mut newest = None;
    for bin in bins {
        let dynamic = output_of(Command::new("readelf").arg("--dynamic").arg(bin))?;
        for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
            let library = line
                .split_once('[')
                .and_then(|(_, rest)| rest.split_once(']'))
                .map_or(line, |(name, _)| name);
            ensure!(
                GLIBC_LIBRARIES.contains(&library),
                "{} loads {library}, which no dependency of the packages provides",
                bin.display()
            );
        }
        newest = newest.max(newest_glibc(bin)?.map(|(version, _)| version));
    }
    Ok(newest.map(|(major, minor)| format!("{major}.{minor}")))
}

/// True when `bin` loads no shared library at all.
pub fn is_static(bin: &Path) -> Result<bool> {
    let dynamic = output_of(Command::new("readelf").arg("--dynamic").arg(bin))?;
    Ok(!dynamic.contains("(NEEDED)"))
}

/// The newest glibc version a symbol of `bin` needs, with that symbol;
/// None for a static binary or one with no versioned glibc symbol.
pub fn newest_glibc(bin: &Path) -> Result<Option<((u32, u32), String)>> {
    if is_static(bin)? {
        return Ok(None);
    }
    let symbols = output_of(Command::new("objdump").arg("-T").arg(bin))?;
    Ok(glibc_needs(&symbols).into_iter().max())
}

/// What `bin` needs of glibc, checked against [`OLDEST_GLIBC`]: `static`,
/// or `glibc 2.X` (the newest version a symbol needs). Fails naming the
/// symbol when one needs a newer glibc.
pub fn check_glibc(bin: &Path) -> Result<String> {
    if is_static(bin)? {
        return Ok("static".to_owned());
    }
    let Some((newest, symbol)) = newest_glibc(bin)? else {
        return Ok("no versioned glibc symbol".to_owned());
    };
    if newest > OLDEST_GLIBC {
        bail!(
            "{} needs GLIBC_{}.{} for `{symbol}`: newer than glibc {}.{}, the oldest \
             supported host's (RHEL 8); it would not start there",
            bin.display(),
            newest.0,
            newest.1,
            OLDEST_GLIBC.0,
            OLDEST_GLIBC.1
        );
    }
    Ok(format!("glibc {}.{}", newest.0, newest.1))
}

/// (version, symbol) of each glibc-versioned symbol in `objdump -T`'s
/// listing (`… DF *UND* … (GLIBC_2.34) __libc_start_main`; older binutils
/// print the version without the parentheses).
fn glibc_needs(listing: &str) -> Vec<((u32, u32), String)> {
    listing
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let version = fields.iter().find_map(|field| {
                field
                    .trim_matches(|c| c == '(' || c == ')')
                    .strip_prefix("GLIBC_")
            })?;
            let mut numbers = version.split('.').map(str::parse::<u32>);
            let major = numbers.next()?.ok()?;
            let minor = numbers.next()?.ok()?;
            let symbol = (*fields.last()?).to_owned();
            Some(((major, minor), symbol))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_glibc_symbol_is_found_with_its_name() {
        let listing = "\
/usr/bin/srap-agent:     file format elf64-x86-64

DYNAMIC SYMBOL TABLE:
0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.34) __libc_start_main
0000000000000000      DF *UND*\t0000000000000000  GLIBC_2.2.5 write
0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.35) __rseq_offset
0000000000000000  w   D  *UND*\t0000000000000000  Base        __gmon_start__
";
        let needs = glibc_needs(listing);
        assert_eq!(needs.len(), 3);
        assert_eq!(
            needs.iter().max(),
            Some(&((2, 35), "__rseq_offset".to_owned()))
        );
        assert!(needs.contains(&((2, 2), "write".to_owned())));
        assert!((2, 34) > OLDEST_GLIBC && (2, 17) <= OLDEST_GLIBC);
    }

    /// On a real binary linked against this host's glibc (this test's
    /// own): the verdict follows its newest need, and a refusal names the
    /// symbol (here, with glibc 2.34 or later: `__libc_start_main`).
    #[test]
    fn a_binary_linked_against_this_glibc_is_judged_by_its_newest_symbol() {
        let me = std::env::current_exe().expect("the test binary");
        assert!(!is_static(&me).expect("readelf"));
        let listing = output_of(Command::new("objdump").arg("-T").arg(&me)).expect("objdump");
        let (newest, symbol) = glibc_needs(&listing).into_iter().max().expect("a need");
        match check_glibc(&me) {
            Ok(verdict) => {
                assert!(newest <= OLDEST_GLIBC);
                assert_eq!(verdict, format!("glibc {}.{}", newest.0, newest.1));
            }
            Err(err) => {
                assert!(newest > OLDEST_GLIBC);
                assert!(err.to_string().contains(&format!("`{symbol}`")), "{err}");
            }
        }
    }
}
