//! The process kubelet (see `conformance::kubelet`).
fn main() {
    eprintln!("process-kubelet: not yet implemented");
    std::process::exit(2);
}
