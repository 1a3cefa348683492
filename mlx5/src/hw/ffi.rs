//! Hand-written bindings for the parts of libibverbs and libmlx5 the hardware
//! backend uses, mirroring rdma-core's installed `infiniband/verbs.h` and
//! `infiniband/mlx5dv.h` (rdma-core 44 here).
//!
//! Every struct is declared through [`abi_struct!`], which also records each
//! field's offset and size; the ABI test (`tests/abi.rs`, feature
//! `rdma-core-oracle`) compares that table with what a C compiler makes of the
//! headers. Structs marked *prefix* declare only their leading fields: they are
//! allocated by the library and only read through pointers.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

/// One row of a struct's layout: `("struct.field", offset, size)`.
#[cfg(feature = "rdma-core-oracle")]
pub type LayoutRow = (&'static str, usize, usize);

macro_rules! abi_struct {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name { $(pub $field: $ty),* }

        #[cfg(feature = "rdma-core-oracle")]
        impl $name {
            /// Offsets and sizes of the fields, for the ABI test.
            pub fn layout() -> Vec<LayoutRow> {
                let mut v = vec![(concat!(stringify!($name), "."), 0, std::mem::size_of::<$name>())];
                $(
                    v.push((
                        concat!(stringify!($name), ".", stringify!($field)),
                        std::mem::offset_of!($name, $field),
                        {
                            fn size_of_field<T>(_: fn(&$name) -> &T) -> usize { std::mem::size_of::<T>() }
                            size_of_field(|s: &$name| &s.$field)
                        },
                    ));
                )*
                v
            }
        }

        impl Default for $name {
            fn default() -> Self {
                // SAFETY: a C struct of integers, pointers and arrays of them:
                // all-zero is a valid value (and what the C callers memset to).
                unsafe { std::mem::zeroed() }
            }
        }
    };
}

/// Opaque `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    _p: [u8; 0],
}

/// `union ibv_gid`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

abi_struct!(
    /// `struct ibv_comp_channel`: a completion channel, whose file descriptor
    /// becomes readable when a completion event is queued.
    ibv_comp_channel {
        context: *mut ibv_context,
        fd: c_int,
        refcnt: c_int,
    }
);

abi_struct!(ibv_device_attr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    max_qp_wr: c_int,
    device_cap_flags: u32,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    max_cqe: c_int,
    max_mr: c_int,
    max_pd: c_int,
    max_qp_rd_atom: c_int,
    max_ee_rd_atom: c_int,
    max_res_rd_atom: c_int,
    max_qp_init_rd_atom: c_int,
    max_ee_init_rd_atom: c_int,
    atomic_cap: u32,
    max_ee: c_int,
    max_rdd: c_int,
    max_mw: c_int,
    max_raw_ipv6_qp: c_int,
    max_raw_ethy_qp: c_int,
    max_mcast_grp: c_int,
    max_mcast_qp_attach: c_int,
    max_total_mcast_qp_attach: c_int,
    max_ah: c_int,
    max_fmr: c_int,
    max_map_per_fmr: c_int,
    max_srq: c_int,
    max_srq_wr: c_int,
    max_srq_sge: c_int,
    max_pkeys: u16,
    local_ca_ack_delay: u8,
    phys_port_cnt: u8,
});

abi_struct!(ibv_port_attr {
    state: u32,
    max_mtu: u32,
    active_mtu: u32,
    gid_tbl_len: c_int,
    port_cap_flags: u32,
    max_msg_sz: u32,
    bad_pkey_cntr: u32,
    qkey_viol_cntr: u32,
    pkey_tbl_len: u16,
    lid: u16,
    sm_lid: u16,
    lmc: u8,
    max_vl_num: u8,
    sm_sl: u8,
    subnet_timeout: u8,
    init_type_reply: u8,
    active_width: u8,
    active_speed: u8,
    phys_state: u8,
    link_layer: u8,
    flags: u8,
    port_cap_flags2: u16,
});

abi_struct!(ibv_global_route {
    dgid: ibv_gid,
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
});

abi_struct!(ibv_ah_attr {
    grh: ibv_global_route,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
});

abi_struct!(ibv_qp_cap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
});

abi_struct!(ibv_qp_attr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    cap: ibv_qp_cap,
    ah_attr: ibv_ah_attr,
    alt_ah_attr: ibv_ah_attr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
});

abi_struct!(ibv_qp_init_attr {
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: ibv_qp_cap,
    qp_type: u32,
    sq_sig_all: c_int,
});

abi_struct!(
    /// `struct ibv_rx_hash_conf` (part of `ibv_qp_init_attr_ex`; unused here).
    ibv_rx_hash_conf {
        rx_hash_function: u8,
        rx_hash_key_len: u8,
        rx_hash_key: *mut u8,
        rx_hash_fields_mask: u64,
    }
);

