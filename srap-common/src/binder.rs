//! The port binder's maps, and the arithmetic the `connect()` hook and user
//! space must agree on.
//!
//! Toeplitz is linear, so the receiver's indirection index of a flow is
//! `index = base ⊕ S(source port) ⊕ D(destination port)` (low k bits), where
//! only `base` depends on the addresses. The binder's data is split along
//! that line:
//!
//! * a *layout* ([`LayoutRow`], one per receiver RSS configuration and
//!   address family) holds what depends on the receiver's key and table
//!   only: `D` as two byte tables; for every CPU slot the indirection
//!   entries that land on that CPU ([`SlotRow`], entries in [`ENTRIES_MAP`]);
//!   and for every value `v` of `S(port)` the ports with that value, which
//!   form a coset of `S`'s kernel ([`CosetRow`]: its least port and the run
//!   of the kernel's span that lies in the port range; the span itself is
//!   two byte tables in the layout, so no port is stored);
//! * a *table* ([`TableRow`], one per (source address, receiver address))
//!   holds `base`, the source address to bind and its layout.
//!
//! The hook picks an entry `t` of the least-occupied slot and a port of
//! value `t ⊕ base ⊕ D(dport)`: any destination port, every port of the
//! range, no per-port state, no scan. Successive connects through a slot
//! take its entries in turn and, entry by entry, the members of their
//! cosets in ascending order ([`slot_turn`]), so the rotation visits every
//! port the slot has before it comes back to one. A port is shared across
//! destinations: the hook checks the exact 4-tuple is free and binds with
//! `SO_REUSEADDR`, as the kernel's own `connect()` shares ports.
//!
//! Where the index is not linear in both ports, a layout is built for one
//! (source, destination, destination port). With a power-of-two table it is
//! still affine in the source port (an OR with fixed bits forces or passes
//! each bit): `D` is zero and the table's `base` holds the rest. A table of
//! another size lists its ports: value `v` is the `v`-th port, a coset of
//! one (`span` zero), and a slot's entries are its ports' values. The hook
//! runs the same code for all three.
//!
//! Which slot a new flow takes is chosen in constant time: a receiver's
//! [`ReceiverSlots`] keeps one bitmap of slots per occupancy level (0, 1, 2,
//! 3 or more flows); the hook takes the first slot set in the lowest
//! non-empty level, from a rotating start. Each slot's flow count, claim
//! lock and port rotation share one word ([`slot_word`]), changed only by
//! atomic compare-and-exchange. The claim and release themselves live in
//! [`crate::occupancy`], one implementation for the hook and the tests.
//!
//! **Both ends** (`--steer both`, see `crate::ends`): a destination may
//! also name a *local table* — the same kind of [`TableRow`], built from
//! this host's own NIC facing the reverse tuple — and a [`JointRow`]. The
//! hook then claims the least-occupied receiver slot as above, then the
//! least-occupied slot of this host's CPUs (row [`LOCAL_ROW`], one
//! occupancy shared by flows toward every receiver), and takes, within the
//! receiver coset of its entry, the members whose local value is the local
//! entry's: `K(j) = δ` is solved by one lookup ([`JointRow`]), no scan.
//! With `--steer local` alone every destination's table is a local one and
//! its receiver row is [`LOCAL_ROW`].

/// `u64` words of one slot bitmap.
pub const SLOT_WORDS: usize = (MAX_SLOTS / 64) as usize;
/// Occupancy levels with their own bitmap; the last holds every slot with
/// `LEVELS - 1` flows or more.
pub const LEVELS: usize = 4;
/// Values of `S(port)` one layout may have: a table of 2^16 entries, or
/// one port each of a listed layout.
pub const MAX_VALUES: u32 = 1 << 16;
/// Ports a listed layout (an indirection table whose size is not a power of
/// two) keeps per slot.
pub const LISTED_PORTS_PER_SLOT: usize = 512;
/// Ports a connect tries (tuple taken, port held) before the kernel is left
/// to choose: the slot has run dry.
pub const MAX_BIND_ATTEMPTS: u32 = 16;
/// Rows a socket's record may take, from its home row on. With every row of
/// them taken (a quarter of the table in use: each is then taken with odds
/// 1/4^8) the socket is steered all the same and its slot freed at once, so
/// the occupancy undercounts rather than leaks.
pub const SOCKET_PROBES: u32 = 8;
/// Where a flow's local end goes (`--local-placement`), as
/// [`BinderConfig::local_placement`] holds it.
pub mod placement {
    /// The least-occupied of this host's offered CPUs (`--local-placement
    /// spread`).
    pub const LEAST_OCCUPIED: u32 = 0;
    /// The connecting CPU's own slot, else its nearest (its row of
    /// [`super::GRANTS_MAP`]).
    pub const READER: u32 = 1;
}

/// This host's CPUs `--local-placement reader` has a row for (CPU ids 0 to
/// 1023); a connect on a CPU past them is placed on the least-occupied CPU
/// and counted ([`event::READER_UNPLANNED`]). A fixed count, not a setting: a
/// row is 264 bytes, 264 KiB in all whatever the placement.
pub const READER_CPUS: u32 = 1024;
/// `BPF_F_NO_PREALLOC`: hash entries are allocated as they are inserted.
pub const NO_PREALLOC: u32 = 1;
/// The occupancy row of this host's own CPUs (`--steer local|both`): one
/// row, whatever the receiver, so flows toward every receiver share them.
/// Row 0, so that it stays where it is whatever `--max-receivers` makes the
/// rows: receivers take rows from [`FIRST_RECEIVER_ROW`] on.
pub const LOCAL_ROW: u32 = 0;
/// The first receiver's binder row.
pub const FIRST_RECEIVER_ROW: u32 = 1;
/// Members of one (receiver coset, local value) pair a connect tries
/// before it turns to the next pair.
pub const JOINT_MEMBERS: u32 = 4;
/// (receiver entry, local entry) pairs a both-ends connect tries before it
/// keeps the receiver's placement alone (bounded so the kernel's verifier
/// can walk the hook: each attempt may bind).
pub const JOINT_ATTEMPTS: u32 = 4;

pub use crate::sizes::{BinderSizes, MAX_RECEIVERS, MAX_SLOTS, MapKind, SizeSetting};
use crate::{family::Family, protocol::Protocol};

