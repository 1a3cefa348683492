//! Fetching the shard map (MAP): the response allowance it gets, reading the
//! answer, and the blocking fetch of [`Client::connect`](crate::Client::connect).

use std::time::{Duration, Instant};

use copyrpc::transport::Transport;
use copyrpc::{CallError, CloseReason, Context, EndpointId};
use kvs_proto::proto::{self, Op, Response, Status, RESPONSE_HEADER};
use kvs_proto::ShardMap;

use crate::error::ConnectError;
use crate::inbox::{Handler, Inbox};

/// The first response allowance of a map fetch with rings of `ring_size`
/// bytes.
pub(crate) fn first_allowance(ring_size: u64) -> usize {
    (ring_size / 8).min(64 << 10) as usize
}

/// The largest response allowance rings of `ring_size` bytes admit (a
/// copyrpc allowance, with its message header and batch metadata, must stay
/// within a quarter of the ring).
pub(crate) fn max_allowance(ring_size: u64) -> usize {
    (ring_size / 4).saturating_sub(64) as usize
}

/// What a MAP request got.
#[derive(Debug)]
pub(crate) enum MapAnswer {
    /// The map.
    Map(ShardMap),
    /// The map did not fit the allowance: its size (payload bytes).
    TooSmall(usize),
    /// Anything else: why.
    Bad(String),
}

/// Reads a MAP answer (or the failure of its call).
pub(crate) fn read_answer(r: Result<&[u8], CloseReason>) -> MapAnswer {
    let b = match r {
        Ok(b) => b,
        Err(why) => return MapAnswer::Bad(format!("the map request failed: {why}")),
    };
    let resp = match Response::new_checked(b) {
        Ok(r) => r,
        Err(e) => return MapAnswer::Bad(format!("malformed map answer: {e}")),
    };
    match (resp.status(), resp.payload()) {
        (Status::Ok, p) => match ShardMap::decode(p) {
            Ok(m) => MapAnswer::Map(m),
            Err(e) => MapAnswer::Bad(e.to_string()),
        },
        (Status::AllowanceTooSmall, &[a, b, c, d]) => {
            MapAnswer::TooSmall(u32::from_le_bytes([a, b, c, d]) as usize)
        }
        (st, p) => MapAnswer::Bad(format!(
            "map request answered {st:?}: {}",
            String::from_utf8_lossy(p)
        )),
    }
}

/// The allowance to fetch again with after [`MapAnswer::TooSmall`] of
/// `needed` bytes under `allowance`, if one bigger than `allowance` fits
/// rings of `ring_size`; else the error.
pub(crate) fn raised(
    needed: usize,
    allowance: usize,
    ring_size: u64,
) -> Result<usize, ConnectError> {
    let want = RESPONSE_HEADER + needed;
    let max = max_allowance(ring_size);
    if want > allowance && want <= max {
        Ok(want)
    } else {
        Err(ConnectError::MapTooLarge {
            size: needed,
            ring_size,
            max: max.saturating_sub(RESPONSE_HEADER),
        })
    }
}

/// The user data of the bootstrap fetch (no op slot has it).
const BOOTSTRAP: u32 = u32::MAX;

