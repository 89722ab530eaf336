//! The process kubelet: the one simulated part of the harness.
