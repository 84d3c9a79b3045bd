//! The Toeplitz hash, as NICs compute it for RSS.
//!
//! For every set bit `i` of the input (most significant bit of byte 0 first),
//! XOR the 32-bit window of the key that starts at bit `i`. [`hash_naive`] is
//! that definition, kept as the reference; [`ToeplitzTable`] precomputes, for
//! each input byte position, the XOR of windows for all 256 byte values, so a
//! hash costs one lookup per input byte.

use std::fmt;

use super::{error::KeyError, input::MAX_INPUT_LEN};

/// The shortest key SRAP accepts: an IPv6 4-tuple is 36 bytes of input, and the
/// window of its last bit reaches 4 bytes further.
pub const MIN_KEY_LEN: usize = MAX_INPUT_LEN + 4;

/// A validated RSS hash key.
#[derive(Clone, PartialEq, Eq)]
pub struct ToeplitzKey(Vec<u8>);

impl ToeplitzKey {
    pub fn new(bytes: Vec<u8>) -> Result<Self, KeyError> {
        if bytes.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort {
                len: bytes.len(),
                min: MIN_KEY_LEN,
            });
        }
        Ok(Self(bytes))
    }

    /// Parses hex as `ethtool -x` prints it (`6d:5a:56:…`) or as one run of
    /// digits (`6d5a56…`). Whitespace is ignored.
    pub fn parse_hex(text: &str) -> Result<Self, KeyError> {
        let compact: String = text
            .chars()
            .filter(|c| !c.is_whitespace() && *c != ':')
            .collect();
        let digits = compact.as_bytes();
        let mut bytes = Vec::with_capacity(digits.len() / 2);
        for (index, pair) in digits.chunks(2).enumerate() {
            let parsed = std::str::from_utf8(pair)
                .ok()
                .filter(|s| s.len() == 2)
                .and_then(|s| u8::from_str_radix(s, 16).ok());
            match parsed {
                Some(byte) => bytes.push(byte),
                None => {
                    return Err(KeyError::BadHex {
                        index,
                        text: String::from_utf8_lossy(pair).into_owned(),
                    });
                }
            }
        }
        Self::new(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The 32 key bits starting at bit `bit`; bits past the key's end read as 0.
    pub fn window(&self, bit: usize) -> u32 {
        let (byte, shift) = (bit / 8, bit % 8);
        let mut five = [0u8; 8];
        for (slot, value) in five[3..].iter_mut().zip(self.0.iter().skip(byte)) {
            *slot = *value;
        }
        ((u64::from_be_bytes(five) >> (8 - shift)) & 0xffff_ffff) as u32
    }
}

impl fmt::Display for ToeplitzKey {
    /// Colon-separated hex, as `ethtool -x` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ToeplitzKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ToeplitzKey({self})")
    }
}

/// The Toeplitz hash by its definition, one input bit at a time: for each
/// input byte, load the 64 key bits from that byte on; a set bit `b` of the
/// byte XORs the 32-bit window that starts `b` bits in.
pub fn hash_naive(key: &ToeplitzKey, input: &[u8]) -> u32 {
    let mut hash = 0;
    for (position, byte) in input.iter().enumerate() {
        let mut eight = [0u8; 8];
        for (slot, value) in eight.iter_mut().zip(key.0.iter().skip(position)) {
            *slot = *value;
        }
        let bits = u64::from_be_bytes(eight);
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= (bits >> (32 - bit)) as u32;
            }
        }
    }
    hash
}

/// Per-byte-position lookup tables for one key: `table[p][b]` is the hash of an
/// input that is all zero but for byte value `b` at position `p`. Toeplitz is
/// linear over GF(2), so a hash is the XOR of one entry per input byte.
#[derive(Clone)]
pub struct ToeplitzTable {
    key: ToeplitzKey,
    table: Box<[[u32; 256]; MAX_INPUT_LEN]>,
}

impl ToeplitzTable {
    pub fn new(key: ToeplitzKey) -> Self {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT_LEN]);
        for (position, row) in table.iter_mut().enumerate() {
            let windows: [u32; 8] = std::array::from_fn(|bit| key.window(position * 8 + bit));
            for (value, entry) in row.iter_mut().enumerate() {
                *entry = windows
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| value & (0x80 >> bit) != 0)
                    .fold(0, |acc, (_, window)| acc ^ window);
            }
        }
        Self { key, table }
    }

    pub fn key(&self) -> &ToeplitzKey {
        &self.key
    }

    /// The lookup tables: row `p`, entry `b` is the hash of byte `b` at
    /// position `p` (what the lab's NIC emulator hashes with).
    pub fn rows(&self) -> &[[u32; 256]; MAX_INPUT_LEN] {
        &self.table
    }

    /// Hashes up to [`MAX_INPUT_LEN`] bytes; the caller's input never exceeds it.
    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |hash, (byte, row)| hash ^ row[usize::from(*byte)])
    }
}

impl fmt::Debug for ToeplitzTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToeplitzTable")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS_KEY: &str =
        "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa";

    #[test]
    fn windows_walk_the_key_bit_by_bit() {
        let key = ToeplitzKey::parse_hex(MS_KEY).unwrap();
        assert_eq!(key.window(0), 0x6d5a56da);
        assert_eq!(key.window(8), 0x5a56da25);
        assert_eq!(key.window(4), 0xd5a56da2);
        // The last window runs off the end of the key and reads zeros there.
        assert_eq!(key.window(39 * 8), 0xfa00_0000);
    }

    #[test]
    fn hex_with_and_without_colons_is_the_same_key() {
        let plain = ToeplitzKey::parse_hex(MS_KEY).unwrap();
        let colons: Vec<String> = plain
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(ToeplitzKey::parse_hex(&colons.join(":")).unwrap(), plain);
        assert_eq!(ToeplitzKey::parse_hex(&plain.to_string()).unwrap(), plain);
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        assert_eq!(
            ToeplitzKey::parse_hex("6d:5a:zz").unwrap_err(),
            KeyError::BadHex {
                index: 2,
                text: "zz".into()
            }
        );
        assert_eq!(
            ToeplitzKey::parse_hex("6d5a5").unwrap_err(),
            KeyError::BadHex {
                index: 2,
                text: "5".into()
            }
        );
        assert_eq!(
            ToeplitzKey::parse_hex("6d5a56da").unwrap_err(),
            KeyError::TooShort { len: 4, min: 40 }
        );
    }

    #[test]
    fn table_agrees_with_definition() {
        let key = ToeplitzKey::parse_hex(MS_KEY).unwrap();
        let table = ToeplitzTable::new(key.clone());
        let input: Vec<u8> = (0..MAX_INPUT_LEN as u8)
            .map(|i| i.wrapping_mul(37) ^ 0x5a)
            .collect();
        for len in 0..=MAX_INPUT_LEN {
            assert_eq!(table.hash(&input[..len]), hash_naive(&key, &input[..len]));
        }
    }
}