abi_struct!(
    /// `struct ibv_qp_init_attr_ex`: what `mlx5dv_create_qp` takes. The
    /// XRC domain and RSS table pointers are untyped (never set here).
    ibv_qp_init_attr_ex {
        qp_context: *mut c_void,
        send_cq: *mut ibv_cq,
        recv_cq: *mut ibv_cq,
        srq: *mut ibv_srq,
        cap: ibv_qp_cap,
        qp_type: u32,
        sq_sig_all: c_int,
        comp_mask: u32,
        pd: *mut ibv_pd,
        xrcd: *mut c_void,
        create_flags: u32,
        max_tso_header: u16,
        rwq_ind_tbl: *mut c_void,
        rx_hash_conf: ibv_rx_hash_conf,
        source_qpn: u32,
        send_ops_flags: u64,
    }
);

abi_struct!(
    /// `struct mlx5dv_dci_streams`: a DCI's streams, as log2 counts.
    mlx5dv_dci_streams {
        log_num_concurent: u8,
        log_num_errored: u8,
    }
);

/// The anonymous union of `struct mlx5dv_dc_init_attr`: a DCT's access key,
/// or a DCI's streams.
#[repr(C)]
#[derive(Clone, Copy)]
pub union mlx5dv_dc_init_attr_u {
    pub dct_access_key: u64,
    pub dci_streams: mlx5dv_dci_streams,
}

impl std::fmt::Debug for mlx5dv_dc_init_attr_u {
    /// Which member is live depends on `dc_type`, which the union does not
    /// know: only its type is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("mlx5dv_dc_init_attr_u")
            .finish_non_exhaustive()
    }
}

abi_struct!(
    /// `struct mlx5dv_dc_init_attr`: DCT or DCI, with the union after the type.
    mlx5dv_dc_init_attr {
        dc_type: u32,
        u: mlx5dv_dc_init_attr_u,
    }
);

abi_struct!(
    /// `struct mlx5dv_qp_init_attr`: libmlx5's part of `mlx5dv_create_qp`.
    mlx5dv_qp_init_attr {
        comp_mask: u64,
        create_flags: u32,
        dc_init_attr: mlx5dv_dc_init_attr,
        send_ops_flags: u64,
    }
);

abi_struct!(
    /// Prefix of `struct ibv_ah`.
    ibv_ah {
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        handle: u32,
    }
);

abi_struct!(
    /// `struct mlx5dv_ah`: where the provider keeps an AH's address vector
    /// (`struct mlx5_wqe_av`, [`MLX5_WQE_AV_LEN`] bytes).
    mlx5dv_ah {
        av: *mut u8,
        comp_mask: u64,
    }
);

/// `sizeof(struct mlx5_wqe_av)`.
pub const MLX5_WQE_AV_LEN: usize = 48;

abi_struct!(ibv_srq_attr {
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
});

abi_struct!(ibv_srq_init_attr {
    srq_context: *mut c_void,
    attr: ibv_srq_attr,
});

abi_struct!(
    /// `struct ibv_tm_cap`: a tag-matching SRQ's list size and outstanding
    /// list operations.
    ibv_tm_cap {
        max_num_tags: u32,
        max_ops: u32,
    }
);

abi_struct!(
    /// `struct ibv_srq_init_attr_ex`, for `create_srq_ex` (a TM-SRQ).
    ibv_srq_init_attr_ex {
        srq_context: *mut c_void,
        attr: ibv_srq_attr,
        comp_mask: u32,
        srq_type: u32,
        pd: *mut ibv_pd,
        xrcd: *mut c_void,
        cq: *mut ibv_cq,
        tm_cap: ibv_tm_cap,
    }
);

abi_struct!(
    /// `struct ibv_tm_caps`: a device's tag matching (all zero without).
    ibv_tm_caps {
        max_rndv_hdr_size: u32,
        max_num_tags: u32,
        flags: u32,
        max_ops: u32,
        max_sge: u32,
    }
);

/// `struct ibv_device_attr_ex` up to and including `tm_caps`: the provider
/// fills `attr_size` bytes, so a caller may pass a prefix (rdma-core keeps
/// the struct append-only for that). The members between are not read.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    _between: [u8; DEVICE_ATTR_EX_TM_CAPS - DEVICE_ATTR_EX_AFTER_COMP_MASK],
    pub tm_caps: ibv_tm_caps,
}

/// Where `ibv_device_attr_ex.tm_caps` sits.
const DEVICE_ATTR_EX_TM_CAPS: usize = 348;
/// Where the member after `ibv_device_attr_ex.comp_mask` starts.
const DEVICE_ATTR_EX_AFTER_COMP_MASK: usize = 236;

