//! Writes the seed corpus: `cargo run --example seeds [-- <dir>]` (default: this crate's
//! `corpus/`), one file per seed in `<dir>/<target>/`. Built without the fuzzing flags.

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/corpus").into());
    let seeds = cell_fuzz::seeds::all();
    for (target, name, bytes) in &seeds {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    println!("{} seeds written to {}", seeds.len(), dir.display());
}
