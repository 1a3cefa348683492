//! Data-path micro-benchmark: ns per WQE posted (build + doorbell record +
//! BlueFlame copy into ordinary memory) and ns per CQE polled (plain, enhanced
//! compressed, basic compressed), on queue memory built by hand.
//!
//! `cargo bench -p mlx5 --bench datapath` (or `-- --quick`). Prints the median
//! of several runs; the machine is shared, so compare medians, not single runs.

use std::hint::black_box;
use std::time::Instant;

use mlx5::cq::{Compression, CqMemory, CqRing};
use mlx5::mem::AlignedBuf;
use mlx5::prm::{Cqe64, CqeOpcode, MiniCqe};
use mlx5::sq::{BfMode, Payload, SendQueue, Sge, SqConfig, SqMemory};
use mlx5::wqe_table::OrderedSparse;
use mlx5::Completion;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

struct SqBench {
    _buf: AlignedBuf,
    _db: AlignedBuf,
    _bf: AlignedBuf,
    sq: SendQueue<OrderedSparse<u64>>,
    last_signaled: Option<u16>,
}

impl SqBench {
    fn new(bf_mode: BfMode) -> Self {
        let buf = AlignedBuf::new(1024 * 64);
        let db = AlignedBuf::new(64);
        let bf = AlignedBuf::new(4096);
        let mem = SqMemory {
            buf: buf.as_non_null(),
            wqe_cnt: 1024,
            dbrec: db.as_non_null(),
            bf_reg: bf.as_non_null(),
            bf_half: 256,
            qpn: 0x42,
            notify: None,
            keepalive: None,
        };
        let cfg = SqConfig {
            signal_interval: 64,
            max_inline: 256,
            bf_mode,
        };
        // SAFETY: the buffers are owned by the same struct and outlive the queue's use.
        let sq = unsafe { SendQueue::new(mem, cfg) }.unwrap();
        Self {
            _buf: buf,
            _db: db,
            _bf: bf,
            sq,
            last_signaled: None,
        }
    }

    /// Retires everything posted, as a completion for the last signaled WQE would.
    #[inline(always)]
    fn retire(&mut self) {
        if let Some(wc) = self.last_signaled.take() {
            let mut b = [0u8; 64];
            let mut c = Cqe64::new_unchecked(&mut b[..]);
            c.set_sop_drop_qpn(0x42);
            c.set_wqe_counter(wc);
            let c = Completion::new(&b, &[]);
            self.sq.complete(&c, |u, _| {
                black_box(u);
            });
        }
    }

    #[inline(always)]
    fn post_write_imm(&mut self, i: u64, payload: Payload<'_>) {
        let b = match self
            .sq
            .write_imm(0x7000_0000 + i * 64, 0x1234, i as u32, payload)
        {
            Ok(b) => b,
            Err(_) => {
                self.retire();
                self.sq
                    .write_imm(0x7000_0000 + i * 64, 0x1234, i as u32, payload)
                    .unwrap()
            }
        };
        let wc = b.post(None);
        if self.sq.bb(wc)[11] & mlx5::prm::ctrl_flags::CQ_UPDATE != 0 {
            self.last_signaled = Some(wc);
        }
    }
}

/// The floor under a post with a BlueFlame copy: copy 48 bytes into a ring
/// slot, store a doorbell word, copy the 64-byte slot to another page with
/// 8-byte stores, `sfence`. Same run, same machine: the ratio is the figure.
fn reference_post(n: u64, runs: usize) -> f64 {
    let src = [0x5au8; 48];
    let mut ring = AlignedBuf::new(1024 * 64);
    let mut bf = AlignedBuf::new(4096);
    let mut res = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for i in 0..n {
            let slot = (i as usize & 1023) * 64;
            let r = ring.as_mut_slice();
            r[slot..slot + 48].copy_from_slice(black_box(&src));
            r[slot + 8..slot + 12].copy_from_slice(&(i as u32).to_be_bytes());
            let dst = bf.as_mut_slice().as_mut_ptr();
            // SAFETY: both regions are 64 bytes inside their buffers, 8-aligned.
            unsafe {
                let s = ring.as_ptr().add(slot) as *const u64;
                let d = dst.add((i as usize & 1) * 256) as *mut u64;
                for k in 0..8 {
                    std::ptr::write_volatile(d.add(k), std::ptr::read(s.add(k)));
                }
            }
            mlx5::flush_wc();
        }
        res.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    let m = median(res);
    println!(
        "ref   {:<44} {m:>7.2} ns/WQE",
        "48 B copy + 64 B BF-style copy + sfence"
    );
    m
}

