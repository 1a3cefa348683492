//! A fabric: the registry and the shared-memory segments of a set of simulated
//! devices, shared by every process that opens the same fabric name. Two
//! processes on one host that open the same fabric talk exactly as two hosts
//! on one network would.
//!
//! A fabric is private to the user who created it: its directory has mode
//! 0700 and its files 0600, and a process of another user that opens it gets
//! [`FabricError::NotOwner`].
//!
//! Each process that opens a fabric joins it as a member: it gets a token
//! that identifies it in the registry (the owner of its entries, the holder
//! of the shared locks it takes), and holds a file lock on `proc-<token>` in
//! the fabric's directory for as long as it lives. Not its pid: the
//! processes of a fabric may be in different PID namespaces (containers that
//! bind-mount one fabric directory), where pids are neither unique nor
//! checkable. See `sim::member`.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::link::{self, Link};
use super::member::{token_of_name, Member};
use super::registry::{self, Registry, CLAIMED, FREE, LIVE, MAX_DEVS, MAX_SEGS};
use super::shm::{unlink, ShmMap};
use pool::{Pool, Range};

pub(crate) mod pool;

pub use crate::types::error::FabricError;
pub(crate) use crate::types::error::FABRIC_ENV;
/// Fabric used when the variable is not set.
pub(crate) const DEFAULT_FABRIC: &str = "default";

/// The mode of a fabric's directory: its owner's only.
pub(crate) const DIR_MODE: u32 = 0o700;

/// Makes sure `dir` is a directory of this process's user with mode
/// [`DIR_MODE`] (tightening an older fabric's 0755); another user's is
/// [`FabricError::NotOwner`].
fn check_private(name: &str, dir: &Path) -> Result<(), FabricError> {
    let io = |source| FabricError::Io {
        name: name.to_owned(),
        source,
    };
    // Not following a symbolic link: the fabric is this directory itself.
    let md = std::fs::symlink_metadata(dir).map_err(io)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if md.uid() != uid {
        return Err(FabricError::NotOwner {
            name: name.to_owned(),
            path: dir.to_owned(),
            owner: md.uid(),
            uid,
        });
    }
    if !md.is_dir() {
        return Err(io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a directory", dir.display()),
        )));
    }
    if md.mode() & 0o777 != DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)).map_err(io)?;
    }
    Ok(())
}

/// Why a registry's magic number is not [`registry::MAGIC`]: made by another
/// version of the software device (its layout differs), or not a registry.
fn bad_magic(dir: &Path, magic: u64) -> io::Error {
    let msg = if magic >> 8 == registry::MAGIC >> 8 {
        format!(
            "{} was made by another version of the software device (registry \
             layout {}, this one uses {}); remove it once no process uses it, or \
             pick another fabric name",
            dir.display(),
            magic & 0xff,
            registry::MAGIC & 0xff
        )
    } else {
        format!("{}: bad registry magic {magic:#x}", dir.display())
    };
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A mapped segment of another process (or our own), cached by slot.
struct CachedSeg {
    gen: u32,
    map: ShmMap,
}

/// Pointer to `len` bytes at `off` of a mapped segment (`base`, `seg_len`), as
/// [`Fabric::segment`] returns it; `None` when the range leaves the segment.
#[inline(always)]
pub(crate) fn in_segment(
    (base, seg_len): (NonNull<u8>, usize),
    off: u64,
    len: u64,
) -> Option<NonNull<u8>> {
    let end = off.checked_add(len)?;
    if end > seg_len as u64 {
        return None;
    }
    // SAFETY: in bounds of the mapping.
    Some(unsafe { NonNull::new_unchecked(base.as_ptr().add(off as usize)) })
}

/// One process's handle on a fabric.
pub struct Fabric {
    name: String,
    dir: PathBuf,
    reg: ShmMap,
    /// Lock-free cache of mapped segments, indexed by slot. Entries are never
    /// freed while the fabric lives (kept alive by `keep`).
    cache: Box<[AtomicPtr<CachedSeg>]>,
    // Boxed so that the addresses in `cache` stay valid when the Vec grows.
    #[allow(clippy::vec_box)]
    keep: Mutex<Vec<Box<CachedSeg>>>,
    /// Memory this process allocated for memory regions, by address, so
    /// that a later registration of part of it (on any device of the fabric)
    /// is reachable from other processes too. Weak: the regions own it; a
    /// range leaves the map when it is dropped.
    region_memory: Mutex<BTreeMap<u64, Weak<Range>>>,
    /// Segments this process carves MRs and queues out of.
    pool: Pool,
    /// This process's token and liveness file. Declared last: it drops (its
    /// file goes, its lock is released) after everything else of the handle.
    member: Member,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").field("name", &self.name).finish()
    }
}

