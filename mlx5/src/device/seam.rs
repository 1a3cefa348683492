//! The seam between the device API's objects and the backends: every call
//! into a backend goes through [`backend!`], the one place that matches an
//! object on its backend (its software arm exists only with the `sim`
//! feature), and a call that takes several objects of one device takes each
//! one's backend part with `sim_part` / `hw_part`, written once for all
//! objects by [`backend_parts!`]. Besides the enums' variants, only opening
//! a device names a backend.

#[cfg(feature = "sim")]
use crate::types::error::DeviceError;

/// The seam: runs one expression per backend on the backend object inside
/// `self` (a front enum). `backend!(self, x => x.f())` calls the same method
/// on either; `backend!(self, Sim(x) => a, Hw(y) => b)` gives each its own.
/// The software device's arm exists only with the `sim` feature.
macro_rules! backend {
    ($obj:expr, $x:ident => $both:expr) => {
        backend!($obj, Sim($x) => $both, Hw($x) => $both)
    };
    ($obj:expr, Sim($s:pat) => $sim:expr, Hw($h:pat) => $hw:expr $(,)?) => {
        match $obj {
            #[cfg(feature = "sim")]
            Self::Sim($s) => $sim,
            Self::Hw($h) => $hw,
        }
    };
}

/// The backend parts of a front enum, for a call that takes several objects
/// and needs them all on the device it runs on.
macro_rules! backend_parts {
    ($front:ident, $sim:ty, $hw:ty) => {
        impl $front {
            /// The software device's object, else [`mixed`].
            #[cfg(feature = "sim")]
            pub(super) fn sim_part(&self) -> Result<&$sim, DeviceError> {
                backend!(self, Sim(x) => Ok(x), Hw(_) => Err(mixed()))
            }
            /// The NIC's object, else [`mixed`].
            pub(super) fn hw_part(&self) -> Result<&$hw, DeviceError> {
                backend!(self, Sim(_) => Err(mixed()), Hw(x) => Ok(x))
            }
        }
    };
}
pub(super) use backend;
pub(super) use backend_parts;

/// Objects of two devices (or two backends) were handed to one call.
#[cfg(feature = "sim")]
pub(super) fn mixed() -> DeviceError {
    DeviceError::Invalid("objects of different devices".into())
}

/// The software device asked for the verbs data path.
#[cfg(feature = "sim")]
pub(super) fn no_verbs() -> DeviceError {
    DeviceError::Invalid("the software device has the direct (mlx5) data path only".into())
}
