//! CQ memory and its consumer: owner check, read barrier, compressed CQEs,
//! scatter-to-CQE, the consumer-index doorbell record, and arming the CQ for
//! a completion event.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use super::Completion;
use crate::barrier;
use crate::doorbell::{store_dbrec, DeviceNotify};
use crate::prm::{
    op_own, ArmCmd, CqArm, Cqe64, CqeOpcode, MiniCqe, CQ_ARM_DB, CQ_DOORBELL, CQ_SET_CI,
    MINI_PER_BASIC_SLOT, MINI_PER_ENHANCED_SLOT,
};

/// How the NIC may compress CQEs in this CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Every CQE is a full CQE.
    Off,
    /// The enhanced layout (what UCX unzips): every CQE carries the
    /// validity iteration count in byte 62; a compressed slot holds up to 7 mini
    /// CQEs, `(op_own >> 4) + 1` of them, and stands for that many consecutive
    /// CQ indices; the title is the last plain CQE before it.
    Enhanced,
    /// The basic layout (Linux `en_rx.c`): a compressed title CQE whose byte count
    /// is the number of CQEs in the session, mini CQE arrays of 8 at the next
    /// slot and every 8th slot after; ownership by the owner bit, which software
    /// rewrites in the slots it consumes.
    Basic,
}

/// An invalid CQ description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CqError {
    /// The CQE count is not a power of two, or out of range.
    #[error("CQE count {0} is not a power of two between 2 and 2^22")]
    BadCqeCount(u32),
    /// The CQE size is neither 64 nor 128.
    #[error("CQE size {0} is neither 64 nor 128")]
    BadCqeSize(usize),
    /// Compression needs 64-byte CQEs.
    #[error("CQE compression needs 64-byte CQEs")]
    CompressionNeeds64,
    /// The CQ cannot be armed: it was not created on a completion channel.
    #[error("CQ {0:#x} has no completion channel: create it on one to arm it")]
    NoChannel(u32),
}

/// What a CQ created on a completion channel needs to be armed (on hardware,
/// `cq_uar` of `struct mlx5dv_cq`).
#[derive(Debug, Clone)]
pub struct CqArmMemory {
    /// The UAR page whose CQ doorbell register, at
    /// [`CQ_DOORBELL`](crate::prm::CQ_DOORBELL), takes the arm doorbell.
    pub uar: NonNull<u8>,
    /// Completion events software has taken for this CQ (the completion
    /// channel counts them): its low two bits are the arm sequence number.
    pub events: Arc<AtomicU32>,
}

/// What a backend hands over for one CQ (on hardware, `struct mlx5dv_cq`).
#[derive(Debug)]
pub struct CqMemory {
    /// CQ buffer: `cqe_cnt * cqe_size` bytes, 64-byte aligned.
    pub buf: NonNull<u8>,
    /// Number of CQEs, a power of two.
    pub cqe_cnt: u32,
    /// 64 or 128.
    pub cqe_size: usize,
    /// The CQ doorbell record (two big-endian words).
    pub dbrec: NonNull<u8>,
    /// CQ number.
    pub cqn: u32,
    /// Backend hook (the software device); `None` on hardware.
    pub notify: Option<Arc<dyn DeviceNotify>>,
    /// Keeps the memory alive for as long as the ring exists.
    pub keepalive: Option<Arc<dyn Any + Send + Sync>>,
    /// How to arm the CQ, when it was created on a completion channel.
    pub arm: Option<CqArmMemory>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Expansion state of a compressed block (enhanced) or session (basic).
struct Unzip {
    /// The CQE handed out for the current mini CQE.
    out: Line,
    /// The title CQE.
    title: Line,
    /// The current mini CQE array.
    minis: Line,
    /// Mini CQEs of the block/session not yet delivered.
    left: u32,
    /// Index of the next mini CQE in the block (enhanced) or session (basic).
    pos: u32,
    /// Enhanced: the title copy is still current (no plain CQE since).
    title_valid: bool,
    /// Enhanced: size of the previous block sharing the title.
    block_size: u32,
    /// Responder WQE counter base.
    wqe_counter: u16,
    /// Basic: CQ index of the title.
    session_start: u32,
}

/// The consumer side of one CQ.
pub struct CqRing {
    buf: NonNull<u8>,
    ci: u32,
    mask: u32,
    log_cnt: u32,
    stride_shift: u32,
    cqe_off: usize,
    dbrec: NonNull<u8>,
    zip: Compression,
    /// The byte whose value says who owns a CQE, and its bits that count:
    /// with enhanced compression the signature (all of it equals the pass
    /// count), else op_own's owner bit.
    own_off: usize,
    own_mask: u8,
    unzip: Box<Unzip>,
    cqn: u32,
    expanded: u64,
    notify: Option<Arc<dyn DeviceNotify>>,
    /// The device's [`DeviceNotify::idle_work`] word.
    idle_work: Option<Arc<AtomicU32>>,
    /// How to arm the CQ (off the polling path).
    arm: Option<Box<CqArmMemory>>,
    _keepalive: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: the ring owns its view of CQ memory; the NIC (or the software device)
// is the only other party and synchronises through the owner byte.
unsafe impl Send for CqRing {}

impl std::fmt::Debug for CqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqRing")
            .field("cqn", &self.cqn)
            .field("ci", &self.ci)
            .field("cqe_cnt", &(self.mask + 1))
            .field("compression", &self.zip)
            .finish()
    }
}