/// The fabrics this process has open, one handle each; weak, so a fabric
/// nobody uses is unmapped.
static FABRICS: OnceLock<Mutex<HashMap<String, Weak<Fabric>>>> = OnceLock::new();

/// The name of the fabric from `MLX5_SIM_FABRIC`, or `default` when it is
/// not set.
pub fn fabric_name_from_env() -> String {
    std::env::var(FABRIC_ENV).unwrap_or_else(|_| DEFAULT_FABRIC.to_owned())
}

fn shm_root() -> PathBuf {
    PathBuf::from("/dev/shm")
}

/// The directory of fabric `name`'s files.
fn dir_of(name: &str) -> PathBuf {
    shm_root().join(format!("mlx5sim-{name}"))
}

impl Fabric {
    /// Opens (creating if needed) the fabric `name`; one handle per process.
    pub fn open(name: &str) -> Result<Arc<Fabric>, FabricError> {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            return Err(FabricError::BadName(name.to_owned()));
        }
        let map = FABRICS.get_or_init(Default::default);
        let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = m.get(name).and_then(Weak::upgrade) {
            return Ok(f);
        }
        let f = Arc::new(Self::open_uncached(name)?);
        f.reap_dead();
        // Fabrics this process has let go of leave no entry behind.
        m.retain(|_, w| w.strong_count() > 0);
        m.insert(name.to_owned(), Arc::downgrade(&f));
        Ok(f)
    }

    fn open_uncached(name: &str) -> Result<Fabric, FabricError> {
        let io = |source| FabricError::Io {
            name: name.to_owned(),
            source,
        };
        // Link models a new fabric starts with.
        let links = match std::env::var(link::LINKS_ENV) {
            Ok(spec) => link::parse_links(&spec).map_err(|source| FabricError::Links {
                name: name.to_owned(),
                source,
            })?,
            Err(_) => Vec::new(),
        };
        let dir = dir_of(name);
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        check_private(name, &dir)?;
        let path = dir.join("registry");
        let len = std::mem::size_of::<Registry>();
        // Built under a private name and published whole, so a process that
        // opens the fabric at the same moment never maps a half-made registry.
        let reg = match ShmMap::create_published(&path, len, |m| {
            // SAFETY: a fresh zero-filled mapping of exactly size_of::<Registry>()
            // bytes; all-zero is a valid Registry of atomics.
            let r = unsafe { &*(m.base().as_ptr() as *const Registry) };
            r.header.magic.store(registry::MAGIC, Ordering::Relaxed);
            for &(dev, l) in &links {
                link::set(r, dev, Some(l));
            }
            r.header.ready.store(1, Ordering::Release);
        }) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let m = ShmMap::open(&path).map_err(io)?;
                if m.len() != len {
                    return Err(io(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "registry {} has another layout (size {})",
                            path.display(),
                            m.len()
                        ),
                    )));
                }
                // SAFETY: size checked; the creator zero-filled it.
                let r = unsafe { &*(m.base().as_ptr() as *const Registry) };
                let t = std::time::Instant::now();
                while r.header.ready.load(Ordering::Acquire) == 0 {
                    if t.elapsed() > std::time::Duration::from_secs(5) {
                        return Err(FabricError::NotReady(name.to_owned()));
                    }
                    std::thread::yield_now();
                }
                let magic = r.header.magic.load(Ordering::Relaxed);
                if magic != registry::MAGIC {
                    return Err(io(bad_magic(&dir, magic)));
                }
                m
            }
            Err(e) => return Err(io(e)),
        };
        // SAFETY: mapped with the Registry layout (size and magic checked,
        // or made here).
        let r = unsafe { &*(reg.base().as_ptr() as *const Registry) };
        // Joined only now that the registry is ready: the token comes from it.
        let member = Member::join(&dir, &r.header.next_token).map_err(io)?;
        Ok(Fabric {
            name: name.to_owned(),
            dir,
            reg,
            cache: (0..MAX_SEGS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            keep: Mutex::new(Vec::new()),
            region_memory: Mutex::new(BTreeMap::new()),
            pool: Pool::default(),
            member,
        })
    }

    /// This process's membership of the fabric: its token, and the liveness
    /// of others.
    #[inline(always)]
    pub(crate) fn member(&self) -> &Member {
        &self.member
    }

    /// This process's token in the fabric: what identifies it in the
    /// registry (nonzero, unique among the fabric's live processes, the same
    /// in every PID namespace). A process that lets go of a fabric and opens
    /// it again gets a new one.
    #[inline]
    pub fn token(&self) -> u32 {
        self.member.token()
    }

    /// Whether the process with fabric token `token` is alive: it holds the
    /// lock on its liveness file `proc-<token>` (three system calls; see
    /// `sim::member`).
    pub fn alive(&self, token: u32) -> bool {
        self.member.alive(token)
    }

    /// Sets device `dev`'s link model (`None`: no model, the port is as fast
    /// as memory). It holds for every process of the fabric, for work executed
    /// from then on; set it before traffic starts. A new fabric takes its
    /// models from [`link::LINKS_ENV`].
    pub fn set_link(&self, dev: u32, link: Option<Link>) -> Result<(), FabricError> {
        if dev as usize >= MAX_DEVS {
            return Err(FabricError::NoDevice(self.name.clone(), dev));
        }
        link::set(self.reg(), dev, link);
        Ok(())
    }

    /// Device `dev`'s link model, if it has one.
    pub fn link(&self, dev: u32) -> Option<Link> {
        ((dev as usize) < MAX_DEVS)
            .then(|| link::get(self.reg(), dev))
            .flatten()
    }

    /// Takes device `dev`'s port down (`down`: a pulled cable, a failed
    /// switch port) or brings it up again, for every process of the fabric
    /// (the state lives in the shared registry), at once.
    ///
    /// While a port is down, nothing crosses a path through it: an RC
    /// requester whose own port or whose responder's port is down gets no
    /// acknowledgement. It sends the WQE again after each local ACK timeout
    /// (the QP's `timeout`, 4.096 µs × 2^timeout on the NIC's clock) and, when
    /// `retry_cnt` retries went unanswered as well — `retry_cnt` + 1 timeouts
    /// after the first try — completes it with TRANSPORT_RETRY_EXC_ERR and
    /// moves the QP to ERR; later WQEs are flushed. The responder's memory,
    /// receive queue and CQs are not touched, and its QP stays as it was. A
    /// port that comes back before the retries run out loses nothing: the
    /// next retry goes through. Work executed before the port went down has
    /// crossed already. The stalled requester makes progress in the owner's
    /// calls (an idle poll of a CQ, `progress`), as RNR retries do.
    ///
    /// Bringing the port up lets new QPs (and QPs still retrying) work; QPs
    /// that went to ERR stay there, as on hardware.
    pub fn set_port_down(&self, dev: u32, down: bool) -> Result<(), FabricError> {
        if dev as usize >= MAX_DEVS {
            return Err(FabricError::NoDevice(self.name.clone(), dev));
        }
        link::set_down(self.reg(), dev, down);
        Ok(())
    }

    /// Whether device `dev`'s port is down (see
    /// [`set_port_down`](Self::set_port_down)); false for a device the fabric
    /// cannot have.
    pub fn port_down(&self, dev: u32) -> bool {
        link::is_down(self.reg(), dev)
    }

    /// Cuts (`down`) the path from device `from` to device `to` one way
    /// only, or restores it, for every process of the fabric, at once: the
    /// packets `from`'s port sends to `to`'s are lost while those `to`
    /// sends to `from` still arrive (a link or a switch that drops one
    /// direction). Cut both ways, the two devices cannot reach each other
    /// while each still reaches the rest of the fabric, unlike a port down.
    ///
    /// RC needs both directions, so QPs of either side fail, each as its
    /// packets do:
    /// - a request from `from` to `to` is lost (as with a port down: see
    ///   [`set_port_down`](Self::set_port_down)): the requester retries after
    ///   each local ACK timeout and, `retry_cnt` + 1 timeouts after its first
    ///   try, completes the WQE with TRANSPORT_RETRY_EXC_ERR (syndrome 0x15)
    ///   and moves the QP to ERR; `to` sees nothing;
    /// - a request from `to` to `from` arrives and is executed — a WRITE's
    ///   bytes land, a SEND or WRITE_IMM consumes and completes a receive,
    ///   an atomic is applied — but its acknowledgement (a READ's response,
    ///   a NAK) is lost: the requester fails the WQE just the same, although
    ///   the work was done. Its retries are duplicates, answered but not
    ///   executed again, so a path restored within the retries completes the
    ///   WQE once. A READ's response is lost before any byte lands.
    ///
    /// DC initiators and targets fare the same per WQE. Restoring the path
    /// lets new QPs (and QPs still retrying) work; QPs that went to ERR stay
    /// there. A cut from a device to itself cuts its loopback.
    pub fn set_path_down(&self, from_dev: u32, to_dev: u32, down: bool) -> Result<(), FabricError> {
        for dev in [from_dev, to_dev] {
            if dev as usize >= MAX_DEVS {
                return Err(FabricError::NoDevice(self.name.clone(), dev));
            }
        }
        link::set_cut(self.reg(), from_dev, to_dev, down);
        Ok(())
    }

    /// Whether the path from device `from_dev` to `to_dev` is cut that way
    /// (see [`set_path_down`](Self::set_path_down); ports down are
    /// [`port_down`](Self::port_down)'s); false for devices the fabric cannot
    /// have.
    pub fn path_down(&self, from_dev: u32, to_dev: u32) -> bool {
        link::is_cut(self.reg(), from_dev, to_dev)
    }

    /// The fabric's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registry.
    #[inline(always)]
    pub(crate) fn reg(&self) -> &Registry {
        // SAFETY: mapped with exactly this layout for the fabric's life.
        unsafe { &*(self.reg.base().as_ptr() as *const Registry) }
    }

    fn seg_path(&self, slot: usize, gen: u32) -> PathBuf {
        self.dir.join(format!("seg-{slot}-{gen}"))
    }

    /// Allocates a zero-filled segment of `len` bytes owned by this process.
    pub(crate) fn alloc_segment(self: &Arc<Self>, len: usize) -> Result<Segment, FabricError> {
        let r = self.reg();
        let slot = r
            .claim_seg()
            .ok_or_else(|| FabricError::Full(self.name.clone(), "segment"))?;
        let e = &r.segs[slot];
        let gen = r.next_gen();
        let path = self.seg_path(slot, gen);
        unlink(&path);
        let len = len.max(1).next_multiple_of(4096);
        let map = match ShmMap::create(&path, len) {
            Ok(m) => m,
            Err(source) => {
                e.state.store(FREE, Ordering::Release);
                return Err(FabricError::Io {
                    name: self.name.clone(),
                    source,
                });
            }
        };
        e.owner.store(self.member.token(), Ordering::Relaxed);
        e.gen.store(gen, Ordering::Relaxed);
        e.len.store(len as u64, Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Release);
        let base = map.base();
        self.install(slot, gen, map);
        Ok(Segment {
            fabric: self.clone(),
            slot: slot as u32,
            base,
            len,
        })
    }

    /// Allocates zeroed memory for a memory region (a [`Range`]: carved
    /// out of a shared segment when small), remembered so that
    /// [`region_memory_containing`] finds it.
    ///
    /// [`region_memory_containing`]: Self::region_memory_containing
    pub(crate) fn alloc_region_memory(
        self: &Arc<Self>,
        len: usize,
    ) -> Result<Arc<Range>, FabricError> {
        let mem = Arc::new(Range::alloc(self, len)?);
        let base = mem.base().as_ptr() as u64;
        let mut m = self.region_memory.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(base, Arc::downgrade(&mem));
        Ok(mem)
    }

    /// The live region memory of this process that holds `[addr, addr+len)`:
    /// the range [`alloc_region_memory`] handed out (not the whole segment
    /// it was carved from), so the registered offset is
    /// `range.off() + (addr - range.base())`, and the range stays allocated
    /// while the caller holds it.
    ///
    /// [`alloc_region_memory`]: Self::alloc_region_memory
    pub(crate) fn region_memory_containing(&self, addr: u64, len: u64) -> Option<Arc<Range>> {
        let end = addr.checked_add(len)?;
        let m = self.region_memory.lock().unwrap_or_else(|e| e.into_inner());
        let (&base, w) = m.range(..=addr).next_back()?;
        let mem = w.upgrade()?;
        (end <= base + mem.len() as u64).then_some(mem)
    }

    /// Forgets the region memory at `base` once no one holds it (called as a
    /// [`Range`] is dropped; a no-op for other ranges).
    pub(crate) fn forget_region_memory(&self, base: u64) {
        let mut m = self.region_memory.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(&base).is_some_and(|w| w.strong_count() == 0) {
            m.remove(&base);
        }
    }

    /// This process's carving pool.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Segments this process carves memory regions and queues out of now:
    /// small objects share 32 MiB segments, one object above 1 MiB has a
    /// segment of its own.
    pub fn carving_segments(&self) -> usize {
        self.pool.segments()
    }

    fn install(&self, slot: usize, gen: u32, map: ShmMap) -> *mut CachedSeg {
        let mut b = Box::new(CachedSeg { gen, map });
        let p: *mut CachedSeg = &mut *b;
        let mut keep = self.keep.lock().unwrap_or_else(|e| e.into_inner());
        keep.push(b);
        self.cache[slot].store(p, Ordering::Release);
        p
    }

    /// Base address and length of segment `slot` in this process, mapping it on
    /// first use. `None` when the segment is not live.
    #[inline]
    pub(crate) fn segment(&self, slot: u32) -> Option<(NonNull<u8>, usize)> {
        let slot = slot as usize;
        if slot >= MAX_SEGS {
            return None;
        }
        let e = &self.reg().segs[slot];
        if e.state.load(Ordering::Acquire) != LIVE {
            return None;
        }
        let gen = e.gen.load(Ordering::Relaxed);
        let p = self.cache[slot].load(Ordering::Acquire);
        // SAFETY: cached entries live as long as the fabric (kept in `keep`).
        if let Some(c) = unsafe { p.as_ref() } {
            if c.gen == gen {
                return Some((c.map.base(), c.map.len()));
            }
        }
        self.map_slow(slot, gen)
    }

    #[cold]
    fn map_slow(&self, slot: usize, gen: u32) -> Option<(NonNull<u8>, usize)> {
        let map = ShmMap::open(&self.seg_path(slot, gen)).ok()?;
        let p = self.install(slot, gen, map);
        // SAFETY: just installed, kept alive by `keep`.
        let c = unsafe { &*p };
        Some((c.map.base(), c.map.len()))
    }

    /// Pointer to `len` bytes at `off` of segment `slot`, bounds-checked.
    #[inline]
    pub(crate) fn seg_ptr(&self, slot: u32, off: u64, len: u64) -> Option<NonNull<u8>> {
        in_segment(self.segment(slot)?, off, len)
    }

    /// Frees every registry entry whose owner process is gone, and its files,
    /// and then the liveness files of dead processes.
    pub fn reap_dead(&self) {
        /// Frees the entries of `table` whose owner `alive` says is dead.
        fn reap<T>(
            table: &[T],
            fields: impl Fn(&T) -> (&AtomicU32, &AtomicU32),
            alive: &mut impl FnMut(u32) -> bool,
            mut on_free: impl FnMut(usize, &T),
        ) {
            for (i, e) in table.iter().enumerate() {
                let (state, owner) = fields(e);
                if state.load(Ordering::Acquire) != LIVE {
                    continue;
                }
                let t = owner.load(Ordering::Relaxed);
                if alive(t)
                    || state
                        .compare_exchange(LIVE, CLAIMED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_err()
                {
                    continue;
                }
                // Between reading the owner and the claim, another reaper
                // may have freed the slot and a live process made it its own
                // (it sets the owner before LIVE): not ours to free.
                if owner.load(Ordering::Relaxed) != t {
                    state.store(LIVE, Ordering::Release);
                    continue;
                }
                on_free(i, e);
                state.store(FREE, Ordering::Release);
            }
        }
        let r = self.reg();
        // Each owner is asked about once per pass (a system call or more).
        let mut known: HashMap<u32, bool> = HashMap::new();
        let alive = &mut |t: u32| *known.entry(t).or_insert_with(|| self.member.alive(t));
        reap(&r.qps[..], |e| (&e.state, &e.owner), alive, |_, _| {});
        reap(&r.srqs[..], |e| (&e.state, &e.owner), alive, |_, _| {});
        reap(&r.cqs[..], |e| (&e.state, &e.owner), alive, |_, _| {});
        reap(&r.chans[..], |e| (&e.state, &e.owner), alive, |_, _| {});
        reap(&r.mrs[..], |e| (&e.state, &e.owner), alive, |_, _| {});
        reap(
            &r.segs[..],
            |e| (&e.state, &e.owner),
            alive,
            |i, e| unlink(&self.seg_path(i, e.gen.load(Ordering::Relaxed))),
        );
        // Last, the files of dead processes: their entries are gone by now
        // (and a dead token stays dead, so no entry can be left behind).
        for t in self.member_tokens() {
            self.member.remove_if_dead(t);
        }
    }

    /// Tokens of the liveness files in the fabric's directory, live or not.
    fn member_tokens(&self) -> Vec<u32> {
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| token_of_name(e.file_name().to_str()?))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether fabric `name` exists (some process created it), without
    /// creating or joining it.
    pub fn exists(name: &str) -> bool {
        dir_of(name).is_dir()
    }

    /// Removes the fabric's files if no live process uses it any more (tests
    /// call this when done; a later open recreates it).
    pub fn remove_if_unused(name: &str) {
        let dir = dir_of(name);
        let opened = Fabric::open(name);
        if let Err(FabricError::NotOwner { .. }) = opened {
            // Another user's: not ours to remove.
            return;
        }
        if let Ok(f) = opened {
            f.reap_dead();
            let r = f.reg();
            let mine = f.token();
            let busy = r.segs.iter().any(|e| {
                e.state.load(Ordering::Acquire) != FREE && e.owner.load(Ordering::Relaxed) != mine
            }) || f
                .member_tokens()
                .into_iter()
                .any(|t| t != mine && f.alive(t));
            if busy {
                return;
            }
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                unlink(&e.path());
            }
        }
        let _ = std::fs::remove_dir(&dir);
        if let Some(m) = FABRICS.get() {
            m.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        }
    }

    /// The directory holding the fabric's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A segment owned by this process; freed (file removed) on drop.