impl Default for ibv_device_attr_ex {
    fn default() -> Self {
        // SAFETY: integers and arrays of them: all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const c_void, *mut ibv_device_attr_ex, usize) -> c_int;
/// `verbs_context.create_srq_ex`.
pub type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;

/// Where `struct verbs_context`'s members sit in rdma-core 44's headers.
/// The struct ends with the `ibv_context` applications hold and grows
/// towards lower addresses (a new verb goes first), so a member's distance
/// before that `ibv_context` never changes: at run time only those
/// distances are used (`hw::vctx`); the absolute offsets are for the ABI
/// test.
pub mod verbs_context {
    /// `context`: the `ibv_context` the struct ends with.
    pub const CONTEXT: usize = 320;
    /// `sz`: the struct's size as the provider built it.
    pub const SZ: usize = 312;
    /// `create_srq_ex`.
    pub const CREATE_SRQ_EX: usize = 280;
    /// `query_device_ex`.
    pub const QUERY_DEVICE_EX: usize = 216;
    /// `sizeof(struct ibv_context)`.
    pub const IBV_CONTEXT_LEN: usize = 328;
    /// `ibv_context.abi_compat`: `UINTPTR_MAX` when the context sits in a
    /// `verbs_context` (`__VERBS_ABI_IS_EXTENDED`).
    pub const ABI_COMPAT: usize = 320;
}

/// `IBV_SRQT_TM`: `ibv_srq_init_attr_ex.srq_type` of a tag-matching SRQ.
pub const IBV_SRQT_TM: u32 = 2;
/// `enum ibv_srq_init_attr_mask` bits.
pub mod srq_init_attr_mask {
    pub const TYPE: u32 = 1 << 0;
    pub const PD: u32 = 1 << 1;
    pub const CQ: u32 = 1 << 3;
    pub const TM: u32 = 1 << 4;
}
/// `IBV_TM_CAP_RC`: tag matching on RC QPs.
pub const IBV_TM_CAP_RC: u32 = 1 << 0;

/// The rows of the members this crate reaches by offset rather than by
/// field, for the ABI test.
#[cfg(feature = "rdma-core-oracle")]
fn by_offset_rows() -> Vec<LayoutRow> {
    use verbs_context as v;
    let p = std::mem::size_of::<usize>();
    vec![
        ("verbs_context.", 0, 0),
        ("verbs_context.context", v::CONTEXT, v::IBV_CONTEXT_LEN),
        ("verbs_context.sz", v::SZ, p),
        ("verbs_context.create_srq_ex", v::CREATE_SRQ_EX, p),
        ("verbs_context.query_device_ex", v::QUERY_DEVICE_EX, p),
        ("ibv_context.abi_compat", v::ABI_COMPAT, p),
        ("ibv_device_attr_ex.", 0, 0),
        (
            "ibv_device_attr_ex.orig_attr",
            0,
            std::mem::size_of::<ibv_device_attr>(),
        ),
        (
            "ibv_device_attr_ex.comp_mask",
            std::mem::offset_of!(ibv_device_attr_ex, comp_mask),
            4,
        ),
        (
            "ibv_device_attr_ex.tm_caps",
            std::mem::offset_of!(ibv_device_attr_ex, tm_caps),
            std::mem::size_of::<ibv_tm_caps>(),
        ),
    ]
}

abi_struct!(ibv_cq_init_attr_ex {
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    wc_flags: u64,
    comp_mask: u32,
    flags: u32,
    parent_domain: *mut ibv_pd,
});

abi_struct!(ibv_gid_entry {
    gid: ibv_gid,
    gid_index: u32,
    port_num: u32,
    gid_type: u32,
    ndev_ifindex: u32,
});

abi_struct!(ibv_pd {
    context: *mut ibv_context,
    handle: u32,
});

abi_struct!(ibv_mr {
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
});

abi_struct!(
    /// Prefix of `struct ibv_cq`.
    ibv_cq {
        context: *mut ibv_context,
        channel: *mut ibv_comp_channel,
        cq_context: *mut c_void,
        handle: u32,
        cqe: c_int,
    }
);

abi_struct!(
    /// Prefix of `struct ibv_srq`.
    ibv_srq {
        context: *mut ibv_context,
        srq_context: *mut c_void,
        pd: *mut ibv_pd,
        handle: u32,
    }
);

abi_struct!(
    /// Prefix of `struct ibv_qp`.
    ibv_qp {
        context: *mut ibv_context,
        qp_context: *mut c_void,
        pd: *mut ibv_pd,
        send_cq: *mut ibv_cq,
        recv_cq: *mut ibv_cq,
        srq: *mut ibv_srq,
        handle: u32,
        qp_num: u32,
        state: u32,
        qp_type: u32,
    }
);

/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

abi_struct!(
    /// `struct ibv_context_ops`: the provider's data-path entry points, which
    /// verbs.h's inline `ibv_post_send` / `ibv_poll_cq` call through. Entries
    /// this crate does not call are kept as untyped pointers.
    ibv_context_ops {
        _compat_query_device: *mut c_void,
        _compat_query_port: *mut c_void,
        _compat_alloc_pd: *mut c_void,
        _compat_dealloc_pd: *mut c_void,
        _compat_reg_mr: *mut c_void,
        _compat_rereg_mr: *mut c_void,
        _compat_dereg_mr: *mut c_void,
        alloc_mw: *mut c_void,
        bind_mw: *mut c_void,
        dealloc_mw: *mut c_void,
        _compat_create_cq: *mut c_void,
        poll_cq: Option<PollCqFn>,
        req_notify_cq: Option<ReqNotifyCqFn>,
        _compat_cq_event: *mut c_void,
        _compat_resize_cq: *mut c_void,
        _compat_destroy_cq: *mut c_void,
        _compat_create_srq: *mut c_void,
        _compat_modify_srq: *mut c_void,
        _compat_query_srq: *mut c_void,
        _compat_destroy_srq: *mut c_void,
        post_srq_recv: Option<PostSrqRecvFn>,
        _compat_create_qp: *mut c_void,
        _compat_query_qp: *mut c_void,
        _compat_modify_qp: *mut c_void,
        _compat_destroy_qp: *mut c_void,
        post_send: Option<PostSendFn>,
        post_recv: Option<PostRecvFn>,
        _compat_create_ah: *mut c_void,
        _compat_destroy_ah: *mut c_void,
        _compat_attach_mcast: *mut c_void,
        _compat_detach_mcast: *mut c_void,
        _compat_async_event: *mut c_void,
    }
);

abi_struct!(
    /// Prefix of `struct ibv_context`.
    ibv_context {
        device: *mut ibv_device,
        ops: ibv_context_ops,
    }
);

abi_struct!(ibv_sge {
    addr: u64,
    length: u32,
    lkey: u32,
});

abi_struct!(
    /// `ibv_send_wr.wr.rdma`.
    ibv_rdma_wr {
        remote_addr: u64,
        rkey: u32,
    }
);

abi_struct!(
    /// `ibv_send_wr.wr.atomic`.
    ibv_atomic_wr {
        remote_addr: u64,
        compare_add: u64,
        swap: u64,
        rkey: u32,
    }
);

/// `ibv_send_wr.wr`: the operation's remote side (the UD member is not used).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_rdma_wr,
    pub atomic: ibv_atomic_wr,
}

impl std::fmt::Debug for ibv_send_wr_wr {
    /// Which member is live depends on the opcode, which the union does not
    /// know: only its size is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ibv_send_wr_wr").finish_non_exhaustive()
    }
}

