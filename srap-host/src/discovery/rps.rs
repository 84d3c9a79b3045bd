//! RPS: when `/sys/class/net/DEV/queues/rx-N/rps_cpus` is set, packets of
//! queue N are processed on a CPU of that mask, not on the one that took the
//! interrupt — so the mask, not the IRQ affinity, says where a flow lands.

use thiserror::Error;

/// Text that is not a CPU mask.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuMaskError {
    #[error("`{group}` in CPU mask `{text}` is not a 32-bit hex group")]
    NotAGroup { group: String, text: String },
    #[error("`{group}` in CPU mask `{text}` is not hex")]
    NotHex { group: String, text: String },
    #[error("CPU mask `{text}` is implausibly long")]
    TooLong { text: String },
}

/// The CPUs of a `rps_cpus` mask: comma-separated 32-bit hex groups, most
/// significant first (`00000000,0000000f` = CPUs 0-3). Empty when RPS is off.
pub fn parse_cpu_mask(text: &str) -> Result<Vec<u32>, CpuMaskError> {
    let text = text.trim();
    let groups: Vec<&str> = text.split(',').collect();
    let mut cpus = Vec::new();
    for (position, group) in groups.iter().rev().enumerate() {
        if group.is_empty() || group.len() > 8 {
            return Err(CpuMaskError::NotAGroup {
                group: (*group).into(),
                text: text.into(),
            });
        }
        let bits = u32::from_str_radix(group, 16).map_err(|_| CpuMaskError::NotHex {
            group: (*group).into(),
            text: text.into(),
        })?;
        let base = u32::try_from(position)
            .ok()
            .and_then(|p| p.checked_mul(32))
            .ok_or_else(|| CpuMaskError::TooLong { text: text.into() })?;
        cpus.extend(
            (0..32)
                .filter(|bit| bits & (1 << bit) != 0)
                .map(|bit| base + bit),
        );
    }
    cpus.sort_unstable();
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(parse_cpu_mask("0\n").unwrap(), Vec::<u32>::new());
        assert_eq!(
            parse_cpu_mask("00000000,00000000").unwrap(),
            Vec::<u32>::new()
        );
        assert_eq!(parse_cpu_mask("f").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpu_mask("4").unwrap(), vec![2]);
        assert_eq!(parse_cpu_mask("00000001,80000000\n").unwrap(), vec![31, 32]);
        assert_eq!(
            parse_cpu_mask("00000100,00000000,00000000").unwrap(),
            vec![72]
        );
    }

    #[test]
    fn garbage_masks_are_errors() {
        for bad in ["", "xyz", "1,,2", "123456789", "0x1", "-1"] {
            assert!(parse_cpu_mask(bad).is_err(), "`{bad}` parsed");
        }
    }
}
