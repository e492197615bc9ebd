//! Prints the backends this machine can run, fastest first, one per line (used by .ci/run).
//! `cargo run --example backends`

fn main() {
    for b in halfstep::Backend::available() {
        println!("{b}");
    }
}
