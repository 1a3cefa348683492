//! The hardware backend's control path: devices, ports and GIDs, PDs, MRs,
//! CQs (through `mlx5dv_create_cq`), SRQs, RC QPs and their state changes, and
//! `mlx5dv_init_obj`, which hands the real queue memory, doorbell records and
//! BlueFlame register to the same data path the software device feeds.
//!
//! Not yet run on a NIC: compiled, checked against the installed headers by the
//! ABI test, and reviewed.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::channel::{CqEvents, HwChannel};
use super::ctx::Ctx;
use super::ffi::*;
use super::loader::{errno, verbs, HwError, Verbs};
use crate::cq::{Compression, CqArmMemory, CqMemory, CqRing};
use crate::prm::cqe_res_format;
use crate::rq::{RecvQueue, RqMemory, Srq, SrqTopology};
use crate::sq::{SendQueue, SqConfig, SqMemory};
use crate::types::{ConnInfo, QpCaps, RtrAttr, RtsAttr};
use crate::wqe_table::{RecvTable, SendTable};

/// A GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidInfo {
    /// Index in the table.
    pub index: u32,
    /// The GID.
    pub gid: [u8; 16],
    /// `IBV_GID_TYPE_*` (0 IB, 1 RoCE v1, 2 RoCE v2).
    pub gid_type: u32,
}

/// A port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub num: u8,
    /// `IBV_PORT_*` state (4 = active).
    pub state: u32,
    /// Active MTU code (1 = 256 … 5 = 4096).
    pub active_mtu: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// 1 InfiniBand, 2 Ethernet.
    pub link_layer: u8,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Non-zero GIDs.
    pub gids: Vec<GidInfo>,
}

/// mlx5 capabilities that matter to this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mlx5Caps {
    /// `mlx5dv_context.flags`.
    pub flags: u64,
    /// Largest compressed session (0: no CQE compression).
    pub cqe_comp_max_num: u32,
    /// Supported mini CQE formats (`MLX5DV_CQE_RES_FORMAT_*` bits).
    pub cqe_comp_formats: u32,
}

/// What `ibv_devinfo` shows, plus the mlx5 capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`mlx5_0`, `rxe0`, …).
    pub name: String,
    /// Whether libmlx5 drives it (the direct data path applies).
    pub is_mlx5: bool,
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// PCI vendor id and part id.
    pub vendor: (u32, u32),
    /// Limits: QPs, WRs per QP, CQEs per CQ, SGEs, SRQ WRs.
    pub max_qp: i32,
    /// See `max_qp`.
    pub max_qp_wr: i32,
    /// See `max_qp`.
    pub max_cqe: i32,
    /// See `max_qp`.
    pub max_sge: i32,
    /// See `max_qp`.
    pub max_srq_wr: i32,
    /// Ports.
    pub ports: Vec<PortInfo>,
    /// mlx5 capabilities (mlx5 devices only).
    pub mlx5: Option<Mlx5Caps>,
}

pub(super) fn verb(name: &'static str, rc: c_int) -> Result<(), HwError> {
    if rc == 0 {
        Ok(())
    } else {
        // Verbs return -errno or set errno and return -1.
        Err(HwError::Verb {
            verb: name,
            errno: if rc > 0 {
                rc
            } else if rc < -1 {
                -rc
            } else {
                errno()
            },
        })
    }
}

/// What the verbs data path takes of an object: a keep-alive, the object, and
/// the provider's entry point(s) for it.
pub(super) struct VerbsParts<T, F> {
    pub keep: Arc<dyn Send + Sync>,
    pub obj: NonNull<T>,
    pub entry: F,
}

/// The provider's data-path entry points (`struct ibv_context_ops`), as
/// verbs.h's inline `ibv_post_send` / `ibv_poll_cq` reach them.
fn ops(c: &Ctx) -> &ibv_context_ops {
    // SAFETY: a live context; `ops` sits right after the device pointer in
    // every rdma-core since the extended context was introduced (ABI test).
    unsafe { &(*c.ctx.as_ptr()).ops }
}

pub(super) fn nonnull<T>(name: &'static str, p: *mut T) -> Result<NonNull<T>, HwError> {
    NonNull::new(p).ok_or_else(|| HwError::Verb {
        verb: name,
        errno: errno(),
    })
}

/// The device list, freed on drop.
struct DevList<'a> {
    v: &'a Verbs,
    list: *mut *mut ibv_device,
    n: usize,
}

impl<'a> DevList<'a> {
    fn get(v: &'a Verbs) -> Result<DevList<'a>, HwError> {
        let mut n: c_int = 0;
        // SAFETY: the documented call; a null return means no devices or no
        // kernel support (errno says which), both "no device" to us.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() || n <= 0 {
            if !list.is_null() {
                // SAFETY: a list returned by get_device_list.
                unsafe { (v.free_device_list)(list) };
            }
            return Err(HwError::NoDevice);
        }
        Ok(DevList {
            v,
            list,
            n: n as usize,
        })
    }
    fn devices(&self) -> impl Iterator<Item = (*mut ibv_device, String)> + '_ {
        (0..self.n).map(move |i| {
            // SAFETY: i < n entries of the list.
            let d = unsafe { *self.list.add(i) };
            // SAFETY: a device of the list; the name is a C string owned by it.
            let name = unsafe { CStr::from_ptr((self.v.get_device_name)(d)) }
                .to_string_lossy()
                .into_owned();
            (d, name)
        })
    }
}