/// The binder's pinned maps, written down once. `binder_pinned_maps!(m)`
/// calls the macro `m` with the whole list: for each map its name constant,
/// its static's name (the name it is pinned under), its aya map type with
/// key and value, its capacity (a `const fn` of [`BinderSizes`]: the
/// agent's `--max-*` settings) and its flags. This crate expands it into
/// the name constants and [`PINNED_MAPS`] (what the agent sizes, pins,
/// checks and fills); `srap-ebpf` expands it into its `#[map]` statics,
/// declared at [`BinderSizes::DEFAULT`] (the agent sets each map's size at
/// load). Adding, resizing or retyping a pinned map is an edit of this list
/// alone (the eBPF code and the agent then use it by name).
#[macro_export]
macro_rules! binder_pinned_maps {
    ($m:ident) => {
        $m! {
            /// Hash: [`DestKey`] → [`DestValue`].
            DESTS_MAP = SRAP_DESTS: HashMap<$crate::binder::DestKey, $crate::binder::DestValue>
                [$crate::binder::BinderSizes::dests, $crate::binder::NO_PREALLOC];
            /// Array of [`TableRow`], index = table.
            TABLES_MAP = SRAP_TABLES: Array<u32, $crate::binder::TableRow>
                [$crate::binder::BinderSizes::tables, 0];
            /// Array of [`LayoutRow`], index = layout.
            LAYOUTS_MAP = SRAP_LAYOUTS: Array<u32, $crate::binder::LayoutRow>
                [$crate::binder::BinderSizes::layout_rows, 0];
            /// Array of [`SlotRow`], index `layout.slot_base + slot`.
            SLOTS_MAP = SRAP_SLOTS: Array<u32, $crate::binder::SlotRow>
                [$crate::binder::BinderSizes::slot_rows, 0];
            /// Array of indirection entries (or listed values), index
            /// `layout.entry_base + slot.first + i`.
            ENTRIES_MAP = SRAP_ENTRIES: Array<u32, u32>
                [$crate::binder::BinderSizes::entry_rows, 0];
            /// Array of [`CosetRow`], index `layout.coset_base + value`.
            COSETS_MAP = SRAP_COSETS: Array<u32, $crate::binder::CosetRow>
                [$crate::binder::BinderSizes::coset_rows, 0];
            /// Array of [`ReceiverSlots`], index = receiver.
            RECEIVERS_MAP = SRAP_RECEIVERS: Array<u32, $crate::binder::ReceiverSlots>
                [$crate::binder::BinderSizes::receiver_rows, 0];
            /// Array of [`slot_word`]s, index `receiver * row_slots + slot`
            /// ([`BinderConfig::row_slots`]):
            /// written by the hooks only (the agent rebuilds the level
            /// bitmaps from them, never them).
            SLOT_STATE_MAP = SRAP_SLOT_STATE: Array<u32, u64>
                [$crate::binder::BinderSizes::slot_words, 0];
            /// Array of [`SocketRow`], an open-addressed table keyed by socket
            /// cookie ([`socket_home`]): the slot of a steered socket (so
            /// closing it frees the slot), or that a socket was bound with
            /// port 0; cleared when the socket closes.
            SOCKETS_MAP = SRAP_SOCKETS: Array<u32, $crate::binder::SocketRow>
                [$crate::binder::BinderSizes::socket_rows, 0];
            /// Per-CPU array of `u64`, index = [`outcome`].
            STATS_MAP = SRAP_STATS: PerCpuArray<u32, u64>
                [$crate::binder::BinderSizes::outcomes, 0];
            /// Per-CPU array of `u64`, index = the errno of a bind the
            /// kernel refused ([`outcome::BIND_REFUSED`]; the last entry
            /// counts every errno at or past it).
            BIND_ERRNOS_MAP = SRAP_BIND_ERRNOS: PerCpuArray<u32, u64>
                [$crate::binder::BinderSizes::bind_errnos, 0];
            /// Array of one [`BinderConfig`].
            CONFIG_MAP = SRAP_CONFIG: Array<u32, $crate::binder::BinderConfig>
                [$crate::binder::BinderSizes::one, 0];
            /// Array of [`SlotGrant`], index = receiver; then, from
            /// index [`BinderSizes::receiver_rows`] on, one row per CPU of
            /// this host ([`READER_CPUS`]): under `--local-placement
            /// reader`, the slots of this host's row a connect made on that
            /// CPU claims among (its own, else its nearest). One map, so
            /// the hook's claim sees one kind of grant pointer whichever
            /// row it took (two maps would double the paths the kernel's
            /// verifier walks, past its budget of a million instructions).
            GRANTS_MAP = SRAP_GRANTS: Array<u32, $crate::binder::SlotGrant>
                [$crate::binder::BinderSizes::grant_rows, 0];
            /// Array of [`JointRow`], index = [`DestValue::joint`].
            JOINTS_MAP = SRAP_JOINTS: Array<u32, $crate::binder::JointRow>
                [$crate::binder::BinderSizes::joints, 0];
            /// Array of joint solutions, index `joint.solution_base + δ`: the
            /// least coset member `j` with local value δ, or
            /// [`JointRow::NONE`].
            SOLUTIONS_MAP = SRAP_SOLUTIONS: Array<u32, u32>
                [$crate::binder::BinderSizes::solution_rows, 0];
            /// Array of [`crate::local_nics::NicTables`], index = the table
            /// of a destination's route entry: the tables of the same
            /// destination under each of this host's NICs' addresses
            /// (`--local-nics numa|balance`, [`crate::local_nics`]).
            NIC_TABLES_MAP = SRAP_NIC_TABLES: Array<u32, $crate::local_nics::NicTables>
                [$crate::binder::BinderSizes::tables, 0];
            /// Array of `u32`, index = NUMA node: the NIC on that node
            /// ([`crate::local_nics::NO_NIC`]: none known).
            NODE_NICS_MAP = SRAP_NODE_NICS: Array<u32, u32>
                [$crate::binder::BinderSizes::nodes, 0];
            /// Array of one `u64`: the `balance` policy's turn, taken by
            /// every steered connect that chooses a NIC by it.
            NIC_TURN_MAP = SRAP_NIC_TURN: Array<u32, u64>
                [$crate::binder::BinderSizes::one, 0];
            /// Array of one `u32`: bit `n` set while NIC `n` of
            /// [`crate::local_nics`] is down, so the hook chooses it for no
            /// destination whatever its row says. Written by the agent's
            /// link watcher alone, on the kernel's own notice of the link,
            /// before the re-plan that rewrites the rows.
            NICS_DOWN_MAP = SRAP_NICS_DOWN: Array<u32, u32>
                [$crate::binder::BinderSizes::one, 0];
            /// Hash: the asked destination's [`DestKey`] (its port named,
            /// its source zero) → [`crate::receiver_nics::SpreadRow`]: the
            /// receiver's addresses a connect toward it may be sent to
            /// (`--receiver-nics spread`, [`crate::receiver_nics`]).
            SPREAD_MAP = SRAP_SPREAD: HashMap<$crate::binder::DestKey, $crate::receiver_nics::SpreadRow>
                [$crate::binder::BinderSizes::tables, $crate::binder::NO_PREALLOC];
            /// Hash: the task (`bpf_get_current_pid_tgid`) inside the
            /// kernel's `__mptcp_subflow_connect` → [`SubflowDest`], the
            /// subflow's destination, while that call runs: written on its
            /// entry and removed on its exit by the tracing programs
            /// ([`SUBFLOW_CONNECT_PROGRAM`], [`SUBFLOW_CONNECTED_PROGRAM`]),
            /// read by the bind hooks, which that call reaches on the same
            /// task (`kernel_bind`). Pinned, so the bind hooks and the
            /// tracing programs share it whichever agent loaded them.
            SUBFLOW_DESTS_MAP = SRAP_SUBFLOW_DESTS: HashMap<u64, $crate::binder::SubflowDest>
                [$crate::binder::BinderSizes::subflow_tasks, $crate::binder::NO_PREALLOC];
            /// Hash: a receiver address in the form of [`DestKey::addr`]
            /// → [`crate::receiver_nics::SpreadFailing`]: an address a
            /// moved connect's SYN got no answer from, which the connect
            /// hook spreads no connect to until the agent re-admits it
            /// (`srap_tcp_close` marks it at the SYN's first timeout).
            SPREAD_FAILING_MAP = SRAP_SPREAD_FAILING: HashMap<[u32; 4], $crate::receiver_nics::SpreadFailing>
                [$crate::binder::BinderSizes::spread_failing, $crate::binder::NO_PREALLOC];
        }
    };
}

/// One pinned binder map as both sides must agree on it (from
/// [`binder_pinned_maps!`]).
#[derive(Debug, Clone, Copy)]
pub struct MapSpec {
    pub name: &'static str,
    pub kind: MapKind,
    pub key_size: usize,
    pub value_size: usize,
    /// Its entries for the given sizes.
    pub entries: fn(&BinderSizes) -> u32,
}

impl MapSpec {
    /// Its entries under `sizes`.
    pub fn max_entries(&self, sizes: &BinderSizes) -> u32 {
        (self.entries)(sizes)
    }
}

