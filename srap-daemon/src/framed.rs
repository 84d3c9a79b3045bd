//! [`srap_common::wire`] frames over a byte stream, with a deadline on every
//! read and write so a silent or trickling peer costs a bounded wait, and the
//! payload buffer allocated only after its length passed the limit.

use std::{io, time::Duration};

use srap_common::wire::{self, DecodeError, EncodeError, Message, PREFIX_LEN};
use thiserror::Error;
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    time::timeout,
};

/// Why a frame could not be read or written.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("the peer closed the connection")]
    Closed,
    #[error("no message within {0:?}")]
    Idle(Duration),
    #[error("the rest of a message did not arrive within {0:?}")]
    Stalled(Duration),
    #[error("the peer did not take a message within {0:?}")]
    WriteStalled(Duration),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// Whether the peer can still be told about it (the connection works
    /// and it was the peer's message that was wrong or late).
    pub fn worth_reporting(&self) -> bool {
        matches!(self, Self::Idle(_) | Self::Stalled(_) | Self::Decode(_))
    }
}

/// How long a read may take.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// Largest payload accepted.
    pub max: usize,
    /// Until the first byte of the next frame.
    pub idle: Duration,
    /// From the first byte to the last.
    pub frame: Duration,
}

/// Reads one frame. A connection closed between frames is [`FrameError::Closed`];
/// closed inside one, [`DecodeError::Truncated`].
pub async fn read<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: ReadLimits,
) -> Result<Message, FrameError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let first = timeout(limits.idle, reader.read(&mut prefix))
        .await
        .map_err(|_| FrameError::Idle(limits.idle))??;
    if first == 0 {
        return Err(FrameError::Closed);
    }
    let rest = async {
        fill(reader, &mut prefix, first, PREFIX_LEN).await?;
        let len = wire::payload_len(prefix, limits.max)?;
        let mut payload = vec![0u8; len];
        fill(reader, &mut payload, 0, PREFIX_LEN + len).await?;
        Ok::<_, FrameError>(payload)
    };
    let payload = timeout(limits.frame, rest)
        .await
        .map_err(|_| FrameError::Stalled(limits.frame))??;
    Ok(wire::decode_payload(&payload)?)
}

/// Fills `buf` from `filled` on; `frame_len` names the whole frame in the
/// truncation error.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
    mut filled: usize,
    frame_len: usize,
) -> Result<(), FrameError> {
    let before = frame_len - buf.len();
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]).await? {
            0 => {
                return Err(DecodeError::Truncated {
                    expected: frame_len.max(PREFIX_LEN),
                    got: before + filled,
                }
                .into());
            }
            n => filled += n,
        }
    }
    Ok(())
}

/// A peer-supplied string made safe for one log line: control characters
/// replaced, at most 200 characters.
pub fn printable(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Writes one frame within `limit`.
pub async fn write<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &Message,
    limit: Duration,
) -> Result<(), FrameError> {
    let frame = wire::encode(message)?;
    timeout(limit, writer.write_all(&frame))
        .await
        .map_err(|_| FrameError::WriteStalled(limit))??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use srap_common::wire::{ErrorReport, MAX_FRAME};

    const LIMITS: ReadLimits = ReadLimits {
        max: MAX_FRAME,
        idle: Duration::from_millis(200),
        frame: Duration::from_millis(200),
    };

    #[tokio::test]
    async fn reads_what_write_wrote() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let message = Message::Error(ErrorReport::new("bye"));
        let sent = message.clone();
        let writer =
            tokio::spawn(async move { write(&mut a, &sent, Duration::from_secs(1)).await });
        assert_eq!(read(&mut b, LIMITS).await.expect("a frame"), message);
        writer.await.expect("join").expect("written");
        assert!(matches!(
            read(&mut b, LIMITS).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn truncated_frames_name_what_was_missing() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[0, 0, 0, 20, b'S', b'R'])
            .await
            .expect("write");
        drop(a);
        let err = read(&mut b, LIMITS).await.unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Decode(DecodeError::Truncated {
                    expected: 24,
                    got: 6
                })
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn silence_and_trickles_time_out() {
        let (mut a, mut b) = tokio::io::duplex(64);
        assert!(matches!(
            read(&mut b, LIMITS).await,
            Err(FrameError::Idle(_))
        ));
        a.write_all(&[0, 0]).await.expect("write");
        assert!(matches!(
            read(&mut b, LIMITS).await,
            Err(FrameError::Stalled(_))
        ));
    }
}
