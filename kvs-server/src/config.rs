//! Server settings, from a TOML file (every key optional).
//!
//! ```toml
//! listen = "0.0.0.0:7000"   # TCP address for connection setup
//! device = "auto"           # mlx5_0, sim1, … or auto (a NIC, else sim1)
//! fabric = "kvs"            # software device fabric (default $MLX5_SIM_FABRIC)
//! workers = 2               # worker threads, one copyrpc context each
//! slots = 1024              # shards (hash slots)
//! max_key = 1024            # bytes
//! max_value = 65536         # bytes
//! ring_size = 1048576       # copyrpc ring per endpoint (power of two)
//! max_endpoints = 1024      # per worker
//! stats_interval_s = 10     # 0: no stats lines
//! ```

use std::net::SocketAddr;
use std::path::Path;

/// Server settings.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// TCP address for connection setup.
    pub listen: SocketAddr,
    /// The RDMA device (`auto`: the first mlx5 NIC, else software device
    /// `sim1`).
    pub device: String,
    /// The software device's fabric (default: the one `MLX5_SIM_FABRIC` names).
    pub fabric: Option<String>,
    /// Worker threads.
    pub workers: u16,
    /// Shards (hash slots), dealt round-robin to the workers.
    pub slots: u32,
    /// Largest key, in bytes.
    pub max_key: usize,
    /// Largest value, in bytes.
    pub max_value: usize,
    /// copyrpc ring size per endpoint.
    pub ring_size: u64,
    /// Most endpoints (client connections) per worker.
    pub max_endpoints: u32,
    /// Seconds between stats lines (0: none).
    pub stats_interval_s: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7000".parse().expect("a valid address"),
            device: "auto".into(),
            fabric: None,
            workers: 1,
            slots: 1024,
            max_key: 1024,
            max_value: 64 << 10,
            ring_size: 1 << 20,
            max_endpoints: 1024,
            stats_interval_s: 10,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, or unknown keys.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A value out of range.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses TOML text and checks the values.
    pub fn from_toml(s: &str) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(s)?;
        c.validate()?;
        Ok(c)
    }

    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let s = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&s)
    }

    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if self.workers == 0 {
            return bad("workers must be at least 1".into());
        }
        if self.slots == 0 || self.slots > kvs_proto::shard::MAX_SLOTS {
            return bad(format!(
                "slots must be in 1..={}",
                kvs_proto::shard::MAX_SLOTS
            ));
        }
        if self.slots < u32::from(self.workers) {
            return bad("fewer slots than workers".into());
        }
        if !self.ring_size.is_power_of_two() || self.ring_size < 4096 {
            return bad("ring_size must be a power of two of at least 4096".into());
        }
        if self.max_key == 0 || self.max_key > u16::MAX as usize {
            return bad("max_key must be in 1..=65535".into());
        }
        // A PUT of the largest key and value must fit one copyrpc message.
        let largest = self.max_key + self.max_value + 64;
        if largest as u64 > self.ring_size / 8 {
            return bad(format!(
                "max_key + max_value ({largest} bytes with headers) must be at most ring_size / 8 ({})",
                self.ring_size / 8
            ));
        }
        // The shard map travels in one answer.
        if 2 * u64::from(self.slots) + 64 > self.ring_size / 4 {
            return bad("the shard map (2 bytes per slot) must fit ring_size / 4".into());
        }
        if self.max_endpoints == 0 {
            return bad("max_endpoints must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_partial_files_and_errors() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
        let c = Config::from_toml("workers = 4\nlisten = \"0.0.0.0:9000\"\n").unwrap();
        assert_eq!((c.workers, c.listen.port(), c.slots), (4, 9000, 1024));
        let e = Config::from_toml("wrokers = 4").unwrap_err().to_string();
        assert!(e.contains("wrokers"), "{e}");
        let e = Config::from_toml("workers = 0").unwrap_err().to_string();
        assert!(e.contains("workers"), "{e}");
        let e = Config::from_toml("max_value = 1000000")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ring_size / 8"), "{e}");
        assert!(Config::from_toml("ring_size = 3000").is_err());
    }
}