abi_struct!(
    /// `struct ibv_send_wr`; `imm_data` is the anonymous union's first member
    /// (big-endian on the wire, as verbs wants it), `bind_mw` stands for the
    /// last anonymous union (bind_mw / tso), unused here.
    ibv_send_wr {
        wr_id: u64,
        next: *mut ibv_send_wr,
        sg_list: *mut ibv_sge,
        num_sge: c_int,
        opcode: u32,
        send_flags: u32,
        imm_data: u32,
        wr: ibv_send_wr_wr,
        qp_type: u32,
        bind_mw: [u64; 6],
    }
);

abi_struct!(ibv_recv_wr {
    wr_id: u64,
    next: *mut ibv_recv_wr,
    sg_list: *mut ibv_sge,
    num_sge: c_int,
});

abi_struct!(
    /// `struct ibv_wc`; `imm_data` is the anonymous union's first member
    /// (big-endian).
    ibv_wc {
        wr_id: u64,
        status: u32,
        opcode: u32,
        vendor_err: u32,
        byte_len: u32,
        imm_data: u32,
        qp_num: u32,
        src_qp: u32,
        wc_flags: u32,
        pkey_index: u16,
        slid: u16,
        sl: u8,
        dlid_path_bits: u8,
    }
);

abi_struct!(mlx5dv_obj_pair {
    in_: *mut c_void,
    out: *mut c_void,
});

abi_struct!(mlx5dv_obj {
    qp: mlx5dv_obj_pair,
    cq: mlx5dv_obj_pair,
    srq: mlx5dv_obj_pair,
    rwq: mlx5dv_obj_pair,
    dm: mlx5dv_obj_pair,
    ah: mlx5dv_obj_pair,
    pd: mlx5dv_obj_pair,
});

