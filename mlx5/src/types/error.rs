//! The errors of the device API and of its backends, and the environment
//! variables they name. A leaf: the backends (`sim`, `hw`) build these, and
//! nothing here knows either backend.

use super::QpState;

/// Errors of the device API.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No device of that name.
    #[error("no device named {0:?} (software devices are sim0..sim7; `auto` picks one)")]
    UnknownDevice(String),
    /// The fabric could not be opened.
    #[cfg(feature = "sim")]
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A software device (`sim0` .. `sim7`) was asked for, or `auto` found
    /// no NIC, in a build without the software device (the `mlx5` crate's
    /// `sim` feature).
    #[error(
        "{0}: the software device is not built in (build the mlx5 crate with its `sim` feature)"
    )]
    NoSoftwareDevice(String),
    /// An argument is out of range.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A QP state change that the state machine does not allow.
    #[error("QP {qpn:#x}: cannot go from {from:?} to {to:?}")]
    BadTransition {
        /// QP number.
        qpn: u32,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// The data-path object was already taken.
    #[error("{0} already taken")]
    Taken(&'static str),
    /// A data-path object rejected the memory it was given.
    #[error("queue memory: {0}")]
    Queue(String),
    /// A tag-matching SRQ was asked of a device without tag matching.
    #[error(
        "{0} has no tag matching (its tm_caps.max_num_tags is 0): it takes a ConnectX with tag \
         matching, or the software device"
    )]
    NoTagMatching(String),
    /// The hardware backend failed.
    #[error(transparent)]
    Hw(#[from] HwError),
}

/// Errors of the hardware backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HwError {
    /// The library could not be loaded.
    #[error("cannot load {lib}: {reason} (install rdma-core: apt-get install libibverbs1 ibverbs-providers)")]
    LibraryMissing {
        /// File name tried.
        lib: String,
        /// `dlerror()`.
        reason: String,
    },
    /// The library lacks a function we need (too old an rdma-core).
    #[error("{lib} has no symbol {symbol} (rdma-core too old?)")]
    SymbolMissing {
        /// Library.
        lib: String,
        /// Symbol.
        symbol: &'static str,
    },
    /// No RDMA device is present.
    #[error("no RDMA device found")]
    NoDevice,
    /// No device has that name.
    #[error("no RDMA device named {name:?} (present: {present})")]
    UnknownDevice {
        /// Name asked for.
        name: String,
        /// Names present, comma-separated.
        present: String,
    },
    /// A verb failed.
    #[error("{verb} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Verb {
        /// The verb.
        verb: &'static str,
        /// `errno`.
        errno: i32,
    },
    /// The device is not an mlx5 device (the direct data path needs one).
    #[error("{0} is not an mlx5 device")]
    NotMlx5(String),
    /// A data-path object was already taken (each is handed out once).
    #[error("{0} already taken")]
    Taken(&'static str),
}

/// Environment variable naming the fabric that `sim*` devices open.
#[cfg(feature = "sim")]
pub const FABRIC_ENV: &str = "MLX5_SIM_FABRIC";
/// Why a fabric could not be opened.
#[cfg(feature = "sim")]
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The name has characters other than `[A-Za-z0-9_.-]`, or is empty.
    #[error("invalid fabric name {0:?}: use letters, digits, '.', '_' and '-'")]
    BadName(String),
    /// The shared-memory files could not be created or mapped.
    #[error("fabric {name}: {source}")]
    Io {
        /// Fabric name.
        name: String,
        /// What failed.
        source: std::io::Error,
    },
    /// Another process is initialising the registry and did not finish.
    #[error("fabric {0}: registry never became ready")]
    NotReady(String),
    /// A table of the registry is full.
    #[error("fabric {0}: no free {1} slot")]
    Full(String, &'static str),
    /// The link models in the environment could not be read.
    #[error("fabric {name}: {source} (from {env})", env = LINKS_ENV)]
    Links {
        /// Fabric name.
        name: String,
        /// What is wrong with the specification.
        source: LinkSpecError,
    },
    /// There is no such device in a fabric.
    #[error("fabric {0}: no device sim{1}")]
    NoDevice(String, u32),
    /// This process already drives the fabric in another execution mode.
    #[error("fabric {0}: already opened in this process in another execution mode")]
    ModeConflict(String),
    /// The fabric belongs to another user: a fabric is private to the user
    /// who created it.
    #[error(
        "fabric {name}: {} belongs to uid {owner}, and this process runs as uid {uid}; \
         a fabric is private to the user who created it (pick another name with {})",
        path.display(),
        FABRIC_ENV
    )]
    NotOwner {
        /// Fabric name.
        name: String,
        /// The fabric's directory.
        path: std::path::PathBuf,
        /// The uid that owns it.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
}

/// Environment variable with the link models a new fabric starts with:
/// `sim0=24,sim1=8` (Gbit/s), or with a one-way latency, `sim0=24:2us` (units
/// `ns`, `us`, `ms`; a bare number is ns). Read by the process that creates
/// the fabric.
#[cfg(feature = "sim")]
pub const LINKS_ENV: &str = "MLX5_SIM_LINKS";

/// Why a link specification was refused.
#[cfg(feature = "sim")]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LinkSpecError {
    /// An entry is not `simN=GBPS[:LATENCY]`.
    #[error("link spec {0:?}: expected simN=GBPS[:LATENCY], e.g. sim0=24,sim1=8:2us")]
    Syntax(String),
    /// The device number is not one of the fabric's.
    #[error("link spec {0:?}: no such device (sim0 .. sim{max})", max = SIM_DEVICES - 1)]
    Device(String),
    /// The rate is not a positive number of Gbit/s.
    #[error("link spec {0:?}: the rate must be a positive number of Gbit/s")]
    Rate(String),
}

/// Software devices a fabric holds (`sim0` .. `sim7`): the size of the
/// fabric registry's device table.
#[cfg(feature = "sim")]
pub(crate) const SIM_DEVICES: usize = 8;
