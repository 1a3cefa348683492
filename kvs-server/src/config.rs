//! Server settings, from a TOML file (every key optional).
//!
//! ```toml
//! listen = "0.0.0.0:7000"   # TCP address for connection setup
//! advertise = "10.0.0.5:7000"  # where clients and members reach this server
//! join = "10.0.0.4:7000"    # a member of the cluster to join (while data_dir holds no member)
//! data_dir = "/var/lib/kvs" # the member's identity and control-group log (and its records' logs)
//! durability = "everysec"   # none, everysec or always: the records' logs on disk (needs data_dir)
//! auto_snapshot_percentage = 100  # snapshot when the logs outgrow the last snapshot by this much (0: only on request)
//! auto_snapshot_min_size = "64M"  # ... and hold at least this many bytes
//! snapshot_rate = "32M"     # per worker: bytes of records a snapshot copies a second (0: no limit)
//! catch_up_history = "16M"  # per worker: recent writes' keys a restarted backup catches up from (0: whole copies)
//! bootstrap = false         # true: an empty data_dir starts a new cluster (once, to create it)
//! control_voters = 3        # members that vote in the control group (the first ones)
//! member_timeout_ms = 1000  # silence after which the leader marks a member failed (the founder's is the cluster's)
//! replicas = 1              # copies of each slot (1-3), set when the cluster starts
//! zone = "rack-a"           # this member's host or rack: a slot's copies avoid sharing one
//! bulk_port = 7001          # TCP port for migrations' bulk transfers (0: any free one)
//! bulk_devices = ["mlx5_0", "mlx5_1"]  # their rails (default: see below)
//! auth_token_file = "/etc/kvs/token"  # the token clients must present (mode 600)
//! cluster_token_file = "/etc/kvs/cluster-token"  # members' and kvs-admin's (mode 600)
//! allow_unauthenticated = false  # true: serve a non-loopback address without a token
//! setup_timeout_ms = 5000   # a client's time to send its setup record
//! max_pending_setups = 1024 # setup records read at once; one more drops the oldest
//! device = "auto"           # mlx5_0, sim1, … or auto (a NIC, else sim1)
//! fabric = "kvs"            # software device fabric (default $MLX5_SIM_FABRIC)
//! workers = 2               # worker threads, one copyrpc context each
//! slots = 1024              # shards (hash slots)
//! max_key = 1024            # bytes
//! max_value = 65536         # bytes
//! transport = "rc"          # or "dc": DC targets and initiators (mlx5 only)
//! ring_size = 1048576       # copyrpc ring per endpoint (power of two)
//! max_endpoints = 1024      # per worker
//! stats_interval_s = 10     # 0: no stats lines
//! max_memory = "16G"        # bytes the records may take (or 17179869184); 0: no cap
//! metrics_listen = "127.0.0.1:9100"  # Prometheus endpoint (GET /metrics); absent: none
//! busy_poll = false         # true: workers spin when idle (a core each, least latency)
//! idle_spin_us = 50         # spin this long before sleeping
//! idle_max_spin_us = 1000   # the spin adapts up to this under load
//! huge_pages = false        # true: copyrpc rings in 2 MiB huge pages (vm.nr_hugepages)
//! log = "info"              # log filter: a level, levels per module (RUST_LOG overrides it)
//! log_format = "plain"      # or "json": one JSON object per line, for log shippers
//! ```
//!
//! With `data_dir`, bootstrapping is explicit: a data dir that holds a
//! member resumes it, whatever `join` and `bootstrap` say; an empty one
//! joins `join`, or starts a new cluster with `bootstrap = true`, and with
//! neither the server refuses to start, since it may be a member's lost
//! data dir. Set `bootstrap` on one server, when the cluster is created,
//! and not afterwards: were that data dir lost, it would start a second
//! cluster. Without `data_dir` the server starts a cluster of its own
//! unless `join` says otherwise.
//!
//! An idle worker spins `idle_spin_us`, then arms its CQs and sleeps until a
//! request arrives (a completion event), a client connects, or 50 ms pass.
//! When requests keep coming soon after it falls asleep, its spin doubles,
//! up to `idle_max_spin_us`, so a loaded server does not sleep between
//! requests. `busy_poll = true` spins forever: a core per worker, always.
//!
//! `max_memory` caps the heap the records occupy (keys, values, their index
//! entries: see [`crate::store::memory`]), not the whole process: add the copyrpc
//! rings (`ring_size` per client per worker) and a few MiB. Each worker gets
//! `max_memory / workers` (slots are hashed, so their loads are even) and
//! refuses PUTs past its share with an out-of-memory error; reads, deletes
//! and writes that do not grow keep working.
//!
//! `huge_pages = true` puts each client connection's copyrpc rings (a send
//! and a receive ring of `ring_size` per client per worker) in 2 MiB huge
//! pages, so the NIC and the CPU translate them with fewer entries. The
//! pages come from the pool the operator reserves (`vm.nr_hugepages`): each
//! ring takes whole pages (`max(ring_size, 2 MiB)`), so reserve
//! `2 × max(ring_size, 2 MiB) / 2 MiB` pages per client per worker. When the
//! pool runs short, rings are in normal pages (said once in the log), and
//! the software device has no huge pages at all.
//!
//! `metrics_listen` serves metrics in the Prometheus text format. They hold
//! counts and sizes, never keys or values, and need no token; but they tell
//! whoever reaches the port how busy the server is, so bind it to an address
//! only the monitoring system reaches.
//!
//! Two secrets, for two roles. Clients (kvs-client, ycsb-driver) present
//! the token in `auth_token_file` and may issue data operations only.
//! Members and kvs-admin present the one in `cluster_token_file`, which
//! alone opens the control endpoint: joins, the control group's messages,
//! migrations' pulls (and so the tickets that open the bulk port) and every
//! administrative command. Each token has at least 16 bytes, the two
//! differ, and a server that requires a client token requires a cluster
//! token too; it refuses to start otherwise.
//!
//! Without `auth_token_file` anyone who can reach the setup port can read and
//! write everything, so the server then listens only on a loopback address,
//! unless `allow_unauthenticated = true` says that is intended (the role
//! Redis's protected mode plays).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most bytes a record takes with its headers (the largest key and value
/// and 64 bytes) in any configuration: a bulk transfer's batches are sized to
/// hold one ([`crate::bulk::BATCH`]).
pub(crate) const MAX_RECORD: usize = (1 << 20) - 64;

