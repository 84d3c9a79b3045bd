//! The command channel into the guest: its second serial port, a Unix
//! socket on the host. The guest's `/init` runs one shell line at a time and
//! answers with the output and `SRAP-RC <code>`. No network is involved, so
//! commands never add packets to the NIC being measured.

use std::{
    io::{Read as _, Write as _},
    os::unix::net::UnixStream,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

const END: &str = "SRAP-RC ";

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
        if line.contains('\n') {
            bail!("a guest command is one line");
        }
        self.stream.write_all(format!("{line}\n").as_bytes())?;
        let deadline = Instant::now() + timeout;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(answer) = parse_reply(&reply) {
                return Ok(answer);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || crate::interrupted() {
                bail!("the guest did not finish `{line}` within {timeout:?}");
            }
            self.stream
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => bail!("the guest's serial port closed (did QEMU exit?)"),
                Ok(n) => reply.extend_from_slice(&chunk[..n]),
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

/// `(code, output)` once `reply` ends with a complete `SRAP-RC <code>` line.
fn parse_reply(reply: &[u8]) -> Option<(i32, String)> {
    let text = String::from_utf8_lossy(reply);
    let body = text.strip_suffix('\n')?;
    let at = body.rfind(END)?;
    let code = body[at + END.len()..].trim().parse().ok()?;
    Some((code, body[..at].to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_reply;

    #[test]
    fn a_reply_is_complete_only_with_its_code_line() {
        assert_eq!(parse_reply(b"eth0\nSRAP-RC 0"), None);
        assert_eq!(
            parse_reply(b"eth0\nSRAP-RC 0\n"),
            Some((0, "eth0\n".into()))
        );
        // Output without a final newline still ends before the marker.
        assert_eq!(parse_reply(b"noeolSRAP-RC 2\n"), Some((2, "noeol".into())));
        assert_eq!(parse_reply(b"SRAP-RC x\n"), None);
    }
}
