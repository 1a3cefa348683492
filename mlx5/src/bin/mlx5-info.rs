//! `mlx5-info`: lists RDMA devices, ports, GIDs and capabilities like
//! `ibv_devinfo`, plus the mlx5 ones this stack uses (CQE compression,
//! BlueFlame size, max inline); and the software devices.

use clap::Parser;
use mlx5::device::TmCaps;
use mlx5::hw::{self, HwContext, HwError};

/// List RDMA devices (hardware through rdma-core, and the software mlx5 device).
#[derive(Parser, Debug)]
#[command(name = "mlx5-info", version)]
struct Args {
    /// Show only this device (`mlx5_0`, `sim0`, …).
    #[arg(short, long)]
    device: Option<String>,
    /// Skip the software devices.
    #[arg(long)]
    no_sim: bool,
}

fn gid_str(g: &[u8; 16]) -> String {
    if g[..10] == [0; 10] && g[10..12] == [0xff, 0xff] {
        return format!("::ffff:{}.{}.{}.{}", g[12], g[13], g[14], g[15]);
    }
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn mtu(code: u32) -> u32 {
    if (1..=5).contains(&code) {
        128 << code
    } else {
        0
    }
}

fn formats(f: u32) -> String {
    let mut v = Vec::new();
    if f & 1 != 0 {
        v.push("HASH");
    }
    if f & 2 != 0 {
        v.push("CSUM");
    }
    if f & 4 != 0 {
        v.push("CSUM_STRIDX");
    }
    v.join("|")
}

/// A device's tag matching, as `ibv_devinfo -v` puts it.
fn tm(t: &TmCaps) -> String {
    if t.max_num_tags == 0 {
        return "not supported".into();
    }
    format!(
        "{} tags, {} outstanding ops, {} SGE, rendezvous header {} B{}",
        t.max_num_tags,
        t.max_ops,
        t.max_sge,
        t.max_rndv_hdr_size,
        if t.rc { ", RC" } else { "" }
    )
}

fn show_hw(name: &str) -> Result<(), HwError> {
    let d = hw::query_device(name)?;
    println!(
        "hca_id: {}  ({})",
        d.name,
        if d.is_mlx5 {
            "mlx5: direct data path"
        } else {
            "not mlx5: verbs data path"
        }
    );
    println!("    fw_ver:          {}", d.fw_ver);
    println!("    node_guid:       {:016x}", d.node_guid);
    println!(
        "    vendor_id:       {:#06x}, part {}",
        d.vendor.0, d.vendor.1
    );
    println!(
        "    max_qp:          {}  max_qp_wr: {}  max_cqe: {}  max_sge: {}  max_srq_wr: {}",
        d.max_qp, d.max_qp_wr, d.max_cqe, d.max_sge, d.max_srq_wr
    );
    if let Some(m) = d.mlx5 {
        if m.cqe_comp_max_num > 0 {
            println!(
                "    cqe_compression: max session {}, formats {}",
                m.cqe_comp_max_num,
                formats(m.cqe_comp_formats)
            );
        } else {
            println!("    cqe_compression: not supported");
        }
        match HwContext::open(name).and_then(|c| c.probe_bf_and_inline()) {
            Ok((bf, inl)) => println!("    blueflame:       {bf} B per half ({} B register)\n    max_inline:      {inl} B", 2 * bf),
            Err(e) => println!("    blueflame/inline: probe failed: {e}"),
        }
    }
    println!("    tag_matching:    {}", tm(&d.tm));
    for p in &d.ports {
        println!("    port: {}", p.num);
        println!(
            "        state:       {}",
            if p.state == 4 {
                "PORT_ACTIVE (4)".to_string()
            } else {
                format!("{}", p.state)
            }
        );
        println!(
            "        active_mtu:  {} ({})",
            mtu(p.active_mtu),
            p.active_mtu
        );
        println!(
            "        link_layer:  {}",
            match p.link_layer {
                1 => "InfiniBand",
                2 => "Ethernet",
                _ => "unspecified",
            }
        );
        println!("        lid:         {}", p.lid);
        println!("        max_msg_sz:  {:#x}", p.max_msg_sz);
        for g in &p.gids {
            let t = match g.gid_type {
                0 => "IB/RoCE v1",
                1 => "RoCE v1",
                2 => "RoCE v2",
                _ => "?",
            };
            println!("        GID[{:3}]:    {} ({t})", g.index, gid_str(&g.gid));
        }
    }
    Ok(())
}

/// Lists the software devices of the fabric `MLX5_SIM_FABRIC` names (all
/// eight when `device` asks for one of them, else `sim0` and `sim1`):
/// how many it showed.
#[cfg(feature = "sim")]
fn list_software(device: Option<&str>) -> usize {
    let want = |n: &str| device.is_none_or(|d| d == n);
    let mut shown = 0;
    let fabric = mlx5::sim::fabric::fabric_name_from_env();
    let exists = mlx5::sim::fabric::Fabric::exists(&fabric);
    for i in 0..8 {
        let n = format!("sim{i}");
        if !want(&n) || (device.is_none() && i >= 2) {
            continue;
        }
        if exists {
            show_sim(&fabric, &n);
        } else if device.is_some() || i == 0 {
            println!(
                "{}: software mlx5 devices of fabric {fabric:?} (MLX5_SIM_FABRIC), not \
                 created yet: the first program that opens one creates the fabric",
                device.unwrap_or("sim0..sim7")
            );
        }
        shown += 1;
    }
    shown
}

/// This build has no software device (the `sim` feature): none to list.
#[cfg(not(feature = "sim"))]
fn list_software(_device: Option<&str>) -> usize {
    0
}

/// Shows software device `name` of `fabric`, which exists: looking at it
/// joins it, never creates it.
#[cfg(feature = "sim")]
fn show_sim(fabric: &str, name: &str) {
    match mlx5::sim::device::SimContext::open_in(fabric, name) {
        Ok(c) => {
            println!("hca_id: {name}  (software mlx5 device, fabric {fabric:?})");
            println!("    lid:             {}", c.lid());
            println!("    gid:             {}", gid_str(&c.gid()));
            println!("    cqe_compression: enhanced and basic layouts (CqAttr::compression)");
            println!("    scatter_to_cqe:  32 B (64 B CQEs), 64 B (128 B CQEs)");
            println!("    blueflame:       256 B per half (an ordinary page)");
            println!("    max_inline:      per QP (QpCaps::max_inline, default 256 B)");
            println!("    tag_matching:    {}", tm(&c.tm_caps()));
            println!("    exec_mode:       {:?}", c.exec_mode());
        }
        Err(e) => println!("{name}: {e}"),
    }
}

fn main() {
    let args = Args::parse();
    mlx5::log_to_stderr();
    let want = |n: &str| args.device.as_deref().is_none_or(|d| d == n);
    let mut shown = 0;
    match hw::list_devices() {
        Ok(names) => {
            for n in names.iter().filter(|n| want(n)) {
                if let Err(e) = show_hw(n) {
                    println!("{n}: {e}");
                }
                shown += 1;
            }
        }
        Err(e) => println!("hardware: {e}"),
    }
    if !args.no_sim {
        shown += list_software(args.device.as_deref());
    }
    if shown == 0 {
        if let Some(d) = &args.device {
            eprintln!("mlx5-info: no device named {d:?}");
            std::process::exit(1);
        }
    }
}
