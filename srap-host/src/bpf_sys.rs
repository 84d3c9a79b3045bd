//! The `bpf(2)` commands aya 0.14 does not offer, called directly:
//! `BPF_PROG_TEST_RUN` (run a loaded program once on a packet of ours,
//! which is how the sender agent repairs the binder's occupancy in kernel
//! context), `BPF_MAP_LOOKUP_BATCH` (read a whole array map in a few
//! calls: the binder's socket table has 2^18 rows, which one lookup per row
//! would read in as many system calls), `BPF_OBJ_GET` + `BPF_LINK_UPDATE`
//! (put a newly loaded program behind a pinned link in one step, so a
//! restarted or upgraded agent never leaves a gap in steering) and
//! `BPF_PROG_QUERY` (which programs a cgroup runs at a hook: what `srap
//! exec` waits for).

use std::{
    ffi::CString,
    io,
    os::fd::{BorrowedFd, FromRawFd as _, OwnedFd},
    path::Path,
};

/// `BPF_PROG_TEST_RUN`.
const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `BPF_MAP_LOOKUP_BATCH`.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// `BPF_OBJ_GET`.
const BPF_OBJ_GET: libc::c_long = 7;
/// `BPF_PROG_QUERY`.
const BPF_PROG_QUERY: libc::c_long = 16;
/// `BPF_LINK_UPDATE`.
const BPF_LINK_UPDATE: libc::c_long = 29;
/// Bytes of `union bpf_attr` passed: more than either command's part, the
/// rest zero (the kernel accepts a longer attr whose tail is zero).
const ATTR_LEN: usize = 128;
/// Rows asked per `BPF_MAP_LOOKUP_BATCH` call.
const BATCH_ROWS: u32 = 8192;

/// What one test run of a program returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value.
    pub retval: u32,
    /// The packet as the program left it.
    pub data_out: Vec<u8>,
}

/// `union bpf_attr` as bytes, filled in field by field.
struct Attr([u64; ATTR_LEN / 8]);

impl Attr {
    fn new() -> Self {
        Self([0; ATTR_LEN / 8])
    }

    /// Sets the `u32` at byte offset `at` (a multiple of 4).
    fn set_u32(&mut self, at: usize, value: u32) {
        let word = &mut self.0[at / 8];
        let shift = if cfg!(target_endian = "little") {
            (at % 8) * 8
        } else {
            32 - (at % 8) * 8
        };
        *word = (*word & !(0xffff_ffffu64 << shift)) | (u64::from(value) << shift);
    }

    fn u32_at(&self, at: usize) -> u32 {
        let shift = if cfg!(target_endian = "little") {
            (at % 8) * 8
        } else {
            32 - (at % 8) * 8
        };
        (self.0[at / 8] >> shift) as u32
    }

    fn set_u64(&mut self, at: usize, value: u64) {
        self.0[at / 8] = value;
    }

    /// `bpf(cmd, attr, size)`: every call of this module goes through
    /// here, so a unit test can put a fake kernel in its place (for its
    /// own thread, `fake::with_kernel`) and judge the logic around the
    /// calls without root.
    fn call(&mut self, cmd: libc::c_long) -> io::Result<()> {
        self.call_ret(cmd).map(drop)
    }

    /// As [`Self::call`], for a command whose result is a new descriptor.
    fn call_fd(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        let fd = self.call_ret(cmd)?;
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("a descriptor past i32"))?;
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `bpf(cmd, attr, size)`'s non-negative return value.
    fn call_ret(&mut self, cmd: libc::c_long) -> io::Result<libc::c_long> {
        #[cfg(test)]
        if let Some(result) = fake::call(cmd, self) {
            return result.map(|()| 0);
        }
        // SAFETY: the attr is ATTR_LEN valid, aligned bytes that live across
        // the call; every pointer in it points at a buffer the caller keeps
        // alive and sized as the attr says.
        let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, self.0.as_mut_ptr(), ATTR_LEN) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ret)
    }
}

/// Runs the loaded program `prog` once on `data` (`BPF_PROG_TEST_RUN`);
/// `out_len` bytes are room for the packet it leaves.
pub fn prog_test_run(prog: BorrowedFd<'_>, data: &[u8], out_len: usize) -> io::Result<TestRun> {
    use std::os::fd::AsRawFd as _;
    let mut data_in = data.to_vec();
    let mut data_out = vec![0u8; out_len];
    let len = |n: usize| {
        u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet too long"))
    };
    let mut attr = Attr::new();
    // struct { prog_fd, retval, data_size_in, data_size_out, data_in,
    // data_out, repeat, duration, … } test;
    attr.set_u32(0, prog.as_raw_fd() as u32);
    attr.set_u32(8, len(data_in.len())?);
    attr.set_u32(12, len(data_out.len())?);
    attr.set_u64(16, data_in.as_mut_ptr() as u64);
    attr.set_u64(24, data_out.as_mut_ptr() as u64);
    attr.set_u32(32, 1);
    attr.call(BPF_PROG_TEST_RUN)?;
    let written = (attr.u32_at(12) as usize).min(data_out.len());
    data_out.truncate(written);
    Ok(TestRun {
        retval: attr.u32_at(4),
        data_out,
    })
}

