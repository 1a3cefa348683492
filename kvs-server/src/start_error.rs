//! Why the server could not start ([`StartError`]): the error of
//! [`Server::start`](crate::Server::start), also returned by the threads it
//! starts (the workers, the control thread) and by the member's start in
//! the cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

use copyrpc::conn::ConnError;
use kvs_proto::TokenError;

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkerFailure {
    /// Its device would not open, or not on the transport configured.
    #[error(transparent)]
    Device(#[from] mlx5::device::DeviceError),
    /// Its copyrpc context could not be built.
    #[error(transparent)]
    Context(#[from] copyrpc::SetupError),
    /// Its clients' liveness channels cannot be watched (epoll).
    #[error("cannot watch connections: {0}")]
    Watch(std::io::Error),
    /// Its records' log cannot be read (damage names the file and byte).
    #[error("its records' log: {0}")]
    Log(#[from] kvs_wal::WalError),
    /// Its thread ended before it said it was ready.
    #[error("the worker thread ended before it was ready")]
    Ended,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is not usable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The listening socket.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: ConnError,
    },
    /// A token file: unreadable, open to others, or too short.
    #[error("{key}: {source}")]
    Token {
        /// The config key naming the file.
        key: &'static str,
        /// Why.
        source: TokenError,
    },
    /// The client token and the cluster token are the same.
    #[error(
        "auth_token_file and cluster_token_file hold the same token: the roles need two \
         secrets (make one with: openssl rand -hex 32)"
    )]
    SameTokens,
    /// The metrics endpoint's socket.
    #[error("metrics_listen {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A worker could not open the device, build its context, or read
    /// its records' log.
    #[error("worker {worker}: {why}")]
    Worker {
        /// Which worker.
        worker: u16,
        /// Why.
        why: WorkerFailure,
    },
    /// The control thread could not open the device or build its context.
    #[error("control endpoint: {0}")]
    Control(String),
    /// The data dir holds no member, and neither `bootstrap` nor `join`
    /// says whether to start a cluster or join one. It may be the data dir
    /// of a member that was lost: bootstrapping it by default would put a
    /// second, empty cluster at that member's address.
    #[error(
        "{} holds no member, and neither --bootstrap nor --join says what to do with it. \
         To start a new cluster with this server as its first member, start it once with \
         --bootstrap (bootstrap = true) and leave that out of later starts. To add it to a \
         cluster, start it with --join HOST:PORT of any member (join = \"HOST:PORT\"). If this \
         server was a member of a cluster, its data dir was lost and it cannot come back as \
         itself: free its old id with kvs-admin forget, then start it with --join ADDR of a \
         live member, as a new member (--bootstrap would found a second, empty cluster)",
        .dir.display()
    )]
    NoMember {
        /// The data dir.
        dir: PathBuf,
    },
    /// Starting the member's part in the cluster failed: its data dir, or
    /// joining.
    #[error("{0}")]
    Join(String),
    /// The bulk port for migrations.
    #[error("{0}")]
    Bulk(String),
}
