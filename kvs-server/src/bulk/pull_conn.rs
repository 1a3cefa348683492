//! A target's bulk connection to a source's bulk port, kept across the
//! pulls of an import session ([`crate::migration::session`]): its
//! buffers, the receives posted into them, and the setups sent over it.

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use mlx5::device::Context as Device;
use mpib::{Buffer, Comm, Request};

use super::wire::PullSetup;
use super::TransferError;
use super::BATCH;
use super::{idle, DEPTH};

/// How long a source keeps an idle bulk connection for the next pull's
/// setup. Chunks follow each other within milliseconds; a longer pause
/// means the migration is over or stalled, and a new connection is cheap
/// beside that.
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// Bytes of a setup sent over a kept connection, at most.
pub(crate) const SETUP_BYTES: usize = 64;

/// A target's bulk connection to a source's bulk port, kept across the
/// pulls of a session. Batches are numbered over the connection's life:
/// a pull's first batch follows the previous pull's last, and [`DEPTH`]
/// receives stay posted between pulls, for the next ones.
pub(crate) struct PullConn {
    pub comm: Comm,
    /// The source's bulk port.
    pub to: SocketAddr,
    /// The rails (bit i: rail i).
    pub mask: u8,
    pub bufs: Vec<Buffer>,
    /// The posted receive of each buffer: buffer `seq % DEPTH` takes batch
    /// `seq`.
    pub reqs: Vec<Request>,
    /// The number of the next batch.
    pub seq: u32,
    /// The setups sent over the connection (the first pull's setup went
    /// with the connection request, and is not counted); a setup's tag is
    /// its number.
    setups: u32,
    setup_buf: Buffer,
}

impl PullConn {
    /// A new connection to `to` on `rails` (selected by `mask`), asking for
    /// `setup`'s pull, with its first receives posted.
    pub fn open(
        to: SocketAddr,
        rails: &[Device],
        mask: u8,
        setup: &PullSetup,
        stop: &AtomicBool,
    ) -> Result<PullConn, TransferError> {
        let (mut comm, _) =
            mpib::conn::connect_with(to, rails, &mpib::Config::default(), &setup.encode())
                .map_err(|source| TransferError::Connect { to, source })?;
        let bufs = (0..DEPTH)
            .map(|_| comm.alloc_buffer(BATCH))
            .collect::<Result<Vec<_>, _>>()?;
        let setup_buf = comm.alloc_buffer(SETUP_BYTES)?;
        let mut reqs = Vec::with_capacity(DEPTH);
        for (i, b) in bufs.iter().enumerate() {
            reqs.push(post_recv(&mut comm, b, i as u32, stop)?);
        }
        Ok(PullConn {
            comm,
            to,
            mask,
            bufs,
            reqs,
            seq: 0,
            setups: 0,
            setup_buf,
        })
    }

    /// Asks for `setup`'s pull over the connection: sends the setup once
    /// the source waits for it. An error if the source closed the
    /// connection (it waited [`LINGER`] in vain) or it failed.
    pub fn ask(&mut self, setup: &PullSetup, stop: &AtomicBool) -> Result<(), TransferError> {
        let bytes = setup.encode();
        self.setup_buf.write(0, &bytes)?;
        let span = self.setup_buf.span(0, bytes.len() as u64)?;
        let t = Instant::now();
        let req = loop {
            match self.comm.isend(&[span], self.setups) {
                Ok(Some(r)) => break r,
                Ok(None) if t.elapsed() < LINGER => idle(&mut self.comm, t, stop)?,
                Ok(None) => return Err(TransferError::SetupNotTaken),
                Err(e) => return Err(e.into()),
            }
        };
        self.setups += 1;
        // The buffer is written again by the next setup: wait for this one.
        let t = Instant::now();
        loop {
            match self.comm.test(&req) {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => idle(&mut self.comm, t, stop)?,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Posts the receive of batch `seq` into `buf`.
pub(crate) fn post_recv(
    comm: &mut Comm,
    buf: &Buffer,
    seq: u32,
    stop: &AtomicBool,
) -> Result<Request, TransferError> {
    let t = Instant::now();
    loop {
        match comm.irecv(&[buf.all()], seq) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits for a receive; its size.
pub(crate) fn wait_recv(
    comm: &mut Comm,
    req: &Request,
    stop: &AtomicBool,
) -> Result<usize, TransferError> {
    let t = Instant::now();
    loop {
        match comm.test(req) {
            Ok(Some(sizes)) => return Ok(sizes.total() as usize),
            Ok(None) => super::idle(comm, t, stop)?,
            Err(e) => return Err(e.into()),
        }
    }
}
