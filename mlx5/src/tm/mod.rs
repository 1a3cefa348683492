//! Tag matching on the data path: software's side of a tag-matching SRQ
//! ([`TmSrq`]). It posts the list commands on the SRQ's command QP, and
//! turns the CQEs of the SRQ's CQ (the commands', and the received
//! messages') into [`TmEvent`]s.
//!
//! Call order, for the thread that owns the SRQ's CQ:
//! 1. [`TmSrq::add`] appends a tag with its buffer, [`TmSrq::remove`] takes
//!    one back, [`TmSrq::sync`] reports the unexpected messages handled;
//!    each posts one command WQE. [`TmSrq::ring_doorbell`] hands them to the
//!    NIC. Buffers for unexpected messages are posted to the SRQ itself
//!    (`rq::Srq`, an unordered table), as for any SRQ.
//! 2. Each CQE polled from the SRQ's CQ that [`is_tm_cqe`] accepts goes to
//!    [`TmSrq::complete`]:
//!    - a command's CQE retires the oldest command waiting for one (the NIC
//!      executes commands in order and does not name them): `Added`,
//!      `Removed`, `Synced`;
//!    - a matched message's CQE names its tag: `Matched`, whose last CQE
//!      frees the tag's entry and hands back what `add` attached;
//!    - a message that landed in an SRQ WQE: `Unexpected` or `NoTag`; the
//!      caller retires that WQE from the SRQ's table with the same CQE.
//!
//! Error CQEs are not tag matching's: the caller handles them as for any
//! queue.
//!
//! Every command asks for its CQE except a [`sync`](TmSrq::sync) posted
//! with `signaled = false`; an unsignaled command keeps its send-queue
//! space until a later command's CQE.
//!
//! A tag's entry in the list is free again once the CQEs it waits for have
//! come (see `list`): its APPEND's, its REMOVE's, and the last CQE of the
//! message that took it.

mod list;

pub use list::TagHandle;

use crate::cq::Completion;
use crate::prm::{CqeOpcode, TmAppOp, TmCmd};
use crate::sq::{SendQueue, Sge, SqError};
use crate::wqe_table::CommandFifo;
use list::TagList;

/// A command waiting for its CQE, as the command queue's table keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmOp(Op);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Append(TagHandle),
    Remove(TagHandle),
    Sync,
}

/// The send queue of a TM-SRQ's command QP, as [`TmSrq`] uses it.
pub type CommandQueue = SendQueue<CommandFifo<TmOp>>;

/// What a CQE of a TM-SRQ's CQ reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmEvent<U> {
    /// The NIC has appended `tag`.
    Added {
        /// The tag.
        tag: TagHandle,
        /// The NIC's unexpected count differs from the one software had
        /// reported when it appended the tag: messages have gone
        /// unexpected since, and the tag will not match until a
        /// [`sync`](TmSrq::sync) reports them handled
        /// (`IBV_WC_TM_SYNC_REQ`).
        sync_req: bool,
    },
    /// A REMOVE of `tag` has completed.
    Removed {
        /// The tag.
        tag: TagHandle,
        /// The NIC took the tag out of its list. False: a message had
        /// consumed it first (`IBV_WC_TM_ERR`), and that message's CQEs
        /// report it.
        removed: bool,
        /// What [`add`](TmSrq::add) attached, once the entry is free.
        data: Option<U>,
        /// As in [`TmEvent::Added`].
        sync_req: bool,
    },
    /// A signaled [`sync`](TmSrq::sync) has completed.
    Synced,
    /// A completion of a message that matched `tag`: one CQE for a message
    /// the NIC takes in at once, two for a longer message or a rendezvous
    /// (the match, then the data).
    Matched {
        /// The tag.
        tag: TagHandle,
        /// The message's header, on the CQE that reports the match
        /// (`IBV_WC_TM_MATCH`).
        info: Option<TagInfo>,
        /// Bytes of the message, on the CQE that reports the data in the
        /// buffer (`IBV_WC_TM_DATA_VALID`): the payload of an eager
        /// message, the length read for a rendezvous, the request's own
        /// length when software must complete the rendezvous.
        len: Option<u32>,
        /// `len` exceeds the buffer: what did not fit was dropped.
        truncated: bool,
        /// Software must complete a rendezvous: the request (header,
        /// `Rvh`, any data) is in the buffer as far as it fits
        /// (`IBV_WC_TM_RNDV_INCOMPLETE`).
        rndv_incomplete: bool,
        /// The immediate of a SEND with immediate.
        imm: Option<u32>,
        /// What [`add`](TmSrq::add) attached, on the tag's last CQE (the
        /// entry is free again); `None` before it, or while a REMOVE of the
        /// tag waits for its CQE (which hands it back then).
        data: Option<U>,
    },
    /// A tagged message that matched no tag landed, header and all, in SRQ
    /// WQE `wqe` (retire it from the SRQ's table). Count it as handled with
    /// [`sync`](TmSrq::sync) once it is matched in software: until then
    /// tags appended later do not match.
    Unexpected {
        /// The SRQ WQE.
        wqe: u16,
        /// Bytes of the message, header included.
        len: u32,
        /// The immediate of a SEND with immediate.
        imm: Option<u32>,
        /// Unexpected messages not yet reported handled are close to what
        /// the NIC's 16-bit count tells apart: sync now
        /// (`IBV_WC_TM_SYNC_REQ`).
        sync_req: bool,
    },
    /// A message without a tag (NO_TAG, or a rendezvous FIN) landed, header
    /// and all, in SRQ WQE `wqe`.
    NoTag {
        /// The SRQ WQE.
        wqe: u16,
        /// Bytes of the message, header included.
        len: u32,
        /// The immediate of a SEND with immediate.
        imm: Option<u32>,
    },
}

