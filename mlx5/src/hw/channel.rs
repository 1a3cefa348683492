//! Completion channels on rdma-core (`ibv_create_comp_channel`): where the
//! events of armed CQs arrive, read with `ibv_get_cq_event` and acknowledged
//! with `ibv_ack_cq_events`. The channel's file descriptor is non-blocking;
//! a wait is `poll(2)` on it with the timeout, and on an `eventfd` of the
//! channel's own that [`HwWaker::wake`] writes to end a wait early.
//!
//! A CQ created on a channel carries, as its `cq_context`, the address of its
//! `CqEvents`: the event's CQ number and the count of events taken, whose
//! low two bits are the arm sequence number the direct path's arm writes.
//! Not yet run on a ConnectX; on soft-RoCE the verbs path's arm
//! (`ibv_req_notify_cq`) and this channel run in the rxe guest.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::ctx::Ctx;
use super::ffi::{ibv_comp_channel, ibv_cq};
use super::loader::{errno, HwError};

/// What a CQ on a channel shares with it: its number and the events taken.
#[derive(Debug)]
pub(super) struct CqEvents {
    /// The CQ number the event reports (`Cq::cqn`).
    pub(super) cqn: AtomicU32,
    /// Events taken: the arm sequence number is its low two bits.
    pub(super) taken: Arc<AtomicU32>,
}

pub(super) struct ChanInner {
    c: Arc<Ctx>,
    ch: NonNull<ibv_comp_channel>,
    /// Held while an event is read and acknowledged, and while a CQ of the
    /// channel is destroyed: an event's `cq_context` then always points at
    /// a live [`CqEvents`].
    lock: Mutex<()>,
    /// The eventfd a [`HwWaker`] writes (non-blocking, closed on drop).
    wake_fd: i32,
}

// SAFETY: the channel is used under `lock` (reads of events) or through its
// file descriptor, which any thread may poll.
unsafe impl Send for ChanInner {}
// SAFETY: as above.
unsafe impl Sync for ChanInner {}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_comp_channel; every CQ on it holds an
        // Arc to this and is destroyed already.
        unsafe { (self.c.v.destroy_comp_channel)(self.ch.as_ptr()) };
        // SAFETY: our own eventfd, closed once.
        unsafe { libc::close(self.wake_fd) };
    }
}

/// A completion channel on an RDMA device.
#[derive(Clone)]
pub struct HwChannel {
    pub(super) inner: Arc<ChanInner>,
}

impl std::fmt::Debug for HwChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwChannel")
            .field("fd", &self.fd())
            .finish_non_exhaustive()
    }
}

