//! Kernel and program caching: the in-memory [`BuildCache`] (one pair per
//! [`crate::Context`]) and the on-disk [`PersistentCache`].

pub mod disk;
pub mod hash;
pub mod memory;

pub use disk::{DiskFault, DiskKey, DiskStats, ItemDetails, ItemInfo, KeyHashes, PersistentCache};
pub use memory::{BuildCache, CacheStats};
