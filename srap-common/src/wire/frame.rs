//! Framing: a big-endian `u32` length, then the payload: magic, protocol
//! version, bincode body. The length is checked before the caller allocates.

use super::{
    error::{DecodeError, EncodeError},
    message::{ErrorReport, Message},
    version::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION},
};

/// First bytes of every payload: tells an SRAP peer from anything else that
/// happens to connect (an HTTP probe, a port scanner).
pub const MAGIC: [u8; 4] = *b"SRAP";
/// Bytes of the length prefix.
pub const PREFIX_LEN: usize = 4;
/// Magic + version: the part of the payload before the body.
pub const HEADER_LEN: usize = MAGIC.len() + 2;
/// Largest payload either side accepts: a description of a 64 k-entry
/// indirection table, or a plan naming every source port, fits with room.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest payload accepted before the peer has authenticated (Hello,
/// Response): unauthenticated peers cost at most this much memory each.
pub const MAX_HANDSHAKE_FRAME: usize = 4 << 10;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// The whole frame for `message`, length prefix included.
pub fn encode(message: &Message) -> Result<Vec<u8>, EncodeError> {
    encode_as(message, PROTOCOL_VERSION)
}

/// An [`Message::Error`] frame under the header of an older `version`, so a
/// peer of an older release can read why it is refused: `Error` has been
/// variant 6 holding one string since version 1.
pub fn encode_error_for(version: u16, report: &ErrorReport) -> Result<Vec<u8>, EncodeError> {
    encode_as(&Message::Error(report.clone()), version)
}

/// The whole frame for `message` under the header of `version`, the
/// version a session speaks with a peer of an older release (from
/// [`MIN_PROTOCOL_VERSION`] on). The caller sends such a peer only the
/// messages its version has.
pub fn encode_for(message: &Message, version: u16) -> Result<Vec<u8>, EncodeError> {
    encode_as(message, version)
}

fn encode_as(message: &Message, version: u16) -> Result<Vec<u8>, EncodeError> {
    let mut frame = unfinished(message, version, &[])?;
    let len = frame.len() - PREFIX_LEN;
    if len > MAX_FRAME {
        return Err(EncodeError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    // `len` ≤ MAX_FRAME < u32::MAX.
    frame[..PREFIX_LEN].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(frame)
}

/// A frame of `version` with `extra` between the header and the body,
/// its length prefix still zero: [`super::seal`] fills it in.
pub(super) fn encode_unfinished(
    message: &Message,
    version: u16,
    extra: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    unfinished(message, version, extra)
}

fn unfinished(message: &Message, version: u16, extra: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let mut frame = vec![0; PREFIX_LEN];
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(extra);
    bincode::encode_into_std_write(&*message.at_version(version), &mut frame, config())?;
    Ok(frame)
}

/// The payload length a prefix announces, if it is acceptable: at most `max`
/// (capped at [`MAX_FRAME`]) and at least a header. Call this before
/// allocating the payload buffer. An oversized prefix of printable ASCII is
/// reported as [`DecodeError::NotSrap`]: someone is talking text to us.
pub fn payload_len(prefix: [u8; PREFIX_LEN], max: usize) -> Result<usize, DecodeError> {
    let len = u32::from_be_bytes(prefix) as usize;
    let max = max.min(MAX_FRAME);
    if len > max && prefix.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        // Text (an HTTP request, a banner): no SRAP frame is ever this large.
        return Err(DecodeError::NotSrap { found: prefix });
    }
    if len > max {
        return Err(DecodeError::TooLarge { len, max });
    }
    if len < HEADER_LEN {
        return Err(DecodeError::TooShort {
            len,
            min: HEADER_LEN,
        });
    }
    Ok(len)
}

/// Decodes one payload (everything after the length prefix).
pub fn decode_payload(payload: &[u8]) -> Result<Message, DecodeError> {
    if payload.len() > MAX_FRAME {
        return Err(DecodeError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME,
        });
    }
    let (version, body) = check_header(payload)?;
    decode_body(version, body)
}

/// The version in the header of `payload` and the bytes after it, if the
/// header is this protocol's magic and a version this build speaks
/// ([`MIN_PROTOCOL_VERSION`] to [`PROTOCOL_VERSION`]: one decoder reads
/// them all, told the version).
pub(super) fn check_header(payload: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let Some((header, body)) = payload.split_first_chunk::<HEADER_LEN>() else {
        return Err(DecodeError::TooShort {
            len: payload.len(),
            min: HEADER_LEN,
        });
    };
    let (magic, version) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        let mut found = [0; 4];
        found.copy_from_slice(magic);
        return Err(DecodeError::NotSrap { found });
    }
    let version = u16::from_be_bytes([version[0], version[1]]);
    if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
        return Err(DecodeError::WrongVersion {
            got: version,
            supported: PROTOCOL_VERSION,
        });
    }
    Ok((version, body))
}

/// One bincode message filling all of `body`, in the layout of protocol
/// `version` (its frame's).
pub(super) fn decode_body(version: u16, body: &[u8]) -> Result<Message, DecodeError> {
    let (message, used) = bincode::decode_from_slice_with_context(body, config(), version)?;
    if used != body.len() {
        return Err(DecodeError::TrailingBytes {
            extra: body.len() - used,
        });
    }
    Ok(message)
}

/// The protocol version in `payload`'s header (it says which version the
/// peer speaks in this session), if the payload is long enough to have one.
pub fn version_of(payload: &[u8]) -> Option<u16> {
    let (header, _) = payload.split_first_chunk::<HEADER_LEN>()?;
    Some(u16::from_be_bytes([
        header[MAGIC.len()],
        header[MAGIC.len() + 1],
    ]))
}

/// The report in an [`Message::Error`] payload of any protocol version
/// (`Error` has kept its layout since version 1), so an agent can show why a
/// peer of another release refused it.
pub fn decode_error_any_version(payload: &[u8]) -> Option<ErrorReport> {
    let (header, body) = payload.split_first_chunk::<HEADER_LEN>()?;
    if header[..MAGIC.len()] != MAGIC {
        return None;
    }
    match decode_body(version_of(payload)?, body) {
        Ok(Message::Error(report)) => Some(report),
        _ => None,
    }
}

/// Decodes the first frame in `bytes` (prefix included), accepting payloads
/// up to `max`; returns the message and the bytes it took.
pub fn decode_frame(bytes: &[u8], max: usize) -> Result<(Message, usize), DecodeError> {
    let Some((prefix, rest)) = bytes.split_first_chunk::<PREFIX_LEN>() else {
        return Err(DecodeError::Truncated {
            expected: PREFIX_LEN,
            got: bytes.len(),
        });
    };
    let len = payload_len(*prefix, max)?;
    let payload = rest.get(..len).ok_or(DecodeError::Truncated {
        expected: PREFIX_LEN + len,
        got: bytes.len(),
    })?;
    Ok((decode_payload(payload)?, PREFIX_LEN + len))
}
