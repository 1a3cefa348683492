//! The one place that opens a device and picks the data path for it.
//!
//! mlx5 NICs and the software device take the direct path ([`Mlx5`]); any
//! other RDMA device (soft-RoCE `rxe`, …) takes the verbs path ([`Verbs`]).
//! A program states what it wants in a [`DeviceSpec`] and hands its work over
//! as an [`OnTransport`]; [`run_on_device`] makes the choice once and runs that
//! work monomorphized for the chosen transport, so the direct path pays
//! nothing for the existence of the other.

use std::fmt;
use std::str::FromStr;

use mlx5::device::{Context as Device, DeviceError};
use mlx5::wr::DataPath;

use super::{Dc, Mlx5, Transport, Verbs};

/// Which device to open.
#[derive(Debug, Clone, Copy)]
pub struct DeviceSpec<'a> {
    /// A NIC (`mlx5_0`, `rxe0`, …), a software device (`sim0`, …), or `auto`:
    /// the first mlx5 NIC, else the software device [`software`](Self::software).
    pub name: &'a str,
    /// The software-device fabric; `None` for the one `MLX5_SIM_FABRIC` names.
    /// Naming a fabric with `auto` asks for the software device.
    pub fabric: Option<&'a str>,
    /// The software device `auto` falls back to (`sim0` for clients, `sim1`
    /// for servers, so the two ends of one host are different devices).
    pub software: &'a str,
}

impl DeviceSpec<'_> {
    /// Opens the device.
    pub fn open(&self) -> Result<Device, DeviceError> {
        let name = if self.name == "auto" {
            match self.fabric {
                Some(_) => self.software,
                None => return Device::open_auto(self.software),
            }
        } else {
            self.name
        };
        match self.fabric {
            Some(f) if name.starts_with("sim") => Device::open_in(f, name),
            _ => Device::open(name),
        }
    }
}

/// Work generic over the transport: [`run_on_device`] calls [`run`](Self::run)
/// with the transport the device calls for.
pub trait OnTransport {
    /// What the work returns.
    type Output;
    /// Runs on transport `T` over `dev`.
    fn run<T: Transport>(self, dev: Device) -> Self::Output;
}

/// Runs `work` on the transport `dev` calls for.
pub fn run_on_device<W: OnTransport>(dev: Device, work: W) -> W::Output {
    match DataPath::of(&dev) {
        DataPath::Direct => work.run::<Mlx5>(dev),
        DataPath::Verbs => work.run::<Verbs>(dev),
    }
}

/// How a program's contexts reach their peers: RC (one QP per endpoint, on
/// every device) or DC (one DC target per context and a shared pool of DC
/// initiators, mlx5 only). Both ends of a connection use the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wire {
    /// Reliable Connected: one QP per endpoint.
    #[default]
    Rc,
    /// Dynamically Connected: endpoints that cost no QP each.
    Dc,
}

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wire::Rc => "rc",
            Wire::Dc => "dc",
        })
    }
}

impl FromStr for Wire {
    type Err = String;
    fn from_str(s: &str) -> Result<Wire, String> {
        match s {
            "rc" => Ok(Wire::Rc),
            "dc" => Ok(Wire::Dc),
            _ => Err(format!("transport {s:?}: rc or dc")),
        }
    }
}

/// Runs `work` over `wire` on `dev`: RC on the transport the device calls
/// for, DC on the mlx5 direct path. A device without DC (one on the verbs
/// path, such as kernel soft-RoCE) gives the work back with the reason.
pub fn run_on_device_as<W: OnTransport>(
    dev: Device,
    wire: Wire,
    work: W,
) -> Result<W::Output, (W, DeviceError)> {
    match (wire, DataPath::of(&dev)) {
        (Wire::Rc, _) => Ok(run_on_device(dev, work)),
        (Wire::Dc, DataPath::Direct) => Ok(work.run::<Dc>(dev)),
        (Wire::Dc, DataPath::Verbs) => {
            let why = DeviceError::Invalid(format!(
                "{} is on the verbs path, which has no DC transport (kernel soft-RoCE has \
                 none): use transport = rc",
                dev.name()
            ));
            Err((work, why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Wire;

    #[test]
    fn wire_names_round_trip_and_others_are_refused() {
        for w in [Wire::Rc, Wire::Dc] {
            assert_eq!(w.to_string().parse::<Wire>(), Ok(w));
        }
        assert!("ud".parse::<Wire>().unwrap_err().contains("rc or dc"));
        assert_eq!(Wire::default(), Wire::Rc);
    }
}