impl Drop for DevList<'_> {
    fn drop(&mut self) {
        // SAFETY: returned by get_device_list.
        unsafe { (self.v.free_device_list)(self.list) };
    }
}

/// Names of the RDMA devices present.
pub fn list_devices() -> Result<Vec<String>, HwError> {
    let v = verbs()?;
    Ok(DevList::get(v)?.devices().map(|(_, n)| n).collect())
}

/// An opened RDMA device.
#[derive(Clone)]
pub struct HwContext {
    pub(super) c: Arc<Ctx>,
    port: u8,
    pub(super) lid: u16,
    pub(super) gid: GidInfo,
    pub(super) mtu: u32,
    pub(super) link_layer: u8,
}

impl std::fmt::Debug for HwContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HwContext")
            .field("name", &self.c.name)
            .field("port", &self.port)
            .finish()
    }
}

impl HwContext {
    /// Opens device `name` on port 1, choosing a RoCE v2 GID (an IPv4-mapped one
    /// first) on Ethernet ports.
    pub fn open(name: &str) -> Result<HwContext, HwError> {
        let c = open_ctx(name)?;
        let port = query_port(&c, 1)?;
        let gid = choose_gid(&port).ok_or(HwError::Verb {
            verb: "ibv_query_gid (no usable GID)",
            errno: libc::ENOENT,
        })?;
        Ok(HwContext {
            c,
            port: 1,
            lid: port.lid,
            gid,
            mtu: port.active_mtu,
            link_layer: port.link_layer,
        })
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.c.name
    }

    /// Whether the direct (mlx5) data path applies.
    pub fn is_mlx5(&self) -> bool {
        self.c.is_mlx5
    }