abi_struct!(mlx5dv_qp_queue {
    buf: *mut c_void,
    wqe_cnt: u32,
    stride: u32,
});

abi_struct!(mlx5dv_qp_bf {
    reg: *mut c_void,
    size: u32,
});

abi_struct!(mlx5dv_qp {
    dbrec: *mut u32,
    sq: mlx5dv_qp_queue,
    rq: mlx5dv_qp_queue,
    bf: mlx5dv_qp_bf,
    comp_mask: u64,
    uar_mmap_offset: i64,
    tirn: u32,
    tisn: u32,
    rqn: u32,
    sqn: u32,
    tir_icm_addr: u64,
});

abi_struct!(mlx5dv_cq {
    buf: *mut c_void,
    dbrec: *mut u32,
    cqe_cnt: u32,
    cqe_size: u32,
    cq_uar: *mut c_void,
    cqn: u32,
    comp_mask: u64,
});

abi_struct!(mlx5dv_srq {
    buf: *mut c_void,
    dbrec: *mut u32,
    stride: u32,
    head: u32,
    tail: u32,
    comp_mask: u64,
    srqn: u32,
});

abi_struct!(mlx5dv_cq_init_attr {
    comp_mask: u64,
    cqe_comp_res_format: u8,
    flags: u32,
    cqe_size: u16,
});

abi_struct!(mlx5dv_cqe_comp_caps {
    max_num: u32,
    supported_format: u32,
});

abi_struct!(mlx5dv_sw_parsing_caps {
    sw_parsing_offloads: u32,
    supported_qpts: u32,
});

abi_struct!(mlx5dv_striding_rq_caps {
    min_single_stride_log_num_of_bytes: u32,
    max_single_stride_log_num_of_bytes: u32,
    min_single_wqe_log_num_of_strides: u32,
    max_single_wqe_log_num_of_strides: u32,
    supported_qpts: u32,
});

abi_struct!(mlx5dv_sig_caps {
    block_size: u64,
    block_prot: u32,
    t10dif_bg: u16,
    crc_type: u16,
});

abi_struct!(mlx5dv_dci_streams_caps {
    max_log_num_concurent: u8,
    max_log_num_errored: u8,
});

abi_struct!(mlx5dv_crypto_caps {
    failed_selftests: u16,
    crypto_engines: u8,
    wrapped_import_method: u8,
    log_max_num_deks: u8,
    flags: u32,
});

abi_struct!(mlx5dv_context {
    version: u8,
    flags: u64,
    comp_mask: u64,
    cqe_comp_caps: mlx5dv_cqe_comp_caps,
    sw_parsing_caps: mlx5dv_sw_parsing_caps,
    striding_rq_caps: mlx5dv_striding_rq_caps,
    tunnel_offloads_caps: u32,
    max_dynamic_bfregs: u32,
    max_clock_info_update_nsec: u64,
    flow_action_flags: u32,
    dc_odp_caps: u32,
    hca_core_clock: *mut c_void,
    num_lag_ports: u8,
    sig_caps: mlx5dv_sig_caps,
    dci_streams_caps: mlx5dv_dci_streams_caps,
    max_wr_memcpy_length: usize,
    crypto_caps: mlx5dv_crypto_caps,
});

/// The members of `mlx5dv_dc_init_attr`'s anonymous union, where they sit
/// in the struct.
#[cfg(feature = "rdma-core-oracle")]
fn dc_init_attr_union_rows() -> Vec<LayoutRow> {
    let u = std::mem::offset_of!(mlx5dv_dc_init_attr, u);
    vec![
        (
            "mlx5dv_dc_init_attr.dct_access_key",
            u + std::mem::offset_of!(mlx5dv_dc_init_attr_u, dct_access_key),
            std::mem::size_of::<u64>(),
        ),
        (
            "mlx5dv_dc_init_attr.dci_streams",
            u + std::mem::offset_of!(mlx5dv_dc_init_attr_u, dci_streams),
            std::mem::size_of::<mlx5dv_dci_streams>(),
        ),
    ]
}

