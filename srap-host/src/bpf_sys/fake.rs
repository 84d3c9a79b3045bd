//! A fake kernel in place of `bpf(2)` for this module's unit tests: the
//! one call site, [`Attr::call`], asks it first, on the test's own thread.
//! What it plays is an array map answering `BPF_MAP_LOOKUP_BATCH` and a
//! program answering `BPF_PROG_TEST_RUN` as the kernel does, so the
//! batching and the buffers' handling are judged without root; whether the
//! kernel really answers so is the kernel tests' to judge.

use std::{cell::RefCell, io};

use super::{Attr, BPF_MAP_LOOKUP_BATCH, BPF_PROG_TEST_RUN};

type Kernel = Box<dyn FnMut(libc::c_long, &mut Attr) -> io::Result<()>>;

thread_local! {
    static KERNEL: RefCell<Option<Kernel>> = const { RefCell::new(None) };
}

/// The fake kernel's answer to `cmd`, when one is in place.
pub(super) fn call(cmd: libc::c_long, attr: &mut Attr) -> Option<io::Result<()>> {
    KERNEL.with(|kernel| kernel.borrow_mut().as_mut().map(|k| k(cmd, attr)))
}

/// Takes the fake kernel out again, even when the test panics.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        KERNEL.with(|kernel| kernel.borrow_mut().take());
    }
}

/// Runs `body` with `kernel` answering every `bpf(2)` call of this thread.
pub(super) fn with_kernel<T>(
    kernel: impl FnMut(libc::c_long, &mut Attr) -> io::Result<()> + 'static,
    body: impl FnOnce() -> T,
) -> T {
    KERNEL.with(|k| *k.borrow_mut() = Some(Box::new(kernel)));
    let _installed = Installed;
    body()
}

/// An address the caller put in the attr, as a pointer to `T`.
fn pointer<T>(attr: &Attr, at: usize) -> *mut T {
    std::ptr::with_exposed_provenance_mut(attr.0[at / 8] as usize)
}

/// One `BPF_MAP_LOOKUP_BATCH` call as the fake array map saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Batch {
    /// The key the batch starts after (`None`: from key 0).
    pub after: Option<u32>,
    /// Rows asked.
    pub asked: u32,
}

/// An array map of `rows` rows of 4 bytes, row `k` holding `value(k)`;
/// every batch asked is noted in `seen`.
pub(super) fn array_map(
    rows: u32,
    seen: std::rc::Rc<RefCell<Vec<Batch>>>,
) -> impl FnMut(libc::c_long, &mut Attr) -> io::Result<()> {
    move |cmd, attr| {
        assert_eq!(cmd, BPF_MAP_LOOKUP_BATCH, "only batches here");
        let in_batch: *mut u32 = pointer(attr, 0);
        // SAFETY: a non-null in_batch points at the caller's u32, alive
        // across the call (array_values keeps it on its stack).
        let after = (!in_batch.is_null()).then(|| unsafe { in_batch.read() });
        let asked = attr.u32_at(32);
        seen.borrow_mut().push(Batch { after, asked });
        let first = after.map_or(0, |k| k + 1);
        let count = asked.min(rows.saturating_sub(first));
        let values: *mut u8 = pointer(attr, 24);
        let keys: *mut u32 = pointer(attr, 16);
        for (i, key) in (first..first + count).enumerate() {
            // SAFETY: the caller sized keys and values for `asked` rows of
            // 4 bytes, and i < count <= asked.
            unsafe {
                keys.add(i).write(key);
                values
                    .add(i * 4)
                    .copy_from_nonoverlapping(value(key).to_ne_bytes().as_ptr(), 4);
            }
        }
        attr.set_u32(32, count);
        if count > 0 {
            let out_batch: *mut u32 = pointer(attr, 8);
            // SAFETY: out_batch points at the caller's u32, alive across
            // the call.
            unsafe { out_batch.write(first + count - 1) };
        }
        // The kernel says ENOENT once no key follows the last one given.
        if first + count >= rows {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        Ok(())
    }
}

/// What the fake array map holds in row `key`.
pub(super) fn value(key: u32) -> u32 {
    key * 3 + 1
}

/// A program that returns `retval` and leaves its packet reversed, noting
/// the packet it was given in `seen`.
pub(super) fn reversing_program(
    retval: u32,
    seen: std::rc::Rc<RefCell<Vec<u8>>>,
) -> impl FnMut(libc::c_long, &mut Attr) -> io::Result<()> {
    move |cmd, attr| {
        assert_eq!(cmd, BPF_PROG_TEST_RUN, "only test runs here");
        assert_eq!(attr.u32_at(32), 1, "run once");
        let (size_in, room) = (attr.u32_at(8) as usize, attr.u32_at(12) as usize);
        let data_in: *mut u8 = pointer(attr, 16);
        let data_out: *mut u8 = pointer(attr, 24);
        // SAFETY: the caller's data_in holds data_size_in bytes and its
        // data_out has data_size_out bytes of room, both alive across the
        // call.
        let packet = unsafe { std::slice::from_raw_parts(data_in, size_in) }.to_vec();
        let out: Vec<u8> = packet.iter().rev().copied().collect();
        let written = out.len().min(room);
        // SAFETY: as above; written <= room.
        unsafe { data_out.copy_from_nonoverlapping(out.as_ptr(), written) };
        *seen.borrow_mut() = packet;
        attr.set_u32(4, retval);
        attr.set_u32(12, written as u32);
        Ok(())
    }
}