/// The user-side expansion of [`binder_pinned_maps!`]: a name constant per
/// map and the table of them all.
macro_rules! map_table {
    ($($(#[$doc:meta])* $constant:ident = $name:ident: $kind:ident<$key:ty, $value:ty>
        [$entries:path, $flags:expr];)*) => {
        $($(#[$doc])* pub const $constant: &str = stringify!($name);)*

        /// Every map the binder pins.
        pub const PINNED_MAPS: &[MapSpec] = &[$(MapSpec {
            name: $constant,
            kind: MapKind::$kind,
            key_size: size_of::<$key>(),
            value_size: size_of::<$value>(),
            entries: $entries,
        }),*];
    };
}

binder_pinned_maps!(map_table);

pub const CONNECT4_PROGRAM: &str = "srap_connect4";
pub const CONNECT6_PROGRAM: &str = "srap_connect6";
pub const BIND4_PROGRAM: &str = "srap_bind4";
pub const BIND6_PROGRAM: &str = "srap_bind6";
pub const RELEASE_PROGRAM: &str = "srap_sock_release";
/// The `getpeername4/6` programs: a socket the connect hook sent to
/// another address of its receiver (`--receiver-nics spread`) reports the
/// address its application asked for.
pub const GETPEERNAME4_PROGRAM: &str = "srap_getpeername4";
pub const GETPEERNAME6_PROGRAM: &str = "srap_getpeername6";
/// The tracing programs on the entry and exit of the kernel's
/// `__mptcp_subflow_connect` (fentry, fexit): the destination of each
/// further MPTCP subflow, for the bind hooks ([`SUBFLOW_DESTS_MAP`]).
pub const SUBFLOW_CONNECT_PROGRAM: &str = "srap_subflow_connect";
pub const SUBFLOW_CONNECTED_PROGRAM: &str = "srap_subflow_connected";
/// The kernel function they trace: its third argument is the subflow's
/// remote address (`const struct mptcp_addr_info *`) in Linux 6.1 and
/// 6.18 alike.
pub const SUBFLOW_CONNECT_FUNCTION: &str = "__mptcp_subflow_connect";
/// One [`MptcpLayout`] row, written by the agent after loading and before
/// attaching (not pinned: each load's programs read the row their agent
/// wrote; a program a restarted agent adopts keeps its own).
pub const MPTCP_LAYOUT_MAP: &str = "SRAP_MPTCP_LAYOUT";

/// The `sock_ops` program that releases at TCP close what a socket the
/// release hook never sees (a kernel socket: an MPTCP subflow) claimed.
pub const CLOSE_PROGRAM: &str = "srap_tcp_close";
/// The benchmarks' bare `connect4` program: the kernel's bind of a port
/// and nothing else, the part of the connect hook's run time that is the
/// bind `connect()` would otherwise make itself.
pub const BARE_CONNECT4_PROGRAM: &str = "srap_bare_connect4";
/// The map holding the bare connect hook's rotation and source address.
pub const BARE_BIND_MAP: &str = "SRAP_BARE_BIND";
/// The bare connect hook's ports: `BARE_BIND_PORTS` from this one up.
pub const BARE_BIND_PORT_BASE: u16 = 40_000;
/// How many ports the bare connect hook rotates over.
pub const BARE_BIND_PORTS: u32 = 16_384;

/// The rows of [`BARE_BIND_MAP`].
pub mod bare_bind {
    /// The rotation's counter, which the program advances.
    pub const TURN: u32 = 0;
    /// The IPv4 source address to bind, in network byte order (as
    /// `u32::from_ne_bytes` of its octets), written by the benchmark.
    pub const SOURCE: u32 = 1;
    /// Rows in the map.
    pub const ROWS: u32 = 2;
}

/// The entries of the maps whose sizes are the binder's own counts (its
/// counters, the reader rows, the errno counters), and the kernel memory
/// of [`PINNED_MAPS`]: beside the maps they size, so `crate::sizes` needs
/// nothing of this module.
impl BinderSizes {
    pub const fn outcomes(&self) -> u32 {
        COUNTERS
    }

    /// Grant rows: one per binder row, then one per CPU of this host that
    /// `--local-placement reader` places by ([`Self::reader_row`]).
    pub const fn grant_rows(&self) -> u32 {
        self.receiver_rows() + READER_CPUS
    }

    /// The grant row of this host's CPU `cpu` (below
    /// [`READER_CPUS`]).
    pub const fn reader_row(&self, cpu: u32) -> u32 {
        self.receiver_rows() + cpu
    }

    /// The refused binds' errno counters (`BIND_ERRNOS_MAP`).
    pub const fn bind_errnos(&self) -> u32 {
        BIND_ERRNOS
    }

    /// Kernel memory the pinned maps take (what `bpftool map show` reports
    /// as `memlock`, summed), on a host with `possible_cpus` possible CPUs
    /// and `dests` destinations in the hash map (which allocates per entry).
    pub fn pinned_bytes(&self, possible_cpus: u32, dests: u32) -> u64 {
        PINNED_MAPS
            .iter()
            .map(|spec| {
                // A subflow's destination is held only while the kernel's
                // path manager connects it: the map is empty between calls.
                let used = if spec.kind == MapKind::HashMap && spec.name != SUBFLOW_DESTS_MAP {
                    dests
                } else {
                    0
                };
                crate::sizes::map_bytes(
                    spec.kind,
                    (spec.key_size, spec.value_size),
                    spec.max_entries(self),
                    (possible_cpus, used),
                )
            })
            .sum()
    }
}

/// The binder's counters in [`STATS_MAP`]: every connect counts one
/// [`outcome`] (what it came to), and some also count [`event`]s within it.
/// One index space for both, [`COUNTERS`] entries named by
/// [`COUNTER_NAMES`] (the `outcome` label of `/metrics`, the keys of the
/// status JSON).
pub const COUNTERS: u32 = 33;

/// The counters' names, by index.
pub const COUNTER_NAMES: [&str; COUNTERS as usize] = [
    "steered",
    "retried",
    "no_free_port",
    "app_bound",
    "miss",
    "released",
    "port_at_bind",
    "source_unplanned",
    "source_kept",
    "tuple_taken",
    "port_held",
    "time_wait_reused",
    "joint",
    "local_missed",
    "maps_unfilled",
    "claim_failed",
    "claim_contended",
    "option_unreadable",
    "option_refused",
    "bind_refused",
    "reader_placed",
    "reader_unplanned",
    "protocol_not_steered",
    "released_at_close",
    "subflow_steered",
    "nic_chosen",
    "nic_fallback",
    "dest_spread",
    "dest_kept",
    "subflow_traced",
    "subflow_untraced",
    "subflow_unplanned",
    "spread_syn_unanswered",
];

/// Verdicts of the binder's `connect` hooks, as indexes into [`STATS_MAP`].
/// Every connect of a socket in the cgroup counts exactly one of
/// [`outcome::VERDICTS`]: steered, or left to the kernel for a named reason.
pub mod outcome {
    /// Bound on the first attempt.
    pub const STEERED: u32 = 0;
    /// Bound after one or more ports were skipped (`tuple_taken`,
    /// `port_held`).
    pub const RETRIED: u32 = 1;
    /// No free port in the slot: every attempt found its tuple taken or its
    /// port held, and the kernel chose. The slot has run dry: more connects
    /// per second toward this receiver than its CPU's share of the port
    /// range can hold in TIME_WAIT.
    pub const NO_FREE_PORT: u32 = 2;
    /// The application bound an explicit source port: left alone.
    pub const APP_BOUND: u32 = 3;
    /// The destination is not steered (a TCP connect toward an address and
    /// port the plan has no table for).
    pub const MISS: u32 = 4;
    /// The application called `bind(addr, 0)` before `connect()`: the kernel
    /// chose the port at bind time, before the destination was known, and a
    /// bind hook cannot defer it (the kernel's `bpf_setsockopt` does not
    /// offer `IP_BIND_ADDRESS_NO_PORT`). Left alone. Also an MPTCP
    /// subflow the kernel's path manager bound with port 0 that the bind
    /// hook could not steer (no destination found for it, traced or read
    /// from its MPTCP socket, or no port; else [`SUBFLOW_STEERED`]; one
    /// toward a destination the plan does not list counts [`MISS`]).
    pub const PORT_AT_BIND: u32 = 6;
    /// The application bound a source address SRAP has no table for (an
    /// address added after the plan, or of no interface): left alone.
    pub const SOURCE_UNPLANNED: u32 = 7;
    /// The destination is steered but a row its plan names is missing or
    /// empty (table, layout, receiver, slot, slot count out of range): the
    /// agent has not finished writing the plan, or the maps were changed
    /// behind it. The kernel chose.
    pub const MAPS_UNFILLED: u32 = 14;
    /// No slot could be claimed: the chosen slot's word kept changing
    /// under every try (many connects toward one receiver at one moment).
    /// The kernel chose.
    pub const CLAIM_FAILED: u32 = 15;
    /// The socket's own `SO_REUSEADDR`/`SO_REUSEPORT` could not be read:
    /// the kernel chose.
    pub const OPTION_UNREADABLE: u32 = 17;
    /// The kernel refused `SO_REUSEADDR` on the socket, needed to share a
    /// port in use by tuple: the kernel chose.
    pub const OPTION_REFUSED: u32 = 18;
    /// The kernel refused the bind for another reason than a port in use
    /// (which errno: [`crate::binder::BIND_ERRNOS_MAP`]), e.g. the table's
    /// source address is gone from the host (`EADDRNOTAVAIL`): the kernel
    /// chose.
    pub const BIND_REFUSED: u32 = 19;
    /// The socket is not of a protocol the binder steers (a UDP
    /// `connect()`, an MPTCP or SCTP socket; [`super::steered_protocol`]):
    /// left alone before its destination is looked up.
    pub const PROTOCOL_NOT_STEERED: u32 = 22;
    /// A further subflow of an MPTCP connection, whose port the bind hook
    /// chose when the kernel's path manager bound it with port 0, as a
    /// connect chooses one toward the subflow's own destination (the
    /// address the path manager connects it to, an announced one included;
    /// without the trace, the MPTCP socket's IPv4 remote address): its
    /// connect finds it steered.
    pub const SUBFLOW_STEERED: u32 = 24;
    /// What a connect came to: each counts exactly one of these.
    pub const VERDICTS: [u32; 14] = [
        STEERED,
        RETRIED,
        SUBFLOW_STEERED,
        NO_FREE_PORT,
        APP_BOUND,
        PROTOCOL_NOT_STEERED,
        MISS,
        PORT_AT_BIND,
        SOURCE_UNPLANNED,
        MAPS_UNFILLED,
        CLAIM_FAILED,
        OPTION_UNREADABLE,
        OPTION_REFUSED,
        BIND_REFUSED,
    ];
    /// The verdicts that mean SRAP could not do what the plan asked (a bug
    /// or a changed host, never the application's choice): each is named
    /// in docs/troubleshooting.md with what to do.
    pub const FAILURES: [u32; 6] = [
        NO_FREE_PORT,
        MAPS_UNFILLED,
        CLAIM_FAILED,
        OPTION_UNREADABLE,
        OPTION_REFUSED,
        BIND_REFUSED,
    ];
}

/// Events within a connect or a socket's life, as indexes into
/// [`STATS_MAP`] beside the [`outcome`]s: ports skipped, a kept address, a
/// contended claim, a closed socket. Each counts alongside a verdict (or on
/// close), never instead of one.
pub mod event {
    /// A steered socket closed and its release hook freed its slot
    /// (`srap_sock_release`; [`RELEASED_AT_CLOSE`] counts those freed at
    /// their TCP close).
    pub const RELEASED: u32 = 5;
    /// A steered connect kept the source address the application had bound.
    pub const SOURCE_KEPT: u32 = 8;
    /// A port skipped because its exact 4-tuple toward this destination is
    /// in use (established, connecting, or TIME_WAIT without a timestamp):
    /// the port stays shared with every other destination.
    pub const TUPLE_TAKEN: u32 = 9;
    /// A port skipped because a socket that cannot share it holds it (an
    /// application's own port, a listener).
    pub const PORT_HELD: u32 = 10;
    /// A port whose tuple toward this destination was in TIME_WAIT with a
    /// TCP timestamp, taken over: the kernel lets an explicitly bound
    /// socket do so (`tcp_twsk_unique`), so a slot that cycles through its
    /// ports faster than TIME_WAIT lasts never runs dry.
    pub const TIME_WAIT_REUSED: u32 = 11;
    /// A both-ends connect placed on a receiver CPU and a CPU of this host
    /// with one port from the joint map.
    pub const JOINT: u32 = 12;
    /// A both-ends connect that found no port of its receiver slot for a
    /// CPU of this host (the joint map rank-deficient there, or the range
    /// too narrow): it kept the receiver's placement only.
    pub const LOCAL_MISSED: u32 = 13;
    /// A claim whose every search found its slot taken meanwhile, which
    /// took the rotation's granted slot without the search (steered all
    /// the same; two flows may then share a CPU while another is free).
    pub const CLAIM_CONTENDED: u32 = 16;
    /// A claim of this host's CPUs under `--local-placement reader` made
    /// by the connecting CPU's row ([`super::GRANTS_MAP`]): its nearest slots, or
    /// this host's offer when no offered CPU is on its NUMA node.
    pub const READER_PLACED: u32 = 20;
    /// A claim of this host's CPUs under `--local-placement reader` whose
    /// connecting CPU is past [`super::READER_CPUS`]: placed by this host's offer
    /// (on the least-occupied CPU).
    pub const READER_UNPLANNED: u32 = 21;
    /// A steered socket whose TCP connection closed before its release
    /// hook ran, or one the release hook never sees (a kernel socket:
    /// every subflow of an MPTCP connection), freed its slot at that close
    /// (`srap_tcp_close`). [`RELEASED`] counts the release hook's.
    pub const RELEASED_AT_CLOSE: u32 = 23;
    /// Under `--local-nics numa|balance`, a connect the application bound
    /// no address for whose destination the policy's NIC reaches: looked
    /// up and bound under that NIC's address
    /// ([`crate::local_nics`]).
    pub const NIC_CHOSEN: u32 = 25;
    /// Under `--local-nics numa|balance`, a connect placed as under
    /// `route` (the route's source address) because the policy found no
    /// NIC for it: the connecting CPU's node has no NIC or an unknown one
    /// (`-1`), its NIC is down, has no address of the family, cannot reach
    /// the destination by its own link, or has no port table there yet.
    /// Never a failed connect; the verdict is counted as usual.
    pub const NIC_FALLBACK: u32 = 26;
    /// Under `--receiver-nics spread`, a connect sent to another address
    /// of its receiver than the one asked for (its turn in the asked
    /// destination's row, [`crate::receiver_nics`]): the application's
    /// `getpeername()` still returns the address it asked for.
    pub const DEST_SPREAD: u32 = 27;
    /// Under `--receiver-nics spread`, a connect whose destination has a
    /// row of addresses that kept the address asked for: its turn fell on
    /// it, or the address its turn fell on has no plan yet or is marked
    /// failing ([`SPREAD_FAILING_MAP`](super::SPREAD_FAILING_MAP)).
    pub const DEST_KEPT: u32 = 28;
    /// The bind of a further MPTCP subflow that took its destination from
    /// the kernel's path manager's own call (`__mptcp_subflow_connect`,
    /// traced: [`super::SUBFLOW_DESTS_MAP`]): the connection's remote
    /// address, or an address the peer announced (`ADD_ADDR`), IPv4 or
    /// IPv6.
    pub const SUBFLOW_TRACED: u32 = 29;
    /// The bind of a further MPTCP subflow that found no traced
    /// destination (the trace is not attached: the agent's log names why)
    /// and read it from its MPTCP socket instead, as the
    /// kernel's own path manager chooses it: the connection's remote
    /// address for a subflow bound to an endpoint's address, the address
    /// the peer announced last for one bound to none. Never a failed
    /// connect.
    pub const SUBFLOW_UNTRACED: u32 = 30;
    /// The bind of a further MPTCP subflow toward a destination the plan
    /// has no table for (an address the peer announced that the plan does
    /// not list, from the source the subflow binds): left to the kernel,
    /// its connect counts [`super::outcome::MISS`] (or
    /// [`super::outcome::SOURCE_UNPLANNED`]), as any connect toward it.
    pub const SUBFLOW_UNPLANNED: u32 = 31;
    /// Under `--receiver-nics spread`, a moved connect whose SYN to the
    /// address it was sent to got no answer by its first retransmit
    /// timeout (`srap_tcp_close`): that address is marked failing
    /// ([`super::SPREAD_FAILING_MAP`]) and no connect is sent there until
    /// the agent re-admits it. One per socket.
    pub const SPREAD_SYN_UNANSWERED: u32 = 32;
}

/// The protocols the binder steers: the one place that says so. The
/// connect hook answers [`steered_protocol`] from it, and the sender agent
/// plans its tables and destinations for each (`srap_daemon::sender::plan`);
/// everything between takes the protocol as a value. A connect of any other
/// protocol is left to the kernel ([`outcome::PROTOCOL_NOT_STEERED`]).
pub const STEERED: &[Protocol] = &[Protocol::Tcp];

/// Whether [`STEERED`] names `protocol`. For compile time: the connect
/// hook asks it in `const` blocks, so that a protocol not steered leaves
/// no code (and no path for the kernel's verifier) behind.
pub const fn steers(protocol: Protocol) -> bool {
    let mut i = 0;
    while i < STEERED.len() {
        if STEERED[i].as_u8() == protocol.as_u8() {
            return true;
        }
        i += 1;
    }
    false
}

/// The protocol a connecting socket is steered as, from its `type` and
/// `protocol` (`bpf_sock_addr`'s fields), or the verdict that leaves it to
/// the kernel ([`outcome::PROTOCOL_NOT_STEERED`]): a protocol [`STEERED`]
/// does not name among them. The connect hook's first question, here so
/// that the host's tests ask it too.
#[inline(always)]
pub const fn steered_protocol(sock_type: u32, protocol: u32) -> Result<Protocol, u32> {
    match Protocol::of_socket(sock_type, protocol) {
        Some(Protocol::Tcp) if const { steers(Protocol::Tcp) } => Ok(Protocol::Tcp),
        Some(Protocol::Udp) if const { steers(Protocol::Udp) } => Ok(Protocol::Udp),
        _ => Err(outcome::PROTOCOL_NOT_STEERED),
    }
}

/// Entries of [`BIND_ERRNOS_MAP`]: errno values below it count apart, the
/// last counts every larger one.
pub const BIND_ERRNOS: u32 = 128;

/// A steered destination: its protocol, receiver address and port (0:
/// every port), and the source address the socket was bound to (zero: none;
/// the table of the route's source address). Addresses are the kernel's
/// `user_ip4`/`user_ip6` words, network byte order; an IPv4 address is word
/// 0 and the rest are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestKey {
    /// A [`Family`] number.
    pub family: u16,
    /// A [`Protocol`] number: the plan keys each steered protocol's
    /// destinations apart ([`STEERED`]), and the hook looks a connect up
    /// under its socket's protocol ([`steered_protocol`]).
    pub protocol: u8,
    /// Always zero: the hash map compares keys byte for byte.
    pub _pad: u8,
    /// Destination port, host byte order; 0 matches any port.
    pub port: u32,
    pub addr: [u32; 4],
    pub src: [u32; 4],
}

impl DestKey {
    /// The key of a `protocol` flow of `family` toward `addr` port `port`
    /// (0: any), from the bound source `src` (zero: none).
    #[inline(always)]
    pub const fn new(
        protocol: Protocol,
        family: Family,
        port: u16,
        addr: [u32; 4],
        src: [u32; 4],
    ) -> Self {
        Self {
            family: family.as_u16(),
            protocol: protocol.as_u8(),
            _pad: 0,
            port: port as u32,
            addr,
            src,
        }
    }
}

/// Where a destination's plan data lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestValue {
    /// Index of the [`TableRow`], or [`DestValue::BY_PORT`].
    pub table: u32,
    /// Receiver index: its CPU occupancy is shared by all its tables.
    pub receiver: u32,
    /// With both ends planned: index of the local [`TableRow`] (this host's
    /// NIC, its occupancy in row [`LOCAL_ROW`]), else
    /// [`DestValue::NO_LOCAL`].
    pub local_table: u32,
    /// With both ends planned: index of the [`JointRow`] of the two tables'
    /// layouts (the hook reads the local twin's own, [`TableRow::joint`]).
    pub joint: u32,
}

impl DestValue {
    /// The `table` of a receiver's any-port key (port 0) when it is steered
    /// on named ports only: look the key up again with the port. Every
    /// other connect finds its table in one lookup.
    pub const BY_PORT: u32 = u32::MAX;
    /// `local_table` of a destination planned for one NIC.
    pub const NO_LOCAL: u32 = u32::MAX;
}

/// The per-(source, receiver) part of the linear decomposition.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableRow {
    /// Source address to bind, in the same form as [`DestKey::addr`].
    pub src_addr: [u32; 4],
    /// The same address as an `AF_INET6` socket binds it: the IPv6 address,
    /// or `::ffff:a.b.c.d` for an IPv4 table (a dual-stack socket connecting
    /// to an IPv4 receiver). One field for both cases keeps `connect6`'s
    /// paths identical after the destination lookup, which the kernel's
    /// verifier needs to stay within its instruction budget.
    pub src_addr6: [u32; 4],
    /// Low k bits of the index with both ports zero.
    pub base: u32,
    /// Index of the [`LayoutRow`].
    pub layout: u32,
    /// Of a local twin (`--steer both`): the joint row of its pair with
    /// the receiver's table ([`DestValue::joint`] of the destinations
    /// that lead to it). The hook reads it here, so a connect that took
    /// another NIC's twin (`--local-nics`) takes that twin's joint row,
    /// planned with that NIC's description. 0 in any other table.
    pub joint: u32,
}