    /// Port 1's LID (0 on Ethernet).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The GID chosen for connections.
    pub fn gid(&self) -> GidInfo {
        self.gid
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<HwPd, HwError> {
        // SAFETY: a live context.
        let pd = nonnull("ibv_alloc_pd", unsafe {
            (self.c.v.alloc_pd)(self.c.ctx.as_ptr())
        })?;
        Ok(HwPd {
            p: Arc::new(PdInner {
                c: self.c.clone(),
                pd,
            }),
        })
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> Result<HwChannel, HwError> {
        HwChannel::new(&self.c)
    }

    /// Creates a CQ: on mlx5 through `mlx5dv_create_cq`, with CQE compression
    /// in the requested layout when the device supports it; on other devices a
    /// plain verbs CQ.
    pub fn create_cq(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
    ) -> Result<HwCq, HwError> {
        self.create_cq_on(cqe_cnt, cqe_size, zip, None)
    }

    /// [`create_cq`](Self::create_cq), with the CQ's completion events going
    /// to `channel` (a channel of this device) when given.
    pub fn create_cq_on(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
        channel: Option<&HwChannel>,
    ) -> Result<HwCq, HwError> {
        if channel.is_some_and(|ch| !ch.is_on(&self.c)) {
            return Err(HwError::Verb {
                verb: "ibv_create_cq (a completion channel of another device)",
                errno: libc::EINVAL,
            });
        }
        // The CQ's cq_context: where its events are counted.
        let events = channel.map(|_| {
            Arc::new(CqEvents {
                cqn: std::sync::atomic::AtomicU32::new(0),
                taken: Arc::new(std::sync::atomic::AtomicU32::new(0)),
            })
        });
        let cq = HwCq {
            q: Arc::new(self.create_cq_raw(cqe_cnt, cqe_size, zip, events, channel.cloned())?),
        };
        if let Some(e) = &cq.q.events {
            e.cqn.store(cq.cqn()?, Ordering::Relaxed);
        }
        Ok(cq)
    }

    fn create_cq_raw(
        &self,
        cqe_cnt: u32,
        cqe_size: usize,
        zip: Compression,
        events: Option<Arc<CqEvents>>,
        chan: Option<HwChannel>,
    ) -> Result<CqInner, HwError> {
        let cq_context = events
            .as_ref()
            .map_or(std::ptr::null_mut(), |e| Arc::as_ptr(e) as *mut c_void);
        let channel = chan.as_ref().map_or(std::ptr::null_mut(), HwChannel::raw);
        if !self.c.is_mlx5 {
            // A verbs CQ: enough for the control path (and the verbs data path
            // to come); it has no direct data path (`ring` says so).
            // SAFETY: a live context and channel (or none); vector 0.
            let cq = nonnull("ibv_create_cq", unsafe {
                (self.c.v.create_cq)(
                    self.c.ctx.as_ptr(),
                    cqe_cnt as c_int,
                    cq_context,
                    channel,
                    0,
                )
            })?;
            return Ok(CqInner {
                c: self.c.clone(),
                cq,
                zip: Compression::Off,
                taken: AtomicBool::new(false),
                events,
                chan,
            });
        }
        let m = self.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let caps = mlx5_caps(&self.c)?;
        let mut attr = ibv_cq_init_attr_ex {
            cqe: cqe_cnt,
            cq_context,
            channel,
            ..Default::default()
        };
        let mut dv = mlx5dv_cq_init_attr {
            comp_mask: MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
            cqe_size: cqe_size as u16,
            ..Default::default()
        };
        let zip = if zip != Compression::Off
            && caps.cqe_comp_max_num > 0
            && caps.cqe_comp_formats & cqe_res_format::HASH != 0
        {
            dv.comp_mask |= MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE;
            dv.cqe_comp_res_format = cqe_res_format::HASH as u8;
            zip
        } else {
            Compression::Off
        };
        // SAFETY: valid attribute structs for the call's duration.
        let cq = nonnull("mlx5dv_create_cq", unsafe {
            (m.create_cq)(self.c.ctx.as_ptr(), &mut attr, &mut dv)
        })?;
        Ok(CqInner {
            c: self.c.clone(),
            cq,
            zip,
            taken: AtomicBool::new(false),
            events,
            chan,
        })
    }

    /// BlueFlame register half size and the largest inline payload a QP gets,
    /// probed by creating a throwaway CQ and QP (`mlx5dv_init_obj` reports the
    /// former, `ibv_create_qp` the latter).
    pub fn probe_bf_and_inline(&self) -> Result<(u32, u32), HwError> {
        let pd = self.alloc_pd()?;
        let cq = self.create_cq(64, 64, Compression::Off)?;
        let mut last = None;
        for inline in [512u32, 256, 128, 64, 0] {
            let caps = QpCaps {
                sq_wqe_cnt: 64,
                rq_wqe_cnt: 1,
                max_recv_sge: 1,
                max_inline: inline,
            };
            match pd.create_qp(&cq, &cq, None, &caps) {
                Ok(qp) => {
                    let bf = qp.dv()?.bf.size;
                    return Ok((bf, qp.q.max_inline));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(HwError::NoDevice))
    }

    /// Queries port 1 again.
    pub fn port(&self) -> Result<PortInfo, HwError> {
        query_port(&self.c, self.port)
    }
}

/// Opens device `name`.
fn open_ctx(name: &str) -> Result<Arc<Ctx>, HwError> {
    let v = verbs()?;
    let list = DevList::get(v)?;
    let (dev, _) =
        list.devices()
            .find(|(_, n)| n == name)
            .ok_or_else(|| HwError::UnknownDevice {
                name: name.to_owned(),
                present: list
                    .devices()
                    .map(|(_, n)| n)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
    // SAFETY: a device of the live list.
    let is_mlx5 = v
        .mlx5
        .as_ref()
        .is_ok_and(|m| unsafe { (m.is_supported)(dev) });
    // SAFETY: as above.
    let ctx = nonnull("ibv_open_device", unsafe { (v.open_device)(dev) })?;
    Ok(Arc::new(Ctx {
        v,
        ctx,
        name: name.to_owned(),
        is_mlx5,
    }))
}

fn query_port(c: &Ctx, num: u8) -> Result<PortInfo, HwError> {
    let mut pa = ibv_port_attr::default();
    // SAFETY: the exported symbol fills the compat prefix of the zeroed struct,
    // as verbs.h's inline ibv_query_port does.
    verb("ibv_query_port", unsafe {
        (c.v.query_port)(c.ctx.as_ptr(), num, &mut pa)
    })?;
    let mut gids = Vec::new();
    for i in 0..pa.gid_tbl_len.max(0) as u32 {
        let mut e = ibv_gid_entry::default();
        // SAFETY: a zeroed entry of the size we pass.
        let rc = unsafe {
            (c.v.query_gid_ex)(
                c.ctx.as_ptr(),
                u32::from(num),
                i,
                &mut e,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        if rc == 0 && e.gid.raw != [0; 16] {
            gids.push(GidInfo {
                index: i,
                gid: e.gid.raw,
                gid_type: e.gid_type,
            });
        }
    }
    Ok(PortInfo {
        num,
        state: pa.state,
        active_mtu: pa.active_mtu,
        lid: pa.lid,
        link_layer: pa.link_layer,
        max_msg_sz: pa.max_msg_sz,
        gids,
    })
}

/// InfiniBand: GID 0. Ethernet: a RoCE v2 GID, IPv4-mapped first.
fn choose_gid(p: &PortInfo) -> Option<GidInfo> {
    if p.link_layer != IBV_LINK_LAYER_ETHERNET {
        return p.gids.first().copied();
    }
    let v2 = p.gids.iter().filter(|g| g.gid_type == IBV_GID_TYPE_ROCE_V2);
    let v4_mapped = |g: &&GidInfo| g.gid[..10] == [0; 10] && g.gid[10..12] == [0xff, 0xff];
    v2.clone()
        .find(v4_mapped)
        .or_else(|| v2.clone().next())
        .copied()
}

fn mlx5_caps(c: &Ctx) -> Result<Mlx5Caps, HwError> {
    let m = c.v.mlx5.as_ref().map_err(Clone::clone)?;
    let mut dv = mlx5dv_context {
        comp_mask: MLX5DV_CONTEXT_MASK_CQE_COMPRESION,
        ..Default::default()
    };
    // SAFETY: a zeroed, full-size mlx5dv_context.
    verb("mlx5dv_query_device", unsafe {
        (m.query_device)(c.ctx.as_ptr(), &mut dv)
    })?;
    let comp = dv.comp_mask & MLX5DV_CONTEXT_MASK_CQE_COMPRESION != 0;
    Ok(Mlx5Caps {
        flags: dv.flags,
        cqe_comp_max_num: if comp { dv.cqe_comp_caps.max_num } else { 0 },
        cqe_comp_formats: if comp {
            dv.cqe_comp_caps.supported_format
        } else {
            0
        },
    })
}

/// Everything `mlx5-info` shows about device `name`.
pub fn query_device(name: &str) -> Result<DeviceInfo, HwError> {
    // Opened without choosing a GID: a port without a usable one still has
    // information to show.
    let c = &open_ctx(name)?;
    let mut a = ibv_device_attr::default();
    // SAFETY: a live context and a zeroed attribute struct.
    verb("ibv_query_device", unsafe {
        (c.v.query_device)(c.ctx.as_ptr(), &mut a)
    })?;
    let fw: Vec<u8> = a
        .fw_ver
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as u8)
        .collect();
    let mut ports = Vec::new();
    for p in 1..=a.phys_port_cnt {
        ports.push(query_port(c, p)?);
    }
    Ok(DeviceInfo {
        name: name.to_owned(),
        is_mlx5: c.is_mlx5,
        fw_ver: String::from_utf8_lossy(&fw).into_owned(),
        node_guid: u64::from_be(a.node_guid),
        vendor: (a.vendor_id, a.vendor_part_id),
        max_qp: a.max_qp,
        max_qp_wr: a.max_qp_wr,
        max_cqe: a.max_cqe,
        max_sge: a.max_sge,
        max_srq_wr: a.max_srq_wr,
        ports,
        mlx5: if c.is_mlx5 { Some(mlx5_caps(c)?) } else { None },
    })
}

pub(super) struct PdInner {
    pub(super) c: Arc<Ctx>,
    pub(super) pd: NonNull<ibv_pd>,
}
// SAFETY: verbs objects may be used from any thread.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}
impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: allocated by alloc_pd; MRs, SRQs and QPs holding it are gone.
        unsafe { (self.c.v.dealloc_pd)(self.pd.as_ptr()) };
    }
}

/// A protection domain on hardware.
#[derive(Clone)]
pub struct HwPd {
    pub(super) p: Arc<PdInner>,
}

/// Where an MR's memory came from.
enum Backing {
    /// The caller's memory.
    Borrowed,
    /// `mmap`ed by us, `len` bytes from `ptr` (in 2 MiB huge pages when
    /// `huge`), unmapped on drop.
    Mapped {
        ptr: NonNull<u8>,
        len: usize,
        huge: bool,
    },
}

struct MrInner {
    pd: Arc<PdInner>,
    mr: NonNull<ibv_mr>,
    backing: Backing,
}
// SAFETY: as for PdInner.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}
impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: registered by reg_mr.
        unsafe { (self.pd.c.v.dereg_mr)(self.mr.as_ptr()) };
        if let Backing::Mapped { ptr, len, .. } = self.backing {
            // SAFETY: mapped by alloc_mr with this length (for a huge
            // mapping, a multiple of its page size, as munmap wants).
            unsafe { libc::munmap(ptr.as_ptr() as *mut c_void, len) };
        }
    }
}

/// A memory region on hardware.
#[derive(Clone)]
pub struct HwMr {
    m: Arc<MrInner>,
}

impl HwMr {
    fn raw(&self) -> &ibv_mr {
        // SAFETY: a live MR.
        unsafe { self.m.mr.as_ref() }
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }
    /// Address.
    pub fn addr(&self) -> u64 {
        self.raw().addr as u64
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.raw().length
    }
    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the region lies in 2 MiB huge pages: allocated by
    /// [`HwPd::alloc_mr`] with `huge` while the reservation had pages to
    /// give. False for registered memory of the caller's, whatever backs it.
    pub fn is_huge(&self) -> bool {
        matches!(self.m.backing, Backing::Mapped { huge: true, .. })
    }
}

/// Huge page size [`HwPd::alloc_mr`] asks for.
const HUGE_PAGE: usize = 2 << 20;

impl HwPd {
    /// Registers `[addr, addr+len)`.
    ///
    /// # Safety
    /// The memory must stay valid until the MR is dropped.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: u32) -> Result<HwMr, HwError> {
        let p = &self.p;
        // SAFETY: caller's contract for the memory; a live PD.
        let mr = nonnull("ibv_reg_mr", unsafe {
            (p.c.v.reg_mr)(p.pd.as_ptr(), addr as *mut c_void, len, access as c_int)
        })?;
        Ok(HwMr {
            m: Arc::new(MrInner {
                pd: p.clone(),
                mr,
                backing: Backing::Borrowed,
            }),
        })
    }

    /// Allocates `len` zeroed bytes and registers them. With `huge`, in 2 MiB
    /// huge pages (`MAP_HUGETLB | MAP_HUGE_2MB`, the mapping rounded up to a
    /// multiple of 2 MiB) from the pool `vm.nr_hugepages` reserves; when the
    /// pool cannot supply them, in normal pages, as without `huge`.
    /// [`HwMr::is_huge`] tells which.
    pub fn alloc_mr(&self, len: usize, access: u32, huge: bool) -> Result<HwMr, HwError> {
        let map = |flags: c_int, len: usize| {
            // SAFETY: an anonymous private mapping; the kernel picks the address.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                    -1,
                    0,
                )
            };
            (p != libc::MAP_FAILED).then_some((p as *mut u8, len))
        };
        // A hugetlb mapping reserves its pages in the pool when it is made
        // (ENOMEM when the pool has too few free), so the fallback happens
        // here, never as a SIGBUS at first touch.
        let huge_map = if huge {
            map(
                libc::MAP_HUGETLB | libc::MAP_HUGE_2MB,
                len.max(1).next_multiple_of(HUGE_PAGE),
            )
        } else {
            None
        };
        let got_huge = huge_map.is_some();
        let (p, mlen) = huge_map
            .or_else(|| map(0, len.max(1).next_multiple_of(4096)))
            .ok_or(HwError::Verb {
                verb: "mmap",
                errno: errno(),
            })?;
        // SAFETY: freshly mapped memory, unmapped only after dereg (MrInner::drop).
        let mr = unsafe { self.reg_mr(p, len, access) };
        match mr {
            Ok(mut m) => {
                let inner = Arc::get_mut(&mut m.m).expect("fresh MR is unshared");
                inner.backing = Backing::Mapped {
                    ptr: NonNull::new(p).expect("mmap returned non-null"),
                    len: mlen,
                    huge: got_huge,
                };
                Ok(m)
            }
            Err(e) => {
                // SAFETY: mapped above, not registered.
                unsafe { libc::munmap(p as *mut c_void, mlen) };
                Err(e)
            }
        }
    }

