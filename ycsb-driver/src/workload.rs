//! Java YCSB's `CoreWorkload`: workload properties, key choice and the
//! operation stream of each driver thread.
//!
//! [`CoreWorkload::new`] reads the properties (defaults as in Java) and builds
//! the generators once; [`CoreWorkload::thread_state`] hands each driver
//! thread a [`WorkloadThread`] that draws keys and operations with the
//! thread's own [`Rng`] and shares, like Java, the load-phase key counter and
//! the run-phase insert counter with the other threads.
//!
//! Supported properties and their (Java) defaults:
//!
//! | property | default |
//! |---|---|
//! | `table` | `usertable` |
//! | `recordcount` | 0, meaning 2^31 − 1 |
//! | `operationcount` | 0 |
//! | `insertstart` | 0 |
//! | `insertcount` | `recordcount − insertstart` |
//! | `fieldcount` | 10 |
//! | `fieldlength` | 100 |
//! | `minfieldlength` | 1 |
//! | `fieldlengthdistribution` | `constant` (the only one supported) |
//! | `fieldnameprefix` | `field` |
//! | `readallfields` | true |
//! | `readallfieldsbyname` | false |
//! | `writeallfields` | false |
//! | `readproportion` | 0.95 |
//! | `updateproportion` | 0.05 |
//! | `insertproportion`, `scanproportion`, `readmodifywriteproportion` | 0 |
//! | `requestdistribution` | `uniform` (or `zipfian`, `latest`, `hotspot`, `sequential`, `exponential`) |
//! | `insertorder` | `hashed` (or `ordered`) |
//! | `zeropadding` | 1 |
//! | `minscanlength` | 1 |
//! | `maxscanlength` | 1000 |
//! | `scanlengthdistribution` | `uniform` (or `zipfian`) |
//! | `hotspotdatafraction` | 0.2 |
//! | `hotspotopnfraction` | 0.8 |
//! | `exponential.percentile` | 95 |
//! | `exponential.frac` | 0.8571428571 |
//! | `dataintegrity` | false (true: the driver writes values derived from key and field and checks every read) |
//! | `maxexecutiontime` | 0 (seconds after which no operation starts; those in flight finish; 0: no limit) |
//!
//! Where Java silently accepts a bad value (e.g. `readallfields=yes` read as
//! false, an unknown `insertorder` read as ordered, a hot-spot fraction out of
//! range replaced by 0), this module reports an error instead. Key numbers
//! are 64-bit throughout (Java truncates some to 32 bits).

use std::sync::Arc;

use crate::fnv::build_key_name;
use crate::generator::{
    AcknowledgedCounter, Counter, Discrete, Exponential, Hotspot, NumberGenerator,
    ScrambledZipfian, Sequential, SkewedLatest, Uniform, Zipfian, EXPONENTIAL_FRAC_DEFAULT,
    EXPONENTIAL_PERCENTILE_DEFAULT,
};
use crate::properties::{PropError, Properties};
use crate::rng::Rng;

/// `field` value of [`Op::Update`] / [`Op::ReadModifyWrite`] meaning "write
/// every field" (`writeallfields=true`).
pub const ALL_FIELDS: usize = usize::MAX;

/// Why a workload could not be built from its properties.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A property value is not of the right type.
    #[error(transparent)]
    Property(#[from] PropError),
    /// A valid YCSB setting that this driver does not implement.
    #[error("{key}={value} is not supported by this driver ({reason})")]
    Unsupported {
        /// The property name.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is supported instead.
        reason: &'static str,
    },
    /// A property whose value is none of the allowed names.
    #[error("unknown {key} `{value}` (expected one of: {expected})")]
    UnknownChoice {
        /// The property name.
        key: &'static str,
        /// Its value.
        value: String,
        /// The allowed values.
        expected: &'static str,
    },
    /// A property value (or a combination of values) that makes no sense.
    #[error("invalid {key}: {reason}")]
    Invalid {
        /// The property name(s).
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// How run-phase operations choose their record (`requestdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDistribution {
    /// Uniform over the loaded records.
    Uniform,
    /// Scrambled zipfian ([`ScrambledZipfian`]).
    Zipfian,
    /// Skewed towards the latest inserts ([`SkewedLatest`]).
    Latest,
    /// Hot set / cold set ([`Hotspot`]).
    Hotspot,
    /// All threads together sweep the records in order ([`Sequential`]).
    Sequential,
    /// Exponentially back from the latest insert ([`Exponential`]).
    Exponential,
}

impl RequestDistribution {
    /// The property value naming this distribution.
    pub fn name(self) -> &'static str {
        match self {
            RequestDistribution::Uniform => "uniform",
            RequestDistribution::Zipfian => "zipfian",
            RequestDistribution::Latest => "latest",
            RequestDistribution::Hotspot => "hotspot",
            RequestDistribution::Sequential => "sequential",
            RequestDistribution::Exponential => "exponential",
        }
    }
}

/// How scan lengths are drawn (`scanlengthdistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanLengthDistribution {
    /// Uniform in `minscanlength..=maxscanlength`.
    Uniform,
    /// Zipfian over `minscanlength..=maxscanlength`, favouring short scans.
    Zipfian,
}

/// The settings of a core workload, read from its properties.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// `table`: the table name.
    pub table: String,
    /// `fieldcount`: fields per record.
    pub field_count: usize,
    /// `fieldlength`: bytes per field (constant length).
    pub field_length: usize,
    /// `minfieldlength` (only meaningful for non-constant lengths).
    pub min_field_length: usize,
    /// `fieldnameprefix`: field `i` is named prefix + i.
    pub field_name_prefix: String,
    /// The field names, `field0`, `field1`, ….
    pub field_names: Vec<String>,
    /// `readallfields`: reads (and scans) read every field, else one random
    /// field.
    pub read_all_fields: bool,
    /// `readallfieldsbyname`: pass the field names when reading all fields.
    pub read_all_fields_by_name: bool,
    /// `writeallfields`: updates write every field, else one random field.
    pub write_all_fields: bool,
    /// `recordcount` (0 in the file means 2^31 − 1, as in Java).
    pub record_count: u64,
    /// `operationcount`: run-phase operations over all threads.
    pub operation_count: u64,
    /// `insertstart`: first record number of this client.
    pub insert_start: u64,
    /// `insertcount`: records this client loads and reads from.
    pub insert_count: u64,
    /// Load-phase inserts over all threads: `insertcount` if given, else
    /// `recordcount` (Java `Client`'s rule).
    pub load_count: u64,
    /// `readproportion`.
    pub read_proportion: f64,
    /// `updateproportion`.
    pub update_proportion: f64,
    /// `insertproportion`.
    pub insert_proportion: f64,
    /// `scanproportion`.
    pub scan_proportion: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write_proportion: f64,
    /// `requestdistribution`.
    pub request_distribution: RequestDistribution,
    /// `insertorder=ordered` (true) or `hashed` (false).
    pub ordered_inserts: bool,
    /// `zeropadding`: minimum digits of the key number.
    pub zero_padding: usize,
    /// `minscanlength`.
    pub min_scan_length: u64,
    /// `maxscanlength`.
    pub max_scan_length: u64,
    /// `scanlengthdistribution`.
    pub scan_length_distribution: ScanLengthDistribution,
    /// `hotspotdatafraction`.
    pub hotspot_data_fraction: f64,
    /// `hotspotopnfraction`.
    pub hotspot_opn_fraction: f64,
    /// `exponential.percentile`.
    pub exponential_percentile: f64,
    /// `exponential.frac`.
    pub exponential_frac: f64,
}

