//! The real-server tier: llama.cpp's llama-server (built by tests/llama/prepare.sh).

#[path = "../common/mod.rs"]
mod common;

mod llama_tier;
