//! Shared by the integration tests.

pub mod redis_server;
