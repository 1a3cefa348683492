//! The copyrpc store: a kvs-client per driver thread (one copyrpc context,
//! one endpoint per server worker), on the transport the server runs. A
//! record is one value, its fields one after the other; an update writes its
//! fields' byte range in place (UPDATE_RANGE).

use std::time::Duration;

use copyrpc::transport::{run_on_device_as, DeviceSpec, OnTransport, Transport, Wire};
use kvs_client::{AuthToken, Client, ClientOptions, KvError, Reply, SubmitError};
use mlx5::device::Context as Device;

use super::{Answer, Cleanup, Db, Fields, Init, Lost, Refused, UseDb};
use crate::measure::Status;

/// A kvs-server, and how to reach it.
#[derive(Debug, Clone)]
pub struct KvsTarget {
    /// The server's setup address.
    pub server: String,
    /// The RDMA device (`auto`: a NIC, else software device `sim0`).
    pub device: String,
    /// The software device's fabric.
    pub fabric: Option<String>,
    /// The token to present, for a server that requires one.
    pub auth_token: Option<AuthToken>,
    /// How long a request may take before it counts as an error.
    pub timeout: Duration,
    /// RC or DC, as the server's `transport`.
    pub transport: Wire,
}

impl KvsTarget {
    /// Opens the device, connects a client and runs `user` with it.
    pub(super) fn open<U: UseDb>(&self, init: &Init<'_>, user: U) -> Result<U::Output, String> {
        let spec = DeviceSpec {
            name: &self.device,
            fabric: self.fabric.as_deref(),
            software: "sim0",
        };
        let dev = spec.open().map_err(|e| e.to_string())?;
        let (nf, fl) = init.layout();
        let record = nf * fl;
        let ring = 1u64 << 20;
        let copts = ClientOptions {
            ring_size: ring,
            value_allowance: record + 64,
            scan_allowance: (init.wl.max_scan_length() * (record + 64) + 64)
                .min(ring as usize / 4 - 64),
            auth_token: self.auth_token.clone(),
            idle: init.opts.idle,
            timeout: self.timeout,
            ..ClientOptions::default()
        };
        let on = OnKvs {
            server: &self.server,
            copts,
            field_length: fl,
            user,
        };
        run_on_device_as(dev, self.transport, on).map_err(|(_, e)| e.to_string())?
    }
}

/// Connects on the transport the device calls for, then runs the user.
struct OnKvs<'a, U> {
    server: &'a str,
    copts: ClientOptions,
    field_length: usize,
    user: U,
}

impl<U: UseDb> OnTransport for OnKvs<'_, U> {
    type Output = Result<U::Output, String>;
    fn run<X: Transport>(self, dev: Device) -> Self::Output {
        let client: Client<u32, X> =
            Client::connect(self.server, &dev, self.copts).map_err(|e| e.to_string())?;
        Ok(self.user.run(KvsDb {
            client,
            field_length: self.field_length,
        }))
    }
}

/// A connected kvs client.
struct KvsDb<X: Transport> {
    client: Client<u32, X>,
    /// Bytes per field: where a field sits in the value.
    field_length: usize,
}

/// A submission's refusal, as the driver counts it.
#[inline]
fn refused(e: SubmitError<u32>) -> Refused {
    match e {
        SubmitError::Busy(_) => Refused::Busy,
        SubmitError::TooLarge(..) => Refused::Unsendable,
        SubmitError::Closed(_, why) => Refused::Lost(Lost(KvError::Failed(why).to_string())),
    }
}

impl<X: Transport> Db for KvsDb<X> {
    #[inline]
    fn read(&mut self, key: &[u8], tag: u32) -> Result<(), Refused> {
        self.client.get(key, tag).map_err(refused)
    }

    #[inline]
    fn scan(&mut self, start: &[u8], count: usize, tag: u32) -> Result<(), Refused> {
        let count = count.min(u32::MAX as usize) as u32;
        self.client.scan(start, count, tag).map_err(refused)
    }

    #[inline]
    fn update(&mut self, key: &[u8], fields: Fields<'_>, tag: u32) -> Result<(), Refused> {
        let at = (fields.first * self.field_length) as u32;
        self.client
            .update_range(key, at, fields.data, tag)
            .map_err(refused)
    }

    #[inline]
    fn insert(&mut self, key: &[u8], record: &[u8], tag: u32) -> Result<(), Refused> {
        self.client.put(key, record, tag).map_err(refused)
    }

    #[inline]
    fn delete(&mut self, key: &[u8], tag: u32) -> Result<(), Refused> {
        self.client.delete(key, tag).map_err(refused)
    }

    #[inline]
    fn in_flight(&self) -> usize {
        self.client.in_flight()
    }

    #[inline]
    fn wait(
        &mut self,
        timeout: Duration,
        mut done: impl FnMut(u32, Answer<'_>),
    ) -> Result<(), Lost> {
        self.client
            .wait(timeout, |tag, r| {
                let a = match r {
                    Ok(Reply::Value(v)) => Answer::Record(v),
                    Ok(Reply::NotFound) => Answer::Done(Status::NotFound),
                    Ok(_) => Answer::Done(Status::Ok),
                    Err(e @ KvError::Failed(_)) => Answer::Lost(Lost(e.to_string())),
                    Err(_) => Answer::Done(Status::Error),
                };
                done(tag, a)
            })
            .map(drop)
            .map_err(|e| Lost(KvError::Submit(format!("waiting for answers: {e}")).to_string()))
    }

    fn cleanup(self) -> Cleanup {
        Cleanup {
            map_version: Some(self.client.map().version()),
        }
    }
}