#[derive(Debug)]
pub(crate) struct Segment {
    fabric: Arc<Fabric>,
    slot: u32,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: plain shared memory; see ShmMap.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// Registry slot.
    pub fn slot(&self) -> u32 {
        self.slot
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Pointer at `off`.
    ///
    /// # Panics
    /// When `off` is outside the segment.
    pub fn at(&self, off: usize) -> NonNull<u8> {
        assert!(
            off < self.len,
            "offset {off} outside segment of {} bytes",
            self.len
        );
        // SAFETY: in bounds.
        unsafe { NonNull::new_unchecked(self.base.as_ptr().add(off)) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let r = self.fabric.reg();
        let e = &r.segs[self.slot as usize];
        let gen = e.gen.load(Ordering::Relaxed);
        // The mapping stays in this process's segment cache (a lock-free
        // reader may still hold its address), so its memory would stay
        // allocated with it: give the pages back now. Later reads of the
        // stale mapping see zeros.
        // SAFETY: the whole mapping, page-aligned, of a file nobody may use
        // once it is freed.
        unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_REMOVE) };
        unlink(&self.fabric.seg_path(self.slot as usize, gen));
        e.state.store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fabric whose registry an older version made (the same size, the
    /// layout version before tokens) is refused, and the error says why.
    #[test]
    fn a_fabric_of_another_layout_version_is_refused_clearly() {
        let name = format!("old-layout-{}", std::process::id());
        let dir = dir_of(&name);
        std::fs::DirBuilder::new()
            .mode(DIR_MODE)
            .create(&dir)
            .unwrap();
        let len = std::mem::size_of::<Registry>();
        let m = ShmMap::create(&dir.join("registry"), len).unwrap();
        // SAFETY: a zero-filled mapping of the Registry's size.
        let r = unsafe { &*(m.base().as_ptr() as *const Registry) };
        r.header.magic.store(registry::MAGIC - 1, Ordering::Relaxed);
        r.header.ready.store(1, Ordering::Release);
        let err = Fabric::open(&name).unwrap_err().to_string();
        let versions = format!(
            "layout {}, this one uses {}",
            (registry::MAGIC - 1) & 0xff,
            registry::MAGIC & 0xff
        );
        assert!(
            err.contains("another version") && err.contains(&versions),
            "{err}"
        );
        drop(m);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
