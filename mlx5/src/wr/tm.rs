//! Tag matching at the work-request level: a [`Domain`]'s TM-SRQs, their
//! tag lists (as `ibv_post_srq_ops` changes them), and the poll of their CQ.
//! Direct path only: the verbs path has no tag matching here (soft-RoCE,
//! the device it exists for, has none).

use super::{CqId, Domain, Path, PostError, SrqId, Wc};
use crate::device::DeviceError;
use crate::sq::Sge;
use crate::tm::{TagHandle, TmError, TmEvent};
use crate::types::TmSrqAttr;

/// A TM-SRQ of a [`Domain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmId(usize);

/// What the poll of a TM-SRQ's CQ yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmWc {
    /// A tag-matching completion. For a message that landed in an SRQ WQE
    /// (`Unexpected`, `NoTag`), that WQE's `wr_id`. The events carry as
    /// their data the `wr_id` given to [`Domain::tm_add`].
    Tm {
        /// What happened.
        event: TmEvent<u64>,
        /// The SRQ WQE's `wr_id`, if the message landed in one.
        srq_wr_id: Option<u64>,
    },
    /// Another completion of the CQ (a send's, or an error).
    Wc(Wc),
}

/// The verbs path refused a tag-matching call.
fn no_tm() -> DeviceError {
    DeviceError::Invalid("tag matching takes the direct (mlx5) data path".into())
}

impl Domain {
    /// Creates a TM-SRQ ([`crate::device::Context::create_tm_srq`]) whose
    /// completions go to `cq`. Returns it and its SRQ: create the receiving
    /// QPs on that, and post its unexpected-message buffers there.
    pub fn create_tm_srq(
        &mut self,
        cq: CqId,
        attr: &TmSrqAttr,
    ) -> Result<(TmId, SrqId), DeviceError> {
        let Path::Direct(q) = &mut self.path else {
            return Err(no_tm());
        };
        let c = q
            .cq(cq.0)
            .ok_or_else(|| DeviceError::Invalid("no such CQ in this domain".into()))?;
        let h = self.ctx.create_tm_srq(&self.pd, &c, attr)?;
        let (tm, srq) = q.add_tm(h, cq.0)?;
        Ok((TmId(tm), SrqId(srq)))
    }

    fn tm_list(&mut self, tm: TmId) -> Result<&mut crate::tm::TmSrq<u64>, PostError> {
        match &mut self.path {
            Path::Direct(q) => q.tm(tm.0).ok_or(PostError::NoSuch("TM-SRQ")),
            Path::Verbs(_) => Err(PostError::Device(no_tm())),
        }
    }

    /// Appends `tag` under `mask` with buffer `buf` (`IBV_WR_TAG_ADD`);
    /// matching messages report `wr_id`.
    pub fn tm_add(
        &mut self,
        tm: TmId,
        (tag, mask): (u64, u64),
        buf: &[Sge],
        wr_id: u64,
    ) -> Result<TagHandle, PostError> {
        let t = self.tm_list(tm)?;
        let h = t.add(tag, mask, buf, wr_id).map_err(tm_err)?;
        t.ring_doorbell();
        Ok(h)
    }

    /// Takes `tag` back (`IBV_WR_TAG_DEL`).
    pub fn tm_remove(&mut self, tm: TmId, tag: TagHandle) -> Result<(), PostError> {
        let t = self.tm_list(tm)?;
        t.remove(tag).map_err(tm_err)?;
        t.ring_doorbell();
        Ok(())
    }

    /// Reports `unexpected` unexpected messages handled (`IBV_WR_TAG_SYNC`).
    pub fn tm_sync(&mut self, tm: TmId, unexpected: u16, signaled: bool) -> Result<(), PostError> {
        let t = self.tm_list(tm)?;
        t.sync(unexpected, signaled).map_err(tm_err)?;
        t.ring_doorbell();
        Ok(())
    }

    /// Unexpected messages TM-SRQ `tm` has reported so far.
    pub fn tm_unexpected_seen(&mut self, tm: TmId) -> Result<u16, PostError> {
        Ok(self.tm_list(tm)?.unexpected_seen())
    }

    /// Polls up to `max` completions of TM-SRQ `tm`'s CQ onto `out`;
    /// returns how many.
    pub fn poll_tm(
        &mut self,
        tm: TmId,
        max: usize,
        out: &mut Vec<TmWc>,
    ) -> Result<usize, PostError> {
        let before = out.len();
        match &mut self.path {
            Path::Direct(q) => q.poll_tm(tm.0, max, &self.by_qpn, out)?,
            Path::Verbs(_) => return Err(PostError::Device(no_tm())),
        }
        Ok(out.len() - before)
    }
}

/// A list error as a post error: a full queue or list is `Full` (poll and
/// retry), the rest are the caller's mistakes.
fn tm_err(e: TmError) -> PostError {
    match e {
        TmError::ListFull { .. } | TmError::Queue(crate::sq::SqError::Full) => PostError::Full,
        e => PostError::Invalid(e.to_string()),
    }
}