impl CqRing {
    /// Takes over CQ memory and initialises every CQE as software-owned-invalid
    /// (`op_own = 0xf1`, `signature = 0xff`), as UCX does after `mlx5dv_init_obj`.
    ///
    /// # Safety
    /// `mem.buf` must be valid for `cqe_cnt * cqe_size` bytes and `mem.dbrec` for
    /// 8 bytes (4-byte aligned), both for the life of the ring (or of
    /// `mem.keepalive`); no other consumer may use this CQ, and the NIC must not
    /// yet write to it. With `mem.arm`, its `uar` must be writable for
    /// `CQ_DOORBELL + 8` bytes, 8-byte aligned, for as long.
    pub unsafe fn new(mem: CqMemory, zip: Compression) -> Result<Self, CqError> {
        if !mem.cqe_cnt.is_power_of_two() || mem.cqe_cnt < 2 || mem.cqe_cnt > 1 << 22 {
            return Err(CqError::BadCqeCount(mem.cqe_cnt));
        }
        let stride_shift = match mem.cqe_size {
            64 => 6,
            128 => 7,
            s => return Err(CqError::BadCqeSize(s)),
        };
        if zip != Compression::Off && mem.cqe_size != 64 {
            return Err(CqError::CompressionNeeds64);
        }
        let ring = Self {
            buf: mem.buf,
            ci: 0,
            mask: mem.cqe_cnt - 1,
            log_cnt: mem.cqe_cnt.trailing_zeros(),
            stride_shift,
            cqe_off: mem.cqe_size - 64,
            dbrec: mem.dbrec,
            zip,
            own_off: if zip == Compression::Enhanced {
                Cqe64::<()>::SIGNATURE_OFFSET
            } else {
                Cqe64::<()>::OP_OWN_OFFSET
            },
            own_mask: if zip == Compression::Enhanced {
                0xff
            } else {
                op_own::OWNER_MASK
            },
            unzip: Box::new(Unzip {
                out: Line([0; 64]),
                title: Line([0; 64]),
                minis: Line([0; 64]),
                left: 0,
                pos: 0,
                title_valid: false,
                block_size: 0,
                wqe_counter: 0,
                session_start: 0,
            }),
            cqn: mem.cqn,
            expanded: 0,
            idle_work: mem.notify.as_ref().and_then(|n| n.idle_work()),
            notify: mem.notify,
            arm: mem.arm.map(Box::new),
            _keepalive: mem.keepalive,
        };
        for i in 0..mem.cqe_cnt {
            let p = ring.cqe_ptr(i);
            // SAFETY: in bounds of the CQ buffer (constructor contract).
            unsafe {
                p.add(Cqe64::<()>::SIGNATURE_OFFSET).write(0xff);
                p.add(Cqe64::<()>::OP_OWN_OFFSET).write(op_own::INITIAL);
            }
        }
        // SAFETY: dbrec valid (constructor contract).
        unsafe { store_dbrec(ring.dbrec, CQ_SET_CI, 0) };
        Ok(ring)
    }

    /// CQ number.
    #[inline(always)]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Number of CQEs.
    #[inline(always)]
    pub fn cqe_cnt(&self) -> u32 {
        self.mask + 1
    }

    /// Completions expanded from mini CQEs so far.
    pub fn expanded(&self) -> u64 {
        self.expanded
    }

