//! The attach path's decisions on in-memory pins: which programs are
//! attached, which put behind a pinned link and which detached, which pinned maps are refused, re-created
//! or kept; and removing pins from a plain directory. No root.

use std::{
    cell::RefCell,
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use aya::programs::links::LinkError;
use srap_common::binder::{
    BIND4_PROGRAM, BIND6_PROGRAM, BinderSizes, CLOSE_PROGRAM, CONNECT4_PROGRAM, CONNECT6_PROGRAM,
    GETPEERNAME4_PROGRAM, GETPEERNAME6_PROGRAM, PINNED_MAPS, RELEASE_PROGRAM,
};

use super::{
    Attachment, PinLayout, SenderError, attach_missing, check_bpffs, check_pinned_maps,
    remove_pins,
    seam::{Attacher, MapShape, Pins},
    settings_text,
};

/// Pins in memory: files by path, the maps' shapes, which files are not
/// links, what was removed.
#[derive(Default)]
struct FakePins {
    files: BTreeSet<PathBuf>,
    not_links: BTreeSet<PathBuf>,
    shapes: BTreeMap<PathBuf, MapShape>,
    sizes: Option<BinderSizes>,
    removed: Vec<PathBuf>,
    /// Links opened, in order (through a shared borrow, as the real ones).
    opened: RefCell<Vec<PathBuf>>,
}

impl Pins for FakePins {
    fn exists(&self, path: &Path) -> bool {
        self.files.contains(path) || self.shapes.contains_key(path)
    }

    fn open_link(&self, path: &Path) -> Result<(), LinkError> {
        self.opened.borrow_mut().push(path.to_path_buf());
        match self.not_links.contains(path) {
            true => Err(LinkError::InvalidLink),
            false => Ok(()),
        }
    }

    fn map_shape(&self, name: &'static str, path: &Path) -> Result<MapShape, SenderError> {
        self.shapes
            .get(path)
            .copied()
            .ok_or(SenderError::Missing(name))
    }

    fn remove(&mut self, path: &Path) -> Result<bool, SenderError> {
        self.removed.push(path.to_path_buf());
        Ok(self.shapes.remove(path).is_some() | self.files.remove(path))
    }

    fn pinned_sizes(&self, _: &PinLayout) -> Option<BinderSizes> {
        self.sizes
    }
}

/// Attaches by name, refusing one if asked.
#[derive(Default)]
struct FakeAttacher {
    attached: Vec<&'static str>,
    /// Put behind their pinned links, in order.
    replaced: Vec<&'static str>,
    refuse: Option<&'static str>,
}

impl Attacher for FakeAttacher {
    fn attach_and_pin(&mut self, name: &'static str) -> Result<(), SenderError> {
        if self.refuse == Some(name) {
            return Err(SenderError::Missing(name));
        }
        self.attached.push(name);
        Ok(())
    }

    fn replace(&mut self, name: &'static str) -> Result<(), SenderError> {
        self.replaced.push(name);
        Ok(())
    }
}

fn layout() -> PinLayout {
    PinLayout::new("/sys/fs/bpf/srap-test")
}

/// `pins` with the links of `programs` pinned.
fn with_links(programs: &[&str]) -> FakePins {
    let mut pins = FakePins::default();
    pins.files.extend(programs.iter().map(|p| layout().link(p)));
    pins
}

const ALL: [&str; 8] = [
    RELEASE_PROGRAM,
    CLOSE_PROGRAM,
    GETPEERNAME4_PROGRAM,
    GETPEERNAME6_PROGRAM,
    BIND4_PROGRAM,
    BIND6_PROGRAM,
    CONNECT4_PROGRAM,
    CONNECT6_PROGRAM,
];

#[test]
fn nothing_pinned_attaches_every_program_release_and_binds_first() {
    let mut attacher = FakeAttacher::default();
    let how =
        attach_missing(&mut FakePins::default(), &mut attacher, &layout(), &ALL).expect("attach");
    assert_eq!(how, Attachment::Attached);
    assert_eq!(attacher.attached, ALL);
}

#[test]
fn pinned_links_get_this_agents_programs_behind_them() {
    let mut pins = with_links(&ALL);
    let mut attacher = FakeAttacher::default();
    let how = attach_missing(&mut pins, &mut attacher, &layout(), &ALL).expect("adopt");
    assert_eq!(how, Attachment::Adopted);
    assert!(attacher.attached.is_empty(), "{:?}", attacher.attached);
    assert_eq!(attacher.replaced, ALL, "each link runs the new program");
    let opened: Vec<PathBuf> = ALL.iter().map(|p| layout().link(p)).collect();
    assert_eq!(*pins.opened.borrow(), opened, "each proven a live link");
}

#[test]
fn some_links_pinned_attach_the_rest_only() {
    let mut pins = with_links(&[RELEASE_PROGRAM, BIND4_PROGRAM]);
    let mut attacher = FakeAttacher::default();
    let how = attach_missing(&mut pins, &mut attacher, &layout(), &ALL).expect("attach");
    assert_eq!(how, Attachment::Adopted);
    assert_eq!(
        attacher.attached,
        [
            CLOSE_PROGRAM,
            GETPEERNAME4_PROGRAM,
            GETPEERNAME6_PROGRAM,
            BIND6_PROGRAM,
            CONNECT4_PROGRAM,
            CONNECT6_PROGRAM
        ]
    );
}

/// Every link but the TCP close's pinned (attached by settings that did
/// not use it): the others get the new programs, that one is attached.
#[test]
fn a_binder_without_the_tcp_close_program_gains_it_alone() {
    let older: Vec<&str> = ALL.into_iter().filter(|p| *p != CLOSE_PROGRAM).collect();
    let mut pins = with_links(&older);
    let mut attacher = FakeAttacher::default();
    let how = attach_missing(&mut pins, &mut attacher, &layout(), &ALL).expect("attach");
    assert_eq!(how, Attachment::Adopted);
    assert_eq!(attacher.attached, [CLOSE_PROGRAM]);
    assert_eq!(attacher.replaced.len(), older.len());
}

/// Settings that use fewer programs than the pinned binder ran (spreading
/// turned off): the links of the others are removed, with their programs'
/// pins, after the wanted ones are in place.
#[test]
fn links_of_programs_these_settings_do_not_use_are_detached() {
    let mut pins = with_links(&ALL);
    let wanted = [
        RELEASE_PROGRAM,
        BIND4_PROGRAM,
        BIND6_PROGRAM,
        CONNECT4_PROGRAM,
        CONNECT6_PROGRAM,
    ];
    let mut attacher = FakeAttacher::default();
    let how = attach_missing(&mut pins, &mut attacher, &layout(), &wanted).expect("attach");
    assert_eq!(how, Attachment::Adopted);
    assert_eq!(attacher.replaced, wanted);
    let gone = [CLOSE_PROGRAM, GETPEERNAME4_PROGRAM, GETPEERNAME6_PROGRAM];
    let removed: Vec<PathBuf> = gone
        .iter()
        .flat_map(|p| [layout().link(p), layout().program(p)])
        .collect();
    assert_eq!(pins.removed, removed);
    assert!(gone.iter().all(|p| !pins.exists(&layout().link(p))));
}

#[test]
fn a_stray_file_at_a_link_pin_stops_the_attach_there() {
    let mut pins = with_links(&[BIND4_PROGRAM]);
    pins.not_links.insert(layout().link(BIND4_PROGRAM));
    let mut attacher = FakeAttacher::default();
    let err = attach_missing(&mut pins, &mut attacher, &layout(), &ALL).expect_err("stray");
    let SenderError::StalePins { dir, detail } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(dir, layout().dir());
    let link = layout().link(BIND4_PROGRAM);
    assert_eq!(
        *detail,
        format!("{} is not a usable link: Invalid link", link.display())
    );
    assert_eq!(
        attacher.attached,
        [
            RELEASE_PROGRAM,
            CLOSE_PROGRAM,
            GETPEERNAME4_PROGRAM,
            GETPEERNAME6_PROGRAM
        ],
        "none after it"
    );
}

#[test]
fn a_refused_attach_is_the_error_and_attaches_nothing_after_it() {
    let mut attacher = FakeAttacher {
        refuse: Some(CONNECT4_PROGRAM),
        ..FakeAttacher::default()
    };
    let err = attach_missing(&mut FakePins::default(), &mut attacher, &layout(), &ALL)
        .expect_err("refused");
    assert!(
        matches!(err, SenderError::Missing(CONNECT4_PROGRAM)),
        "{err:?}"
    );
    assert_eq!(
        attacher.attached,
        [
            RELEASE_PROGRAM,
            CLOSE_PROGRAM,
            GETPEERNAME4_PROGRAM,
            GETPEERNAME6_PROGRAM,
            BIND4_PROGRAM,
            BIND6_PROGRAM
        ]
    );
}

/// Every map pinned as `sizes` make it.
fn maps_pinned(sizes: &BinderSizes) -> FakePins {
    let mut pins = FakePins::default();
    for spec in PINNED_MAPS {
        let shape = MapShape {
            key_size: spec.key_size,
            value_size: spec.value_size,
            max_entries: spec.max_entries(sizes),
        };
        pins.shapes.insert(layout().map(spec.name), shape);
    }
    pins
}

/// Settings that size some maps otherwise than the defaults, and those
/// maps' names.
fn fewer_receivers() -> (BinderSizes, Vec<&'static str>) {
    let sizes = BinderSizes {
        receivers: 8,
        ..BinderSizes::DEFAULT
    };
    let differ = PINNED_MAPS
        .iter()
        .filter(|s| s.max_entries(&sizes) != s.max_entries(&BinderSizes::DEFAULT))
        .map(|s| s.name)
        .collect();
    (sizes, differ)
}

#[test]
fn pinned_maps_of_these_sizes_are_kept() {
    let sizes = BinderSizes::DEFAULT;
    let mut pins = maps_pinned(&sizes);
    check_pinned_maps(&mut pins, &layout(), &sizes).expect("kept");
    assert!(pins.removed.is_empty());
    let mut none = FakePins::default();
    check_pinned_maps(&mut none, &layout(), &sizes).expect("nothing pinned");
}

#[test]
fn a_map_of_another_version_is_refused() {
    let sizes = BinderSizes::DEFAULT;
    let mut pins = maps_pinned(&sizes);
    let spec = &PINNED_MAPS[2];
    let path = layout().map(spec.name);
    pins.shapes.get_mut(&path).expect("pinned").value_size += 4;
    let err = check_pinned_maps(&mut pins, &layout(), &sizes).expect_err("refused");
    let SenderError::StalePins { detail, .. } = &err else {
        panic!("{err:?}");
    };
    let (k, v) = (spec.key_size, spec.value_size);
    let expected = format!(
        "{} has key/value sizes ({k}, {}), this agent uses ({k}, {v})",
        spec.name,
        v + 4
    );
    assert_eq!(*detail, expected);
    assert!(pins.removed.is_empty());
}

#[test]
fn resized_maps_are_recreated_while_nothing_is_attached() {
    let (pinned, resized) = fewer_receivers();
    assert!(!resized.is_empty(), "receivers size some map");
    let mut pins = maps_pinned(&pinned);
    check_pinned_maps(&mut pins, &layout(), &BinderSizes::DEFAULT).expect("re-created");
    let removed: Vec<PathBuf> = resized.iter().map(|m| layout().map(m)).collect();
    assert_eq!(pins.removed, removed);
}

#[test]
fn resized_maps_under_an_attached_binder_are_refused_naming_both_settings() {
    let (pinned, resized) = fewer_receivers();
    let mut pins = maps_pinned(&pinned);
    pins.files.insert(layout().link(CONNECT6_PROGRAM));
    pins.sizes = Some(pinned);
    let wanted = BinderSizes::DEFAULT;
    let err = check_pinned_maps(&mut pins, &layout(), &wanted).expect_err("refused");
    let SenderError::PinnedSizes {
        pinned: said_pinned,
        wanted: said_wanted,
        maps,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*said_pinned, settings_text(&pinned));
    assert!(said_pinned.contains("--max-receivers 8"), "{said_pinned}");
    assert_eq!(*said_wanted, settings_text(&wanted));
    assert!(maps.starts_with(resized[0]), "{maps}");
    assert!(pins.removed.is_empty(), "open flows' maps are kept");

    pins.sizes = None;
    let err = check_pinned_maps(&mut pins, &layout(), &wanted).expect_err("refused");
    assert!(
        matches!(&err, SenderError::PinnedSizes { pinned, .. } if pinned == "other settings"),
        "{err:?}"
    );
}

/// A directory of its own under the temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("srap-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn removing_pins_counts_ours_and_leaves_a_directory_holding_others() {
    let temp = TempDir::new("remove-pins");
    let layout = PinLayout::new(temp.0.join("pins"));
    std::fs::create_dir_all(layout.dir()).expect("pin dir");
    let ours = [
        layout.link(RELEASE_PROGRAM),
        layout.map(PINNED_MAPS[0].name),
    ];
    for path in &ours {
        std::fs::write(path, b"").expect("pin");
    }
    let foreign = layout.dir().join("not-srap");
    std::fs::write(&foreign, b"").expect("foreign");
    assert_eq!(remove_pins(&layout).expect("removed"), 2);
    assert!(ours.iter().all(|p| !p.exists()));
    assert!(foreign.exists(), "not ours: left");

    std::fs::remove_file(&foreign).expect("foreign");
    assert_eq!(remove_pins(&layout).expect("none left"), 0);
    assert!(!layout.dir().exists(), "empty: removed");
    assert_eq!(remove_pins(&layout).expect("gone"), 0, "twice is fine");
}

#[test]
fn a_pin_dir_off_bpffs_is_refused_without_mounting() {
    let temp = TempDir::new("not-bpffs");
    let dir = temp.0.join("a/b");
    let err = check_bpffs(&dir).expect_err("not bpffs");
    assert!(
        matches!(&err, SenderError::NotBpffs { dir: d } if *d == dir),
        "{err:?}"
    );
}
