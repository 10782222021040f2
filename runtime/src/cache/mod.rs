//! Kernel and program caching: the in-memory [`BuildCache`] (one pair per
//! [`crate::Context`]) and the on-disk [`PersistentCache`].

pub mod disk;
pub mod hash;
pub mod memory;
pub mod settings;

pub use disk::{
    DiskFault, DiskKey, DiskStats, ItemDetails, ItemInfo, KeyHashes, PersistentCache, RootError,
    Scan,
};
pub use memory::{BuildCache, CacheStats};
pub use settings::parse_size;