fn invalid(key: &'static str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid {
        key,
        reason: reason.into(),
    }
}

fn proportion(p: &Properties, key: &'static str, default: f64) -> Result<f64, WorkloadError> {
    let v = p.get_f64(key, default)?;
    if v < 0.0 {
        return Err(invalid(key, format!("{v} is negative")));
    }
    Ok(v)
}

fn fraction(p: &Properties, key: &'static str, default: f64) -> Result<f64, WorkloadError> {
    let v = p.get_f64(key, default)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(invalid(key, format!("{v} is not between 0 and 1")));
    }
    Ok(v)
}

/// `key`'s value among `options` (name, value), `default` when unset.
fn choice<T: Copy>(
    p: &Properties,
    key: &'static str,
    default: &str,
    options: &[(&str, T)],
    expected: &'static str,
) -> Result<T, WorkloadError> {
    let v = p.get_str(key, default);
    match options.iter().find(|(name, _)| *name == v) {
        Some(&(_, t)) => Ok(t),
        None => Err(WorkloadError::UnknownChoice {
            key,
            value: v.to_owned(),
            expected,
        }),
    }
}

/// `fieldcount` and `fieldlength`, with the properties about them that
/// are checked here: `fieldlengthdistribution` (only `constant`) and the
/// spelling of `dataintegrity` (the driver's: deterministic values, every
/// read checked).
fn record_layout(p: &Properties) -> Result<(usize, usize), WorkloadError> {
    let field_count = p.get_usize("fieldcount", 10)?;
    if field_count == 0 {
        return Err(invalid("fieldcount", "a record needs at least one field"));
    }
    let field_length = p.get_usize("fieldlength", 100)?;
    match p.get_str("fieldlengthdistribution", "constant") {
        "constant" => {}
        other @ ("uniform" | "zipfian" | "histogram") => {
            return Err(WorkloadError::Unsupported {
                key: "fieldlengthdistribution",
                value: other.to_owned(),
                reason: "only `constant` field lengths are supported",
            })
        }
        other => {
            return Err(WorkloadError::UnknownChoice {
                key: "fieldlengthdistribution",
                value: other.to_owned(),
                expected: "constant (uniform, zipfian and histogram are not supported)",
            })
        }
    }
    p.get_bool("dataintegrity", false)?;
    Ok((field_count, field_length))
}

/// The records: `recordcount`, `insertstart`, `insertcount`, and the
/// load phase's count.
struct Records {
    record_count: u64,
    insert_start: u64,
    insert_count: u64,
    load_count: u64,
}

impl Records {
    fn read(p: &Properties) -> Result<Records, WorkloadError> {
        let mut record_count = p.get_u64("recordcount", 0)?;
        if record_count == 0 {
            record_count = i32::MAX as u64; // Java: Integer.MAX_VALUE
        }
        let insert_start = p.get_u64("insertstart", 0)?;
        if insert_start >= record_count {
            return Err(invalid(
                "insertstart",
                format!("insertstart ({insert_start}) must be below recordcount ({record_count})"),
            ));
        }
        let insert_count = p.get_u64("insertcount", record_count - insert_start)?;
        if insert_count == 0 {
            return Err(invalid("insertcount", "must be at least 1"));
        }
        if insert_start
            .checked_add(insert_count)
            .is_none_or(|end| end > record_count)
        {
            return Err(invalid(
                "insertstart/insertcount",
                format!(
                    "recordcount ({record_count}) must be at least insertstart ({insert_start}) \
                     + insertcount ({insert_count})"
                ),
            ));
        }
        let load_count = if p.contains_key("insertcount") {
            insert_count
        } else {
            record_count
        };
        Ok(Records {
            record_count,
            insert_start,
            insert_count,
            load_count,
        })
    }
}

/// The operation proportions: read, update, insert, scan,
/// read-modify-write; not all zero.
fn proportions(p: &Properties) -> Result<[f64; 5], WorkloadError> {
    let mix = [
        proportion(p, "readproportion", 0.95)?,
        proportion(p, "updateproportion", 0.05)?,
        proportion(p, "insertproportion", 0.0)?,
        proportion(p, "scanproportion", 0.0)?,
        proportion(p, "readmodifywriteproportion", 0.0)?,
    ];
    if mix.iter().sum::<f64>() <= 0.0 {
        return Err(invalid(
            "readproportion/updateproportion/insertproportion/scanproportion/\
             readmodifywriteproportion",
            "all operation proportions are zero",
        ));
    }
    Ok(mix)
}

/// `minscanlength` and `maxscanlength`, in order.
fn scan_lengths(p: &Properties) -> Result<(u64, u64), WorkloadError> {
    let min = p.get_u64("minscanlength", 1)?;
    let max = p.get_u64("maxscanlength", 1000)?;
    if min > max {
        return Err(invalid(
            "minscanlength/maxscanlength",
            format!("minscanlength ({min}) is above maxscanlength ({max})"),
        ));
    }
    Ok((min, max))
}

