//! A received batch: its flow metadata checked and applied, every message
//! in it checked, then delivered.

use super::Arrived;
use crate::encoding::*;
use crate::endpoint::Ep;
use crate::error::CallFailed;
use crate::fifo::Fifo;
use crate::transport::Transport;

/// Processes one received batch of `delta` bytes (from the CQE byte count):
/// validates every byte of it and delivers its messages.
pub(super) fn on_batch<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    delta: u32,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<(), &'static str> {
    let pos = e.recv_producer;
    let delta = u64::from(delta);
    let Some(count) = accept_metadata(e, pos, delta)? else {
        return Ok(());
    };
    let end = pos + delta;
    // The whole batch is checked before anything in it is delivered.
    check_messages(e, pos, end, count)?;
    deliver_messages(e, idx, pos, count, on_response, recvq)?;
    e.recv_producer = end;
    Ok(())
}

/// Checks where a batch of `delta` bytes at `pos` lies and applies its flow
/// metadata (the peer's consumer position, its credit grant). Returns the
/// batch's message count, or `None` for a wrap marker, which it has applied
/// (the rest of the ring is skipped).
#[inline(always)]
fn accept_metadata<U, T: Transport>(
    e: &mut Ep<U, T>,
    pos: u64,
    delta: u64,
) -> Result<Option<u32>, &'static str> {
    let off = pos & (e.recv_size - 1);
    if delta < FLOW_METADATA_SIZE || delta % ALIGNMENT != 0 {
        return Err("batch size not a positive multiple of 32");
    }
    if off + delta > e.recv_size {
        return Err("batch crosses the ring's end");
    }
    if pos + delta - e.last_recv_pos > e.recv_size {
        return Err("batch overruns unconsumed data");
    }
    let meta =
        FlowMetadata::new_checked(e.recv_slice(pos, FLOW_METADATA_SIZE)).ok_or("short batch")?;
    if meta.batch_pos() != pos {
        return Err("batch position is not where the next batch goes");
    }
    let (consumer, grant, count) = (
        meta.consumer_pos(),
        meta.credit_grant(),
        meta.message_count(),
    );
    e.update_remote_consumer(consumer)?;
    if grant % ALIGNMENT != 0 || e.peer_credit + grant > e.recv_size / 2 {
        return Err("credit grant beyond what the peer can reserve");
    }
    e.peer_credit += grant;
    if count == WRAP_MESSAGE_COUNT {
        if delta != FLOW_METADATA_SIZE {
            return Err("wrap marker with a body");
        }
        // The rest of the ring is skipped.
        e.recv_producer = pos + (e.recv_size - off);
        return Ok(None);
    }
    if count == 0 {
        return Err("empty batch");
    }
    Ok(Some(count))
}

/// Pass 1 over a batch (`pos..end`, `count` messages): every header lies
/// within it, every response answers a pending call, every request carries
/// the credit for its response, and the messages fill the batch exactly.
#[inline(always)]
fn check_messages<U, T: Transport>(
    e: &Ep<U, T>,
    pos: u64,
    end: u64,
    count: u32,
) -> Result<(), &'static str> {
    let mut cur = pos + FLOW_METADATA_SIZE;
    let mut credit_used = 0u64;
    for _ in 0..count {
        cur += check_message(e, cur, end, &mut credit_used)?;
    }
    if cur != end {
        return Err("batch longer than its messages");
    }
    Ok(())
}

/// Checks the message at `cur` of a batch ending at `end`, adding a
/// request's allowance to `credit_used`; returns its padded size.
#[inline(always)]
fn check_message<U, T: Transport>(
    e: &Ep<U, T>,
    cur: u64,
    end: u64,
    credit_used: &mut u64,
) -> Result<u64, &'static str> {
    if cur + HEADER_SIZE as u64 > end {
        return Err("message header beyond the batch");
    }
    let h =
        MessageHeader::new_checked(e.recv_slice(cur, HEADER_SIZE as u64)).ok_or("short header")?;
    let (call_id, piggyback, len) = (h.call_id(), h.piggyback(), h.len());
    let size = padded_message_size(len as usize);
    if len as u64 > e.recv_size || cur + size > end {
        return Err("message length beyond the batch");
    }
    if call_id & RESPONSE_FLAG != 0 {
        if !e.pending.contains(call_id & !RESPONSE_FLAG) {
            return Err("response to no pending call");
        }
    } else {
        let allowance = u64::from(piggyback) * ALIGNMENT;
        *credit_used += allowance;
        if allowance < 2 * ALIGNMENT || *credit_used > e.peer_unused_credit {
            return Err("request without the credit for its response");
        }
    }
    Ok(size)
}

/// Pass 2 over a checked batch at `pos` of `count` messages: responses go
/// to `on_response`, requests to `recvq`. (A response id repeated within
/// the batch is caught here.)
#[inline(always)]
fn deliver_messages<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    pos: u64,
    count: u32,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<(), &'static str> {
    let mut cur = pos + FLOW_METADATA_SIZE;
    for _ in 0..count {
        cur += deliver_message(e, idx, cur, on_response, recvq)?;
    }
    Ok(())
}

/// Delivers the checked message at `cur`; returns its padded size.
#[inline(always)]
fn deliver_message<U, F: FnMut(U, Result<&[u8], CallFailed>), T: Transport>(
    e: &mut Ep<U, T>,
    idx: u32,
    cur: u64,
    on_response: &mut F,
    recvq: &mut Fifo<Arrived>,
) -> Result<u64, &'static str> {
    let h =
        MessageHeader::new_checked(e.recv_slice(cur, HEADER_SIZE as u64)).ok_or("short header")?;
    let (call_id, piggyback, len) = (h.call_id(), h.piggyback(), h.len());
    let data = cur + HEADER_SIZE as u64;
    if call_id & RESPONSE_FLAG != 0 {
        let Some(u) = e.pending.remove(call_id & !RESPONSE_FLAG) else {
            return Err("two responses to one call");
        };
        e.stats.responses += 1;
        on_response(u, Ok(e.recv_slice(data, u64::from(len))));
    } else {
        let allowance = u64::from(piggyback) * ALIGNMENT;
        e.peer_unused_credit -= allowance;
        e.stats.requests += 1;
        e.queued.push_back(cur);
        recvq.push_back(Arrived {
            ep: idx,
            gen: e.gen,
            call_id,
            allowance,
            pos: data,
            len,
        });
    }
    Ok(padded_message_size(len as usize))
}
