//! The RSS description JSON (`--rss FILE`, what `srap rss show --json`
//! prints and a receiver agent serves) on arbitrary bytes: parsing and
//! validating must return an error, never panic, hang or allocate without
//! bound; a description the model accepts must place any tuple without
//! panicking, and survive a JSON and a wire round trip unchanged.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use srap_common::{
    rss::{FlowTuple, RssDescription, RssModel},
    wire::WireDescription,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(description) = RssDescription::from_json(text) else {
        return;
    };
    let Ok(model) = RssModel::from_description(&description) else {
        return;
    };
    let again = RssDescription::from_json(&description.to_json_pretty()).expect("re-parses");
    assert_eq!(again, description);
    let wire = WireDescription::from(&description);
    assert_eq!(RssDescription::from(wire), description);
    let v4 = |a: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, a));
    let v6 = |a: u16| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, a));
    for (src, dst) in [(v4(1), v4(2)), (v6(1), v6(2))] {
        for sport in [0, 1, 40000, u16::MAX] {
            let tuple = FlowTuple::new(src, sport, dst, 5201).expect("one family");
            let _ = model.landing(&tuple);
        }
    }
});
