//! Without libFuzzer: every committed corpus and regression input through its target's
//! function, and the seeds as `examples/seeds.rs` writes them are the committed ones.

use std::path::Path;

fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn corpus_and_regressions_pass_their_targets() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for (name, target) in cell_fuzz::TARGETS {
        for kind in ["corpus", "regressions"] {
            for f in files(&root.join(kind).join(name)) {
                let bytes = std::fs::read(&f).expect("readable");
                target(&bytes);
                n += 1;
            }
        }
    }
    assert!(n > 0);
}

#[test]
fn committed_seeds_are_the_generated_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (target, name, bytes) in cell_fuzz::seeds::all() {
        let p = root.join("corpus").join(target).join(&name);
        let committed = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            committed == bytes,
            "{} differs from what the seed generator makes: run `cargo run --release --example seeds`",
            p.display()
        );
    }
}
