//! Opening the RDMA device a client or server runs on.

use mlx5::device::{Context as Device, DeviceError};

/// Opens `name`: a NIC (`mlx5_0`, …), a software device (`sim0`, …) in
/// `fabric` (or the fabric `MLX5_SIM_FABRIC` names), or `auto`: the first
/// mlx5 NIC, else the software device `software`.
pub fn open_device(
    name: &str,
    fabric: Option<&str>,
    software: &str,
) -> Result<Device, DeviceError> {
    let name = if name == "auto" {
        match fabric {
            // A named fabric means the software device was asked for.
            Some(_) => software,
            None => return Device::open_auto(software),
        }
    } else {
        name
    };
    match fabric {
        Some(f) if name.starts_with("sim") => Device::open_in(f, name),
        _ => Device::open(name),
    }
}
