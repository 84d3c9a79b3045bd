//! `--pacing-rate` values, in the units `tc` uses (`25gbit`, `3gbps`).

use std::str::FromStr;

use thiserror::Error;

/// A pacing rate in bytes per second, as `SO_MAX_PACING_RATE` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacingRate(pub u64);

/// Units accepted after the number: (suffix, bytes per second per unit ×8),
/// i.e. in bits per second, so that byte units are exact too.
const UNITS: &[(&str, u128)] = &[
    ("tibit", 1 << 40),
    ("gibit", 1 << 30),
    ("mibit", 1 << 20),
    ("kibit", 1 << 10),
    ("tbit", 1_000_000_000_000),
    ("gbit", 1_000_000_000),
    ("mbit", 1_000_000),
    ("kbit", 1_000),
    ("bit", 1),
    ("tbps", 8 * 1_000_000_000_000),
    ("gbps", 8 * 1_000_000_000),
    ("mbps", 8 * 1_000_000),
    ("kbps", 8 * 1_000),
    ("bps", 8),
];

/// Why a text is not a pacing rate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RateError {
    #[error("`{text}` has no unit: write e.g. 25gbit (bits/s) or 3gbps (bytes/s), as tc does")]
    NoUnit { text: String },
    #[error(
        "`{unit}` in `{text}` is not a rate unit: use bit, kbit, mbit, gbit, tbit \
         (or kibit…), or bps, kbps, mbps, gbps, tbps for bytes/s"
    )]
    NotAUnit { unit: String, text: String },
    #[error("`{number}` in `{text}` is not a number")]
    NotANumber { number: String, text: String },
    #[error("`{text}` is out of range: a pacing rate is between 1 byte/s and 2^64 bytes/s")]
    OutOfRange { text: String },
}

impl FromStr for PacingRate {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let lower = text.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| RateError::NoUnit { text: text.into() })?;
        let (number, unit) = lower.split_at(split);
        let bits_per_unit = UNITS
            .iter()
            .find(|(suffix, _)| *suffix == unit)
            .map(|(_, bits)| *bits)
            .ok_or_else(|| RateError::NotAUnit {
                unit: unit.into(),
                text: text.into(),
            })?;
        let value: f64 = number.parse().map_err(|_| RateError::NotANumber {
            number: number.into(),
            text: text.into(),
        })?;
        let bytes = value * bits_per_unit as f64 / 8.0;
        if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
            return Err(RateError::OutOfRange { text: text.into() });
        }
        Ok(Self(bytes.round() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::PacingRate;

    #[test]
    fn tc_units() {
        assert_eq!("25gbit".parse(), Ok(PacingRate(3_125_000_000)));
        assert_eq!("1.5Gbit".parse(), Ok(PacingRate(187_500_000)));
        assert_eq!("3gbps".parse(), Ok(PacingRate(3_000_000_000)));
        assert_eq!("8kibit".parse(), Ok(PacingRate(1024)));
        assert_eq!("800bit".parse(), Ok(PacingRate(100)));
    }

    #[test]
    fn bad_rates_say_why() {
        for bad in ["25", "25gb", "gbit", "0bit", "1.2.3gbit", ""] {
            let err = bad.parse::<PacingRate>().unwrap_err().to_string();
            assert!(!err.is_empty(), "{bad}");
        }
    }
}