/// `exponential.percentile` (strictly between 0 and 100) and
/// `exponential.frac` (positive).
fn exponential(p: &Properties) -> Result<(f64, f64), WorkloadError> {
    let percentile = p.get_f64("exponential.percentile", EXPONENTIAL_PERCENTILE_DEFAULT)?;
    if !(percentile > 0.0 && percentile < 100.0) {
        return Err(invalid(
            "exponential.percentile",
            format!("{percentile} is not strictly between 0 and 100"),
        ));
    }
    let frac = p.get_f64("exponential.frac", EXPONENTIAL_FRAC_DEFAULT)?;
    if frac <= 0.0 {
        return Err(invalid(
            "exponential.frac",
            format!("{frac} is not positive"),
        ));
    }
    Ok((percentile, frac))
}

impl WorkloadConfig {
    /// Reads and validates the core-workload properties.
    pub fn from_properties(p: &Properties) -> Result<Self, WorkloadError> {
        let (field_count, field_length) = record_layout(p)?;
        let field_name_prefix = p.get_str("fieldnameprefix", "field").to_owned();
        let field_names = (0..field_count)
            .map(|i| format!("{field_name_prefix}{i}"))
            .collect();
        let records = Records::read(p)?;
        let [read, update, insert, scan, rmw] = proportions(p)?;
        let (min_scan_length, max_scan_length) = scan_lengths(p)?;
        let (exponential_percentile, exponential_frac) = exponential(p)?;
        use RequestDistribution as D;
        let request_distribution = choice(
            p,
            "requestdistribution",
            "uniform",
            &[
                ("uniform", D::Uniform),
                ("zipfian", D::Zipfian),
                ("latest", D::Latest),
                ("hotspot", D::Hotspot),
                ("sequential", D::Sequential),
                ("exponential", D::Exponential),
            ],
            "uniform, zipfian, latest, hotspot, sequential, exponential",
        )?;
        let scan_length_distribution = choice(
            p,
            "scanlengthdistribution",
            "uniform",
            &[
                ("uniform", ScanLengthDistribution::Uniform),
                ("zipfian", ScanLengthDistribution::Zipfian),
            ],
            "uniform, zipfian",
        )?;
        let orders = [("hashed", false), ("ordered", true)];
        Ok(WorkloadConfig {
            table: p.get_str("table", "usertable").to_owned(),
            field_count,
            field_length,
            min_field_length: p.get_usize("minfieldlength", 1)?,
            field_name_prefix,
            field_names,
            read_all_fields: p.get_bool("readallfields", true)?,
            read_all_fields_by_name: p.get_bool("readallfieldsbyname", false)?,
            write_all_fields: p.get_bool("writeallfields", false)?,
            record_count: records.record_count,
            operation_count: p.get_u64("operationcount", 0)?,
            insert_start: records.insert_start,
            insert_count: records.insert_count,
            load_count: records.load_count,
            read_proportion: read,
            update_proportion: update,
            insert_proportion: insert,
            scan_proportion: scan,
            read_modify_write_proportion: rmw,
            request_distribution,
            ordered_inserts: choice(p, "insertorder", "hashed", &orders, "hashed, ordered")?,
            zero_padding: p.get_usize("zeropadding", 1)?,
            min_scan_length,
            max_scan_length,
            scan_length_distribution,
            hotspot_data_fraction: fraction(p, "hotspotdatafraction", 0.2)?,
            hotspot_opn_fraction: fraction(p, "hotspotopnfraction", 0.8)?,
            exponential_percentile,
            exponential_frac,
        })
    }
}

/// One run-phase operation, drawn by [`WorkloadThread::next_op`]; the key
/// name is written to the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read the record (all fields if [`WorkloadConfig::read_all_fields`],
    /// else one field from [`WorkloadThread::choose_field`]).
    Read,
    /// Overwrite field `field` of the record, or every field when `field` is
    /// [`ALL_FIELDS`] (`writeallfields=true`).
    Update {
        /// Field index, or [`ALL_FIELDS`].
        field: usize,
    },
    /// Insert a new record with key number `keynum` (all fields). Call
    /// [`WorkloadThread::acknowledge`]`(keynum)` once the insert has
    /// completed.
    Insert {
        /// The new record's key number.
        keynum: u64,
    },
    /// Scan `len` records starting at the key (fields as for [`Op::Read`]).
    Scan {
        /// Number of records to scan.
        len: usize,
    },
    /// Read the record (fields as for [`Op::Read`]), then write field
    /// `field`, or every field when it is [`ALL_FIELDS`].
    ReadModifyWrite {
        /// Field index to write, or [`ALL_FIELDS`].
        field: usize,
    },
}

impl Op {
    /// Java's measurement name: `READ`, `UPDATE`, `INSERT`, `SCAN` or
    /// `READ-MODIFY-WRITE`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Update { .. } => "UPDATE",
            Op::Insert { .. } => "INSERT",
            Op::Scan { .. } => "SCAN",
            Op::ReadModifyWrite { .. } => "READ-MODIFY-WRITE",
        }
    }
}

/// The operation chooser's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

/// The request key chooser, one variant per `requestdistribution`.
#[derive(Debug, Clone)]
enum KeyChooser {
    Uniform(Uniform),
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
    Hotspot(Hotspot),
    Sequential(Sequential),
    Exponential(Exponential),
}

impl KeyChooser {
    #[inline]
    fn next_value(&mut self, rng: &mut Rng) -> u64 {
        match self {
            KeyChooser::Uniform(g) => g.next_value(rng),
            KeyChooser::Zipfian(g) => g.next_value(rng),
            KeyChooser::Latest(g) => g.next_value(rng),
            KeyChooser::Hotspot(g) => g.next_value(rng),
            KeyChooser::Sequential(g) => g.next_value(rng),
            KeyChooser::Exponential(g) => g.next_value(rng),
        }
    }
}

/// The scan length chooser.
#[derive(Debug, Clone)]
enum ScanLength {
    Uniform(Uniform),
    Zipfian(Zipfian),
}

/// Generators shared by [`CoreWorkload`] and each [`WorkloadThread`].
#[derive(Debug, Clone)]
struct Generators {
    config: Arc<WorkloadConfig>,
    /// Load phase: `insertstart, insertstart+1, …` over all threads.
    load_keys: Arc<Counter>,
    /// Run phase inserts, from `recordcount` on.
    inserts: Arc<AcknowledgedCounter>,
    keys: KeyChooser,
    ops: Discrete<Choice>,
    scan_length: ScanLength,
    fields: Uniform,
}

/// A YCSB core workload: configuration plus prototype generators.
#[derive(Debug)]
pub struct CoreWorkload {
    gens: Generators,
}

