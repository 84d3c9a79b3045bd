//! The receiver ↔ sender protocol: what a receiver agent serves (its RSS
//! description, versioned) and what a sender agent tells it back (the ports it
//! planned for each receiver CPU).
//!
//! Pure and synchronous so it can be fuzzed and tested without sockets; the
//! agent does the I/O. Every frame is
//!
//! ```text
//! u32 length (big endian) | "SRAP" | u16 protocol version (big endian) | bincode 2 body
//! ```
//!
//! The length is checked against a hard maximum before anything is allocated
//! ([`payload_len`]), the magic and version before the body is decoded, and
//! the body is decoded with a bincode limit equal to the frame maximum, so a
//! hostile length field inside the body (a `Vec` claiming 2³² elements)
//! cannot allocate more than one frame's worth either.
//!
//! # Conversation
//!
//! ```text
//! sender                                  receiver
//!   ── Hello{version, agent, nonce_s, key id} ──►
//!                                            (PSK set)  ◄── Challenge{nonce_r, proof_r}
//!   ── Response{proof_s} ──►
//!                                            (from here on, with a PSK, every frame is sealed)
//!                                            ◄── RssUpdate{version, description, key}  (now and on every change)
//!   ── PlanReport{…} ──►  (whenever the sender replans)
//!                                            ◄── Grant{epoch, cpus}  (at once, and on every re-balance)
//!   ── Demand{applied, flows per CPU} ──►  (after each grant, and when its flows change)
//!                                            ◄── ReceiverNics{nics, ports}  (protocol 8: at once, then on change)
//!                                            ◄── NicGrants{epoch, grant per NIC}  (protocol 9: with every Grant, several NICs only)
//!   ◄─ Keepalive ─►       (both ways, while idle)
//!   ◄─ Error{reason} ─    (then the connection is closed)
//! ```
//!
//! # Versions
//!
//! What each version this build speaks carries (docs/protocol.md lists
//! every one):
//!
//! * Version 6, the oldest: frames after a PSK handshake are authenticated
//!   ([`seal`]); [`Message::Demand`] and [`Message::Grant`]; [`Hello::key`]
//!   names the sender's key, so a receiver that accepts two during a
//!   rollover proves the one the sender holds; [`RssUpdate::key`] says where
//!   the key comes from, which learned model it is and how far the landings
//!   back it.
//! * Version 7: [`Message::SeenFlows`], the sender's own flows as the
//!   receiver's observer saw them, at the end of [`Message`] (every other
//!   message keeps its version-6 layout).
//! * Version 8: [`Message::ReceiverNics`], every NIC the receiver serves and
//!   which of their addresses accept each listening port, at the end of
//!   [`Message`] (every other message keeps its layout; a peer of 6 or 7
//!   knows the first NIC only, through [`RssUpdate`]).
//! * Version 9: [`Message::NicGrants`], the sender's grant on each NIC the
//!   receiver serves, at the end of [`Message`] (every other message keeps
//!   its layout; a peer of 8 or older holds the first NIC's grant only,
//!   [`Message::Grant`]).
//! * Version 10: a [`WireDescription`] (in [`RssUpdate`] and each NIC of
//!   [`Message::ReceiverNics`]) ends with UDP's hashed fields
//!   ([`UdpFields`]), so every flow type a NIC's description gives reaches
//!   the sender's model; the one layout that depends on the version, which
//!   frames are encoded and decoded by (a peer of 9 or older is sent the
//!   descriptions without them, and sends none).
//!
//! # Security model (pre-shared key, [`auth`])
//!
//! With a PSK both sides prove knowledge of it: HMAC-SHA256 over a label, the
//! protocol version and a fresh 32-byte random nonce from *each* side. This
//! keeps out peers without the key (they get no description and cannot report
//! plans) and senders refuse a receiver that cannot prove the key, so a rogue
//! receiver cannot steer their flows. A recorded handshake cannot be replayed
//! (the other side's nonce is new each time) nor reflected (the two proofs
//! carry different labels), and a version rewritten on the path to force
//! the session below what both sides speak is detected ([`downgrade`]).
//! After the handshake every frame is
//! authenticated with per-direction session keys and a sequence number
//! ([`seal`], protocol 4), so an on-path attacker cannot alter, inject,
//! replay, reorder or reflect messages either. It does **not** encrypt: the
//! description, including the RSS key, travels in clear. Use a tunnel
//! (WireGuard, IPsec, ssh) across untrusted networks if that matters. The
//! PSK's confidentiality is the operator's job (a file readable by root
//! only); a leaked PSK lets its holder act as either side. Without a PSK
//! nothing is authenticated and the
//! allow-list (`--allow CIDR`) is the only gate.

pub mod auth;
mod cpus;
mod description;
pub mod downgrade;
mod error;
mod frame;
mod landing;
mod message;
mod nics;
pub mod seal;
mod version;

pub use auth::{
    KEY_ID_LEN, KeyId, MAC_LEN, MAX_PSK_LEN, MIN_PSK_LEN, Mac, NONCE_LEN, Nonce, Psk, PskError,
};
pub use cpus::{CpuCount, CpuGrant, CpuListError, DemandReport, MAX_GRANT_CPUS};
pub use description::{UDP_FIELDS_SINCE, UdpFields, WireDescription};
pub use downgrade::{ChallengeError, Downgrade};
pub use error::{DecodeError, EncodeError};
pub use frame::{
    HEADER_LEN, MAGIC, MAX_FRAME, MAX_HANDSHAKE_FRAME, PREFIX_LEN, decode_error_any_version,
    decode_frame, decode_payload, encode, encode_error_for, encode_for, payload_len, version_of,
};
pub use landing::{LandingReport, LandingVerdict};
pub use message::{
    Challenge, CpuPorts, ErrorReport, Hello, MAX_REASON_LEN, MAX_SEEN_FLOWS, Message, PlanReport,
    PlannedTable, Response, RssUpdate, SeenFlow, SeenFlows,
};
pub use nics::{
    MAX_LISTEN_PORTS, MAX_NIC_ADDRS, MAX_NIC_CPUS, MAX_NIC_NAME, MAX_NICS, NicGrant, NicGrants,
    NicGrantsError, NicInfo, NicLink, NicListError, PortAcceptance, ReceiverNics,
};
pub use seal::{Opener, Role, SEAL_OVERHEAD, Sealer};
pub use version::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, session_version};

#[cfg(test)]
mod tests;
