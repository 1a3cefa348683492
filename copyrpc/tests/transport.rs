//! A context on a transport other than the default, built with `build_on`: a
//! transport defined outside the crate (delegating to the mlx5 path and
//! counting what copyrpc asks of it) talks to a default context.

use std::cell::Cell;

use copyrpc::transport::{
    Mlx5, Objects, Owner, QueueError, RcShared, Reach, Sge, Transport, WorkCompletion,
};
use copyrpc::{CallFailed, CloseReason, Context, ContextBuilder, EndpointInfo, SetupError};
use mlx5::device::{Context as Device, Cq, ExecMode, SrqHandle};
use mlx5::sim::fabric::Fabric;

thread_local! {
    static WRITES: Cell<u64> = const { Cell::new(0) };
    static READS: Cell<u64> = const { Cell::new(0) };
    static READS_DONE: Cell<u64> = const { Cell::new(0) };
    static RECVS: Cell<u64> = const { Cell::new(0) };
}

fn bump(c: &'static std::thread::LocalKey<Cell<u64>>) {
    c.with(|c| c.set(c.get() + 1));
}

/// The associated types and functions both test transports take from the
/// mlx5 path unchanged: CQs, SRQ and QPN dispatch.
macro_rules! mlx5_queues {
    () => {
        type Cqe<'a> = <Mlx5 as Transport>::Cqe<'a>;
        type RecvCq = <Mlx5 as Transport>::RecvCq;
        type SendCq = <Mlx5 as Transport>::SendCq;
        type Shared = RcShared;

        fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError> {
            Mlx5::recv_cq(cq, srq)
        }
        fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError> {
            Mlx5::send_cq(cq)
        }
        fn shared(o: &Objects<'_>) -> Result<RcShared, SetupError> {
            Mlx5::shared(o)
        }
        fn srq_post(cq: &mut Self::RecvCq) -> bool {
            Mlx5::srq_post(cq)
        }
        fn srq_ring(cq: &mut Self::RecvCq) {
            Mlx5::srq_ring(cq)
        }
        fn recv_owner(sh: &RcShared, c: &Self::Cqe<'_>) -> Option<u32> {
            Mlx5::recv_owner(sh, c)
        }
        fn recv_from_peer(_: &Self::Sq, _: &Self::Cqe<'_>) -> bool {
            true
        }
        fn poll_send(
            cq: &mut Self::SendCq,
            sh: &mut RcShared,
            max: usize,
            f: impl FnMut(&mut RcShared, u32, &Self::Cqe<'_>),
        ) -> usize {
            Mlx5::poll_send(cq, sh, max, f)
        }
        fn send_owner(sh: &mut RcShared, reg: u32, c: &Self::Cqe<'_>) -> Option<Owner> {
            Mlx5::send_owner(sh, reg, c)
        }
        fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), copyrpc::WaitError> {
            Mlx5::arm_recv(cq)
        }
        fn arm_send(cq: &mut Self::SendCq) -> Result<(), copyrpc::WaitError> {
            Mlx5::arm_send(cq)
        }
    };
}

/// The mlx5 direct path, counted.
struct Counted;

impl Transport for Counted {
    type Sq = <Mlx5 as Transport>::Sq;
    mlx5_queues!();