/// Every struct's layout, for the ABI test.
#[cfg(feature = "rdma-core-oracle")]
pub fn all_layouts() -> Vec<LayoutRow> {
    [
        ibv_comp_channel::layout(),
        ibv_device_attr::layout(),
        ibv_port_attr::layout(),
        ibv_global_route::layout(),
        ibv_ah_attr::layout(),
        ibv_qp_cap::layout(),
        ibv_qp_attr::layout(),
        ibv_qp_init_attr::layout(),
        ibv_srq_attr::layout(),
        ibv_srq_init_attr::layout(),
        ibv_tm_cap::layout(),
        ibv_srq_init_attr_ex::layout(),
        ibv_tm_caps::layout(),
        by_offset_rows(),
        ibv_cq_init_attr_ex::layout(),
        ibv_gid_entry::layout(),
        ibv_pd::layout(),
        ibv_mr::layout(),
        ibv_cq::layout(),
        ibv_srq::layout(),
        ibv_qp::layout(),
        ibv_context_ops::layout(),
        ibv_context::layout(),
        ibv_sge::layout(),
        ibv_rdma_wr::layout(),
        ibv_atomic_wr::layout(),
        ibv_send_wr::layout(),
        ibv_recv_wr::layout(),
        ibv_wc::layout(),
        mlx5dv_obj_pair::layout(),
        mlx5dv_obj::layout(),
        mlx5dv_qp_queue::layout(),
        mlx5dv_qp_bf::layout(),
        mlx5dv_qp::layout(),
        mlx5dv_cq::layout(),
        mlx5dv_srq::layout(),
        mlx5dv_cq_init_attr::layout(),
        mlx5dv_cqe_comp_caps::layout(),
        mlx5dv_sw_parsing_caps::layout(),
        mlx5dv_striding_rq_caps::layout(),
        mlx5dv_sig_caps::layout(),
        mlx5dv_dci_streams_caps::layout(),
        mlx5dv_crypto_caps::layout(),
        mlx5dv_context::layout(),
        ibv_rx_hash_conf::layout(),
        ibv_qp_init_attr_ex::layout(),
        mlx5dv_dci_streams::layout(),
        mlx5dv_dc_init_attr::layout(),
        mlx5dv_qp_init_attr::layout(),
        ibv_ah::layout(),
        mlx5dv_ah::layout(),
        vec![("mlx5_wqe_av.", 0, MLX5_WQE_AV_LEN)],
        dc_init_attr_union_rows(),
    ]
    .concat()
}

/// `enum ibv_qp_state` values.
pub mod qp_state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const ERR: u32 = 6;
}

/// `enum ibv_qp_attr_mask` bits.
pub mod qp_attr_mask {
    pub const STATE: i32 = 1 << 0;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const DEST_QPN: i32 = 1 << 20;
}

/// `enum ibv_wr_opcode` values.
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
}

/// `enum ibv_send_flags` bits.
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// `enum ibv_wc_opcode` values.
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;
}

/// `enum ibv_wc_status` values.
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

/// `IBV_WC_WITH_IMM` of `enum ibv_wc_flags`.
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;

/// Other constants.
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
pub const MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE: u64 = 1 << 2;
pub const IBV_QPT_DRIVER: u32 = 0xff;
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;
pub const MLX5DV_CONTEXT_MASK_DCI_STREAMS: u64 = 1 << 11;
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;
pub const MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS: u64 = 1 << 3;
pub const MLX5DV_DCTYPE_DCT: u32 = 1;
pub const MLX5DV_DCTYPE_DCI: u32 = 2;