    /// Creates an SRQ.
    pub fn create_srq(&self, wqe_cnt: u32, max_sge: u32) -> Result<HwSrq, HwError> {
        let p = &self.p;
        let mut a = ibv_srq_init_attr {
            attr: ibv_srq_attr {
                max_wr: wqe_cnt,
                max_sge,
                srq_limit: 0,
            },
            ..Default::default()
        };
        // SAFETY: a live PD and a valid attribute struct.
        let srq = nonnull("ibv_create_srq", unsafe {
            (p.c.v.create_srq)(p.pd.as_ptr(), &mut a)
        })?;
        Ok(HwSrq {
            s: Arc::new(SrqInner {
                pd: p.clone(),
                srq,
                taken: AtomicBool::new(false),
            }),
        })
    }

    /// Creates an RC QP on `srq` or with its own RQ.
    pub fn create_qp(
        &self,
        send_cq: &HwCq,
        recv_cq: &HwCq,
        srq: Option<&HwSrq>,
        caps: &QpCaps,
    ) -> Result<HwQp, HwError> {
        let p = &self.p;
        let mut a = ibv_qp_init_attr {
            send_cq: send_cq.q.cq.as_ptr(),
            recv_cq: recv_cq.q.cq.as_ptr(),
            srq: srq.map_or(std::ptr::null_mut(), |s| s.s.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: caps.sq_wqe_cnt,
                max_recv_wr: if srq.is_some() { 0 } else { caps.rq_wqe_cnt },
                max_send_sge: 1,
                max_recv_sge: if srq.is_some() { 0 } else { caps.max_recv_sge },
                max_inline_data: caps.max_inline,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: a live PD, CQs and SRQ; a valid attribute struct.
        let qp = nonnull("ibv_create_qp", unsafe {
            (p.c.v.create_qp)(p.pd.as_ptr(), &mut a)
        })?;
        Ok(HwQp {
            q: Arc::new(QpInner {
                pd: p.clone(),
                qp,
                _cqs: (send_cq.clone(), recv_cq.clone()),
                _srq: srq.cloned(),
                max_inline: a.cap.max_inline_data,
                sq_taken: AtomicBool::new(false),
                rq_taken: AtomicBool::new(false),
                dci: false,
            }),
        })
    }
}

pub(super) struct CqInner {
    c: Arc<Ctx>,
    pub(super) cq: NonNull<ibv_cq>,
    zip: Compression,
    taken: AtomicBool,
    /// Its `cq_context` when created on a channel: its number and events.
    events: Option<Arc<CqEvents>>,
    /// The channel its events go to (kept alive while the CQ lives).
    chan: Option<HwChannel>,
}
// SAFETY: as for PdInner.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}
impl Drop for CqInner {
    fn drop(&mut self) {
        // A waiter reading an event of this CQ holds the channel's lock: the
        // CQ (and `events`, its cq_context) outlive that read.
        let _g = self.chan.as_ref().map(HwChannel::lock);
        // SAFETY: created by mlx5dv_create_cq or ibv_create_cq; QPs using it
        // are gone. Verbs drops the CQ's events still queued on its channel.
        unsafe { (self.c.v.destroy_cq)(self.cq.as_ptr()) };
    }
}

/// A CQ on hardware.
#[derive(Clone)]
pub struct HwCq {
    pub(super) q: Arc<CqInner>,
}

impl HwCq {
    /// The CQ object and the provider's `poll_cq`, taking the data path (once).
    pub(super) fn take_verbs(
        &self,
    ) -> Result<VerbsParts<ibv_cq, (PollCqFn, Option<ReqNotifyCqFn>)>, HwError> {
        let o = ops(&self.q.c);
        let poll = o.poll_cq.ok_or(HwError::SymbolMissing {
            lib: self.q.c.name.clone(),
            symbol: "ibv_context_ops.poll_cq",
        })?;
        if self.q.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("CQ"));
        }
        Ok(VerbsParts {
            keep: self.q.clone(),
            obj: self.q.cq,
            entry: (poll, o.req_notify_cq),
        })
    }

