//! `mpib-bench --latency`: ping-pong. The sender posts the receive of the
//! answer, sends, and waits for both; the receiver (`echo`) sends each
//! transfer back at once. A sample is one round trip; the figure is half of
//! it, as ucx_perftest's `tag_lat` reports.

use std::time::{Duration, Instant};

use mpib::{Comm, Error, Request};

use super::{gone_or, BenchError};

/// Round trips per size at most (the samples are kept).
const MAX_SAMPLES: usize = 200_000;
/// Round trips before the measured ones.
const WARMUP: usize = 500;

/// Waits until `r` is done; its bytes.
fn wait(comm: &mut Comm, r: &Request) -> Result<u64, Error> {
    loop {
        if let Some(s) = comm.test(r)? {
            return Ok(s.total());
        }
    }
}

/// Posts a receive into `buf`, retrying while its slot is busy.
fn post_recv(comm: &mut Comm, buf: &mpib::Buffer) -> Result<Request, Error> {
    loop {
        if let Some(r) = comm.irecv(&[buf.all()], 0)? {
            return Ok(r);
        }
        comm.progress();
    }
}

/// Sends `len` bytes of `buf`, retrying until the transfer can go.
fn send(comm: &mut Comm, buf: &mpib::Buffer, len: u64) -> Result<Request, Error> {
    let span = buf.span(0, len)?;
    loop {
        if let Some(r) = comm.isend(&[span], 0)? {
            return Ok(r);
        }
        comm.progress();
    }
}

/// One round trip of `len` bytes: its time. The answer's receive is
/// posted before the send, or with `late` after it (the answer's sender
/// then meets no CTS until it arrives, unless it sends eagerly).
fn round_trip(
    comm: &mut Comm,
    (out, back): (&mpib::Buffer, &mpib::Buffer),
    len: u64,
    late: bool,
) -> Result<Duration, Error> {
    let t = Instant::now();
    let early = if late {
        None
    } else {
        Some(post_recv(comm, back)?)
    };
    let s = send(comm, out, len)?;
    let r = match early {
        Some(r) => r,
        None => post_recv(comm, back)?,
    };
    wait(comm, &s)?;
    wait(comm, &r)?;
    Ok(t.elapsed())
}

/// The sender: each size's half round trip, median and 99th percentile.
pub(crate) fn run(comm: &mut Comm, sizes: &[u64], secs: f64, late: bool) -> Result<(), BenchError> {
    let max = sizes.iter().copied().max().unwrap_or(0).max(1) as usize;
    let (out, back) = (comm.alloc_buffer(max)?, comm.alloc_buffer(max)?);
    let mut samples: Vec<u64> = Vec::with_capacity(MAX_SAMPLES);
    for &len in sizes {
        let eager_before = comm.stats().eager_sends;
        for _ in 0..WARMUP {
            round_trip(comm, (&out, &back), len, late)?;
        }
        samples.clear();
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while samples.len() < MAX_SAMPLES && (samples.len() < 100 || Instant::now() < end) {
            let t = round_trip(comm, (&out, &back), len, late)?;
            samples.push(t.as_nanos() as u64);
        }
        samples.sort_unstable();
        let pct = |p: f64| samples[((samples.len() - 1) as f64 * p) as usize] as f64 / 2000.0;
        let path = if comm.stats().eager_sends > eager_before {
            "eager"
        } else {
            "CTS"
        };
        println!(
            "{len} B: {:.2} us p50, {:.2} us p99 half round trip ({} round trips, {path})",
            pct(0.5),
            pct(0.99),
            samples.len(),
        );
    }
    Ok(())
}

/// The receiver: sends every transfer straight back, until the sender
/// leaves.
pub(crate) fn echo(comm: &mut Comm, max: u64) -> Result<(), BenchError> {
    let buf = comm.alloc_buffer(max.max(1) as usize)?;
    let mut next = match post_recv(comm, &buf) {
        Ok(r) => r,
        Err(e) => return gone_or(e),
    };
    loop {
        let len = match wait(comm, &next) {
            Ok(n) => n,
            Err(e) => return gone_or(e),
        };
        let res = send(comm, &buf, len).and_then(|s| {
            next = post_recv(comm, &buf)?;
            wait(comm, &s)
        });
        if let Err(e) = res {
            return gone_or(e);
        }
    }
}
