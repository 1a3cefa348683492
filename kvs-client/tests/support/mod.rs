//! In-process clusters of kvs-servers, and the kvs-client binary run
//! against them as a child process.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use kvs_client::ControlClient;
use kvs_proto::control::{ControlReply, ControlRequest};
use kvs_server::{Config, Server};

/// Servers of one cluster on a fabric of the test's own (device `sim1`,
/// loopback ports of their own, 256 slots, two workers each); kvs-client
/// runs on device `sim0` of the same fabric.
pub struct Cluster {
    pub fabric: String,
    pub servers: Vec<Server>,
}

impl Cluster {
    /// `members` servers: the first starts the cluster, the others join it
    /// through the first; returns once every member serves the same map,
    /// one that includes them all.
    pub fn start(tag: &str, members: usize) -> Cluster {
        Cluster::start_with(tag, members, 1)
    }

    /// [`start`](Self::start) keeping `replicas` copies of each slot;
    /// returns once every slot has them.
    pub fn start_with(tag: &str, members: usize, replicas: u8) -> Cluster {
        let fabric = format!("kvs-client-{tag}-{}", std::process::id());
        let config = |join: Option<SocketAddr>| Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            device: "sim1".into(),
            fabric: Some(fabric.clone()),
            workers: 2,
            slots: 256,
            max_value: 2048,
            stats_interval_s: 0,
            join: join.map(|a| a.to_string()),
            replicas,
            ..Config::default()
        };
        let first = Server::start(config(None)).expect("start the first server");
        let join = first.addr();
        let mut servers = vec![first];
        for _ in 1..members {
            servers.push(Server::start(config(Some(join))).expect("join"));
        }
        let version = members as u32;
        test_support::wait_until(
            "every member serves a map with them all",
            Duration::from_secs(30),
            Duration::from_millis(10),
            || {
                let v = servers[0].map_version();
                v >= version && servers.iter().all(|x| x.map_version() == v)
            },
        );
        let c = Cluster { fabric, servers };
        if replicas > 1 {
            let mut cc: ControlClient =
                ControlClient::new(&c.device(), Default::default()).unwrap();
            test_support::wait_until(
                "every slot has its copies",
                Duration::from_secs(30),
                Duration::from_millis(10),
                || match cc.request(c.addr(0), &ControlRequest::Status) {
                    Ok(ControlReply::Status(s)) => {
                        s.group.is_some_and(|g| g.under_replicated_slots == 0)
                    }
                    _ => false,
                },
            );
        }
        c
    }

    /// Device `sim0` of the cluster's fabric.
    pub fn device(&self) -> mlx5::device::Context {
        copyrpc::transport::DeviceSpec {
            name: "sim0",
            fabric: Some(&self.fabric),
            software: "sim0",
        }
        .open()
        .expect("open sim0")
    }

    /// The address of member `i`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.servers[i].addr()
    }

    /// The kvs-client command against member 0, with `args` after the
    /// global ones.
    pub fn client_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kvs-client"));
        c.args([
            "--server",
            &self.addr(0).to_string(),
            "--device",
            "sim0",
            "--fabric",
            &self.fabric,
        ]);
        c.args(args);
        c
    }
}

impl Drop for Cluster {
    /// Stops the servers, then removes the cluster's fabric from
    /// `/dev/shm` (nothing else uses it).
    fn drop(&mut self) {
        for s in self.servers.drain(..).rev() {
            s.shutdown();
        }
        drop(test_support::FabricGuard(self.fabric.clone()));
    }
}
