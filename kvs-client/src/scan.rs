//! SCAN aggregation: one part per worker of every member, merged in key
//! order, nothing past the last key of a part that stopped early.

use copyrpc::CloseReason;
use kvs_proto::proto::{Response, ScanRecords, Status, FLAG_TRUNCATED, SCAN_RECORD_HEADER};

use crate::error::KvError;

/// The records of a SCAN, in key order.
#[derive(Debug)]
pub struct ScanReply<'a> {
    buf: &'a [u8],
    recs: &'a [ScanRec],
    complete: bool,
}

impl<'a> ScanReply<'a> {
    /// How many records.
    pub fn len(&self) -> usize {
        self.recs.len()
    }
    /// No records.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
    /// False when some worker's part did not fit its response allowance and
    /// fewer records than asked are returned although more may exist (scan
    /// again from after the last key).
    pub fn complete(&self) -> bool {
        self.complete
    }
    /// The records, as (key, value).
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + '_ {
        let buf = self.buf;
        self.recs.iter().map(move |r| {
            (
                &buf[r.key as usize..(r.key + r.key_len) as usize],
                &buf[r.val as usize..(r.val + r.val_len) as usize],
            )
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct ScanRec {
    key: u32,
    key_len: u32,
    val: u32,
    val_len: u32,
}

/// A scan being gathered from the workers.
#[derive(Debug, Default)]
pub(crate) struct ScanAgg {
    want: usize,
    parts_left: u32,
    buf: Vec<u8>,
    recs: Vec<ScanRec>,
    /// The smallest last key of a part that stopped early.
    bound: Option<(u32, u32)>,
    error: Option<KvError>,
}

/// Adds one worker's part of a scan.
fn add_scan_part(agg: &mut ScanAgg, part: Result<&[u8], CloseReason>) {
    if agg.error.is_some() {
        return;
    }
    let b = match part {
        Ok(b) => b,
        Err(why) => {
            agg.error = Some(KvError::Failed(why));
            return;
        }
    };
    let resp = match Response::new_checked(b) {
        Ok(r) => r,
        Err(e) => {
            agg.error = Some(KvError::Malformed(e));
            return;
        }
    };
    if resp.status() != Status::Ok {
        agg.error = Some(KvError::of_status(resp.status(), resp.payload()));
        return;
    }
    let mut last = None;
    for r in ScanRecords::new(resp.payload()) {
        let (k, v) = match r {
            Ok(kv) => kv,
            Err(e) => {
                agg.error = Some(KvError::Malformed(e));
                return;
            }
        };
        let key = agg.buf.len() as u32;
        agg.buf.extend_from_slice(k);
        let val = agg.buf.len() as u32;
        agg.buf.extend_from_slice(v);
        agg.recs.push(ScanRec {
            key,
            key_len: k.len() as u32,
            val,
            val_len: v.len() as u32,
        });
        last = Some((key, k.len() as u32));
    }
    if resp.flags() & FLAG_TRUNCATED != 0 {
        // Keys past this part's last one may be missing from it.
        let Some((lk, ll)) = last else {
            agg.error = Some(KvError::AllowanceTooSmall(
                resp.payload().len() + SCAN_RECORD_HEADER,
            ));
            return;
        };
        let new = &agg.buf[lk as usize..(lk + ll) as usize];
        let tighter = match agg.bound {
            None => true,
            Some((bk, bl)) => new < &agg.buf[bk as usize..(bk + bl) as usize],
        };
        if tighter {
            agg.bound = Some((lk, ll));
        }
    }
}

/// Merges the parts: key order, nothing past a truncated part's last key, at
/// most `want` records.
fn finish_scan(agg: &mut ScanAgg) {
    let buf = &agg.buf;
    let key = |r: &ScanRec| &buf[r.key as usize..(r.key + r.key_len) as usize];
    agg.recs.sort_unstable_by(|a, b| key(a).cmp(key(b)));
    if let Some((bk, bl)) = agg.bound {
        let bound = &buf[bk as usize..(bk + bl) as usize];
        let keep = agg.recs.partition_point(|r| key(r) <= bound);
        agg.recs.truncate(keep);
    }
    agg.recs.truncate(agg.want);
}

impl ScanAgg {
    /// Ready for a scan of `want` records in `parts` parts.
    pub(crate) fn reset(&mut self, want: usize, parts: u32) {
        self.want = want;
        self.parts_left = parts;
        self.buf.clear();
        self.recs.clear();
        self.bound = None;
        self.error = None;
    }

    /// Adds one part's answer (or failure); returns whether it was the last.
    pub(crate) fn add(&mut self, part: Result<&[u8], CloseReason>) -> bool {
        add_scan_part(self, part);
        self.part_done()
    }

    /// Fails one part with `e` (the first error is the scan's); returns
    /// whether it was the last.
    pub(crate) fn fail(&mut self, e: KvError) -> bool {
        self.error.get_or_insert(e);
        self.part_done()
    }

    fn part_done(&mut self) -> bool {
        self.parts_left = self.parts_left.saturating_sub(1);
        self.parts_left == 0
    }

    /// The scan's answer, once every part is in.
    pub(crate) fn finish(&mut self) -> Result<ScanReply<'_>, KvError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        finish_scan(self);
        Ok(ScanReply {
            buf: &self.buf,
            recs: &self.recs,
            complete: self.bound.is_none() || self.recs.len() >= self.want,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{begin_response, finish_response, push_scan_record};

    fn part(recs: &[(&str, &str)], truncated: bool) -> Vec<u8> {
        let mut r = Vec::new();
        begin_response(&mut r, Status::Ok, 0);
        for (k, v) in recs {
            push_scan_record(&mut r, k.as_bytes(), v.as_bytes());
        }
        finish_response(&mut r, if truncated { FLAG_TRUNCATED } else { 0 });
        r
    }

    fn keys(s: &ScanReply<'_>) -> Vec<String> {
        s.iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    #[test]
    fn parts_merge_in_key_order_up_to_a_truncated_parts_last_key() {
        let mut a = ScanAgg::default();
        a.reset(10, 3);
        assert!(!a.add(Ok(&part(&[("b", "1"), ("e", "2")], false))));
        assert!(!a.add(Ok(&part(&[("a", "3"), ("c", "4")], true))));
        assert!(a.add(Ok(&part(&[("d", "5")], false))));
        let r = a.finish().unwrap();
        // Nothing past "c": the truncated part may have more before "d".
        assert_eq!(keys(&r), ["a", "b", "c"]);
        assert!(!r.complete());
        // Reused: a failed part fails the scan, once every part is in.
        a.reset(2, 2);
        assert!(!a.fail(KvError::NoRoute("x".into())));
        assert!(a.add(Ok(&part(&[("a", "1")], false))));
        assert_eq!(a.finish().unwrap_err(), KvError::NoRoute("x".into()));
        a.reset(2, 1);
        assert!(a.add(Ok(&part(&[("b", "1"), ("a", "2"), ("c", "3")], false))));
        let r = a.finish().unwrap();
        assert_eq!(keys(&r), ["a", "b"]);
        assert!(r.complete());
    }
}
