//! YCSB (Yahoo! Cloud Serving Benchmark) in Rust, drawing the same keys with the
//! same distributions as the Java reference and printing its text report.

pub mod db;
mod driver;
pub mod fnv;
pub mod generator;
pub mod measure;
mod phase;
pub mod properties;
pub mod report;
pub mod rng;
pub mod runner;
mod values;
pub mod workload;