/// A matched message's tag-matching header, as the CQE reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagInfo {
    /// The message's tag.
    pub tag: u64,
    /// The sender's application context (`app_ctx`).
    pub app_ctx: u32,
}

/// Unexpected messages software may leave unreported before the NIC's
/// count could be mistaken (rdma-core's `MLX5_TM_MAX_SYNC_DIFF`).
const MAX_SYNC_DIFF: u16 = 0x3fff;

/// Errors of [`TmSrq`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TmError {
    /// Every entry of the tag list is in use (rdma-core's `ENOMEM`, "tag
    /// matching list is full").
    #[error("tag list full: {max} tags in use")]
    ListFull {
        /// The list's size in tags.
        max: u16,
    },
    /// The tag is not in the list, or a REMOVE of it is already posted.
    #[error("tag {0:?} is not in the list")]
    NotInList(TagHandle),
    /// A tagged buffer of more than one SGE (a ConnectX takes one).
    #[error("a tagged buffer takes one SGE, not {0}")]
    TooManySges(usize),
    /// The command queue has no room: poll the SRQ's CQ.
    #[error("command queue: {0}")]
    Queue(#[from] SqError),
    /// A list command's CQE came that no command waits for, or of another
    /// kind than the oldest command waiting.
    #[error("a list CQE ({got:?}) that no command waits for (oldest: {want:?})")]
    Unexpected {
        /// The CQE's operation.
        got: Option<TmAppOp>,
        /// The oldest command waiting.
        want: Option<TmOp>,
    },
}

/// Whether `c` is the CQE of a tag-list command (APPEND, REMOVE, NOP).
pub fn is_list_cqe(c: &Completion<'_>) -> bool {
    !c.is_error() && c.cqe().tm_op().is_some_and(TmAppOp::is_list_op)
}

/// Whether `c` comes from tag matching: a list command's or a received
/// message's CQE, which [`TmSrq::complete`] takes. Error CQEs do not.
pub fn is_tm_cqe(c: &Completion<'_>) -> bool {
    !c.is_error() && c.cqe().tm_op().is_some()
}

/// Software's side of a tag-matching SRQ's tag list (see the module notes
/// for the call order). `U` is what each tag carries for its owner.
#[derive(Debug)]
pub struct TmSrq<U> {
    cmd: CommandQueue,
    list: TagList<U>,
    max_tags: u16,
    /// The unexpected count software last reported.
    unexp_out: u16,
    /// Unexpected messages seen.
    unexp_in: u16,
}

impl<U> TmSrq<U> {
    /// Tag list bookkeeping for a TM-SRQ created with `max_tags` tags, on
    /// the send queue of its command QP.
    pub fn new(cmd: CommandQueue, max_tags: u16) -> Self {
        TmSrq {
            cmd,
            list: TagList::new(max_tags),
            max_tags,
            unexp_out: 0,
            unexp_in: 0,
        }
    }

    /// Appends `tag` under `mask` (the tag bits a message's tag must match;
    /// the others are cleared from `tag`) with the buffer a matching
    /// message lands in (`None`: none), carrying `data`.
    pub fn add(&mut self, tag: u64, mask: u64, buf: &[Sge], data: U) -> Result<TagHandle, TmError> {
        if buf.len() > 1 {
            return Err(TmError::TooManySges(buf.len()));
        }
        let (h, next) = self
            .list
            .next_append()
            .ok_or(TmError::ListFull { max: self.max_tags })?;
        let cmd = TmCmd::append(next, tag & mask, mask).signaled();
        self.cmd
            .tm_command(&cmd, buf.first())?
            .post(Some(TmOp(Op::Append(h))));
        let cap = buf.first().map_or(0, |b| b.len);
        let got = self.list.appended(data, cap, self.unexp_out, true);
        debug_assert_eq!(got, h);
        Ok(got)
    }

    /// Takes `tag` back. Its [`TmEvent::Removed`] says whether a message
    /// consumed it first.
    pub fn remove(&mut self, tag: TagHandle) -> Result<(), TmError> {
        // Checked before the WQE is built: building may pad the ring.
        if !self.list.removable(tag) {
            return Err(TmError::NotInList(tag));
        }
        let cmd = TmCmd::remove(tag.index()).signaled();
        self.cmd
            .tm_command(&cmd, None)?
            .post(Some(TmOp(Op::Remove(tag))));
        self.list.removing(tag, true);
        Ok(())
    }

