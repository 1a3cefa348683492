//! Loading libibverbs and libmlx5 at run time (`dlopen`, as NCCL's ibvwrap
//! does), so the default build needs no RDMA packages and one binary works with
//! or without a NIC.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use super::ffi::*;

/// Environment variable overriding the libibverbs file name.
pub(crate) const IBVERBS_ENV: &str = "MLX5_LIBIBVERBS";
/// Environment variable overriding the libmlx5 file name.
pub(crate) const MLX5_ENV: &str = "MLX5_LIBMLX5";

pub use crate::types::error::HwError;

#[derive(Debug)]
struct Lib(*mut c_void);
// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Lib {}
// SAFETY: as above.
unsafe impl Sync for Lib {}

impl Lib {
    fn open(name: &str) -> Result<Lib, HwError> {
        let c = CString::new(name).map_err(|_| HwError::LibraryMissing {
            lib: name.into(),
            reason: "name contains NUL".into(),
        })?;
        // SAFETY: dlopen with a valid C string.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(HwError::LibraryMissing {
                lib: name.into(),
                reason: dlerror(),
            });
        }
        Ok(Lib(h))
    }

    /// # Safety
    /// `T` must be the function pointer type of the symbol's C prototype.
    unsafe fn sym<T: Copy>(&self, lib: &str, name: &'static str) -> Result<T, HwError> {
        debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
        let c = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: a live handle and a valid C string.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        if p.is_null() {
            return Err(HwError::SymbolMissing {
                lib: lib.into(),
                symbol: name,
            });
        }
        // SAFETY: the caller names the right prototype; pointer-sized.
        Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns a thread-local string or null.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: a NUL-terminated string from libdl.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The libmlx5 entry points; each field is the `mlx5dv_*` function of that name.
#[allow(missing_docs)]
#[derive(Debug)]
pub(crate) struct Mlx5Fns {
    pub(crate) is_supported: unsafe extern "C" fn(*mut ibv_device) -> bool,
    pub(crate) query_device: unsafe extern "C" fn(*mut ibv_context, *mut mlx5dv_context) -> c_int,
    pub(crate) create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        *mut ibv_cq_init_attr_ex,
        *mut mlx5dv_cq_init_attr,
    ) -> *mut ibv_cq,
    pub(crate) init_obj: unsafe extern "C" fn(*mut mlx5dv_obj, u64) -> c_int,
    pub(crate) create_qp: unsafe extern "C" fn(
        *mut ibv_context,
        *mut ibv_qp_init_attr_ex,
        *mut mlx5dv_qp_init_attr,
    ) -> *mut ibv_qp,
    /// Absent before rdma-core 37 (DCI streams): then only
    /// [`HwQp::reset_dci_stream`](super::HwQp::reset_dci_stream) fails.
    pub(crate) dci_stream_id_reset: Option<unsafe extern "C" fn(*mut ibv_qp, u16) -> c_int>,
    /// `mlx5dv_qp_ex_from_ibv_qp_ex`, for the oracle tests of the DC WQE
    /// writer (absent on old rdma-core; loaded with `rdma-core-oracle` only).
    #[cfg(feature = "rdma-core-oracle")]
    pub(crate) qp_ex_from_ibv_qp_ex: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    _lib: Lib,
}

/// The libibverbs entry points (each field is the `ibv_*` function of that
/// name; `query_gid_ex` is `_ibv_query_gid_ex`), and libmlx5's when it loads.
/// Opaque outside the crate: [`Verbs::load_from`] tells whether libraries of
/// given names load, which the crate otherwise does on its own (names from
/// `MLX5_LIBIBVERBS` / `MLX5_LIBMLX5`, default `libibverbs.so.1`,
/// `libmlx5.so.1`).
#[allow(missing_docs)]
#[derive(Debug)]
pub struct Verbs {
    pub(crate) get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    pub(crate) free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    pub(crate) get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    pub(crate) open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    pub(crate) close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub(crate) query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    pub(crate) query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub(crate) query_gid_ex:
        unsafe extern "C" fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int,
    pub(crate) alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    pub(crate) dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    pub(crate) reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub(crate) dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub(crate) create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    pub(crate) destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub(crate) create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    pub(crate) destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    pub(crate) get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    pub(crate) ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, u32),
    pub(crate) create_srq:
        unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    pub(crate) destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    pub(crate) create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub(crate) modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub(crate) query_qp:
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    pub(crate) destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub(crate) create_ah: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
    pub(crate) destroy_ah: unsafe extern "C" fn(*mut ibv_ah) -> c_int,
    /// `ibv_qp_to_qp_ex`, for the oracle tests of the DC WQE writer (absent
    /// on old rdma-core; loaded with `rdma-core-oracle` only).
    #[cfg(feature = "rdma-core-oracle")]
    pub(crate) qp_to_qp_ex: Option<unsafe extern "C" fn(*mut ibv_qp) -> *mut c_void>,
    /// libmlx5, or why it did not load.
    pub(crate) mlx5: Result<Mlx5Fns, HwError>,
    _lib: Lib,
}

