//! CPU lists in the kernel's syntax (`bitmap_parselist`, as in
//! `smp_affinity_list`, `/sys/devices/system/node/nodeN/cpulist`, `isolcpus=`
//! and SRAP's `--cpus`): `0-3,8,10-11`, with the stride form `0-15:2/4`
//! (the first 2 of every 4). Groups are separated by commas or whitespace,
//! as the kernel separates them. The one place SRAP reads and writes them.

use std::collections::BTreeSet;

use thiserror::Error;

/// CPU numbers stop below this: more than Linux can number (`NR_CPUS` is at
/// most 8192), so a larger one is garbage, not a machine.
pub const MAX_CPUS: u32 = 1 << 16;

/// A CPU list that does not parse, naming the group that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuListError {
    #[error("`{group}` in CPU list `{list}` is not a CPU number or range (e.g. 0-3,8)")]
    NotACpu { group: String, list: String },
    #[error("`{group}` in CPU list `{list}`: the range runs backwards")]
    Backwards { group: String, list: String },
    #[error("`{group}` in CPU list `{list}`: CPU numbers stop at {}", MAX_CPUS - 1)]
    TooLarge { group: String, list: String },
    #[error(
        "`{group}` in CPU list `{list}`: a stride is `:USED/GROUP` with 0 < USED <= GROUP \
         (e.g. 0-15:2/4)"
    )]
    BadStride { group: String, list: String },
    #[error("no CPUs given (e.g. 0-3,8)")]
    Empty,
}

/// The CPUs of `text`; an empty list (all whitespace) is an empty set, as
/// the kernel writes it for an empty mask.
pub fn parse(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let list = text.trim();
    let mut cpus = BTreeSet::new();
    for group in list
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|g| !g.is_empty())
    {
        cpus.extend(parse_group(group).map_err(|kind| kind(group.into(), list.into()))?);
    }
    Ok(cpus)
}

/// As [`parse`], for a list that must name at least one CPU (a flag).
pub fn parse_some(text: &str) -> Result<BTreeSet<u32>, CpuListError> {
    let cpus = parse(text)?;
    if cpus.is_empty() {
        return Err(CpuListError::Empty);
    }
    Ok(cpus)
}

/// `cpus` as the kernel writes a list: sorted, once each, runs as ranges.
pub fn format(cpus: impl IntoIterator<Item = u32>) -> String {
    let sorted: BTreeSet<u32> = cpus.into_iter().collect();
    let mut groups: Vec<String> = Vec::new();
    let mut run: Option<(u32, u32)> = None;
    for cpu in sorted {
        run = match run {
            Some((first, last)) if last.checked_add(1) == Some(cpu) => Some((first, cpu)),
            Some(done) => {
                groups.push(group_text(done));
                Some((cpu, cpu))
            }
            None => Some((cpu, cpu)),
        };
    }
    groups.extend(run.map(group_text));
    groups.join(",")
}

fn group_text((first, last): (u32, u32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

/// How a group is wrong, given the group and the whole list.
type Problem = fn(String, String) -> CpuListError;

/// One group: `N`, `A-B` or `A-B:USED/GROUP`.
fn parse_group(group: &str) -> Result<Vec<u32>, Problem> {
    let (range, stride) = match group.split_once(':') {
        Some((range, stride)) => (range, Some(stride)),
        None => (group, None),
    };
    let (first, last) = match range.split_once('-') {
        Some((first, last)) => (number(first)?, number(last)?),
        None => (number(range)?, number(range)?),
    };
    if first > last {
        return Err(|group, list| CpuListError::Backwards { group, list });
    }
    let (used, size) = match stride {
        None => (1, 1),
        Some(stride) => {
            let bad: Problem = |group, list| CpuListError::BadStride { group, list };
            let (used, size) = stride.split_once('/').ok_or(bad)?;
            let (used, size) = (number(used)?, number(size)?);
            if used == 0 || used > size {
                return Err(bad);
            }
            (used, size)
        }
    };
    Ok((first..=last)
        .filter(|cpu| (cpu - first) % size < used)
        .collect())
}

/// A CPU number below [`MAX_CPUS`].
fn number(text: &str) -> Result<u32, Problem> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(|group, list| CpuListError::NotACpu { group, list });
    }
    match text.parse::<u32>() {
        Ok(n) if n < MAX_CPUS => Ok(n),
        _ => Err(|group, list| CpuListError::TooLarge { group, list }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: &[u32]) -> BTreeSet<u32> {
        cpus.iter().copied().collect()
    }

    #[test]
    fn cpu_lists_parse_like_the_kernels() {
        assert_eq!(
            parse("0-3,8,10-11\n").expect("list"),
            set(&[0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse("5").expect("one"), set(&[5]));
        // The kernel writes an empty mask as an empty line.
        assert_eq!(parse("").expect("empty"), set(&[]));
        assert_eq!(parse(" \n").expect("empty"), set(&[]));
        // Groups separated by commas or whitespace, in any order, repeated.
        assert_eq!(
            parse(" 8, 0-1\t3 1,,2 ").expect("spaced"),
            set(&[0, 1, 2, 3, 8])
        );
        // Strides: the first USED of every GROUP CPUs of the range.
        assert_eq!(
            parse("0-15:2/4").expect("stride"),
            set(&[0, 1, 4, 5, 8, 9, 12, 13])
        );
        assert_eq!(parse("1-9:1/3").expect("stride"), set(&[1, 4, 7]));
        assert_eq!(parse("4:1/2").expect("stride"), set(&[4]));
    }

    #[test]
    fn errors_name_the_group_that_is_wrong() {
        let cases = [
            (
                "0-3,a",
                "`a` in CPU list `0-3,a` is not a CPU number or range",
            ),
            (
                "0-3,3-1",
                "`3-1` in CPU list `0-3,3-1`: the range runs backwards",
            ),
            (
                "0-99999999",
                "`0-99999999` in CPU list `0-99999999`: CPU numbers stop at 65535",
            ),
            ("0-", "`0-` in CPU list `0-` is not a CPU number or range"),
            ("-1", "`-1` in CPU list `-1` is not a CPU number or range"),
            ("+1", "`+1` in CPU list `+1` is not a CPU number or range"),
            ("0-7:3/2", "`0-7:3/2` in CPU list `0-7:3/2`: a stride is"),
            ("0-7:0/2", "`0-7:0/2` in CPU list `0-7:0/2`: a stride is"),
            ("0-7:1", "`0-7:1` in CPU list `0-7:1`: a stride is"),
        ];
        for (list, message) in cases {
            let err = parse(list).expect_err(list).to_string();
            assert!(err.starts_with(message), "{list}: {err}");
        }
        assert_eq!(parse_some(" ").unwrap_err(), CpuListError::Empty);
        assert_eq!(parse_some("2-3").expect("flag"), set(&[2, 3]));
    }

    #[test]
    fn lists_format_as_the_kernel_writes_them() {
        assert_eq!(format([8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
        assert_eq!(format([0, 1, 2, 3, 7]), "0-3,7");
        assert_eq!(format([5, 5]), "5");
        assert_eq!(format([]), "");
        assert_eq!(
            format([u32::MAX - 1, u32::MAX]),
            format!("{}-{}", u32::MAX - 1, u32::MAX)
        );
        // What is written reads back.
        let cpus = set(&[0, 2, 3, 4, 9, 63, 64, 65]);
        assert_eq!(parse(&format(cpus.clone())).expect("reads back"), cpus);
    }
}