/// `(name, value)` of every constant above, for the ABI test.
#[cfg(feature = "rdma-core-oracle")]
pub fn all_constants() -> Vec<(&'static str, i64)> {
    vec![
        ("IBV_SRQT_TM", i64::from(IBV_SRQT_TM)),
        (
            "IBV_SRQ_INIT_ATTR_TYPE",
            i64::from(srq_init_attr_mask::TYPE),
        ),
        ("IBV_SRQ_INIT_ATTR_PD", i64::from(srq_init_attr_mask::PD)),
        ("IBV_SRQ_INIT_ATTR_CQ", i64::from(srq_init_attr_mask::CQ)),
        ("IBV_SRQ_INIT_ATTR_TM", i64::from(srq_init_attr_mask::TM)),
        ("IBV_TM_CAP_RC", i64::from(IBV_TM_CAP_RC)),
        ("IBV_QPS_RESET", i64::from(qp_state::RESET)),
        ("IBV_QPS_INIT", i64::from(qp_state::INIT)),
        ("IBV_QPS_RTR", i64::from(qp_state::RTR)),
        ("IBV_QPS_RTS", i64::from(qp_state::RTS)),
        ("IBV_QPS_ERR", i64::from(qp_state::ERR)),
        ("IBV_QP_STATE", i64::from(qp_attr_mask::STATE)),
        ("IBV_QP_ACCESS_FLAGS", i64::from(qp_attr_mask::ACCESS_FLAGS)),
        ("IBV_QP_PKEY_INDEX", i64::from(qp_attr_mask::PKEY_INDEX)),
        ("IBV_QP_PORT", i64::from(qp_attr_mask::PORT)),
        ("IBV_QP_AV", i64::from(qp_attr_mask::AV)),
        ("IBV_QP_PATH_MTU", i64::from(qp_attr_mask::PATH_MTU)),
        ("IBV_QP_TIMEOUT", i64::from(qp_attr_mask::TIMEOUT)),
        ("IBV_QP_RETRY_CNT", i64::from(qp_attr_mask::RETRY_CNT)),
        ("IBV_QP_RNR_RETRY", i64::from(qp_attr_mask::RNR_RETRY)),
        ("IBV_QP_RQ_PSN", i64::from(qp_attr_mask::RQ_PSN)),
        (
            "IBV_QP_MAX_QP_RD_ATOMIC",
            i64::from(qp_attr_mask::MAX_QP_RD_ATOMIC),
        ),
        (
            "IBV_QP_MIN_RNR_TIMER",
            i64::from(qp_attr_mask::MIN_RNR_TIMER),
        ),
        ("IBV_QP_SQ_PSN", i64::from(qp_attr_mask::SQ_PSN)),
        (
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            i64::from(qp_attr_mask::MAX_DEST_RD_ATOMIC),
        ),
        ("IBV_QP_DEST_QPN", i64::from(qp_attr_mask::DEST_QPN)),
        ("IBV_QPT_RC", i64::from(IBV_QPT_RC)),
        ("IBV_WR_RDMA_WRITE", i64::from(wr_opcode::RDMA_WRITE)),
        (
            "IBV_WR_RDMA_WRITE_WITH_IMM",
            i64::from(wr_opcode::RDMA_WRITE_WITH_IMM),
        ),
        ("IBV_WR_SEND", i64::from(wr_opcode::SEND)),
        ("IBV_WR_SEND_WITH_IMM", i64::from(wr_opcode::SEND_WITH_IMM)),
        ("IBV_WR_RDMA_READ", i64::from(wr_opcode::RDMA_READ)),
        (
            "IBV_WR_ATOMIC_CMP_AND_SWP",
            i64::from(wr_opcode::ATOMIC_CMP_AND_SWP),
        ),
        (
            "IBV_WR_ATOMIC_FETCH_AND_ADD",
            i64::from(wr_opcode::ATOMIC_FETCH_AND_ADD),
        ),
        ("IBV_SEND_FENCE", i64::from(send_flags::FENCE)),
        ("IBV_SEND_SIGNALED", i64::from(send_flags::SIGNALED)),
        ("IBV_SEND_SOLICITED", i64::from(send_flags::SOLICITED)),
        ("IBV_SEND_INLINE", i64::from(send_flags::INLINE)),
        ("IBV_WC_SEND", i64::from(wc_opcode::SEND)),
        ("IBV_WC_RDMA_WRITE", i64::from(wc_opcode::RDMA_WRITE)),
        ("IBV_WC_RDMA_READ", i64::from(wc_opcode::RDMA_READ)),
        ("IBV_WC_COMP_SWAP", i64::from(wc_opcode::COMP_SWAP)),
        ("IBV_WC_FETCH_ADD", i64::from(wc_opcode::FETCH_ADD)),
        ("IBV_WC_RECV", i64::from(wc_opcode::RECV)),
        (
            "IBV_WC_RECV_RDMA_WITH_IMM",
            i64::from(wc_opcode::RECV_RDMA_WITH_IMM),
        ),
        ("IBV_WC_WITH_IMM", i64::from(IBV_WC_WITH_IMM)),
        ("IBV_WC_SUCCESS", i64::from(wc_status::SUCCESS)),
        ("IBV_WC_LOC_LEN_ERR", i64::from(wc_status::LOC_LEN_ERR)),
        ("IBV_WC_LOC_QP_OP_ERR", i64::from(wc_status::LOC_QP_OP_ERR)),
        (
            "IBV_WC_LOC_EEC_OP_ERR",
            i64::from(wc_status::LOC_EEC_OP_ERR),
        ),
        ("IBV_WC_LOC_PROT_ERR", i64::from(wc_status::LOC_PROT_ERR)),
        ("IBV_WC_WR_FLUSH_ERR", i64::from(wc_status::WR_FLUSH_ERR)),
        ("IBV_WC_MW_BIND_ERR", i64::from(wc_status::MW_BIND_ERR)),
        ("IBV_WC_BAD_RESP_ERR", i64::from(wc_status::BAD_RESP_ERR)),
        (
            "IBV_WC_LOC_ACCESS_ERR",
            i64::from(wc_status::LOC_ACCESS_ERR),
        ),
        (
            "IBV_WC_REM_INV_REQ_ERR",
            i64::from(wc_status::REM_INV_REQ_ERR),
        ),
        (
            "IBV_WC_REM_ACCESS_ERR",
            i64::from(wc_status::REM_ACCESS_ERR),
        ),
        ("IBV_WC_REM_OP_ERR", i64::from(wc_status::REM_OP_ERR)),
        ("IBV_WC_RETRY_EXC_ERR", i64::from(wc_status::RETRY_EXC_ERR)),
        (
            "IBV_WC_RNR_RETRY_EXC_ERR",
            i64::from(wc_status::RNR_RETRY_EXC_ERR),
        ),
        (
            "IBV_WC_LOC_RDD_VIOL_ERR",
            i64::from(wc_status::LOC_RDD_VIOL_ERR),
        ),
        (
            "IBV_WC_REM_INV_RD_REQ_ERR",
            i64::from(wc_status::REM_INV_RD_REQ_ERR),
        ),
        ("IBV_WC_REM_ABORT_ERR", i64::from(wc_status::REM_ABORT_ERR)),
        ("IBV_WC_INV_EECN_ERR", i64::from(wc_status::INV_EECN_ERR)),
        (
            "IBV_WC_INV_EEC_STATE_ERR",
            i64::from(wc_status::INV_EEC_STATE_ERR),
        ),
        ("IBV_WC_FATAL_ERR", i64::from(wc_status::FATAL_ERR)),
        (
            "IBV_WC_RESP_TIMEOUT_ERR",
            i64::from(wc_status::RESP_TIMEOUT_ERR),
        ),
        ("IBV_WC_GENERAL_ERR", i64::from(wc_status::GENERAL_ERR)),
        (
            "IBV_LINK_LAYER_INFINIBAND",
            i64::from(IBV_LINK_LAYER_INFINIBAND),
        ),
        (
            "IBV_LINK_LAYER_ETHERNET",
            i64::from(IBV_LINK_LAYER_ETHERNET),
        ),
        ("IBV_PORT_ACTIVE", i64::from(IBV_PORT_ACTIVE)),
        ("IBV_GID_TYPE_ROCE_V2", i64::from(IBV_GID_TYPE_ROCE_V2)),
        (
            "IBV_ACCESS_LOCAL_WRITE",
            i64::from(crate::types::access::LOCAL_WRITE),
        ),
        (
            "IBV_ACCESS_REMOTE_WRITE",
            i64::from(crate::types::access::REMOTE_WRITE),
        ),
        (
            "IBV_ACCESS_REMOTE_READ",
            i64::from(crate::types::access::REMOTE_READ),
        ),
        (
            "IBV_ACCESS_REMOTE_ATOMIC",
            i64::from(crate::types::access::REMOTE_ATOMIC),
        ),
        ("MLX5DV_OBJ_QP", MLX5DV_OBJ_QP as i64),
        ("MLX5DV_OBJ_CQ", MLX5DV_OBJ_CQ as i64),
        ("MLX5DV_OBJ_SRQ", MLX5DV_OBJ_SRQ as i64),
        ("MLX5DV_SRQ_MASK_SRQN", MLX5DV_SRQ_MASK_SRQN as i64),
        (
            "MLX5DV_CONTEXT_MASK_CQE_COMPRESION",
            MLX5DV_CONTEXT_MASK_CQE_COMPRESION as i64,
        ),
        (
            "MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE",
            MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE as i64,
        ),
        (
            "MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE",
            MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE as i64,
        ),
        ("IBV_QPT_DRIVER", i64::from(IBV_QPT_DRIVER)),
        ("IBV_QP_INIT_ATTR_PD", i64::from(IBV_QP_INIT_ATTR_PD)),
        (
            "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
            i64::from(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS),
        ),
        (
            "IBV_QP_EX_WITH_RDMA_WRITE",
            IBV_QP_EX_WITH_RDMA_WRITE as i64,
        ),
        (
            "IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM",
            IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as i64,
        ),
        ("IBV_QP_EX_WITH_RDMA_READ", IBV_QP_EX_WITH_RDMA_READ as i64),
        ("MLX5DV_OBJ_AH", MLX5DV_OBJ_AH as i64),
        (
            "MLX5DV_CONTEXT_MASK_DCI_STREAMS",
            MLX5DV_CONTEXT_MASK_DCI_STREAMS as i64,
        ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_DC",
            MLX5DV_QP_INIT_ATTR_MASK_DC as i64,
        ),
        (
            "MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS",
            MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS as i64,
        ),
        ("MLX5DV_DCTYPE_DCT", i64::from(MLX5DV_DCTYPE_DCT)),
        ("MLX5DV_DCTYPE_DCI", i64::from(MLX5DV_DCTYPE_DCI)),
    ]
}