    fn dv(&self) -> Result<mlx5dv_cq, HwError> {
        if !self.q.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.q.c.name.clone()));
        }
        let m = self.q.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_cq::default();
        let mut obj = mlx5dv_obj::default();
        obj.cq.in_ = self.q.cq.as_ptr() as *mut c_void;
        obj.cq.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers for the call.
        verb("mlx5dv_init_obj(CQ)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_CQ)
        })?;
        Ok(out)
    }

    /// CQ number (mlx5). On other devices, which have no CQ numbers to show,
    /// the CQ's kernel handle: unique on its device context, and what a
    /// completion event names the CQ by.
    pub fn cqn(&self) -> Result<u32, HwError> {
        if !self.q.c.is_mlx5 {
            // SAFETY: a live CQ.
            return Ok(unsafe { self.q.cq.as_ref() }.handle);
        }
        Ok(self.dv()?.cqn)
    }

    /// The consumer side for the data path, over the CQ's real memory (once).
    pub fn ring(&self) -> Result<CqRing, HwError> {
        if self.q.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("CQ ring"));
        }
        let out = self.dv()?;
        let arm = match &self.q.events {
            None => None,
            Some(e) => Some(CqArmMemory {
                uar: nonnull("mlx5dv_init_obj(CQ).cq_uar", out.cq_uar as *mut u8)?,
                events: e.taken.clone(),
            }),
        };
        let mem = CqMemory {
            buf: nonnull("mlx5dv_init_obj(CQ).buf", out.buf as *mut u8)?,
            cqe_cnt: out.cqe_cnt,
            cqe_size: out.cqe_size as usize,
            dbrec: nonnull("mlx5dv_init_obj(CQ).dbrec", out.dbrec as *mut u8)?,
            cqn: out.cqn,
            notify: None,
            keepalive: Some(self.q.clone()),
            arm,
        };
        // SAFETY: the CQ's buffer, doorbell record and UAR page (the context's
        // CQ doorbell page, mapped for the context's life), alive with
        // `keepalive`.
        unsafe { CqRing::new(mem, self.q.zip) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_init_obj(CQ) shape",
            errno: libc::EINVAL,
        })
    }
}

