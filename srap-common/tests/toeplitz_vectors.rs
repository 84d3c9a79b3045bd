//! The published Toeplitz test vectors (Microsoft's RSS verification suite,
//! also in DPDK's test_thash.c), IPv4 and IPv6, IP-only and IP+TCP, through
//! the definition, the lookup tables and the full model.

use std::net::SocketAddr;

use serde_json::Value;
use srap_common::rss::{
    FlowTuple, HashFields, HashInput, InputXfrm, RssDescription, RssModel, ToeplitzKey,
    ToeplitzTable, hash_naive,
};

const VECTORS: &str = include_str!("vectors/toeplitz-ms.json");

struct Case {
    tuple: FlowTuple,
    ip_only: u32,
    ip_tcp: u32,
}

fn cases() -> (String, Vec<Case>) {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let hex =
        |v: &Value| u32::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let cases = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let addr = |ip: &str, port: &str| -> SocketAddr {
                SocketAddr::new(
                    case[ip].as_str().unwrap().parse().unwrap(),
                    case[port].as_u64().unwrap() as u16,
                )
            };
            Case {
                tuple: FlowTuple::from_sockets(addr("src", "src_port"), addr("dst", "dst_port"))
                    .unwrap(),
                ip_only: hex(&case["hash_ip_only"]),
                ip_tcp: hex(&case["hash_ip_tcp"]),
            }
        })
        .collect();
    (doc["key"].as_str().unwrap().to_string(), cases)
}

#[test]
fn vectors_cover_both_families() {
    let (_, cases) = cases();
    assert_eq!(cases.iter().filter(|c| c.tuple.is_ipv4()).count(), 5);
    assert_eq!(cases.iter().filter(|c| !c.tuple.is_ipv4()).count(), 3);
}

#[test]
fn definition_and_tables_match_every_vector() {
    let (key, cases) = cases();
    let key = ToeplitzKey::parse_hex(&key).unwrap();
    let table = ToeplitzTable::new(key.clone());
    let ip_only: HashFields = "sd".parse().unwrap();
    for case in &cases {
        for (fields, expected) in [(ip_only, case.ip_only), (HashFields::ALL, case.ip_tcp)] {
            let input = HashInput::new(&case.tuple, fields, InputXfrm::None);
            assert_eq!(
                hash_naive(&key, input.as_bytes()),
                expected,
                "naive {:?} {fields}",
                case.tuple
            );
            assert_eq!(
                table.hash(input.as_bytes()),
                expected,
                "table {:?} {fields}",
                case.tuple
            );
        }
    }
}

#[test]
fn model_hashes_every_vector_with_the_fields_it_is_given() {
    let (key, cases) = cases();
    for (letters, pick) in [("sd", 0), ("sdfn", 1)] {
        let desc = RssDescription::from_json(&format!(
            r#"{{"key":"{key}","indir":[0],"fields":{{"tcp4":"{letters}","tcp6":"{letters}"}}}}"#
        ))
        .unwrap();
        let model = RssModel::from_description(&desc).unwrap();
        for case in &cases {
            let expected = [case.ip_only, case.ip_tcp][pick];
            assert_eq!(
                model.hash(&case.tuple),
                expected,
                "{letters} {:?}",
                case.tuple
            );
        }
    }
}

proptest::proptest! {
    /// The lookup tables agree with the definition for any key and input.
    #[test]
    fn tables_agree_with_the_definition(
        key in proptest::collection::vec(proptest::prelude::any::<u8>(), 40..=64),
        input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=36),
    ) {
        let key = ToeplitzKey::new(key).unwrap();
        let table = ToeplitzTable::new(key.clone());
        let expected = hash_naive(&key, &input);
        proptest::prop_assert_eq!(table.hash(&input), expected);
    }
}
