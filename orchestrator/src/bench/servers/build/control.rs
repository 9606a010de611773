//! The control's build: the frozen Go server with the installed toolchain,
//! never one downloaded.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{cached_build, require_tool, Built, Recipe};
use crate::bench::servers::secrets;
use crate::glob::Globs;

/// What makes up the Go control.
pub fn control_sources() -> Globs {
    let patterns = ["**/*.go", "go.mod", "go.sum"].map(String::from);
    Globs::new("the control's sources", &patterns).expect("fixed patterns")
}

pub fn build_control(src: &Path, cache: &Path, timeout: Duration) -> Result<Built> {
    require_tool("go", "golang-go")?;
    let src_abs = src
        .canonicalize()
        .with_context(|| format!("control source {}", src.display()))?;
    let globs = control_sources();
    let recipe = Recipe {
        kind: "control",
        sources: &globs,
        argv: vec!["go".into(), "build".into()],
        env: Vec::new(),
        toolchain: &[],
        binary: "control",
    };
    cached_build(&recipe, &src_abs, cache, timeout, |copy, out| {
        let mut c = Command::new("go");
        secrets::minimal_env(&mut c);
        // Go's own caches are the build's own (an earlier build could have
        // poisoned a shared one); the toolchain is the one installed (never
        // downloaded).
        let go_home = out.join(".go");
        c.current_dir(copy)
            .args(["build", "-trimpath", "-o"])
            .arg(out.join("control"))
            .arg(".")
            .env("GOFLAGS", "-mod=mod")
            .env("GO111MODULE", "on")
            .env("GOTOOLCHAIN", "local")
            .env("GOCACHE", go_home.join("cache"))
            .env("GOPATH", go_home.join("path"));
        c
    })
}
