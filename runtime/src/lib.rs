//! kiln-runtime: see ARCHITECTURE.md. Empty until its issue lands.