/// The per-RSS-configuration part: what depends on the receiver's key and
/// indirection table only, shared by every table toward such a receiver.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutRow {
    /// Slots in use (distinct receiver CPUs), at most [`MAX_SLOTS`].
    pub slots: u32,
    /// First row of this layout's slots in [`SLOTS_MAP`].
    pub slot_base: u32,
    /// First row of this layout's entries in [`ENTRIES_MAP`].
    pub entry_base: u32,
    /// First row of this layout's cosets in [`COSETS_MAP`].
    pub coset_base: u32,
    /// Values in use (2^k, or the ports of a listed layout).
    pub values: u32,
    /// `D(dport)` = `dport_low[dport & 0xff] ^ dport_high[dport >> 8]`.
    pub dport_low: [u16; 256],
    pub dport_high: [u16; 256],
    /// The `j`-th port of `S`'s kernel, ascending in `j`:
    /// `span_low[j & 0xff] ^ span_high[j >> 8]` (zero for a listed layout).
    pub span_low: [u16; 256],
    pub span_high: [u16; 256],
}

impl Default for LayoutRow {
    fn default() -> Self {
        Self {
            slots: 0,
            slot_base: 0,
            entry_base: 0,
            coset_base: 0,
            values: 0,
            dport_low: [0; 256],
            dport_high: [0; 256],
            span_low: [0; 256],
            span_high: [0; 256],
        }
    }
}

