//! An RSS description that cannot be modelled is refused with an error that
//! names the field and the problem.

use srap_common::rss::{RssDescription, RssModel, embedded_default};

const KEY: &str = "6d:5a:56:da:25:5b:0e:c2:41:67:25:3d:43:a3:8f:b0:d0:ca:2b:cb:ae:7b:30:b4:77:cb:2d:a3:80:30:f2:0c:6a:42:b7:3b:be:ac:01:fa";

fn error_of(json: &str) -> String {
    RssModel::from_json(json).unwrap_err().to_string()
}

#[track_caller]
fn assert_error(json: &str, needles: &[&str]) {
    let message = error_of(json);
    for needle in needles {
        assert!(message.contains(needle), "`{message}` lacks `{needle}`");
    }
}

#[test]
fn the_embedded_default_is_a_32_queue_receiver() {
    let model = RssModel::from_description(&embedded_default()).unwrap();
    assert_eq!(model.reachable_cpus().len(), 32);
    assert_eq!(model.indir().len(), 128);
    assert_eq!(model.index_bits(), Some(7));
}

#[test]
fn optional_fields_take_their_defaults() {
    let model = RssModel::from_json(&format!(r#"{{"key":"{KEY}","indir":[0,1,2,1]}}"#)).unwrap();
    assert_eq!(model.queue_cpu(), [0, 1, 2]);
    assert_eq!(model.xfrm().to_string(), "none");
    let desc = model.to_description();
    assert_eq!(desc.hfunc, "toeplitz");
    assert_eq!(desc.fields.tcp4, "sdfn");
    assert_eq!(desc.key, KEY);
}

#[test]
fn descriptions_round_trip_through_json() {
    let desc = embedded_default();
    let again = RssDescription::from_json(&desc.to_json_pretty()).unwrap();
    assert_eq!(again, desc);
}

#[test]
fn empty_table() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[]}}"#),
        &["`indir`", "empty"],
    );
}

#[test]
fn queue_beyond_queue_cpu() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0,1,5,1],"queue_cpu":[0,2]}}"#),
        &["`indir`", "entry 2 names queue 5", "2 queues"],
    );
}

#[test]
fn empty_queue_cpu() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0],"queue_cpu":[]}}"#),
        &["`queue_cpu`", "empty"],
    );
}

#[test]
fn short_key() {
    assert_error(
        r#"{"key":"6d:5a:56:da","indir":[0]}"#,
        &["`key`", "4 bytes", "at least 40"],
    );
}

#[test]
fn bad_hex() {
    assert_error(
        &format!(r#"{{"key":"{}","indir":[0]}}"#, KEY.replacen("5a", "5g", 1)),
        &["`key`", "byte 1", "`5g`"],
    );
}

#[test]
fn unknown_hash_function() {
    assert_error(
        &format!(r#"{{"hfunc":"xor","key":"{KEY}","indir":[0]}}"#),
        &["`hfunc`", "`xor`", "Toeplitz"],
    );
}

#[test]
fn unknown_transform() {
    assert_error(
        &format!(r#"{{"input_xfrm":"sym","key":"{KEY}","indir":[0]}}"#),
        &["`input_xfrm`", "`sym`", "sym-or-xor"],
    );
}

#[test]
fn bad_field_letters() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0],"fields":{{"tcp6":"sdfx"}}}}"#),
        &["`fields.tcp6`", "`x`"],
    );
}

#[test]
fn bad_udp_field_letters() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0],"fields":{{"udp4":"sdq"}}}}"#),
        &["`fields.udp4`", "`q`"],
    );
}

/// `fields` is keyed by flow type: a file of TCP's only (every file before
/// UDP's were read) still reads, UDP's unknown; with UDP's they are kept
/// and written back.
#[test]
fn fields_are_keyed_by_protocol_and_family() {
    use srap_common::protocol::FlowType;
    let tcp_only =
        format!(r#"{{"key":"{KEY}","indir":[0],"fields":{{"tcp4":"sdfn","tcp6":"sd"}}}}"#);
    let desc = RssDescription::from_json(&tcp_only).unwrap();
    assert_eq!(desc.fields.of(FlowType::TCP6), Some("sd"));
    assert_eq!(desc.fields.of(FlowType::UDP4), None);
    assert!(
        !desc.to_json_pretty().contains("udp"),
        "nothing unknown written"
    );
    let with_udp =
        format!(r#"{{"key":"{KEY}","indir":[0],"fields":{{"udp4":"sd","udp6":"sdfn"}}}}"#);
    let desc = RssDescription::from_json(&with_udp).unwrap();
    let known: Vec<_> = desc.fields.known().map(|(f, l)| (f.name(), l)).collect();
    assert_eq!(
        known,
        [
            ("tcp4", "sdfn"),
            ("tcp6", "sdfn"),
            ("udp4", "sd"),
            ("udp6", "sdfn")
        ]
    );
    assert_eq!(
        RssDescription::from_json(&desc.to_json_pretty()).unwrap(),
        desc
    );
    assert!(RssModel::from_description(&desc).is_ok());
}

#[test]
fn missing_key_unknown_field_and_bad_json() {
    assert_error(r#"{"indir":[0]}"#, &["missing field `key`"]);
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0],"indirection":[1]}}"#),
        &["unknown field `indirection`"],
    );
    assert_error(r#"{"key": "#, &["not a valid RSS description", "line 1"]);
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[-1]}}"#),
        &["invalid value"],
    );
}

/// A table naming an absurd queue without `queue_cpu` is refused, not
/// answered by a CPU list as long as that queue number (found by fuzzing:
/// a 1.7 GB allocation for one entry).
#[test]
fn an_absurd_queue_number_is_an_error_not_an_allocation() {
    assert_error(
        &format!(r#"{{"key":"{KEY}","indir":[0,440737096]}}"#),
        &["indir", "entry 1 names queue 440737096", "at most 65536"],
    );
}
