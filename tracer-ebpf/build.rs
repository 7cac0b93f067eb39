// Rebuild the probes when the linker changes (a new bpf-linker means a new object).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