/// Values `start..start + count` of the array map `map` (`u32` keys,
/// `value_size` bytes each), in key order, read with
/// `BPF_MAP_LOOKUP_BATCH` (Linux 5.6+); fewer when the map ends first.
pub fn array_values(
    map: BorrowedFd<'_>,
    value_size: usize,
    start: u32,
    count: u32,
) -> io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd as _;
    let rows = count as usize;
    let mut values = vec![0u8; rows * value_size];
    let mut keys = vec![0u32; BATCH_ROWS as usize];
    let mut done = 0usize;
    // The batch starts after `in_batch`: the key before the first wanted.
    let mut cursor: Option<u32> = start.checked_sub(1);
    while done < rows {
        let ask = BATCH_ROWS.min((rows - done) as u32);
        let mut attr = Attr::new();
        // struct { in_batch, out_batch, keys, values, count, map_fd,
        // elem_flags, flags } batch;
        let mut in_batch = cursor.unwrap_or(0);
        let mut out_batch: u32 = 0;
        if cursor.is_some() {
            attr.set_u64(0, std::ptr::from_mut(&mut in_batch) as u64);
        }
        attr.set_u64(8, std::ptr::from_mut(&mut out_batch) as u64);
        attr.set_u64(16, keys.as_mut_ptr() as u64);
        attr.set_u64(24, values[done * value_size..].as_mut_ptr() as u64);
        attr.set_u32(32, ask);
        attr.set_u32(36, map.as_raw_fd() as u32);
        let result = attr.call(BPF_MAP_LOOKUP_BATCH);
        let got = (attr.u32_at(32) as usize).min(rows - done);
        done += got;
        match result {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => break,
            Err(err) => return Err(err),
        }
        if got == 0 {
            break;
        }
        cursor = Some(out_batch);
    }
    values.truncate(done * value_size);
    Ok(values)
}

#[cfg(test)]
mod fake;

/// Opens the object pinned at `path` on bpffs (`BPF_OBJ_GET`).
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the pin's path"))?;
    let mut attr = Attr::new();
    attr.set_u64(0, name.as_ptr() as u64);
    attr.call_fd(BPF_OBJ_GET)
}

/// Puts program `prog` behind link `link` in place of the one it runs
/// (`BPF_LINK_UPDATE`, Linux 5.7+): the hook runs one or the other at
/// every call, never neither.
pub fn link_update(link: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let mut attr = Attr::new();
    attr.set_u32(0, link.as_raw_fd() as u32);
    attr.set_u32(4, prog.as_raw_fd() as u32);
    attr.call(BPF_LINK_UPDATE)
}

/// `BPF_CGROUP_INET4_CONNECT`, the attach type of `cgroup/connect4`.
pub const CGROUP_INET4_CONNECT: u32 = 10;
/// `BPF_CGROUP_INET6_CONNECT`.
pub const CGROUP_INET6_CONNECT: u32 = 11;

/// The ids of the programs attached to `cgroup` (its own, not inherited)
/// at `attach_type` (`BPF_PROG_QUERY`); at most 64.
pub fn prog_query(cgroup: BorrowedFd<'_>, attach_type: u32) -> io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd as _;
    let mut ids = [0u32; 64];
    let mut attr = Attr::new();
    attr.set_u32(0, cgroup.as_raw_fd() as u32);
    attr.set_u32(4, attach_type);
    attr.set_u64(16, ids.as_mut_ptr() as u64);
    attr.set_u32(24, ids.len() as u32);
    attr.call(BPF_PROG_QUERY)?;
    let count = (attr.u32_at(24) as usize).min(ids.len());
    Ok(ids[..count].to_vec())
}

/// `BPF_PROG_GET_FD_BY_ID`.
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
/// `BPF_OBJ_GET_INFO_BY_FD`.
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// Bytes of `struct bpf_prog_info` read: up to and with its `name`.
const PROG_INFO_LEN: usize = 80;
/// Where `struct bpf_prog_info` holds `name` (16 bytes, NUL-padded).
const PROG_INFO_NAME: usize = 64;

