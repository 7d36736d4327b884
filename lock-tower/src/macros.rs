//! Code every middleware service of the crate repeats.

/// The accessors of a middleware service's inner service, kept in its `inner` field (as
/// tower-http's `define_inner_service_accessors!`).
macro_rules! define_inner_service_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes `self`, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
