//! Pre-shared-key challenge–response (see the security model in
//! [`super`]): each side proves it holds the PSK with HMAC-SHA256 over a
//! role label, the protocol version and both sides' fresh nonces.

use std::fmt;

use bincode::{Decode, Encode};
use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use thiserror::Error;

pub const NONCE_LEN: usize = 32;
pub const MAC_LEN: usize = 32;
/// Bytes of a [`KeyId`].
pub const KEY_ID_LEN: usize = 8;

/// Shortest PSK accepted: 128 bits, e.g. 16 random bytes or 32 hex digits.
pub const MIN_PSK_LEN: usize = 16;
/// Longest PSK accepted (a PSK file is read whole).
pub const MAX_PSK_LEN: usize = 4096;

const SENDER_LABEL: &[u8] = b"srap sender proof";
const RECEIVER_LABEL: &[u8] = b"srap receiver proof";
const KEY_ID_LABEL: &[u8] = b"srap key id";

/// A random challenge, fresh for every connection.
#[derive(Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct Nonce(pub [u8; NONCE_LEN]);

impl Nonce {
    /// 32 bytes from the OS's random source.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0; NONCE_LEN];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes))
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({:02x?}…)", &self.0[..4])
    }
}

/// An HMAC-SHA256 proof.
#[derive(Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub struct Mac(pub [u8; MAC_LEN]);

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac({:02x?}…)", &self.0[..4])
    }
}

/// A PSK's public name: the first [`KEY_ID_LEN`] bytes of
/// HMAC-SHA256(key, "srap key id"). A sender names its key in its
/// [`super::Hello`] so a receiver that accepts two keys during a rollover
/// answers with the right one, and operators compare keys across hosts (logs,
/// `srap status`) without showing them. It tells nothing of the key that the
/// handshake's proofs do not already: both are HMACs under it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct KeyId(pub [u8; KEY_ID_LEN]);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A PSK that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PskError {
    #[error(
        "the pre-shared key has {len} bytes; use at least {MIN_PSK_LEN} \
         (e.g. `head -c 32 /dev/urandom | base64 > FILE`)"
    )]
    TooShort { len: usize },
    #[error("the pre-shared key has {len} bytes; at most {MAX_PSK_LEN} are accepted")]
    TooLong { len: usize },
}

/// The pre-shared key. Its bytes never appear in `Debug` output.
#[derive(Clone)]
pub struct Psk(Vec<u8>);

impl Psk {
    /// The key as a PSK file holds it: surrounding whitespace (the trailing
    /// newline an editor adds) is not part of it.
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, PskError> {
        Self::new(contents.trim_ascii())
    }

    pub fn new(bytes: &[u8]) -> Result<Self, PskError> {
        match bytes.len() {
            len if len < MIN_PSK_LEN => Err(PskError::TooShort { len }),
            len if len > MAX_PSK_LEN => Err(PskError::TooLong { len }),
            _ => Ok(Self(bytes.to_vec())),
        }
    }

    /// The key's public name.
    pub fn id(&self) -> KeyId {
        let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(&self.0)
            .expect("HMAC accepts keys of any length");
        mac.update(KEY_ID_LABEL);
        let digest = mac.finalize().into_bytes();
        let mut id = [0; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        KeyId(id)
    }

    /// The key itself, for [`super::seal`]'s key derivation.
    pub(super) fn bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(
        &self,
        label: &[u8],
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
    ) -> Hmac<Sha256> {
        // HMAC takes keys of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as hmac::Mac>::new_from_slice(&self.0)
            .expect("HMAC accepts keys of any length");
        mac.update(label);
        mac.update(&version.to_be_bytes());
        mac.update(&sender_nonce.0);
        mac.update(&receiver_nonce.0);
        mac
    }

    fn proof(
        &self,
        label: &[u8],
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
    ) -> Mac {
        Mac(self
            .mac(label, version, sender_nonce, receiver_nonce)
            .finalize()
            .into_bytes()
            .into())
    }

    fn verify(
        &self,
        label: &[u8],
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
        proof: &Mac,
    ) -> bool {
        // `verify_slice` compares in constant time.
        self.mac(label, version, sender_nonce, receiver_nonce)
            .verify_slice(&proof.0)
            .is_ok()
    }

    /// What the receiver sends in its [`super::Challenge`] in a session
    /// of protocol `version` (the one both sides speak: a proof made for
    /// another version does not verify).
    pub fn receiver_proof(
        &self,
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
    ) -> Mac {
        self.proof(RECEIVER_LABEL, version, sender_nonce, receiver_nonce)
    }

    /// What the sender sends in its [`super::Response`].
    pub fn sender_proof(&self, version: u16, sender_nonce: &Nonce, receiver_nonce: &Nonce) -> Mac {
        self.proof(SENDER_LABEL, version, sender_nonce, receiver_nonce)
    }

    pub fn verify_receiver(
        &self,
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
        proof: &Mac,
    ) -> bool {
        self.verify(RECEIVER_LABEL, version, sender_nonce, receiver_nonce, proof)
    }

    pub fn verify_sender(
        &self,
        version: u16,
        sender_nonce: &Nonce,
        receiver_nonce: &Nonce,
        proof: &Mac,
    ) -> bool {
        self.verify(SENDER_LABEL, version, sender_nonce, receiver_nonce, proof)
    }
}

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psk({} bytes, id {})", self.0.len(), self.id())
    }
}
