//! Authenticated frames after a PSK handshake (protocol 4): every frame
//! carries a sequence number and an HMAC-SHA256 tag keyed by a session key of
//! its direction, so an on-path attacker can neither alter a frame, inject
//! one, replay or reorder one, reflect one back to its sender, nor splice in
//! a frame of another session. It works on frames, not messages: any
//! message, present or future, is covered without its type knowing.
//!
//! ```text
//! u32 length | "SRAP" | u16 version | u64 sequence | bincode body | 32-byte tag
//! tag = HMAC-SHA256(key of the direction, direction byte ‖ everything before the tag)
//! ```
//!
//! The length prefix is under the tag too. Sequence numbers start at 0 in
//! each direction and grow by one per frame; TCP delivers in order, so the
//! reader accepts exactly the next number and nothing else.
//!
//! # Key derivation (HKDF, RFC 5869, with SHA-256)
//!
//! ```text
//! key(dir) = HKDF-SHA256(salt = sender nonce ‖ receiver nonce, IKM = PSK,
//!                        info = "srap v4 frames " ‖ dir label, L = 32)
//! ```
//!
//! (the `hkdf` crate's; 32 bytes are one expand block, so this is
//! `HMAC(HMAC(salt, PSK), info ‖ 0x01)`, as protocol 4 has always derived it)
//!
//! with the labels `sender->receiver` and `receiver->sender`. Both nonces are
//! fresh per connection (each side picks its own), so every session has its
//! own pair of keys even when one side's random source repeats.

use hkdf::Hkdf;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use super::{
    auth::{MAC_LEN, NONCE_LEN, Nonce, Psk},
    error::{DecodeError, EncodeError},
    frame::{self, HEADER_LEN, MAX_FRAME, PREFIX_LEN, check_header},
    message::Message,
};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the sequence number after the header.
pub const SEQ_LEN: usize = 8;
/// Bytes an authenticated frame adds to a plain one.
pub const SEAL_OVERHEAD: usize = SEQ_LEN + MAC_LEN;

/// Which way a frame travels. Part of every tag, and each way has its own
/// key, so a frame sent back to where it came from does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    SenderToReceiver,
    ReceiverToSender,
}

impl Direction {
    fn byte(self) -> u8 {
        match self {
            Self::SenderToReceiver => 1,
            Self::ReceiverToSender => 2,
        }
    }

    fn label(self) -> &'static [u8] {
        match self {
            Self::SenderToReceiver => b"sender->receiver",
            Self::ReceiverToSender => b"receiver->sender",
        }
    }

    fn reverse(self) -> Self {
        match self {
            Self::SenderToReceiver => Self::ReceiverToSender,
            Self::ReceiverToSender => Self::SenderToReceiver,
        }
    }
}

/// Which side of the conversation this agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sender,
    Receiver,
}

impl Role {
    fn outgoing(self) -> Direction {
        match self {
            Self::Sender => Direction::SenderToReceiver,
            Self::Receiver => Direction::ReceiverToSender,
        }
    }
}

const KEY_INFO: &[u8] = b"srap v4 frames ";