/// Per-thread share of `total` operations, as Java's `Client` splits them:
/// `total / threads`, plus one for the first `total % threads` threads.
pub fn ops_for_thread(total: u64, thread_id: usize, thread_count: usize) -> u64 {
    if thread_count == 0 {
        return 0;
    }
    let threads = thread_count as u64;
    let tid = thread_id as u64;
    total / threads + u64::from(tid < total % threads)
}

impl CoreWorkload {
    /// Reads the workload properties and builds the generators.
    ///
    /// With `requestdistribution=latest` this sums ζ over `recordcount`
    /// items (O(recordcount), once); other distributions build in O(1)
    /// (zipfian scan lengths: O(maxscanlength)).
    pub fn new(p: &Properties) -> Result<CoreWorkload, WorkloadError> {
        let config = WorkloadConfig::from_properties(p)?;
        Ok(Self::from_config(config))
    }

    /// Builds the generators for an already validated configuration.
    pub fn from_config(config: WorkloadConfig) -> CoreWorkload {
        let c = &config;
        let inserts = Arc::new(AcknowledgedCounter::new(c.record_count));
        let first = c.insert_start;
        let last = c.insert_start + c.insert_count - 1;
        let keys = match c.request_distribution {
            RequestDistribution::Uniform => KeyChooser::Uniform(Uniform::new(first, last)),
            RequestDistribution::Zipfian => {
                // Size the keyspace for the inserts the run is expected to
                // make (×2 fudge factor, as Java), so that the popular keys
                // stay the same as records are added; keys not yet inserted
                // are re-drawn.
                let expected_new_keys =
                    (c.operation_count as f64 * c.insert_proportion * 2.0) as u64;
                KeyChooser::Zipfian(ScrambledZipfian::new(
                    first,
                    (last + 1).saturating_add(expected_new_keys),
                ))
            }
            RequestDistribution::Latest => {
                KeyChooser::Latest(SkewedLatest::new(Arc::clone(&inserts)))
            }
            RequestDistribution::Hotspot => KeyChooser::Hotspot(Hotspot::new(
                first,
                last,
                c.hotspot_data_fraction,
                c.hotspot_opn_fraction,
            )),
            RequestDistribution::Sequential => KeyChooser::Sequential(Sequential::new(first, last)),
            RequestDistribution::Exponential => KeyChooser::Exponential(Exponential::new(
                c.exponential_percentile,
                c.record_count as f64 * c.exponential_frac,
            )),
        };
        let mut ops = Discrete::new();
        for (weight, choice) in [
            (c.read_proportion, Choice::Read),
            (c.update_proportion, Choice::Update),
            (c.insert_proportion, Choice::Insert),
            (c.scan_proportion, Choice::Scan),
            (c.read_modify_write_proportion, Choice::ReadModifyWrite),
        ] {
            if weight > 0.0 {
                ops.add(weight, choice);
            }
        }
        let scan_length = match c.scan_length_distribution {
            ScanLengthDistribution::Uniform => {
                ScanLength::Uniform(Uniform::new(c.min_scan_length, c.max_scan_length))
            }
            ScanLengthDistribution::Zipfian => {
                ScanLength::Zipfian(Zipfian::new(c.min_scan_length, c.max_scan_length))
            }
        };
        let fields = Uniform::new(0, c.field_count.saturating_sub(1) as u64);
        let load_keys = Arc::new(Counter::new(c.insert_start));
        CoreWorkload {
            gens: Generators {
                config: Arc::new(config),
                load_keys,
                inserts,
                keys,
                ops,
                scan_length,
                fields,
            },
        }
    }

    /// The state for driver thread `thread_id` of `thread_count`: its own
    /// copy of the key, operation, scan-length and field choosers, sharing
    /// the load counter and the acknowledged insert counter (and the
    /// `sequential` counter) with every other thread.
    pub fn thread_state(&self, thread_id: usize, thread_count: usize) -> WorkloadThread {
        WorkloadThread {
            gens: self.gens.clone(),
            thread_id,
            thread_count,
        }
    }

    /// The workload settings.
    pub fn config(&self) -> &WorkloadConfig {
        &self.gens.config
    }

    /// Writes the key name of record `keynum` into `out` (prefix, padding and
    /// hashing as configured).
    pub fn key_name(&self, keynum: u64, out: &mut String) {
        let c = &self.gens.config;
        build_key_name(keynum, c.zero_padding, c.ordered_inserts, out);
    }

    /// Field names (`field0`, …).
    pub fn field_names(&self) -> &[String] {
        &self.gens.config.field_names
    }

    /// `fieldcount`.
    pub fn field_count(&self) -> usize {
        self.gens.config.field_count
    }

    /// `fieldlength`: bytes per field value.
    pub fn field_length(&self) -> usize {
        self.gens.config.field_length
    }

    /// `recordcount`.
    pub fn record_count(&self) -> u64 {
        self.gens.config.record_count
    }

    /// `operationcount`.
    pub fn operation_count(&self) -> u64 {
        self.gens.config.operation_count
    }

    /// Load-phase inserts over all threads ([`WorkloadConfig::load_count`]:
    /// `insertcount` if given, else `recordcount`, as Java's `Client`).
    pub fn load_count(&self) -> u64 {
        self.gens.config.load_count
    }

    /// `insertcount` (default `recordcount − insertstart`): the records this
    /// client reads from. Equals [`load_count`](Self::load_count) unless
    /// `insertstart` > 0 without an explicit `insertcount`.
    pub fn insert_count(&self) -> u64 {
        self.gens.config.insert_count
    }

    /// `insertstart`: the first record number of this client.
    pub fn insert_start(&self) -> u64 {
        self.gens.config.insert_start
    }

    /// `minscanlength`.
    pub fn min_scan_length(&self) -> usize {
        usize::try_from(self.gens.config.min_scan_length).unwrap_or(usize::MAX)
    }

    /// `maxscanlength`: the longest scan [`Op::Scan`] can ask for.
    pub fn max_scan_length(&self) -> usize {
        usize::try_from(self.gens.config.max_scan_length).unwrap_or(usize::MAX)
    }

    /// `readallfields`.
    pub fn read_all_fields(&self) -> bool {
        self.gens.config.read_all_fields
    }

    /// `writeallfields`.
    pub fn write_all_fields(&self) -> bool {
        self.gens.config.write_all_fields
    }

