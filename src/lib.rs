//! rigrun: run benchmark playbooks on GPU hosts over SSH and compare the hosts side by side.
//!
//! Data flows one way: YAML → [`config`] → [`plan`] → [`executor`] (with [`steps`] over a
//! [`transport`]) → [`events`] → [`store`] → [`report`]. See ARCHITECTURE.md.

pub mod bench;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod events;
pub mod executor;
pub mod exit;
pub mod facts;
pub mod http_client;
pub mod plan;
pub mod point;
pub mod progress;
pub mod report;
pub mod resume;
pub mod sim;
pub mod steps;
pub mod store;
pub mod sweep_progress;
pub mod telemetry;
pub mod transport;
pub mod words;

#[doc(hidden)]
pub mod testutil;

/// reqwest is built on rustls without a default crypto provider (ring builds twice as fast as
/// the default); install ring once before any client is built.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
