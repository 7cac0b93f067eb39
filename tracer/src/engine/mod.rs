//! The correlation and diagnosis engine. Pure: events and geometry in,
//! measures and diagnoses out. No sysfs, no BPF, no clock it did not receive.

pub mod audit;
