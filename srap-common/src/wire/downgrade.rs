//! Downgrade protection for the version negotiation (with a PSK): an
//! on-path rewrite of either side's version between two agents that both
//! speak more than the session would run at is detected by the sender,
//! while a genuine older peer keeps working at its version.
//!
//! Two facts carry it, both under the receiver's proof (HMAC over the
//! session version and both nonces, [`super::auth`]):
//!
//! * **The receiver's sentinel.** A receiver that runs a session below its
//!   own version (because the `Hello` it got offered less) ends its nonce
//!   with [`SENTINEL`] and its own version (TLS 1.3's downgrade sentinel in
//!   `ServerHello.random`, RFC 8446 §4.1.3). A sender that offered more
//!   than the session runs at and finds the mark knows its `Hello` was
//!   rewritten. An older sender looks for no mark and reads the nonce as
//!   random bytes, so nothing changes for it; the other 24 bytes stay
//!   random, which keeps every session's nonce fresh.
//! * **The proof's version.** The receiver proves the version of the
//!   session; a sender that finds the proof made for another version than
//!   the header of the answer it came in knows the header was rewritten.
//!
//! A receiver of protocol 6 never marks its nonce, so a sender finds no mark
//! and runs at 6.

use thiserror::Error;

use super::{
    auth::{NONCE_LEN, Nonce, Psk},
    message::Challenge,
    version::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION},
};

/// What a receiver running below its own version ends its nonce with,
/// followed by its own version (big endian).
pub const SENTINEL: [u8; 6] = *b"SRAPDG";
/// Bytes at the end of a marked nonce: the sentinel and a `u16`.
const MARK_LEN: usize = SENTINEL.len() + 2;

/// What to do about a rewritten version, for every [`Downgrade`]. Each
/// message fits in the 200 characters a receiver logs of a peer's error.
const WHAT_TO_DO: &str =
    "refused: find what alters the traffic between the hosts, or tunnel it (WireGuard, IPsec)";

/// A version rewritten on the path, found by the sender in the receiver's
/// authenticated `Challenge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Downgrade {
    /// The receiver marked its nonce: it speaks `receiver` but ran at
    /// `session` because the `Hello` it got offered no more.
    #[error(
        "protocol downgrade by something on the path: the Hello offering {offered} reached the \
         receiver (of {receiver}) as {session}; {WHAT_TO_DO}"
    )]
    HelloRewritten {
        offered: u16,
        receiver: u16,
        session: u16,
    },
    /// The receiver proved `proved`, but its answer came under `header`.
    #[error(
        "protocol version rewritten by something on the path: the receiver proved {proved} but \
         its answer came as {header}; {WHAT_TO_DO}"
    )]
    HeaderRewritten { header: u16, proved: u16 },
}

/// Why a sender refuses a receiver's `Challenge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ChallengeError {
    /// The proof is not of this key for any version this agent speaks.
    #[error("the receiver could not prove the pre-shared key")]
    WrongKey,
    #[error(transparent)]
    Downgrade(#[from] Downgrade),
}

/// A receiver's nonce for a session of protocol `session`: random, and
/// marked when this build speaks more.
pub fn receiver_nonce(session: u16) -> Result<Nonce, getrandom::Error> {
    Ok(mark(Nonce::random()?, session, PROTOCOL_VERSION))
}

/// `nonce` with its last bytes the mark of a receiver of version `own`
/// when `session` is below it; unchanged otherwise.
pub fn mark(mut nonce: Nonce, session: u16, own: u16) -> Nonce {
    if session < own {
        let (sentinel, version) = nonce.0[NONCE_LEN - MARK_LEN..].split_at_mut(SENTINEL.len());
        sentinel.copy_from_slice(&SENTINEL);
        version.copy_from_slice(&own.to_be_bytes());
    }
    nonce
}

/// The version of the receiver that marked `nonce`, if it is marked.
pub fn marked_version(nonce: &Nonce) -> Option<u16> {
    let (sentinel, version) = nonce.0[NONCE_LEN - MARK_LEN..].split_at(SENTINEL.len());
    (sentinel == SENTINEL).then(|| u16::from_be_bytes([version[0], version[1]]))
}

/// Whether a session of `session` is what a sender that offered `offered`
/// should run with the receiver that made `receiver_nonce` (already
/// authenticated by its proof).
pub fn check_offer(offered: u16, session: u16, receiver_nonce: &Nonce) -> Result<(), Downgrade> {
    match marked_version(receiver_nonce) {
        Some(receiver) if offered.min(receiver) > session => Err(Downgrade::HelloRewritten {
            offered,
            receiver,
            session,
        }),
        _ => Ok(()),
    }
}

/// The sender's check of `challenge`, which came under the header of
/// protocol `header` after it offered `offered` with `sender_nonce`: the
/// proof must be of `psk` for `header`, and the receiver must not have run
/// below what both speak. A proof for another version this agent speaks
/// means the header was rewritten.
pub fn check_challenge(
    psk: &Psk,
    offered: u16,
    header: u16,
    sender_nonce: &Nonce,
    challenge: &Challenge,
) -> Result<(), ChallengeError> {
    let proves = |v| psk.verify_receiver(v, sender_nonce, &challenge.nonce, &challenge.proof);
    if !proves(header) {
        let proved = (MIN_PROTOCOL_VERSION..=offered.max(header)).find(|v| proves(*v));
        return Err(match proved {
            Some(proved) => Downgrade::HeaderRewritten { header, proved }.into(),
            None => ChallengeError::WrongKey,
        });
    }
    check_offer(offered, header, &challenge.nonce)?;
    Ok(())
}
