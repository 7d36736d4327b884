//! Placeholders through keyword-named fields (written plainly or raw), raw parameters, Unicode
//! identifiers and tuple indices.
#![allow(non_snake_case)]
use lock_runtime::{LockError, distributed_lock};

struct Config {
    r#type: String,
    r#match: (u8, (u16, u32)),
    größe: u32,
}

#[distributed_lock(name = "cfg:<cfg.type>:<cfg.r#type>:<cfg.match.1.0>:<cfg.größe>")]
async fn keyword_fields(cfg: Config) -> Result<(), LockError> {
    let _ = cfg;
    Ok(())
}

#[distributed_lock(name = "raw:<type>:<r#type>")]
async fn raw_parameter(r#type: u8) -> Result<(), LockError> {
    let _ = r#type;
    Ok(())
}

#[distributed_lock(name = "café:<café>")]
async fn unicode_parameter(café: u8) -> Result<(), LockError> {
    let _ = café;
    Ok(())
}

pub(super) fn main() {}
