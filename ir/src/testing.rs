//! proptest strategies for random well-typed IR. STUB.