impl LayoutRow {
    /// The value of `S(port)` that, with destination port `dport` and the
    /// table's `base`, selects indirection entry `entry`. Shared by the hook
    /// and the tests.
    #[inline(always)]
    pub fn value_for(&self, base: u32, entry: u32, dport: u16) -> u32 {
        let d =
            self.dport_low[usize::from(dport & 0xff)] ^ self.dport_high[usize::from(dport >> 8)];
        (entry ^ base ^ u32::from(d)) & (MAX_VALUES - 1)
    }

    /// The port of `coset` its `round`-th visit takes (`None`: the coset
    /// has no port in the range).
    #[inline(always)]
    pub fn port_of(&self, coset: &CosetRow, round: u32) -> Option<u16> {
        if coset.count == 0 {
            return None;
        }
        let j = coset.first.wrapping_add(round % coset.count);
        let span = self.span_low[(j & 0xff) as usize] ^ self.span_high[((j >> 8) & 0xff) as usize];
        Some(coset.port0 as u16 ^ span)
    }
}

/// Which of a slot's `entries` its `turn`-th port comes from, and which
/// visit of that entry's coset it is: entries take turns, so every entry's
/// coset is walked in order, one port per round.
#[inline(always)]
pub fn slot_turn(turn: u32, entries: u32) -> (u32, u32) {
    // One division: BPF has no instruction giving both, and each is a
    // 64-bit divide once JIT-compiled.
    let round = turn / entries;
    (turn.wrapping_sub(round.wrapping_mul(entries)), round)
}

/// One CPU slot of a layout: the indirection entries that land on its CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotRow {
    /// The receiver CPU this slot stands for (for reports).
    pub cpu: u32,
    /// Its entries are rows `first..first + count` of the layout's entries.
    pub first: u32,
    pub count: u32,
}

/// The source ports with one value of `S(port)`: `port0 ⊕ span(j)` for `j`
/// in `first..first + count`, ascending, every one in the port range.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CosetRow {
    /// The coset's least port.
    pub port0: u32,
    pub first: u32,
    /// 0: no port of the coset is in the range.
    pub count: u32,
}