    /// The compression layout.
    pub fn compression(&self) -> Compression {
        self.zip
    }

    /// Pointer to the 64-byte CQE of CQ index `n`.
    #[inline(always)]
    fn cqe_ptr(&self, n: u32) -> *mut u8 {
        // SAFETY: (n & mask) << stride_shift is inside the buffer.
        unsafe {
            self.buf
                .as_ptr()
                .add((((n & self.mask) as usize) << self.stride_shift) + self.cqe_off)
        }
    }

    /// Iteration (pass) number of CQ index `n`.
    #[inline(always)]
    fn pass(&self, n: u32) -> u32 {
        n >> self.log_cnt
    }

    #[inline(always)]
    fn sw_owned(&self, n: u32) -> bool {
        // SAFETY: the validity byte of a CQE in the buffer (the signature with
        // enhanced compression, else op_own); read atomically because the NIC
        // writes it.
        let b = unsafe {
            (*(self.cqe_ptr(n).add(self.own_off) as *const AtomicU8)).load(Ordering::Relaxed)
        };
        (b ^ self.pass(n) as u8) & self.own_mask == 0
    }

    /// Polls one completion. Returns `None` when the next CQE still belongs to
    /// the NIC. Does not write the consumer-index doorbell record; call
    /// [`update_ci`](Self::update_ci) after a batch (or use [`poll`](Self::poll)).
    #[inline(always)]
    pub fn poll_one(&mut self) -> Option<Completion<'_>> {
        // An empty CQ costs the owner byte's load (and, on the software
        // device, one more load while it has nothing pending).
        if self.unzip.left == 0 && !self.sw_owned(self.ci) && !self.idle() {
            return None;
        }
        Some(self.take_one())
    }

    /// The CQ was empty: lets the device progress (the software device's
    /// stalled work); true when the next CQE is software-owned now.
    #[inline]
    fn idle(&self) -> bool {
        let Some(n) = &self.notify else {
            return false;
        };
        if let Some(w) = &self.idle_work {
            if w.load(Ordering::Relaxed) == 0 {
                return false;
            }
        }
        n.cq_idle(self.cqn);
        self.sw_owned(self.ci)
    }

    /// Takes the next completion, known to be there (a software-owned CQE or
    /// an unzipped mini CQE).
    #[inline]
    fn take_one(&mut self) -> Completion<'_> {
        if self.unzip.left != 0 {
            return self.next_unzipped();
        }
        let ci = self.ci;
        barrier::from_device();
        let cqe = self.cqe_ptr(ci);
        // SAFETY: the CQE is software-owned now; the NIC will not write it until
        // the consumer index passes it.
        let oo = unsafe { *cqe.add(Cqe64::<()>::OP_OWN_OFFSET) };
        if oo & op_own::FORMAT_MASK == op_own::FORMAT_MASK {
            return self.start_unzip(ci, cqe);
        }
        self.ci = ci.wrapping_add(1);
        self.unzip.title_valid = false;
        barrier::prefetch(self.cqe_ptr(self.ci));
        // SAFETY: a software-owned CQE of 64 bytes inside the buffer.
        let bytes: &[u8; 64] = unsafe { &*(cqe as *const [u8; 64]) };
        let scatter: &[u8] = match oo & op_own::FORMAT_MASK {
            op_own::INLINE_SCATTER_32 => {
                let n = (Cqe64::new_unchecked(&bytes[..]).byte_cnt() as usize).min(32);
                &bytes[..n]
            }
            op_own::INLINE_SCATTER_64 if self.cqe_off == 64 => {
                let n = (Cqe64::new_unchecked(&bytes[..]).byte_cnt() as usize).min(64);
                // SAFETY: with 128-byte CQEs the first half of the entry precedes
                // the CQE and holds the scattered data.
                unsafe { std::slice::from_raw_parts(cqe.sub(64), n) }
            }
            _ => &[],
        };
        Completion::new(bytes, scatter)
    }

    /// Polls up to `max` completions, calling `f` for each, then writes the
    /// consumer index to the doorbell record once. Returns how many were polled.
    #[inline]
    pub fn poll<F: FnMut(&Completion<'_>)>(&mut self, max: usize, mut f: F) -> usize {
        let mut n = 0;
        while n < max {
            match self.poll_one() {
                Some(c) => f(&c),
                None => break,
            }
            n += 1;
        }
        if n != 0 {
            self.update_ci();
        }
        n
    }

    /// Writes the consumer index to the CQ doorbell record, telling the NIC it
    /// may reuse the consumed CQEs.
    #[inline(always)]
    pub fn update_ci(&mut self) {
        // SAFETY: the doorbell record is valid for the ring's life.
        unsafe { store_dbrec(self.dbrec, CQ_SET_CI, self.ci & 0x00ff_ffff) };
    }

    /// Whether the CQ can be armed (it was created on a completion channel).
    pub fn armable(&self) -> bool {
        self.arm.is_some()
    }

    /// Arms the CQ: asks the NIC for one completion event, at the next CQE
    /// (`solicited_only` false) or at the next CQE of a solicited WQE or in
    /// error (`solicited_only` true), delivered to the CQ's completion channel.
    /// This is the PRM's arm sequence, as rdma-core's `mlx5_arm_cq` and UCX
    /// write it: the arm word `sn << 28 | cmd | ci` into the doorbell record's
    /// second word, then `word << 32 | cqn` into the UAR's CQ doorbell. `ci` is
    /// the consumer index now, so if CQEs past it are already in the CQ (one
    /// landed after the last empty poll), the NIC raises the event at once.
    /// One arm gives at most one event; arm again after taking it.
    ///
    /// To sleep without losing a completion, do as verbs users do:
    ///
    /// 1. poll until the CQ is empty;
    /// 2. `arm`;
    /// 3. poll once more, and if that finds completions, handle them and go
    ///    back to 1 (the event the arm raised for them is then a spurious
    ///    wake-up later, which is harmless);
    /// 4. otherwise wait on the channel
    ///    ([`CompletionChannel::wait`](crate::device::CompletionChannel::wait)).
    ///
    /// Step 3 covers devices whose arm only looks at CQEs still to come
    /// (verbs allows that); an mlx5 NIC and the software device compare the
    /// arm's consumer index with their producer index instead.
    ///
    /// # Errors
    /// [`CqError::NoChannel`] when the CQ was not created on a completion
    /// channel.
    pub fn arm(&mut self, solicited_only: bool) -> Result<(), CqError> {
        let Some(a) = self.arm.as_deref() else {
            return Err(CqError::NoChannel(self.cqn));
        };
        let sn = a.events.load(Ordering::Acquire);
        let word = CqArm::new(sn, ArmCmd::of(solicited_only), self.ci);
        let db = word.doorbell(self.cqn).to_be();
        // SAFETY: the doorbell record is valid for the ring's life; the UAR
        // page holds the 8-byte CQ doorbell at CQ_DOORBELL (CqArmMemory's
        // contract, from the backend), 8-byte aligned.
        unsafe {
            store_dbrec(self.dbrec, CQ_ARM_DB, word.raw());
            barrier::wc_start();
            core::ptr::write_volatile(a.uar.as_ptr().add(CQ_DOORBELL) as *mut u64, db);
        }
        barrier::flush_wc();
        if let Some(n) = &self.notify {
            n.cq_arm(self.cqn);
        }
        Ok(())
    }

    #[cold]
    fn start_unzip(&mut self, ci: u32, cqe: *mut u8) -> Completion<'_> {
        match self.zip {
            Compression::Basic => {
                let u = &mut *self.unzip;
                // SAFETY: the title slot is software-owned; the first mini array
                // follows it and is written by the NIC before the title.
                unsafe {
                    std::ptr::copy_nonoverlapping(cqe, u.title.0.as_mut_ptr(), 64);
                }
                let title = Cqe64::new_unchecked(&u.title.0[..]);
                u.left = title.byte_cnt().max(1);
                u.wqe_counter = title.wqe_counter();
                u.pos = 0;
                u.session_start = ci;
                let arr = self.cqe_ptr(ci.wrapping_add(1));
                // SAFETY: a 64-byte slot inside the buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(arr, self.unzip.minis.0.as_mut_ptr(), 64);
                }
            }
            // Enhanced (a compressed slot in a CQ created with compression off is
            // treated the same way: the NIC only writes format 3 when enabled).
            _ => {
                let n = u32::from(
                    // SAFETY: software-owned slot.
                    unsafe { *cqe.add(Cqe64::<()>::OP_OWN_OFFSET) } >> 4,
                ) + 1;
                if !self.unzip.title_valid {
                    let t = self.cqe_ptr(ci.wrapping_sub(1));
                    // SAFETY: the previous CQE is the title; its slot is not reused
                    // by the NIC before the consumer index passes this block.
                    unsafe {
                        std::ptr::copy_nonoverlapping(t, self.unzip.title.0.as_mut_ptr(), 64)
                    };
                    self.unzip.wqe_counter =
                        Cqe64::new_unchecked(&self.unzip.title.0[..]).wqe_counter();
                    self.unzip.title_valid = true;
                } else {
                    self.unzip.wqe_counter = self
                        .unzip
                        .wqe_counter
                        .wrapping_add(self.unzip.block_size as u16);
                }
                self.unzip.block_size = n;
                // SAFETY: software-owned slot of 64 bytes.
                unsafe { std::ptr::copy_nonoverlapping(cqe, self.unzip.minis.0.as_mut_ptr(), 64) };
                // The block stands for CQ indices ci..ci+n; the NIC does not write
                // the other n-1 slots this pass. Stamp them with this pass's
                // iteration count so a later pass cannot mistake them for new CQEs
                // (UCX writes the same marker).
                for i in 1..n {
                    let idx = ci.wrapping_add(i);
                    let p = self.cqe_ptr(idx);
                    // SAFETY: byte 62 of a slot the NIC reserved for this block.
                    unsafe {
                        (*(p.add(Cqe64::<()>::SIGNATURE_OFFSET) as *const AtomicU8))
                            .store(self.pass(idx) as u8, Ordering::Relaxed);
                    }
                }
                self.unzip.left = n;
                self.unzip.pos = 0;
            }
        }
        self.next_unzipped()
    }

    #[inline]
    fn next_unzipped(&mut self) -> Completion<'_> {
        let ci = self.ci;
        let parity = (self.pass(ci) & 1) as u8;
        let basic = self.zip == Compression::Basic;
        let i = self.unzip.pos;
        let per_slot = if basic {
            MINI_PER_BASIC_SLOT
        } else {
            MINI_PER_ENHANCED_SLOT
        } as u32;
        if basic && i >= per_slot && i % per_slot == 0 {
            let arr = self.cqe_ptr(ci);
            // SAFETY: the next mini array of the session, in the buffer.
            unsafe { std::ptr::copy_nonoverlapping(arr, self.unzip.minis.0.as_mut_ptr(), 64) };
        }
        let u = &mut *self.unzip;
        let m = ((i % per_slot) as usize) * 8;
        let mini = MiniCqe::new_unchecked(&u.minis.0[m..m + 8]);
        let (mini_wc, mini_op, mini_bc) =
            (mini.wqe_counter(), mini.s_wqe_opcode(), mini.byte_cnt());
        u.out = u.title;
        let title_oo = u.title.0[Cqe64::<()>::OP_OWN_OFFSET];
        let mut out = Cqe64::new_unchecked(&mut u.out.0[..]);
        out.set_byte_cnt(mini_bc);
        if title_oo >> 4 == CqeOpcode::Req as u8 {
            out.set_wqe_counter(mini_wc);
            let qpn = Cqe64::new_unchecked(&u.title.0[..]).qpn();
            out.set_sop_drop_qpn((u32::from(mini_op) << 24) | qpn);
        } else {
            // Responder: the WQE counter advances by one per mini CQE, from the
            // title's (basic: the title's own CQE is the first; enhanced: the
            // title was already delivered, so the first mini is title + 1).
            let step = if basic { i } else { i + 1 };
            out.set_wqe_counter(u.wqe_counter.wrapping_add(step as u16));
        }
        out.set_op_own((title_oo & 0xf0) | parity);
        u.pos = i + 1;
        u.left -= 1;
        if basic {
            // Rewrite the owner bit of the consumed slot so that, in the next pass,
            // it reads as NIC-owned until the NIC really writes it (Linux
            // mlx5e_cqes_update_owner).
            let p = self.cqe_ptr(ci);
            // SAFETY: byte 63 of a slot of this session, already read.
            unsafe {
                (*(p.add(Cqe64::<()>::OP_OWN_OFFSET) as *const AtomicU8))
                    .store(parity, Ordering::Relaxed);
            }
        }
        self.ci = ci.wrapping_add(1);
        self.expanded += 1;
        Completion::new(&self.unzip.out.0, &[])
    }
}
