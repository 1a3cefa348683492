//! A SCAN: one part per worker of every member that owns slots (each in an
//! op slot of its own, pointing at the scan's), sent after connecting to
//! every such member; each part's answer (`part_answered`: a redirect or
//! try-again is followed, anything else goes into the scan) and the scan's
//! completion once its last part is in (`part_done`). The merging of the
//! parts is [`ScanAgg`]'s.

use copyrpc::transport::Transport;
use copyrpc::CloseReason;

use crate::error::{KvError, SubmitError};
use crate::reply::Reply;
use crate::retry::Target;
use crate::scan::ScanAgg;
use kvs_proto::proto::{self, Op, RESPONSE_HEADER};

use super::chase::chased_status;
use super::submit::call_failed;
use super::{Client, Kind};

impl<T, X: Transport> Client<T, X> {
    /// Up to `count` records with keys from `start` on, in key order, gathered
    /// from every worker of every member the client is connected to, after
    /// connecting to every member that owns slots (one that cannot be
    /// connected fails the scan with [`KvError::Unreachable`]).
    pub fn scan(&mut self, start: &[u8], count: u32, tag: T) -> Result<(), SubmitError<T>> {
        if start.len() > u16::MAX as usize {
            return Err(SubmitError::TooLarge(tag, start.len()));
        }
        if !self.routes.complete() {
            if let Err(e) = self.reach_owners() {
                self.fail_soon(tag, e);
                return Ok(());
            }
        }
        // One part per worker, each its own op slot. Refused before anything
        // is sent, the scan is handed back (Busy); a later part refused as
        // busy is sent again by a later poll, one refused for good fails the
        // scan once the parts sent are back.
        let parts = self.routes.count();
        let allowance = RESPONSE_HEADER + self.opts.scan_allowance;
        let version = self.routes.version();
        let i = self.slot(Some(tag), Kind::Scan, self.routes.all()[0], allowance);
        let mut agg = self.scan_pool.pop().unwrap_or_default();
        agg.reset(count as usize, parts as u32);
        for k in 0..parts {
            let ep = self.routes.all()[k];
            let p = self.slot(None, Kind::Part(i), ep, allowance);
            let s = &mut self.ops[p as usize];
            proto::write_request(&mut s.req, Op::Scan, version, start, &[], count, 0);
            match self.ctx.call(ep, &s.req, allowance, p) {
                Ok(()) => {}
                Err(e) if k == 0 => {
                    self.release(p);
                    self.scan_pool.push(agg);
                    return Err(self.refused(i, e, allowance));
                }
                Err(e) if e.is_retryable() => self.chaser.busy(p, Target::To(ep)),
                Err(e) => {
                    self.release(p);
                    agg.fail(call_failed(e));
                }
            }
        }
        self.ops[i as usize].scan = Some(agg);
        self.in_flight += 1;
        Ok(())
    }

    /// The answer `bytes` to part `i` of scan `parent`: a redirect or
    /// try-again is followed, anything else goes into the scan. Returns
    /// how many of the caller's requests completed.
    #[inline(always)]
    pub(super) fn part_answered(
        &mut self,
        i: u32,
        parent: u32,
        bytes: Result<&[u8], CloseReason>,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        if let Some(st) = chased_status(&bytes) {
            let payload = bytes.as_ref().map_or(&[][..], |b| &b[RESPONSE_HEADER..]);
            return match self.follow(i, st, payload) {
                None => 0,
                Some(e) => self.fail(i, e, f),
            };
        }
        self.release(i);
        self.part_done(parent, |agg| agg.add(bytes), f)
    }

    /// One part of scan `parent` is in (`add` adds it; true: it was the
    /// last): the scan completes once all are. Returns how many of the
    /// caller's requests completed.
    pub(super) fn part_done(
        &mut self,
        parent: u32,
        add: impl FnOnce(&mut ScanAgg) -> bool,
        f: &mut impl FnMut(T, Result<Reply<'_>, KvError>),
    ) -> usize {
        let Some(agg) = self.ops[parent as usize].scan.as_mut() else {
            return 0;
        };
        if !add(agg) {
            return 0;
        }
        let mut agg = self.ops[parent as usize].scan.take().expect("checked");
        let tag = self.release(parent).expect("a scan has its tag");
        self.in_flight -= 1;
        f(tag, agg.finish().map(Reply::Scan));
        self.scan_pool.push(agg);
        1
    }
}