fn bench_post(
    name: &str,
    n: u64,
    runs: usize,
    bf_mode: BfMode,
    batch: u64,
    inline: usize,
    reference: f64,
) {
    let sge = [Sge {
        addr: 0x10_0000,
        len: 32,
        lkey: 7,
    }];
    let data = vec![0x5au8; inline];
    let mut res = Vec::new();
    for _ in 0..runs {
        let mut b = SqBench::new(bf_mode);
        let t = Instant::now();
        let mut i = 0;
        while i < n {
            for _ in 0..batch {
                let p = if inline > 0 {
                    Payload::Inline(&data)
                } else {
                    Payload::Sges(&sge)
                };
                b.post_write_imm(i, p);
                i += 1;
            }
            b.sq.ring_doorbell();
        }
        res.push(t.elapsed().as_nanos() as f64 / n as f64);
        black_box(&b.sq);
    }
    let m = median(res);
    println!(
        "post  {name:<44} {m:>7.2} ns/WQE  ({:.2}x ref)",
        m / reference
    );
}

struct CqBench {
    buf: AlignedBuf,
    _db: AlignedBuf,
    ring: CqRing,
    cnt: u32,
    pi: u32,
}

impl CqBench {
    fn new(cnt: u32, zip: Compression) -> Self {
        let buf = AlignedBuf::new(cnt as usize * 64);
        let db = AlignedBuf::new(64);
        let mem = CqMemory {
            buf: buf.as_non_null(),
            cqe_cnt: cnt,
            cqe_size: 64,
            dbrec: db.as_non_null(),
            cqn: 1,
            notify: None,
            keepalive: None,
            arm: None,
        };
        // SAFETY: the buffers live in the same struct as the ring.
        let ring = unsafe { CqRing::new(mem, zip) }.unwrap();
        Self {
            buf,
            _db: db,
            ring,
            cnt,
            pi: 0,
        }
    }
    fn slot(&mut self, n: u32) -> &mut [u8] {
        let i = (n & (self.cnt - 1)) as usize * 64;
        &mut self.buf.as_mut_slice()[i..i + 64]
    }
    fn stamp(&mut self, n: u32, hi: u8, enhanced: bool) {
        let pass = n / self.cnt;
        let s = self.slot(n);
        if enhanced {
            s[62] = pass as u8;
        }
        s[63] = hi | (pass & 1) as u8;
    }
    fn plain(&mut self, enhanced: bool) {
        let n = self.pi;
        let mut c = Cqe64::new_unchecked(self.slot(n));
        c.set_sop_drop_qpn(0x42);
        c.set_wqe_counter(n as u16);
        c.set_byte_cnt(32);
        c.set_imm_inval_pkey(n);
        self.stamp(n, (CqeOpcode::RespWrImm as u8) << 4, enhanced);
        self.pi += 1;
    }
    fn enhanced_block(&mut self, k: u32) {
        let n = self.pi;
        let s = self.slot(n);
        for i in 0..k as usize {
            MiniCqe::new_unchecked(&mut s[i * 8..i * 8 + 8]).set_responder_hash(0, 32);
        }
        self.stamp(n, (((k - 1) as u8) << 4) | 0x0c, true);
        self.pi += k;
    }
    fn basic_session(&mut self, k: u32) {
        let n = self.pi;
        for g in 0..k.div_ceil(8) {
            let at = if g == 0 { n + 1 } else { n + 8 * g };
            let s = self.slot(at);
            for i in 0..8 {
                MiniCqe::new_unchecked(&mut s[i * 8..i * 8 + 8]).set_responder_hash(0, 32);
            }
        }
        let mut c = Cqe64::new_unchecked(self.slot(n));
        c.set_sop_drop_qpn(0x42);
        c.set_byte_cnt(k);
        self.stamp(n, ((CqeOpcode::RespWrImm as u8) << 4) | 0x0c, false);
        self.pi += k;
    }
}