/// Asks `ep` for the shard map and waits for it until `deadline` (`within`:
/// the whole setup's timeout, for the error); on AllowanceTooSmall asks once
/// more with the size needed, if the rings admit it.
pub(crate) fn fetch_blocking<X: Transport>(
    ctx: &mut Context<u32, Handler, X>,
    inbox: &Inbox,
    ep: EndpointId,
    ring_size: u64,
    within: Duration,
    deadline: Instant,
) -> Result<ShardMap, ConnectError> {
    let mut req = Vec::new();
    proto::write_request(&mut req, Op::Map, 0, &[], &[], 0, 0);
    let mut allowance = first_allowance(ring_size);
    let mut tries = 0;
    loop {
        tries += 1;
        loop {
            match ctx.call(ep, &req, allowance, BOOTSTRAP) {
                Ok(()) => break,
                Err(e) if e.is_retryable() => {}
                Err(CallError::TooLarge(..)) => {
                    let max = max_allowance(ring_size).saturating_sub(RESPONSE_HEADER);
                    return Err(ConnectError::MapTooLarge {
                        size: allowance - RESPONSE_HEADER,
                        ring_size,
                        max,
                    });
                }
                Err(e) => return Err(ConnectError::Protocol(e.to_string())),
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout(within));
            }
            ctx.poll();
        }
        let answer = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            ctx.wait(left.min(Duration::from_millis(100)))?;
            if let Some(a) = take_answer(inbox) {
                break a;
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Timeout(within));
            }
        };
        match answer {
            MapAnswer::Map(m) => return Ok(m),
            MapAnswer::TooSmall(needed) if tries == 1 => {
                allowance = raised(needed, allowance, ring_size)?
            }
            MapAnswer::TooSmall(needed) => {
                return Err(raised(needed, usize::MAX, ring_size).unwrap_err())
            }
            MapAnswer::Bad(why) => return Err(ConnectError::Protocol(why)),
        }
    }
}

/// The bootstrap fetch's answer, if it is in; clears the inbox.
fn take_answer(inbox: &Inbox) -> Option<MapAnswer> {
    let mut done = inbox.done.take();
    let mut arena = inbox.arena.take();
    let mut r = None;
    for d in done.drain(..) {
        if d.op == BOOTSTRAP {
            let bytes = d.result.map(|(s, n)| &arena[s as usize..(s + n) as usize]);
            r = Some(read_answer(bytes));
        }
    }
    arena.clear();
    inbox.done.set(done);
    inbox.arena.set(arena);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvs_proto::proto::{begin_response, finish_response};
    use std::net::SocketAddr;

    #[test]
    fn a_map_answer_too_small_asks_again_once_if_the_rings_admit_it() {
        let ring = 1 << 16;
        let first = first_allowance(ring);
        assert_eq!(first, 8192);
        // 12 KiB fits a 64 KiB ring (at most 16 KiB less headers).
        assert_eq!(
            raised(12 << 10, first, ring).unwrap(),
            RESPONSE_HEADER + (12 << 10)
        );
        match raised(16 << 10, first, ring) {
            Err(ConnectError::MapTooLarge { size, max, .. }) => {
                assert_eq!(size, 16 << 10);
                assert!(max < 16 << 10);
            }
            r => panic!("{r:?}"),
        }
        // Never smaller than what was already tried.
        assert!(raised(100, first, ring).is_err());
        // Copyrpc admits the largest allowance: its message and metadata
        // within a quarter of the ring.
        let a = max_allowance(ring) as u64;
        assert!(((12 + a).div_ceil(32) * 32 + 32) <= ring / 4);
    }

    #[test]
    fn map_answers_are_read() {
        let m = ShardMap::single(SocketAddr::from(([127, 0, 0, 1], 7000)), 64, 2).unwrap();
        let mut r = Vec::new();
        begin_response(&mut r, Status::Ok, 0);
        m.encode(&mut r);
        finish_response(&mut r, 0);
        assert!(matches!(read_answer(Ok(&r)), MapAnswer::Map(x) if x == m));
        begin_response(&mut r, Status::AllowanceTooSmall, 0);
        r.extend_from_slice(&5000u32.to_le_bytes());
        finish_response(&mut r, 0);
        assert!(matches!(read_answer(Ok(&r)), MapAnswer::TooSmall(5000)));
        begin_response(&mut r, Status::Ok, 0);
        r.extend_from_slice(b"junk");
        finish_response(&mut r, 0);
        assert!(matches!(read_answer(Ok(&r)), MapAnswer::Bad(_)));
        assert!(matches!(
            read_answer(Err(CloseReason::PeerGone)),
            MapAnswer::Bad(_)
        ));
    }
}