/// What the hook needs to place a flow on both NICs with one port, for one
/// (receiver layout, local layout) pair. A receiver coset's members are
/// `port0 ⊕ span(j)`; their local value (the port's part of this host's
/// index, `L(port)`) is `L(port0) ⊕ K(j)` with `K = L ∘ span` linear. So
/// the members with local value `v` are the `j` with `K(j) = δ = v ⊕
/// L(port0)`: one solution per δ (a lookup in [`SOLUTIONS_MAP`]) and the
/// span of `K`'s kernel, walked as the layout's span is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JointRow {
    /// `L(port)` = `local_low[port & 0xff] ^ local_high[port >> 8]`.
    pub local_low: [u16; 256],
    pub local_high: [u16; 256],
    /// The `i`-th `j` with `K(j) = 0`, ascending:
    /// `kernel_low[i & 0xff] ^ kernel_high[i >> 8]`.
    pub kernel_low: [u16; 256],
    pub kernel_high: [u16; 256],
    /// Members of each reached (coset, local value) pair: a power of two.
    pub kernel_len: u32,
    /// First row of this pair's solutions in [`SOLUTIONS_MAP`].
    pub solution_base: u32,
    /// Local values: 2^k₂ (δ is masked below it).
    pub local_values: u32,
    pub _pad: u32,
}

impl Default for JointRow {
    fn default() -> Self {
        Self {
            local_low: [0; 256],
            local_high: [0; 256],
            kernel_low: [0; 256],
            kernel_high: [0; 256],
            kernel_len: 0,
            solution_base: 0,
            local_values: 0,
            _pad: 0,
        }
    }
}

impl JointRow {
    /// A δ no member of the coset reaches.
    pub const NONE: u32 = u32::MAX;

    /// `L(port)`.
    #[inline(always)]
    pub fn local_value(&self, port: u16) -> u32 {
        u32::from(
            self.local_low[usize::from(port & 0xff)] ^ self.local_high[usize::from(port >> 8)],
        )
    }

    /// The δ that coset `port0`'s members must reach for local value `v`.
    #[inline(always)]
    pub fn delta(&self, port0: u16, v: u32) -> u32 {
        (v ^ self.local_value(port0)) & self.local_values.wrapping_sub(1)
    }

    /// The `i`-th member `j` of the pair whose least member is `j0`
    /// (`i` wraps at `kernel_len`, a power of two: the size of a span, so a
    /// mask, not a division, per member tried).
    #[inline(always)]
    pub fn member(&self, j0: u32, i: u32) -> u32 {
        let i = i & (self.kernel_len.max(1) - 1);
        j0 ^ u32::from(
            self.kernel_low[(i & 0xff) as usize] ^ self.kernel_high[((i >> 8) & 0xff) as usize],
        )
    }
}

/// One receiver's CPU slots as the hook sees them: the slots of each
/// occupancy level as bitmaps, so the least-occupied slot is found without
/// looking at every slot. The bitmaps are a hint: a slot's bits change only
/// under its claim lock ([`slot_word`]), and the hook checks them against
/// the slot's count, and repairs them, before it trusts them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverSlots {
    /// Rotates where the search starts, so ties spread over slots: past the
    /// last slot claimed; in [`LOCAL_ROW`], claims made (the hook moves its
    /// start one slot more every [`MAX_SLOTS`] claims, so this host's CPUs
    /// do not pair with receiver CPUs in step).
    pub cursor: u64,
    /// Slots in use: bits at or past it are never set.
    pub slots: u32,
    /// Connects toward this receiver that found no free port in their slot.
    pub dry: u32,
    /// The slot the last of them found dry.
    pub dry_slot: u32,
    pub _pad: u32,
    /// `levels[k]` bit `s`: slot `s` has `k` flows (the last: `k` or more).
    pub levels: [[u64; SLOT_WORDS]; LEVELS],
}

impl Default for ReceiverSlots {
    fn default() -> Self {
        Self {
            cursor: 0,
            slots: 0,
            dry: 0,
            dry_slot: 0,
            _pad: 0,
            levels: [[0; SLOT_WORDS]; LEVELS],
        }
    }
}

impl ReceiverSlots {
    /// The state for `slots` slots holding `flows` (slots past `slots`
    /// keep their counts elsewhere, so flows still open there free them on
    /// close); the rest of `now` is kept.
    pub fn rebuilt(slots: u32, flows: &[u32], now: &Self) -> Self {
        let slots = slots.min(MAX_SLOTS);
        let mut out = Self {
            slots,
            levels: [[0; SLOT_WORDS]; LEVELS],
            ..*now
        };
        for s in 0..slots {
            let level = level_of(flows.get(s as usize).copied().unwrap_or(0));
            out.levels[level][(s / 64) as usize] |= 1 << (s % 64);
        }
        out
    }
}

/// One slot's word in [`SLOT_STATE_MAP`]: open flows (low 31 bits), the
/// claim lock (bit 31) and the port rotation (high 32 bits). One word, so a
/// single compare-and-exchange claims a slot, locks it and takes a turn.
pub mod slot_word {
    /// The open-flows field.
    pub const FLOWS: u64 = 0x7fff_ffff;
    /// Held while a hook moves the slot's level bits.
    pub const LOCK: u64 = 1 << 31;
    /// One step of the port rotation.
    pub const TURN: u64 = 1 << 32;

    #[inline(always)]
    pub fn flows(word: u64) -> u32 {
        (word & FLOWS) as u32
    }

    #[inline(always)]
    pub fn turn(word: u64) -> u32 {
        (word >> 32) as u32
    }
}

/// The occupancy level of a slot with `flows` flows.
#[inline(always)]
pub fn level_of(flows: u32) -> usize {
    if flows as usize >= LEVELS - 1 {
        LEVELS - 1
    } else {
        flows as usize
    }
}

/// The slots a receiver agent granted this sender toward one receiver, and
/// how many flows other senders hold on each. Kept apart from
/// [`ReceiverSlots`] so the agent can replace a grant without writing over
/// the flow counts the hook updates. The hook searches the *effective*
/// level of each granted slot (its own flows plus the base) and never
/// looks at a slot outside the grant, so claim and release paths need not
/// know about grants: the level bitmaps keep covering every slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotGrant {
    /// 0: no grant in force (no receiver agent grants, or none yet): every
    /// slot is usable with base 0.
    pub active: u32,
    pub _pad: u32,
    /// `by_base[b]` bit `s`: slot `s` is granted and other senders hold `b`
    /// flows on its CPU (the last: `b` or more).
    pub by_base: [[u64; SLOT_WORDS]; LEVELS],
}

impl SlotGrant {
    /// A grant of `slots` (slot, base) pairs; slots past [`MAX_SLOTS`] are
    /// left out.
    pub fn of(slots: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut grant = Self {
            active: 1,
            ..Self::default()
        };
        for (slot, base) in slots {
            if slot < MAX_SLOTS {
                grant.by_base[level_of(base)][(slot / 64) as usize] |= 1 << (slot % 64);
            }
        }
        grant
    }

    /// Whether `slot` is granted (always, without an active grant).
    pub fn allows(&self, slot: u32) -> bool {
        if self.active == 0 {
            return true;
        }
        slot < MAX_SLOTS
            && self
                .by_base
                .iter()
                .any(|words| words[(slot / 64) as usize] & (1 << (slot % 64)) != 0)
    }

    /// Word `w` of the slots with base `b` (without an active grant, every
    /// slot has base 0). Branch-free for the hook.
    #[inline(always)]
    pub fn base_word(&self, b: usize, w: usize) -> u64 {
        let active = u64::from(self.active != 0).wrapping_neg();
        let default = if b == 0 { u64::MAX } else { 0 };
        (self.by_base[b % LEVELS][w % SLOT_WORDS] & active) | (default & !active)
    }
}

/// What the binder remembers of a socket: the slot it holds, so closing it
/// frees the slot, or that it was bound with port 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketRecord {
    /// [`SocketRecord::NONE`]: holds no slot.
    pub receiver: u32,
    pub slot: u32,
    /// The slot of this host's CPUs it holds too (both ends planned), or
    /// [`SocketRecord::NONE`].
    pub local: u32,
    pub _pad: u32,
}

impl SocketRecord {
    /// No receiver: the socket holds no slot (its slot was freed, or it was
    /// only bound with port 0).
    pub const NONE: u32 = u32::MAX;
    /// A socket the application bound with port 0.
    pub const BOUND_AT_BIND: Self = Self {
        receiver: Self::NONE,
        slot: 0,
        local: Self::NONE,
        _pad: 0,
    };
}

/// One row of the socket table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketRow {
    /// The socket's cookie (never 0); 0: the row is free.
    pub cookie: u64,
    pub held: SocketRecord,
}

