//! A throwaway redis-server (Debian's `redis-server`) for the tests that
//! drive a real Redis.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{wait_until, KillOnDrop};

/// A redis-server on a free loopback port, without persistence, killed when
/// dropped.
#[derive(Debug)]
pub struct RedisServer {
    _child: KillOnDrop,
    port: u16,
}

impl RedisServer {
    /// Starts one and waits (at most 10 s) until it accepts connections;
    /// panics saying what to install when there is no `redis-server`.
    pub fn start() -> RedisServer {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("its address").port()
        };
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        let child = KillOnDrop(child);
        let up = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        let ms = Duration::from_millis(20);
        wait_until("redis-server accepting", Duration::from_secs(10), ms, up);
        RedisServer {
            _child: child,
            port,
        }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}
