//! The command channel into the guest: its second serial port, a Unix
//! socket on the host. The guest's `/init` runs one shell line at a time and
//! answers with the output and `SRAP-END <line sum> <output sum> <code>`. No
//! network is involved, so commands never add packets to the NIC being
//! measured.
//!
//! A serial port under software emulation can garble a reply when the guest
//! is busy (QEMU 7.2 can, with `ethtool -S` under load), so every exchange
//! is checked: the guest echoes the CRC-32 (busybox `crc32`, in hex) of the
//! line it read and of the output it sends. A garbled output is asked for
//! again (`SRAP-RESEND`, which runs nothing); a line the guest read
//! wrongly, or a reply that belongs to an earlier line, is never taken for
//! this line's.

use std::{
    io::{Read as _, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

const END: &str = "SRAP-END ";
const RESEND: &str = "SRAP-RESEND";
/// A garbled reply is asked for again this many times.
const RESENDS: u32 = 3;

pub struct GuestShell {
    stream: UnixStream,
}

impl GuestShell {
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let stream = UnixStream::connect(socket).with_context(|| {
            format!("connecting to the guest's serial port {}", socket.display())
        })?;
        Ok(Self { stream })
    }

    /// Runs `line` in the guest; its output, or an error with it when the
    /// command exits non-zero.
    pub fn run(&mut self, line: &str, timeout: Duration) -> anyhow::Result<String> {
        let (code, output) = self.status(line, timeout)?;
        if code != 0 {
            bail!(
                "in the guest, `{line}` exited with {code}: {}",
                output.trim()
            );
        }
        Ok(output)
    }

    /// Runs `line` in the guest: its exit code and output.
    pub fn status(&mut self, line: &str, timeout: Duration) -> anyhow::Result<(i32, String)> {
        if line.contains('\n') || line == RESEND {
            bail!("a guest command is one line");
        }
        let deadline = Instant::now() + timeout;
        self.send(line)?;
        let want = crc32(line.as_bytes());
        let mut resends = 0;
        loop {
            let reply = self.read_reply(line, deadline, timeout)?;
            match reply.check(want) {
                Check::Good => return Ok((reply.code, reply.output)),
                // An earlier command's late reply: this line's comes next.
                Check::OtherLine => continue,
                Check::Garbled if resends < RESENDS => {
                    resends += 1;
                    tracing::warn!(line, resends, "garbled reply from the guest; asking again");
                    self.send(RESEND)?;
                }
                Check::Garbled => {
                    bail!("the guest's reply to `{line}` came garbled {RESENDS} times")
                }
            }
        }
    }

    fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.stream
            .write_all(format!("{line}\n").as_bytes())
            .context("writing to the guest's serial port")
    }

    /// Reads up to and including the next `SRAP-END` line.
    fn read_reply(
        &mut self,
        line: &str,
        deadline: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Reply> {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(reply) = parse_reply(&buffer) {
                return Ok(reply);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || crate::interrupt::interrupted() {
                bail!("the guest did not finish `{line}` within {timeout:?}");
            }
            self.stream
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))?;
            // One byte past the marker line would belong to the next reply:
            // read small pieces once a marker may have started.
            let want = if buffer.windows(END.len()).any(|w| w == END.as_bytes()) {
                1
            } else {
                chunk.len()
            };
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => bail!("the guest's serial port closed (did QEMU exit?)"),
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(err) => return Err(err).context("reading the guest's serial port"),
            }
        }
    }
}

/// One reply as it arrived.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    line_sum: u32,
    output_sum: u32,
    code: i32,
    output: String,
    /// The output's bytes as received (the sum is over them).
    raw: Vec<u8>,
}

enum Check {
    Good,
    OtherLine,
    Garbled,
}

impl Reply {
    fn check(&self, line_sum: u32) -> Check {
        if crc32(&self.raw) != self.output_sum {
            Check::Garbled
        } else if self.line_sum != line_sum {
            Check::OtherLine
        } else {
            Check::Good
        }
    }
}

/// The reply once `buffer` ends with a complete `SRAP-END` line. A marker
/// line that does not parse is garbled output (its sums will not match).
fn parse_reply(buffer: &[u8]) -> Option<Reply> {
    let body = buffer.strip_suffix(b"\n")?;
    let at = body.windows(END.len()).rposition(|w| w == END.as_bytes())?;
    let marker = String::from_utf8_lossy(&body[at + END.len()..]);
    let mut fields = marker.split_whitespace();
    let mut sum = || fields.next().and_then(|f| u32::from_str_radix(f, 16).ok());
    let (line_sum, output_sum) = (sum(), sum());
    let code = fields.next().and_then(|f| f.parse::<i32>().ok());
    let raw = body[..at].to_vec();
    let (line_sum, output_sum, code) = match (line_sum, output_sum, code) {
        (Some(l), Some(o), Some(c)) => (l, o, c),
        // Unreadable: make the output's sum fail, so it is asked again.
        _ => (0, !crc32(&raw), -1),
    };
    Some(Reply {
        line_sum,
        output_sum,
        code,
        output: String::from_utf8_lossy(&raw).into_owned(),
        raw,
    })
}

/// CRC-32 as zlib and busybox's `crc32` compute it (reflected polynomial
/// 0xEDB88320, all-ones start and finish).
pub fn crc32(data: &[u8]) -> u32 {
    let crc = data.iter().fold(!0u32, |mut crc, &byte| {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
        crc
    });
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_busybox_crc32() {
        // `printf hello | busybox crc32` and `printf '' | busybox crc32`.
        assert_eq!(crc32(b"hello"), 0x3610_a686);
        assert_eq!(crc32(b""), 0);
    }

    fn reply_for(line: &str, output: &str, code: i32) -> Vec<u8> {
        format!(
            "{output}SRAP-END {:08x} {:08x} {code}\n",
            crc32(line.as_bytes()),
            crc32(output.as_bytes())
        )
        .into_bytes()
    }

    #[test]
    fn a_reply_is_complete_only_with_its_marker_line() {
        let full = reply_for("ls", "eth0\n", 0);
        assert_eq!(parse_reply(&full[..full.len() - 1]), None);
        let reply = parse_reply(&full).expect("complete");
        assert_eq!((reply.code, reply.output.as_str()), (0, "eth0\n"));
        assert!(matches!(reply.check(crc32(b"ls")), Check::Good));
        // Output without a final newline still ends before the marker.
        let reply = parse_reply(&reply_for("x", "noeol", 2)).expect("complete");
        assert_eq!((reply.code, reply.output.as_str()), (2, "noeol"));
    }

    #[test]
    fn garbled_and_foreign_replies_are_told_apart() {
        let mut garbled = reply_for("ethtool -S eth0", "rx_queue_0_packets: 5446\n", 0);
        garbled[3] = b'#';
        let reply = parse_reply(&garbled).expect("complete");
        assert!(matches!(
            reply.check(crc32(b"ethtool -S eth0")),
            Check::Garbled
        ));
        let other = parse_reply(&reply_for("uptime", "up\n", 0)).expect("complete");
        assert!(matches!(
            other.check(crc32(b"ethtool -S eth0")),
            Check::OtherLine
        ));
        // A marker line that lost its fields is garbled, not a success.
        let reply = parse_reply(b"x\nSRAP-END 12\n").expect("complete");
        assert!(matches!(reply.check(0), Check::Garbled));
    }
}
