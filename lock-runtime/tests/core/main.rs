//! The lock against a real `redis-server` (one per test, on a free loopback port): fencing,
//! reentrancy, waiting, leases, the watchdog, cancellation, names, connecting, robustness,
//! clients made from the application's redis client, inspection, force-unlock by name, local
//! hand-off, the function library, group commit and fencing epochs. Each module was a test binary of its own; its tests start their
//! own servers, so they run side by side here.

#[path = "../common/mod.rs"]
mod common;

mod cancellation;
mod connect;
mod epochs;
mod exclusion;
mod force_unlock;
mod functions;
mod group_commit;
mod handoff;
mod inspect;
mod leases;
mod managed;
mod names;
mod reentrancy;
mod robustness;
mod upgrade;
mod waiting;
mod watchdog;
