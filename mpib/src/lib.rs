//! mpib: dual-rail bulk RDMA transfers between two peers.
//!
//! A [`Comm`] joins two peers over one or two *rails*, each rail a device
//! (rail 0 "SOUT", rail 1 "SUP"). It moves whole buffers with RDMA WRITE and
//! splits every transfer between the rails at the last moment, from fresh
//! telemetry. It runs over [`mlx5::wr`], so the same code drives the software
//! mlx5 device (`sim0`, `sim1`, ...), mlx5 NICs, and other RDMA devices such
//! as kernel soft-RoCE (`rxe0`) through the verbs path. CI runs the transfer
//! tests on soft-RoCE with rail 0 on `rxe0` and rail 1 on `rxe1`, and with
//! both rails on `rxe0` (`tests/rxe.rs`).
//!
//! # Resources
//!
//! Per rail: a PD, a send CQ and a receive CQ, **one SRQ** holding generic
//! zero-length receives that every QP of the rail draws from, **one CTS QP**
//! and `qps_per_rail` **data QPs**; where the device has tag matching, a
//! **TM-SRQ** with its own CQ, bounce buffers and **one eager QP**. A
//! communicator is bidirectional: either side may send and receive.
//!
//! # The protocol
//!
//! 1. **CTS.** `irecv(bufs, tag)` takes FIFO position `p` (slot
//!    `p % depth`) and RDMA-WRITEs a 256-byte CTS entry ([`cts`]) into the
//!    peer's FIFO: the slot, 1 to 8 buffers (address, size, one rkey per
//!    rail) and the tag, framed by `p + 1` at head and tail. The CTS of slot
//!    `s` travels on rail `s % rails` through that rail's one CTS QP, which
//!    signals the slots of its own parity (`slot % 2 == device index`: rail 0
//!    the even slots, rail 1 the odd ones; with one rail, every other CTS).
//! 2. **Split.** `isend(bufs, tag)` takes the next FIFO position in order and
//!    waits (returns `Ok(None)`) until its entry has arrived. It validates
//!    the entry (slot, 1..=8 buffers, tag, buffer count, sizes), polls its
//!    completions, and asks the [`SplitPolicy`] how to split each buffer
//!    between the rails, from [`Telemetry`] that is current to that call.
//!    The rails that got bytes form the *active mask*; a 0-byte transfer
//!    makes rail 0 active.
//! 3. **Data.** Each active rail takes its next data QP (round-robin; one QP
//!    per rail per request, never striped across QPs of a rail) and posts its
//!    part there, followed by exactly one WRITE_WITH_IMM whose immediate is
//!    `slot | mask << 8 | size_q << 10` ([`imm`]). Idle rails post nothing.
//!    - *Fast path*: one buffer whose size the immediate carries exactly
//!      (`size_q` = size in granularity units, rounded up; exact for
//!      multiples of the granularity and for a full buffer): the
//!      WRITE_WITH_IMM carries the data itself, one WR per active rail, no
//!      completion record.
//!    - *Record path* (several buffers, or a size `size_q` cannot give back
//!      exactly, e.g. over 512 MiB at 128-byte granularity): plain WRITEs,
//!      then the signal with `size_q` set to the sentinel; the *leader rail*
//!      (rail 0 if active, else rail 1) attaches the completion record
//!      ([`record`]: the exact size of every buffer) to its signal.
//! 4. **Completion.** Immediates arrive on the rails' SRQs, which the
//!    receiver keeps between a low and a high water mark (refilled in
//!    `irecv` and `test`). The first immediate of a slot teaches the receiver
//!    the mask; the receive completes when every rail in the mask has
//!    signaled. The sender's request completes when each active rail's
//!    signal completed.
//!
//! 5. **Eager transfers** (where every rail of both sides has tag matching,
//!    and [`Config::eager_max`] is not 0 on either side; both use the
//!    smaller value). A single-buffer `isend` of at most that many bytes
//!    does not wait for a CTS: it SENDs a tag-matching header (`EAGER`,
//!    `app_ctx` = tag, tag = FIFO position) and the data on rail
//!    `position % rails`'s eager QP. A single-buffer `irecv` appends a tag
//!    for its position with its buffer to that rail's TM-SRQ, so the NIC
//!    places the data; a buffer larger than the threshold also writes its
//!    CTS (the sender picks the path by its size), and the tag is removed if
//!    the CTS path completes it. A message that beats its receive waits in
//!    a bounce buffer for its `irecv`. Positions sent eagerly leave their
//!    FIFO slot's entry older than the sender expects: `isend` takes any
//!    older entry for "not yet".
//!
//! Peer bytes are input: an immediate for an unknown or completed slot, a
//! duplicate, a mask that is not a subset of the rails, immediates of one
//! slot that disagree, a size beyond the posted buffer, a malformed CTS entry
//! — each closes that communicator with a [`ProtocolError`] (no panic, and
//! nothing is delivered into another request). A dead peer (the liveness
//! channel closes, or a QP fails) closes it too; `test` reports the reason.
//!
//! # Call order
//!
//! ```no_run
//! use mpib::{Config, PendingComm};
//! use mlx5::device::Context;
//!
//! let rails = [Context::open("sim0")?, Context::open("sim1")?];
//! let pending = PendingComm::new(&rails, &Config::default())?;
//! // Send `pending.info()` to the peer, get its record back (or use
//! // `mpib::conn`, which does this over TCP, or `mpib::pair` in one process).
//! # let peer_info = pending.info().clone();
//! let mut comm = pending.connect(&peer_info)?;
//! let buf = comm.alloc_buffer(1 << 20)?;
//!
//! // Receiver: post, then test until done.
//! let req = loop {
//!     if let Some(r) = comm.irecv(&[buf.all()], 7)? { break r; }
//!     comm.progress();
//! };
//! let sizes = loop {
//!     if let Some(s) = comm.test(&req)? { break s; }
//! };
//! println!("received {} bytes", sizes[0]);
//!
//! // Sender: isend returns None until the peer's CTS arrived.
//! let req = loop {
//!     if let Some(r) = comm.isend(&[buf.span(0, 4096)?], 7)? { break r; }
//!     comm.progress();
//! };
//! while comm.test(&req)?.is_none() {}
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Nothing is allocated per transfer: send requests come from a fixed pool,
//! receives are the FIFO slots, completions are polled into a reused vector.

mod buffer;
mod comm;
pub mod conn;
pub mod cts;
mod eager;
mod error;
pub mod imm;
mod info;
mod liveness;
#[cfg(feature = "mpi")]
pub mod mpi_setup;
pub mod policy;
mod rail;
pub mod record;
mod regcache;
mod request;

pub use buffer::{Buffer, Span};
pub use comm::{
    pair, Comm, Config, PendingComm, Stats, MAX_EAGER, MAX_RAILS, MAX_SIZE, SUGGESTED_EAGER_MAX,
};
pub use error::{CloseReason, CtsError, Error, ProtocolError, SetupError};
pub use info::{CommInfo, QpInfo, RailInfo, COMM_INFO_VERSION};
pub use policy::{PolicyKind, SplitPolicy, Telemetry};
pub use regcache::{RegStats, Region};
pub use request::{Request, Sizes};