    /// Reports `unexpected` unexpected messages handled (the count of
    /// unexpected-message CQEs software has dealt with, wrapping at 16
    /// bits). With `signaled` a [`TmEvent::Synced`] follows.
    pub fn sync(&mut self, unexpected: u16, signaled: bool) -> Result<(), TmError> {
        let cmd = TmCmd::nop().sync(unexpected);
        let cmd = if signaled { cmd.signaled() } else { cmd };
        self.cmd
            .tm_command(&cmd, None)?
            .post(signaled.then_some(TmOp(Op::Sync)));
        self.unexp_out = unexpected;
        Ok(())
    }

    /// Hands the commands posted so far to the NIC.
    pub fn ring_doorbell(&mut self) {
        self.cmd.ring_doorbell();
    }

    /// Tags in the list (appended, and not yet free again).
    pub fn tags_in_use(&self) -> usize {
        self.list.used()
    }

    /// Unexpected messages completed so far (wrapping at 16 bits): the
    /// count to [`sync`](Self::sync) once software has dealt with them.
    pub fn unexpected_seen(&self) -> u16 {
        self.unexp_in
    }

    /// What tag-matching CQE `c` (see [`is_tm_cqe`]) reports: a list
    /// command's completion (retiring the oldest command waiting for one)
    /// or a received message's.
    pub fn complete(&mut self, c: &Completion<'_>) -> Result<TmEvent<U>, TmError> {
        match c.cqe().tm_op() {
            Some(op) if op.is_list_op() => self.complete_command(c),
            Some(op) => self.complete_message(c, op),
            None => Err(TmError::Unexpected {
                got: None,
                want: None,
            }),
        }
    }

    /// A received message's CQE.
    fn complete_message(&mut self, c: &Completion<'_>, op: TmAppOp) -> Result<TmEvent<U>, TmError> {
        let cqe = c.cqe();
        let imm = (cqe.opcode() == Some(CqeOpcode::RespSendImm)).then(|| cqe.imm_inval_pkey());
        let len = cqe.byte_cnt();
        if op.uses_srq_wqe() {
            let wqe = cqe.wqe_counter();
            if op == TmAppOp::NoTag {
                return Ok(TmEvent::NoTag { wqe, len, imm });
            }
            self.unexp_in = self.unexp_in.wrapping_add(1);
            let sync_req = self.unexp_in.wrapping_sub(self.unexp_out) > MAX_SYNC_DIFF;
            return Ok(TmEvent::Unexpected {
                wqe,
                len,
                imm,
                sync_req,
            });
        }
        let tag = TagHandle(cqe.app_info());
        if !self.list.in_use(tag) {
            // rdma-core: "got idx which wasn't added".
            return Err(TmError::Unexpected {
                got: Some(op),
                want: None,
            });
        }
        let info = op.is_match().then(|| TagInfo {
            tag: cqe.tmh().tag(),
            app_ctx: cqe.tmh().app_ctx(),
        });
        let len = op.is_data_valid().then_some(len);
        let truncated = len.is_some_and(|n| n > self.list.cap(tag)) && !op.is_rndv_incomplete();
        let data = if op.ends_tag() {
            self.list.release(tag)
        } else {
            None
        };
        Ok(TmEvent::Matched {
            tag,
            info,
            len,
            truncated,
            rndv_incomplete: op.is_rndv_incomplete(),
            imm,
            data,
        })
    }

    /// A list command's CQE: retires the oldest command waiting for one.
    fn complete_command(&mut self, c: &Completion<'_>) -> Result<TmEvent<U>, TmError> {
        let cqe = c.cqe();
        let got = cqe.tm_op();
        let mut op = None;
        self.cmd.complete(c, |o, _| op = Some(o));
        let unexpected = TmError::Unexpected { got, want: op };
        let (Some(TmOp(op)), Some(got)) = (op, got) else {
            return Err(unexpected);
        };
        let sync_req = |list: &TagList<U>, h| cqe.tm_hw_phase_cnt() != list.phase(h);
        match (op, got) {
            (Op::Append(tag), TmAppOp::Append) => {
                let sync_req = sync_req(&self.list, tag);
                // An append's CQE comes before anything can free its entry.
                self.list.release(tag);
                Ok(TmEvent::Added { tag, sync_req })
            }
            (Op::Remove(tag), TmAppOp::Remove) => {
                let sync_req = sync_req(&self.list, tag);
                let removed = cqe.tm_succeeded();
                let mut data = self.list.release(tag);
                if removed {
                    // The tag's consumption: the REMOVE took it back.
                    data = self.list.release(tag);
                }
                Ok(TmEvent::Removed {
                    tag,
                    removed,
                    data,
                    sync_req,
                })
            }
            (Op::Sync, TmAppOp::Noop) => Ok(TmEvent::Synced),
            _ => Err(unexpected),
        }
    }
}
