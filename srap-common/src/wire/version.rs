//! Which protocol versions this build speaks, and the version a session
//! with a peer runs at. It holds numbers and the one rule over them; what a
//! version changes in a layout lives with that layout, not here.

/// The protocol version this build speaks. Bump it on any change to the
/// message layout: a peer with another version gets
/// [`DecodeError::WrongVersion`] before any of its body is read. What each
/// version this build speaks carries is listed with the protocol
/// ([`wire`](super), under Versions).
///
/// [`DecodeError::WrongVersion`]: super::DecodeError::WrongVersion
pub const PROTOCOL_VERSION: u16 = 10;

/// The oldest version this build still speaks: a session runs at the
/// lower of the two sides' versions. The sender offers its own in
/// [`Hello::version`] under this version's header (which every receiver
/// from version 6 on reads); the receiver answers under the version of the
/// session, and never sends a message that version lacks. Older peers are
/// refused with an error they can read ([`encode_error_for`]).
///
/// [`Hello::version`]: super::Hello::version
/// [`encode_error_for`]: super::encode_error_for
pub const MIN_PROTOCOL_VERSION: u16 = 6;

/// The version a session with a peer that speaks `theirs` runs at, if this
/// build speaks one in common with it.
pub fn session_version(theirs: u16) -> Option<u16> {
    let version = theirs.min(PROTOCOL_VERSION);
    (version >= MIN_PROTOCOL_VERSION).then_some(version)
}