/// Whether a member keeps its records on disk, and how soon an
/// acknowledged write is there: Redis's `appendfsync` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Memory only: a member restarts empty (its copies come from the
    /// other members, with `replicas` > 1).
    #[default]
    None,
    /// Each worker writes its turn's changes to its log at the turn's
    /// end; a thread flushes the logs to disk once a second. A crash of
    /// every copy of a slot loses at most about its last second of writes.
    Everysec,
    /// A write is acknowledged only once the log holding it is flushed to
    /// disk (the turn's writes share one flush).
    Always,
}

impl Durability {
    /// Its name in the config file.
    pub fn name(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Everysec => "everysec",
            Durability::Always => "always",
        }
    }
}

/// A `durability` that is not one of the three.
#[derive(Debug, thiserror::Error)]
#[error("durability {0:?}: none, everysec or always")]
pub struct UnknownDurability(pub String);

impl std::str::FromStr for Durability {
    type Err = UnknownDurability;
    fn from_str(s: &str) -> Result<Durability, UnknownDurability> {
        match s {
            "none" => Ok(Durability::None),
            "everysec" => Ok(Durability::Everysec),
            "always" => Ok(Durability::Always),
            _ => Err(UnknownDurability(s.to_string())),
        }
    }
}

/// Server settings.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// TCP address for connection setup.
    pub listen: SocketAddr,
    /// The address clients and other members reach this server at, as the
    /// shard map names it. None: `listen`, whose unspecified IP (`0.0.0.0`)
    /// a joining server replaces with its IP on the route to the member it
    /// joins, and the first server leaves for the first member that joins
    /// to fill in.
    pub advertise: Option<SocketAddr>,
    /// Any member of the cluster to join (`host:port`). Used only while
    /// `data_dir` holds no member: a member resumes from its data dir. None:
    /// see `bootstrap`. Not with `bootstrap`.
    pub join: Option<String>,
    /// Start a new cluster, this server its member 0, owning every slot,
    /// when `data_dir` holds no member. Without it (and without `join`) an
    /// empty data dir is refused: it may be a member's lost one. Ignored
    /// (with a note) when the data dir holds a member; without `data_dir`
    /// the server bootstraps anyway, unless `join`. Not with `join`.
    pub bootstrap: bool,
    /// Where the member keeps its identity (cluster and member ids) and its
    /// copy of the control group's log. A data dir that holds a member is
    /// resumed (whatever `join` and `bootstrap` say), never started anew;
    /// an empty one joins `join`, or starts a cluster with `bootstrap`.
    /// None: a temporary directory that goes with the process (a restart is
    /// a new member).
    pub data_dir: Option<PathBuf>,
    /// Whether the records are kept on disk too, in a log per worker in
    /// `data_dir`, and how soon an acknowledged write is there (as Redis's
    /// `appendfsync`): see [`Durability`].
    pub durability: Durability,
    /// A worker snapshots its records (and sheds the logs the snapshot
    /// holds) once its logs hold this percentage of its last snapshot's
    /// size, as Redis's `auto-aof-rewrite-percentage` does; 0: only when
    /// `kvs-admin snapshot` asks.
    pub auto_snapshot_percentage: u32,
    /// ... and at least this many bytes (an integer, or a string with a
    /// unit: `"64M"`), as `auto-aof-rewrite-min-size`.
    #[serde(deserialize_with = "crate::store::memory::deserialize_bytes")]
    pub auto_snapshot_min_size: u64,
    /// The most bytes of records a worker's snapshot copies a second (an
    /// integer, or a string with a unit: `"32M"`), so that a snapshot
    /// spreads its cost on the worker and the disk instead of taking them
    /// in one burst, as Cassandra's compaction throughput does; 0: as fast
    /// as the disk takes them.
    #[serde(deserialize_with = "crate::store::memory::deserialize_bytes")]
    pub snapshot_rate: u64,
    /// With `durability`: bytes of each worker's history of its last
    /// writes' keys (as a Redis master's `repl-backlog-size`). A backup
    /// restarted from its files whose copy of a slot stands within it gets
    /// only the keys written since (a catch-up), not the whole slot; 0:
    /// every copy is whole. About 30 bytes plus the key per write.
    #[serde(deserialize_with = "crate::store::memory::deserialize_bytes")]
    pub catch_up_history: u64,
    /// How many members vote in the control group: the first ones to join
    /// (the rest follow the log as learners). 3 survives one failure, 5 two.
    pub control_voters: u16,
    /// Milliseconds without a word from a member after which the group's
    /// leader marks it failed. Leases and elections are derived from it
    /// (a lease is two fifths of it, an election timeout a fifth). The
    /// group agrees on one value: the founding member's goes into the
    /// cluster's state, and a member configured otherwise uses the
    /// cluster's and says so; `kvs-admin set member-timeout` changes it.
    pub member_timeout_ms: u64,
    /// Copies of each slot the cluster keeps, 1 to 3: its primary and
    /// `replicas - 1` synchronous backups. Read when the cluster starts
    /// (bootstrap); `kvs-admin set replicas N` changes it later.
    pub replicas: u8,
    /// This member's zone (a host, a rack): a slot's backups go to zones
    /// holding no copy of it when there are such. None: a zone of its own.
    pub zone: Option<String>,
    /// The TCP port, on `listen`'s address, where migrations' bulk
    /// transfers are set up (0: any free port; the map tells members which).
    pub bulk_port: u16,
    /// The devices of the bulk transfers' rails (one or two). Empty: the
    /// worker device alone on a NIC; on the software device, `sim2` and
    /// `sim3`.
    pub bulk_devices: Vec<String>,
    /// The RDMA device (`auto`: the first mlx5 NIC, else software device
    /// `sim1`).
    pub device: String,
    /// The software device's fabric (default: the one `MLX5_SIM_FABRIC` names).
    pub fabric: Option<String>,
    /// Worker threads.
    pub workers: u16,
    /// Shards (hash slots), dealt round-robin to the workers.
    pub slots: u32,
    /// Largest key, in bytes.
    pub max_key: usize,
    /// Largest value, in bytes.
    pub max_value: usize,
    /// How copyrpc connections reach their peers: `"rc"` (one QP per
    /// client per worker) or `"dc"` (one DC target per worker and a few DC
    /// initiators, however many clients; mlx5 only). Every member of a
    /// cluster and every client must use the same.
    pub transport: copyrpc::transport::Wire,
    /// copyrpc ring size per endpoint.
    pub ring_size: u64,
    /// Most endpoints (client connections) per worker.
    pub max_endpoints: u32,
    /// Seconds between stats lines (0: none).
    pub stats_interval_s: u64,
    /// File holding the token every client must present (private to its
    /// owner: mode 600). None: no authentication.
    pub auth_token_file: Option<PathBuf>,
    /// File holding the token members and kvs-admin present: the only one
    /// the control endpoint takes (private to its owner). None: the control
    /// endpoint is as open as the data (allowed only without
    /// `auth_token_file`).
    pub cluster_token_file: Option<PathBuf>,
    /// Serve a non-loopback address without a token: anyone who can reach
    /// it can read and write everything.
    pub allow_unauthenticated: bool,
    /// Milliseconds a client has, from its TCP connection, to send its whole
    /// setup record.
    pub setup_timeout_ms: u64,
    /// Most connections whose setup record is still being read; one more
    /// drops the oldest.
    pub max_pending_setups: usize,
    /// Heap bytes the records may take, split evenly between the workers
    /// (0: no cap). An integer, or a string with a unit (`"64M"`, `"1G"`).
    #[serde(deserialize_with = "crate::store::memory::deserialize_bytes")]
    pub max_memory: u64,
    /// Where to serve metrics in the Prometheus text format (`GET /metrics`);
    /// None: no endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Workers never sleep: each spins on its CQs, a core each, always.
    pub busy_poll: bool,
    /// Microseconds an idle worker spins before it sleeps.
    pub idle_spin_us: u64,
    /// The longest spin the adaptation reaches under load, in microseconds.
    pub idle_max_spin_us: u64,
    /// Client connections' copyrpc rings in 2 MiB huge pages (from the pool
    /// `vm.nr_hugepages` reserves; normal pages when it runs short, and on
    /// the software device).
    pub huge_pages: bool,
    /// The log filter, in `RUST_LOG`'s syntax: a level, and levels per
    /// module (`info,kvs_server::cluster=debug,kvs_control::raft=debug`).
    /// The `RUST_LOG` environment variable, when set, overrides it. Read
    /// by the programs that install the logger ([`crate::logging::init`]).
    pub log: String,
    /// How log lines look: `plain` text lines (journald-friendly), or
    /// `json`, one object per line.
    pub log_format: crate::logging::LogFormat,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7000".parse().expect("a valid address"),
            advertise: None,
            join: None,
            bootstrap: false,
            data_dir: None,
            durability: Durability::None,
            auto_snapshot_percentage: 100,
            auto_snapshot_min_size: 64 << 20,
            snapshot_rate: 32 << 20,
            catch_up_history: 16 << 20,
            control_voters: 3,
            member_timeout_ms: 1000,
            replicas: 1,
            zone: None,
            bulk_port: 0,
            bulk_devices: Vec::new(),
            device: "auto".into(),
            fabric: None,
            workers: 1,
            slots: 1024,
            max_key: 1024,
            max_value: 64 << 10,
            transport: copyrpc::transport::Wire::Rc,
            ring_size: 1 << 20,
            max_endpoints: 1024,
            stats_interval_s: 10,
            auth_token_file: None,
            cluster_token_file: None,
            allow_unauthenticated: false,
            setup_timeout_ms: 5000,
            max_pending_setups: 1024,
            max_memory: 0,
            metrics_listen: None,
            busy_poll: false,
            idle_spin_us: copyrpc::DEFAULT_SPIN.as_micros() as u64,
            idle_max_spin_us: copyrpc::DEFAULT_MAX_SPIN.as_micros() as u64,
            huge_pages: false,
            log: crate::logging::DEFAULT_FILTER.into(),
            log_format: crate::logging::LogFormat::Plain,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, or unknown keys.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A value out of range.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Config {
    /// The control group's timing, from `member_timeout_ms`.
    pub(crate) fn group_config(&self) -> kvs_control::GroupConfig {
        kvs_control::GroupConfig::for_member_timeout(Duration::from_millis(self.member_timeout_ms))
    }

    /// The device of the server's threads (workers, control, migrations'
    /// control clients): `device`, on `fabric`, `auto` falling back to the
    /// software device `sim1`.
    pub(crate) fn device_spec(&self) -> copyrpc::transport::DeviceSpec<'_> {
        copyrpc::transport::DeviceSpec {
            name: &self.device,
            fabric: self.fabric.as_deref(),
            software: "sim1",
        }
    }

    /// Parses TOML text and checks the values.
    pub fn from_toml(s: &str) -> Result<Config, ConfigError> {
        let c = Self::parse_toml(s)?;
        c.validate()?;
        Ok(c)
    }

    /// Parses TOML text without checking the values (for settings that
    /// command-line flags complete; [`Server::start`](crate::Server::start)
    /// checks them).
    pub fn parse_toml(s: &str) -> Result<Config, ConfigError> {
        Ok(toml::from_str(s)?)
    }

    /// Reads, parses and checks a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let c = Self::read(path)?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a TOML file without checking the values (see
    /// [`parse_toml`](Self::parse_toml)).
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let s = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_toml(&s)
    }

    /// What an idle worker does.
    pub fn idle_policy(&self) -> copyrpc::IdlePolicy {
        if self.busy_poll {
            return copyrpc::IdlePolicy::Spin;
        }
        copyrpc::IdlePolicy::SpinThenSleep {
            spin: Duration::from_micros(self.idle_spin_us),
            max_spin: Duration::from_micros(self.idle_max_spin_us),
        }
    }

    /// Whether clients reach this server only from this host.
    pub fn loopback_only(&self) -> bool {
        self.listen.ip().to_canonical().is_loopback()
    }

    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::logging::check_filter(&self.log).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.check_sizes()?;
        self.check_cluster()?;
        self.check_idle_and_memory()?;
        if self.durability != Durability::None && self.data_dir.is_none() {
            return Err(ConfigError::Invalid(
                "durability = \"everysec\" or \"always\" keeps the records' logs in data_dir: \
                 set data_dir"
                    .into(),
            ));
        }
        self.check_auth()
    }

    /// Checks the sizes: workers, slots, rings, keys and values (a record
    /// fits a message and a migration batch), bulk rails and endpoints.
    fn check_sizes(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.workers == 0 {
            return bad("workers must be at least 1".into());
        }
        if self.slots == 0 || self.slots > kvs_proto::shard::MAX_SLOTS {
            return bad(format!(
                "slots must be in 1..={}",
                kvs_proto::shard::MAX_SLOTS
            ));
        }
        if self.slots < u32::from(self.workers) {
            return bad("fewer slots than workers".into());
        }
        if !self.ring_size.is_power_of_two() || self.ring_size < 4096 {
            return bad("ring_size must be a power of two of at least 4096".into());
        }
        if self.max_key == 0 || self.max_key > u16::MAX as usize {
            return bad("max_key must be in 1..=65535".into());
        }
        // A PUT of the largest key and value must fit one copyrpc message.
        let largest = self.max_key + self.max_value + 64;
        if largest as u64 > self.ring_size / 8 {
            return bad(format!(
                "max_key + max_value ({largest} bytes with headers) must be at most ring_size / 8 ({})",
                self.ring_size / 8
            ));
        }
        if self.bulk_devices.len() > 2 {
            return bad("bulk_devices names one or two rails".into());
        }
        // A record must fit one bulk batch (a migration's, a copy's).
        if largest > MAX_RECORD {
            return bad(format!(
                "max_key + max_value must be under {MAX_RECORD} (a bulk transfer's batch)"
            ));
        }
        if self.max_endpoints == 0 {
            return bad("max_endpoints must be at least 1".into());
        }
        Ok(())
    }

    /// Checks the cluster's settings: bootstrap or join, setup timeout,
    /// voters, replicas, zone, member timeout and pending setups.
    fn check_cluster(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.bootstrap && self.join.is_some() {
            return bad(format!(
                "bootstrap (--bootstrap) and join = {:?} (--join): a server starts a new \
                 cluster or joins one, not both; give --bootstrap to the first member only, \
                 when the cluster is created, and --join to the others",
                self.join.as_deref().unwrap_or_default()
            ));
        }
        if self.setup_timeout_ms == 0 || self.setup_timeout_ms > 600_000 {
            return bad("setup_timeout_ms must be in 1..=600000".into());
        }
        if !(1..=7).contains(&self.control_voters) {
            return bad("control_voters must be in 1..=7".into());
        }
        if !kvs_control::REPLICAS.contains(&self.replicas) {
            return bad(format!(
                "replicas = {}: a cluster keeps 1 to 3 copies of each slot",
                self.replicas
            ));
        }
        if self
            .zone
            .as_ref()
            .is_some_and(|z| z.is_empty() || z.len() > 64)
        {
            return bad("zone must be 1 to 64 bytes".into());
        }
        let range = kvs_control::MEMBER_TIMEOUT_MS;
        if !range.contains(&self.member_timeout_ms) {
            return bad(format!(
                "member_timeout_ms must be in {}..={}",
                range.start(),
                range.end()
            ));
        }
        if self.max_pending_setups == 0 {
            return bad("max_pending_setups must be at least 1".into());
        }
        Ok(())
    }

    /// Checks the idle spins and that `max_memory` leaves each worker room
    /// for its largest record.
    fn check_idle_and_memory(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.idle_spin_us > 1_000_000 || self.idle_max_spin_us > 1_000_000 {
            return bad("idle_spin_us and idle_max_spin_us must be at most 1000000 (1 s)".into());
        }
        if self.idle_max_spin_us < self.idle_spin_us {
            return bad(format!(
                "idle_max_spin_us ({}) must be at least idle_spin_us ({})",
                self.idle_max_spin_us, self.idle_spin_us
            ));
        }
        let largest = crate::store::memory::record_cost(self.max_key, self.max_value) as u64;
        if self.max_memory != 0 && self.max_memory / u64::from(self.workers) < largest {
            return bad(format!(
                "max_memory = {} leaves each of the {} workers less than one largest record \
                 ({largest} bytes with max_key and max_value): raise it, or 0 for no cap",
                self.max_memory, self.workers
            ));
        }
        Ok(())
    }

    /// Checks that the tokens protect a server others can reach, and that
    /// the client and cluster roles have a secret each.
    fn check_auth(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.auth_token_file.is_none() && !self.allow_unauthenticated && !self.loopback_only() {
            return bad(format!(
                "listen = {} without auth_token_file would let anyone who can reach it read \
                 and write everything: set auth_token_file (--auth-token-file), listen on a \
                 loopback address, or set allow_unauthenticated = true \
                 (--allow-unauthenticated)",
                self.listen
            ));
        }
        if self.auth_token_file.is_some() && self.cluster_token_file.is_none() {
            return bad(
                "auth_token_file without cluster_token_file would let every client join, \
                 move slots and administer the cluster: set cluster_token_file \
                 (--cluster-token-file) to a second secret for members and kvs-admin"
                    .into(),
            );
        }
        if self.auth_token_file.is_some() && self.auth_token_file == self.cluster_token_file {
            return bad(
                "auth_token_file and cluster_token_file name the same file: the two roles \
                 need two secrets"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::LogFormat;

    #[test]
    fn defaults_partial_files_and_errors() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        let c = Config::from_toml("workers = 4\nlisten = \"127.0.0.1:9000\"\n").unwrap();
        assert_eq!((c.workers, c.listen.port(), c.slots), (4, 9000, 1024));
        let e = Config::from_toml("wrokers = 4").unwrap_err().to_string();
        assert!(e.contains("wrokers"), "{e}");
        let e = Config::from_toml("workers = 0").unwrap_err().to_string();
        assert!(e.contains("workers"), "{e}");
        let e = Config::from_toml("max_value = 1000000")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ring_size / 8"), "{e}");
        assert!(Config::from_toml("ring_size = 3000").is_err());
        assert_eq!(
            Config::from_toml("transport = \"dc\"").unwrap().transport,
            copyrpc::transport::Wire::Dc
        );
        let e = Config::from_toml("transport = \"ud\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rc") && e.contains("dc"), "{e}");
        assert!(Config::from_toml("max_pending_setups = 0").is_err());
        assert!(Config::from_toml("setup_timeout_ms = 0").is_err());
        assert!(!Config::from_toml("").unwrap().huge_pages);
        assert!(Config::from_toml("huge_pages = true").unwrap().huge_pages);
        assert!(Config::from_toml("huge_pages = \"yes\"").is_err());
        let history = |t: &str| Config::from_toml(t).map(|c| c.catch_up_history).ok();
        assert_eq!(history(""), Some(16 << 20));
        assert_eq!(history("catch_up_history = \"0\""), Some(0));
        assert_eq!(history("catch_up_history = \"64M\""), Some(64 << 20));
        assert!(history("catch_up_history = \"lots\"").is_none());
    }

    #[test]
    fn log_filter_and_format() {
        let c = Config::from_toml("").unwrap();
        assert_eq!((c.log.as_str(), c.log_format), ("info", LogFormat::Plain));
        let c =
            Config::from_toml("log = \"warn,kvs_server::cluster=debug\"\nlog_format = \"json\"")
                .unwrap();
        assert_eq!(c.log, "warn,kvs_server::cluster=debug");
        assert_eq!(c.log_format, LogFormat::Json);
        let e = Config::from_toml("log = \"kvs_server=loud\"").unwrap_err();
        assert!(e.to_string().contains("log filter"), "{e}");
        assert!(Config::from_toml("log_format = \"yaml\"").is_err());
    }

    #[test]
    fn bootstrap_or_join_not_both() {
        assert!(!Config::default().bootstrap);
        assert!(Config::from_toml("bootstrap = true").unwrap().bootstrap);
        let e = Config::from_toml("bootstrap = true\njoin = \"10.0.0.4:7000\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn memory_caps_and_the_metrics_address() {
        let c = Config::from_toml("max_memory = 67108864\nmetrics_listen = \"127.0.0.1:9100\"")
            .unwrap();
        assert_eq!(c.max_memory, 64 << 20);
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9100".parse().unwrap()));
        assert!(Config::from_toml("metrics_listen = \"nowhere\"").is_err());
        let c = Config::from_toml("max_memory = \"2G\"").unwrap();
        assert_eq!(c.max_memory, 2 << 30);
        assert_eq!(Config::from_toml("").unwrap().max_memory, 0);
        let e = Config::from_toml("max_memory = \"2 parsecs\"").unwrap_err();
        assert!(e.to_string().contains("unknown unit"), "{e}");
        // Each worker's share must hold one largest record (64 KiB values).
        let e = Config::from_toml("max_memory = \"100K\"\nworkers = 2")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("max_memory") && e.contains("largest record"),
            "{e}"
        );
        assert!(Config::from_toml("max_memory = \"200K\"\nworkers = 2").is_ok());
    }

    #[test]
    fn a_non_loopback_address_needs_a_token_or_an_explicit_opt_out() {
        for open in ["0.0.0.0:7000", "10.1.2.3:7000", "[::]:7000"] {
            let text = format!("listen = \"{open}\"\n");
            let e = Config::from_toml(&text).unwrap_err().to_string();
            assert!(
                e.contains("auth_token_file") && e.contains("allow_unauthenticated"),
                "{e}"
            );
            let both = "auth_token_file = \"/etc/kvs/token\"\n\
                        cluster_token_file = \"/etc/kvs/cluster-token\"\n";
            let c = Config::from_toml(&format!("{text}{both}"));
            assert!(c.is_ok(), "{open}");
            let c = Config::from_toml(&format!("{text}allow_unauthenticated = true\n"));
            assert!(c.is_ok(), "{open}");
        }
        for local in [
            "127.0.0.1:7000",
            "127.5.5.5:7000",
            "[::1]:7000",
            "[::ffff:127.0.0.1]:7000",
        ] {
            assert!(
                Config::from_toml(&format!("listen = \"{local}\"\n")).is_ok(),
                "{local}"
            );
        }
        // A client token alone would open the control endpoint to clients.
        let e = Config::from_toml("auth_token_file = \"/etc/kvs/token\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cluster_token_file"), "{e}");
        let e = Config::from_toml(
            "auth_token_file = \"/etc/kvs/t\"\ncluster_token_file = \"/etc/kvs/t\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("two secrets"), "{e}");
        // A cluster token alone guards the control endpoint of an open store.
        assert!(Config::from_toml("cluster_token_file = \"/etc/kvs/t\"\n").is_ok());
        // Unchecked parsing leaves it to the flags and Server::start.
        assert!(Config::parse_toml("listen = \"0.0.0.0:7000\"").is_ok());
    }
}