    /// The highest key number such that it and all below it are inserted
    /// (initially `recordcount − 1`).
    pub fn last_acknowledged(&self) -> u64 {
        self.gens.inserts.last_value()
    }
}

/// One driver thread's view of a [`CoreWorkload`]: draws its keys and
/// operations with the caller's [`Rng`]. `Send`, not shared.
#[derive(Debug)]
pub struct WorkloadThread {
    gens: Generators,
    thread_id: usize,
    thread_count: usize,
}

impl WorkloadThread {
    /// Load phase: takes the next record number to insert from the counter
    /// shared by all threads (`insertstart, insertstart + 1, …`) and writes
    /// its key name into `key`. The driver stops after
    /// [`load_ops_for_thread`](Self::load_ops_for_thread) inserts; the
    /// numbers are not random, so `rng` is unused (it keeps the load and
    /// run loops alike).
    #[inline]
    pub fn next_load(&mut self, _rng: &mut Rng, key: &mut String) -> u64 {
        let keynum = self.gens.load_keys.fetch_next();
        self.key_name(keynum, key);
        keynum
    }

    /// Run phase: draws the next operation and writes its key name into
    /// `key` (Java `CoreWorkload.doTransaction`). Allocation-free once `key`
    /// has grown to the key length.
    ///
    /// Reads, updates, scans and read-modify-writes choose an existing
    /// record with the request distribution, re-drawing any key number not
    /// yet acknowledged as inserted; inserts take the next number from the
    /// shared insert counter — acknowledge it with
    /// [`acknowledge`](Self::acknowledge) when the insert completes.
    #[inline]
    pub fn next_op(&mut self, rng: &mut Rng, key: &mut String) -> Op {
        let choice = self.gens.ops.next(rng).unwrap_or(Choice::Read);
        if choice == Choice::Insert {
            let keynum = self.gens.inserts.fetch_next();
            self.key_name(keynum, key);
            return Op::Insert { keynum };
        }
        let keynum = self.next_keynum(rng);
        self.key_name(keynum, key);
        match choice {
            Choice::Read | Choice::Insert => Op::Read,
            Choice::Update => Op::Update {
                field: self.write_field(rng),
            },
            Choice::Scan => Op::Scan {
                len: self.scan_length(rng),
            },
            Choice::ReadModifyWrite => Op::ReadModifyWrite {
                field: self.write_field(rng),
            },
        }
    }

    /// Java `CoreWorkload.nextKeynum`: a key number no higher than the last
    /// acknowledged insert.
    #[inline]
    fn next_keynum(&mut self, rng: &mut Rng) -> u64 {
        let inserts = &self.gens.inserts;
        match &mut self.gens.keys {
            KeyChooser::Exponential(e) => loop {
                // Counting back from the latest insert; the counter starts at
                // recordcount ≥ 1, so the subtraction base is valid.
                let latest = inserts.acknowledged_below().saturating_sub(1);
                if let Some(k) = latest.checked_sub(e.next_value(rng)) {
                    return k;
                }
            },
            keys => loop {
                let k = keys.next_value(rng);
                if k < inserts.acknowledged_below() {
                    return k;
                }
            },
        }
    }

    fn write_field(&mut self, rng: &mut Rng) -> usize {
        if self.gens.config.write_all_fields {
            ALL_FIELDS
        } else {
            self.choose_field(rng)
        }
    }

    fn scan_length(&mut self, rng: &mut Rng) -> usize {
        let len = match &mut self.gens.scan_length {
            ScanLength::Uniform(g) => g.next_value(rng),
            ScanLength::Zipfian(g) => g.next_value(rng),
        };
        usize::try_from(len).unwrap_or(usize::MAX)
    }

    /// A uniformly random field index in `0..fieldcount` (Java's field
    /// chooser): the field to read when `readallfields=false`.
    #[inline]
    pub fn choose_field(&mut self, rng: &mut Rng) -> usize {
        self.gens.fields.next_value(rng) as usize
    }

    /// Marks run-phase insert `keynum` (from [`Op::Insert`]) as done, making
    /// it eligible for reads. Java acknowledges in a `finally` block, i.e.
    /// whether or not the insert succeeded; an insert that is never
    /// acknowledged stops later keys from ever becoming visible.
    ///
    /// # Panics
    /// If more than 2^20 inserts are outstanding (see
    /// [`AcknowledgedCounter::acknowledge`]).
    #[inline]
    pub fn acknowledge(&self, keynum: u64) {
        self.gens.inserts.acknowledge(keynum);
    }

    /// Writes the key name of record `keynum` into `out`.
    #[inline]
    pub fn key_name(&self, keynum: u64, out: &mut String) {
        let c = &self.gens.config;
        build_key_name(keynum, c.zero_padding, c.ordered_inserts, out);
    }

    /// The workload settings.
    pub fn config(&self) -> &WorkloadConfig {
        &self.gens.config
    }

    /// This thread's index.
    pub fn thread_id(&self) -> usize {
        self.thread_id
    }

    /// Number of driver threads.
    pub fn thread_count(&self) -> usize {
        self.thread_count
    }

    /// This thread's share of the load-phase inserts.
    pub fn load_ops_for_thread(&self) -> u64 {
        ops_for_thread(
            self.gens.config.load_count,
            self.thread_id,
            self.thread_count,
        )
    }

    /// This thread's share of `operationcount`.
    pub fn run_ops_for_thread(&self) -> u64 {
        ops_for_thread(
            self.gens.config.operation_count,
            self.thread_id,
            self.thread_count,
        )
    }

    /// The highest key number such that it and all below it are inserted.
    pub fn last_acknowledged(&self) -> u64 {
        self.gens.inserts.last_value()
    }
}

/// Fills `buf` with random field data the way Java's `RandomByteIterator`
/// does: each 32 random bits give 6 bytes, `' ' + (bits >> s & m)` for
/// `(s, m)` = (0, 31), (5, 63), (10, 95), (15, 31), (20, 63), (25, 95). The
/// bytes are ASCII in `0x20..=0x7F` (space to DEL, as Java; every other
/// value is printable). No allocation.
#[inline]
pub fn fill_value(rng: &mut Rng, buf: &mut [u8]) {
    for pair in buf.chunks_mut(12) {
        let bits = rng.next_u64();
        let (first, second) = pair.split_at_mut(pair.len().min(6));
        fill_six(first, bits as u32);
        fill_six(second, (bits >> 32) as u32);
    }
}