pub(super) struct SrqInner {
    pd: Arc<PdInner>,
    pub(super) srq: NonNull<ibv_srq>,
    taken: AtomicBool,
}
// SAFETY: as for PdInner.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}
impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by create_srq; QPs using it are gone.
        unsafe { (self.pd.c.v.destroy_srq)(self.srq.as_ptr()) };
    }
}

/// An SRQ on hardware.
#[derive(Clone)]
pub struct HwSrq {
    pub(super) s: Arc<SrqInner>,
}

impl HwSrq {
    /// The SRQ object and the provider's `post_srq_recv`, taking the data path
    /// (once).
    pub(super) fn take_verbs(&self) -> Result<VerbsParts<ibv_srq, PostSrqRecvFn>, HwError> {
        let post = ops(&self.s.pd.c)
            .post_srq_recv
            .ok_or(HwError::SymbolMissing {
                lib: self.s.pd.c.name.clone(),
                symbol: "ibv_context_ops.post_srq_recv",
            })?;
        if self.s.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("SRQ"));
        }
        Ok(VerbsParts {
            keep: self.s.clone(),
            obj: self.s.srq,
            entry: post,
        })
    }

    fn dv(&self) -> Result<mlx5dv_srq, HwError> {
        if !self.s.pd.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.s.pd.c.name.clone()));
        }
        let m = self.s.pd.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_srq::default();
        let mut obj = mlx5dv_obj::default();
        obj.srq.in_ = self.s.srq.as_ptr() as *mut c_void;
        obj.srq.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers.
        verb("mlx5dv_init_obj(SRQ)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_SRQ)
        })?;
        Ok(out)
    }

    /// SRQ number.
    pub fn srqn(&self) -> Result<u32, HwError> {
        Ok(self.dv()?.srqn)
    }

    /// The posting side for the data path, over the SRQ's real memory (once).
    pub fn srq<T: SrqTopology>(&self) -> Result<Srq<T>, HwError> {
        if self.s.taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("SRQ"));
        }
        let out = self.dv()?;
        // rdma-core allocates max_wr + 1 rounded to a power of two; the buffer
        // holds (tail + 1) WQEs.
        let cnt = out.tail + 1;
        let mem = RqMemory {
            buf: nonnull("mlx5dv_init_obj(SRQ).buf", out.buf as *mut u8)?,
            wqe_cnt: cnt,
            stride: out.stride as usize,
            dbrec: nonnull("mlx5dv_init_obj(SRQ).dbrec", out.dbrec as *mut u8)?,
            qn: out.srqn,
            notify: None,
            keepalive: Some(self.s.clone()),
        };
        // SAFETY: the SRQ's buffer and doorbell record, alive with `keepalive`.
        unsafe { Srq::new(mem) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_init_obj(SRQ) shape",
            errno: libc::EINVAL,
        })
    }
}