/// The first row of the socket table a socket with `cookie` may take: the
/// cookie's low bits. The kernel hands cookies out in increasing order
/// (per CPU), so sockets made one after another take rows one after
/// another, in cache lines and pages the hook touched a moment ago;
/// scattered rows cost a cache and TLB miss per connect, a large share of
/// the hook's time (docs/binder.md, "What it costs").
/// `mask` is the table's rows less one ([`BinderConfig::socket_mask`]: the
/// rows are a power of two set by `--max-sockets`).
#[inline(always)]
pub fn socket_home(cookie: u64, mask: u32) -> u32 {
    (cookie & u64::from(mask)) as u32
}

/// The destination of a further MPTCP subflow, as the kernel's path
/// manager passes it to `__mptcp_subflow_connect` ([`SUBFLOW_DESTS_MAP`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubflowDest {
    /// `AF_INET` or `AF_INET6`.
    pub family: u16,
    /// The remote port, in host byte order (the connection's when the
    /// path manager passed none).
    pub port: u16,
    /// The remote address in the form of [`DestKey::addr`]: an IPv4 one
    /// in word 0, network byte order.
    pub addr: [u32; 4],
}

/// Where the kernel's MPTCP fields lie in the running kernel, read from
/// its BTF by the agent (SRAP's programs are built without CO-RE). The
/// address fields are `struct mptcp_addr_info`'s, whose layout changed in
/// the kernel's history (Linux 5.10 had `family` first and the address at
/// byte 12; 6.1 and 6.18 have it at byte 8, after `id`, `family` and
/// `port`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MptcpLayout {
    /// Non-zero once the agent found every field: before, or on a kernel
    /// without them, only the fixed-layout IPv4 fallback is read.
    pub known: u32,
    /// `mptcp_addr_info.family`, `.port` and its address union (`addr`
    /// and `addr6` both start it).
    pub family: u32,
    pub port: u32,
    pub addr: u32,
    /// `sock_common.skc_v6_daddr`: an MPTCP socket's IPv6 remote address.
    pub v6_daddr: u32,
    /// `mptcp_sock.pm` plus `mptcp_pm_data.remote`: the address the peer
    /// announced last, the one the in-kernel path manager's worker opens
    /// a subflow toward (from the address its route picks).
    pub pm_remote: u32,
}

/// Global binder settings (one entry).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinderConfig {
    /// `SO_MAX_PACING_RATE` for steered sockets, bytes per second; 0: none.
    pub pacing_rate: u64,
    /// Byte offset of `tw_ts_recent_stamp` in the running kernel's
    /// `struct tcp_timewait_sock` (0: unknown). A TIME_WAIT tuple with a
    /// timestamp is taken over by an explicitly bound socket's `connect()`
    /// (`tcp_twsk_unique`), so the hook reuses it; one without, or with the
    /// offset unknown, counts as taken.
    pub tw_stamp_offset: u32,
    /// The socket table's rows less one ([`socket_home`]).
    pub socket_mask: u32,
    /// Slot words per binder row in `SRAP_SLOT_STATE`: a slot's word is
    /// `row * row_slots + slot` ([`BinderSizes::cpus`]).
    pub row_slots: u32,
    /// Where a flow's local end goes (`--local-placement`, a [`placement`] number).
    pub local_placement: u32,
    /// Which NIC's address a connect the application bound none for takes
    /// (`--local-nics`, a [`crate::local_nics::policy`] number).
    pub local_nics: u32,
    /// Whether the hook spreads connects over a receiver's addresses
    /// (`--receiver-nics`, a [`crate::receiver_nics::mode`] number): under
    /// `asked` (0, as an agent that never sets it leaves it) the hook
    /// looks no spread row up and the release hook forgets no asked
    /// address, so steering pays nothing for the feature it does not use.
    pub receiver_nics: u32,
    /// The settings the maps were sized by: a restarted agent compares its
    /// own with them ([`BinderSizes`]).
    pub sizes: BinderSizes,
}

/// `--mptcp`, as [`LoadConfig::mptcp`] holds it.
pub mod mptcp {
    /// MPTCP is left to the kernel: the connect hooks leave a subflow's
    /// port to it (`protocol_not_steered`) and the MPTCP programs (the
    /// bind hooks, the TCP close's, the path manager's tracing) are not
    /// loaded.
    pub const OFF: u32 = 0;
    /// Every subflow of an MPTCP connection steered, each at its own CPU.
    pub const SUBFLOWS: u32 = 1;
    /// As [`SUBFLOWS`] for the hooks; the agent is besides the namespace's
    /// path manager, which opens each connection's subflows (bound with
    /// port 0, so the bind hook steers them) and follows its reader.
    pub const FOLLOW_READER: u32 = 2;
}

/// The name the binder's [`LoadConfig`] global has in the eBPF object.
pub const LOAD_CONFIG_GLOBAL: &str = "SRAP_LOAD_CONFIG";