    fn open(
        sh: &mut RcShared,
        send_cq: &mut Self::SendCq,
        o: &Objects<'_>,
        idx: u32,
        gen: u32,
    ) -> Result<(Self::Sq, Reach), SetupError> {
        Mlx5::open(sh, send_cq, o, idx, gen)
    }
    fn connect(sh: &mut RcShared, sq: &mut Self::Sq, r: &EndpointInfo) -> Result<(), SetupError> {
        Mlx5::connect(sh, sq, r)
    }
    fn close(sh: &mut RcShared, sq: &mut Self::Sq) {
        Mlx5::close(sh, sq)
    }
    fn remove(sh: &mut RcShared, send_cq: &mut Self::SendCq, sq: Self::Sq) {
        Mlx5::remove(sh, send_cq, sq)
    }
    fn poll_recv(
        cq: &mut Self::RecvCq,
        max: usize,
        mut f: impl FnMut(&Self::Cqe<'_>, bool),
    ) -> usize {
        Mlx5::poll_recv(cq, max, |c, took| {
            assert_eq!(c.error(), None);
            assert!(c.byte_len() >= 32 && c.byte_len() % 32 == 0);
            assert!(
                took,
                "a good receive completion uses one of the SRQ's receives"
            );
            bump(&RECVS);
            f(c, took)
        })
    }
    fn post_write_imm(
        sh: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError> {
        Mlx5::post_write_imm(sh, sq, local, raddr, rkey, imm).inspect(|()| bump(&WRITES))
    }
    fn post_read(
        sh: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError> {
        Mlx5::post_read(sh, sq, local, raddr, rkey).inspect(|()| bump(&READS))
    }
    fn ring(sh: &mut RcShared, sq: &mut Self::Sq) {
        Mlx5::ring(sh, sq)
    }
    fn sq_complete(sh: &mut RcShared, sq: Option<&mut Self::Sq>, c: &Self::Cqe<'_>) -> bool {
        let read = Mlx5::sq_complete(sh, sq, c);
        if read {
            bump(&READS_DONE);
        }
        read
    }
}

#[test]
fn counted_transport_talks_to_the_default_one() {
    let fabric = format!("rpc-{}-transport", std::process::id());
    let d0 = Device::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
    let d1 = Device::open_in_mode(&fabric, "sim1", ExecMode::Inline).unwrap();
    let b = ContextBuilder::new().ring_size(16384);
    let done = std::rc::Rc::new(Cell::new(0u64));
    let seen = done.clone();
    let mut client: Context<u64, _, Counted> = b
        .build_on(&d0, move |_: u64, r: Result<&[u8], CallFailed>| {
            assert_eq!(r.unwrap(), b"pong");
            seen.set(seen.get() + 1);
        })
        .unwrap();
    let mut server = b.build(&d1, |_: u64, _| {}).unwrap();
    let (c, ci) = client.create_endpoint().unwrap();
    let (s, si) = server.create_endpoint().unwrap();
    client.connect(c, &si).unwrap();
    server.connect(s, &ci).unwrap();

    // The server takes requests but answers none until 40 KB went through
    // the 16 KB ring: no batch of its own carries its consumer position, so
    // the client READs it.
    let count = 40;
    let mut held = Vec::new();
    let mut sent = 0;
    for _ in 0..10_000 {
        if sent == count {
            break;
        }
        if client.call(c, &[7u8; 1000], 16, sent).is_ok() {
            sent += 1;
        }
        client.poll();
        server.poll();
        while let Some(h) = server.recv() {
            held.push(h);
        }
    }
    assert_eq!(sent, count);
    for h in held {
        server.reply(h, b"pong").unwrap();
    }
    for _ in 0..10_000 {
        if done.get() == count {
            break;
        }
        client.poll();
        server.poll();
    }
    assert_eq!(done.get(), count);
    let stats = client.stats(c);
    assert_eq!(WRITES.with(Cell::get), stats.batches);
    assert_eq!(READS.with(Cell::get), stats.reads);
    assert!(RECVS.with(Cell::get) > 0);
    assert!(stats.reads > 0, "no READ fallback: {stats:?}");
    assert!(READS_DONE.with(Cell::get) > 0);
    assert!(READS_DONE.with(Cell::get) <= READS.with(Cell::get));
    assert!(client.remove(c));
    drop((client, server, d0, d1));
    Fabric::remove_if_unused(&fabric);
}

thread_local! {
    /// The QP whose work requests the device refuses.
    static REFUSE_QPN: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// The mlx5 direct path, with a device that refuses every work request of
/// one QP (as a verbs provider refuses with an errno a request it can never
/// take).
struct Refusing;

struct RefusingSq {
    inner: <Mlx5 as Transport>::Sq,
    qpn: u32,
}

impl RefusingSq {
    fn refused(&self) -> Result<(), QueueError> {
        if REFUSE_QPN.with(Cell::get) == self.qpn {
            Err(QueueError::Failed(22))
        } else {
            Ok(())
        }
    }
}

impl Transport for Refusing {
    type Sq = RefusingSq;
    mlx5_queues!();

    fn open(
        sh: &mut RcShared,
        send_cq: &mut Self::SendCq,
        o: &Objects<'_>,
        idx: u32,
        gen: u32,
    ) -> Result<(Self::Sq, Reach), SetupError> {
        let (inner, reach) = Mlx5::open(sh, send_cq, o, idx, gen)?;
        let qpn = reach.conn.qpn;
        Ok((RefusingSq { inner, qpn }, reach))
    }
    fn connect(sh: &mut RcShared, sq: &mut Self::Sq, r: &EndpointInfo) -> Result<(), SetupError> {
        Mlx5::connect(sh, &mut sq.inner, r)
    }
    fn close(sh: &mut RcShared, sq: &mut Self::Sq) {
        Mlx5::close(sh, &mut sq.inner)
    }
    fn remove(sh: &mut RcShared, send_cq: &mut Self::SendCq, sq: Self::Sq) {
        Mlx5::remove(sh, send_cq, sq.inner)
    }
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, f: impl FnMut(&Self::Cqe<'_>, bool)) -> usize {
        Mlx5::poll_recv(cq, max, f)
    }
    fn post_write_imm(
        sh: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError> {
        sq.refused()?;
        Mlx5::post_write_imm(sh, &mut sq.inner, local, raddr, rkey, imm)
    }
    fn post_read(
        sh: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError> {
        sq.refused()?;
        Mlx5::post_read(sh, &mut sq.inner, local, raddr, rkey)
    }
    fn ring(sh: &mut RcShared, sq: &mut Self::Sq) {
        Mlx5::ring(sh, &mut sq.inner)
    }
    fn sq_complete(sh: &mut RcShared, sq: Option<&mut Self::Sq>, c: &Self::Cqe<'_>) -> bool {
        Mlx5::sq_complete(sh, sq.map(|s| &mut s.inner), c)
    }
}

/// A work request the device refuses closes its endpoint with the errno, and
/// fails its calls; the other endpoints of the context carry on.
#[test]
fn a_refused_work_request_closes_only_its_endpoint() {
    let fabric = format!("rpc-{}-refused", std::process::id());
    let d0 = Device::open_in_mode(&fabric, "sim0", ExecMode::Inline).unwrap();
    let d1 = Device::open_in_mode(&fabric, "sim1", ExecMode::Inline).unwrap();
    let b = ContextBuilder::new().ring_size(4096);
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let l2 = log.clone();
    let mut client: Context<u64, _, Refusing> = b
        .build_on(&d0, move |u: u64, r: Result<&[u8], CallFailed>| {
            l2.borrow_mut().push((u, r.map(<[u8]>::to_vec)));
        })
        .unwrap();
    let mut server = b.build(&d1, |_: u64, _| {}).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let (c, ci) = client.create_endpoint().unwrap();
        let (s, si) = server.create_endpoint().unwrap();
        client.connect(c, &si).unwrap();
        server.connect(s, &ci).unwrap();
        pairs.push((c, ci.qpn));
    }
    let (bad, good) = (pairs[0].0, pairs[1].0);
    REFUSE_QPN.with(|q| q.set(pairs[0].1));
    client.call(bad, b"ping", 8, 1).unwrap();
    client.call(good, b"ping", 8, 2).unwrap();
    for _ in 0..1000 {
        if log.borrow().len() == 2 {
            break;
        }
        client.poll();
        server.poll();
        while let Some(h) = server.recv() {
            server.reply(h, b"pong").unwrap();
        }
    }
    REFUSE_QPN.with(|q| q.set(u32::MAX));
    let log = log.borrow();
    assert_eq!(log.len(), 2, "{log:?}");
    let r = |u| &log.iter().find(|(t, _)| *t == u).unwrap().1;
    assert_eq!(r(1), &Err(CallFailed(CloseReason::Refused(22))));
    assert_eq!(r(2), &Ok(b"pong".to_vec()));
    assert_eq!(client.closed(bad), Some(&CloseReason::Refused(22)));
    assert_eq!(client.closed(good), None);
    assert!(CloseReason::Refused(22)
        .to_string()
        .contains("Invalid argument"));
    drop(log);
    drop((client, server, d0, d1));
    Fabric::remove_if_unused(&fabric);
}
