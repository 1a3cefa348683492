//! The mlx5 direct data path: WQEs written into the send queue's memory, CQEs
//! read from CQ memory, on the software device and on ConnectX NICs alike.

use mlx5::cq::{Completion as Cqe, DispatchCq, MonoCq};
use mlx5::device::{Cq, SrqHandle};
use mlx5::rq::Srq;
use mlx5::sq::{Payload, SendQueue, Sge, SqConfig};
use mlx5::wqe_table::{OrderedRecv, OrderedSparse};

use super::rc::{self, RcShared, RcSq, SIGNAL_INTERVAL};
use super::{Objects, Owner, QueueError, Reach, Transport, WorkCompletion};
use crate::error::{SetupError, WaitError};
use crate::info::EndpointInfo;

/// The mlx5 direct data path (the default transport of a
/// [`Context`](crate::Context)).
///
/// Send queues keep an ordered, sparse WQE table (only signaled WQEs carry
/// data: `true` for a READ); the SRQ's receives are zero-length and carry
/// nothing; the send CQ dispatches by QPN through a direct-indexed table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mlx5;

impl WorkCompletion for Cqe<'_> {
    #[inline(always)]
    fn qpn(&self) -> u32 {
        Cqe::qpn(self)
    }
    #[inline(always)]
    fn byte_len(&self) -> u32 {
        Cqe::byte_cnt(self)
    }
    #[inline(always)]
    fn error(&self) -> Option<u32> {
        Cqe::syndrome_raw(self).map(u32::from)
    }
}

impl Transport for Mlx5 {
    type Cqe<'a> = Cqe<'a>;
    type Sq = RcSq<SendQueue<OrderedSparse<bool>>>;
    /// The receive CQ is a [`MonoCq`] with the SRQ as its one source: no
    /// QPN lookup to find the queue a receive completion retires.
    type RecvCq = MonoCq<Srq<OrderedRecv<()>>, ()>;
    type SendCq = DispatchCq<u32>;
    type Shared = RcShared;

    #[inline]
    fn recv_cq(cq: &Cq, srq: &SrqHandle) -> Result<Self::RecvCq, SetupError> {
        Ok(MonoCq::new(cq.ring()?, srq.srq::<OrderedRecv<()>>()?, ()))
    }

    #[inline]
    fn send_cq(cq: &Cq) -> Result<Self::SendCq, SetupError> {
        Ok(DispatchCq::new(cq.ring()?))
    }

    fn shared(_: &Objects<'_>) -> Result<RcShared, SetupError> {
        Ok(RcShared::default())
    }

    fn open(
        sh: &mut RcShared,
        send_cq: &mut Self::SendCq,
        o: &Objects<'_>,
        idx: u32,
        _gen: u32,
    ) -> Result<(Self::Sq, Reach), SetupError> {
        let signal_interval = SIGNAL_INTERVAL as u16;
        let (sq, reach) = rc::open(sh, o, idx, |qp| {
            Ok(qp.send_queue(SqConfig {
                signal_interval,
                max_inline: 0,
                ..SqConfig::default()
            })?)
        })?;
        send_cq.register(reach.conn.qpn, idx);
        Ok((sq, reach))
    }

    fn connect(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        remote: &EndpointInfo,
    ) -> Result<(), SetupError> {
        rc::connect(sq, remote)
    }

    fn close(_: &mut RcShared, sq: &mut Self::Sq) {
        rc::close(sq);
    }

    fn remove(sh: &mut RcShared, send_cq: &mut Self::SendCq, sq: Self::Sq) {
        let qpn = rc::remove(sh, sq);
        send_cq.unregister(qpn);
    }

    #[inline(always)]
    fn srq_post(cq: &mut Self::RecvCq) -> bool {
        cq.source_mut().post(&[], ()).is_ok()
    }

    #[inline(always)]
    fn srq_ring(cq: &mut Self::RecvCq) {
        cq.source_mut().ring_doorbell();
    }

    /// An error CQE is not taken from the SRQ's table.
    #[inline(always)]
    fn poll_recv(cq: &mut Self::RecvCq, max: usize, mut f: impl FnMut(&Cqe<'_>, bool)) -> usize {
        cq.poll_with(max, |srq, c| {
            let took = !c.is_error() && srq.take(c).is_some();
            f(c, took)
        })
    }

    #[inline(always)]
    fn recv_owner(sh: &RcShared, c: &Cqe<'_>) -> Option<u32> {
        sh.slot(c.qpn())
    }

    #[inline(always)]
    fn recv_from_peer(_: &Self::Sq, _: &Cqe<'_>) -> bool {
        true
    }

    #[inline(always)]
    fn poll_send(
        cq: &mut Self::SendCq,
        sh: &mut RcShared,
        max: usize,
        mut f: impl FnMut(&mut RcShared, u32, &Cqe<'_>),
    ) -> usize {
        cq.poll(max, |&mut i, c| f(sh, i, c))
    }

    #[inline(always)]
    fn send_owner(_: &mut RcShared, reg: u32, _: &Cqe<'_>) -> Option<Owner> {
        Some(Owner {
            idx: reg,
            gen: None,
        })
    }

    #[inline]
    fn arm_recv(cq: &mut Self::RecvCq) -> Result<(), WaitError> {
        Ok(cq.arm(false)?)
    }

    #[inline]
    fn arm_send(cq: &mut Self::SendCq) -> Result<(), WaitError> {
        Ok(cq.ring_mut().arm(false)?)
    }

    #[inline(always)]
    fn post_write_imm(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
        imm: u32,
    ) -> Result<(), QueueError> {
        match sq.q.write_imm(raddr, rkey, imm, Payload::Sges(&[local])) {
            Ok(b) => {
                b.post(None);
                Ok(())
            }
            // One SGE and no inline data: the only error is a full queue.
            Err(_) => Err(QueueError::Full),
        }
    }

    #[inline(always)]
    fn post_read(
        _: &mut RcShared,
        sq: &mut Self::Sq,
        local: Sge,
        raddr: u64,
        rkey: u32,
    ) -> Result<(), QueueError> {
        match sq.q.read(raddr, rkey, &[local]) {
            Ok(b) => {
                b.signaled().post(Some(true));
                Ok(())
            }
            // One SGE and no inline data: the only error is a full queue.
            Err(_) => Err(QueueError::Full),
        }
    }

    #[inline(always)]
    fn ring(_: &mut RcShared, sq: &mut Self::Sq) {
        sq.q.ring_doorbell();
    }

    #[inline(always)]
    fn sq_complete(_: &mut RcShared, sq: Option<&mut Self::Sq>, c: &Cqe<'_>) -> bool {
        let mut read = false;
        if let Some(sq) = sq {
            sq.q.complete(c, |is_read, _| read |= is_read);
        }
        read
    }
}