impl Verbs {
    /// Loads the libraries under the given file names.
    pub fn load_from(ibverbs: &str, mlx5: &str) -> Result<Verbs, HwError> {
        let lib = Lib::open(ibverbs)?;
        let l = ibverbs;
        // SAFETY: each prototype matches rdma-core's verbs.h.
        unsafe {
            Ok(Verbs {
                get_device_list: lib.sym(l, "ibv_get_device_list")?,
                free_device_list: lib.sym(l, "ibv_free_device_list")?,
                get_device_name: lib.sym(l, "ibv_get_device_name")?,
                open_device: lib.sym(l, "ibv_open_device")?,
                close_device: lib.sym(l, "ibv_close_device")?,
                query_device: lib.sym(l, "ibv_query_device")?,
                query_port: lib.sym(l, "ibv_query_port")?,
                query_gid_ex: lib.sym(l, "_ibv_query_gid_ex")?,
                alloc_pd: lib.sym(l, "ibv_alloc_pd")?,
                dealloc_pd: lib.sym(l, "ibv_dealloc_pd")?,
                reg_mr: lib.sym(l, "ibv_reg_mr")?,
                dereg_mr: lib.sym(l, "ibv_dereg_mr")?,
                create_cq: lib.sym(l, "ibv_create_cq")?,
                destroy_cq: lib.sym(l, "ibv_destroy_cq")?,
                create_comp_channel: lib.sym(l, "ibv_create_comp_channel")?,
                destroy_comp_channel: lib.sym(l, "ibv_destroy_comp_channel")?,
                get_cq_event: lib.sym(l, "ibv_get_cq_event")?,
                ack_cq_events: lib.sym(l, "ibv_ack_cq_events")?,
                create_srq: lib.sym(l, "ibv_create_srq")?,
                destroy_srq: lib.sym(l, "ibv_destroy_srq")?,
                create_qp: lib.sym(l, "ibv_create_qp")?,
                modify_qp: lib.sym(l, "ibv_modify_qp")?,
                query_qp: lib.sym(l, "ibv_query_qp")?,
                destroy_qp: lib.sym(l, "ibv_destroy_qp")?,
                create_ah: lib.sym(l, "ibv_create_ah")?,
                destroy_ah: lib.sym(l, "ibv_destroy_ah")?,
                #[cfg(feature = "rdma-core-oracle")]
                qp_to_qp_ex: lib.sym(l, "ibv_qp_to_qp_ex").ok(),
                mlx5: Self::load_mlx5(mlx5),
                _lib: lib,
            })
        }
    }

    fn load_mlx5(name: &str) -> Result<Mlx5Fns, HwError> {
        let lib = Lib::open(name)?;
        // SAFETY: each prototype matches rdma-core's mlx5dv.h.
        unsafe {
            Ok(Mlx5Fns {
                is_supported: lib.sym(name, "mlx5dv_is_supported")?,
                query_device: lib.sym(name, "mlx5dv_query_device")?,
                create_cq: lib.sym(name, "mlx5dv_create_cq")?,
                init_obj: lib.sym(name, "mlx5dv_init_obj")?,
                create_qp: lib.sym(name, "mlx5dv_create_qp")?,
                dci_stream_id_reset: lib.sym(name, "mlx5dv_dci_stream_id_reset").ok(),
                #[cfg(feature = "rdma-core-oracle")]
                qp_ex_from_ibv_qp_ex: lib.sym(name, "mlx5dv_qp_ex_from_ibv_qp_ex").ok(),
                _lib: lib,
            })
        }
    }
}

/// The process-wide libraries, loaded on first use from the names in
/// [`IBVERBS_ENV`] / [`MLX5_ENV`] (default `libibverbs.so.1`, `libmlx5.so.1`).
pub(crate) fn verbs() -> Result<&'static Verbs, HwError> {
    static V: OnceLock<Result<Verbs, HwError>> = OnceLock::new();
    V.get_or_init(|| {
        let ib = std::env::var(IBVERBS_ENV).unwrap_or_else(|_| "libibverbs.so.1".into());
        let m5 = std::env::var(MLX5_ENV).unwrap_or_else(|_| "libmlx5.so.1".into());
        Verbs::load_from(&ib, &m5)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The errno of the last failed call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