impl HwChannel {
    /// Creates a channel on `c`, its file descriptor non-blocking.
    pub(super) fn new(c: &Arc<Ctx>) -> Result<HwChannel, HwError> {
        // SAFETY: a live context.
        let ch = NonNull::new(unsafe { (c.v.create_comp_channel)(c.ctx.as_ptr()) }).ok_or(
            HwError::Verb {
                verb: "ibv_create_comp_channel",
                errno: errno(),
            },
        )?;
        // SAFETY: eventfd takes no pointers.
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake_fd < 0 {
            let e = errno();
            // SAFETY: created above, not shared yet.
            unsafe { (c.v.destroy_comp_channel)(ch.as_ptr()) };
            return Err(HwError::Verb {
                verb: "eventfd for the completion channel's waker",
                errno: e,
            });
        }
        let inner = Arc::new(ChanInner {
            c: c.clone(),
            ch,
            lock: Mutex::new(()),
            wake_fd,
        });
        let chan = HwChannel { inner };
        let fd = chan.fd();
        // SAFETY: fcntl on the channel's own descriptor.
        let ok = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(HwError::Verb {
                verb: "fcntl(O_NONBLOCK) on the completion channel",
                errno: errno(),
            });
        }
        Ok(chan)
    }

    /// The `struct ibv_comp_channel`, to create CQs on.
    pub(super) fn raw(&self) -> *mut ibv_comp_channel {
        self.inner.ch.as_ptr()
    }

    /// Whether the channel was made on the same device context as `c`.
    pub(super) fn is_on(&self, c: &Arc<Ctx>) -> bool {
        Arc::ptr_eq(&self.inner.c, c)
    }

    /// Held while a CQ of the channel is destroyed.
    pub(super) fn lock(&self) -> MutexGuard<'_, ()> {
        self.inner.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel's file descriptor (readable when an event is queued).
    pub fn fd(&self) -> i32 {
        // SAFETY: a live channel; `fd` is set at creation and never changes.
        unsafe { (*self.inner.ch.as_ptr()).fd }
    }

    /// Reads one queued event, if any, and acknowledges it at once.
    fn take(&self) -> Result<Option<u32>, HwError> {
        let _g = self.lock();
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live channel; out-pointers valid for the call.
        let rc = unsafe { (self.inner.c.v.get_cq_event)(self.raw(), &mut cq, &mut ctx) };
        if rc != 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                return Ok(None);
            }
            return Err(HwError::Verb {
                verb: "ibv_get_cq_event",
                errno: e,
            });
        }
        // SAFETY: `cq` is the CQ the event is for: alive, since destroying a
        // CQ of this channel takes the lock held here, and verbs drops the
        // queued events of a CQ it destroys.
        unsafe { (self.inner.c.v.ack_cq_events)(cq, 1) };
        if ctx.is_null() {
            // A CQ on this channel created elsewhere, without our context.
            return Ok(Some(0));
        }
        // SAFETY: every CQ this crate creates on a channel has the address of
        // its CqEvents as cq_context, alive for as long as the CQ.
        let ev = unsafe { &*(ctx as *const CqEvents) };
        ev.taken.fetch_add(1, Ordering::Release);
        Ok(Some(ev.cqn.load(Ordering::Relaxed)))
    }

    /// A handle that ends this channel's wait early, from any thread.
    pub fn waker(&self) -> HwWaker {
        HwWaker {
            inner: self.inner.clone(),
        }
    }

    /// Takes a wake that no wait has taken yet (empties the waker's
    /// eventfd): whether there was one.
    pub fn take_wake(&self) -> bool {
        let mut v = 0u64;
        // SAFETY: our own non-blocking eventfd; 8 bytes into a u64.
        let n = unsafe { libc::read(self.inner.wake_fd, (&mut v as *mut u64).cast(), 8) };
        n == 8
    }

    /// Waits up to `timeout` for the next completion event and returns its
    /// CQ's number (`Cq::cqn`); `None` when none came before the timeout or a
    /// [`HwWaker::wake`] (a wake that came before the wait ends it at once).
    /// Each event is acknowledged (`ibv_ack_cq_events`) as it is taken.
    pub fn wait(&self, timeout: Duration) -> Result<Option<u32>, HwError> {
        let t0 = Instant::now();
        loop {
            if let Some(cqn) = self.take()? {
                return Ok(Some(cqn));
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            if self.take_wake() {
                return Ok(None);
            }
            let mut p = [self.fd(), self.inner.wake_fd].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: two valid pollfds.
            let rc = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
            if rc < 0 && errno() != libc::EINTR {
                return Err(HwError::Verb {
                    verb: "poll on the completion channel",
                    errno: errno(),
                });
            }
        }
    }
}

/// Ends a wait on an RDMA device's channel from another thread
/// ([`HwChannel::waker`]): a write to the channel's eventfd.
#[derive(Clone)]
pub struct HwWaker {
    inner: Arc<ChanInner>,
}

impl std::fmt::Debug for HwWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwWaker")
            .field("eventfd", &self.inner.wake_fd)
            .finish_non_exhaustive()
    }
}

impl HwWaker {
    /// Ends the channel's current wait, or the next one if none is under
    /// way. Wakes do not pile up: several before a wait end that one wait.
    pub fn wake(&self) {
        let one = 1u64;
        // SAFETY: our own eventfd, alive while `inner` is; 8 bytes from a u64.
        // A full counter (EAGAIN) already means "woken".
        unsafe { libc::write(self.inner.wake_fd, (&one as *const u64).cast(), 8) };
    }
}