/// The name of loaded program `id` (as the kernel keeps it: its first 15
/// bytes).
pub fn prog_name(id: u32) -> io::Result<String> {
    let mut attr = Attr::new();
    attr.set_u32(0, id);
    let prog = attr.call_fd(BPF_PROG_GET_FD_BY_ID)?;
    let mut info = [0u8; PROG_INFO_LEN];
    let mut attr = Attr::new();
    {
        use std::os::fd::AsRawFd as _;
        attr.set_u32(0, prog.as_raw_fd() as u32);
    }
    attr.set_u32(4, PROG_INFO_LEN as u32);
    attr.set_u64(8, info.as_mut_ptr() as u64);
    attr.call(BPF_OBJ_GET_INFO_BY_FD)?;
    let name = &info[PROG_INFO_NAME..PROG_INFO_NAME + 16];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, fs::File, os::fd::AsFd as _, rc::Rc};

    use super::{
        fake::{Batch, array_map, reversing_program, value, with_kernel},
        *,
    };

    /// Values `start..` of a fake map of `rows` rows read by
    /// [`array_values`], and the batches it asked for.
    fn read_fake(rows: u32, start: u32, count: u32) -> (io::Result<Vec<u32>>, Vec<Batch>) {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let fd = File::open("/dev/null").expect("any descriptor");
        let read = with_kernel(array_map(rows, seen.clone()), || {
            array_values(fd.as_fd(), 4, start, count)
        });
        let values = read.map(|bytes| {
            let rows = bytes.chunks_exact(4);
            rows.map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        });
        (values, seen.take())
    }

    #[test]
    fn a_batch_read_asks_from_the_key_before_its_start_batch_after_batch() {
        let (values, batches) = read_fake(3 * BATCH_ROWS, 5, 2 * BATCH_ROWS + 100);
        let values = values.expect("read");
        let wanted: Vec<u32> = (5..5 + 2 * BATCH_ROWS + 100).map(value).collect();
        assert_eq!(values, wanted);
        let batch = |after, asked| Batch { after, asked };
        assert_eq!(
            batches,
            [
                batch(Some(4), BATCH_ROWS),
                batch(Some(4 + BATCH_ROWS), BATCH_ROWS),
                batch(Some(4 + 2 * BATCH_ROWS), 100),
            ]
        );
    }

    #[test]
    fn a_batch_read_from_key_zero_names_no_key_before_it() {
        let (values, batches) = read_fake(10, 0, 4);
        assert_eq!(values.expect("read"), [1, 4, 7, 10]);
        assert_eq!(
            batches,
            [Batch {
                after: None,
                asked: 4
            }]
        );
    }

    #[test]
    fn a_map_that_ends_first_gives_the_rows_it_has() {
        let (values, batches) = read_fake(100, 90, 50);
        let wanted: Vec<u32> = (90..100).map(value).collect();
        assert_eq!(values.expect("read"), wanted, "ENOENT ends the read");
        assert_eq!(batches.len(), 1);
        let (values, _) = read_fake(10, 20, 5);
        assert_eq!(values.expect("past the end"), Vec::<u32>::new());
    }

    #[test]
    fn a_refused_batch_is_the_error() {
        let fd = File::open("/dev/null").expect("any descriptor");
        let refuse = |_, _: &mut Attr| Err(io::Error::from_raw_os_error(libc::EPERM));
        let err = with_kernel(refuse, || array_values(fd.as_fd(), 4, 0, 8)).expect_err("EPERM");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn a_test_run_returns_the_programs_value_and_the_packet_it_left() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let fd = File::open("/dev/null").expect("any descriptor");
        let run = with_kernel(reversing_program(2, seen.clone()), || {
            prog_test_run(fd.as_fd(), &[1, 2, 3, 4, 5], 16)
        });
        let run = run.expect("ran");
        assert_eq!((run.retval, run.data_out), (2, vec![5, 4, 3, 2, 1]));
        assert_eq!(*seen.borrow(), [1, 2, 3, 4, 5], "the packet given");
        let short = with_kernel(reversing_program(0, seen), || {
            prog_test_run(fd.as_fd(), &[1, 2, 3, 4, 5], 3)
        });
        assert_eq!(short.expect("ran").data_out, [5, 4, 3], "as much as fits");
    }

    #[test]
    fn attr_fields_land_at_their_offsets() {
        let mut attr = Attr::new();
        attr.set_u32(0, 7);
        attr.set_u32(4, 9);
        attr.set_u32(36, 0xdead_beef);
        attr.set_u64(16, 0x1122_3344_5566_7788);
        assert_eq!((attr.u32_at(0), attr.u32_at(4)), (7, 9));
        assert_eq!(attr.u32_at(36), 0xdead_beef);
        assert_eq!(attr.u32_at(32), 0);
        assert_eq!(attr.0[2], 0x1122_3344_5566_7788);
    }
}