/// What the hooks branch on, fixed when the agent loads them: the
/// object's read-only global [`LOAD_CONFIG_GLOBAL`] (`.rodata`, frozen
/// before any program is verified). The kernel's verifier reads it as
/// constants and never walks a step that the settings turn off, so a
/// feature that is not configured costs neither verifier time at start
/// nor an instruction per connect. A change of setting is a new load (a
/// restarted agent replaces the programs behind their pinned links).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadConfig {
    /// The settings the agent also writes to [`CONFIG_MAP`] for a
    /// restarted agent and `srap status` to read.
    pub binder: BinderConfig,
    /// Whether this host's NIC is planned too (`--steer both|local`):
    /// 0 lets the hook skip this host's side of every connect.
    pub steer_local: u32,
    /// `--mptcp`, an [`mptcp`] number.
    pub mptcp: u32,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;

    // SAFETY: all are `#[repr(C)]`, `Copy`, integers and arrays of integers
    // with no implicit padding, so every bit pattern is a valid value.
    unsafe impl aya::Pod for DestKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for DestValue {}
    // SAFETY: as above.
    unsafe impl aya::Pod for TableRow {}
    // SAFETY: as above (5 × 4 + 4 × 256 × 2 bytes, no padding).
    unsafe impl aya::Pod for LayoutRow {}
    // SAFETY: as above (8 + 4 × 4 + 4 × 8 × 8 bytes, no padding).
    unsafe impl aya::Pod for ReceiverSlots {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SlotRow {}
    // SAFETY: as above (4 × 256 × 2 + 4 × 4 bytes, no padding).
    unsafe impl aya::Pod for JointRow {}
    // SAFETY: as above.
    unsafe impl aya::Pod for CosetRow {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SocketRecord {}
    // SAFETY: as above (8 + 4 + 4 bytes).
    unsafe impl aya::Pod for SocketRow {}
    // SAFETY: as above (8 + 6 × 4 + 4 × 4 bytes, no padding).
    unsafe impl aya::Pod for BinderConfig {}
    // SAFETY: as above (a `BinderConfig`, a multiple of 8 bytes, and 2 × 4).
    unsafe impl aya::Pod for LoadConfig {}
    // SAFETY: as above (4 + 4 + 4 × 8 × 8 bytes, no padding).
    unsafe impl aya::Pod for SlotGrant {}
    // SAFETY: as above (2 + 2 + 4 × 4 bytes, no padding).
    unsafe impl aya::Pod for SubflowDest {}
    // SAFETY: as above (6 × 4 bytes).
    unsafe impl aya::Pod for MptcpLayout {}
}

#[cfg(test)]
mod tests {
    /// The defaults, and what one 32-CPU receiver pins with them: the
    /// figures `bpftool map show` gave for a sender agent steering toward
    /// one receiver of `data/receiver-32q.json` on a 2-CPU host (two
    /// destinations: bound to the route's source, and unbound).
    #[test]
    fn the_defaults_pin_what_the_kernel_reported_for_one_receiver() {
        let sizes = BinderSizes::DEFAULT;
        assert_eq!(sizes.receiver_rows(), 65);
        assert_eq!(sizes.slot_words(), 65 * 512);
        assert_eq!(sizes.socket_rows(), 65_536);
        assert_eq!(sizes.tables(), 1040);
        assert_eq!(sizes.dests(), 4160);
        let by_map: Vec<(&str, u64)> = PINNED_MAPS
            .iter()
            .map(|spec| {
                let used = if spec.kind == MapKind::HashMap && spec.name != SUBFLOW_DESTS_MAP {
                    2
                } else {
                    0
                };
                let bytes = crate::sizes::map_bytes(
                    spec.kind,
                    (spec.key_size, spec.value_size),
                    spec.max_entries(&sizes),
                    (2, used),
                );
                (spec.name, bytes)
            })
            .collect();
        let reported = [
            ("SRAP_DESTS", 132_192),
            ("SRAP_TABLES", 50_232),
            ("SRAP_LAYOUTS", 134_992),
            ("SRAP_SLOTS", 532_792),
            ("SRAP_ENTRIES", 266_552),
            ("SRAP_COSETS", 532_792),
            ("SRAP_RECEIVERS", 18_512),
            ("SRAP_SLOT_STATE", 266_552),
            ("SRAP_SOCKETS", 1_573_176),
            ("SRAP_STATS", 1_104),
            ("SRAP_BIND_ERRNOS", 3_384),
            ("SRAP_CONFIG", 360),
            ("SRAP_GRANTS", 287_808),
            ("SRAP_JOINTS", 134_472),
            ("SRAP_SOLUTIONS", 266_552),
            ("SRAP_NIC_TABLES", 75_192),
            ("SRAP_NODE_NICS", 824),
            ("SRAP_NIC_TURN", 320),
            ("SRAP_NICS_DOWN", 320),
            ("SRAP_SPREAD", 34_144),
            // `bpftool map show` of an empty 1 024-entry hash map of 8-byte
            // keys and 20-byte values (Linux 6.18, 2 possible CPUs).
            ("SRAP_SUBFLOW_DESTS", 17_280),
            ("SRAP_SPREAD_FAILING", 2_128),
        ];
        assert_eq!(by_map, reported);
        assert_eq!(sizes.pinned_bytes(2, 2), 4_331_680, "4.13 MiB");
        assert!(sizes.pinned_bytes(2, 2) <= 8 << 20);
    }

    /// Each setting grows the maps it sizes, and only those: a receiver
    /// row costs its occupancy, grant and slot words and 16 tables (each
    /// with its row of tables under this host's NICs); a
    /// layout its row and its pools; a socket two table rows.
    use super::*;

    #[test]
    fn a_udp_connect_is_its_own_verdict_not_a_miss() {
        use crate::protocol::{SOCK_DGRAM, SOCK_STREAM};
        assert_eq!(steered_protocol(SOCK_STREAM, 6), Ok(Protocol::Tcp));
        let udp = steered_protocol(SOCK_DGRAM, 17);
        assert_eq!(udp, Err(outcome::PROTOCOL_NOT_STEERED));
        assert_ne!(udp, Err(outcome::MISS));
        assert_eq!(
            steered_protocol(SOCK_STREAM, 262),
            Err(outcome::PROTOCOL_NOT_STEERED),
            "MPTCP"
        );
        assert_eq!(
            COUNTER_NAMES[outcome::PROTOCOL_NOT_STEERED as usize],
            "protocol_not_steered"
        );
        assert!(outcome::VERDICTS.contains(&outcome::PROTOCOL_NOT_STEERED));
        assert!(!outcome::FAILURES.contains(&outcome::PROTOCOL_NOT_STEERED));
    }

    #[test]
    fn a_socket_of_each_steered_protocol_is_steered_as_it() {
        use crate::protocol::{SOCK_DGRAM, SOCK_STREAM};
        assert_eq!(STEERED, [Protocol::Tcp]);
        for protocol in Protocol::ALL {
            let sock_type = match protocol {
                Protocol::Tcp => SOCK_STREAM,
                Protocol::Udp => SOCK_DGRAM,
            };
            let steered = steered_protocol(sock_type, protocol.as_u32()) == Ok(protocol);
            assert_eq!(steered, steers(protocol), "{}", protocol.name());
            assert_eq!(steers(protocol), STEERED.contains(&protocol));
        }
    }

    #[test]
    fn a_dest_key_names_its_protocol_in_the_family_words_padding() {
        let key = DestKey::new(Protocol::Tcp, Family::Inet6, 443, [1, 2, 3, 4], [0; 4]);
        assert_eq!((key.family, key.protocol, key._pad), (10, 6, 0));
        assert_eq!(key.port, 443);
        assert_eq!(
            size_of::<DestKey>(),
            40,
            "the pinned map's key size is kept"
        );
    }

    #[test]
    fn a_grant_files_each_slot_under_its_base() {
        let grant = SlotGrant::of([(1, 0), (70, 2), (5, 9), (600, 0)]);
        assert!(grant.allows(1) && grant.allows(70) && grant.allows(5));
        assert!(!grant.allows(0) && !grant.allows(600));
        assert_eq!(grant.base_word(0, 0), 1 << 1);
        assert_eq!(grant.base_word(2, 1), 1 << 6);
        assert_eq!(grant.base_word(LEVELS - 1, 0), 1 << 5);
        let none = SlotGrant::default();
        assert!(none.allows(0) && none.allows(511));
        assert_eq!(none.base_word(0, 3), u64::MAX);
        assert_eq!(none.base_word(1, 3), 0);
    }

    #[test]
    fn rebuilt_state_puts_each_slot_in_its_level() {
        let first_set_from = |words: &[u64; SLOT_WORDS], start| {
            crate::occupancy::first_set_where(start, |w| words[w])
        };
        let mut flows = [0u32; MAX_SLOTS as usize];
        flows[1] = 1;
        flows[2] = 7;
        let now = ReceiverSlots {
            cursor: 9,
            dry: 3,
            ..ReceiverSlots::default()
        };
        let state = ReceiverSlots::rebuilt(70, &flows, &now);
        assert_eq!(state.slots, 70);
        assert_eq!((state.cursor, state.dry), (9, 3), "the rest is kept");
        assert_eq!(first_set_from(&state.levels[1], 0), Some(1));
        assert_eq!(first_set_from(&state.levels[LEVELS - 1], 0), Some(2));
        assert_eq!(first_set_from(&state.levels[0], 69), Some(69));
        assert_eq!(
            first_set_from(&state.levels[0], 70),
            Some(0),
            "none past the slots"
        );
        let set: u32 = state.levels.iter().flatten().map(|w| w.count_ones()).sum();
        assert_eq!(set, 70, "each slot in exactly one level");
    }

    #[test]
    fn consecutive_cookies_take_consecutive_rows() {
        let rows = BinderSizes::DEFAULT.socket_rows();
        let base = 7 * u64::from(rows) - 3;
        let homes: Vec<u32> = (base..base + 6).map(|c| socket_home(c, rows - 1)).collect();
        assert_eq!(homes, [rows - 3, rows - 2, rows - 1, 0, 1, 2]);
    }

    #[test]
    fn a_slot_word_holds_flows_lock_and_turn_apart() {
        let word = 5 | slot_word::LOCK | (7 * slot_word::TURN);
        assert_eq!(slot_word::flows(word), 5);
        assert_eq!(slot_word::turn(word), 7);
        // Freeing a flow (adding all ones) never borrows from the turn.
        let freed = word.wrapping_add(u64::MAX);
        assert_eq!((slot_word::flows(freed), slot_word::turn(freed)), (4, 7));
        assert_eq!(freed & slot_word::LOCK, slot_word::LOCK);
    }

    #[test]
    fn the_rotation_walks_every_entry_and_every_member() {
        // Three entries with cosets of 2, 3 and 1 ports in range.
        let mut layout = LayoutRow::default();
        layout.span_low[1] = 0x10;
        layout.span_low[2] = 0x20;
        let cosets = [
            CosetRow {
                port0: 0x100,
                first: 1,
                count: 2,
            },
            CosetRow {
                port0: 0x200,
                first: 0,
                count: 3,
            },
            CosetRow {
                port0: 0x300,
                first: 2,
                count: 1,
            },
        ];
        let mut seen = std::collections::BTreeSet::new();
        for turn in 0..3 * 6 {
            let (entry, round) = slot_turn(turn, 3);
            seen.insert(layout.port_of(&cosets[entry as usize], round).unwrap());
        }
        let all: std::collections::BTreeSet<u16> = [0x110, 0x120, 0x200, 0x210, 0x220, 0x320]
            .into_iter()
            .collect();
        assert_eq!(seen, all);
        assert_eq!(layout.port_of(&CosetRow::default(), 4), None);
    }
}