#[inline]
fn fill_six(chunk: &mut [u8], bits: u32) {
    const SHIFT_MASK: [(u32, u32); 6] = [(0, 31), (5, 63), (10, 95), (15, 31), (20, 63), (25, 95)];
    for (byte, (shift, mask)) in chunk.iter_mut().zip(SHIFT_MASK) {
        *byte = b' ' + ((bits >> shift) & mask) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fnv::fnvhash64;
    use std::collections::HashMap;
    use std::path::PathBuf;

    fn workload_file(name: &str) -> Properties {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("workloads")
            .join(name);
        Properties::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn props(text: &str) -> Properties {
        Properties::parse(text)
    }

    /// Key number back from an `insertorder=ordered` key name.
    fn keynum_of(key: &str) -> u64 {
        key.strip_prefix("user").unwrap().parse().unwrap()
    }

    #[test]
    fn workload_files_match_the_table() {
        // (file, read, update, scan, insert, rmw, distribution)
        let table = [
            (
                "workloada",
                0.5,
                0.5,
                0.0,
                0.0,
                0.0,
                RequestDistribution::Zipfian,
            ),
            (
                "workloadb",
                0.95,
                0.05,
                0.0,
                0.0,
                0.0,
                RequestDistribution::Zipfian,
            ),
            (
                "workloadc",
                1.0,
                0.0,
                0.0,
                0.0,
                0.0,
                RequestDistribution::Zipfian,
            ),
            (
                "workloadd",
                0.95,
                0.0,
                0.0,
                0.05,
                0.0,
                RequestDistribution::Latest,
            ),
            (
                "workloade",
                0.0,
                0.0,
                0.95,
                0.05,
                0.0,
                RequestDistribution::Zipfian,
            ),
            (
                "workloadf",
                0.5,
                0.0,
                0.0,
                0.0,
                0.5,
                RequestDistribution::Zipfian,
            ),
        ];
        for (file, read, update, scan, insert, rmw, dist) in table {
            let p = workload_file(file);
            assert_eq!(p.get("workload"), Some("site.ycsb.workloads.CoreWorkload"));
            let w = CoreWorkload::new(&p).unwrap();
            let c = w.config();
            assert_eq!(c.record_count, 1000, "{file}");
            assert_eq!(c.operation_count, 1000, "{file}");
            assert!(c.read_all_fields, "{file}");
            assert!(!c.write_all_fields, "{file}");
            assert_eq!(c.field_count, 10, "{file}");
            assert_eq!(c.field_length, 100, "{file}");
            assert_eq!(c.field_names[9], "field9");
            assert_eq!(c.table, "usertable");
            assert!(!c.ordered_inserts);
            assert_eq!(c.zero_padding, 1);
            assert_eq!(
                (
                    c.read_proportion,
                    c.update_proportion,
                    c.scan_proportion,
                    c.insert_proportion,
                    c.read_modify_write_proportion
                ),
                (read, update, scan, insert, rmw),
                "{file}"
            );
            assert_eq!(c.request_distribution, dist, "{file}");
            let (max_scan, scan_dist) = if file == "workloade" {
                (100, ScanLengthDistribution::Uniform)
            } else {
                (1000, ScanLengthDistribution::Uniform)
            };
            assert_eq!(
                (c.max_scan_length, c.scan_length_distribution),
                (max_scan, scan_dist)
            );
        }
    }

    #[test]
    fn defaults_follow_java() {
        let w = CoreWorkload::new(&props("recordcount=10")).unwrap();
        let c = w.config();
        assert_eq!((c.read_proportion, c.update_proportion), (0.95, 0.05));
        assert_eq!(c.request_distribution, RequestDistribution::Uniform);
        assert_eq!((c.min_scan_length, c.max_scan_length), (1, 1000));
        assert_eq!(
            (c.hotspot_data_fraction, c.hotspot_opn_fraction),
            (0.2, 0.8)
        );
        assert_eq!(c.exponential_percentile, 95.0);
        assert_eq!(c.exponential_frac, 0.8571428571);
        assert_eq!((c.insert_start, c.insert_count, c.load_count), (0, 10, 10));
        let w = CoreWorkload::new(&props("")).unwrap();
        assert_eq!(
            w.record_count(),
            2_147_483_647,
            "recordcount 0 means Integer.MAX_VALUE"
        );
        // load_count: insertcount when given, else recordcount (Java Client).
        let w =
            CoreWorkload::new(&props("recordcount=100\ninsertstart=40\ninsertcount=30")).unwrap();
        assert_eq!(w.load_count(), 30);
        let w = CoreWorkload::new(&props("recordcount=100\ninsertstart=40")).unwrap();
        assert_eq!((w.config().insert_count, w.load_count()), (60, 100));
    }

    #[test]
    fn errors_name_the_property() {
        let cases = [
            ("fieldlengthdistribution=uniform", "not supported"),
            ("fieldlengthdistribution=weird", "fieldlengthdistribution"),
            ("requestdistribution=pareto", "requestdistribution"),
            ("scanlengthdistribution=latest", "scanlengthdistribution"),
            ("insertorder=random", "insertorder"),
            ("recordcount=abc", "recordcount"),
            ("readallfields=yes", "readallfields"),
            ("readproportion=-0.5", "readproportion"),
            (
                "readproportion=0\nupdateproportion=0",
                "all operation proportions are zero",
            ),
            (
                "recordcount=100\ninsertstart=50\ninsertcount=60",
                "insertcount",
            ),
            ("recordcount=100\ninsertstart=100", "insertstart"),
            ("minscanlength=10\nmaxscanlength=5", "minscanlength"),
            ("hotspotdatafraction=1.5", "hotspotdatafraction"),
            ("exponential.percentile=100", "exponential.percentile"),
            ("fieldcount=0", "fieldcount"),
            ("dataintegrity=yes", "dataintegrity"),
        ];
        for (text, needle) in cases {
            let err = CoreWorkload::new(&props(text)).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: `{err}` lacks `{needle}`");
        }
    }

    #[test]
    fn load_phase_covers_every_record_once() {
        let w = CoreWorkload::new(&props("recordcount=1003\ninsertorder=ordered")).unwrap();
        let mut threads: Vec<WorkloadThread> = (0..4).map(|t| w.thread_state(t, 4)).collect();
        let counts: Vec<u64> = threads.iter().map(|t| t.load_ops_for_thread()).collect();
        assert_eq!(counts, [251, 251, 251, 250]);
        let mut rng = Rng::new(1);
        let mut key = String::new();
        let mut seen = Vec::new();
        for t in &mut threads {
            for _ in 0..t.load_ops_for_thread() {
                let k = t.next_load(&mut rng, &mut key);
                assert_eq!(keynum_of(&key), k);
                seen.push(k);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..1003).collect::<Vec<_>>());
        assert_eq!(ops_for_thread(10, 0, 3), 4);
        assert_eq!(ops_for_thread(10, 2, 3), 3);
        assert_eq!(ops_for_thread(10, 0, 0), 0);
    }

    #[test]
    fn hashed_load_keys_are_java_keys() {
        let w = CoreWorkload::new(&props("recordcount=10\ninsertstart=3")).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rng = Rng::new(1);
        let mut key = String::new();
        assert_eq!(t.next_load(&mut rng, &mut key), 3);
        assert_eq!(key, format!("user{}", fnvhash64(3)));
        let mut k0 = String::new();
        w.key_name(0, &mut k0);
        assert_eq!(k0, "user6284781860667377211");
    }

    #[test]
    fn workload_a_mix_and_hot_key() {
        let w = CoreWorkload::new(&workload_file("workloada")).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rng = Rng::new(7);
        let mut key = String::with_capacity(32);
        let n = 100_000u32;
        let (mut reads, mut updates) = (0u32, 0u32);
        let mut freq: HashMap<String, u32> = HashMap::new();
        for _ in 0..n {
            match t.next_op(&mut rng, &mut key) {
                Op::Read => reads += 1,
                Op::Update { field } => {
                    assert!(field < 10);
                    updates += 1;
                }
                other => panic!("workload A drew {other:?}"),
            }
            *freq.entry(key.clone()).or_default() += 1;
        }
        assert_eq!(reads + updates, n);
        let fr = f64::from(reads) / f64::from(n);
        assert!((fr - 0.5).abs() < 0.01, "read fraction {fr}");
        // Every key is one of the 1000 loaded records.
        let mut loaded = std::collections::HashSet::new();
        for k in 0..1000 {
            let mut s = String::new();
            w.key_name(k, &mut s);
            loaded.insert(s);
        }
        assert!(freq.keys().all(|k| loaded.contains(k)));
        // The hottest key is zipfian item 0 scrambled over the 1001-item
        // keyspace (recordcount + 0 expected inserts, inclusive bound).
        let (hot, &count) = freq.iter().max_by_key(|(_, c)| **c).unwrap();
        let mut expected = String::new();
        w.key_name(fnvhash64(0) % 1001, &mut expected);
        assert_eq!(hot, &expected);
        let f = f64::from(count) / f64::from(n);
        assert!(
            (f - 1.0 / ScrambledZipfian::ZETAN).abs() < 0.006,
            "hot key freq {f}"
        );
    }

    #[test]
    fn workload_e_scans_and_inserts() {
        let mut p = workload_file("workloade");
        p.set("insertorder", "ordered");
        let w = CoreWorkload::new(&p).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rng = Rng::new(8);
        let mut key = String::new();
        let n = 20_000u32;
        let (mut scans, mut inserts) = (0u32, 0u32);
        let mut next_insert = 1000;
        let mut lens = [false; 101];
        let mut pending = Vec::new();
        for i in 0..n {
            let visible = t.last_acknowledged();
            match t.next_op(&mut rng, &mut key) {
                Op::Scan { len } => {
                    assert!((1..=100).contains(&len), "{len}");
                    lens[len] = true;
                    assert!(keynum_of(&key) <= visible);
                    scans += 1;
                }
                Op::Insert { keynum } => {
                    assert_eq!(keynum, next_insert);
                    assert_eq!(keynum_of(&key), keynum);
                    next_insert += 1;
                    inserts += 1;
                    pending.push(keynum);
                }
                other => panic!("workload E drew {other:?}"),
            }
            // Acknowledge inserts late, newest first.
            if i % 3 == 0 {
                while let Some(k) = pending.pop() {
                    t.acknowledge(k);
                }
            }
        }
        while let Some(k) = pending.pop() {
            t.acknowledge(k);
        }
        let fs = f64::from(scans) / f64::from(n);
        assert!((fs - 0.95).abs() < 0.01, "scan fraction {fs}");
        assert_eq!(scans + inserts, n);
        assert!(
            lens[1..].iter().all(|&s| s),
            "every scan length 1..=100 drawn"
        );
        assert_eq!(t.last_acknowledged(), 999 + u64::from(inserts));
    }

    #[test]
    fn zipfian_keyspace_includes_expected_inserts() {
        let w = CoreWorkload::new(&workload_file("workloade")).unwrap();
        match &w.gens.keys {
            KeyChooser::Zipfian(z) => {
                // recordcount + operationcount · insertproportion · 2 = 1100
                // (inclusive upper bound, as Java).
                assert_eq!((z.lower_bound(), z.upper_bound()), (0, 1100));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_never_exceed_acknowledged_inserts() {
        for dist in [
            "uniform",
            "zipfian",
            "latest",
            "hotspot",
            "sequential",
            "exponential",
        ] {
            let p = props(&format!(
                "recordcount=500\noperationcount=2000\nrequestdistribution={dist}\n\
                 insertorder=ordered\nreadproportion=0.6\nupdateproportion=0\n\
                 insertproportion=0.4\n"
            ));
            let w = CoreWorkload::new(&p).unwrap();
            let mut t = w.thread_state(0, 1);
            let mut rng = Rng::new(9);
            let mut key = String::new();
            let mut pending = Vec::new();
            for i in 0..5000 {
                let visible = t.last_acknowledged();
                match t.next_op(&mut rng, &mut key) {
                    Op::Read => {
                        let k = keynum_of(&key);
                        assert!(k <= visible, "{dist}: key {k} > last acked {visible}");
                    }
                    Op::Insert { keynum } => pending.push(keynum),
                    other => panic!("{other:?}"),
                }
                // Keep a few inserts in flight, acknowledged newest first.
                if i % 5 == 0 {
                    while let Some(k) = pending.pop() {
                        t.acknowledge(k);
                    }
                }
            }
        }
    }

    #[test]
    fn latest_reads_favour_the_newest_insert() {
        let mut p = workload_file("workloadd");
        p.set("insertorder", "ordered");
        let w = CoreWorkload::new(&p).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rng = Rng::new(10);
        let mut key = String::new();
        // Insert 20 records first.
        let mut inserted = 0;
        while inserted < 20 {
            if let Op::Insert { keynum } = t.next_op(&mut rng, &mut key) {
                t.acknowledge(keynum);
                inserted += 1;
            }
        }
        let newest = t.last_acknowledged();
        assert_eq!(newest, 1019);
        let mut freq: HashMap<u64, u32> = HashMap::new();
        let mut reads = 0;
        while reads < 20_000 {
            if let Op::Read = t.next_op(&mut rng, &mut key) {
                *freq.entry(keynum_of(&key)).or_default() += 1;
                reads += 1;
            }
            // Inserts drawn here stay unacknowledged (still in flight).
        }
        let (&hot, _) = freq.iter().max_by_key(|(_, c)| **c).unwrap();
        assert_eq!(hot, newest);
        assert!(freq.keys().all(|&k| k <= newest));
    }

    #[test]
    fn other_request_distributions_stay_in_range() {
        for (dist, extra) in [
            ("uniform", ""),
            (
                "hotspot",
                "hotspotdatafraction=0.1\nhotspotopnfraction=0.9\n",
            ),
            ("sequential", ""),
            ("exponential", ""),
        ] {
            let p = props(&format!(
                "recordcount=1000\ninsertstart=100\ninsertcount=400\noperationcount=100\n\
                 requestdistribution={dist}\ninsertorder=ordered\nreadproportion=1\n\
                 updateproportion=0\n{extra}"
            ));
            let w = CoreWorkload::new(&p).unwrap();
            let mut t = w.thread_state(0, 1);
            let mut rng = Rng::new(12);
            let mut key = String::new();
            let mut hot = 0;
            let n = 10_000;
            for _ in 0..n {
                assert_eq!(t.next_op(&mut rng, &mut key), Op::Read);
                let k = keynum_of(&key);
                if dist == "exponential" {
                    // Counts back from the last record (999).
                    assert!(k <= 999);
                } else {
                    assert!((100..500).contains(&k), "{dist}: {k}");
                }
                hot += u32::from(k < 140);
            }
            if dist == "hotspot" {
                let f = f64::from(hot) / f64::from(n);
                assert!((f - 0.9).abs() < 0.02, "hot fraction {f}");
            }
        }
        // Sequential: threads share the sweep.
        let p = props(
            "recordcount=10\nrequestdistribution=sequential\ninsertorder=ordered\n\
             readproportion=1\nupdateproportion=0",
        );
        let w = CoreWorkload::new(&p).unwrap();
        let (mut a, mut b) = (w.thread_state(0, 2), w.thread_state(1, 2));
        let mut rng = Rng::new(1);
        let mut key = String::new();
        let mut got = Vec::new();
        for _ in 0..5 {
            a.next_op(&mut rng, &mut key);
            got.push(keynum_of(&key));
            b.next_op(&mut rng, &mut key);
            got.push(keynum_of(&key));
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn write_fields_and_rmw() {
        let mut rng = Rng::new(3);
        let mut key = String::new();
        let w = CoreWorkload::new(&workload_file("workloadf")).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rmw = 0;
        for _ in 0..2000 {
            match t.next_op(&mut rng, &mut key) {
                Op::Read => {}
                Op::ReadModifyWrite { field } => {
                    assert!(field < 10);
                    rmw += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!((900..1100).contains(&rmw), "{rmw}");
        let p = props("recordcount=10\nwriteallfields=true\nreadproportion=0\nupdateproportion=1");
        let w = CoreWorkload::new(&p).unwrap();
        let mut t = w.thread_state(0, 1);
        assert_eq!(
            t.next_op(&mut rng, &mut key),
            Op::Update { field: ALL_FIELDS }
        );
        assert_eq!(Op::Update { field: 0 }.name(), "UPDATE");
        assert_eq!(Op::ReadModifyWrite { field: 0 }.name(), "READ-MODIFY-WRITE");
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[t.choose_field(&mut rng)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn zipfian_scan_lengths() {
        let p = props(
            "recordcount=100\nreadproportion=0\nupdateproportion=0\nscanproportion=1\n\
             minscanlength=5\nmaxscanlength=50\nscanlengthdistribution=zipfian",
        );
        let w = CoreWorkload::new(&p).unwrap();
        let mut t = w.thread_state(0, 1);
        let mut rng = Rng::new(4);
        let mut key = String::new();
        let mut fives = 0;
        for _ in 0..5000 {
            match t.next_op(&mut rng, &mut key) {
                Op::Scan { len } => {
                    assert!((5..=50).contains(&len), "{len}");
                    fives += u32::from(len == 5);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(fives > 1000, "shortest scans most frequent: {fives}");
    }

    #[test]
    fn workload_types_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CoreWorkload>();
        send_sync::<WorkloadThread>();
        let w = std::sync::Arc::new(CoreWorkload::new(&props("recordcount=100")).unwrap());
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let w = std::sync::Arc::clone(&w);
                std::thread::spawn(move || {
                    let mut t = w.thread_state(i, 2);
                    let mut rng = Rng::for_stream(1, i as u64);
                    let mut key = String::new();
                    (0..100).for_each(|_| {
                        t.next_op(&mut rng, &mut key);
                    });
                    t.run_ops_for_thread()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 0);
        }
    }

    #[test]
    fn fill_value_is_java_like_ascii() {
        let mut rng = Rng::new(5);
        let mut buf = [0u8; 1000];
        fill_value(&mut rng, &mut buf);
        assert!(buf.iter().all(|&b| (0x20..=0x7f).contains(&b)));
        // Position 0 of each 6-byte group uses 5 bits: ' '..='?'.
        assert!(buf.chunks(6).all(|c| (0x20..=0x3f).contains(&c[0])));
        let distinct = buf.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 60, "{distinct}");
        let before = buf;
        fill_value(&mut rng, &mut buf);
        assert_ne!(before, buf);
        // Odd lengths are filled completely.
        let mut odd = [0u8; 13];
        fill_value(&mut rng, &mut odd);
        assert!(odd.iter().all(|&b| b >= 0x20));
        fill_six(&mut odd[..6], u32::MAX);
        assert_eq!(&odd[..6], &[0x3f, 0x5f, 0x7f, 0x3f, 0x5f, 0x7f]);
    }
}
