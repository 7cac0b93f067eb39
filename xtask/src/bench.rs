//! `cargo xtask bench`: overhead against a same-run baseline and bpftrace.

use clap::Args;

use crate::util::Result;

#[derive(Debug, Args)]
pub struct BenchArgs {}

pub fn bench(_args: &BenchArgs) -> Result<()> {
    Err("the benchmark is not built yet".to_string())
}