/// An HMAC keyed once: cloning it per frame skips re-hashing the key pads.
fn keyed(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length: this cannot fail.
    <HmacSha256 as hmac::Mac>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// HKDF-SHA256 (RFC 5869): extract with `salt` from `ikm`, expand with the
/// concatenation of `info` into `N` bytes (checked at compile time to be at
/// most 255 hash lengths, the only length HKDF refuses).
pub(crate) fn hkdf_sha256<const N: usize>(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> [u8; N] {
    const { assert!(N <= 255 * 32, "HKDF-SHA256 expands to at most 8160 bytes") };
    let mut okm = [0u8; N];
    Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand_multi_info(info, &mut okm)
        .expect("N is at most 8160 bytes (checked above)");
    okm
}

/// The key of `dir` for the session of these two nonces.
fn direction_key(
    psk: &Psk,
    sender_nonce: &Nonce,
    receiver_nonce: &Nonce,
    dir: Direction,
) -> HmacSha256 {
    let mut salt = [0u8; 2 * NONCE_LEN];
    salt[..NONCE_LEN].copy_from_slice(&sender_nonce.0);
    salt[NONCE_LEN..].copy_from_slice(&receiver_nonce.0);
    let key: [u8; MAC_LEN] = hkdf_sha256(&salt, psk.bytes(), &[KEY_INFO, dir.label()]);
    keyed(&key)
}

/// The two halves of an authenticated session: what this side writes with
/// and what it reads with.
/// `version` is the protocol both sides speak in this session: the
/// sealer's frames carry it in their header.
pub fn session(
    psk: &Psk,
    role: Role,
    version: u16,
    sender_nonce: &Nonce,
    receiver_nonce: &Nonce,
) -> (Sealer, Opener) {
    let out = role.outgoing();
    let key = |dir| direction_key(psk, sender_nonce, receiver_nonce, dir);
    let sealer = Sealer {
        mac: key(out),
        dir: out,
        version,
        next: 0,
    };
    let opener = Opener {
        mac: key(out.reverse()),
        own: key(out),
        dir: out.reverse(),
        next: 0,
    };
    (sealer, opener)
}

/// Writes authenticated frames in one direction.
pub struct Sealer {
    mac: HmacSha256,
    dir: Direction,
    /// The protocol version of the session, in every frame's header.
    version: u16,
    next: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealer({:?}, next {})", self.dir, self.next)
    }
}

impl Sealer {
    /// The whole frame for `message` (length prefix included), numbered
    /// with the next sequence number.
    pub fn seal(&mut self, message: &Message) -> Result<Vec<u8>, EncodeError> {
        let mut frame = frame::encode_unfinished(message, self.version, &self.next.to_be_bytes())?;
        let len = frame.len() - PREFIX_LEN + MAC_LEN;
        if len > MAX_FRAME {
            return Err(EncodeError::TooLarge {
                len,
                max: MAX_FRAME,
            });
        }
        // `len` ≤ MAX_FRAME < u32::MAX.
        frame[..PREFIX_LEN].copy_from_slice(&(len as u32).to_be_bytes());
        let tag = tag(&self.mac, self.dir, &frame);
        frame.extend_from_slice(&tag);
        self.next = self.next.checked_add(1).ok_or(EncodeError::Exhausted)?;
        Ok(frame)
    }
}

/// The tag of `covered` (prefix to body) sent in `dir`.
fn tag(mac: &HmacSha256, dir: Direction, covered: &[u8]) -> [u8; MAC_LEN] {
    let mut mac = mac.clone();
    mac.update(&[dir.byte()]);
    mac.update(covered);
    mac.finalize().into_bytes().into()
}

/// Whether `tag` is the tag of `covered` in `dir`, compared in constant time.
fn verifies(mac: &HmacSha256, dir: Direction, covered: &[&[u8]], tag: &[u8]) -> bool {
    let mut mac = mac.clone();
    mac.update(&[dir.byte()]);
    for part in covered {
        mac.update(part);
    }
    mac.verify_slice(tag).is_ok()
}

/// Reads authenticated frames from the other direction.
pub struct Opener {
    mac: HmacSha256,
    /// Our own sending key: a frame that verifies under it was reflected.
    own: HmacSha256,
    dir: Direction,
    next: u64,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opener({:?}, next {})", self.dir, self.next)
    }
}

impl Opener {
    /// The message in `payload` (everything after the length prefix), if its
    /// tag verifies and its number is the next one. The header is checked
    /// first so a peer of another version is named as such; nothing of the
    /// body is decoded before the tag verified.
    pub fn open(&mut self, payload: &[u8]) -> Result<Message, DecodeError> {
        if payload.len() > MAX_FRAME {
            return Err(DecodeError::TooLarge {
                len: payload.len(),
                max: MAX_FRAME,
            });
        }
        let (version, _) = check_header(payload)?;
        if payload.len() < HEADER_LEN + SEAL_OVERHEAD {
            // Too short for a number and a tag: a plain frame, say, injected.
            return Err(DecodeError::BadTag {
                expected: self.next,
            });
        }
        let (covered, tag) = payload.split_at(payload.len() - MAC_LEN);
        // `payload.len()` ≤ MAX_FRAME < u32::MAX.
        let prefix = (payload.len() as u32).to_be_bytes();
        if !verifies(&self.mac, self.dir, &[&prefix, covered], tag) {
            let reflected = verifies(&self.own, self.dir.reverse(), &[&prefix, covered], tag);
            return Err(if reflected {
                DecodeError::Reflected
            } else {
                DecodeError::BadTag {
                    expected: self.next,
                }
            });
        }
        let (seq, body) = covered[HEADER_LEN..].split_at(SEQ_LEN);
        let mut bytes = [0u8; SEQ_LEN];
        bytes.copy_from_slice(seq);
        let seq = u64::from_be_bytes(bytes);
        if seq != self.next {
            return Err(DecodeError::OutOfSequence {
                got: seq,
                expected: self.next,
            });
        }
        let message = frame::decode_body(version, body)?;
        self.next = self.next.saturating_add(1);
        Ok(message)
    }
}
