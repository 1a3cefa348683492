//! Device listing and queries: the devices present, opening one, its ports
//! and GIDs, and what `mlx5-info` shows.

use std::ffi::{c_int, CStr};
use std::sync::Arc;

use super::{nonnull, verb};
use crate::hw::ctx::Ctx;
use crate::hw::ffi::*;
use crate::hw::loader::{verbs, HwError, Verbs};
use crate::types::TmCaps;

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
    /// Tag matching (all zero without: `ibv_devinfo -v`'s "tag matching
    /// not supported").
    pub tm: TmCaps,
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

/// Opens device `name`.
pub(super) fn open_ctx(name: &str) -> Result<Arc<Ctx>, HwError> {
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

pub(super) fn query_port(c: &Ctx, num: u8) -> Result<PortInfo, HwError> {
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
pub(super) fn choose_gid(p: &PortInfo) -> Option<GidInfo> {
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

pub(super) fn mlx5_caps(c: &Ctx) -> Result<Mlx5Caps, HwError> {
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
        tm: crate::hw::vctx::tm_caps(c)?,
    })
}