/// The floor under polling: read one word of each 64-byte line of a 4096-entry
/// buffer the "NIC" just wrote.
fn reference_poll(rounds: usize, runs: usize) -> f64 {
    let cnt = 4096usize;
    let mut buf = AlignedBuf::new(cnt * 64);
    let mut res = Vec::new();
    for _ in 0..runs {
        let mut ns = 0u128;
        for r in 0..rounds {
            for (i, line) in buf.as_mut_slice().chunks_exact_mut(64).enumerate() {
                line[56..64].copy_from_slice(&((r + i) as u64).to_le_bytes());
            }
            let t = Instant::now();
            let mut sum = 0u64;
            for line in buf.as_slice().chunks_exact(64) {
                sum = sum.wrapping_add(u64::from_le_bytes(line[56..64].try_into().unwrap()));
            }
            ns += t.elapsed().as_nanos();
            black_box(sum);
        }
        res.push(ns as f64 / (rounds * cnt) as f64);
    }
    let m = median(res);
    println!(
        "ref   {:<44} {m:>7.2} ns/CQE",
        "read one word per 64 B line"
    );
    m
}

fn bench_poll(name: &str, rounds: usize, runs: usize, zip: Compression, reference: f64) {
    let cnt = 4096u32;
    let mut res = Vec::new();
    for _ in 0..runs {
        let mut b = CqBench::new(cnt, zip);
        let mut total = 0u64;
        let mut ns = 0u128;
        for _ in 0..rounds {
            // The "NIC" fills the CQ (not timed).
            let end = b.pi + cnt;
            while b.pi < end {
                match zip {
                    Compression::Off => b.plain(false),
                    Compression::Enhanced => {
                        if end - b.pi >= 8 {
                            b.plain(true);
                            b.enhanced_block(7);
                        } else {
                            b.plain(true);
                        }
                    }
                    Compression::Basic => {
                        if end - b.pi >= 64 {
                            b.basic_session(64);
                        } else {
                            b.plain(false);
                        }
                    }
                }
            }
            let t = Instant::now();
            let mut sum = 0u64;
            let got = b.ring.poll(usize::MAX, |c| {
                sum = sum.wrapping_add(u64::from(c.byte_cnt()) + u64::from(c.wqe_counter()));
            });
            ns += t.elapsed().as_nanos();
            black_box(sum);
            assert_eq!(got as u32, cnt);
            total += u64::from(cnt);
        }
        res.push(ns as f64 / total as f64);
    }
    let m = median(res);
    println!(
        "poll  {name:<44} {m:>7.2} ns/CQE  ({:.2}x ref)",
        m / reference
    );
}

fn main() {
    mlx5::log_to_stderr();
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds, runs) = if quick {
        (200_000, 50, 3)
    } else {
        (5_000_000, 400, 7)
    };
    println!("mlx5 data path on ordinary memory (median of {runs} runs)");
    let r = reference_post(n, runs);
    let post = |name: &str, mode, batch, inline| bench_post(name, n, runs, mode, batch, inline, r);
    post(
        "WRITE_IMM 1 SGE, doorbell each, BF copy",
        BfMode::Auto,
        1,
        0,
    );
    post(
        "WRITE_IMM 1 SGE, doorbell each, 8-byte DB",
        BfMode::DoorbellOnly,
        1,
        0,
    );
    post(
        "WRITE_IMM 32 B inline, doorbell each, BF copy",
        BfMode::Auto,
        1,
        32,
    );
    post(
        "WRITE_IMM 1 SGE, batch of 16, one doorbell",
        BfMode::Auto,
        16,
        0,
    );
    let r = reference_poll(rounds, runs);
    let poll = |name: &str, zip| bench_poll(name, rounds, runs, zip, r);
    poll("plain CQEs", Compression::Off);
    poll(
        "enhanced compressed (title + blocks of 7)",
        Compression::Enhanced,
    );
    poll("basic compressed (sessions of 64)", Compression::Basic);
}
