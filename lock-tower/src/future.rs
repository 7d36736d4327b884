//! The response futures of the services.

pub use crate::multi::MultiResponseFuture;
pub use crate::response::ResponseFuture;
