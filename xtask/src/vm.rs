//! `cargo xtask vm-test`: the kernel and disk-geometry matrix under qemu.

use clap::Args;

use crate::util::Result;

#[derive(Debug, Args)]
pub struct VmArgs {}

pub fn vm_test(_args: &VmArgs) -> Result<()> {
    Err("the VM matrix is not built yet".to_string())
}
