//! [`srap_common::wire`] frames over a byte stream, with a deadline on every
//! read and write so a silent or trickling peer costs a bounded wait, and the
//! payload buffer allocated only after its length passed the limit.
//!
//! After a PSK handshake both sides switch to [`Inbound`] / [`Outbound`]
//! with session keys ([`wire::seal`]): every frame from then on carries a
//! sequence number and a MAC, whatever message it holds. Without a PSK they
//! stay plain (the protocol of an open receiver).

use std::{io, time::Duration};

use srap_common::wire::{
    self, DecodeError, EncodeError, Message, Nonce, Opener, PREFIX_LEN, Psk, Role, Sealer,
};
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

/// Reads one plain frame (the handshake). A connection closed between frames
/// is [`FrameError::Closed`]; closed inside one, [`DecodeError::Truncated`].
pub async fn read<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: ReadLimits,
) -> Result<Message, FrameError> {
    let payload = read_payload(reader, limits).await?;
    Ok(wire::decode_payload(&payload)?)
}

/// Reads one frame's payload (everything after the length prefix), undecoded.
pub async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: ReadLimits,
) -> Result<Vec<u8>, FrameError> {
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
    timeout(limits.frame, rest)
        .await
        .map_err(|_| FrameError::Stalled(limits.frame))?
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

/// Writes one plain frame (the handshake) under the header of protocol
/// `version` within `limit`.
pub async fn write<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &Message,
    version: u16,
    limit: Duration,
) -> Result<(), FrameError> {
    let frame = wire::encode_for(message, version)?;
    write_frame(writer, &frame, limit).await
}

/// Writes an encoded frame within `limit`.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &[u8],
    limit: Duration,
) -> Result<(), FrameError> {
    timeout(limit, writer.write_all(frame))
        .await
        .map_err(|_| FrameError::WriteStalled(limit))??;
    Ok(())
}

/// The two directions of a session of protocol `version` once the
/// handshake is over: sealed with keys from the PSK and both nonces, or
/// plain when there is no PSK.
pub fn session(
    psk: Option<&Psk>,
    role: Role,
    version: u16,
    sender_nonce: &Nonce,
    receiver_nonce: &Nonce,
) -> (Inbound, Outbound) {
    match psk {
        Some(psk) => {
            let (sealer, opener) =
                wire::seal::session(psk, role, version, sender_nonce, receiver_nonce);
            (Inbound(Some(opener)), Outbound::sealed_by(sealer, version))
        }
        None => (Inbound(None), Outbound::plain(version)),
    }
}

/// Reads a session's frames after the handshake.
#[derive(Debug, Default)]
pub struct Inbound(Option<Opener>);

impl Inbound {
    /// Reads one frame; when sealed, refuses it unless its MAC verifies and
    /// its sequence number is the next one.
    pub async fn read<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        limits: ReadLimits,
    ) -> Result<Message, FrameError> {
        let payload = read_payload(reader, limits).await?;
        self.open(&payload)
    }

    /// Decodes a payload read with [`read_payload`].
    pub fn open(&mut self, payload: &[u8]) -> Result<Message, FrameError> {
        Ok(match &mut self.0 {
            Some(opener) => opener.open(payload)?,
            None => wire::decode_payload(payload)?,
        })
    }

    /// Whether frames must carry a MAC.
    pub fn sealed(&self) -> bool {
        self.0.is_some()
    }
}

/// Writes a session's frames after the handshake, under the header of the
/// protocol version the session speaks.
#[derive(Debug)]
pub struct Outbound {
    sealer: Option<Sealer>,
    version: u16,
}

impl Default for Outbound {
    /// Plain frames of this build's version (before a handshake settled one).
    fn default() -> Self {
        Self::plain(wire::PROTOCOL_VERSION)
    }
}

impl Outbound {
    /// Plain frames of protocol `version`.
    pub fn plain(version: u16) -> Self {
        Self {
            sealer: None,
            version,
        }
    }

    fn sealed_by(sealer: Sealer, version: u16) -> Self {
        Self {
            sealer: Some(sealer),
            version,
        }
    }

    /// The protocol version of the session: what the peer can read.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Writes one frame (sealed, when the session has keys) within `limit`.
    pub async fn write<W: AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
        message: &Message,
        limit: Duration,
    ) -> Result<(), FrameError> {
        let frame = self.frame(message)?;
        write_frame(writer, &frame, limit).await
    }

    /// The next frame for `message`, to be written whole.
    pub fn frame(&mut self, message: &Message) -> Result<Vec<u8>, EncodeError> {
        match &mut self.sealer {
            Some(sealer) => sealer.seal(message),
            None => wire::encode_for(message, self.version),
        }
    }

    /// Whether frames carry a MAC.
    pub fn sealed(&self) -> bool {
        self.sealer.is_some()
    }
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
        let writer = tokio::spawn(async move {
            write(
                &mut a,
                &sent,
                wire::PROTOCOL_VERSION,
                Duration::from_secs(1),
            )
            .await
        });
        assert_eq!(read(&mut b, LIMITS).await.expect("a frame"), message);
        writer.await.expect("join").expect("written");
        assert!(matches!(
            read(&mut b, LIMITS).await,
            Err(FrameError::Closed)
        ));
    }

    fn sealed_pair() -> ((Inbound, Outbound), (Inbound, Outbound)) {
        let psk = Psk::new(b"framed test key, 16+ bytes").expect("psk");
        let (s, r) = (Nonce([1; 32]), Nonce([2; 32]));
        (
            session(Some(&psk), Role::Sender, wire::PROTOCOL_VERSION, &s, &r),
            session(Some(&psk), Role::Receiver, wire::PROTOCOL_VERSION, &s, &r),
        )
    }

    #[tokio::test]
    async fn sealed_sessions_read_what_was_written_and_refuse_the_rest() {
        let ((_, mut to_receiver), (mut from_sender, mut to_sender)) = sealed_pair();
        let (mut a, mut b) = tokio::io::duplex(4096);
        let limit = Duration::from_secs(1);
        to_receiver
            .write(&mut a, &Message::Keepalive, limit)
            .await
            .expect("written");
        assert_eq!(
            from_sender.read(&mut b, LIMITS).await.expect("opens"),
            Message::Keepalive
        );
        // A plain frame in a sealed session.
        write(
            &mut a,
            &Message::Error(ErrorReport::new("injected")),
            wire::PROTOCOL_VERSION,
            limit,
        )
        .await
        .expect("written");
        let err = from_sender.read(&mut b, LIMITS).await.unwrap_err();
        assert!(err.to_string().contains("failed authentication"), "{err}");
        // The receiver's own frame reflected back to it.
        let mut own = Vec::new();
        to_sender
            .write(&mut own, &Message::Keepalive, limit)
            .await
            .expect("written");
        a.write_all(&own).await.expect("write");
        let err = from_sender.read(&mut b, LIMITS).await.unwrap_err();
        assert!(err.to_string().contains("reflected"), "{err}");
        assert!(err.worth_reporting());
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
