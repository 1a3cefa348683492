//! A member's TCP address, as a proxy the nemesis can cut.
//!
//! A member listens on a private address and advertises the proxy's, which
//! stays its address across restarts: clients and the other members dial
//! the proxy, and the proxy forwards each connection to the member, both
//! ways, a thread per direction. (The nemesis's own observer dials the
//! private address: it watches the system, it is not part of it.)
//!
//! [`Proxy::cut`] is a partition of the member's TCP, as a network drops
//! packets, not as a host resets connections: bytes stop being forwarded
//! either way (a direction's thread keeps what it read, the kernel's buffers
//! fill, and senders block as their windows close), a FIN is held like
//! data, and a new connection is accepted (the proxy's kernel answers the
//! SYN) but not forwarded, so its setup goes unanswered. Healing resumes
//! forwarding: what was held is delivered in order and the connections go
//! on, as TCP's retransmissions deliver everything once a partition shorter
//! than their timeout (minutes; ours last seconds) heals. Nothing is reset
//! by the proxy; a side that gave up meanwhile closes its end, and the
//! proxy passes that close on once healed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long forwarding a new connection may take to reach the member.
const CONNECT: Duration = Duration::from_secs(2);

/// A TCP proxy in front of one address.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    target: SocketAddr,
    /// Whether the proxy is cut; the condvar wakes forwarders on a change.
    cut: Mutex<bool>,
    changed: Condvar,
    stop: AtomicBool,
    /// Every open connection's sockets (client side, member side), so that
    /// dropping the proxy ends them.
    conns: Mutex<HashMap<u64, Vec<TcpStream>>>,
    next: AtomicU64,
}

impl Shared {
    /// Waits until the proxy is not cut; false once it is stopping.
    fn wait_open(&self) -> bool {
        let mut cut = self.cut.lock().unwrap();
        while *cut && !self.stop.load(Ordering::Acquire) {
            cut = self.changed.wait(cut).unwrap();
        }
        !self.stop.load(Ordering::Acquire)
    }

    fn keep(&self, id: u64, s: &TcpStream) {
        if let Ok(c) = s.try_clone() {
            self.conns.lock().unwrap().entry(id).or_default().push(c);
        }
    }
}

impl Proxy {
    /// A proxy listening at `listen` (port 0: any free one) that forwards
    /// to `target` of the address it listens at.
    pub fn start(
        listen: SocketAddr,
        target: impl FnOnce(SocketAddr) -> SocketAddr,
    ) -> std::io::Result<Proxy> {
        let l = TcpListener::bind(listen)?;
        let addr = l.local_addr()?;
        let target = target(addr);
        let shared = Arc::new(Shared {
            target,
            cut: Mutex::new(false),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name(format!("proxy-{}", addr.port()))
            .spawn(move || accept(&l, &s))?;
        Ok(Proxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Where it listens: the address others dial.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts (`true`) or heals its connections (see the module docs).
    pub fn cut(&self, cut: bool) {
        *self.shared.cut.lock().unwrap() = cut;
        self.shared.changed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.changed.notify_all();
        for s in self.shared.conns.lock().unwrap().values().flatten() {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept(l: &TcpListener, sh: &Arc<Shared>) {
    for c in l.incoming() {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(client) = c else { continue };
        let id = sh.next.fetch_add(1, Ordering::Relaxed);
        sh.keep(id, &client);
        let s = sh.clone();
        let spawned = std::thread::Builder::new()
            .name("proxy-conn".into())
            .spawn(move || {
                forward(&s, id, client);
                s.conns.lock().unwrap().remove(&id);
            });
        if spawned.is_err() {
            sh.conns.lock().unwrap().remove(&id);
        }
    }
}

/// Forwards one accepted connection to the target once the proxy is not
/// cut, until both directions closed.
fn forward(sh: &Arc<Shared>, id: u64, client: TcpStream) {
    if !sh.wait_open() {
        return;
    }
    // A member that is down refuses: the client sees its connection end.
    let Ok(member) = TcpStream::connect_timeout(&sh.target, CONNECT) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = member.set_nodelay(true);
    let _ = client.set_nodelay(true);
    sh.keep(id, &member);
    let (Ok(c2), Ok(m2)) = (client.try_clone(), member.try_clone()) else {
        return;
    };
    let s = sh.clone();
    let back = std::thread::Builder::new()
        .name("proxy-back".into())
        .spawn(move || pump(&s, m2, c2));
    pump(sh, client, member);
    if let Ok(b) = back {
        let _ = b.join();
    }
}

/// Copies `from` to `to` while the proxy is not cut (holding what it read
/// while it is); passes an end of stream on as one, and ends both on an
/// error.
fn pump(sh: &Shared, mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => {
                if sh.wait_open() {
                    let _ = to.shutdown(Shutdown::Write);
                }
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A reset crosses no better than data.
            Err(_) => {
                sh.wait_open();
                break;
            }
        };
        if !sh.wait_open() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
