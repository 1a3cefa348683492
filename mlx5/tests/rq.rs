//! RQ and SRQ posting over hand-built memory: data segments, the invalid-lkey
//! terminator, SRQ links, doorbell records, retirement.

mod support;

use mlx5::cq::{Completion, CompletionSource};
use mlx5::mem::AlignedBuf;
use mlx5::prm::{Cqe64, DataSeg, QpDbRec, SrqDbRec, SrqNextSeg, INVALID_LKEY};
use mlx5::rq::{RecvQueue, RqError, RqMemory, Srq};
use mlx5::sq::Sge;
use mlx5::wqe_table::{OrderedRecv, UnorderedRecv};

fn mem(buf: &AlignedBuf, db: &AlignedBuf, cnt: u32, stride: usize) -> RqMemory {
    RqMemory {
        buf: buf.as_non_null(),
        wqe_cnt: cnt,
        stride,
        dbrec: db.as_non_null(),
        qn: 3,
        notify: None,
        keepalive: None,
    }
}

fn cqe(wc: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut b[..]);
    c.set_wqe_counter(wc);
    c.set_op_own(2 << 4);
    b
}

fn take<Q: CompletionSource>(q: &mut Q, wc: u16) -> Vec<Q::Entry> {
    let b = cqe(wc);
    let c = Completion::new(&b, &[]);
    let mut v = Vec::new();
    q.complete(&c, |e, _| v.push(e));
    v
}

#[test]
fn rq_posts_sges_with_terminator_and_rings() {
    let buf = AlignedBuf::new(8 * 64);
    let db = AlignedBuf::new(64);
    // SAFETY: buffers outlive the queue.
    let mut rq: RecvQueue<OrderedRecv<u32>> =
        unsafe { RecvQueue::new(mem(&buf, &db, 8, 64)) }.unwrap();
    let s = Sge {
        addr: 0x5000,
        len: 100,
        lkey: 9,
    };
    assert_eq!(rq.post(&[s, s], 1).unwrap(), 0);
    assert_eq!(rq.post(&[s; 4], 2).unwrap(), 1);
    assert_eq!(
        rq.post(&[s; 5], 3).err(),
        Some(RqError::TooManySges { got: 5, max: 4 })
    );
    let w0 = &buf.as_slice()[..64];
    let d = DataSeg::new_unchecked(&w0[16..32]);
    assert_eq!((d.addr(), d.byte_count(), d.lkey()), (0x5000, 100, 9));
    assert_eq!(DataSeg::new_unchecked(&w0[32..48]).lkey(), INVALID_LKEY);
    let recv_counter = |db: &AlignedBuf| QpDbRec::new_unchecked(db.as_slice()).recv_counter();
    assert_eq!(recv_counter(&db), 0);
    rq.ring_doorbell();
    assert_eq!(recv_counter(&db), 2);
    for i in 2..8 {
        rq.post(&[], i).unwrap();
    }
    assert_eq!(rq.post(&[], 99).err(), Some(RqError::Full));
    // In order, whatever the CQE says.
    assert_eq!(take(&mut rq, 0xffff), vec![1]);
    assert_eq!(take(&mut rq, 0), vec![2]);
    assert_eq!(rq.post(&[], 8).unwrap(), 8);
    assert_eq!(rq.outstanding(), 7);
}

#[test]
fn cyclic_srq_links_in_order_and_posts_zero_length_receives() {
    let buf = AlignedBuf::new(16 * 32);
    let db = AlignedBuf::new(64);
    // SAFETY: buffers outlive the queue.
    let mut srq: Srq<OrderedRecv<u32>> = unsafe { Srq::new(mem(&buf, &db, 16, 32)) }.unwrap();
    assert_eq!(srq.max_sge(), 1);
    for i in 0..16u16 {
        let n = SrqNextSeg::new_unchecked(&buf.as_slice()[usize::from(i) * 32..]);
        assert_eq!(n.next_wqe_index(), (i + 1) % 16);
    }
    for i in 0..16 {
        assert_eq!(srq.post(&[], i).unwrap(), i as u16);
    }
    assert_eq!(srq.post(&[], 0).err(), Some(RqError::Full));
    let d = DataSeg::new_unchecked(&buf.as_slice()[16..32]);
    assert_eq!(
        (d.byte_count(), d.lkey()),
        (0, INVALID_LKEY),
        "zero-length receive"
    );
    srq.ring_doorbell();
    assert_eq!(SrqDbRec::new_unchecked(db.as_slice()).counter(), 16);
    assert_eq!(take(&mut srq, 3), vec![3], "completion names its WQE");
    assert_eq!(
        srq.post(&[], 77).err(),
        Some(RqError::Full),
        "cyclic: the head slot (0) is still in use"
    );
    assert_eq!(take(&mut srq, 0), vec![0]);
    assert_eq!(srq.post(&[], 16).unwrap(), 0);
}

#[test]
fn free_list_srq_reuses_completed_wqes_in_any_order() {
    let buf = AlignedBuf::new(8 * 64);
    let db = AlignedBuf::new(64);
    // SAFETY: buffers outlive the queue.
    let mut srq: Srq<UnorderedRecv<u32>> = unsafe { Srq::new(mem(&buf, &db, 8, 64)) }.unwrap();
    assert_eq!(srq.max_sge(), 3);
    // One WQE is the list's tail sentinel: 7 can be posted.
    let idx: Vec<u16> = (0..7).map(|i| srq.post(&[], i).unwrap()).collect();
    assert_eq!(idx, (0..7).collect::<Vec<_>>());
    assert_eq!(srq.post(&[], 9).err(), Some(RqError::Full));
    assert_eq!(take(&mut srq, 5), vec![5]);
    assert_eq!(take(&mut srq, 2), vec![2]);
    // Freed WQEs are linked after the tail (7): 7 -> 5 -> 2.
    assert_eq!(
        SrqNextSeg::new_unchecked(&buf.as_slice()[7 * 64..]).next_wqe_index(),
        5
    );
    assert_eq!(
        SrqNextSeg::new_unchecked(&buf.as_slice()[5 * 64..]).next_wqe_index(),
        2
    );
    assert_eq!(srq.post(&[], 10).unwrap(), 7);
    assert_eq!(srq.post(&[], 11).unwrap(), 5);
    assert_eq!(srq.post(&[], 12).err(), Some(RqError::Full));
    assert_eq!(take(&mut srq, 7), vec![10]);
    assert_eq!(take(&mut srq, 7), Vec::<u32>::new());
}