pub(super) struct QpInner {
    pub(super) pd: Arc<PdInner>,
    pub(super) qp: NonNull<ibv_qp>,
    pub(super) _cqs: (HwCq, HwCq),
    pub(super) _srq: Option<HwSrq>,
    pub(super) max_inline: u32,
    pub(super) sq_taken: AtomicBool,
    pub(super) rq_taken: AtomicBool,
    /// A DC initiator (`mlx5dv_create_qp`, DCI), not an RC QP: its
    /// RESET → INIT carries no access flags.
    pub(super) dci: bool,
}
// SAFETY: as for PdInner.
unsafe impl Send for QpInner {}
// SAFETY: as above.
unsafe impl Sync for QpInner {}
impl Drop for QpInner {
    fn drop(&mut self) {
        // SAFETY: created by create_qp; destroyed before its CQs/SRQ/PD (fields
        // drop after this body runs).
        unsafe { (self.pd.c.v.destroy_qp)(self.qp.as_ptr()) };
    }
}

/// An RC QP on hardware.
#[derive(Clone)]
pub struct HwQp {
    pub(super) q: Arc<QpInner>,
}

impl HwQp {
    /// The QP object and the provider's `post_send` / `post_recv`, taking both
    /// queues' data path (once).
    pub(super) fn take_verbs(
        &self,
    ) -> Result<VerbsParts<ibv_qp, (PostSendFn, PostRecvFn)>, HwError> {
        let o = ops(&self.q.pd.c);
        let missing = |symbol| HwError::SymbolMissing {
            lib: self.q.pd.c.name.clone(),
            symbol,
        };
        let send = o
            .post_send
            .ok_or_else(|| missing("ibv_context_ops.post_send"))?;
        let recv = o
            .post_recv
            .ok_or_else(|| missing("ibv_context_ops.post_recv"))?;
        if self.q.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("send queue"));
        }
        if self.q.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("receive queue"));
        }
        Ok(VerbsParts {
            keep: self.q.clone(),
            obj: self.q.qp,
            entry: (send, recv),
        })
    }

    /// Largest inline payload the QP was created with.
    pub fn max_inline(&self) -> u32 {
        self.q.max_inline
    }

    fn raw(&self) -> &ibv_qp {
        // SAFETY: a live QP.
        unsafe { self.q.qp.as_ref() }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.raw().qp_num
    }

    /// The QP's state as the device reports it (`ibv_query_qp`): `IBV_QPS_*`.
    pub fn query_state(&self) -> Result<u32, HwError> {
        let mut a = ibv_qp_attr::default();
        let mut i = ibv_qp_init_attr::default();
        // SAFETY: a live QP and zeroed out-structs.
        verb("ibv_query_qp", unsafe {
            (self.q.pd.c.v.query_qp)(self.q.qp.as_ptr(), &mut a, qp_attr_mask::STATE, &mut i)
        })?;
        Ok(a.qp_state)
    }

    /// What the peer needs, with the context's port LID and chosen GID.
    pub fn conn_info(&self, ctx: &HwContext, psn: u32) -> ConnInfo {
        ConnInfo {
            qpn: self.qpn(),
            lid: ctx.lid,
            gid: ctx.gid.gid,
            psn,
        }
    }

    pub(super) fn modify(
        &self,
        a: &mut ibv_qp_attr,
        mask: i32,
        what: &'static str,
    ) -> Result<(), HwError> {
        // SAFETY: a live QP and a valid attribute struct.
        verb(what, unsafe {
            (self.q.pd.c.v.modify_qp)(self.q.qp.as_ptr(), a, mask)
        })
    }

    /// RESET → INIT on port 1 with `access` remote rights (none on a DCI,
    /// whose RESET → INIT takes exactly STATE | PKEY_INDEX | PORT).
    pub fn to_init(&self, access: u32) -> Result<(), HwError> {
        if self.q.dci {
            return self.dci_to_init();
        }
        let mut a = ibv_qp_attr {
            qp_state: qp_state::INIT,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: access,
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            STATE | PKEY_INDEX | PORT | ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )
    }

    /// INIT → RTR towards `attr.remote` (RoCE v2: GRH with the chosen GID index).
    pub fn to_rtr(&self, ctx: &HwContext, attr: &RtrAttr) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTR,
            path_mtu: ctx.mtu,
            dest_qp_num: attr.remote.qpn,
            rq_psn: attr.remote.psn,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            qp_access_flags: attr.access,
            ..Default::default()
        };
        a.ah_attr.dlid = attr.remote.lid;
        a.ah_attr.port_num = 1;
        if ctx.link_layer == IBV_LINK_LAYER_ETHERNET
            || attr.remote.gid != [0; 16] && attr.remote.lid == 0
        {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid {
                raw: attr.remote.gid,
            };
            a.ah_attr.grh.sgid_index = ctx.gid.index as u8;
            a.ah_attr.grh.hop_limit = 64;
        }
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            // The remote rights are (re)set here: INIT got none (found by the
            // differential suite on rxe, where WRITEs were refused without it).
            STATE
                | AV
                | PATH_MTU
                | DEST_QPN
                | RQ_PSN
                | MAX_DEST_RD_ATOMIC
                | MIN_RNR_TIMER
                | ACCESS_FLAGS,
            "ibv_modify_qp(RTR)",
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, attr: &RtsAttr) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::RTS,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            sq_psn: attr.sq_psn,
            max_rd_atomic: attr.max_rd_atomic,
            ..Default::default()
        };
        use qp_attr_mask::*;
        self.modify(
            &mut a,
            STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// Any state → ERR.
    pub fn to_err(&self) -> Result<(), HwError> {
        let mut a = ibv_qp_attr {
            qp_state: qp_state::ERR,
            ..Default::default()
        };
        self.modify(&mut a, qp_attr_mask::STATE, "ibv_modify_qp(ERR)")
    }

    pub(super) fn dv(&self) -> Result<mlx5dv_qp, HwError> {
        if !self.q.pd.c.is_mlx5 {
            return Err(HwError::NotMlx5(self.q.pd.c.name.clone()));
        }
        let m = self.q.pd.c.v.mlx5.as_ref().map_err(Clone::clone)?;
        let mut out = mlx5dv_qp::default();
        let mut obj = mlx5dv_obj::default();
        obj.qp.in_ = self.q.qp.as_ptr() as *mut c_void;
        obj.qp.out = &mut out as *mut _ as *mut c_void;
        // SAFETY: valid in/out pointers.
        verb("mlx5dv_init_obj(QP)", unsafe {
            (m.init_obj)(&mut obj, MLX5DV_OBJ_QP)
        })?;
        Ok(out)
    }

    /// The send queue for the data path, over the QP's real SQ, doorbell record
    /// and BlueFlame register.
    pub fn send_queue<T: SendTable>(&self, mut cfg: SqConfig) -> Result<SendQueue<T>, HwError> {
        if self.q.sq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("send queue"));
        }
        let d = self.dv()?;
        cfg.max_inline = cfg.max_inline.min(self.q.max_inline as usize);
        let mem = SqMemory {
            buf: nonnull("mlx5dv_qp.sq.buf", d.sq.buf as *mut u8)?,
            wqe_cnt: d.sq.wqe_cnt,
            dbrec: nonnull("mlx5dv_qp.dbrec", d.dbrec as *mut u8)?,
            bf_reg: nonnull("mlx5dv_qp.bf.reg", d.bf.reg as *mut u8)?,
            bf_half: d.bf.size as usize,
            qpn: self.qpn(),
            notify: None,
            keepalive: Some(self.q.clone()),
        };
        // SAFETY: the QP's SQ, doorbell record and BF register, alive with `keepalive`.
        unsafe { SendQueue::new(mem, cfg) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_qp.sq shape",
            errno: libc::EINVAL,
        })
    }

    /// The QP's own receive queue for the data path.
    pub fn recv_queue<T: RecvTable>(&self) -> Result<RecvQueue<T>, HwError> {
        if self.q.dci {
            return Err(HwError::Verb {
                verb: "recv_queue (a DCI has no receive queue)",
                errno: libc::EINVAL,
            });
        }
        if self.q.rq_taken.swap(true, Ordering::AcqRel) {
            return Err(HwError::Taken("receive queue"));
        }
        let d = self.dv()?;
        // The receive counter is word 0 of the QP doorbell record.
        let mem = RqMemory {
            buf: nonnull("mlx5dv_qp.rq.buf", d.rq.buf as *mut u8)?,
            wqe_cnt: d.rq.wqe_cnt,
            stride: d.rq.stride as usize,
            dbrec: nonnull("mlx5dv_qp.dbrec", d.dbrec as *mut u8)?,
            qn: self.qpn(),
            notify: None,
            keepalive: Some(self.q.clone()),
        };
        // SAFETY: the QP's RQ and doorbell record, alive with `keepalive`.
        unsafe { RecvQueue::new(mem) }.map_err(|_| HwError::Verb {
            verb: "mlx5dv_qp.rq shape",
            errno: libc::EINVAL,
        })
    }
}

/// `Debug` for the handles: the type and its verbs object's address.
macro_rules! debug_handle {
    ($($ty:ident { $inner:ident . $obj:ident }),* $(,)?) => {$(
        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field(stringify!($obj), &self.$inner.$obj)
                    .finish_non_exhaustive()
            }
        }
    )*};
}

debug_handle!(
    HwPd { p.pd },
    HwMr { m.mr },
    HwCq { q.cq },
    HwSrq { s.srq },
    HwQp { q.qp },
);
