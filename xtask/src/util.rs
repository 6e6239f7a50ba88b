//! Shared helpers for tasks.
