//! The wire decoder on arbitrary bytes: it must return an error, never
//! panic, hang or allocate beyond the frame limit; and whatever it accepts
//! must survive an encode/decode round trip under its frame's version
//! (bincode accepts some non-minimal integer encodings, so the bytes
//! themselves may differ).
#![no_main]

use libfuzzer_sys::fuzz_target;
use srap_common::wire::{self, MAX_FRAME, MAX_HANDSHAKE_FRAME};

fuzz_target!(|data: &[u8]| {
    let _ = wire::decode_frame(data, MAX_HANDSHAKE_FRAME);
    if let Ok((message, _)) = wire::decode_frame(data, MAX_FRAME) {
        // Under the frame's own version: a description's layout depends on it.
        let version =
            wire::version_of(&data[wire::PREFIX_LEN..]).expect("a decoded frame's header");
        let frame = wire::encode_for(&message, version).expect("a decoded message encodes");
        let (again, used) = wire::decode_frame(&frame, MAX_FRAME).expect("decodes");
        assert_eq!((again, used), (message, frame.len()));
    }
    let _ = wire::decode_payload(data);
});
